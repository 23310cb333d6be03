"""Chapter 12 — direct preference optimization (DPO, Rafailov et al. 2023), from scratch.

A preference pair is one prompt with two answers, a *chosen* one and a *rejected* one. DPO trains a
policy (a copy of the SFT model) against a frozen reference (the SFT model itself) with

    loss = -log sigmoid(beta * [(log pi(y_w|x) - log ref(y_w|x)) - (log pi(y_l|x) - log ref(y_l|x))])

where ``log pi(y|x)`` is the **sum** of the answer tokens' log-probabilities (the answer and its
``<|end|>``, the tokens SFT's mask marks). ``beta * (log pi - log ref)`` is an answer's implicit
*reward*; the *margin* is chosen's reward minus rejected's, the *accuracy* the share of pairs
whose margin is positive. The tests check loss, margins and accuracy equal to TRL's
``DPOTrainer.compute_loss`` on the same batch. ``sequence_logps(..., average=True)`` gives the
mean per token instead of the sum, a variant some tutorials use: it changes the loss and the
rewards (the chapter shows by how much). ``train_dpo`` is the loop, beside ``sft.train_sft``.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .sft import IGNORE, collate, lr_schedule
from .utils import check_float, check_int


def sequence_logps(model: nn.Module, idx: Tensor, targets: Tensor, average: bool = False) -> Tensor:
    """(B,) log-probability of each row's unmasked targets under ``model``: their sum, or with
    ``average`` their mean per token. idx and targets (B, T), targets shifted (``sft.shift``)."""
    if targets.shape != idx.shape:
        raise ValueError(f"sequence_logps: targets of shape {tuple(targets.shape)} must "
                         f"have idx's shape {tuple(idx.shape)}: pass the pair that collate "
                         "returned")
    logits, _ = model(idx)  # (B, T, V)
    logp = torch.log_softmax(logits.float(), dim=-1)  # (B, T, V)
    keep = targets != IGNORE  # (B, T)
    token = logp.gather(-1, targets.clamp(min=0)[..., None])[..., 0] * keep  # (B, T)
    total = token.sum(-1)  # (B,)
    if not average:
        return total
    return total / keep.sum(-1).clamp(min=1)


@dataclass
class DPOOutput:
    loss: Tensor  # scalar: the mean over the pairs
    chosen_rewards: Tensor  # (N,) beta * (log pi - log ref) of the chosen answers
    rejected_rewards: Tensor  # (N,) the same for the rejected ones

    @property
    def margins(self) -> Tensor:
        """(N,) chosen reward minus rejected reward."""
        return self.chosen_rewards - self.rejected_rewards

    @property
    def accuracy(self) -> float:
        """Share of pairs whose chosen answer has the higher reward."""
        return (self.chosen_rewards > self.rejected_rewards).float().mean().item()


def check_beta(function: str, beta) -> None:
    """A ValueError unless ``beta`` is a finite number > 0 (NaN turns the weights NaN)."""
    number = isinstance(beta, numbers.Real) and not isinstance(beta, bool)
    if not number or not 0 < beta < math.inf:
        raise ValueError(f"{function}: beta={beta!r} must be a finite number > 0: it "
                         "scales the rewards (0.1 is usual; larger keeps the policy "
                         "closer to the reference)")


def dpo_loss(policy_chosen: Tensor, policy_rejected: Tensor, ref_chosen: Tensor,
             ref_rejected: Tensor, beta: float = 0.1) -> DPOOutput:
    """The sigmoid DPO loss from the four (N,) log-probabilities of N pairs."""
    check_beta("dpo_loss", beta)
    logps = dict(policy_chosen=policy_chosen, policy_rejected=policy_rejected,
                 ref_chosen=ref_chosen, ref_rejected=ref_rejected)
    shapes = {name: tuple(x.shape) for name, x in logps.items()}
    if len(set(shapes.values())) > 1 or policy_chosen.dim() != 1 or not len(policy_chosen):
        raise ValueError("dpo_loss: the four log-probabilities must have one shape (N,), "
                         f"N >= 1, got {shapes}: pass one value per pair to each (they "
                         "would broadcast)")
    chosen = beta * (policy_chosen - ref_chosen)  # (N,)
    rejected = beta * (policy_rejected - ref_rejected)  # (N,)
    loss = -F.logsigmoid(chosen - rejected).mean()
    return DPOOutput(loss, chosen.detach(), rejected.detach())


def dpo_batch_loss(policy: nn.Module, reference: nn.Module, idx: Tensor, targets: Tensor,
                   beta: float = 0.1, average: bool = False) -> DPOOutput:
    """DPO on a batch that stacks the N chosen rows over the N rejected ones: idx, targets (2N, T)."""
    if idx.shape[0] % 2 or idx.shape[0] == 0:
        raise ValueError(f"the batch has {idx.shape[0]} rows: stack N chosen rows, then their N "
                         "rejected rows (2N in all, N >= 1)")
    policy_logps = sequence_logps(policy, idx, targets, average)  # (2N,)
    with torch.no_grad():
        ref_logps = sequence_logps(reference, idx, targets, average)  # (2N,)
    return dpo_loss(*policy_logps.chunk(2), *ref_logps.chunk(2), beta=beta)


def train_dpo(policy: nn.Module, reference: nn.Module, pairs: list, pad_id: int, steps: int,
              batch_size: int = 16, lr: float = 2e-5, beta: float = 0.1, seed: int = 0,
              warmup: int = 10) -> list[dict]:
    """DPO with AdamW on random batches of ``pairs``, each ``(chosen, rejected)`` shifted
    conversations (``sft.shift``); returns each step's loss, mean margin and accuracy.
    ``reference`` stays frozen; the policy ends in eval mode."""
    steps = check_int("train_dpo", "steps", steps, minimum=1)
    batch_size = check_int("train_dpo", "batch_size", batch_size, minimum=1)
    lr = check_float("train_dpo", "lr", lr, 0.0, low_open=True)
    check_beta("train_dpo", beta)
    if not pairs:
        raise ValueError("train_dpo: pairs is empty: pass (chosen, rejected) pairs of shifted "
                         "conversations, e.g. book.assistant.preference_pairs(items, tok)")
    if policy is reference:
        raise ValueError("train_dpo: the policy is its own reference, so every log-ratio "
                         "is 0 and the loss stays ln 2: pass "
                         "reference=copy.deepcopy(policy), made before training")
    g = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=lr, weight_decay=0.0)
    reference.eval()
    policy.train()
    history = []
    for step in range(steps):
        rows = torch.randint(len(pairs), (batch_size,), generator=g).tolist()
        batch = [pairs[r][0] for r in rows] + [pairs[r][1] for r in rows]  # chosen, then rejected
        idx, targets = collate(batch, pad_id, policy.config.context_length)  # (2N, T) each
        for group in optimizer.param_groups:
            group["lr"] = lr_schedule(step, steps, lr, warmup)
        out = dpo_batch_loss(policy, reference, idx, targets, beta)
        optimizer.zero_grad(set_to_none=True)
        out.loss.backward()
        optimizer.step()
        history.append(dict(loss=out.loss.item(), margin=out.margins.mean().item(),
                            accuracy=out.accuracy))
    policy.eval()
    return history
