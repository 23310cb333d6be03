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

LOSS_TYPES = ("dapo", "grpo")


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
    if not torch.isfinite(rewards).all():
        raise ValueError(f"{function}: a reward is nan or inf: a reward function must "
                         "return a finite number for every completion")
    return _check_group_size(function, len(rewards), group_size)


def group_advantages(rewards: Tensor, group_size: int,
                     scale: str | None = "group") -> Tensor:
    """(N,) advantages of N = B * G rewards, groups side by side: each reward minus its
    group's mean, divided by the group's standard deviation plus 1e-4 (``torch.std``,
    unbiased, as TRL). ``scale=None`` keeps the mean only (Dr. GRPO, nanochat). A group of
    equal rewards gets 0s."""
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
    clipped: float  # share of completion tokens where the clip binds (only KL pulls there)
    kl: float | None  # mean per-token KL term to the reference (k3 times ratio), beta > 0


def _check_tensors(logps, old_logps, advantages, mask, ref_logps) -> None:
    given = ((logps, old_logps, advantages, mask)
             + (() if ref_logps is None else (ref_logps,)))
    if not all(isinstance(x, Tensor) for x in given):
        raise ValueError("grpo_loss: logps, old_logps, advantages and mask must be "
                         f"tensors, got {[type(x).__name__ for x in given]}: pass "
                         "torch.tensor(...) of each")
    named = dict(logps=logps, old_logps=old_logps, mask=mask)
    if ref_logps is not None:
        named["ref_logps"] = ref_logps
    shapes = {name: tuple(x.shape) for name, x in named.items()}
    if logps.dim() != 2 or len(set(shapes.values())) > 1:
        raise ValueError(f"grpo_loss: {shapes} must all be one shape (N, C): one row per "
                         "completion, one column per completion token (they would "
                         "broadcast)")
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


def grpo_loss(logps: Tensor, old_logps: Tensor, advantages: Tensor, mask: Tensor,
              epsilon: float = 0.2, loss_type: str = "dapo", beta: float = 0.0,
              ref_logps: Tensor | None = None, num_items: int | None = None) -> GRPOOutput:
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
    completions.
    """
    _check_tensors(logps, old_logps, advantages, mask, ref_logps)
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"grpo_loss: loss_type={loss_type!r} must be one of {LOSS_TYPES}: "
                         "'dapo' weighs every token alike, 'grpo' every completion alike")
    epsilon = check_float("grpo_loss", "epsilon", epsilon, 0.0, 1.0, low_open=True)
    beta = check_float("grpo_loss", "beta", beta, 0.0)
    if beta > 0 and ref_logps is None:
        raise ValueError(f"grpo_loss: beta={beta:g} > 0 needs ref_logps, the reference "
                         "model's log-probabilities of the same tokens: pass them, or "
                         "beta=0")
    mask = mask.to(logps.dtype)  # (N, C)
    A = advantages[:, None]  # (N, 1)
    ratio = torch.exp(logps - old_logps)  # (N, C): exactly 1 on-policy, with a gradient
    clipped_ratio = ratio.clamp(1 - epsilon, 1 + epsilon)  # (N, C)
    per_token = -torch.min(ratio * A, clipped_ratio * A)  # (N, C)
    kl = None
    if beta > 0:
        k3 = torch.exp(ref_logps - logps) - (ref_logps - logps) - 1  # (N, C), >= 0
        per_token = per_token + beta * k3 * ratio
        kl = ((k3 * ratio).detach() * mask).sum().item() / max(mask.sum().item(), 1.0)
    if loss_type == "dapo":
        total = mask.sum() if num_items is None else check_int("grpo_loss", "num_items",
                                                               num_items, minimum=1)
        if num_items is not None and total < mask.sum().item():
            raise ValueError(f"grpo_loss: num_items={total} is fewer than the "
                             f"{int(mask.sum().item())} completion tokens of this slice: "
                             "it counts the whole batch's tokens (this slice's and the "
                             "others'); leave it None for this slice alone")
        loss = (per_token * mask).sum() / max(float(total), 1.0)
    else:
        loss = ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
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
    length, completions (N, C); ``model(idx)`` returns (logits, loss)."""
    temperature = check_temperature("completion_logps", temperature)
    if not isinstance(prompts, Tensor) or not isinstance(completions, Tensor):
        raise ValueError(f"completion_logps: prompts and completions must be tensors of "
                         f"token ids, got {type(prompts).__name__} and "
                         f"{type(completions).__name__}: pass torch.tensor(ids) of each")
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
    logp = torch.log_softmax(logits[:, P - 1:].float() / temperature, dim=-1)  # (N, C, V)
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
    """A reward function's value as a float, else a ValueError naming the completion."""
    if isinstance(value, (bool, np.bool_)):
        value = float(value)
    if not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(f"the reward function returned {value!r} for completion {row}: it "
                         "must return a finite number (e.g. 1.0 when the answer is right)")
    return float(value)
