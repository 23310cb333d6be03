"""Chapter 8, exercise 1: the mean weight from query t to key t - k, without diagonal."""
import torch
from otter.test_files import test_case

from gpt_from_scratch.exercises.core import _forbid

name = "offset_scores"
points = 1
NO_DIAGONAL = ((torch, "diagonal"), (torch.Tensor, "diagonal"), (torch, "diag"))


def maps(L, B, H, T, seed):
    g = torch.Generator().manual_seed(seed)
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    return [torch.softmax(torch.randn(B, H, T, T, generator=g).masked_fill(future, float("-inf")), -1)
            for _ in range(L)]


def expected(ms, k):
    A = torch.stack(ms)
    T = A.shape[-1]
    return torch.stack([torch.stack([A[l, :, h, t, t - k] for t in range(k, T)]).mean()
                        for l in range(A.shape[0]) for h in range(A.shape[2])]).view(A.shape[0], A.shape[2])


@test_case(hidden=True)
def previous_token(offset_scores):
    ms = maps(4, 2, 3, 8, 81)
    with _forbid("no diagonal", *NO_DIAGONAL):
        got = offset_scores(ms, 1)
    torch.testing.assert_close(got.float(), expected(ms, 1))


@test_case(hidden=True)
def far_offset(offset_scores):
    ms = maps(2, 3, 2, 10, 82)
    with _forbid("no diagonal", *NO_DIAGONAL):
        got = offset_scores(ms, 7)
    torch.testing.assert_close(got.float(), expected(ms, 7))
