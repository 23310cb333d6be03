"""Checkers for the exercises of Chapter 3 (layer normalization): ``check_layer_norm``."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .core import (_forbid, _Case, _Mismatch, _call, _compare_values, _describe, _generator, _require_tensor, _run_cases)

__all__ = ["check_layer_norm"]


def _layer_norm_variants(x: Tensor, weight: Tensor, bias: Tensor, eps: float) -> list[tuple[Tensor, str]]:
    """The usual wrong LayerNorms of ``x`` (float64), each with the hint that names the mistake."""
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, keepdim=True, unbiased=False)
    return [
        ((x - mean) / torch.sqrt(x.var(-1, keepdim=True, unbiased=True) + eps) * weight + bias,
         "use the biased variance (divide by D): x.var(-1, unbiased=False, keepdim=True), "
         "or ((x - mean)**2).mean(-1, keepdim=True); torch.var divides by D - 1 by default"),
        ((x - mean) / (torch.sqrt(var) + eps) * weight + bias,
         "eps goes inside the square root: (x - mean) / sqrt(var + eps), not (x - mean) / (std + eps)"),
        ((x - mean) / torch.sqrt(var + eps),
         "apply the learned scale and shift after normalizing: x_hat * weight + bias"),
        ((x - mean) / torch.sqrt(var + eps) * weight,
         "add the shift bias (β) after scaling: x_hat * weight + bias"),
        ((x - mean) / torch.sqrt(var + 1e-5) * weight + bias,
         "use the eps you are given, not a hard-coded 1e-5"),
        ((x - x.mean(0, keepdim=True)) / torch.sqrt(x.var(0, keepdim=True, unbiased=False) + eps) * weight + bias,
         "normalize each token over its features: mean and variance over the last dimension (dim=-1)"),
    ]


NO_LIBRARY = "write the normalization yourself, without F.layer_norm or nn.LayerNorm"


def check_layer_norm(candidate) -> bool:
    """Check a LayerNorm. ``candidate`` is either a function ``layer_norm(x, weight, bias, eps)``
    normalizing over the last dimension, or an ``nn.Module`` class built as ``LN(D, eps=eps)`` whose
    parameters are named ``weight`` (γ, starting at ones) and ``bias`` (β, zeros), like ``nn.LayerNorm``;
    a module must not call ``F.layer_norm`` or ``nn.LayerNorm`` (Chapter 3's exercise).

    The reference is ``torch.nn.functional.layer_norm``: biased variance, eps inside the square root.
    """
    is_module = isinstance(candidate, type) and issubclass(candidate, nn.Module)
    specs = [
        ("x of shape (2, 3, 8), random γ and β, eps=1e-05", (2, 3, 8), 3.0, 2.0, 1e-5, 1),
        ("x of shape (4, 16) with tiny variance (std 0.01), eps=1e-05", (4, 16), 0.0, 0.01, 1e-5, 2),
        ("x of shape (3, 32), eps=0.1", (3, 32), -1.0, 1.0, 0.1, 3),
    ]

    def make(shape: tuple[int, ...], mean: float, std: float, eps: float, seed: int) -> Callable[[], None]:
        def run() -> None:
            g = _generator(seed)
            D = shape[-1]
            x = mean + std * torch.randn(shape, generator=g)
            weight = 1.0 + 0.5 * torch.randn(D, generator=g)
            bias = 0.5 * torch.randn(D, generator=g)
            x64, w64, b64 = x.double(), weight.double(), bias.double()
            expected = F.layer_norm(x64, (D,), w64, b64, eps)
            if is_module:
                module = _call(candidate, D, eps=eps)
                for name, value, start in (("weight", weight, 1.0), ("bias", bias, 0.0)):
                    param = getattr(module, name, None)
                    if not isinstance(param, nn.Parameter) or param.shape != (D,):
                        raise _Mismatch(f"your module has no parameter {name} of shape ({D},): got {_describe(param)}",
                                        hint="create self.weight = nn.Parameter(torch.ones(D)) (γ) and "
                                             "self.bias = nn.Parameter(torch.zeros(D)) (β)")
                    if not bool((param == start).all()):
                        raise _Mismatch(f"{name} starts at {param.detach()[:3].tolist()}…, expected all {start:g}",
                                        hint="like nn.LayerNorm, γ starts at ones and β at zeros: the layer "
                                             "begins as a plain normalization")
                    with torch.no_grad():
                        param.copy_(value)
                with _forbid(NO_LIBRARY, (F, "layer_norm"), (torch, "layer_norm"), (nn.LayerNorm, "forward")):
                    out = _call(module, x.clone())
            else:
                out = _call(candidate, x.clone(), weight.clone(), bias.clone(), eps)
            got = _require_tensor(out, expected.float(), "output",
                                  shape_hint="LayerNorm keeps the shape of its input")
            _compare_values(got, expected, atol=1e-4, rtol=1e-4,
                            known_mistakes=_layer_norm_variants(x64, w64, b64, eps),
                            default_hint="y = (x - mean) / sqrt(var + eps) * weight + bias, with mean and "
                                         "biased var over the last dimension (keepdim=True)",
                            what="output")
        return run

    error_hint = ("the module is built as YourClass(D, eps=eps) and called on x"
                  if is_module else "the function is called as layer_norm(x, weight, bias, eps)")
    cases = [_Case(label, make(shape, mean, std, eps, seed), error_hint)
             for label, shape, mean, std, eps, seed in specs]
    return _run_cases("check_layer_norm", cases)
