"""Chapter 14 — the GRPO loop: sample groups of answers, score them, update the policy.

``train_grpo`` answers each prompt of a batch G times (``grpo_sampling.sample_groups``),
scores the answers with a reward function, turns the rewards into group advantages
(``grpo_advantages.group_advantages``) and takes one or more clipped updates per batch
(``grpo.grpo_loss``), with AdamW and gradient clipping, as TRL's ``GRPOTrainer`` does with
its defaults (``num_iterations=1``: one update, so the ratio is 1).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from .grpo import LOSS_TYPES, grpo_loss
from .grpo_advantages import check_reward, group_advantages, mixed_groups
from .grpo_sampling import check_end_id, check_temperature, completion_logps, sample_groups
from .utils import check_float, check_int, eval_mode


@dataclass
class GRPOHistory:
    reward: list[float] = field(default_factory=list)  # each step's mean reward
    mixed: list[float] = field(default_factory=list)  # share of groups with unequal rewards
    loss: list[float] = field(default_factory=list)  # each step's last update's loss
    clipped: list[float] = field(default_factory=list)  # share of tokens clipped, by update
    kl: list[float] = field(default_factory=list)  # mean per-token KL term (beta > 0 only)


def _same_length_batch(prompts: list[list[int]], batch_size: int, g: torch.Generator
                       ) -> list[int]:
    """``batch_size`` prompt indices drawn with replacement among prompts of one length, the
    length of a first prompt drawn at random (so a batch needs no padding)."""
    first = int(torch.randint(len(prompts), (1,), generator=g))
    alike = [i for i, p in enumerate(prompts) if len(p) == len(prompts[first])]
    return [alike[j]
            for j in torch.randint(len(alike), (batch_size,), generator=g).tolist()]


def _check_prompts(prompts, vocab_size: int) -> None:
    if not isinstance(prompts, (list, tuple)) or not all(isinstance(p, (list, tuple))
                                                         for p in prompts):
        raise ValueError(f"train_grpo: prompts must be a list of token-id lists, got "
                         f"{type(prompts).__name__} {prompts!r:.60}: pass the rendered "
                         "prompts (of a tensor, prompts.tolist())")
    if not prompts or any(not p for p in prompts):
        raise ValueError("train_grpo: prompts is empty or holds an empty prompt: pass the "
                         "rendered prompts (render(messages, "
                         "add_generation_prompt=True)[0])")
    ids = [t for p in prompts for t in p]
    if any(isinstance(t, bool) or not isinstance(t, numbers.Integral) for t in ids):
        raise ValueError("train_grpo: prompts must hold token ids, ints: pass the rendered "
                         "prompts (render(messages, add_generation_prompt=True)[0])")
    if min(ids) < 0 or max(ids) >= vocab_size:
        raise ValueError(f"train_grpo: the prompts hold token ids in [{min(ids)}, "
                         f"{max(ids)}], outside the model's vocabulary [0, {vocab_size}): "
                         "render them with the model's own tokenizer")


def _check_train_options(policy, prompts, reward, end_id, max_new_tokens, temperature,
                         loss_type, scale, beta, reference, clip, epsilon) -> int:
    """``max_new_tokens`` (None: all the room); a ValueError for the first bad option."""
    if (isinstance(clip, bool) or not isinstance(clip, numbers.Real)
            or not 0 < clip < math.inf):
        raise ValueError(f"train_grpo: clip={clip!r} must be a finite number > 0: it caps "
                         "the gradient's norm (clip_grad_norm_); 1.0 is the default")
    check_float("train_grpo", "epsilon", epsilon, 0.0, 1.0,
                low_open=True)  # before sampling
    _check_prompts(prompts, policy.config.vocab_size)
    if not callable(reward):
        raise ValueError(f"train_grpo: reward={reward!r} must be a function "
                         "reward(prompt_index, completion_ids) -> float")
    check_end_id("train_grpo", end_id, policy.config.vocab_size)
    check_temperature("train_grpo", temperature)
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"train_grpo: loss_type={loss_type!r} must be one of "
                         f"{LOSS_TYPES}")
    if scale not in ("group", None):
        raise ValueError(f"train_grpo: scale={scale!r} must be 'group' or None (the mean "
                         "only)")
    if beta > 0 and (reference is None or reference is policy):
        raise ValueError(f"train_grpo: beta={beta:g} > 0 needs a frozen reference other "
                         "than the policy: pass reference=copy.deepcopy(policy), made "
                         "before training, or beta=0")
    if beta == 0 and reference is not None:
        raise ValueError("train_grpo: a reference is given but beta=0, so the KL term that "
                         "reads it is off and it would be ignored: pass beta > 0 for a KL "
                         "penalty toward it, or leave reference None")
    if beta > 0 and reference.config.vocab_size != policy.config.vocab_size:
        raise ValueError(f"train_grpo: the reference reads {reference.config.vocab_size} "
                         f"tokens, the policy {policy.config.vocab_size}: the KL term "
                         "compares the same tokens' log-probabilities; pass a copy of the "
                         "policy made before training (copy.deepcopy(policy))")
    T_max, longest = policy.config.context_length, max(len(p) for p in prompts)
    if longest >= T_max:
        raise ValueError(f"train_grpo: the longest prompt is {longest} tokens and the "
                         f"model reads {T_max}, which leaves no room for an answer: pass "
                         f"prompts of at most {T_max - 1} tokens (shorter ones leave room "
                         "for longer answers)")
    if max_new_tokens is None:
        return T_max - longest
    max_new_tokens = check_int("train_grpo", "max_new_tokens", max_new_tokens, minimum=1)
    if max_new_tokens > T_max - longest:
        raise ValueError(f"train_grpo: max_new_tokens={max_new_tokens} must be in "
                         f"[1, {T_max - longest}]: the longest prompt is {longest} tokens, "
                         f"the model reads {T_max}")
    return max_new_tokens


def _diverged(policy: nn.Module, trainable: list[Tensor], before: list[Tensor], step: int,
              lr: float, what: str) -> FloatingPointError:
    """Put back the weights from before the latest update; the error that says so."""
    with torch.no_grad():
        for p, kept in zip(trainable, before):
            p.copy_(kept)
    policy.eval()
    return FloatingPointError(f"train_grpo: training diverged at step {step}: {what} "
                              f"after the latest update; lr={lr:g} is the likely cause: "
                              "lower it (2e-4 is the default). The policy is back to its "
                              "weights from before that update, in eval mode")


def train_grpo(policy: nn.Module, prompts: list[list[int]],
               reward: Callable[[int, list[int]], float], end_id: int, steps: int,
               batch_size: int = 8, group_size: int = 8, lr: float = 2e-4,
               max_new_tokens: int | None = None, temperature: float = 1.0,
               epsilon: float = 0.2, loss_type: str = "dapo", beta: float = 0.0,
               reference: nn.Module | None = None, updates: int = 1, clip: float = 1.0,
               scale: str | None = "group", seed: int = 0) -> GRPOHistory:
    """GRPO on ``prompts`` (token-id lists); returns each step's reward, mixed-group
    share, loss, clipped share and (``beta > 0``) KL to ``reference``.

    Each step draws ``batch_size`` prompts of one length, samples ``group_size`` answers of
    each (``sample_groups``, at most ``max_new_tokens``, by default all the context leaves),
    scores each with ``reward(prompt_index, completion_ids)`` (ids up to and including
    ``end_id``), and takes ``updates`` AdamW steps on ``grpo_loss`` with the same answers:
    every update's ``old_logps`` is the first update's own ``logps.detach()``, so the first
    is on-policy (ratio exactly 1) and a later one's ratio holds what the earlier updates
    changed, where the clip can bind. The answers are sampled in eval mode, the updates run
    in training mode (dropout on; TRL, whose ``disable_dropout`` is off by default, samples
    in training mode too); the reference (``beta > 0``) is read in eval mode whatever mode
    it was left in, as TRL keeps its own, and given back in that mode. ``reference`` with
    ``beta=0`` is refused: nothing would read it. Where the model has dropout, the gradient
    is that of a dropout-perturbed log-probability, not of the sampler's, and a later
    update's ratio also holds the difference between two dropout draws (its own and the
    first update's), on which the clip can bind even when the weights have not moved.
    Chapter 12's assistants have no dropout; GPT-2 from ``hf_weights.from_pretrained``
    keeps its 0.1 (Chapter 14's Colab track, one update per batch). ``loss_type="dr_grpo"``
    divides by ``N * max_new_tokens``, the cap TRL calls ``max_completion_length``. The
    policy ends in eval mode. An update after which the loss or the logits are no longer
    finite (too large an ``lr``) raises a ``FloatingPointError``, the policy put back to
    its weights from before that update.
    """
    steps = check_int("train_grpo", "steps", steps, minimum=1)
    batch_size = check_int("train_grpo", "batch_size", batch_size, minimum=1)
    updates = check_int("train_grpo", "updates", updates, minimum=1)
    lr = check_float("train_grpo", "lr", lr, 0.0, low_open=True)
    beta = check_float("train_grpo", "beta", beta, 0.0)
    check_int("train_grpo", "group_size", group_size, minimum=2)  # one answer has no group
    max_new_tokens = _check_train_options(policy, prompts, reward, end_id, max_new_tokens,
                                          temperature, loss_type, scale, beta, reference,
                                          clip, epsilon)
    seed = check_int("train_grpo", "seed", seed)
    max_length = max_new_tokens if loss_type == "dr_grpo" else None  # dr_grpo's constant
    g = torch.Generator().manual_seed(seed)  # the batches' draws, on the CPU
    device = next(policy.parameters()).device
    sampler = g if device.type == "cpu" else torch.Generator(device.type).manual_seed(seed)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=lr, weight_decay=0.0)
    trainable = [p for p in policy.parameters() if p.requires_grad]
    if not trainable:
        raise ValueError("train_grpo: no weight of the policy requires a gradient, so no "
                         "update could change it: unfreeze them (p.requires_grad_(True)), "
                         "or the LoRA factors (apply_lora)")
    before = None  # the trainable weights before the latest update, to undo a divergence
    history = GRPOHistory()
    for step in range(steps):
        rows = _same_length_batch(prompts, batch_size, g)
        prompt_ids = torch.tensor([prompts[r] for r in rows], device=device)  # (B, P)
        try:  # (N, C) each
            completions, mask = sample_groups(policy, prompt_ids, group_size,
                                              max_new_tokens, end_id, temperature, sampler)
        except ValueError as error:  # the arguments were checked: the logits are not finite
            if before is None:
                raise
            raise _diverged(policy, trainable, before, step, lr,
                            "the logits of its answers are not finite") from error
        owners = [r for r in rows for _ in range(group_size)]  # (N,) prompt of each row
        rewards = torch.tensor([check_reward(reward(r, c[m.bool()].tolist()), n)
                                for n, (r, c, m)
                                in enumerate(zip(owners, completions, mask))],
                               device=device)  # (N,)
        advantages = group_advantages(rewards, group_size, scale)  # (N,)
        idx = prompt_ids.repeat_interleave(group_size, dim=0)  # (N, P)
        ref = None  # (N, C): the reference's log-probabilities, dropout off, as TRL's
        if beta > 0:
            with torch.no_grad(), eval_mode(reference):
                ref = completion_logps(reference, idx, completions, temperature)
        policy.train()
        clipped, kl, old = [], [], None
        for _ in range(updates):
            logps = completion_logps(policy, idx, completions, temperature)  # (N, C)
            old = logps.detach() if old is None else old  # the first update's: ratio 1
            out = grpo_loss(logps, old, advantages, mask, epsilon, loss_type, beta, ref,
                            max_completion_length=max_length)
            if not math.isfinite(out.loss.item()):
                if before is None:
                    raise FloatingPointError(
                        f"train_grpo: the GRPO loss is {out.loss.item()} before any "
                        "update: the policy's or the reference's weights are broken; check "
                        "torch.isfinite(p).all() for each parameter p")
                raise _diverged(policy, trainable, before, step, lr,
                                f"the GRPO loss is {out.loss.item()}")
            optimizer.zero_grad(set_to_none=True)
            out.loss.backward()
            nn.utils.clip_grad_norm_(policy.parameters(), clip)
            before = [p.detach().clone() for p in trainable]
            optimizer.step()
            clipped.append(out.clipped)
            kl.append(out.kl)
        policy.eval()
        history.reward.append(rewards.mean().item())
        history.mixed.append(mixed_groups(rewards, group_size))
        history.loss.append(out.loss.item())
        history.clipped.append(sum(clipped) / len(clipped))
        if beta > 0:
            history.kl.append(sum(kl) / len(kl))
    with torch.no_grad(), eval_mode(policy):  # the last update: no sampling after it
        finite = torch.isfinite(policy(prompt_ids)[0]).all()  # (B, P, V) read once
    if not finite:
        raise _diverged(policy, trainable, before, steps - 1, lr,
                        "the logits of its prompts are not finite")
    return history
