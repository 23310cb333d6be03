"""Chapter 10 — rotary position embeddings (RoPE, Su et al. 2021), in Llama's layout.

RoPE has no position table. It rotates each query and each key by angles proportional to its
position, in ``d_head / 2`` planes of two features each, plane ``i`` turning at frequency
``theta ** (-2i / d_head)``. The score ``q_m · k_n`` then depends on the positions ``m`` and ``n``
only through the offset ``m - n``.

The pairs follow the *half-split* layout of Llama's Hugging Face port (``rotate_half``): feature
``i`` is paired with feature ``i + d_head / 2``. Meta's original Llama code pairs neighbours
``(2i, 2i + 1)`` instead (the *interleaved* layout); the two differ by a fixed permutation of each
head's features, which the conversion of Meta's weights to Hugging Face's applies to ``q_proj`` and
``k_proj``. ``apply_rope`` here equals transformers' ``apply_rotary_pos_emb``.
"""

from __future__ import annotations

import numbers

import torch
from torch import Tensor


def rope_frequencies(d_head: int, theta: float = 10_000.0) -> Tensor:
    """The ``d_head / 2`` angular frequencies ``theta ** (-2i / d_head)``, from 1 down to about 1/theta."""
    whole = isinstance(d_head, numbers.Integral) and not isinstance(d_head, bool)
    if not whole or d_head <= 0 or d_head % 2:
        raise ValueError(
            f"RoPE needs an even head width, got d_head={d_head!r}: it rotates pairs of features, so choose "
            "d_model and n_heads with d_model / n_heads even (Llama uses 128)"
        )
    if isinstance(theta, bool) or not isinstance(theta, numbers.Real) or not theta > 1:
        raise ValueError(f"rope theta={theta!r} must be > 1 (Llama 2 uses 10,000, Llama 3 500,000)")
    return 1.0 / theta ** (torch.arange(0, d_head, 2, dtype=torch.float32) / d_head)  # (d_head / 2,)


def rope_cos_sin(positions: Tensor, d_head: int, theta: float = 10_000.0) -> tuple[Tensor, Tensor]:
    """Cosines and sines of the rotation angles at ``positions`` (T,): two tensors (T, d_head).

    Each angle appears twice, at feature ``i`` and ``i + d_head / 2`` (the half-split layout).
    Computed in float32 whatever the model's dtype, as transformers does.
    """
    angles = positions.float()[:, None] * rope_frequencies(d_head, theta).to(positions.device)  # (T, d/2)
    angles = torch.cat([angles, angles], dim=-1)  # (T, d_head)
    return angles.cos(), angles.sin()


def rotate_half(x: Tensor) -> Tensor:
    """``(x1, x2) -> (-x2, x1)`` on the two halves of the last dimension: a quarter turn of each pair."""
    x1, x2 = x.chunk(2, dim=-1)  # (..., d_head / 2) each
    return torch.cat([-x2, x1], dim=-1)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate queries or keys ``x`` (B, H, T, d_head) by the angles of ``cos``, ``sin`` (T, d_head).

    Pair ``(x_i, x_{i + d/2})`` at position ``m`` turns by ``m * freq_i``:
    ``x * cos + rotate_half(x) * sin``. Returns a tensor of ``x``'s shape and dtype.
    """
    if x.size(-1) != cos.size(-1) or x.size(-2) != cos.size(-2):
        raise ValueError(
            f"x of shape {tuple(x.shape)} does not fit angles of shape {tuple(cos.shape)}: expected "
            "(..., T, d_head) with the T and d_head of rope_cos_sin(positions, d_head)"
        )
    return (x * cos + rotate_half(x) * sin).to(x.dtype)
