"""Chapter 12 — supervised fine-tuning (SFT) with a masked loss.

The model is trained on whole rendered conversations, but the loss counts only what the assistant
writes: ``targets`` hold the next token where the *next* token is in ``chat.render``'s mask, and
-100 (ignored) elsewhere. The book's ``GPT.forward(idx, targets)`` takes targets already shifted
(``targets[:, t]`` follows ``idx[:, t]``); Hugging Face's models take ``labels`` aligned with the
inputs and shift inside. ``labels_to_targets`` converts, and the tests check ``masked_loss`` equal
to TRL's ``SFTTrainer`` on the same batch: one mean over every unmasked token of the batch (not a
mean of per-conversation means).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .utils import check_float, check_int

IGNORE = -100  # what cross_entropy(ignore_index=-100) skips, as in PyTorch and Hugging Face


def shift(ids: list[int], mask: list[int]) -> tuple[list[int], list[int]]:
    """``(inputs, targets)`` of one rendered conversation: ``inputs = ids[:-1]``; ``targets[t] =
    ids[t + 1]`` where ``mask[t + 1]`` is 1, else ``IGNORE``."""
    if len(ids) != len(mask) or len(ids) < 2:
        raise ValueError(f"ids ({len(ids)}) and mask ({len(mask)}) must have one equal length >= 2: "
                         "pass what render(messages) returned")
    if not any(mask[1:]):
        raise ValueError("the mask has no 1 after the first token, so this conversation has nothing "
                         "to learn: it needs an assistant turn (render marks it with 1s)")
    return ids[:-1], [i if m else IGNORE for i, m in zip(ids[1:], mask[1:])]


def collate(examples: list[tuple[list[int], list[int]]], pad_id: int, context_length: int
            ) -> tuple[Tensor, Tensor]:
    """Right-pad shifted examples into ``idx`` (B, T) and ``targets`` (B, T); pads get ``pad_id``
    in ``idx`` and ``IGNORE`` in ``targets``, so a pad is never learned (the end marker is)."""
    if not examples:
        raise ValueError("collate: examples is empty: pass at least one (inputs, targets) "
                         "pair (shift(*render(messages)))")
    T = max(len(x) for x, _ in examples)
    if T > context_length:
        raise ValueError(f"an example has {T} input tokens, the model reads {context_length}: drop "
                         "or shorten the longer conversations before training")
    idx = torch.full((len(examples), T), pad_id, dtype=torch.long)  # (B, T)
    targets = torch.full((len(examples), T), IGNORE, dtype=torch.long)  # (B, T)
    for b, (x, y) in enumerate(examples):
        idx[b, :len(x)] = torch.tensor(x)
        targets[b, :len(y)] = torch.tensor(y)
    return idx, targets


def labels_to_targets(labels: Tensor) -> Tensor:
    """Hugging Face's ``labels`` (B, T), aligned with the inputs, as shifted ``targets`` (B, T):
    ``targets[:, t] = labels[:, t + 1]``, the last position ignored."""
    if labels.dim() != 2:
        raise ValueError(f"labels_to_targets: labels of shape {tuple(labels.shape)} must "
                         "be (B, T): add the batch dimension, labels[None]")
    return torch.cat([labels[:, 1:], labels.new_full((labels.shape[0], 1), IGNORE)], dim=1)


def masked_loss(logits: Tensor, targets: Tensor) -> Tensor:
    """Mean cross-entropy (nats) over the positions whose target is not ``IGNORE``.

    logits (B, T, V), targets (B, T). Every unmasked token of the batch weighs the same: a long
    answer counts more than a short one, as in TRL and in ``GPT.forward``.
    """
    if logits.dim() != 3 or targets.shape != logits.shape[:2]:
        raise ValueError(f"masked_loss: logits {tuple(logits.shape)} and targets "
                         f"{tuple(targets.shape)} must be (B, T, V) and (B, T): pass the "
                         "model's logits for the idx that collate returned with these "
                         "targets")
    if not (targets != IGNORE).any():
        raise ValueError("every target is ignored (-100): the masked loss would be 0 / 0; check "
                         "that the mask marks the assistant's tokens with 1")
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=IGNORE)


def unmask(idx: Tensor, targets: Tensor, pad_id: int) -> Tensor:
    """The targets of the *unmasked* loss on the same batch: every next token but the pads
    (the prompt is learned too). For comparison with the masked loss."""
    nxt = torch.cat([idx[:, 1:], idx.new_full((idx.shape[0], 1), pad_id)], dim=1)  # (B, T)
    out = torch.where(nxt == pad_id, IGNORE, nxt)
    return torch.where(targets != IGNORE, targets, out)  # the last real target comes from targets


def lr_schedule(step: int, steps: int, lr: float, warmup: int) -> float:
    """Linear warm-up over ``warmup`` steps, then cosine decay to ``lr / 10`` at ``steps``."""
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return lr / 10 + (lr - lr / 10) * 0.5 * (1 + math.cos(math.pi * progress))


def _divergence_fix(model: nn.Module, step: int, lr: float) -> str:
    """What to do about a non-finite loss: lowering lr helps only if training made it so."""
    if step == 0:
        broken = [n for n, p in model.named_parameters() if not p.isfinite().all()]
        if broken:
            return ("the model's weights were not finite before the first step ("
                    f"{broken[0]}): it diverged earlier; fine-tune a model whose weights "
                    "are finite")
        return "the model's outputs are not finite before any update: check model and ids"
    return f"training diverged: lower lr={lr:g}"


def train_sft(model: nn.Module, examples: list[tuple[list[int], list[int]]], pad_id: int,
              steps: int, batch_size: int = 32, lr: float = 1e-3, warmup: int = 30,
              seed: int = 0, masked: bool = True, clip: float = 1.0,
              on_step: Callable[[int, nn.Module], bool | None] | None = None) -> list[float]:
    """AdamW on random batches of ``examples`` (shifted, see ``shift``); returns each step's loss.

    ``masked=False`` trains on every token but the pads (the ablation). ``on_step(step, model)``
    runs after each step (counted from 1); when it returns True, training stops there, part of
    the way through the schedule of ``steps``. The loss is checked to be finite at every step;
    the model ends in eval mode.
    """
    steps = check_int("train_sft", "steps", steps, minimum=1)
    lr = check_float("train_sft", "lr", lr, 0.0, low_open=True)
    batch_size = check_int("train_sft", "batch_size", batch_size, minimum=1)
    if not examples:
        raise ValueError("train_sft: examples is empty: pass the shifted conversations")
    g = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    T = model.config.context_length
    model.train()
    losses = []
    for step in range(steps):
        rows = torch.randint(len(examples), (batch_size,), generator=g).tolist()
        idx, targets = collate([examples[r] for r in rows], pad_id, T)  # (B, T) each
        if not masked:
            targets = unmask(idx, targets, pad_id)
        for group in optimizer.param_groups:
            group["lr"] = lr_schedule(step, steps, lr, warmup)
        logits, _ = model(idx)  # (B, T, V)
        loss = masked_loss(logits, targets)
        if not math.isfinite(loss.item()):
            raise FloatingPointError(f"the SFT loss is {loss.item()} at step {step}: "
                                     f"{_divergence_fix(model, step, lr)}")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        losses.append(loss.item())
        if on_step is not None and on_step(step + 1, model):
            break
    model.eval()
    return losses
