"""Chapter 8, exercise 1: the mean weight from query t to key t - k, without diagonal."""

import torch
from grading.cases import Case, Step

name = "offset_scores"
criteria = ("no diagonal or diag",)
hints = ("diagonal", "diag", "diag_embed")


def maps(L, B, H, T, g):
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    return [
        torch.softmax(
            g.randn(B, H, T, T).masked_fill(future, float("-inf")), -1
        )
        for _ in range(L)
    ]


def expected(ms, k):
    A = torch.stack(ms)
    T = A.shape[-1]
    return torch.stack(
        [
            torch.stack([A[l, :, h, t, t - k] for t in range(k, T)]).mean()
            for l in range(A.shape[0])
            for h in range(A.shape[2])
        ]
    ).view(A.shape[0], A.shape[2])


def cases(g):
    near, far = maps(4, 2, 3, 8, g), maps(2, 3, 2, 10, g)
    k = g.randint(5, 9)
    return [
        Case("previous_token", [Step((near, 1))], [expected(near, 1)], exact_dtype=False),
        Case("far_offset", [Step((far, k))], [expected(far, k)], exact_dtype=False),
    ]
