"""Chapter 14 — learning from a verifier: GRPO (group-relative policy optimization).

A prompt is answered G times (a *group*); a program scores each answer (its *reward*, e.g. 1
when the answer is right and ended with ``<|end|>``). An answer's *advantage* is its reward
measured against its own group's: ``(r - mean) / (std + 1e-4)``, so a group whose rewards
are all equal carries no signal. The loss pushes each completion token's log-probability up
or down by its answer's advantage, through the *ratio* ``pi(token) / pi_old(token)`` clipped
to ``1 +- epsilon`` (PPO's clip), optionally with a KL penalty toward a frozen reference.
The tests check the loss and its gradients equal to TRL 1.16's ``GRPOTrainer.compute_loss``;
``train_grpo`` (module ``grpo_train``) is the loop around it. Shapes: N = B * G completions
of C tokens each.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from .utils import check_float, check_int

LOSS_TYPES = ("dapo", "grpo", "dr_grpo")


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


def group_advantages(rewards: Tensor, group_size: int,
                     scale: str | None = "group") -> Tensor:
    """(N,) advantages of N = B * G rewards, groups side by side: each reward minus its
    group's mean, divided by the group's standard deviation plus 1e-4 (``torch.std``,
    unbiased, as TRL). ``scale=None`` keeps the mean only (Dr. GRPO's advantage, nanochat;
    Dr. GRPO also divides the loss by a constant: ``grpo_loss(..., loss_type="dr_grpo")``).
    A group of equal rewards gets 0s."""
    G = _check_rewards("group_advantages", rewards, group_size)
    if scale not in ("group", None):
        raise ValueError(f"group_advantages: scale={scale!r} must be 'group' (divide by "
                         "the group's std) or None (the mean only)")
    grouped = rewards.view(-1, G)  # (B, G)
    advantages = grouped - grouped.mean(dim=1, keepdim=True)  # (B, G)
    if scale == "group":
        advantages = advantages / (grouped.std(dim=1, keepdim=True) + 1e-4)
    return advantages.flatten()  # (N,)


def mixed_groups(rewards: Tensor, group_size: int) -> float:
    """The share of groups whose rewards are not all equal: those with a gradient."""
    G = _check_rewards("mixed_groups", rewards, group_size)
    grouped = rewards.view(-1, G)  # (B, G)
    return (grouped != grouped[:, :1]).any(dim=1).float().mean().item()


@dataclass
class GRPOOutput:
    loss: Tensor  # scalar, with the graph
    clipped: float  # share of completion tokens where the clip binds: there the policy term
    #                 gives no gradient (the KL term, beta > 0, still does)
    kl: float | None  # mean per-token KL term to the reference (k3 times ratio), beta > 0


def _check_tensors(logps, old_logps, advantages, mask, ref_logps) -> None:
    given = ((logps, old_logps, advantages, mask)
             + (() if ref_logps is None else (ref_logps,)))
    if not all(isinstance(x, Tensor) for x in given):
        raise ValueError("grpo_loss: logps, old_logps, advantages and mask must be "
                         f"tensors, got {[type(x).__name__ for x in given]}: pass "
                         "torch.tensor(...) of each")
    floats = dict(logps=logps, old_logps=old_logps, advantages=advantages,
                  ref_logps=ref_logps)
    for name, x in floats.items():
        if x is not None and not x.is_floating_point():
            raise ValueError(f"grpo_loss: {name} holds {x.dtype}: log-probabilities and "
                             "advantages are real numbers (an integer logps would give a "
                             "loss with no gradient): pass float tensors, e.g. "
                             "completion_logps(...) and group_advantages(rewards, G)")
    named = dict(logps=logps, old_logps=old_logps, mask=mask)
    if ref_logps is not None:
        named["ref_logps"] = ref_logps
    shapes = {name: tuple(x.shape) for name, x in named.items()}
    if logps.dim() != 2 or len(set(shapes.values())) > 1:
        raise ValueError(f"grpo_loss: {shapes} must all be one shape (N, C): one row per "
                         "completion, one column per completion token (they would "
                         "broadcast)")
    if not logps.numel():
        raise ValueError(f"grpo_loss: logps of shape {tuple(logps.shape)} holds no "
                         "token, so the loss would be nan or 0 with nothing to learn: pass "
                         "at least one completion of at least one token")
    if advantages.shape != logps.shape[:1]:
        raise ValueError(f"grpo_loss: advantages of shape {tuple(advantages.shape)} must "
                         f"be (N,) = ({logps.shape[0]},), one per completion: pass "
                         "group_advantages(rewards, G)")
    if not torch.isfinite(advantages).all():
        raise ValueError("grpo_loss: an advantage is nan or inf, so the loss would be nan: "
                         "pass group_advantages(rewards, G) of finite rewards")
    for name, x in (("old_logps", old_logps), ("ref_logps", ref_logps)):
        if x is not None and x.requires_grad:
            raise ValueError(f"grpo_loss: {name} carries a gradient (requires_grad=True): "
                             "the loss would send gradients through it (old_logps = logps "
                             "makes the ratio 1 whatever the weights, and the gradient 0); "
                             "pass logps.detach() on-policy, or log-probabilities computed "
                             "under torch.no_grad()")
    if ((mask != 0) & (mask != 1)).any():
        raise ValueError(f"grpo_loss: mask holds values other than 0 and 1 "
                         f"({sorted(set(mask.flatten().tolist()))[:5]}...): it marks the "
                         "completion's tokens; pass the mask sample_groups returns")


def _normaliser(loss_type: str, mask: Tensor, num_items, max_completion_length) -> float:
    """What the sum over the batch's tokens is divided by: the tokens' count for "dapo",
    N * max_completion_length for "dr_grpo" (unused for "grpo"); a ValueError for an option
    that the loss type does not use, or that undercounts."""
    for name, value, user in (("num_items", num_items, "dapo"),
                              ("max_completion_length", max_completion_length, "dr_grpo")):
        if value is not None and loss_type != user:
            raise ValueError(f"grpo_loss: {name}={value!r} is used by loss_type={user!r} "
                             f"only, not {loss_type!r}, which would ignore it: leave it "
                             f"None, or pass loss_type={user!r}")
    if loss_type == "dapo":
        if num_items is None:
            return max(float(mask.sum()), 1.0)
        total = check_int("grpo_loss", "num_items", num_items, minimum=1)
        tokens = int(mask.sum().item())
        if total < tokens:
            raise ValueError(f"grpo_loss: num_items={total} is fewer than the {tokens} "
                             "completion tokens of this slice: it counts the whole batch's "
                             "tokens (this slice's and the others'); leave it None for "
                             "this slice alone")
        return float(total)
    if loss_type == "dr_grpo":
        N, C = mask.shape
        if max_completion_length is None:
            raise ValueError("grpo_loss: loss_type='dr_grpo' divides by the constant N * "
                             "max_completion_length: pass max_completion_length, the most "
                             "tokens a completion may have (TRL's setting of that name; "
                             "train_grpo passes max_new_tokens)")
        longest = check_int("grpo_loss", "max_completion_length", max_completion_length,
                            minimum=1)
        if longest < C:
            raise ValueError(f"grpo_loss: max_completion_length={longest} is less than "
                             f"the completions' width C={C}: it caps every completion's "
                             f"length; pass the cap they were sampled with (>= {C})")
        return float(N * longest)
    return 1.0


def grpo_loss(logps: Tensor, old_logps: Tensor, advantages: Tensor, mask: Tensor,
              epsilon: float = 0.2, loss_type: str = "dapo", beta: float = 0.0,
              ref_logps: Tensor | None = None, num_items: int | None = None,
              max_completion_length: int | None = None) -> GRPOOutput:
    """GRPO's clipped loss on N completions, as TRL 1.16's ``GRPOTrainer`` computes it.

    logps (N, C): each completion token's log-probability under the policy, with its graph;
    old_logps (N, C): the same under the policy that sampled them (``logps.detach()``
    on-policy, where the ratio is exactly 1); advantages (N,); mask (N, C): 1 on the
    completion's tokens. Per token,
    ``-min(ratio * A, clip(ratio, 1 - epsilon, 1 + epsilon) * A)``, plus, when ``beta > 0``,
    ``beta * ratio * k3`` with ``k3 = exp(ref - logp) - (ref - logp) - 1`` (TRL's estimator,
    weighted by the ratio as its ``use_bias_correction_kl`` does by default).
    ``loss_type="dapo"`` (TRL's default) averages over every token of the batch,
    ``num_items`` of them (default: ``mask.sum()``; pass the whole batch's count when this
    is a slice of it); ``"grpo"`` averages each completion over its own tokens, then the
    completions; ``"dr_grpo"`` divides the sum over every token by the constant
    ``N * max_completion_length``, TRL's configured cap on a completion's length (not the
    width C, which the longest sampled answer decides). A masked position's
    log-probabilities (a token after the end, possibly -inf) are set to 0 first, so they
    give neither the loss nor its gradient a nan.
    """
    _check_tensors(logps, old_logps, advantages, mask, ref_logps)
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"grpo_loss: loss_type={loss_type!r} must be one of {LOSS_TYPES}: "
                         "'dapo' weighs every token alike, 'grpo' every completion alike, "
                         "'dr_grpo' every token alike over a constant")
    epsilon = check_float("grpo_loss", "epsilon", epsilon, 0.0, 1.0, low_open=True)
    beta = check_float("grpo_loss", "beta", beta, 0.0)
    if beta > 0 and ref_logps is None:
        raise ValueError(f"grpo_loss: beta={beta:g} > 0 needs ref_logps, the reference "
                         "model's log-probabilities of the same tokens: pass them, or "
                         "beta=0")
    normaliser = _normaliser(loss_type, mask, num_items, max_completion_length)
    outside = mask == 0  # (N, C): after a completion's end
    logps, old_logps = logps.masked_fill(outside, 0.0), old_logps.masked_fill(outside, 0.0)
    mask = mask.to(logps.dtype)  # (N, C)
    A = advantages[:, None]  # (N, 1)
    ratio = torch.exp(logps - old_logps)  # (N, C): exactly 1 on-policy, with a gradient
    clipped_ratio = ratio.clamp(1 - epsilon, 1 + epsilon)  # (N, C)
    per_token = -torch.min(ratio * A, clipped_ratio * A)  # (N, C)
    kl = None
    if beta > 0:
        ref_logps = ref_logps.masked_fill(outside, 0.0)  # (N, C)
        k3 = torch.exp(ref_logps - logps) - (ref_logps - logps) - 1  # (N, C), >= 0
        per_token = per_token + beta * k3 * ratio
        kl = ((k3 * ratio).detach() * mask).sum().item() / max(mask.sum().item(), 1.0)
    if loss_type == "grpo":
        loss = ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    else:
        loss = (per_token * mask).sum() / normaliser
    binds = ((ratio < 1 - epsilon) & (A < 0)) | ((ratio > 1 + epsilon) & (A > 0))  # (N, C)
    clipped = (binds * mask).sum().item() / max(mask.sum().item(), 1.0)
    return GRPOOutput(loss, clipped, kl)


def check_temperature(function: str, temperature) -> float:
    """``temperature`` as a float (NumPy numbers accepted), else a ValueError."""
    if (isinstance(temperature, bool) or not isinstance(temperature, numbers.Real)
            or not 0 < temperature < math.inf):
        raise ValueError(f"{function}: temperature={temperature!r} must be a finite number "
                         "> 0: the logits are divided by it, to sample and to score the "
                         "answers; 1.0, the default, is the model's own distribution")
    return float(temperature)


def completion_logps(model: nn.Module, prompts: Tensor, completions: Tensor,
                     temperature: float = 1.0) -> Tensor:
    """(N, C) log-probability of each completion token after its prompt, with the graph,
    from the logits divided by the sampling ``temperature`` (as TRL). prompts (N, P) of one
    length, completions (N, C); ``model(idx)`` returns (logits, loss). As Chapter 7's
    ``next_token`` samples, each row's largest logit is subtracted first and the temperature
    held within float32's range, so these are the sampler's log-probabilities even at 1e-300
    (0 for a row's most likely token, -inf for the others) rather than an overflow's nan."""
    temperature = check_temperature("completion_logps", temperature)
    if not isinstance(prompts, Tensor) or not isinstance(completions, Tensor):
        raise ValueError(f"completion_logps: prompts and completions must be tensors of "
                         f"token ids, got {type(prompts).__name__} and "
                         f"{type(completions).__name__}: pass torch.tensor(ids) of each")
    V = model.config.vocab_size
    for name, ids in (("prompts", prompts), ("completions", completions)):
        if ids.dtype == torch.bool or ids.is_floating_point() or ids.is_complex():
            raise ValueError(f"completion_logps: {name} hold {ids.dtype}, not token ids: "
                             "pass whole numbers, torch.long (ids.long() if they are)")
        low, high = (int(ids.min()), int(ids.max())) if ids.numel() else (0, 0)
        if low < 0 or high >= V:
            raise ValueError(f"completion_logps: {name} hold token ids in [{low}, {high}], "
                             f"outside the model's vocabulary [0, {V}): pass ids of the "
                             "model's own tokenizer")
    if prompts.dim() != 2 or completions.dim() != 2 or len(prompts) != len(completions):
        raise ValueError(f"completion_logps: prompts {tuple(prompts.shape)} and "
                         f"completions {tuple(completions.shape)} must be (N, P) and "
                         "(N, C): repeat each prompt once per completion "
                         "(prompts.repeat_interleave(G, 0))")
    P = prompts.shape[1]
    if P < 1:
        raise ValueError("completion_logps: the prompts have no token: the first "
                         "completion token needs at least one prompt token before it (the "
                         "turn's opening marker)")
    idx = torch.cat([prompts, completions], dim=1)[:, :-1]  # (N, P + C - 1): not the last
    logits, _ = model(idx)  # (N, P + C - 1, V)
    logits = logits[:, P - 1:].float()  # (N, C, V)
    finfo = torch.finfo(logits.dtype)  # as next_token: 1e-300 would be 0 in float32
    temperature = min(max(temperature, finfo.tiny), finfo.max)
    shifted = logits - logits.detach().amax(dim=-1, keepdim=True)  # (N, C, V), max at 0
    logp = torch.log_softmax(shifted / temperature, dim=-1)  # (N, C, V)
    return logp.gather(-1, completions[..., None])[..., 0]  # (N, C)


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
        return 1.0  # every k-subset holds a right answer
    return 1.0 - math.prod(1 - k / i for i in range(n - c + 1, n + 1))


def check_reward(value, row: int) -> float:
    """A reward function's value as a float: a real number (``numbers.Real``: an int, a
    float, a Fraction, a NumPy number or bool) that a float holds finite, else a ValueError
    naming the completion."""
    if isinstance(value, (bool, np.bool_)):
        value = float(value)
    try:
        reward = float(value) if isinstance(value, numbers.Real) else math.nan
    except OverflowError:  # an int beyond float's range, 10**400
        reward = math.inf
    if not math.isfinite(reward):
        raise ValueError(f"the reward function returned {value!r:.40} "
                         f"({type(value).__name__}) for completion {row}: it must return a "
                         "real number a float holds finite (e.g. 1.0 when the answer is "
                         "right); return float(...) of it")
    return reward
