"""Chapter 7, last section — measuring what makes training and generation fast, and the sentences that say it.

``step_time`` times one training step (forward, backward, clipping, AdamW) in a given setting,
``step_times`` several settings in alternating rounds;
``decode_rate`` the tokens per second of ``generate``; ``copy_bandwidth`` the memory bandwidth a copy
reaches; ``host_reads`` counts the values a computation reads back (each a wait for a GPU);
``page_faults`` the pages the operating system maps in for it, which ``reuse_freed_memory`` saves.
``speedups_prose``, ``allocator_prose`` and ``bandwidth_prose`` turn the measurements into the chapter's
sentences, so what the text says (faster, slower) always matches the numbers of the run.
"""

from __future__ import annotations

import ctypes
import mmap
import platform
import statistics
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .attention import MultiHeadAttention
from .generate import generate
from .precision import autocast


def synchronize(device) -> None:
    """Wait until the GPU has finished the work queued so far (nothing to wait for on the CPU): a GPU runs
    asynchronously, so a timer read without this measures only the launching."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


class _ReadCounter(TorchDispatchMode):
    def __init__(self, device: str | None):
        super().__init__()
        self.device, self.count = device, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default:  # .item(), bool(t), int(t)
            self.count += self.device is None or args[0].device.type == self.device
        return func(*args, **(kwargs or {}))


def host_reads(fn, device: str | None = None) -> int:
    """How many numbers ``fn()`` reads back from its tensors (``.item()``, ``bool(t)``, ``int(t)``, an
    ``if`` on a tensor); with ``device`` (``"cuda"``), only those read from tensors on it. On a GPU each
    one waits until all the work queued before it has run. Counted on any device, the CPU included;
    not seen: reads made inside a kernel's C++ (``torch.multinomial``'s), and whole copies (``.cpu()``)."""
    with _ReadCounter(None if device is None else torch.device(device).type) as counter:
        fn()
    return counter.count


def page_faults(fn) -> int | None:
    """How many pages the operating system had to map in while ``fn()`` ran: its minor page faults, each
    a fresh page (4 KiB on most systems) zeroed before first use. None where the count is not kept
    (Windows)."""
    try:
        import resource  # Unix only
    except ImportError:
        return None
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    fn()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def reuse_freed_memory(limit: int = 1 << 30) -> bool:
    """Let the C allocator keep freed blocks of up to ``limit`` bytes for reuse (Linux's glibc only).

    glibc's ``malloc`` hands a block above its mmap threshold (at most 32 MiB by default) back to the
    operating system as soon as it is freed. A training step on GPT-2's 50,257 tokens allocates its
    logits, their log-softmax and both gradients, 100 MB each at batch 8 x 64, so every step maps
    those pages in afresh: a page fault and a zeroed page per 4 KiB. With both thresholds at ``limit``
    the blocks stay in the heap, and once it has grown to hold them (within a few steps) every step
    reuses them. The results are bit for bit the same; the process may hold up to ``limit`` bytes of
    freed memory. The setting is process-wide and stays (``mallopt`` cannot be read back). Returns
    True where it applied, False on other systems (macOS' and Windows' allocators are not configured
    this way).
    """
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL("libc.so.6")
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # from <malloc.h>
    return bool(libc.mallopt(M_MMAP_THRESHOLD, limit)) and bool(libc.mallopt(M_TRIM_THRESHOLD, limit))


def _timed(fn, device) -> float:
    """Seconds of one call of ``fn()``, the GPU's queue drained before and after."""
    synchronize(device)
    start = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - start


def median_time(fn, repeats: int = 5, device="cpu") -> float:
    """Median seconds of ``fn()`` over ``repeats`` calls, after one untimed warm-up call."""
    fn()
    return statistics.median(_timed(fn, device) for _ in range(repeats))


def _step(model, x, y, precision: str = "fp32", fused: bool | None = None, sdpa: bool | None = None):
    """One training step of ``model`` on ``(x, y)``, as a function: forward, backward, clipping,
    AdamW (fused or not). ``sdpa`` True or False sets every attention's ``fast`` for the step
    (False: attention written out) and puts it back after; None leaves the model as it is."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=fused)
    attentions = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]

    def step() -> None:
        saved = [attention.fast for attention in attentions]
        if sdpa is not None:
            for attention in attentions:
                attention.fast = sdpa
        try:
            with autocast(precision, x.device):
                _, loss = model(x, y)  # mean cross-entropy, computed in float32
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
        finally:
            for attention, fast in zip(attentions, saved):
                attention.fast = fast

    return step


def step_time(model, x, y, precision: str = "fp32", fused: bool | None = None, repeats: int = 5) -> float:
    """Median seconds of one training step of ``model`` on the batch ``(x, y)`` (B, T), in ``precision``
    (``"fp32"``, ``"bf16"``, ``"fp16"`` without scaler: for timing only), with fused AdamW or not.
    The loss is the model's (``model(x, y)``), as in ``train``."""
    return median_time(_step(model, x, y, precision, fused), repeats, x.device)


def step_times(model, x, y, settings: dict[str, dict], rounds: int = 5) -> dict[str, float]:
    """Median seconds of one training step in each setting, ``{name: options}`` with the options
    ``precision``, ``fused`` and ``sdpa`` (see ``_step``), timed in alternating rounds: a moment when
    the machine is busy slows every setting alike, not only the one being timed then."""
    steps = {name: _step(model, x, y, **options) for name, options in settings.items()}
    for step in steps.values():
        step()  # warm-up
    times = {name: [] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            times[name].append(_timed(step, x.device))
    return {name: statistics.median(values) for name, values in times.items()}


def decode_rate(model, prompt, n: int, repeats: int = 3, **options) -> float:
    """Tokens per second of ``generate(model, prompt, n, greedy=True, **options)`` (median of ``repeats``)."""
    return n / median_time(lambda: generate(model, prompt, n, greedy=True, **options), repeats, prompt.device)


def copy_bandwidth(device="cpu", n_bytes: int = 1 << 28) -> float:
    """Bytes per second a copy of ``n_bytes`` moves on ``device`` (read once and written once: 2 x n_bytes)."""
    src = torch.ones(n_bytes // 4, device=device)
    dst = torch.empty_like(src)
    return 2 * n_bytes / median_time(lambda: dst.copy_(src), 3, device)


def _ratio_words(before: float, after: float) -> str:
    ratio = before / after
    if ratio >= 1.05:
        return f"{ratio:.1f}x faster"
    if ratio <= 0.95:
        return f"slower ({1 / ratio:.1f}x the time)"
    return "about as fast (within 5%)"


def speedups_prose(rows: dict[str, tuple[float, float]], device: str) -> str:
    """One sentence per measured technique: ``rows`` maps a name to ``(seconds before, seconds after)``."""
    parts = [f"{name}: {after * 1e3:.1f} ms against {before * 1e3:.1f} ms, {_ratio_words(before, after)}"
             for name, (before, after) in rows.items()]
    slower = [name for name, (before, after) in rows.items() if before / after <= 0.95]
    where = _where(device)
    text = f"Measured in this run on the {where}: " + "; ".join(parts) + "."
    if slower:
        text += f" Not every technique pays everywhere: {', '.join(slower)} did not help on this {where}."
        if device == "cpu" and any("bf16" in name for name in slower):
            text += (" On this CPU, converting to and from bfloat16 costs more than the narrower numbers save; "
                     "on a GPU, bf16 products run on the tensor cores (the FULL_RUN branch measures it).")
    return text


def allocator_prose(rows: dict[str, tuple[float, int | None]], applied: bool) -> str:
    """What ``reuse_freed_memory`` changed: ``rows`` maps "before" and "after" to ``(seconds of a pass,
    page faults of a pass)``; ``applied`` is what the call returned."""
    (t0, f0), (t1, f1) = rows["before"], rows["after"]

    def faults(n: int | None) -> str:
        if n is None:
            return "page faults not counted on this system"
        if n == 0:
            return "no page faults"
        return f"{n:,} page faults ({n * mmap.PAGESIZE / 1e6:,.0f} MB mapped in afresh)"

    if not applied:
        return (f"Measured in this run: {t0 * 1e3:.0f} ms a pass, {faults(f0)}. This system's C allocator is "
                "not Linux's glibc, so `reuse_freed_memory()` changed nothing here.")
    return (f"Measured in this run: a pass took {t0 * 1e3:.0f} ms with {faults(f0)} under `malloc`'s defaults, and "
            f"{t1 * 1e3:.0f} ms with {faults(f1)} once freed memory is reused: "
            f"{_ratio_words(t0, t1)}, for the same arithmetic.")


def _where(device: str) -> str:
    return "CPU" if torch.device(device).type == "cpu" else f"GPU ({device})"


def bandwidth_prose(n_params: int, bytes_per_param: int, bandwidth: float, rate: float, device: str) -> str:
    """The batch-1 decoding limit: every token reads every weight, so tokens/s <= bandwidth / weight bytes."""
    weight_bytes = n_params * bytes_per_param
    limit = bandwidth / weight_bytes
    return (f"Each new token reads all {n_params / 1e6:.0f} million weights, {weight_bytes / 1e6:.0f} MB at "
            f"{bytes_per_param} bytes each. A copy on this {_where(device)} moved {bandwidth / 1e9:.1f} GB/s, so no "
            f"batch-1 decoder can exceed about {limit:,.1f} tokens/s here; ours reached {rate:,.1f}, "
            f"{rate / limit:.0%} of that limit.")
