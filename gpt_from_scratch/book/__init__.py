"""What the chapters need to *show* the GPT: prose written from results, figures, the book's
recipes and cached models, timing. It imports from the package root, never the other way
(see ``gpt_from_scratch``'s docstring for the table of modules)."""
