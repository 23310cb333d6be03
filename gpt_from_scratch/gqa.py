"""Chapter 10 — grouped-query attention (GQA, Ainslie et al. 2023), with rotary positions.

``H`` query heads share ``H_kv`` key/value heads, ``H / H_kv`` queries per group: ``H_kv = H`` is the
multi-head attention of Chapter 4, ``H_kv = 1`` multi-query attention (Shazeer 2019). Only the
``H_kv`` key and value heads are cached, so the KV cache shrinks by ``H / H_kv``; ``repeat_kv``
copies each of them to its ``H / H_kv`` query heads just before the scores.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from .attention import KVCache, causal_mask, scaled_dot_product_attention
from .rope import apply_rope
from .utils import check_int


def repeat_kv(x: Tensor, n_rep: int) -> Tensor:
    """(B, H_kv, T, d_head) -> (B, H_kv * n_rep, T, d_head): each key/value head ``n_rep`` times in a row.

    Head ``j`` of the result is head ``j // n_rep`` of ``x``, so query heads ``g * n_rep .. (g + 1) *
    n_rep - 1`` share key/value head ``g`` (transformers' ``repeat_kv``). ``expand`` makes no copy; the
    ``reshape`` does, once.
    """
    if n_rep == 1:
        return x
    B, H_kv, T, d = x.shape
    return x[:, :, None].expand(B, H_kv, n_rep, T, d).reshape(B, H_kv * n_rep, T, d)


def kv_cache_bytes_per_token(n_layers: int, n_kv_heads: int, d_head: int, bytes_per_number: int = 2) -> int:
    """Memory the KV cache takes per token: a key and a value of ``n_kv_heads * d_head`` numbers per layer.

    ``bytes_per_number`` is 2 for float16 or bfloat16 (how models are served), 4 for float32.
    """
    return 2 * n_layers * n_kv_heads * d_head * bytes_per_number


class GroupedQueryAttention(nn.Module):
    """Causal self-attention with ``n_heads`` query heads and ``n_kv_heads`` key/value heads.

    Separate projections named as in transformers' Llama: ``q_proj`` (D -> H d_head), ``k_proj`` and
    ``v_proj`` (D -> H_kv d_head), and the output ``c_proj`` (the book's name for Llama's ``o_proj``).
    ``forward`` rotates queries and keys by ``cos``, ``sin`` (from ``rope_cos_sin``) when given.
    ``fast`` (default True) uses ``F.scaled_dot_product_attention``; ``fast=False`` the book's written-out
    attention. No dropout (Llama has none).
    """

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int | None = None, bias: bool = False,
                 fast: bool = True):
        super().__init__()
        d_model = check_int("GroupedQueryAttention", "d_model", d_model, minimum=1)
        n_heads = check_int("GroupedQueryAttention", "n_heads", n_heads, minimum=1)
        n_kv_heads = check_int("GroupedQueryAttention", "n_kv_heads", n_kv_heads, minimum=1,
                               optional=True)
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        if n_heads <= 0 or d_model % n_heads:
            raise ValueError(
                f"n_heads={n_heads} does not divide d_model={d_model}: each query head gets d_model / n_heads "
                "features, so choose n_heads among the divisors of d_model"
            )
        if n_kv_heads <= 0 or n_heads % n_kv_heads:
            divisors = [h for h in range(1, n_heads + 1) if n_heads % h == 0]
            raise ValueError(
                f"n_kv_heads={n_kv_heads} does not divide n_heads={n_heads}: every key/value head serves the "
                f"same number of query heads, so choose n_kv_heads among {divisors}"
            )
        self.d_model, self.n_heads, self.n_kv_heads = d_model, n_heads, n_kv_heads
        self.d_head = d_model // n_heads
        self.fast = fast
        self.q_proj = nn.Linear(d_model, n_heads * self.d_head, bias=bias)
        self.k_proj = nn.Linear(d_model, n_kv_heads * self.d_head, bias=bias)
        self.v_proj = nn.Linear(d_model, n_kv_heads * self.d_head, bias=bias)
        self.c_proj = nn.Linear(n_heads * self.d_head, d_model, bias=bias)

    def _heads(self, x: Tensor, n: int) -> Tensor:
        B, T, _ = x.shape
        return x.view(B, T, n, self.d_head).transpose(1, 2)  # (B, T, n, d_head) -> (B, n, T, d_head)

    def forward(self, x: Tensor, cos: Tensor | None = None, sin: Tensor | None = None,
                kv_cache: KVCache | None = None, return_weights: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        """(B, T, D) -> (B, T, D); with ``return_weights`` also the weights (B, H, T, P + T).

        With a ``kv_cache`` holding ``P`` positions, query ``i`` sees keys ``0 .. P + i``; the cache
        stores the ``H_kv`` rotated key heads and value heads and is updated in place.
        """
        if x.dim() != 3 or x.size(-1) != self.d_model:
            raise ValueError(f"expected x of shape (B, T, {self.d_model}), got {tuple(x.shape)}")
        B, T, D = x.shape
        q = self._heads(self.q_proj(x), self.n_heads)  # (B, H, T, d_head)
        k = self._heads(self.k_proj(x), self.n_kv_heads)  # (B, H_kv, T, d_head)
        v = self._heads(self.v_proj(x), self.n_kv_heads)  # (B, H_kv, T, d_head)
        if cos is not None:
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)  # rotated by their positions
        P = 0
        if kv_cache is not None:
            P = len(kv_cache)
            k, v = kv_cache.update(k, v)  # 2 x (B, H_kv, P + T, d_head)
        n_rep = self.n_heads // self.n_kv_heads
        k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)  # 2 x (B, H, P + T, d_head)
        weights = None
        if return_weights or not self.fast:
            mask = causal_mask(T, device=x.device, n_past=P)  # (T, P + T)
            y, weights = scaled_dot_product_attention(q, k, v, mask=mask)  # (B, H, T, d_head)
        elif T == 1:  # one new token sees every key
            y = F.scaled_dot_product_attention(q, k, v)  # (B, H, 1, d_head)
        else:  # the triangle shifted by the P cached positions (is_causal would not shift it)
            mask = None if P == 0 else causal_mask(T, device=x.device, n_past=P)  # (T, P + T)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=P == 0)  # (B, H, T, d_head)
        y = self.c_proj(y.transpose(1, 2).reshape(B, T, self.n_heads * self.d_head))  # (B, T, D)
        return (y, weights) if return_weights else y

    def extra_repr(self) -> str:
        return f"n_heads={self.n_heads}, n_kv_heads={self.n_kv_heads}, d_head={self.d_head}, fast={self.fast}"
