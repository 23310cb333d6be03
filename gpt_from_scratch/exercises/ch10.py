"""Checkers for the exercises of Chapter 10 (a modern LLM): ``check_rms_norm``,
``check_rope_interleaved`` and ``check_repeat_kv``."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .core import (_Case, _Mismatch, _call, _compare_values, _describe, _forbid, _generator, _require_tensor,
                   _run_cases)

__all__ = ["check_rms_norm", "check_rope_interleaved", "check_repeat_kv"]

NO_LIBRARY = "write the normalization yourself, without F.rms_norm or nn.RMSNorm"


def check_rms_norm(candidate) -> bool:
    """Check an RMSNorm: a function ``rms_norm(x, weight, eps)`` over the last dimension, or an
    ``nn.Module`` class ``RMS(D, eps=eps)`` with one parameter ``weight`` (γ, starting at ones).
    Neither may call ``F.rms_norm`` or ``nn.RMSNorm``. The reference is ``F.rms_norm`` in float64."""
    is_module = isinstance(candidate, type) and issubclass(candidate, nn.Module)
    specs = [("x of shape (2, 3, 8), random γ, eps=1e-05", (2, 3, 8), 0.0, 2.0, 1e-5, 1),
             ("x of shape (4, 16) with mean 3 (not centred), eps=1e-06", (4, 16), 3.0, 1.0, 1e-6, 2),
             ("x of shape (3, 32) with tiny values (std 0.001), eps=0.01", (3, 32), 0.0, 1e-3, 1e-2, 3)]

    def make(shape, mean, std, eps, seed) -> Callable[[], None]:
        def run() -> None:
            g = _generator(seed)
            D = shape[-1]
            x = mean + std * torch.randn(shape, generator=g)
            weight = 1.0 + 0.5 * torch.randn(D, generator=g)
            x64, w64 = x.double(), weight.double()
            expected = F.rms_norm(x64, (D,), w64, eps)
            forbidden = (F, "rms_norm"), (torch, "rms_norm"), (nn.RMSNorm, "forward")
            if is_module:
                module = _call(candidate, D, eps=eps)
                param = getattr(module, "weight", None)
                if not isinstance(param, nn.Parameter) or param.shape != (D,) or not bool((param == 1).all()):
                    raise _Mismatch(f"expected a parameter weight of shape ({D},) starting at ones, got "
                                    f"{_describe(param)}", hint="self.weight = nn.Parameter(torch.ones(D))")
                with torch.no_grad():
                    param.copy_(weight)
                with _forbid(NO_LIBRARY, *forbidden):
                    out = _call(module, x.clone())
            else:
                with _forbid(NO_LIBRARY, *forbidden):
                    out = _call(candidate, x.clone(), weight.clone(), eps)
            got = _require_tensor(out, expected.float(), "output", shape_hint="RMSNorm keeps the input's shape")
            ms = x64.pow(2).mean(-1, keepdim=True)
            centred = x64 - x64.mean(-1, keepdim=True)
            _compare_values(got, expected, atol=1e-4, rtol=1e-4, known_mistakes=[
                (F.layer_norm(x64, (D,), w64, None, eps), "RMSNorm does not subtract the mean: divide x itself "
                                                          "by sqrt(mean(x**2) + eps)"),
                (centred / torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + eps) * w64,
                 "RMSNorm does not subtract the mean: divide x itself by sqrt(mean(x**2) + eps)"),
                (x64 / (ms.sqrt() + eps) * w64, "eps goes inside the square root: sqrt(mean(x**2) + eps)"),
                (x64 / torch.sqrt(ms + eps), "multiply by the learned scale weight at the end"),
                (x64 / torch.sqrt(x64.pow(2).sum(-1, keepdim=True) + eps) * w64,
                 "take the mean of the squares over the last dimension, not their sum"),
            ], default_hint="y = x / sqrt(mean(x**2 over the last dimension) + eps) * weight", what="output")
        return run

    hint = ("the module is built as YourClass(D, eps=eps) and called on x" if is_module
            else "the function is called as rms_norm(x, weight, eps)")
    return _run_cases("check_rms_norm", [_Case(label, make(*spec), hint) for label, *spec in specs])


def _rope_interleaved_reference(x: Tensor, positions: Tensor, theta: float) -> Tensor:
    """Meta's layout: pair (2i, 2i + 1) turns by positions * theta ** (-2i / d), in float64."""
    d = x.size(-1)
    freqs = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d / 2,)
    angles = positions.double()[:, None] * freqs  # (T, d / 2)
    x1, x2 = x[..., 0::2].double(), x[..., 1::2].double()  # (..., T, d / 2) each
    out = torch.stack([x1 * angles.cos() - x2 * angles.sin(), x1 * angles.sin() + x2 * angles.cos()], -1)
    return out.flatten(-2)


