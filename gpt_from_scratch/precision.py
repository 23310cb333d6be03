"""Chapters 6 and 7 — mixed precision: which number format the matrix products run in.

``TrainConfig.precision`` names one of ``PRECISIONS``:

* ``"fp32"``: everything in float32 (on a GPU the matrix products use TF32, ``train`` sets that);
* ``"bf16"``: ``torch.autocast`` runs the matrix products in bfloat16 (float32's 8 exponent bits,
  7 mantissa bits), the weights, the optimizer and the loss stay float32; no scaling needed;
* ``"fp16"``: autocast to float16 (5 exponent bits), whose small range makes small gradients
  underflow to 0, so the loss is multiplied by a ``torch.amp.GradScaler`` before the backward pass
  (and the gradients divided back before clipping); for GPUs that only emulate bfloat16, such as Colab's T4;
* ``"auto"``: on a CUDA GPU bf16 where it computes in it natively (Ampere and later), else fp16;
  anywhere else fp32 (so the CPU runs exactly as without this setting).
"""

from __future__ import annotations

import contextlib
import functools

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def check_precision(precision) -> str:
    """``precision`` if it is one of ``PRECISIONS``, else a ValueError naming the value and the fix."""
    if not isinstance(precision, str) or precision not in PRECISIONS:
        raise ValueError(
            f"TrainConfig.precision={precision!r} is not one of {PRECISIONS}: use 'auto' (bf16 or fp16 on a "
            "GPU, fp32 on the CPU), 'fp32' (exact), 'bf16' (autocast) or 'fp16' (autocast and a gradient scaler)"
        )
    return precision


def native_bf16(device: str | torch.device) -> bool:
    """Whether the CUDA GPU ``device`` computes in bfloat16 natively: Ampere (compute capability 8.0)
    and later, and AMD's GPUs. Older ones, such as Colab's T4 (7.5), only emulate it: slowly, and
    ``torch.compile`` skips a bfloat16 graph there (with a warning) and runs it eagerly.
    ``torch.cuda.is_bf16_supported()`` says yes to those too, so it cannot decide this."""
    return torch.version.hip is not None or torch.cuda.get_device_capability(torch.device(device))[0] >= 8


def resolve_precision(precision: str, device: str | torch.device) -> str:
    """The precision ``train`` uses on ``device``: ``"auto"`` becomes ``"fp32"``, ``"bf16"`` or ``"fp16"``.

    ``"auto"``: bf16 on a CUDA GPU that computes in it natively (``native_bf16``: Ampere and later),
    fp16 on an older one, fp32 anywhere else. An explicit setting is kept, except what the device
    cannot do (or only emulates): a ValueError says so.
    """
    precision = check_precision(precision)
    kind = torch.device(device).type
    if precision == "auto":
        if kind != "cuda":
            return "fp32"
        return "bf16" if native_bf16(device) else "fp16"
    if precision == "bf16" and kind == "cuda" and not native_bf16(device):
        major, minor = torch.cuda.get_device_capability(torch.device(device))
        raise ValueError(f"precision='bf16' on {device}: this GPU (compute capability {major}.{minor}) only "
                         "emulates bfloat16, slowly, and torch.compile cannot compile it. Use "
                         "precision='fp16' (with a gradient scaler) or 'auto', which picks it")
    if precision != "fp32" and kind not in ("cuda", "cpu"):
        raise ValueError(f"precision={precision!r} is supported on 'cuda' and 'cpu', not on {device!r}: "
                         "use precision='fp32' there")
    if precision == "fp16" and kind == "cpu" and not hasattr(torch.amp, "GradScaler"):
        raise ValueError("precision='fp16' on the CPU needs torch.amp.GradScaler (torch >= 2.3): it is meant "
                         "for GPUs without bfloat16; on the CPU use 'bf16' or 'fp32'")
    return precision


def autocast(precision: str, device: str | torch.device):
    """The context the forward pass runs in: ``torch.autocast`` for bf16 and fp16, nothing
    for fp32. bf16 on a CPU whose fused attention cannot run in it here
    (``cpu_bf16_attention_fails``) also routes attention to PyTorch's written-out kernel:
    the same function, computed another way.
    """
    if precision == "fp32":
        return contextlib.nullcontext()
    kind = torch.device(device).type
    if precision == "bf16" and kind == "cpu" and cpu_bf16_attention_fails():
        return WrittenOutAttention()
    return torch.autocast(device_type=kind, dtype=DTYPES[precision])


class WrittenOutAttention:
    """``torch.autocast`` to bfloat16 on the CPU, with attention on PyTorch's written-out
    kernel (``SDPBackend.MATH``); like ``torch.autocast``, entered again after each exit."""

    def __enter__(self):
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(torch.autocast(device_type="cpu", dtype=torch.bfloat16))
        self._stack.enter_context(sdpa_kernel(SDPBackend.MATH))
        return self

    def __exit__(self, *exc) -> bool:
        return self._stack.__exit__(*exc)


@functools.cache
def cpu_bf16_attention_fails() -> bool:
    """Whether PyTorch's fused CPU attention fails in bfloat16 here. On a CPU with bfloat16
    units (AMX) it packs its blocks with a routine built only into the AVX-512 kernels, so
    with ``ATEN_CPU_CAPABILITY`` set below avx512 it raises "pack_vnni2 is only supported
    when avx512 is supported" (torch 2.13) once queries and keys both reach 64 positions.
    One attention over GPT-2's 1,024 positions on the fused kernel tells, whatever kernel
    the caller chose; a fused kernel that fails otherwise is left to the call that meets it.
    """
    q = torch.zeros(1, 1, 1024, 64, dtype=torch.bfloat16)  # (B, H, T, d_k)
    try:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            F.scaled_dot_product_attention(q, q, q, is_causal=True)
    except RuntimeError as error:
        return "pack_vnni2" in str(error)
    return False


def grad_scaler(precision: str, device: str | torch.device) -> torch.amp.GradScaler | None:
    """A ``torch.amp.GradScaler`` for fp16 (None otherwise: bf16 has float32's range, fp32 needs none).

    On the CPU, fp16 autocast is slow (it is emulated): it is there to test the GPU's code path.
    """
    if precision != "fp16":
        return None
    return torch.amp.GradScaler(torch.device(device).type)
