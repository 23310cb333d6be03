"""Chapter 7, last section — measuring what makes training and generation fast.

``step_time`` times one training step (forward, backward, clipping, AdamW) in a given setting,
``step_times`` several settings in alternating rounds;
``decode_rate`` the tokens per second of ``generate``; ``copy_bandwidth`` the memory bandwidth a copy
reaches; ``host_reads`` counts the values a computation reads back (each a wait for a GPU);
``page_faults`` the pages the operating system maps in for it, which
``allocator.reuse_freed_memory`` saves. ``cell_seconds`` reads how long each cell of an executed
notebook took (the instructors' runtime table, ``python -m benchmarks chapters``).
"""

from __future__ import annotations

import statistics
import time
from datetime import datetime

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..attention import MultiHeadAttention
from ..generate import generate
from ..precision import autocast


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


def cell_seconds(notebook: dict) -> dict[int, float]:
    """``{cell index: seconds}`` for each code cell of an executed notebook (its JSON, as a dict) that
    recorded its times: nbclient writes each cell's start and end into the cell's metadata."""
    out = {}
    for index, cell in enumerate(notebook["cells"]):
        times = cell.get("metadata", {}).get("execution", {})
        if cell["cell_type"] == "code" and {"iopub.execute_input", "shell.execute_reply"} <= set(times):
            start, end = (datetime.fromisoformat(times[key].replace("Z", "+00:00"))
                          for key in ("iopub.execute_input", "shell.execute_reply"))
            out[index] = (end - start).total_seconds()
    return out
