"""Chapter 16 — tiled attention: FlashAttention's forward pass in plain PyTorch, exact.

Attention written out (Chapter 4) builds the whole ``T_q x T_k`` matrix of scores before
its softmax. ``tiled_attention`` never does: for each block of queries it walks the blocks
of keys and folds each block of scores into a running softmax (``online_softmax_step``),
keeping per query row the largest score ``m`` so far and the sum ``l`` of ``exp(s - m)``
(Milakov and Gimelshein 2018's online normalizer) and the output ``acc``, rescaled the same
way. FlashAttention (Dao et al. 2022, Algorithm 1) runs this loop with the keys outside
and normalizes the output at every step; this is FlashAttention-2's form (Dao 2023):
queries outside, keys inside, ``acc`` unnormalized until the last block. The result is the
same softmax, not an approximation: the tests check it against
``F.scaled_dot_product_attention`` to 1e-12 in float64. What tiling saves is memory, one
block of scores instead of all of them (``attention_memory``, measured by
``measure_peak_bytes``; the tests show the working set beyond the output is the same at
every T); speed comes only when a GPU kernel keeps the blocks in its fast on-chip memory,
which plain PyTorch cannot do.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor
from torch.profiler import ProfilerActivity, profile

from .utils import check_int


def online_softmax_step(m: Tensor, l: Tensor, acc: Tensor, scores: Tensor,
                        v_block: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Fold one block of scores into a running softmax, returning the new ``m, l, acc``
    (Chapter 16).

    Per query row, ``m`` (..., Q, 1) is the largest score seen so far, ``l`` (..., Q, 1) the
    sum of ``exp(s - m)`` over the scores seen, ``acc`` (..., Q, d_v) the sum of
    ``exp(s - m) * v``. ``scores`` (..., Q, K) are each row's next K scores (``-inf`` where
    masked), ``v_block`` (..., K, d_v) their values. When the maximum grows, the old sums
    were taken against a smaller ``m``: both are scaled by ``exp(m_old - m_new)`` before the
    block is added. After the last block, ``acc / l`` is ``softmax(scores) @ v`` over all
    the blocks and ``m + log(l)`` their log-sum-exp. Start from ``m = -inf``, ``l = 0``,
    ``acc = 0``; a row's first block must hold a finite score (``-inf - (-inf)`` is NaN).
    """
    m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))  # (..., Q, 1)
    rescale = torch.exp(m - m_new)  # (..., Q, 1): 0 at the first block, where m = -inf
    p = torch.exp(scores - m_new)  # (..., Q, K), each in [0, 1]
    l_new = rescale * l + p.sum(dim=-1, keepdim=True)  # (..., Q, 1)
    acc_new = rescale * acc + p @ v_block  # (..., Q, d_v)
    return m_new, l_new, acc_new


CHECK_ROWS = 64  # positions whose finiteness _check_inputs checks at once


def _check_inputs(q: Tensor, k: Tensor, v: Tensor, causal: bool) -> None:
    """A TypeError or ValueError naming what is wrong with ``q, k, v`` and the fix."""
    if not isinstance(causal, bool):
        raise TypeError(f"tiled_attention: causal={causal!r} must be True or False, got "
                        f"a {type(causal).__name__}: pass causal=True for a decoder")
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, Tensor):
            raise TypeError(f"tiled_attention: {name} must be a torch.Tensor of shape "
                            f"(B, H, T, d), got {type(x).__name__}")
        if x.dim() != 4:
            raise ValueError(f"tiled_attention: {name} has shape {tuple(x.shape)}, not "
                             "(B, H, T, d): split the heads first (split_heads)")
        if not x.is_floating_point() or x.dtype != q.dtype:
            raise TypeError(f"tiled_attention: q, k, v must share one floating dtype, got "
                            f"{q.dtype}, {k.dtype}, {v.dtype}: convert, e.g. k.to(q.dtype)")
    if not q.shape[:2] == k.shape[:2] == v.shape[:2]:
        raise ValueError(f"tiled_attention: q {tuple(q.shape)}, k {tuple(k.shape)} and "
                         f"v {tuple(v.shape)} must share the batch and heads (B, H)")
    if q.size(-1) != k.size(-1) or k.size(2) != v.size(2):
        raise ValueError(f"tiled_attention: q {tuple(q.shape)} and k {tuple(k.shape)} must "
                         f"share the head size d, k and v {tuple(v.shape)} the keys T_k")
    T_q, T_k = q.size(2), k.size(2)
    if causal and T_q > T_k:
        raise ValueError(f"tiled_attention: causal with T_q={T_q} queries but T_k={T_k} "
                         "keys; the queries are the last T_q positions: pass T_k >= T_q")
    if T_k == 0 and T_q > 0:
        raise ValueError(f"tiled_attention: {T_q} queries and no keys (T_k=0): a softmax "
                         "over nothing is undefined; pass at least one key")
    for name, x in (("q", q), ("k", k), ("v", v)):
        # One block of rows at a time: a check of all T x d at once would need more memory
        # than the tiled loop itself.
        if not all(torch.isfinite(x[:, :, i:i + CHECK_ROWS]).all()
                   for i in range(0, x.size(2), CHECK_ROWS)):
            bad = int((~torch.isfinite(x)).sum())
            raise ValueError(f"tiled_attention: {name} holds {bad} NaN or infinite "
                             "value(s); attention of them is undefined: find their source")


