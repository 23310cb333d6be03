"""Chapter 5 — the full GPT: configuration, feed-forward network, pre-LN block and the model.

``GPT`` is GPT-2 exactly: learned token (``wte``) and position (``wpe``) embeddings, a stack of
pre-LN blocks (``x + attn(ln_1(x))``, then ``x + mlp(ln_2(x))``), a final ``ln_f`` and a language
model head tied to ``wte``. Its logits equal Hugging Face's ``GPT2LMHeadModel`` for the same
weights; Chapter 8's ``hf_weights`` moves weights across (``from_hf``, ``to_hf_state_dict``,
``from_pretrained``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import KVCache, MultiHeadAttention
from .embeddings import LearnedPositionalEmbedding
from .layernorm import LayerNorm
from .utils import check_float, check_int

ACTIVATIONS = {
    "gelu_tanh": lambda: nn.GELU(approximate="tanh"),  # GPT-2's (Hugging Face calls it "gelu_new")
    "gelu": nn.GELU,  # exact: x * Φ(x)
    "relu": nn.ReLU,  # the original Transformer's
}


@dataclass
class GPTConfig:
    """Every size and switch of a GPT. The defaults are GPT-2 small (``GPTConfig() == from_preset("gpt2")``).

    ``d_ff=None`` means ``4 * d_model``. ``dropout`` is the one rate GPT-2 uses at its three places
    (embeddings, attention weights, each residual branch); it acts only in training mode. The GPT-2
    presets keep 0.1, the value of GPT-2's published configuration; set ``dropout=0.0`` to
    fine-tune without it. ``bias`` switches the biases of every Linear and LayerNorm.
    """

    vocab_size: int = 50_257
    context_length: int = 1_024
    d_model: int = 768
    n_layers: int = 12
    n_heads: int = 12
    d_ff: int | None = None
    dropout: float = 0.1
    bias: bool = True
    tie_weights: bool = True
    layer_norm_eps: float = 1e-5
    activation: str = "gelu_tanh"

    def __post_init__(self) -> None:
        for name in ("vocab_size", "context_length", "d_model", "n_layers", "n_heads", "d_ff"):
            if name == "d_ff" and self.d_ff is None:
                self.d_ff = 4 * self.d_model
            setattr(self, name, check_int("GPTConfig", name, getattr(self, name), minimum=1))
        for name in ("bias", "tie_weights"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise ValueError(f"GPTConfig.{name}={getattr(self, name)!r} must be True or False")
            setattr(self, name, bool(getattr(self, name)))
        self.dropout = check_float("GPTConfig", "dropout", self.dropout, 0.0, 1.0)
        self.layer_norm_eps = check_float("GPTConfig", "layer_norm_eps", self.layer_norm_eps, 0.0, low_open=True)
        if self.d_model % self.n_heads:
            divisors = [h for h in range(1, self.d_model + 1) if self.d_model % h == 0]
            raise ValueError(
                f"n_heads={self.n_heads} does not divide d_model={self.d_model}: each head gets d_model / n_heads "
                f"features, so choose n_heads among {divisors[:12]}{' ...' if len(divisors) > 12 else ''}"
            )
        if not isinstance(self.activation, str) or self.activation not in ACTIVATIONS:
            raise ValueError(f"activation={self.activation!r} is unknown: choose one of {sorted(ACTIVATIONS)}")

    @property
    def d_head(self) -> int:
        """Width of one head, ``d_k = d_model / n_heads``."""
        return self.d_model // self.n_heads

    @classmethod
    def from_preset(cls, name: str, **overrides) -> GPTConfig:
        """A named configuration (see ``PRESETS``), with any field replaced by ``overrides``."""
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}: choose one of {', '.join(PRESETS)}")
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(overrides) - fields)
        if unknown:
            raise ValueError(f"unknown GPTConfig field(s) {unknown}: the fields are {sorted(fields)}")
        return cls(**{**PRESETS[name], **overrides})


PRESETS: dict[str, dict] = {
    # The GPT-2 family (Radford et al., 2019): 50,257 tokens, 1,024 positions, d_k = 64 in every size.
    "gpt2": dict(n_layers=12, d_model=768, n_heads=12),  # 124M parameters
    "gpt2-medium": dict(n_layers=24, d_model=1024, n_heads=16),  # 355M
    "gpt2-large": dict(n_layers=36, d_model=1280, n_heads=20),  # 774M
    "gpt2-xl": dict(n_layers=48, d_model=1600, n_heads=25),  # 1,558M
    # nanoGPT's CPU run on characters: small enough to train on a laptop in minutes. Biases kept: a true mini GPT-2.
    "shakespeare-char": dict(
        vocab_size=65, context_length=64, d_model=128, n_layers=4, n_heads=4, dropout=0.0
    ),
    # For tests and quick demos: GPT-2's vocabulary, so GPT-2 token ids fit.
    "tiny": dict(context_length=16, d_model=32, n_layers=2, n_heads=2, dropout=0.0),
}


class FeedForward(nn.Module):
    """The position-wise MLP: ``c_fc`` (D -> d_ff), activation, ``c_proj`` (d_ff -> D), dropout.

    Applied to every token on its own (no mixing across positions: that is attention's job).
    """

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.d_model, config.d_ff, bias=config.bias)
        self.act = ACTIVATIONS[config.activation]()
        self.c_proj = nn.Linear(config.d_ff, config.d_model, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: Tensor) -> Tensor:
        """(B, T, D) -> (B, T, D)."""
        return self.dropout(self.c_proj(self.act(self.c_fc(x))))  # (B, T, d_ff) inside


class Block(nn.Module):
    """A pre-LN transformer block: ``x + attn(ln_1(x))``, then ``x + mlp(ln_2(x))``."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln_1 = LayerNorm(config.d_model, eps=config.layer_norm_eps, bias=config.bias)
        self.attn = MultiHeadAttention(config.d_model, config.n_heads, dropout=config.dropout, bias=config.bias)
        self.ln_2 = LayerNorm(config.d_model, eps=config.layer_norm_eps, bias=config.bias)
        self.mlp = FeedForward(config)

    def forward(
        self, x: Tensor, kv_cache: KVCache | None = None, return_weights: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        """(B, T, D) -> (B, T, D); with ``return_weights``, also the attention weights (B, H, T, P + T)."""
        attended = self.attn(self.ln_1(x), return_weights=return_weights, kv_cache=kv_cache)
        if return_weights:
            attended, weights = attended
        x = x + attended
        x = x + self.mlp(self.ln_2(x))
        return (x, weights) if return_weights else x


class GPT(nn.Module):
    """GPT-2: embeddings, ``n_layers`` pre-LN blocks, a final LayerNorm and the language-model head.

    ``forward`` checks that its token ids are in range, each check a wait for a GPU: ``train`` (on the
    host) and ``generate`` check theirs once and turn these off (``utils.skip_token_id_checks``)."""

    check_token_ids = True  # False skips forward's checks (skip_token_id_checks)

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.d_model)
        self.wpe = LearnedPositionalEmbedding(config.context_length, config.d_model)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList([Block(config) for _ in range(config.n_layers)])
        self.ln_f = LayerNorm(config.d_model, eps=config.layer_norm_eps, bias=config.bias)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_weights:
            self.lm_head.weight = self.wte.weight  # one (V, D) matrix reads tokens in and writes them out
        self.apply(self._init_weights)
        # GPT-2's residual scaling: each of the 2 * n_layers branches writing into the residual stream
        # starts smaller, so what they add up to does not grow with the number of layers.
        for name, param in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(param, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layers))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        """GPT-2's initialization: N(0, 0.02²) weights, zero biases; LayerNorms start at γ = 1, β = 0."""
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, (nn.Embedding, LearnedPositionalEmbedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def new_kv_cache(self) -> list[KVCache]:
        """An empty cache for ``forward(..., kv_cache=...)``: one ``KVCache`` per block."""
        return [KVCache(max_positions=self.config.context_length) for _ in self.blocks]

    def _embed(self, idx: Tensor, start: int = 0) -> Tensor:
        """Token plus position embeddings of ``idx`` (B, T) at positions ``start ..``, then dropout: (B, T, D)."""
        idx = _token_ids("idx", idx)
        B, T = idx.shape
        if T == 0:
            raise ValueError("idx has no tokens (T = 0): pass at least one token per sequence")
        if start + T > self.config.context_length:
            n = self.config.context_length
            raise ValueError(
                f"a sequence of T={T} tokens is longer than context_length={n}: keep its last {n} tokens "
                f"(idx[:, -context_length:])"
                if start == 0
                else f"T={T} new tokens after {start} cached positions need {start + T} positions, but "
                f"context_length={n}: start a fresh cache with at most the last {n} tokens"
            )
        if self.check_token_ids and not torch.compiler.is_compiling():  # compiled: no host waits
            check_vocabulary_range(idx, self.config.vocab_size)
        x = self.wte(idx) + self.wpe(T, start=start)  # (B, T, D) + (T, D)
        return self.drop(x)

    def forward(
        self, idx: Tensor, targets: Tensor | None = None, kv_cache: list[KVCache] | None = None
    ) -> tuple[Tensor, Tensor | None]:
        """Logits for the next token at every position, and the loss when ``targets`` are given.

        Args:
            idx: token ids (B, T).
            targets: the next tokens (B, T), already shifted (``targets[:, t]`` follows ``idx[:, t]``);
                positions set to -100 are ignored.
            kv_cache: from ``new_kv_cache()``; holds ``P`` past positions, so ``idx`` are positions
                ``P .. P + T - 1``. It is updated in place.

        Returns:
            ``(logits (B, T, V), loss)``: the mean cross-entropy in nats, or None without targets.
        """
        if kv_cache is not None and len(kv_cache) != len(self.blocks):
            raise ValueError(
                f"kv_cache has {len(kv_cache)} layers, the model {len(self.blocks)}: use model.new_kv_cache()"
            )
        start = len(kv_cache[0]) if kv_cache is not None else 0
        x = self._embed(idx, start)  # (B, T, D)
        for i, block in enumerate(self.blocks):
            x = block(x, kv_cache=None if kv_cache is None else kv_cache[i])  # (B, T, D)
        logits = self.lm_head(self.ln_f(x))  # (B, T, V)
        if targets is None:
            return logits, None
        targets = _token_ids("targets", targets).long()  # cross_entropy takes int64 targets only
        if targets.shape != idx.shape:
            raise ValueError(f"targets must have the shape of idx {tuple(idx.shape)}, got {tuple(targets.shape)}")
        if self.check_token_ids and not torch.compiler.is_compiling():
            V = self.config.vocab_size
            ignored = targets == -100
            bad, none_left = (((targets < 0) & ~ignored) | (targets >= V)).any(), ignored.all()
            if bad or none_left:
                raise ValueError(
                    f"targets must be token ids in [0, {V}) or -100 (ignored), got values in "
                    f"[{int(targets.min())}, {int(targets.max())}]" if bad else
                    "every target is -100 (ignored), so the mean loss would be 0 / 0 = nan: give at least "
                    "one target, or skip this batch"
                )
        loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=-100)
        return logits, loss

    @torch.no_grad()
    def attention_maps(self, idx: Tensor) -> list[Tensor]:
        """Every layer's attention weights for ``idx`` (B, T): ``n_layers`` tensors (B, H, T, T), rows sum to 1.

        The same format as transformers' ``output_attentions=True``. Call ``model.eval()`` first
        (in training mode the embeddings are dropped out). Only this method asks the blocks for
        weights: ``forward`` never materializes them.
        """
        x = self._embed(idx)  # (B, T, D)
        maps = []
        for block in self.blocks:
            x, weights = block(x, return_weights=True)  # (B, T, D), (B, H, T, T)
            maps.append(weights)
        return maps

    def num_parameters(self, exclude_embeddings: bool = False) -> int:
        """Number of trainable numbers; a tied ``wte``/``lm_head`` matrix counts once.

        ``exclude_embeddings=True`` leaves out the token and position tables (``wte``, ``wpe``), as
        transformers' ``num_parameters(exclude_embeddings=True)`` does; an untied ``lm_head`` stays.
        """
        total = sum(p.numel() for p in self.parameters())  # parameters() yields a shared tensor once
        if exclude_embeddings:
            total -= self.wte.weight.numel() + self.wpe.weight.numel()
        return total


