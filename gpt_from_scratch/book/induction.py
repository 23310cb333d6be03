"""Chapter 8 — an induction head, trained to be seen (Olsson et al., 2022).

A two-layer attention-only transformer (the ladder's ``LadderModel`` with no feed-forward network)
learns to continue sequences of random tokens that repeat: in ``[s, s]`` the second copy is
predictable only by finding, for the current token, where it occurred before and copying the
token after it. That takes two heads in two layers: a previous-token head, then an induction head
that attends from position ``t`` of the second copy to position ``t - n + 1``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from ..heads import best_heads, uniform_share
from .ladder import LadderConfig, LadderModel, Rung
from .lessons import Lesson, lesson

ATTENTION_ONLY = Rung("attention only", n_layers=2, n_heads=4, residual=True, layernorm=True)


def repeated_sequences(batch: int, n: int, vocab: int, generator: torch.Generator) -> Tensor:
    """(batch, 2n) rows ``[s, s]``, each ``s`` of ``n`` tokens drawn uniformly from ``vocab``."""
    half = torch.randint(0, vocab, (batch, n), generator=generator)  # (B, n)
    return torch.cat([half, half], dim=1)  # (B, 2n)


def attention_only_model(vocab: int, n_max: int, d_model: int = 64, seed: int = 0) -> LadderModel:
    """``ATTENTION_ONLY`` for sequences of up to ``2 n_max`` tokens, initialised from ``seed``."""
    torch.manual_seed(seed)
    return LadderModel(vocab, ATTENTION_ONLY, LadderConfig(block_size=2 * n_max, d_model=d_model))


def train_on_repeats(model: LadderModel, n_min: int, n_max: int, steps: int, batch: int = 32,
                     lr: float = 3e-3, seed: int = 0) -> list[float]:
    """AdamW on fresh repeated sequences at every step, each batch with its own half length ``n``
    drawn from ``[n_min, n_max]``: with one fixed ``n``, one layer could find the earlier copy by
    position alone (``t - n + 1``), without reading a token. The loss counts only the second
    copy, the part that can be predicted. Returns each step's loss (nats; ln V untrained)."""
    vocab = model.lm_head.out_features
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    generator = torch.Generator().manual_seed(seed)
    model.train()
    losses = []
    for _ in range(steps):
        n = int(torch.randint(n_min, n_max + 1, (), generator=generator))
        idx = repeated_sequences(batch, n, vocab, generator)
        logits, _ = model(idx[:, :-1])  # (B, 2n - 1, V)
        loss = F.cross_entropy(logits[:, n:].flatten(0, 1), idx[:, n + 1:].flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


@torch.no_grad()
def attention_maps(model: LadderModel, idx: Tensor) -> list[Tensor]:
    """Every layer's attention weights (B, H, T, T) of an attention-only ``LadderModel``."""
    model.eval()
    x = model.wte(idx) + model.wpe(idx.size(-1))  # (B, T, D)
    maps = []
    for block in model.blocks:
        a, weights = block.attn(block.ln_1(x), return_weights=True)
        x = x + a
        maps.append(weights)
    return maps


def induction_scores(maps, n: int) -> Tensor:
    """(L, H): each head's mean weight from query ``t`` of the second copy (``n <= t < 2n``) to key
    ``t - n + 1``, the token that followed the current one in the first copy."""
    A = torch.stack(list(maps))  # (L, B, H, 2n, 2n)
    t = torch.arange(n, 2 * n)
    return A[..., t, t - n + 1].mean(dim=(1, 3))


PREVIOUS_TOKEN_BAR = 3.0  # a previous-token head puts at least 3 times a head's even share there


def previous_token_lesson(previous: Tensor, n: int) -> Lesson:
    """The lesson that layer 0 grows a previous-token head: its best previous-token score is at
    least ``PREVIOUS_TOKEN_BAR`` times the even share (``previous`` is (L, H), measured on
    sequences of length 2n). The margin is in multiples of the even share."""
    ratio = previous[0].max().item() / uniform_share(2 * n)
    holds = (f"The model's best head of layer 0 puts {ratio:.1f} times the even share on the "
             f"previous token, more than the {PREVIOUS_TOKEN_BAR:g} times that makes a "
             "previous-token head.")
    fails = (f"The model's best head of layer 0 puts only {ratio:.1f} times the even share on the "
             f"previous token, less than the {PREVIOUS_TOKEN_BAR:g} times that makes a "
             "previous-token head: "
             "a CPU that sums in another order trained another model from the same seed, and in "
             "this one the circuit has not formed yet in the chapter's steps.")
    return lesson("layer 0 grows a previous-token head", ratio - PREVIOUS_TOKEN_BAR,
                  "times the even share", holds, fails)


def uniform_induction_score(n: int) -> float:
    """What a head attending evenly scores: the mean of 1/(t+1) over the queries t = n .. 2n-1."""
    return (1 / torch.arange(n + 1, 2 * n + 1, dtype=torch.float64)).mean().item()


def induction_text(scores: Tensor, previous: Tensor, n: int, losses: list[float],
                   vocab: int) -> str:
    """What the trained model shows, from its numbers: the loss on the second copy, the best
    induction head and the best previous-token head of the layer below, each against the score
    of a head that attends evenly. ``scores`` and ``previous`` are (L, H), measured with half
    length ``n``."""
    (l, h), = best_heads(scores, 1)
    below = previous[:l].flatten()
    value, base = scores[l, h].item(), uniform_induction_score(n)
    text = (f"In {len(losses):,} steps the loss on the second copy fell from {losses[0]:.2f} nats "
            f"(ln {vocab} = {math.log(vocab):.2f}: a guess among {vocab} tokens) to "
            f"{losses[-1]:.3f}. Layer {l}, head {h} puts {value:.2f} of its attention on the "
            f"token after the earlier occurrence, {value / base:.0f} times the {base:.3f} of a head "
            f"that attends evenly")
    if l == 0:
        return text + ": in the first layer it cannot be an induction head (exercise 3 says why)."
    p = int(below.argmax())
    return (text + f": an induction head. Below it, layer {p // scores.shape[1]}, head "
            f"{p % scores.shape[1]} puts {below[p].item():.2f} on the previous token, "
            f"{below[p].item() / uniform_share(2 * n):.0f} times the even share: the "
            f"previous-token head it reads from.")