def tiled_attention(q: Tensor, k: Tensor, v: Tensor, causal: bool = True,
                    block_q: int = 64, block_k: int = 64,
                    return_lse: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """``softmax(q kᵀ / sqrt(d)) @ v`` block by block, never all T_q x T_k scores at once
    (Chapter 16).

    ``q`` is (B, H, T_q, d), ``k`` (B, H, T_k, d), ``v`` (B, H, T_k, d_v); returns
    (B, H, T_q, d_v) in q's dtype and, with ``return_lse``, each row's log-sum-exp of its
    scaled, masked scores, (B, H, T_q) in float32 (float64 for float64): what a backward
    pass, or a decode that splits the keys among workers, needs to combine partial results.
    Blocks are ``block_q`` queries by ``block_k`` keys; the last of each may be shorter.
    float16 and bfloat16 inputs are computed in float32 throughout (FlashAttention keeps
    only the softmax's statistics and its sums in float32, and multiplies 16-bit blocks).

    ``causal=True`` aligns the queries with the LAST T_q keys, as a decode step after a KV
    cache does: query i is position ``T_k - T_q + i`` and sees keys ``0 .. T_k - T_q + i``.
    (For T_q < T_k, ``F.scaled_dot_product_attention(is_causal=True)`` aligns them with the
    first keys instead.) Every query sees key 0, so no row is ever fully masked. Key blocks
    wholly after a query block's last position are skipped; a block crossing the diagonal
    is masked inside.

    T_q = 0 gives empty tensors. Refused, with the fix: non-float or mixed dtypes, shapes
    that do not fit, causal with T_q > T_k, no keys, NaN or infinite inputs (what
    ``F.scaled_dot_product_attention`` returns for those depends on its backend).
    """
    _check_inputs(q, k, v, causal)
    block_q = check_int("tiled_attention", "block_q", block_q, minimum=1)
    block_k = check_int("tiled_attention", "block_k", block_k, minimum=1)
    B, H, T_q, d = q.shape
    T_k, d_v = k.size(2), v.size(-1)
    work = torch.promote_types(q.dtype, torch.float32)  # float32, or float64 for float64
    offset = T_k - T_q  # causal: query i is position offset + i
    out = q.new_empty(B, H, T_q, d_v)
    lse = q.new_empty(B, H, T_q, dtype=work)
    for q_start in range(0, T_q, block_q):
        q_end = min(q_start + block_q, T_q)
        # scaling the Q x d queries once costs less than scaling each Q x K block of scores
        q_block = q[:, :, q_start:q_end].to(work) / math.sqrt(d)  # (B, H, Q, d)
        m = q_block.new_full((B, H, q_end - q_start, 1), float("-inf"))  # (B, H, Q, 1)
        l = q_block.new_zeros(B, H, q_end - q_start, 1)  # (B, H, Q, 1)
        acc = q_block.new_zeros(B, H, q_end - q_start, d_v)  # (B, H, Q, d_v)
        k_stop = offset + q_end if causal else T_k  # causal: no key after the last query
        for k_start in range(0, k_stop, block_k):
            k_end = min(k_start + block_k, T_k)
            k_block = k[:, :, k_start:k_end].to(work)  # (B, H, K, d)
            scores = q_block @ k_block.transpose(-2, -1)  # (B, H, Q, K)
            if causal and k_end - 1 > offset + q_start:  # a key here follows a query
                q_pos = torch.arange(q_start, q_end, device=q.device) + offset  # (Q,)
                k_pos = torch.arange(k_start, k_end, device=q.device)  # (K,)
                after = k_pos > q_pos[:, None]  # (Q, K): the key follows the query
                scores = scores.masked_fill(after, float("-inf"))
            v_block = v[:, :, k_start:k_end].to(work)  # (B, H, K, d_v)
            m, l, acc = online_softmax_step(m, l, acc, scores, v_block)
        out[:, :, q_start:q_end] = acc / l
        lse[:, :, q_start:q_end] = (m + torch.log(l)).squeeze(-1)
    return (out, lse) if return_lse else out


@dataclass
class AttentionMemory:
    """Bytes of attention's working memory, beyond its inputs and output (Chapter 16)."""

    naive_bytes: int  # the T x T scores of the written-out attention
    tiled_bytes: int  # one block's scores, scaled queries, acc, m and l


def attention_memory(T: int, d: int, block_q: int, block_k: int, B: int = 1, H: int = 1,
                     dtype_bytes: int = 4) -> AttentionMemory:
    """What naive and tiled self-attention of T tokens keep, by formula (Chapter 16).

    The written-out attention keeps ``B H T^2`` scores; the tiled one, for the block it is
    on, ``B H Q K`` scores and ``B H Q (2 d + 2)`` numbers more: the scaled queries,
    ``acc``, ``m`` and ``l`` (Q = min(block_q, T), K = min(block_k, T)). The first grows
    with T squared, the second not at all. At its peak each holds a few times its number:
    the softmax beside the scores; a block's ``scores - m`` and its exponential beside the
    scores. ``measure_peak_bytes`` measures the peaks; the tests keep them within 1 to 3
    times these numbers.
    """
    owner = "attention_memory"
    T, d = check_int(owner, "T", T, minimum=1), check_int(owner, "d", d, minimum=1)
    Q = min(check_int(owner, "block_q", block_q, minimum=1), T)
    K = min(check_int(owner, "block_k", block_k, minimum=1), T)
    B, H = check_int(owner, "B", B, minimum=1), check_int(owner, "H", H, minimum=1)
    dtype_bytes = check_int(owner, "dtype_bytes", dtype_bytes, minimum=1)
    return AttentionMemory(naive_bytes=B * H * T * T * dtype_bytes,
                           tiled_bytes=B * H * (Q * K + Q * (2 * d + 2)) * dtype_bytes)


def measure_peak_bytes(fn: Callable[[], object]) -> int:
    """The most bytes of CPU tensors alive at once while ``fn()`` runs, above those alive
    before (its result counted), from ``torch.profiler``'s memory events (Chapter 16).

    With ``profile_memory=True`` PyTorch's CPU allocator reports each allocation and free
    of a tensor's memory with its running total, ``Total Allocated``. Each total is checked
    to be the one before plus the event's own bytes, so the events are in the allocator's
    order; where they are not, a RuntimeError says so rather than guess. Memory that is not
    a tensor's (a library's scratch space, Python objects) is not seen. On a GPU,
    ``torch.cuda.reset_peak_memory_stats()`` and ``torch.cuda.max_memory_allocated()``
    answer the same question.
    """
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "trace.json")
        prof.export_chrome_trace(path)
        with open(path, encoding="utf-8") as f:
            trace = json.load(f)
    events = [e for e in trace["traceEvents"]  # Device Type 0 is the CPU
              if e.get("name") == "[memory]" and e["args"].get("Device Type") == 0]
    events.sort(key=lambda e: (e["ts"], e["args"].get("Ev Idx", 0)))
    totals = [e["args"]["Total Allocated"] for e in events]
    changes = [e["args"]["Bytes"] for e in events]
    if any(totals[i] != totals[i - 1] + changes[i] for i in range(1, len(totals))):
        raise RuntimeError("measure_peak_bytes: the profiler's memory events do not add "
                           "up in this torch; the peak cannot be read from them")
    return max(totals) - (totals[0] - changes[0]) if totals else 0
