"""Chapter 4 — attention: scaled dot-product attention, the causal mask, a KV cache and
GPT-2's multi-head causal self-attention.

Masks are boolean with **True meaning "may attend"**, the convention of
``torch.nn.functional.scaled_dot_product_attention`` (``nn.MultiheadAttention`` uses the opposite one).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def causal_mask(T: int, device: torch.device | str | None = None, *, n_past: int = 0) -> Tensor:
    """Boolean causal mask of shape ``(T, n_past + T)``; True = may attend.

    Row ``i`` is the query at position ``n_past + i``; it may see keys ``0 .. n_past + i``.
    With ``n_past = 0`` (the default) this is the ``(T, T)`` lower triangle, diagonal included.
    ``n_past > 0`` is the mask for ``T`` new queries after ``n_past`` cached positions (see ``KVCache``).
    """
    if T < 0 or n_past < 0:
        raise ValueError(f"causal_mask needs T >= 0 and n_past >= 0, got T={T}, n_past={n_past}")
    # (T, n_past + T): keep the diagonal shifted right by n_past and everything below it
    return torch.ones(T, n_past + T, dtype=torch.bool, device=device).tril(diagonal=n_past)


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    dropout_p: float = 0.0,
) -> tuple[Tensor, Tensor]:
    """Attention written out: ``softmax(q kᵀ / sqrt(d_k), masked) @ v``.

    Args:
        q: queries, shape ``(..., T_q, d_k)``.
        k: keys, shape ``(..., T_k, d_k)``.
        v: values, shape ``(..., T_k, d_v)``.
        mask: optional **boolean** tensor broadcastable to ``(..., T_q, T_k)``; True = query may
            attend to key. Masked scores are set to ``-inf`` before the softmax.
        dropout_p: probability of zeroing an attention weight (and scaling the rest by
            ``1 / (1 - dropout_p)``); pass 0.0 at evaluation time.

    Returns:
        ``(output, weights)``: output of shape ``(..., T_q, d_v)`` and the attention weights
        (the softmax, before dropout) of shape ``(..., T_q, T_k)``; each row sums to 1.

    A query whose row of the mask is all False has nothing to attend to: the softmax of a row of
    ``-inf`` is NaN (0/0). Here such a row is defined to have weights 0 and output 0 (and zero
    gradients), never NaN. A causal mask never has such a row.
    """
    if mask is not None and mask.dtype != torch.bool:
        raise TypeError(
            f"mask must be a boolean tensor (True = may attend), got dtype {mask.dtype}; "
            "convert it with mask.bool() or build it with causal_mask(T)"
        )
    d_k = q.size(-1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # (..., T_q, T_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)  # (..., T_q, T_k), each row sums to 1
    if mask is not None:
        empty_rows = ~mask.any(dim=-1, keepdim=True)  # (..., T_q, 1): queries that may see no key
        if empty_rows.any():  # rare: skip the extra (T_q, T_k) copy otherwise
            weights = weights.masked_fill(empty_rows, 0.0)  # their softmax was 0/0 = NaN
    attended = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
    output = attended @ v  # (..., T_q, d_v)
    return output, weights


class KVCache:
    """The keys and values of past positions for ONE attention layer, for fast generation.

    ``KVCache()`` starts empty. ``update(k, v)`` appends the new keys and values along the time
    dimension (dim -2) of ``(B, H, T, d_k)`` tensors and returns everything cached so far.
    ``len(cache)`` is the number of cached positions (0 when empty, so test ``cache is not None``,
    not ``if cache:``).

    The positions live in buffers allocated ahead (``torch.cat`` would copy the whole cache at every
    step): when full, the capacity doubles, up to ``max_positions`` when given (``GPT.new_kv_cache``
    passes the context length). ``keys`` and ``values`` are views of the filled part.
    """

    def __init__(self, max_positions: int | None = None) -> None:
        self.max_positions = max_positions
        self._keys: Tensor | None = None  # (B, H, capacity, d_k), filled up to _length
        self._values: Tensor | None = None  # (B, H, capacity, d_k)
        self._length = 0

    @property
    def keys(self) -> Tensor | None:
        return None if self._keys is None else self._keys[..., : self._length, :]  # (B, H, P, d_k)

    @property
    def values(self) -> Tensor | None:
        return None if self._values is None else self._values[..., : self._length, :]  # (B, H, P, d_k)

    def __len__(self) -> int:
        return self._length

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append ``k`` and ``v`` (each ``(B, H, T, d_k)``); return all keys and values ``(B, H, P + T, d_k)``."""
        if k.shape != v.shape:
            raise ValueError(f"keys and values must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}")
        if self._keys is not None and (k.shape[:-2] != self._keys.shape[:-2] or k.size(-1) != self._keys.size(-1)):
            raise ValueError(
                f"new keys of shape {tuple(k.shape)} do not continue the cached keys of shape "
                f"{tuple(self.keys.shape)}: batch, heads and d_k must match (start a new KVCache for a new batch)"
            )
        P, T = self._length, k.size(-2)
        if self._keys is None or P + T > self._keys.size(-2):
            self._grow(k, v, needed=P + T)
        self._keys[..., P : P + T, :] = k
        self._values[..., P : P + T, :] = v
        self._length = P + T
        return self.keys, self.values

    def _grow(self, k: Tensor, v: Tensor, needed: int) -> None:
        """Reallocate the buffers with room for at least ``needed`` positions, keeping what is cached."""
        capacity = 2 * needed if self.max_positions is None else max(min(2 * needed, self.max_positions), needed)
        keys = k.new_empty(*k.shape[:-2], capacity, k.size(-1))
        values = v.new_empty(*v.shape[:-2], capacity, v.size(-1))
        if self._length:
            keys[..., : self._length, :] = self.keys
            values[..., : self._length, :] = self.values
        self._keys, self._values = keys, values

    def __repr__(self) -> str:
        shape = None if self.keys is None else tuple(self.keys.shape)
        return f"KVCache(positions={len(self)}, keys_shape={shape})"


