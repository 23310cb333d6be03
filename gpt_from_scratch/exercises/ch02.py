"""Checkers for the exercises of Chapter 2 (embeddings and position): ``check_sinusoidal_positional_encoding``."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from .core import _Case, _Mismatch, _call, _compare_values, _python_loops, _require_tensor, _run_cases

__all__ = ["check_sinusoidal_positional_encoding"]


def _sinusoid_table(T: int, D: int, pair_exponent: bool = True, swap: bool = False, halves: bool = False) -> Tensor:
    """The sinusoidal table in float64; the flags build the usual wrong versions."""
    position = torch.arange(T, dtype=torch.float64)[:, None]  # (T, 1)
    i = torch.arange(D // 2, dtype=torch.float64)  # (D/2,)
    exponent = 2 * i / D if pair_exponent else i / D
    angle = position / 10000.0 ** exponent  # (T, D/2)
    first, second = (torch.cos(angle), torch.sin(angle)) if swap else (torch.sin(angle), torch.cos(angle))
    if halves:
        return torch.cat([first, second], dim=1)  # (T, D)
    return torch.stack([first, second], dim=2).reshape(T, D)  # interleaved: (T, D/2, 2) -> (T, D)


def check_sinusoidal_positional_encoding(candidate, whole_tensor: bool = True) -> bool:
    """Check ``candidate(T, D)`` -> Tensor (T, D) in the default float dtype: the Transformer's table
    ``P[t, 2i] = sin(t / 10000^(2i/D))``, ``P[t, 2i+1] = cos(t / 10000^(2i/D))``.

    Chapter 2's exercise computes it with whole-tensor operations: unless ``whole_tensor`` is False, a
    function whose source has a Python loop fails (after the values are checked)."""
    sizes = [(6, 8), (50, 32), (1, 2), (20, 128)]

    def make(T: int, D: int) -> Callable[[], None]:
        def run() -> None:
            expected = _sinusoid_table(T, D)
            got = _require_tensor(_call(candidate, T, D), expected.to(torch.get_default_dtype()), "encoding",
                                  shape_hint="one row per position, one column per dimension: shape (T, D)",
                                  dtype_hint=f"return the table in {torch.get_default_dtype()} (e.g. .float()), "
                                             "the dtype of the embeddings it is added to")
            mistakes = [
                (_sinusoid_table(T, D, swap=True), "sin and cos are swapped: even dimensions 2i get the sine, "
                                                   "odd dimensions 2i+1 the cosine"),
                (_sinusoid_table(T, D, pair_exponent=False), "the exponent is 2i/D, where i counts the sin/cos "
                                                             "pairs (dimension 2i and 2i+1 share one frequency)"),
                (_sinusoid_table(T, D, halves=True), "sines and cosines are interleaved (sin in column 2i, cos in "
                                                     "2i+1), not in two halves"),
            ]
            _compare_values(got, expected, atol=1e-4, rtol=0.0, known_mistakes=mistakes,
                            default_hint="P[t, 2i] = sin(t / 10000^(2i/D)) and P[t, 2i+1] = cos(t / 10000^(2i/D))",
                            what="encoding")
        return run

    cases = [_Case(f"T={T}, D={D}", make(T, D), "the function is called as candidate(T, D) with two ints")
             for T, D in sizes]
    if whole_tensor:

        def no_loop() -> None:
            if _python_loops(candidate):
                raise _Mismatch("your function loops in Python",
                                hint="compute every position at once: torch.arange(T)[:, None] times the (D/2,) "
                                     "frequencies broadcasts to (T, D/2)")
        cases.append(_Case("the source of the function", no_loop))
    return _run_cases("check_sinusoidal_positional_encoding", cases)
