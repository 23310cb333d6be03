"""Chapter 14 — from rewards to advantages, and what sampled rewards measure.

A prompt is answered G times (a *group*); a program scores each answer (its *reward*, e.g. 1
when the answer is right and ended with ``<|end|>``). An answer's *advantage* is its reward
measured against its own group's: ``(r - mean) / (std + 1e-4)``, so a group whose rewards
are all equal carries no signal (``group_advantages``, ``mixed_groups``).
``expected_weight`` says how much each prompt weighs in the expected gradient, with and
without the division by the std; ``pass_at_k`` is the unbiased pass@k of sampled answers.
The loss that the advantages weigh is ``grpo.grpo_loss``. Shapes: N = B * G rewards, a
prompt's G side by side.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import torch
from torch import Tensor

from .utils import check_float, check_int

FLOAT32_MAX = torch.finfo(torch.float32).max  # train_grpo holds the rewards in float32


def _check_group_size(function: str, n: int, group_size) -> int:
    group_size = check_int(function, "group_size", group_size, minimum=2)
    if n % group_size:
        raise ValueError(f"{function}: {n} rewards do not split into groups of "
                         f"group_size={group_size}: pass G rewards per prompt, the G "
                         "completions of one prompt side by side")
    return group_size


def _check_rewards(function: str, rewards, group_size) -> int:
    """The group size G of ``rewards``, a finite 1-D float tensor of whole groups."""
    if (not isinstance(rewards, Tensor) or rewards.dim() != 1
            or not rewards.is_floating_point()):
        raise ValueError(f"{function}: rewards must be a 1-D float tensor (N,), got "
                         f"{rewards!r:.60}: pass torch.tensor(rewards, "
                         "dtype=torch.float32)")
    if not len(rewards):
        raise ValueError(f"{function}: rewards is empty: pass the G rewards of at least "
                         "one prompt, the G completions of one prompt side by side")
    if not torch.isfinite(rewards).all():
        raise ValueError(f"{function}: a reward is nan or inf: a reward function must "
                         "return a finite number for every completion")
    return _check_group_size(function, len(rewards), group_size)


def check_reward(value, row: int) -> float:
    """A reward function's value as a float: a real number (``numbers.Real``: an int, a
    float, a Fraction, a NumPy number or bool) that float32, in which ``train_grpo`` holds
    the rewards, holds finite; else a ValueError naming the completion."""
    if isinstance(value, (bool, np.bool_)):
        value = float(value)
    try:
        reward = float(value) if isinstance(value, numbers.Real) else math.nan
    except OverflowError:  # an int beyond float's range, 10**400
        reward = math.inf
    if not abs(reward) <= FLOAT32_MAX:  # nan too
        raise ValueError(f"the reward function returned {value!r:.40} "
                         f"({type(value).__name__}) for completion {row}: it must return a "
                         "real number that float32 holds finite "
                         f"(|r| <= {FLOAT32_MAX:.3g}; e.g. 1.0 when the answer is right); "
                         "return float(...) of it, scaled down if it is that large")
    return reward


def group_advantages(rewards: Tensor, group_size: int,
                     scale: str | None = "group") -> Tensor:
    """(N,) advantages of N = B * G rewards, groups side by side: each reward minus its
    group's mean, divided by the group's standard deviation plus 1e-4 (``torch.std``,
    unbiased, as TRL). ``scale=None`` keeps the mean only (Dr. GRPO's advantage, nanochat;
    Dr. GRPO also divides the loss by a constant: ``grpo_loss(..., loss_type="dr_grpo")``).
    A group of equal rewards gets 0s. Rewards so large that a group's sum overflows their
    dtype raise a ValueError."""
    G = _check_rewards("group_advantages", rewards, group_size)
    if scale not in ("group", None):
        raise ValueError(f"group_advantages: scale={scale!r} must be 'group' (divide by "
                         "the group's std) or None (the mean only)")
    grouped = rewards.view(-1, G)  # (B, G)
    advantages = grouped - grouped.mean(dim=1, keepdim=True)  # (B, G)
    if scale == "group":
        advantages = advantages / (grouped.std(dim=1, keepdim=True) + 1e-4)
    if not torch.isfinite(advantages).all():
        largest = rewards.abs().max().item()
        raise ValueError(f"group_advantages: rewards up to {largest:.3g} overflow "
                         f"{rewards.dtype} in their group's mean or standard deviation, so "
                         "the advantages would be nan: scale the rewards down (1.0 for a "
                         "right answer is enough), or pass them in float64")
    return advantages.flatten()  # (N,)


def mixed_groups(rewards: Tensor, group_size: int) -> float:
    """The share of groups whose rewards are not all equal: those with a gradient."""
    G = _check_rewards("mixed_groups", rewards, group_size)
    grouped = rewards.view(-1, G)  # (B, G)
    return (grouped != grouped[:, :1]).any(dim=1).float().mean().item()


def expected_weight(p: float, group_size: int, scale: str | None = "group") -> float:
    """w(p): with rewards 0 or 1 and a prompt answered right with probability p, the
    expected policy gradient of its group, ``E[sum_i A_i grad log pi(y_i)]``, is
    ``w(p) grad p`` (``grad p`` the gradient of its chance of a right answer), A the
    ``group_advantages`` of the G rewards. Exact: a sum over k, the right answers among the
    G, of the chance of k times the advantages a right and a wrong answer get there."""
    p = check_float("expected_weight", "p", p, 0.0, 1.0, low_open=True)
    G = check_int("expected_weight", "group_size", group_size, minimum=2)
    if scale not in ("group", None):
        raise ValueError(f"expected_weight: scale={scale!r} must be 'group' (divide by "
                         "the group's std) or None (the mean only)")
    weight = 0.0
    for k in range(G + 1):  # k right answers, side by side: right ones first
        rewards = torch.tensor([1.0] * k + [0.0] * (G - k), dtype=torch.float64)
        A = group_advantages(rewards, G, scale)  # (G,)
        if k:  # answer 1 right, k - 1 of the other G - 1: E[A 1{right}] grad p / p
            weight += math.comb(G - 1, k - 1) * p ** (k - 1) * (1 - p) ** (G - k) * A[0]
        if k < G:  # answer 1 wrong, k of the others: E[A 1{wrong}] (-grad p) / (1 - p)
            weight -= math.comb(G - 1, k) * p ** k * (1 - p) ** (G - 1 - k) * A[-1]
    return G * float(weight)


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimate of pass@k from n samples of which c are right (Chen et al.
    2021): the chance that k of the n, drawn without replacement, hold at least one right
    one, ``1 - C(n - c, k) / C(n, k)``, computed as a product so that large n does not
    overflow."""
    n = check_int("pass_at_k", "n", n, minimum=1)
    c = check_int("pass_at_k", "c", c, minimum=0)
    k = check_int("pass_at_k", "k", k, minimum=1)
    if c > n:
        raise ValueError(f"pass_at_k: c={c} right answers among n={n} samples: c must be "
                         "<= n")
    if k > n:
        raise ValueError(f"pass_at_k: k={k} > n={n}: pass@k needs at least k samples per "
                         f"prompt; sample more (n >= {k}) or ask for pass@{n}")
    if n - c < k:
        return 1.0  # every k-subset holds a right one
    return 1.0 - math.prod(1 - k / i for i in range(n - c + 1, n + 1))