def _rope_half_split(x: Tensor, positions: Tensor, theta: float) -> Tensor:
    """The same rotation, pairing i with i + d/2 (Hugging Face's layout): the usual mix-up."""
    d = x.size(-1)
    perm = torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])  # interleaved -> half-split order
    inverse = torch.argsort(perm)
    return _rope_interleaved_reference(x[..., inverse], positions, theta)[..., perm]


def check_rope_interleaved(candidate) -> bool:
    """Check ``rope_interleaved(x, positions, theta)``: rotate x (..., T, d) with neighbouring features
    ``(2i, 2i + 1)`` as pairs (the original RoPE layout), pair i at position ``positions[t]`` by the angle
    ``positions[t] * theta ** (-2i / d)``."""
    specs = [("x (1, 2, 5, 8), positions 0..4, theta=10000", (1, 2, 5, 8), 0, 10_000.0, 4),
             ("x (2, 3, 4, 16), positions 7..10 (after a cache), theta=10000", (2, 3, 4, 16), 7, 10_000.0, 5),
             ("x (2, 1, 6, 4), positions 0..5, theta=100", (2, 1, 6, 4), 0, 100.0, 6)]

    def make(shape, start, theta, seed) -> Callable[[], None]:
        def run() -> None:
            x = torch.randn(shape, generator=_generator(seed))
            positions = torch.arange(start, start + shape[-2])
            expected = _rope_interleaved_reference(x, positions, theta)
            got = _require_tensor(_call(candidate, x.clone(), positions.clone(), theta), x, "output",
                                  shape_hint="the rotation keeps the shape of x", dtype=False)
            _compare_values(got, expected, atol=1e-4, rtol=1e-4, known_mistakes=[
                (_rope_half_split(x, positions, theta), "pair neighbours (x[..., 0::2], x[..., 1::2]), not feature "
                                                        "i with i + d/2 (that is Hugging Face's layout)"),
                (_rope_interleaved_reference(x, -positions, theta), "rotate the other way: (x1 cos - x2 sin, "
                                                                    "x1 sin + x2 cos)"),
                (_rope_interleaved_reference(x, positions - start, theta),
                 "use the positions you are given, not 0..T-1"),
            ], default_hint="freqs = theta ** (-torch.arange(0, d, 2) / d); angles = positions[:, None] * freqs; "
                            "rotate each pair (x[..., 0::2], x[..., 1::2]) and interleave the results back",
                what="output")
        return run

    return _run_cases("check_rope_interleaved", [
        _Case(label, make(*spec), "the function is called as rope_interleaved(x, positions, theta)")
        for label, *spec in specs])


NO_INTERLEAVE = "build the copies yourself, without repeat_interleave"


def check_repeat_kv(candidate) -> bool:
    """Check ``repeat_kv(x, n_rep)``: (B, H_kv, T, d) -> (B, H_kv * n_rep, T, d), key/value head g copied to
    heads ``g * n_rep .. (g + 1) * n_rep - 1``, written without ``repeat_interleave``."""
    specs = [("x (1, 2, 3, 4), n_rep=3", (1, 2, 3, 4), 3, 7), ("x (2, 4, 5, 8), n_rep=2", (2, 4, 5, 8), 2, 8),
             ("x (2, 3, 2, 2), n_rep=1 (plain multi-head)", (2, 3, 2, 2), 1, 9),
             ("x (1, 1, 4, 6), n_rep=4 (multi-query)", (1, 1, 4, 6), 4, 10)]

    def make(shape, n_rep, seed) -> Callable[[], None]:
        def run() -> None:
            x = torch.randn(shape, generator=_generator(seed))
            expected = x.repeat_interleave(n_rep, dim=1)
            with _forbid(NO_INTERLEAVE, (torch, "repeat_interleave"), (Tensor, "repeat_interleave")):
                out = _call(candidate, x.clone(), n_rep)
            got = _require_tensor(out, expected, "output", shape_hint="(B, H_kv * n_rep, T, d): the heads are "
                                                                      "dimension 1")
            _compare_values(got, expected, atol=0, rtol=0, known_mistakes=[
                (x.repeat(1, n_rep, 1, 1), "x.repeat tiles the whole group of heads (0, 1, 0, 1); each head must "
                                           "be copied n_rep times in a row (0, 0, 1, 1)"),
            ], default_hint="x[:, :, None].expand(B, H_kv, n_rep, T, d).reshape(B, H_kv * n_rep, T, d)",
                what="output")
        return run

    return _run_cases("check_repeat_kv", [
        _Case(label, make(*spec), "the function is called as repeat_kv(x, n_rep)") for label, *spec in specs])
