"""Chapter 7 — padding masks: prompts of different lengths in one batch, left-padded.

``left_pad`` stacks token lists into one ``(B, T)`` batch, padding each on the left, and returns the
**attention mask** (True = a real token). ``padded_forward`` runs a ``GPT`` on such a batch with the
causal mask combined with that padding mask, so that no query reads a pad, and with **position ids that
skip the pads**: each prompt's first real token is position 0, as if it were alone. ``generate_padded``
extends every prompt at once; greedy, it gives exactly the tokens of ``generate`` run on each prompt alone.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import torch
from torch import Tensor

from .attention import causal_mask, scaled_dot_product_attention
from .generate import _check_options, next_token
from .utils import eval_mode


def left_pad(prompts: Sequence[Sequence[int]], pad_id: int = 0) -> tuple[Tensor, Tensor]:
    """Stack token lists into ``idx`` (B, T) padded on the left with ``pad_id``, and the mask (B, T).

    ``attention_mask[b, t]`` is True where ``idx[b, t]`` is a real token. ``T`` is the longest prompt.
    """
    if len(prompts) == 0 or any(len(p) == 0 for p in prompts):
        lengths = [len(p) for p in prompts]
        raise ValueError(f"every prompt needs at least one token, got lengths {lengths}: drop empty prompts")
    T = max(len(p) for p in prompts)
    idx = torch.full((len(prompts), T), pad_id, dtype=torch.long)  # (B, T)
    attention_mask = torch.zeros(len(prompts), T, dtype=torch.bool)  # (B, T)
    for b, prompt in enumerate(prompts):
        idx[b, T - len(prompt):] = torch.as_tensor(list(prompt), dtype=torch.long)
        attention_mask[b, T - len(prompt):] = True
    return idx, attention_mask


def position_ids(attention_mask: Tensor) -> Tensor:
    """Positions that skip the pads: 0 at each row's first real token (pads get 0 too). (B, T) -> (B, T)."""
    return (attention_mask.long().cumsum(dim=-1) - 1).clamp(min=0)


def padding_causal_mask(attention_mask: Tensor) -> Tensor:
    """The causal mask AND the padding mask of the keys: (B, T) -> (B, 1, T, T), True = may attend.

    Query ``t`` of row ``b`` may read key ``s`` when ``s <= t`` and ``s`` is a real token. A pad query sees
    only pads, so its row is all False; ``scaled_dot_product_attention`` then gives it weights 0, not NaN.
    """
    T = attention_mask.size(-1)
    return causal_mask(T, device=attention_mask.device) & attention_mask[:, None, None, :]


def _masked_attention(attn, x: Tensor, mask: Tensor) -> Tensor:
    """``attn`` (a ``MultiHeadAttention``) on ``x`` (B, T, D) with any boolean mask (B, 1, T, T)."""
    q, k, v = attn.c_attn(x).split(attn.d_model, dim=2)  # 3 x (B, T, D)
    q, k, v = attn.split_heads(q), attn.split_heads(k), attn.split_heads(v)  # 3 x (B, H, T, d_k)
    y, _ = scaled_dot_product_attention(q, k, v, mask=mask)  # (B, H, T, d_k)
    return attn.resid_dropout(attn.c_proj(attn.merge_heads(y)))  # (B, T, D)


def padded_forward(model, idx: Tensor, attention_mask: Tensor) -> Tensor:
    """Logits (B, T, V) of a ``GPT`` on a padded batch: pads are never read, positions skip them.

    The logits at real tokens equal those of each sequence run alone (up to float rounding); the
    logits at pads are meaningless. Uses the model's own modules, block by block.
    """
    if attention_mask.shape != idx.shape or attention_mask.dtype != torch.bool:
        raise ValueError(
            f"attention_mask must be a boolean tensor of idx's shape {tuple(idx.shape)}, got "
            f"{attention_mask.dtype} {tuple(attention_mask.shape)}: build both with left_pad(prompts)"
        )
    if idx.size(1) > model.config.context_length:
        raise ValueError(
            f"the padded batch has T={idx.size(1)} positions, more than context_length="
            f"{model.config.context_length}: shorten the prompts or generate fewer tokens"
        )
    positions = position_ids(attention_mask)  # (B, T)
    x = model.drop(model.wte(idx) + model.wpe.weight[positions])  # (B, T, D)
    mask = padding_causal_mask(attention_mask)  # (B, 1, T, T)
    for block in model.blocks:
        x = x + _masked_attention(block.attn, block.ln_1(x), mask)
        x = x + block.mlp(block.ln_2(x))  # (B, T, D)
    return model.lm_head(model.ln_f(x))  # (B, T, V)


def _check_ids(prompts: Sequence[Sequence[int]], pad_id: int, vocab_size: int) -> None:
    """A ValueError naming ``pad_id`` or the first prompt id outside ``[0, vocab_size)``: the embedding
    would fail with an IndexError that names neither (on a GPU, a device-side assert)."""
    if isinstance(pad_id, bool) or not isinstance(pad_id, numbers.Integral) or not 0 <= pad_id < vocab_size:
        raise ValueError(f"generate_padded: pad_id={pad_id!r} must be a token id in [0, {vocab_size}) "
                         "(the mask hides it, so any id will do): pass e.g. pad_id=0")
    for b, prompt in enumerate(prompts):
        bad = [(t, i) for t, i in enumerate(prompt) if not 0 <= int(i) < vocab_size]
        if bad:
            t, i = bad[0]
            raise ValueError(f"generate_padded: prompt {b} has id {int(i)} at position {t}, outside the "
                             f"model's vocabulary [0, {vocab_size}): encode the prompts with the "
                             "tokenizer the model was trained with")


@torch.no_grad()
def generate_padded(model, prompts: Sequence[Sequence[int]], max_new_tokens: int, pad_id: int = 0,
                    temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
                    greedy: bool = False, generator: torch.Generator | None = None) -> list[list[int]]:
    """Extend prompts of different lengths in one batch, left-padded; returns each prompt + its new tokens.

    Every step runs ``padded_forward`` on the whole batch (no KV cache) and appends one token per row
    with ``next_token``. The prompt plus the new tokens must fit in the context: the window is never
    slid, since a slid window would cut the rows at different points.
    """
    _check_options(temperature, top_k, top_p, greedy, max_new_tokens)
    _check_ids(prompts, pad_id, model.config.vocab_size)
    idx, attention_mask = left_pad(prompts, pad_id)
    room = model.config.context_length - idx.size(1)  # new tokens after the longest prompt
    if max_new_tokens > room:
        fix = (f"generate at most {room} tokens" if room > 0 else
               f"shorten the prompts to fewer than {model.config.context_length} tokens")
        raise ValueError(
            f"the longest prompt ({idx.size(1)} tokens) plus max_new_tokens={max_new_tokens} exceeds "
            f"context_length={model.config.context_length}: {fix}"
        )
    with eval_mode(model):
        for _ in range(max_new_tokens):
            logits = padded_forward(model, idx, attention_mask)  # (B, T, V)
            token = next_token(logits[:, -1, :], temperature, top_k, top_p, greedy, generator)  # (B, 1)
            idx = torch.cat([idx, token], dim=1)  # (B, T + 1)
            attention_mask = torch.cat([attention_mask, torch.ones_like(token, dtype=torch.bool)], dim=1)
    return [row[mask].tolist() for row, mask in zip(idx, attention_mask)]
