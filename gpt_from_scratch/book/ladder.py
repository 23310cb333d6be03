"""Chapter 6 — Karpathy's build-up ladder ("Let's build GPT"), rung by rung, from the package's parts.

Each rung of the lecture's ladder is a ``LadderModel``: token and position embeddings, blocks of the
package's ``MultiHeadAttention``, ``FeedForward`` and ``LayerNorm`` with switches for what the rung
has not added yet, and an untied output layer. ``train_rung`` trains a rung with the lecture's loop
(AdamW at a constant rate, no warm-up, no clipping) and scores it as the lecture does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..attention import MultiHeadAttention
from ..data import get_batch
from ..embeddings import LearnedPositionalEmbedding
from ..layernorm import LayerNorm
from ..model import FeedForward, GPTConfig
from ..train import estimate_loss


@dataclass(frozen=True)
class Rung:
    """One rung: which parts it has, and the validation loss the lecture reports for it.

    ``residual`` also brings the output projections of attention and feed-forward and the 4x
    wider feed-forward, as in the lecture; before it, the heads are concatenated with no projection
    and the feed-forward network is one ``Linear(D, D)`` and a ReLU.
    """

    name: str
    n_layers: int = 1
    n_heads: int = 1
    ffn: bool = False
    residual: bool = False
    layernorm: bool = False
    published: float | None = None  # Karpathy's validation loss; None where the lecture gives none


@dataclass(frozen=True)
class LadderConfig:
    """The lecture's training settings; ``train_rung`` runs its loop with them."""

    batch_size: int = 32
    block_size: int = 8
    d_model: int = 32
    learning_rate: float = 1e-3
    max_iters: int = 5000
    eval_iters: int = 200
    dropout: float = 0.0


# The lecture's ladder (Karpathy, "Let's build GPT: from scratch, in code, spelled out", 2023).
BIGRAM = LadderConfig(learning_rate=1e-2, max_iters=3000)
BIGRAM_PUBLISHED = 2.5
RUNGS = (
    Rung("one head of 32", n_heads=1, published=2.4),
    Rung("4 heads of 8", n_heads=4, published=2.28),
    Rung("+ feed-forward", n_heads=4, ffn=True, published=2.24),
    Rung("3 blocks, no residual", n_layers=3, n_heads=4, ffn=True),
    Rung("+ residual, projections, 4x FFN", n_layers=3, n_heads=4, ffn=True, residual=True,
         published=2.08),
    Rung("+ pre-LN LayerNorm", n_layers=3, n_heads=4, ffn=True, residual=True, layernorm=True,
         published=2.06),
)
FINAL = Rung("scaled up", n_layers=6, n_heads=6, ffn=True, residual=True, layernorm=True,
             published=1.48)
FINAL_CONFIG = LadderConfig(batch_size=64, block_size=256, d_model=384, learning_rate=3e-4,
                            dropout=0.2)


class RungBlock(nn.Module):
    """A block with switches: attention, then optionally feed-forward; residuals and pre-LN optional."""

    def __init__(self, D: int, rung: Rung, dropout: float = 0.0):
        super().__init__()
        self.residual = rung.residual
        self.ln_1 = LayerNorm(D) if rung.layernorm else nn.Identity()
        self.attn = MultiHeadAttention(D, rung.n_heads, dropout=dropout, bias=False)  # q, k, v: no bias
        self.attn.c_proj = nn.Linear(D, D) if rung.residual else nn.Identity()
        self.ln_2 = LayerNorm(D) if rung.layernorm else nn.Identity()
        self.mlp = None
        if rung.ffn:
            config = GPTConfig(vocab_size=1, d_model=D, n_heads=rung.n_heads, dropout=dropout,
                               d_ff=4 * D if rung.residual else D, activation="relu")
            self.mlp = FeedForward(config)
            if not rung.residual:
                self.mlp.c_proj = nn.Identity()  # the lecture's first feed-forward: Linear, ReLU

    def forward(self, x: Tensor) -> Tensor:  # (B, T, D) -> (B, T, D)
        a = self.attn(self.ln_1(x))
        x = x + a if self.residual else a
        if self.mlp is not None:
            m = self.mlp(self.ln_2(x))
            x = x + m if self.residual else m
        return x


class LadderModel(nn.Module):
    """A rung as a language model: ``forward(idx, targets) -> (logits, loss)``, like ``GPT``.

    PyTorch's default initialization and an untied ``lm_head`` with a bias, as in the lecture.
    """

    def __init__(self, vocab_size: int, rung: Rung, config: LadderConfig = LadderConfig()):
        super().__init__()
        D = config.d_model
        self.wte = nn.Embedding(vocab_size, D)
        self.wpe = LearnedPositionalEmbedding(config.block_size, D, std=1.0)  # nn.Embedding's N(0, 1)
        self.blocks = nn.Sequential(*[RungBlock(D, rung, config.dropout) for _ in range(rung.n_layers)])
        self.ln_f = LayerNorm(D) if rung.layernorm else nn.Identity()
        self.lm_head = nn.Linear(D, vocab_size)

    def forward(self, idx: Tensor, targets: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        x = self.wte(idx) + self.wpe(idx.size(-1))  # (B, T, D)
        logits = self.lm_head(self.ln_f(self.blocks(x)))  # (B, T, V)
        loss = None if targets is None else F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        return logits, loss


class BigramModel(nn.Module):
    """The lecture's first model: a (V, V) table of next-token logits, trained by gradient descent."""

    def __init__(self, vocab_size: int):
        super().__init__()
        self.table = nn.Embedding(vocab_size, vocab_size)

    def forward(self, idx: Tensor, targets: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        logits = self.table(idx)  # (B, T, V)
        loss = None if targets is None else F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        return logits, loss


def train_rung(model: nn.Module, train_ids, val_ids, config: LadderConfig, seed: int,
               device: str = "cpu", max_iters: int | None = None) -> float:
    """Train one rung with the lecture's loop and return its validation loss, scored as the lecture does.

    The loop: a random batch (from a generator seeded with ``seed``), the loss, ``backward``, an AdamW
    step with PyTorch's defaults (weight decay 0.01 on every weight) at the constant
    ``config.learning_rate``; no warm-up, no clipping. The weights are initialised before the call
    (``torch.manual_seed`` first); ``max_iters`` shortens the run (default ``config.max_iters``).
    Returns the mean loss over ``config.eval_iters`` validation batches, in eval mode.
    """
    steps = config.max_iters if max_iters is None else max_iters
    model.to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate, foreach=True)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x, y = get_batch(train_ids, config.batch_size, config.block_size, generator, device)
        _, loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    val = estimate_loss(model, {"val": val_ids}, config.batch_size, config.block_size,
                        config.eval_iters, seed=seed, device=device)["val"]
    if not math.isfinite(val):
        raise FloatingPointError(f"validation loss {val} after {steps} steps: the run diverged")
    return val


def unigram_loss(train_ids, val_ids, vocab_size: int) -> float:
    """Cross-entropy on ``val_ids`` of the character frequencies counted in ``train_ids`` (nats).

    What a model scores that predicts the same distribution whatever it reads (one pseudo-count
    per token keeps unseen ones finite).
    """
    counts = np.bincount(np.asarray(train_ids, dtype=np.int64), minlength=vocab_size) + 1.0
    log_p = np.log(counts / counts.sum())
    return float(-log_p[np.asarray(val_ids, dtype=np.int64)].mean())
