"""Small helpers every chapter uses: seeding, device choice, determinism (defined in Chapter 1)."""

from __future__ import annotations

import hashlib
import os
import random
import tempfile
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


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; move it onto ``path`` only if the block succeeds.

    Readers never see a half-written file: a crash leaves the old file (or none) in place.
    Used for downloads (Chapter 1) and checkpoints (Chapter 6).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def sha256_file(path: str | os.PathLike, chunk_size: int = 1 << 20) -> str:
    """Hex SHA-256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(chunk_size), b""):
            digest.update(chunk)
    return digest.hexdigest()
