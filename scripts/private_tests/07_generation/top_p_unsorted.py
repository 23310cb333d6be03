"""Chapter 7, exercise 2: top-p filtering without sorting."""

import torch

from gpt_from_scratch.generate import top_p_filter
from grading.cases import Case, Step

name = "top_p_unsorted"
criteria = ("no sorting: no sort, argsort, topk, unique or kthvalue",)
hints = ("sort", "argsort", "msort", "sorted", "topk", "unique", "kthvalue")


def cases(g):
    row = 1.5 * g.randn(6)
    batch = 2.0 * g.randn(3, 25)
    return [
        Case("one_row", [Step((row, 0.8))], [top_p_filter(row, 0.8)]),
        Case("batch", [Step((batch, 0.6))], [top_p_filter(batch, 0.6)]),
    ]
