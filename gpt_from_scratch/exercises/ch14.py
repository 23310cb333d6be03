"""Checkers for the exercises of Chapter 14 (learning from a verifier): ``check_group_advantages``,
``check_grpo_loss``, ``check_pass_at_k``."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable

import torch

from .core import _Case, _call, _compare_values, _generator, _Mismatch, _require_tensor, _run_cases

__all__ = ["check_group_advantages", "check_grpo_loss", "check_pass_at_k"]


def _advantages(rewards, G: int, unbiased: bool = True, eps: float = 1e-4, groups: bool = True,
                std: bool = True):
    grouped = rewards.view(-1, G) if groups else rewards.view(1, -1)  # (B, G)
    out = grouped - grouped.mean(1, keepdim=True)
    if std:
        out = out / (grouped.std(1, keepdim=True, unbiased=unbiased) + eps)
    return out.flatten()


def check_group_advantages(candidate) -> bool:
    """Check ``group_advantages(rewards, group_size)`` -> (N,): each reward minus the mean of its
    group (the ``group_size`` rewards of one prompt, side by side), divided by the group's
    standard deviation (unbiased, ``torch.std``'s default) plus 1e-4."""
    specs = [("2 groups of 4 right/wrong rewards, the second all right", 4, "binary", 1),
             ("3 groups of 8 rewards in [0, 1)", 8, "float", 2),
             ("4 groups of 2 rewards", 2, "float", 3)]

    def make(G: int, kind: str, seed: int) -> Callable[[], None]:
        def run() -> None:
            g = _generator(seed)
            if kind == "binary":
                rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0])
            else:
                rewards = torch.rand(4 * G if G == 2 else 3 * G, generator=g)
            expected = _advantages(rewards, G)
            got = _require_tensor(_call(candidate, rewards.clone(), G), expected, "advantages",
                                  dtype=False,  # none is stated
                                  shape_hint="one advantage per reward: (N,), flat like rewards")
            _compare_values(got, expected, atol=1e-4, rtol=1e-4, known_mistakes=[
                (_advantages(rewards, G, eps=0.0), "add 1e-4 to the std: a group of equal rewards "
                                                   "has std 0 and must get advantages 0, not NaN"),
                (_advantages(rewards, G, unbiased=False), "use the unbiased std (divide by G - 1), "
                                                          "torch.std's default, as TRL does"),
                (_advantages(rewards, G, groups=False), "normalise within each group (the G "
                                                        "rewards of one prompt), not the batch"),
                (_advantages(rewards, G, std=False), "divide by the group's std + 1e-4"),
                (_advantages(rewards, len(rewards) // G), "a group is the G rewards of one "
                                                          "prompt, side by side: rewards.view(-1, G)"),
            ], default_hint="grouped = rewards.view(-1, G); (grouped - mean) / (std + 1e-4)",
                what="advantages")
        return run

    cases = [_Case(label, make(*spec), "rewards is a (N,) float tensor, N = B * G; G an int")
             for label, *spec in specs]
    return _run_cases("check_group_advantages", cases)


def _grpo(logps, old, A, mask, eps, clip=True, use_min=True, per_sequence=False, use_mask=True):
    ratio = torch.exp(logps - old)
    A = A[:, None]
    clipped = ratio.clamp(1 - eps, 1 + eps) * A if clip else ratio * A
    per_token = -(torch.min(ratio * A, clipped) if use_min else torch.max(ratio * A, clipped))
    weight = mask if use_mask else torch.ones_like(mask)
    if per_sequence:
        return ((per_token * weight).sum(-1) / weight.sum(-1)).mean()
    return (per_token * weight).sum() / weight.sum()


def check_grpo_loss(candidate) -> bool:
    """Check ``grpo_loss(logps, old_logps, advantages, mask, epsilon)`` -> scalar: the clipped
    loss ``-min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A)`` per token, averaged over every
    completion token of the batch (``mask`` 1), and its gradient with respect to ``logps``."""
    specs = [("off-policy: ratios far from 1, the clip binds", 8, 7, 0.6, 2),
             ("on-policy (old_logps = logps): the ratio is 1", 6, 5, 0.0, 1),
             ("one completion of 1 token among longer ones, epsilon 0.1", 4, 9, 0.3, 3)]

    def make(N: int, C: int, spread: float, seed: int) -> Callable[[], None]:
        def run() -> None:
            g = _generator(seed)
            logps = -3 * torch.rand(N, C, generator=g, dtype=torch.float64)
            old = logps + spread * torch.randn(N, C, generator=g, dtype=torch.float64)
            A = torch.randn(N, generator=g, dtype=torch.float64)
            lengths = torch.randint(1, C + 1, (N,), generator=g)
            lengths[0] = 1
            mask = (torch.arange(C)[None] < lengths[:, None]).double()
            eps = 0.1 if seed == 3 else 0.2
            mine = logps.clone().requires_grad_()
            expected = _grpo(mine, old, A, mask, eps)
            expected.backward()
            theirs = logps.clone().float().requires_grad_()
            got = _call(candidate, theirs, old.float(), A.float(), mask.float(), eps)
            got_value = _require_tensor(got, expected.detach(), "loss", dtype=False,
                                        shape_hint="return one number for the batch: shape ()")
            _compare_values(got_value, expected.detach(), atol=1e-5, rtol=1e-4, known_mistakes=[
                (_grpo(logps, old, A, mask, eps, clip=False), "clip the ratio to [1 - eps, 1 + eps]"),
                (_grpo(logps, old, A, mask, eps, use_min=False), "take the min of the two terms "
                                                                 "(the pessimistic one), not the max"),
                (_grpo(logps, old, A, mask, eps, per_sequence=True), "average over every token of "
                 "the batch (mask.sum()), not each completion first (that is loss_type 'grpo')"),
                (_grpo(logps, old, A, mask, eps, use_mask=False), "count only the completion "
                                                                  "tokens: multiply by the mask"),
                (-_grpo(logps, old, A, mask, eps), "the loss is minus the clipped objective"),
            ], default_hint="ratio = exp(logps - old); -(min(ratio A, clip(ratio) A) * mask)"
                            ".sum() / mask.sum()", what="loss")
            if not got.requires_grad:
                raise _Mismatch("the loss has no gradient with respect to logps",
                                hint="compute the ratio from logps itself: no .detach(), no "
                                     ".item(), no torch.no_grad()")
            (grad,) = torch.autograd.grad(got, theirs)
            _compare_values(grad.double(), mine.grad, atol=1e-5, rtol=1e-4, known_mistakes=[],
                            default_hint="the value is right but not its gradient: keep the "
                                         "ratio's graph (torch.exp(logps - old_logps))",
                            what="gradient of the loss")
        return run

    cases = [_Case(label, make(*spec), "logps, old_logps, mask are (N, C) tensors, advantages "
                                       "(N,); epsilon a float")
             for label, *spec in specs]
    return _run_cases("check_grpo_loss", cases)


def check_pass_at_k(candidate) -> bool:
    """Check ``pass_at_k(n, c, k)`` -> float: the chance that k of n samples, c of them right,
    drawn without replacement, hold a right one: ``1 - C(n - c, k) / C(n, k)``."""
    specs = [("n=10, c=3, k=1: the share right", 10, 3, 1), ("n=10, c=3, k=5", 10, 3, 5),
             ("n=10, c=8, k=3: every 3 samples hold a right one", 10, 8, 3),
             ("n=200, c=13, k=50", 200, 13, 50), ("n=8, c=0, k=8: nothing right", 8, 0, 8)]

    def make(n: int, c: int, k: int) -> Callable[[], None]:
        def run() -> None:
            expected = 1 - math.comb(n - c, k) / math.comb(n, k)
            got = _call(candidate, n, c, k)
            if hasattr(got, "item") and getattr(got, "numel", lambda: 0)() == 1:
                got = got.item()
            if isinstance(got, bool) or not isinstance(got, numbers.Real):
                raise _Mismatch(f"expected a number, got {type(got).__name__}",
                                hint="return a Python float")
            got = float(got)  # a NumPy number too
            wrong = {1 - (1 - c / n) ** k: "the k samples are drawn without replacement: "
                                           "1 - C(n - c, k) / C(n, k), not 1 - (1 - c/n)^k",
                     c / n: "pass@k depends on k: the chance that k samples hold a right one",
                     math.comb(n - c, k) / math.comb(n, k): "that is the chance that none is "
                                                            "right: take 1 minus it"}
            if not math.isclose(got, expected, rel_tol=1e-6, abs_tol=1e-9):
                hint = next((h for w, h in wrong.items() if math.isclose(got, w, rel_tol=1e-6)
                             and not math.isclose(w, expected, rel_tol=1e-6)),
                            "1 - C(n - c, k) / C(n, k) (math.comb), 1.0 when n - c < k")
                raise _Mismatch(f"expected {expected:.6f}", f"got      {got:.6f}", hint=hint)
        return run

    cases = [_Case(label, make(*spec), "n, c and k are ints, 0 <= c <= n, 1 <= k <= n")
             for label, *spec in specs]
    return _run_cases("check_pass_at_k", cases)
