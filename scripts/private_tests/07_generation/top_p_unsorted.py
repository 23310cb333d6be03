"""Chapter 7, exercise 2: top-p filtering without sorting."""

import torch

from gpt_from_scratch.generate import top_p_filter
from grading.cases import Case, Step
from grading.rules import Forbid

name = "top_p_unsorted"
rules = (Forbid("no sorting", ("sort", "argsort", "topk", "msort", "sorted", "kthvalue")),)


def cases(g):
    row = 1.5 * torch.randn(6, generator=g)
    batch = 2.0 * torch.randn(3, 25, generator=g)
    return [
        Case("one_row", [Step((row, 0.8))], [top_p_filter(row, 0.8)]),
        Case("batch", [Step((batch, 0.6))], [top_p_filter(batch, 0.6)]),
    ]
