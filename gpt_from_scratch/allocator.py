"""Chapter 7 — training on a big vocabulary without page faults: let the C allocator keep freed memory.

A step on GPT-2's 50,257 tokens frees and allocates the same 100 MB tensors every step; glibc hands
them back to the operating system each time, and every step then pays a page fault per 4 KiB to map
them in again. ``reuse_freed_memory`` keeps them (Chapter 7, Section 7.8, measures it).
"""

from __future__ import annotations

import ctypes
import platform


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
