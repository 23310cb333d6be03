"""The book layer: what the chapters show (plots, prose, recipes, reference runs)."""
