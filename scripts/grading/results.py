"""The sandbox's results, read from its pipe into files the grader creates itself
(``O_EXCL``, ``O_NOFOLLOW``: no existing file is opened, no link followed), names and sizes
checked."""

from __future__ import annotations

import os
import re
import select
from pathlib import Path

RESULT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,80}\.[0-9]{1,3}\.(json|safetensors)")
MAX_RESULTS = 256 << 20  # bytes of one student's results read back


def _read(fd: int, size: int) -> bytes | None:
    """Exactly ``size`` bytes from ``fd`` within 60 s, or None."""
    data = bytearray()
    while len(data) < size:
        if not select.select([fd], [], [], 60)[0]:
            return None
        chunk = os.read(fd, min(size - len(data), 1 << 20))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def receive(fd: int, folder: Path) -> bool:
    """The runner's result frames into files of ``folder`` that this process creates itself
    (no existing file is opened, no link followed); False if the stream breaks its
    format."""
    total = 0
    while True:
        head = _read(fd, 2)
        if head is None:
            return False
        length = int.from_bytes(head, "big")
        if length == 0:
            return True
        name = _read(fd, length)
        size = _read(fd, 8)
        if name is None or size is None:
            return False
        name, size = name.decode("ascii", "replace"), int.from_bytes(size, "big")
        total += size
        if not RESULT.fullmatch(name) or total > MAX_RESULTS:
            return False
        data = _read(fd, size)
        if data is None:
            return False
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        with os.fdopen(os.open(folder / name, flags, 0o600), "wb") as f:
            f.write(data)
