"""Checkers for the exercises of Chapter 7 (generation): ``check_min_p_filter``, ``check_top_p_filter``
(here written without sorting) and ``check_top_k_filter``."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from .core import _Case, _Mismatch, _call, _forbid, _generator, _max_difference, _require_tensor, _run_cases

__all__ = ["check_top_k_filter", "check_top_p_filter", "check_min_p_filter"]

KEEPDIM = ("for logits of shape (B, V), take the row maximum with keepdim=True: its shape (B, 1) "
           "broadcasts over each row, (B,) does not")
NO_SORT = "decide each token from the probability mass of the tokens more probable than it, without sorting"


def _check_filtered(got, logits: Tensor, keep: Tensor, hints: Callable[[Tensor], str]) -> None:
    """``got`` must equal ``logits`` where ``keep`` is True and be -inf elsewhere."""
    expected = logits.masked_fill(~keep, float("-inf"))
    got = _require_tensor(got, expected, "filtered logits", shape_hint="return logits of the same shape as the input")
    kept = got > float("-inf")
    if not torch.equal(kept, keep):
        sums = got.double().sum(-1)
        if bool(((got >= 0) & (got <= 1)).all()) and torch.allclose(sums, torch.ones_like(sums), atol=1e-4):
            hint = "return the filtered logits, not probabilities: the sampler takes the softmax afterwards"
        elif not torch.isinf(got).any():
            hint = "set the removed entries to float('-inf'), so that softmax gives them probability 0"
        else:
            hint = hints(kept)
        raise _Mismatch(f"expected kept positions {_positions(keep)}", f"got      kept positions {_positions(kept)}",
                        hint=hint)
    if not torch.equal(got[keep], logits[keep]):
        raise _Mismatch(f"the kept entries changed: largest difference {_max_difference(got[keep], logits[keep]):.3g}",
                        hint="return the logits themselves (not probabilities), with only the removed entries at -inf")


def _positions(keep: Tensor) -> str:
    if keep.dim() == 1:
        return str(keep.nonzero().flatten().tolist())
    return "; ".join(f"row {r}: {row.nonzero().flatten().tolist()}" for r, row in enumerate(keep))


def _count_hint(kept: Tensor, keep: Tensor, fewer: str, more: str, other: str) -> str:
    n_got, n_expected = kept.sum(-1), keep.sum(-1)
    if torch.equal(n_got, n_expected - 1):
        return fewer
    if torch.equal(n_got, n_expected + 1):
        return more
    return other


def check_top_k_filter(candidate) -> bool:
    """Check ``top_k_filter(logits, k)``: keep the ``k`` largest logits of each row (last dimension),
    set every other entry to ``-inf``; ``logits`` is (V,) or (B, V). The cases have no ties."""
    specs = [("logits of shape (10,), k=3", (10,), 3, 1), ("logits of shape (3, 20), k=5", (3, 20), 5, 2),
             ("logits of shape (2, 7), k=1", (2, 7), 1, 3), ("logits of shape (2, 6), k=6 (keep all)", (2, 6), 6, 4)]

    def make(shape: tuple[int, ...], k: int, seed: int) -> Callable[[], None]:
        def run() -> None:
            logits = 3.0 * torch.randn(shape, generator=_generator(seed))
            keep = torch.zeros(shape, dtype=torch.bool).scatter(-1, logits.topk(k, dim=-1).indices, True)
            got = _call(candidate, logits.clone(), k)

            def hints(kept: Tensor) -> str:
                smallest = torch.zeros(shape, dtype=torch.bool).scatter(
                    -1, logits.topk(k, dim=-1, largest=False).indices, True)
                if torch.equal(kept, smallest):
                    return "you kept the k smallest logits: keep the k largest (torch.topk returns the largest)"
                return _count_hint(kept, keep, "the k-th largest logit must stay: remove only logits strictly below "
                                               "it (logits < v[..., [-1]])",
                                   "you kept k + 1 tokens: the threshold is the k-th largest value, "
                                   "v[..., [-1]] with v = torch.topk(logits, k).values",
                                   "compare each row with its own k-th largest value: v[..., [-1]] keeps the "
                                   "dimension so that it broadcasts over the row")
            _check_filtered(got, logits, keep, hints)
        return run

    cases = [_Case(label, make(shape, k, seed), "the function is called as top_k_filter(logits, k)")
             for label, shape, k, seed in specs]
    return _run_cases("check_top_k_filter", cases)


def _nucleus(logits: Tensor, p: float) -> Tensor:
    """Boolean mask of the smallest set of most probable tokens whose probability reaches ``p``."""
    probs = torch.softmax(logits.double(), dim=-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    mass_before = sorted_probs.cumsum(-1) - sorted_probs  # probability of the tokens ranked above
    keep_sorted = mass_before < p  # the token that crosses p is kept; the top token always is
    return torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)


def check_top_p_filter(candidate, allow_sort: bool = True) -> bool:
    """Check ``top_p_filter(logits, p)`` (nucleus filtering): keep the smallest set of most probable
    tokens whose total probability reaches ``p`` — the token that crosses ``p`` stays, and so does the
    most probable token — and set the rest to ``-inf``. ``logits`` is (V,) or (B, V).

    With ``allow_sort=False`` (Chapter 7's exercise), calling ``sort``, ``argsort`` or ``topk`` fails."""
    probs = torch.tensor([0.05, 0.5, 0.15, 0.3])
    small = torch.log(probs) + 2.0  # logits, not log-probabilities: the filter must take the softmax
    specs = [
        ("probabilities [0.05, 0.5, 0.15, 0.3], p=0.7 (0.5 + 0.3 crosses 0.7)", small, 0.7),
        ("probabilities [0.05, 0.5, 0.15, 0.3], p=0.9", small, 0.9),
        ("probabilities [0.05, 0.5, 0.15, 0.3], p=0.2 (the top token alone exceeds p)", small, 0.2),
        ("logits of shape (3, 12), p=0.8", 2.0 * torch.randn(3, 12, generator=_generator(5)), 0.8),
    ]

    def make(logits: Tensor, p: float) -> Callable[[], None]:
        def run() -> None:
            keep = _nucleus(logits, p)
            sorting = [] if allow_sort else [(owner, name) for owner in (torch, Tensor)
                                             for name in ("sort", "argsort", "topk", "msort")
                                             if hasattr(owner, name)]
            with _forbid(NO_SORT, *sorting):
                got = _call(candidate, logits.clone(), p)

            def hints(kept: Tensor) -> str:
                raw = logits.double()  # the same rule on the logits, as if they were probabilities
                no_softmax = torch.equal(
                    kept, ((raw[..., None, :] > raw[..., :, None]) * raw[..., None, :]).sum(-1) < p)
                other = ("sort the probabilities (softmax of the logits) in descending order, take the "
                         "cumulative sum, then map the decision back to the original positions"
                         if allow_sort else
                         "for each token, add the probabilities (softmax of the logits) of the tokens "
                         "more probable than it; remove the token when that mass reaches p")
                count = _count_hint(kept, keep,
                                    "keep the token that crosses p: remove a token only when the tokens "
                                    "ranked above it already reach p (shift the removal mask right by one)",
                                    "you kept one token too many: stop at the first token whose cumulative "
                                    "probability reaches p", other)
                if not no_softmax:
                    return count
                softmax = ("take the softmax of the logits first: p is a share of the probability mass, "
                           "and logits are not probabilities")
                return softmax if count == other else f"{softmax}; or else {count}"
            _check_filtered(got, logits, keep, hints)
        return run

    cases = [_Case(label, make(logits, p), "the function is called as top_p_filter(logits, p)")
             for label, logits, p in specs]
    return _run_cases("check_top_p_filter", cases)


def check_min_p_filter(candidate) -> bool:
    """Check ``min_p_filter(logits, min_p)``: keep the tokens whose probability is at least ``min_p``
    times the top token's probability, set the others to ``-inf``; ``logits`` is (V,) or (B, V)."""
    probs = torch.tensor([0.05, 0.5, 0.15, 0.3])
    small = torch.log(probs) + 2.0  # logits, not log-probabilities: the filter must take the softmax
    specs = [("probabilities [0.05, 0.5, 0.15, 0.3], min_p=0.25 (threshold 0.125)", small, 0.25),
             ("probabilities [0.05, 0.5, 0.15, 0.3], min_p=0.9 (only the top token)", small, 0.9),
             ("logits of shape (3, 12), min_p=0.1", 2.0 * torch.randn(3, 12, generator=_generator(6)), 0.1),
             ("logits of shape (2, 50), min_p=0.05", 3.0 * torch.randn(2, 50, generator=_generator(7)), 0.05)]

    def make(logits: Tensor, min_p: float) -> Callable[[], None]:
        def run() -> None:
            p = torch.softmax(logits.double(), dim=-1)
            threshold = min_p * p.max(dim=-1, keepdim=True).values
            keep = p >= threshold
            got = _call(candidate, logits.clone(), min_p)

            def hints(kept: Tensor) -> str:
                absolute = torch.equal(kept, p >= min_p)
                on_logits = torch.equal(kept, logits >= min_p * logits.max(dim=-1, keepdim=True).values)
                relative = "the threshold is relative: min_p times the largest probability of the row"
                probabilities = "compare probabilities (softmax of the logits), not the logits themselves"
                if absolute or on_logits:
                    return "; ".join(h for h, hit in ((relative, absolute), (probabilities, on_logits)) if hit)
                if logits.dim() > 1 and logits.shape[-1] == logits.shape[0] and torch.equal(
                        kept, p >= min_p * p.max(dim=-1).values):
                    return KEEPDIM
                return "keep = probs >= min_p * probs.max(dim=-1, keepdim=True).values, row by row"
            _check_filtered(got, logits, keep, hints)
        return run

    cases = [_Case(label, make(logits, min_p), KEEPDIM if logits.dim() > 1 else
                   "the function is called as min_p_filter(logits, min_p)")
             for label, logits, min_p in specs]
    return _run_cases("check_min_p_filter", cases)
