"""Chapter 7, exercise 1: min-p filtering."""
import torch
from grading.cases import Case, Step

name = "min_p_filter"


def expected(logits, min_p):
    p = torch.softmax(logits, dim=-1)
    return logits.masked_fill(p < min_p * p.max(dim=-1, keepdim=True).values, float("-inf"))


def cases(g):
    row = 2.0 * torch.randn(7, generator=g)
    batch = 2.5 * torch.randn(4, 30, generator=g)
    return [Case("one_row", [Step((row, 0.4))], [expected(row, 0.4)]),
            Case("batch", [Step((batch, 0.2))], [expected(batch, 0.2)])]
