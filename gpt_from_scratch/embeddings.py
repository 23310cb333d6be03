"""Chapter 2 — embeddings and positional encoding.

``sinusoidal_positional_encoding`` builds the fixed sin/cos table of the original Transformer;
``SinusoidalPositionalEncoding`` wraps it as a module and ``LearnedPositionalEmbedding`` is GPT-2's
choice, one trained vector per position. Both modules return the position vectors, shape (T, D),
for the caller to add to the token embeddings (they broadcast over the batch).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def sinusoidal_positional_encoding(
    T: int, D: int, base: float = 10000.0, *, dtype: torch.dtype | None = None
) -> Tensor:
    """The sinusoidal position table ``P`` of shape (T, D).

    For position ``p`` and frequency pair ``i`` (dimensions ``2i`` and ``2i + 1``)::

        P[p, 2i]     = sin(p * w_i)
        P[p, 2i + 1] = cos(p * w_i),    w_i = 1 / base ** (2i / D)

    so the wavelengths ``2π / w_i`` run geometrically from ``2π`` to almost ``2π * base``.
    ``D`` must be even: every frequency owns one sin and one cos dimension (an odd ``D`` would
    leave a lone sine without its partner, breaking the rotation property of Chapter 2).
    Angles are computed in float64 and the table is rounded once to ``dtype``
    (default: ``torch.get_default_dtype()``), so large positions stay accurate.
    """
    if isinstance(T, bool) or not isinstance(T, int) or T < 0:
        raise ValueError(f"T={T!r} must be a non-negative int (the number of positions)")
    if isinstance(D, bool) or not isinstance(D, int) or D <= 0:
        raise ValueError(f"D={D!r} must be a positive even int (the width of each position vector)")
    if D % 2:
        raise ValueError(
            f"D={D} is odd: the encoding pairs dimensions (2i, 2i+1) as the sin and cos of one "
            f"frequency, so it needs an even width; choose D={D + 1}" + (f" or D={D - 1}" if D > 1 else "")
        )
    if not (base > 1.0 and math.isfinite(base)):
        raise ValueError(f"base={base!r} must be a finite number > 1 (the Transformer uses 10000.0)")
    position = torch.arange(T, dtype=torch.float64).unsqueeze(1)  # (T, 1)
    two_i = torch.arange(0, D, 2, dtype=torch.float64)  # (D/2,)
    angle = position * base ** (-two_i / D)  # (T, D/2)
    pe = torch.empty(T, D, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe.to(dtype or torch.get_default_dtype())


def _check_positions(T: int, start: int, context_length: int) -> None:
    """Raise a clear error when positions ``start .. start + T - 1`` do not fit the table."""
    if T < 0 or start < 0:
        raise ValueError(f"T={T} and start={start} must be non-negative")
    if start + T > context_length:
        fix = (
            f"crop the input to its last {context_length} tokens (idx[:, -context_length:])"
            if start == 0
            else f"{start} positions are already cached, so at most {max(context_length - start, 0)} more fit: "
            f"start a new cache with the last tokens"
        )
        raise ValueError(
            f"a sequence of T={T} tokens starting at position {start} needs positions up to "
            f"{start + T - 1}, but the position table has context_length={context_length} rows: "
            f"{fix}, or build the model with context_length >= {start + T}"
        )


def _length(x_or_T: Tensor | int) -> int:
    """``T`` from an int or from a tensor of shape (..., T, D)."""
    if isinstance(x_or_T, Tensor):
        if x_or_T.dim() < 2:
            raise ValueError(
                f"expected a tensor of shape (..., T, D), got shape {tuple(x_or_T.shape)}: pass the "
                f"token embeddings (B, T, D) or the int T"
            )
        return x_or_T.shape[-2]
    return int(x_or_T)


class SinusoidalPositionalEncoding(nn.Module):
    """The fixed sinusoidal table as a module: ``forward(x_or_T, start=0)`` returns ``pe`` (T, D).

    The table lives in a **non-persistent** buffer: it follows ``.to(device)`` and ``.half()`` like
    a parameter, but it is left out of ``state_dict()``. It is derived from ``(context_length, D,
    base)``, so saving it would only bloat checkpoints and make them fail to load into a model
    with a different ``context_length``; it is rebuilt exactly on construction instead.
    """

    def __init__(self, context_length: int, D: int, base: float = 10000.0) -> None:
        super().__init__()
        self.context_length = context_length
        self.D = D
        self.base = base
        self.register_buffer("pe", sinusoidal_positional_encoding(context_length, D, base), persistent=False)

    def forward(self, x_or_T: Tensor | int, start: int = 0) -> Tensor:
        """Position vectors for positions ``start .. start + T - 1``, shape (T, D).

        ``x_or_T`` is the token embeddings (B, T, D) (only their length is used) or the int ``T``;
        ``start`` is the first position (the number of cached positions when generating).
        """
        T = _length(x_or_T)
        _check_positions(T, start, self.context_length)
        return self.pe[start : start + T]  # (T, D)

    def extra_repr(self) -> str:
        return f"context_length={self.context_length}, D={self.D}, base={self.base}"


class LearnedPositionalEmbedding(nn.Module):
    """GPT-2's positions: a trained table ``weight`` of shape (context_length, D).

    Initialised from N(0, 0.02²) as in GPT-2. ``forward(x_or_T, start=0)`` returns rows
    ``start .. start + T - 1``, shape (T, D); slicing equals ``nn.Embedding`` on ``arange`` (same
    values, same gradients) without building an index tensor. The parameter is named ``weight``
    like ``nn.Embedding``'s, so GPT-2's ``wpe.weight`` loads into it unchanged.
    """

    def __init__(self, context_length: int, D: int, std: float = 0.02) -> None:
        super().__init__()
        if context_length <= 0 or D <= 0:
            raise ValueError(f"context_length={context_length} and D={D} must be positive")
        self.context_length = context_length
        self.D = D
        self.std = std
        self.weight = nn.Parameter(torch.empty(context_length, D))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Draw ``weight`` from N(0, std²) (uses the global generator; seed it first)."""
        nn.init.normal_(self.weight, mean=0.0, std=self.std)

    def forward(self, x_or_T: Tensor | int, start: int = 0) -> Tensor:
        """Position vectors for positions ``start .. start + T - 1``, shape (T, D)."""
        T = _length(x_or_T)
        _check_positions(T, start, self.context_length)
        return self.weight[start : start + T]  # (T, D)

    def extra_repr(self) -> str:
        return f"context_length={self.context_length}, D={self.D}"
