"""Checkers for the exercises of Chapter 11 (measuring): ``check_acc_norm`` and
``check_bits_per_byte``."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import torch

from .core import _Case, _call, _compare_values, _generator, _Mismatch, _require_tensor, _run_cases

__all__ = ["check_acc_norm", "check_bits_per_byte"]

WORDS = ["ay", "lord", "noble", "gentle", "o", "thee", "banished", "sweet", "king", "heaven"]


def _choices(n: int, c: int, seed: int) -> list[list[str]]:
    rng = random.Random(seed)
    return [[" ".join(rng.sample(WORDS, rng.randint(1, 4))) for _ in range(c)] for _ in range(n)]


def _per_char(loglik, choices) -> torch.Tensor:
    return loglik.double() / torch.tensor([[len(x) for x in row] for row in choices],
                                          dtype=torch.float64)


def check_acc_norm(candidate) -> bool:
    """Check ``acc_norm_picks(loglik, choices)`` -> (N,) int64 picks: the highest ``loglik`` per
    character of each choice, the first on ties (lm-evaluation-harness's ``acc_norm``)."""
    specs = [("8 items of 4 choices", 8, 4, 1, False),
             ("5 items of 2 choices", 5, 2, 2, False),
             ("6 items of 3 choices, two of them tied on purpose", 6, 3, 3, True)]

    def make(n: int, c: int, seed: int, ties: bool) -> Callable[[], None]:
        def run() -> None:
            g = _generator(seed)
            choices = _choices(n, c, seed)
            if ties:  # choice 1 is choice 0 backwards: the same length, and the same score
                for row in choices:
                    row[1] = row[0][::-1]
            lengths = torch.tensor([[len(x) for x in row] for row in choices], dtype=torch.float64)
            loglik = -lengths * (0.5 + 2 * torch.rand(n, c, generator=g, dtype=torch.float64))
            if ties:  # an exact tie per character: the first wins
                loglik[:, 1] = loglik[:, 0]
            expected = _per_char(loglik, choices).argmax(dim=1)
            got = _call(candidate, loglik.clone(), [list(row) for row in choices])
            got = _require_tensor(got, expected, "picks", dtype=False,
                                  shape_hint="one index per item: a tensor of shape (N,)")
            _compare_values(got.long(), expected, atol=0, rtol=0, known_mistakes=[
                (loglik.argmax(dim=1), "divide each log-likelihood by its choice's length in "
                                       "characters: the plain sum is acc, not acc_norm"),
                (_per_char(loglik, choices).argmin(dim=1), "log-likelihoods are negative: the "
                                                           "best choice has the highest, argmax"),
                ((loglik * lengths).argmax(dim=1), "divide by the length, do not multiply"),
                (_per_char(loglik, choices).flip(1).argmax(dim=1).neg() + (len(choices[0]) - 1),
                 "on a tie, pick the first of the tied choices (argmax does)"),
            ], default_hint="(loglik / lengths).argmax(dim=1), lengths = len(choice) in characters",
                what="picks")
        return run

    cases = [_Case(label, make(*spec), "loglik is (N, C); choices is N lists of C strings")
             for label, *spec in specs]
    return _run_cases("check_acc_norm", cases)


def check_bits_per_byte(candidate) -> bool:
    """Check ``bits_per_byte_of(losses, token_bytes)`` -> float: the summed loss (nats) over the
    summed bytes, in bits (divided by ln 2)."""
    specs = [("4 tokens of one byte each, every loss ln 2", 4, "one", 1),
             ("50 tokens of 1 to 6 bytes", 50, "bpe", 2),
             ("200 tokens of 1 to 9 bytes", 200, "bpe", 3)]

    def make(T: int, kind: str, seed: int) -> Callable[[], None]:
        def run() -> None:
            g = _generator(seed)
            if kind == "one":
                losses, sizes = torch.full((T,), math.log(2)), torch.ones(T, dtype=torch.long)
            else:
                losses = 4 * torch.rand(T, generator=g)
                sizes = torch.randint(1, 7 if T < 100 else 10, (T,), generator=g)
            nats, n_bytes = losses.double().sum().item(), int(sizes.sum())
            expected = nats / (math.log(2) * n_bytes)
            got = _call(candidate, losses.clone(), sizes.clone())
            if hasattr(got, "item") and getattr(got, "numel", lambda: 0)() == 1:
                got = got.item()
            if not isinstance(got, (int, float)):
                raise _Mismatch(f"expected a number, got {type(got).__name__}",
                                hint="return a Python float (tensor.item())")
            wrong = {nats / n_bytes: "the loss is in nats: divide by ln 2 to get bits",
                     nats / (math.log(2) * T): "divide by the bytes the tokens spell, not by "
                                               "the number of tokens",
                     nats * math.log(2) / n_bytes: "nats to bits: divide by ln 2, do not "
                                                   "multiply"}
            if not math.isclose(got, expected, rel_tol=1e-5, abs_tol=1e-7):
                hint = next((h for w, h in wrong.items() if math.isclose(got, w, rel_tol=1e-5)
                             and not math.isclose(w, expected, rel_tol=1e-5)),
                            "sum(losses) / (ln 2 * sum(token_bytes))")
                raise _Mismatch(f"expected {expected:.6f} bits per byte", f"got      {got:.6f}",
                                hint=hint)
        return run

    cases = [_Case(label, make(*spec), "losses and token_bytes are (T,) tensors")
             for label, *spec in specs]
    return _run_cases("check_bits_per_byte", cases)
