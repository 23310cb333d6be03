"""Checkers for the exercises of Chapter 8 (GPT-2's weights): ``check_offset_scores``."""

from __future__ import annotations

from collections.abc import Callable

import torch

from .core import _Case, _call, _compare_values, _forbid, _generator, _require_tensor, _run_cases

__all__ = ["check_offset_scores"]

RULE = "pick the weights A[t, t - k] by indexing with two torch.arange vectors, without diagonal"


def _reference(maps: list[torch.Tensor], k: int) -> torch.Tensor:
    A = torch.stack(maps).double()  # (L, B, H, T, T)
    T = A.shape[-1]
    t = torch.arange(k, T)
    return A[..., t, t - k].mean(dim=(1, 3))  # (L, H)


def check_offset_scores(candidate) -> bool:
    """Check ``offset_scores(maps, k)`` -> (L, H): for a list of L attention maps (B, H, T, T), the mean
    of A[t, t - k] over the batch and the queries t = k .. T-1, written without ``diagonal``."""
    specs = [("L=2 maps (2, 3, 6, 6), k=1 (the previous-token score)", 2, 2, 3, 6, 1, 1),
             ("L=3 maps (1, 2, 9, 9), k=4", 3, 1, 2, 9, 4, 2),
             ("L=1 map (3, 1, 5, 5), k=0 (each token on itself)", 1, 3, 1, 5, 0, 3)]

    def make(L: int, B: int, H: int, T: int, k: int, seed: int) -> Callable[[], None]:
        def run() -> None:
            g = _generator(seed)
            future = torch.ones(T, T, dtype=torch.bool).triu(1)
            maps = [torch.softmax(torch.randn(B, H, T, T, generator=g).masked_fill(future, float("-inf")), -1)
                    for _ in range(L)]
            expected = _reference(maps, k)
            with _forbid(RULE, (torch, "diagonal"), (torch.Tensor, "diagonal"), (torch, "diag"),
                         (torch, "diag_embed"), (torch, "diagonal_scatter")):
                got = _call(candidate, [m.clone() for m in maps], k)
            got = _require_tensor(got, expected.float(), "scores", dtype=False,
                                  shape_hint="one score per layer and head: shape (L, H)")
            t = torch.arange(T)
            A = torch.stack(maps).double()
            _compare_values(got, expected, atol=1e-5, rtol=1e-4, known_mistakes=[
                (_reference(maps, 0) if k else _reference(maps, 1), "use key t - k for query t"),
                (A[..., t[k:] - k, t[k:]].mean(dim=(1, 3)) if k else expected,
                 "rows are queries, columns keys: A[..., t, t - k], not A[..., t - k, t]"),
                (A[..., t[k:], t[k:] - k].sum(dim=-1).mean(dim=1), "average over the queries t = k .. T-1 "
                                                                   "(.mean), do not sum them"),
            ], default_hint="t = torch.arange(k, T); torch.stack(maps)[..., t, t - k].mean(dim=(1, 3))",
                what="scores")
        return run

    cases = [_Case(label, make(L, B, H, T, k, seed), "the function is called as offset_scores(maps, k) with "
                                                     "maps a list of (B, H, T, T) tensors")
             for label, L, B, H, T, k, seed in specs]
    return _run_cases("check_offset_scores", cases)