class MultiHeadAttention(nn.Module):
    """GPT-2's multi-head causal self-attention.

    ``c_attn`` projects each token to its query, key and value at once (one ``nn.Linear(D, 3D)``,
    outputs concatenated as q, k, v, GPT-2's layout); the ``H`` heads each attend in their own
    ``d_k = D / H``-dimensional subspace; ``c_proj`` mixes the concatenated heads back to ``D``.
    ``attn_dropout`` drops attention weights, ``resid_dropout`` the output, as in GPT-2.

    ``fast`` (default True, what training uses) calls ``torch.nn.functional.scaled_dot_product_attention``;
    ``fast = False`` uses the written-out ``scaled_dot_product_attention`` of this module. Both give
    the same numbers.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True, fast: bool = True):
        super().__init__()
        if n_heads <= 0 or d_model % n_heads != 0:
            raise ValueError(
                f"n_heads={n_heads} does not divide d_model={d_model}: choose n_heads among the divisors of "
                f"d_model (GPT-2 small uses d_model=768, n_heads=12, so d_k=64)"
            )
        self.d_model = d_model
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.fast = fast
        self.c_attn = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.c_proj = nn.Linear(d_model, d_model, bias=bias)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)

    def split_heads(self, x: Tensor) -> Tensor:
        """(B, T, D) -> (B, H, T, d_k): each head gets its own slice of the D features."""
        B, T, _ = x.shape
        return x.view(B, T, self.n_heads, self.d_head).transpose(1, 2)  # (B, T, H, d_k) -> (B, H, T, d_k)

    def merge_heads(self, x: Tensor) -> Tensor:
        """(B, H, T, d_k) -> (B, T, D): concatenate the heads' outputs side by side."""
        B, _, T, _ = x.shape
        return x.transpose(1, 2).contiguous().view(B, T, self.d_model)  # (B, T, H, d_k) -> (B, T, D)

    def forward(
        self, x: Tensor, return_weights: bool = False, kv_cache: KVCache | None = None
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Causal self-attention over ``x`` of shape ``(B, T, D)``.

        Returns ``y`` of shape ``(B, T, D)``, or ``(y, weights)`` with weights of shape
        ``(B, H, T, P + T)`` when ``return_weights`` is True (always computed on the written-out path).
        With a ``kv_cache`` holding ``P`` past positions, the ``T`` new tokens are positions
        ``P .. P + T - 1``: query ``i`` sees keys ``0 .. P + i``. The cache is updated in place.
        """
        if x.dim() != 3 or x.size(-1) != self.d_model:
            raise ValueError(f"expected x of shape (B, T, {self.d_model}), got {tuple(x.shape)}")
        B, T, D = x.shape
        q, k, v = self.c_attn(x).split(D, dim=2)  # 3 x (B, T, D)
        q, k, v = self.split_heads(q), self.split_heads(k), self.split_heads(v)  # 3 x (B, H, T, d_k)
        P = 0
        if kv_cache is not None:
            P = len(kv_cache)
            k, v = kv_cache.update(k, v)  # 2 x (B, H, P + T, d_k)
        dropout_p = self.attn_dropout.p if self.training else 0.0

        weights = None
        if return_weights or not self.fast:
            mask = causal_mask(T, device=x.device, n_past=P)  # (T, P + T)
            y, weights = scaled_dot_product_attention(q, k, v, mask=mask, dropout_p=dropout_p)  # (B, H, T, d_k)
        elif P == 0:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)  # (B, H, T, d_k)
        elif T == 1:
            # One new token after the cache sees every key: no mask needed.
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p)  # (B, H, 1, d_k)
        else:
            # is_causal=True would align the triangle to the top-left (query i sees keys 0..i),
            # wrong when T_q < T_k; pass the mask shifted by the P cached positions instead.
            mask = causal_mask(T, device=x.device, n_past=P)  # (T, P + T)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)  # (B, H, T, d_k)

        y = self.resid_dropout(self.c_proj(self.merge_heads(y)))  # (B, H, T, d_k) -> (B, T, D)
        return (y, weights) if return_weights else y

    def extra_repr(self) -> str:
        return f"n_heads={self.n_heads}, d_head={self.d_head}, fast={self.fast}"
