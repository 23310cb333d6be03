"""Chapter 3 — layer normalization, written out (and Chapter 10's RMSNorm, ``RMSNorm``).

``LayerNorm`` normalizes each token's vector over its trailing dimensions to zero mean and unit
(biased) variance, then applies a learned scale ``weight`` (γ) and shift ``bias`` (β)::

    y = (x - mean) / sqrt(var + eps) * weight + bias

It matches ``torch.nn.LayerNorm`` (outputs and gradients) and uses the same parameter names, so
state dicts map one to one. Like ``MultiHeadAttention``, it has a ``fast`` switch: on (the default,
what training uses) it calls PyTorch's fused kernel ``torch.nn.functional.layer_norm``, which computes
the same formula in one pass over memory; off, it runs the lines written out here.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class LayerNorm(nn.Module):
    """Layer normalization over the trailing ``normalized_shape`` dimensions.

    ``normalized_shape`` is an int (the usual ``D``) or a tuple of trailing sizes. The variance is
    the biased one (divide by the number of elements, not by one fewer), and ``eps`` goes *inside*
    the square root. With ``elementwise_affine=False`` there are no parameters (``weight`` and
    ``bias`` are ``None``); ``bias=False`` keeps ``weight`` but drops ``bias``, like
    ``nn.LayerNorm(..., bias=False)``. ``fast`` (default True) calls ``F.layer_norm``; ``fast=False``
    runs the formula written out. Both give the same numbers to float32 rounding.
    """

    def __init__(
        self,
        normalized_shape: int | tuple[int, ...] | list[int] | torch.Size,
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        fast: bool = True,
    ) -> None:
        super().__init__()
        if isinstance(normalized_shape, int):
            shape = (normalized_shape,)
        elif isinstance(normalized_shape, (tuple, list, torch.Size)):
            shape = tuple(normalized_shape)
        else:
            shape = ()
        if not shape or any(not isinstance(n, int) or n <= 0 for n in shape):
            raise ValueError(
                f"normalized_shape={normalized_shape!r} must be a positive int or a non-empty tuple of "
                f"positive ints (the trailing sizes to normalize over, usually D)"
            )
        if not eps > 0:
            raise ValueError(f"eps={eps!r} must be > 0: it keeps sqrt(var + eps) away from zero (GPT-2 uses 1e-5)")
        self.normalized_shape = shape
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        self.fast = fast
        if elementwise_affine:
            self.weight = nn.Parameter(torch.ones(shape))  # γ
            self.bias = nn.Parameter(torch.zeros(shape)) if bias else None  # β
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def reset_parameters(self) -> None:
        """γ = 1 and β = 0: at initialization the layer only normalizes."""
        if self.weight is not None:
            nn.init.ones_(self.weight)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, x: Tensor) -> Tensor:
        """Normalize ``x`` of shape (..., *normalized_shape), e.g. (B, T, D); same shape out."""
        n = len(self.normalized_shape)
        if tuple(x.shape[-n:]) != self.normalized_shape:
            raise ValueError(
                f"input of shape {tuple(x.shape)} does not end in normalized_shape={self.normalized_shape}: "
                f"LayerNorm normalizes over the trailing dimensions, so pass (..., {', '.join(map(str, self.normalized_shape))})"
            )
        if self.fast:
            return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)  # fused: one pass
        dims = tuple(range(-n, 0))
        mean = x.mean(dim=dims, keepdim=True)  # (..., 1): one mean per token
        var = (x - mean).pow(2).mean(dim=dims, keepdim=True)  # biased variance, two-pass: accurate
        x_hat = (x - mean) * torch.rsqrt(var + self.eps)  # zero mean, unit variance per token
        if self.weight is not None:
            x_hat = x_hat * self.weight
        if self.bias is not None:
            x_hat = x_hat + self.bias
        return x_hat

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, fast={self.fast}"


class RMSNorm(nn.Module):
    """Chapter 10 — root-mean-square normalization (Zhang & Sennrich, 2019), Llama's LayerNorm.

    LayerNorm without the mean and without the shift: each token's vector is divided by its root
    mean square and scaled by a learned ``weight`` (γ, starting at ones)::

        y = x / sqrt(mean(x ** 2) + eps) * weight

    over the last dimension ``D``. It matches ``torch.nn.RMSNorm(D, eps=eps)`` and transformers'
    ``LlamaRMSNorm``. ``fast`` (default True) calls the fused ``F.rms_norm``; ``fast=False`` runs
    the formula written out.
    """

    def __init__(self, D: int, eps: float = 1e-5, fast: bool = True) -> None:
        super().__init__()
        if not isinstance(D, int) or isinstance(D, bool) or D <= 0:
            raise ValueError(f"D={D!r} must be a positive int: the size of the last dimension")
        if not eps > 0:
            raise ValueError(f"eps={eps!r} must be > 0: it keeps sqrt(mean(x**2) + eps) away from zero")
        self.D, self.eps, self.fast = D, eps, fast
        self.weight = nn.Parameter(torch.ones(D))  # γ

    def forward(self, x: Tensor) -> Tensor:
        """Normalize ``x`` of shape (..., D), e.g. (B, T, D); same shape out."""
        if x.size(-1) != self.D:
            raise ValueError(f"input of shape {tuple(x.shape)} does not end in D={self.D}: pass (..., {self.D})")
        if self.fast:
            return F.rms_norm(x, (self.D,), self.weight, self.eps)  # fused: one pass
        ms = x.pow(2).mean(dim=-1, keepdim=True)  # (..., 1): mean square of each token
        return x * torch.rsqrt(ms + self.eps) * self.weight  # (..., D)

    def extra_repr(self) -> str:
        return f"{self.D}, eps={self.eps}, fast={self.fast}"