def check_vocabulary_range(idx: Tensor, vocab_size: int) -> None:
    """A ValueError when a token id of ``idx`` is outside ``[0, vocab_size)`` (one read back)."""
    if ((idx < 0) | (idx >= vocab_size)).any():
        raise ValueError(
            f"token ids must be in [0, {vocab_size}), got values in [{int(idx.min())}, {int(idx.max())}]: "
            "was idx made with a different tokenizer?"
        )


def _token_ids(name: str, ids) -> Tensor:
    """``ids`` as an int64 (B, T) tensor, or a ValueError naming what is wrong and the fix."""
    if not isinstance(ids, Tensor):
        raise ValueError(
            f"{name} must be a torch.Tensor of token ids of shape (B, T), got a {type(ids).__name__}: "
            f"pass torch.tensor([ids]) (one sequence) or torch.as_tensor(array)"
        )
    if ids.dtype == torch.bool or ids.is_floating_point() or ids.is_complex():
        raise ValueError(
            f"{name} must hold integer token ids, got {ids.dtype}: ids are whole numbers (tokenizer "
            f"output), e.g. {name}.long() if the values are whole"
        )
    if ids.dim() != 2:
        raise ValueError(f"{name} must have shape (B, T), got {tuple(ids.shape)}: for one sequence use {name}[None]")
    return ids if ids.dtype in (torch.int64, torch.int32) else ids.long()  # uint8, int16, ...: embeddings need int64
