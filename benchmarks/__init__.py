"""Speed benchmarks: ratios against a reference run in the same process. Never part of the tests."""

import argparse


def count(text: str) -> int:
    """argparse's type of a count (runs, steps, rounds, tokens, threads): a whole number
    >= 1, else a usage error naming the option and the rule."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value
