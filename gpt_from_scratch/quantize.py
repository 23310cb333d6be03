"""Chapter 16 — weight-only quantization: int8 and int4 weights, proven close to float32.

The weight W (out, in) of an ``nn.Linear`` is stored as small integers and a scale per
row, or per group of ``group_size`` numbers of a row (absmax quantization):

    s = max|W_group| / q_max,    q = clamp(round(W / s), -q_max, q_max),    W ≈ q s,

with q_max = 2^(bits - 1) - 1: 127 for int8, 7 for int4. The grid is symmetric: 0 is stored
exactly, and -128 (or -8) is left out so that q and -q are both there. Rounding moves each
number by at most half a step, |W - q s| <= s / 2: the tests assert this bound, and that
PyTorch's own per-channel observer gives the same s and q. Only weights are quantized:
activations, embeddings, norms and biases stay in floating point. ``quantize_model`` returns
a quantized copy of a model, ``model_bytes`` counts what it saves, ``weight_error`` what it
changes, and Chapter 11's bits per byte what it costs (``tests/test_quantize.py``).
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .lora import lora_layers
from .utils import check_int

BITS = (4, 8)  # int4 is stored two numbers to a byte, int8 one
EPS = torch.finfo(torch.float32).eps  # the smallest scale, as in PyTorch's observers


def q_max(bits: int) -> int:
    """The largest stored integer, 2^(bits-1) - 1: 127 for int8, 7 for int4 (Chapter 16)."""
    return 2 ** (bits - 1) - 1


def pack_int4(values: Tensor) -> Tensor:
    """Two 4-bit integers to a byte (Chapter 16): int8 (out, in) in [-8, 7] -> uint8
    (out, in / 2). Each number is shifted to [0, 15] (+8); byte j holds column 2j in its low
    four bits and column 2j + 1 in its high four bits."""
    u = (values + 8).to(torch.uint8)  # (out, in), each in [0, 15]
    return u[:, 0::2] | (u[:, 1::2] << 4)  # (out, in / 2)


def unpack_int4(packed: Tensor) -> Tensor:
    """The inverse of ``pack_int4`` (Chapter 16): uint8 (out, in / 2) -> int8 (out, in)."""
    low, high = packed & 0x0F, packed >> 4  # 2 x (out, in / 2)
    return torch.stack([low, high], dim=-1).flatten(1).to(torch.int8) - 8  # (out, in)


@dataclass
class QuantizedWeight:
    """A weight W (out, in) as integers and scales, W ≈ q s (Chapter 16).

    ``q``: int8 (out, in) for 8 bits; for 4 bits uint8 (out, in / 2), two numbers to a byte
    (``pack_int4``). ``scale``: float32 (out, G), one per group of ``group_size`` numbers of
    a row, G = in / group_size (``group_size`` None: one per row, G = 1).
    """

    q: Tensor
    scale: Tensor
    bits: int
    group_size: int | None

    @property
    def shape(self) -> tuple[int, int]:
        """(out, in) of the weight this stands for."""
        out_features, n = self.q.shape
        return out_features, n * 2 if self.bits == 4 else n

    def values(self) -> Tensor:
        """The integers q as int8 (out, in), in [-q_max, q_max] (unpacked for 4 bits)."""
        return unpack_int4(self.q) if self.bits == 4 else self.q

    def dequantize(self) -> Tensor:
        """q s as float32 (out, in): see ``dequantize``."""
        return dequantize(self)

    @property
    def nbytes(self) -> int:
        """Bytes held: the integers (int4 packed, half a byte each) and the scales."""
        return self.q.nbytes + self.scale.nbytes


def _checked_weight(w, name: str) -> Tensor:
    """``w`` detached, if a 2-D floating-point tensor of finite numbers; else an error."""
    if not isinstance(w, Tensor):
        raise TypeError(f"absmax_quantize: {name} is a {type(w).__name__}, not a "
                        "torch.Tensor: pass a weight such as linear.weight")
    if not w.is_floating_point():
        raise TypeError(f"absmax_quantize: {name} holds {w.dtype}, not floating-point "
                        "numbers: pass a float weight (a quantized model's are int8)")
    if w.dim() != 2 or w.numel() == 0:
        raise ValueError(f"absmax_quantize: {name} has shape {tuple(w.shape)}: pass a 2-D "
                         "(out, in) weight with at least one number, as nn.Linear holds")
    if not torch.isfinite(w).all():
        raise ValueError(f"absmax_quantize: {name} holds nan or inf, which no scale can "
                         "represent: fix the model (did its training diverge?) first")
    return w.detach()


def absmax_quantize(w: Tensor, bits: int = 8, group_size: int | None = None,
                    name: str = "w") -> QuantizedWeight:
    """Quantize ``w`` (out, in) symmetrically, one scale per row or per ``group_size``
    numbers of a row (Chapter 16): s = max|w| / q_max, q = clamp(round(w / s), ±q_max).

    Computed in float32. A group of zeros (or of numbers all below q_max eps) gets s = eps,
    float32's machine epsilon, as PyTorch's observers do: nothing divides by zero, and zeros
    stay exact zeros. ``name`` names ``w`` in errors (``quantize_model`` gives the layer's).
    """
    w = _checked_weight(w, name)
    bits = check_int("absmax_quantize", "bits", bits)
    if bits not in BITS:
        raise ValueError(f"absmax_quantize: bits={bits} is not supported: choose one of "
                         f"{BITS} (int4 or int8)")
    out_features, in_features = w.shape
    size = in_features if group_size is None else check_int(
        "absmax_quantize", "group_size", group_size, minimum=1)
    if in_features % size:
        divisors = [d for d in range(1, in_features + 1) if in_features % d == 0]
        raise ValueError(f"absmax_quantize: group_size {size} does not divide in_features "
                         f"{in_features} of {name}; pick a divisor of {in_features}: "
                         f"{divisors}")
    if bits == 4 and in_features % 2:
        raise ValueError(f"absmax_quantize: {name} has an odd in_features {in_features}, "
                         "and bits=4 packs two numbers to a byte along a row: use bits=8")
    G = in_features // size
    groups = w.float().reshape(out_features, G, size)  # (out, G, group_size)
    scale = (groups.abs().amax(dim=-1) / q_max(bits)).clamp(min=EPS)  # (out, G)
    q = (groups / scale[..., None]).round().clamp(-q_max(bits), q_max(bits))
    q = q.to(torch.int8).reshape(out_features, in_features)  # (out, in)
    return QuantizedWeight(pack_int4(q) if bits == 4 else q, scale, bits, group_size)


def dequantize(qw: QuantizedWeight) -> Tensor:
    """q s as float32 (out, in): each group of a row times its scale (Chapter 16)."""
    out_features, in_features = qw.shape
    G = qw.scale.shape[1]
    q = qw.values().float().reshape(out_features, G, in_features // G)  # (out, G, size)
    return (q * qw.scale[..., None].float()).reshape(out_features, in_features)


@dataclass
class WeightError:
    """How far a dequantized weight Ŵ is from W (Chapter 16)."""

    max_abs: float  # max |W - Ŵ|
    relative: float  # ||W - Ŵ||_F / ||W||_F


def weight_error(w: Tensor, qw: QuantizedWeight | Tensor) -> WeightError:
    """The largest absolute error and the relative Frobenius error of ``qw`` (a
    ``QuantizedWeight`` or a dequantized tensor) against ``w``, in float64 (Chapter 16)."""
    approx = qw.dequantize() if isinstance(qw, QuantizedWeight) else qw
    if tuple(approx.shape) != tuple(w.shape):
        raise ValueError(f"weight_error: w has shape {tuple(w.shape)}, its approximation "
                         f"{tuple(approx.shape)}: compare a weight with its quantization")
    if not (torch.isfinite(w).all() and torch.isfinite(approx).all()):
        raise ValueError("weight_error: w or its approximation holds NaN or inf: the error "
                         "is undefined; check torch.isfinite(w).all() before quantizing")
    diff = w.detach().double() - approx.detach().double()
    if not diff.any():
        return WeightError(0.0, 0.0)
    if not w.any():
        raise ValueError("weight_error: w is all zeros and its approximation is not, so "
                         "the relative error ||W - Ŵ|| / ||W|| divides by 0 and is "
                         f"undefined; the absolute error is max|Ŵ| = "
                         f"{approx.abs().max().item():.3g}: pass a weight with a nonzero "
                         "entry")
    relative = (diff.norm() / w.detach().double().norm()).item()
    return WeightError(diff.abs().max().item(), relative)


class QuantizedLinear(nn.Module):
    """An ``nn.Linear`` whose weight is stored quantized (Chapter 16): y = x (q s)^T + b.

    Forward dequantizes the weight and runs one float matmul. With one scale per row this
    equals, by algebra (torchao is not run here: its test skips where it is not
    installed), torchao's int8 weight-only form y = (x q^T) s + b, the scales applied to the
    outputs after a matmul on the integers: row o of q s is s_o times row o of q, so
    (x (q s)^T)_o = s_o (x q^T)_o. Group scales change along a row, so they must be applied
    before the matmul. ``q`` and ``scale`` are buffers (``.to(device)`` moves them, the
    state dict holds them); the bias is kept as it was, frozen: the layer is for inference.
    """

    def __init__(self, qw: QuantizedWeight, bias: Tensor | None = None):
        super().__init__()
        self.out_features, self.in_features = qw.shape
        self.bits, self.group_size = qw.bits, qw.group_size
        self.register_buffer("q", qw.q)
        self.register_buffer("scale", qw.scale)
        if bias is None:
            self.register_parameter("bias", None)
        else:
            self.bias = nn.Parameter(bias.detach().clone(), requires_grad=False)

    @classmethod
    def from_linear(cls, linear: nn.Linear, bits: int = 8, group_size: int | None = None,
                    name: str = "weight") -> QuantizedLinear:
        """``linear`` with its weight quantized by ``absmax_quantize``, its bias copied."""
        return cls(absmax_quantize(linear.weight, bits, group_size, name), linear.bias)

    @property
    def quantized_weight(self) -> QuantizedWeight:
        """The stored weight as a ``QuantizedWeight`` (the same tensors, no copy)."""
        return QuantizedWeight(self.q, self.scale, self.bits, self.group_size)

    def forward(self, x: Tensor) -> Tensor:
        """(..., in) -> (..., out)."""
        W = dequantize(self.quantized_weight).to(x.dtype)  # (out, in)
        bias = None if self.bias is None else self.bias.to(x.dtype)
        return F.linear(x, W, bias)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bits={self.bits}, group_size={self.group_size}, "
                f"bias={self.bias is not None}")


def _tied(model: nn.Module) -> set[int]:
    """The ids of the parameters that two or more modules of ``model`` hold (tied ones)."""
    holders: dict[int, int] = {}
    for module in model.modules():
        for p in module.parameters(recurse=False):
            holders[id(p)] = holders.get(id(p), 0) + 1
    return {key for key, n in holders.items() if n > 1}


def _fresh_copy(model: nn.Module) -> nn.Module:
    """A deep copy of ``model`` without the static decoders that Chapter 7's
    ``fast.decoder_for`` keeps on it (built, perhaps compiled, for the float layers)."""
    store = model.__dict__.get("_static_decoders")
    return copy.deepcopy(model, {} if store is None else {id(store): {}})


def quantize_model(model: nn.Module, bits: int = 8, group_size: int | None = None,
                   skip: tuple[str, ...] = ()) -> nn.Module:
    """A copy of ``model`` with every ``nn.Linear`` replaced by a ``QuantizedLinear``
    (Chapter 16); ``model`` itself is left as it was.

    Kept in floating point: embeddings, norms, the layers named in ``skip`` (by full name,
    ``"blocks.0.attn.c_attn"``, or last part, ``"lm_head"``), and a Linear whose weight
    another module holds too: the GPT's ``lm_head``, tied to ``wte``. Quantizing it would
    break the tie and store that matrix twice, once in each precision. LoRA layers must be
    merged first (``merge_lora``); in the copy they become quantized Linears of the merged
    weights (the adapters, already added in, are dropped).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"quantize_model: model is a {type(model).__name__}: pass an "
                        "nn.Module")
    if isinstance(skip, str) or not all(isinstance(s, str) for s in skip):
        raise TypeError(f"quantize_model: skip={skip!r} must be a tuple of layer names, "
                        "e.g. skip=('lm_head',)")
    unmerged = [name for name, layer in lora_layers(model).items() if not layer.merged]
    if unmerged:
        raise ValueError(f"quantize_model: LoRA layer {unmerged[0]} is not merged: its "
                         "update B A would stay in float beside the quantized base; call "
                         "merge_lora(model) first, then quantize")
    new = _fresh_copy(model)
    for name, layer in lora_layers(new).items():  # merged: base.weight holds W + B A
        parent, _, child = name.rpartition(".")
        setattr(new.get_submodule(parent), child, layer.base)
    linears = {name: m for name, m in new.named_modules() if isinstance(m, nn.Linear)}
    unknown = [s for s in skip if not any(s in (n, n.rpartition(".")[2]) for n in linears)]
    if unknown:
        raise ValueError(f"quantize_model: skip names {unknown}, which no nn.Linear of the "
                         f"model is called; its Linear layers are e.g. {list(linears)[:4]}")
    tied = _tied(new)
    skipped = {name for name in linears if {name, name.rpartition(".")[2]} & set(skip)}
    chosen = {name: m for name, m in linears.items()
              if id(m.weight) not in tied and name not in skipped}
    if not chosen:
        raise ValueError(f"quantize_model: the model has no nn.Linear to quantize "
                         f"({len(linears)} found, all tied or skipped; a model quantized "
                         "already has none left): pass a model with Linear layers, or skip "
                         "fewer")
    for name, linear in chosen.items():
        parent, _, child = name.rpartition(".")
        quantized = QuantizedLinear.from_linear(linear, bits, group_size, f"{name}.weight")
        setattr(new.get_submodule(parent), child, quantized)
    return new


def model_bytes(model: nn.Module) -> int:
    """Bytes of ``model``'s parameters and buffers, each in its own dtype and counted once
    (a tied ``wte`` / ``lm_head`` once): an int8 integer is one byte, a packed int4 half
    (Chapter 16)."""
    return sum(t.nbytes for t in itertools.chain(model.parameters(), model.buffers()))
