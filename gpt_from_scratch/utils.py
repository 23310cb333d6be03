"""Small helpers every chapter uses: seeding, device choice, determinism (defined in Chapter 1)."""

from __future__ import annotations

import hashlib
import math
import numbers
import os
import random
import tempfile
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch


def seed_everything(seed: int = 1337) -> torch.Generator:
    """Seed Python, NumPy and PyTorch; return a ``torch.Generator`` seeded the same way.

    Passing the returned generator to functions that sample (``get_batch``, ``generate``)
    makes a cell reproducible on its own, whatever ran before it.
    """
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def default_device() -> str:
    """``"cuda"`` when a GPU is available, then ``"mps"`` on Apple silicon, else ``"cpu"``."""
    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def set_deterministic(enabled: bool = True) -> None:
    """Ask PyTorch for deterministic kernels (slower on GPU; a no-op for most CPU ops).

    On CUDA this also sets ``CUBLAS_WORKSPACE_CONFIG``, which deterministic matmuls need.
    """
    if enabled:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(enabled, warn_only=True)
    if torch.backends.cudnn.is_available():
        torch.backends.cudnn.benchmark = not enabled
        torch.backends.cudnn.deterministic = enabled


def _umask() -> int:
    """The process's umask (os.umask can only be read by setting it, so it is set straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def fsync_dir(path: str | os.PathLike) -> None:
    """Make a rename or a new entry in folder ``path`` durable (a no-op where folders cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # Windows
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; move it onto ``path`` only if the block succeeds.

    Readers never see a half-written file: a crash leaves the old file (or none) in place. The new
    file is flushed to disk (``fsync``) before the rename, and the rename after it, so a power cut
    cannot leave an empty file either. It gets the mode a plain ``open(path, "w")`` would (0666 minus
    the umask), not ``mkstemp``'s 0600. Used for downloads (Chapter 1) and checkpoints (Chapter 6).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


@contextmanager
def eval_mode(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """``model.eval()`` inside the block; afterwards every submodule is back in the mode it had (Chapter 6).

    Putting back ``model.training`` alone is not enough: a wrapper made around a model in eval mode
    is itself in training mode (every new ``nn.Module`` is), and ``wrapper.train(True)`` would switch
    the dropout of the model inside on for good.
    """
    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        yield model
    finally:
        for module, training in modes:
            module.training = training


@contextmanager
def skip_token_id_checks(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """A ``GPT``'s forward skips its token-id checks inside the block (Chapter 7's last section).

    Each check reads a boolean back, which on a GPU waits for all the work queued before it. For
    callers that checked the ids already: ``train`` checks every batch on the host, ``generate`` the
    prompt (the new tokens are the model's own). A model without the checks is left as it is.
    """
    was = getattr(model, "check_token_ids", None)
    if was is not None:
        model.check_token_ids = False
    try:
        yield model
    finally:
        if was is not None:
            model.check_token_ids = was


@contextmanager
def float32_matmul_precision(precision: str) -> Iterator[None]:
    """``torch.set_float32_matmul_precision(precision)`` inside the block only (Chapter 7's last
    section): ``"high"`` lets float32 matrix products use TF32 on a GPU. Afterwards, also after an
    error, the setting is back, so that code run later (a parity check, say) is not made less exact."""
    was = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(was)


def _others_running() -> int | None:
    """Threads of other programs running now: Linux's count of running threads (``/proc/stat``), this
    one aside, the least of five looks 10 ms apart (a look can catch a thread between two waits).
    ``None`` where the count cannot be read."""
    seen = []
    for _ in range(5):
        try:
            with open("/proc/stat", encoding="ascii") as f:
                line = next(line for line in f if line.startswith("procs_running "))
        except (OSError, StopIteration):
            return None
        seen.append(int(line.split()[1]) - 1)
        time.sleep(0.01)
    return max(0, min(seen))


@contextmanager
def free_threads(device: str) -> Iterator[None]:
    """On a CPU whose cores other programs keep busy, compute on the cores they leave free, inside the
    block only (``train`` uses it; Chapter 6). Only when torch's OpenMP threads spin while they wait:
    torch was imported before this package, which asks them to spin only briefly
    (``GOMP_SPINCOUNT``) only before torch loads. A spinning thread that waits for one the system has paused keeps a core
    from it: a step then takes many times as long (measured: 4 to 80 times on two busy cores). The
    fewer threads give other last bits than the usual count, and a warning says so."""
    from . import SPINNING_THREADS

    threads = torch.get_num_threads()
    on_cpu = torch.device(device).type == "cpu"
    others = _others_running() if SPINNING_THREADS and on_cpu and threads > 1 else None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    wanted = threads if others is None else max(1, min(threads, cores - others))
    if wanted == threads:
        yield
        return
    warnings.warn(f"{others} other thread(s) keep the cores busy, and torch's {threads} threads "
                  "spin while they wait (torch was imported before gpt_from_scratch): computing "
                  f"on {wanted} thread(s) until this ends, with other last bits. To keep every "
                  "thread, import gpt_from_scratch before torch, or start Python with "
                  "GOMP_SPINCOUNT=1000", stacklevel=3)
    torch.set_num_threads(wanted)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def check_int(owner: str, name: str, value, minimum: int | None = None, optional: bool = False) -> int | None:
    """``value`` as a Python int (NumPy integers accepted), else a ValueError naming ``owner.name``.

    ``owner`` is the class being built (``"GPTConfig"``); ``optional`` allows None. Chapters 5 and 6.
    """
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        hint = f"pass {name}={int(value)}" if isinstance(value, float) and value.is_integer() else (
            f"pass a whole number, e.g. {name}=4")
        raise ValueError(f"{owner}.{name}={value!r} must be an int ({type(value).__name__} given): {hint}")
    value = int(value)
    if minimum is not None and value < minimum:
        rule = "a positive int" if minimum == 1 else f"an int >= {minimum}"
        raise ValueError(f"{owner}.{name}={value} must be {rule}")
    return value


def check_float(owner: str, name: str, value, low: float | None = None, high: float | None = None,
                low_open: bool = False, high_open: bool = True, optional: bool = False) -> float | None:
    """``value`` as a finite Python float within ``[low, high)`` (ends as set by ``*_open``), else a
    ValueError naming ``owner.name``, the rule and the fix. Ints and NumPy numbers are accepted."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        hint = f"{name}={value.strip()}" if isinstance(value, str) else f"{name}=0.1"
        raise ValueError(f"{owner}.{name}={value!r} must be a number ({type(value).__name__} given): "
                         f"pass e.g. {hint}")
    value = float(value)
    below = low is not None and (value <= low if low_open else value < low)
    above = high is not None and (value >= high if high_open else value > high)
    if not math.isfinite(value) or below or above:
        span = (f"{'(' if low_open or low is None else '['}{'-inf' if low is None else f'{low:g}'}, "
                f"{'inf' if high is None else f'{high:g}'}{')' if high_open or high is None else ']'}")
        raise ValueError(f"{owner}.{name}={value!r} must be in {span}, a finite number")
    return value


def sha256_file(path: str | os.PathLike, chunk_size: int = 1 << 20) -> str:
    """Hex SHA-256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(chunk_size), b""):
            digest.update(chunk)
    return digest.hexdigest()
