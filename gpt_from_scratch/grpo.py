"""Chapter 14 — GRPO's clipped loss (group-relative policy optimization).

Each completion token's log-probability is pushed up or down by its answer's advantage
(``grpo_advantages.group_advantages``), through the *ratio* ``pi(token) / pi_old(token)``
clipped to ``1 +- epsilon`` (PPO's clip), optionally with a KL penalty toward a frozen
reference. The tests check that the loss and its gradients agree with TRL 1.16's
``GRPOTrainer.compute_loss`` to 1e-6, given the same inputs; ``grpo_sampling`` draws the
answers and scores their log-probabilities, ``grpo_train.train_grpo`` is the loop around it.
Shapes: N = B * G completions of C tokens each.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .utils import check_float, check_int

LOSS_TYPES = ("dapo", "grpo", "dr_grpo")


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
    if advantages.requires_grad:
        raise ValueError("grpo_loss: advantages carry a gradient (requires_grad=True): "
                         "they are the rewards' weights, constants of the loss, and the "
                         "loss would send gradients into whatever made them: pass "
                         "advantages.detach(), or group_advantages of plain rewards")
    if ((mask != 0) & (mask != 1)).any():
        raise ValueError(f"grpo_loss: mask holds values other than 0 and 1 "
                         f"({sorted(set(mask.flatten().tolist()))[:5]}...): it marks the "
                         "completion's tokens; pass the mask sample_groups returns")
    if not mask.any():
        raise ValueError(f"grpo_loss: mask of shape {tuple(mask.shape)} is all 0, so no "
                         "token is a completion's and the loss would be 0 with nothing to "
                         "learn: pass the mask sample_groups returns, 1 on each "
                         "completion's tokens up to and including its end")


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
            return float(mask.sum())  # >= 1: _check_tensors refuses an all-0 mask
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
    if beta == 0 and ref_logps is not None:
        raise ValueError("grpo_loss: ref_logps is given but beta=0, which would ignore it "
                         "(the KL term is beta times it): pass beta > 0 for a KL penalty, "
                         "or leave ref_logps None")
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
        kl = ((k3 * ratio).detach() * mask).sum().item() / mask.sum().item()
    if loss_type == "grpo":
        loss = ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    else:
        loss = (per_token * mask).sum() / normaliser
    binds = ((ratio < 1 - epsilon) & (A < 0)) | ((ratio > 1 + epsilon) & (A > 0))  # (N, C)
    clipped = (binds * mask).sum().item() / mask.sum().item()
    return GRPOOutput(loss, clipped, kl)
