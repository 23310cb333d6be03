"""Chapter 7, exercise 1: min-p filtering."""

import torch
from grading.cases import Case, Step

name = "min_p_filter"


def expected(logits, min_p):
    p = torch.softmax(logits, dim=-1)
    return logits.masked_fill(p < min_p * p.max(dim=-1, keepdim=True).values, float("-inf"))


def cases(g):
    # 0.4 of the top 0.4 keeps 0.4, 0.3 and 0.2; an absolute threshold, or one on logits
    # shifted by 0.5 to 1.5, keeps fewer
    row = torch.log(torch.tensor([0.4, 0.02, 0.3, 0.08, 0.2]))[
        g.randperm(5)
    ]
    row = row + 0.5 + g.rand(())
    batch = 2.5 * g.randn(4, 30)
    return [
        Case("one_row", [Step((row, 0.4))], [expected(row, 0.4)]),
        Case("batch", [Step((batch, 0.2))], [expected(batch, 0.2)]),
    ]
