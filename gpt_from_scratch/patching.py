"""Chapter 13 — activation patching on the book's ``GPT``: one head's output ``z`` moved
between a clean and a corrupted run (``ablation``'s helpers read and replace it).

Patching runs in two directions (Heimersheim and Nanda, 2024). *Denoising* moves a head's output
from the clean run into the corrupted one: a head scores high when its clean output alone
suffices to bring the answer back. *Noising* moves it from the corrupted run into the clean one,
which is resample ablation (``ablation.ablate_heads``) with the corrupted inputs as reference: a
head scores high when the answer needs it.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .ablation import checked_head, checked_heads, head_outputs, replaced_logits
from .interp import check_model, check_token_ids, run_with_hooks
from .utils import check_int

DIRECTIONS = ("denoise", "noise")
GAP_NOISE = 1e-5  # a clean–corrupted gap this small relative to the metric: float32 noise
MIN_ROWS = 10  # the fewest rows a bootstrap resamples (``bootstrap_rows``)


def patch_head(model: nn.Module, corrupted: Tensor, clean_z: Tensor, layer: int,
               head: int) -> Tensor:
    """Logits (B, T, V) of the run on ``corrupted`` with one head's output taken from the clean
    run: ``clean_z`` is ``blocks.{layer}.attn.z`` read on the clean inputs, (B, T, H, d_k)."""
    check_model(model)
    layer, head = checked_head(model, layer, head)
    H = model.blocks[0].attn.n_heads
    d_k = model.blocks[0].attn.c_proj.in_features // H
    if not (isinstance(clean_z, Tensor) and isinstance(corrupted, Tensor)):
        raise ValueError(f"clean_z and corrupted are a {type(clean_z).__name__} and a "
                         f"{type(corrupted).__name__}: pass tensors (clean_z as read by "
                         "run_with_hooks, corrupted as token ids)")
    if clean_z.shape != (*corrupted.shape, H, d_k):
        raise ValueError(f"clean_z has shape {tuple(clean_z.shape)}, expected (B, T, H, d_k) "
                         f"= {(*corrupted.shape, H, d_k)}: read blocks.{layer}.attn.z on the "
                         "clean inputs, which must align position by position with the "
                         "corrupted ones")
    if not clean_z.is_floating_point():
        raise ValueError(f"clean_z holds {clean_z.dtype}: pass the head outputs "
                         f"blocks.{layer}.attn.z as run_with_hooks reads them (floats)")
    if not torch.isfinite(clean_z).all():
        raise ValueError("clean_z holds NaN or inf: read it from a clean run whose "
                         "activations are finite")
    return replaced_logits(model, corrupted, {(layer, head): clean_z[:, :, head]})


def _scalar(metric: Callable[[Tensor], Tensor]) -> Callable[[Tensor], float]:
    """``metric``, checked on each call to return one number."""
    def one(logits: Tensor) -> float:
        value = metric(logits)
        if isinstance(value, Tensor) and value.numel() != 1:
            raise ValueError(f"metric returned a tensor of shape {tuple(value.shape)}: it "
                             "must return one number; average it (e.g. .mean())")
        if isinstance(value, bool) or not isinstance(value, (numbers.Real, Tensor)):
            raise ValueError(f"metric returned {value!r:.40} (a {type(value).__name__}): "
                             "it must return one number, a float or a one-element tensor")
        return float(value)
    return one


class _Patching:
    """The clean and corrupted runs once, then any set of heads patched in one direction."""

    def __init__(self, model, clean, corrupted, metric, direction: str):
        check_model(model)
        if direction not in DIRECTIONS:
            raise ValueError(f"direction={direction!r}: choose 'denoise' (clean outputs into the "
                             "corrupted run: what suffices) or 'noise' (corrupted outputs into "
                             "the clean run: what is needed)")
        if not (isinstance(clean, Tensor) and isinstance(corrupted, Tensor)
                and clean.shape == corrupted.shape):
            raise ValueError(f"clean and corrupted must be token ids of one shape, so that "
                             f"positions align, got {getattr(clean, 'shape', clean)} and "
                             f"{getattr(corrupted, 'shape', corrupted)}: pair inputs of equal "
                             "length")
        self.model, self.metric, self.direction = model, _scalar(metric), direction
        self.into, source = (corrupted, clean) if direction == "denoise" else (clean, corrupted)
        self.z = head_outputs(model, source, range(len(model.blocks)))
        self.clean = self.metric(run_with_hooks(model, clean)[0])
        self.corrupt = self.metric(run_with_hooks(model, corrupted)[0])
        if not (math.isfinite(self.clean) and math.isfinite(self.corrupt)):
            raise ValueError(f"metric is {self.clean} on clean and {self.corrupt} on corrupted "
                             "inputs: it must return a finite number; check it on the logits, "
                             "e.g. that its mask selects a position and that it reads no -inf")
        size = max(abs(self.clean), abs(self.corrupt))
        if abs(self.clean - self.corrupt) <= GAP_NOISE * size:
            raise ValueError(f"metric is {self.clean} on clean and {self.corrupt} on "
                             f"corrupted inputs: with no gap between them (within "
                             f"{GAP_NOISE} of their size, float32's rounding) there is "
                             "nothing to restore; corrupt what the metric measures")

    def logits(self, heads: list[tuple[int, int]]) -> Tensor:
        """Logits (B, T, V) of the run patched at every head of ``heads``."""
        values = {(l, h): self.z[l][:, :, h] for l, h in heads}
        return replaced_logits(self.model, self.into, values)

    def share(self, heads: list[tuple[int, int]]) -> float:
        m = self.metric(self.logits(heads))
        if not math.isfinite(m):
            named = ", ".join(f"L{l}H{h}" for l, h in heads)
            raise ValueError(f"metric is {m} with {named} patched ({self.direction}), "
                             "though finite on the clean and corrupted runs: check that it "
                             "reads no -inf or 0 / 0 on a mixed run")
        moved = m - self.corrupt if self.direction == "denoise" else self.clean - m
        return moved / (self.clean - self.corrupt)


def patching_shares(model: nn.Module, clean: Tensor, corrupted: Tensor,
                    metric: Callable[[Tensor], Tensor], direction: str = "denoise") -> Tensor:
    """Activation patching, head by head (L, H), as a share of the clean–corrupted gap in
    ``metric`` (logits -> a number), ``m(clean) − m(corrupted)``:

    - ``"denoise"``: the corrupted run with one head's output from the clean run; the share of
      the gap it restores, ``(m(patched) − m(corrupted)) / gap``. 1: its clean output suffices;
    - ``"noise"``: the clean run with one head's output from the corrupted run (resample
      ablation); the share it loses, ``(m(clean) − m(patched)) / gap``. 1: the answer needs it."""
    patching = _Patching(model, clean, corrupted, metric, direction)
    L, H = len(model.blocks), model.blocks[0].attn.n_heads
    return torch.tensor([[patching.share([(l, h)]) for h in range(H)] for l in range(L)])


def group_share(model: nn.Module, clean: Tensor, corrupted: Tensor,
                metric: Callable[[Tensor], Tensor], heads: Sequence[tuple[int, int]],
                direction: str = "denoise") -> float:
    """The share of the gap (as ``patching_shares``) when every head of ``heads`` is patched at
    once: compared with the sum of their single shares, it tells heads that overlap from heads
    that need each other."""
    check_model(model)
    heads = checked_heads(model, heads)
    return _Patching(model, clean, corrupted, metric, direction).share(heads)


def bootstrap_rows(B: int, n: int = 1000, seed: int = 0) -> Tensor:
    """(n, B): ``n`` resamples of ``B`` rows drawn with replacement (the bootstrap), by a
    generator seeded with ``seed``: the same rows for the same ``(B, n, seed)``, so that
    statistics of one batch, resampled in separate calls, combine row for row. Fewer than
    ``MIN_ROWS`` rows are refused: a resample of a handful of rows repeats the same few,
    and its spread says little about the choice of rows."""
    B = check_int("bootstrap_rows", "B", B, minimum=1)
    n = check_int("bootstrap_rows", "n", n, minimum=2)
    seed = check_int("bootstrap_rows", "seed", seed)
    if B < MIN_ROWS:
        raise ValueError(f"bootstrap_rows: B={B} rows: a bootstrap needs at least "
                         f"{MIN_ROWS}, since with fewer the resamples repeat the same "
                         "handful of rows and their spread understates the error (with one "
                         f"row it is 0); pass {MIN_ROWS} rows or more")
    return torch.randint(0, B, (n, B), generator=torch.Generator().manual_seed(seed))


def row_logprobs(logits: Tensor, target: Tensor, mask: Tensor) -> Tensor:
    """(B,): each row's log-probability (nats) of ``target`` (B, T) summed over the
    positions where ``mask`` is True; ids outside the mask are never read (they may be
    -100)."""
    logp = F.log_softmax(logits.float(), dim=-1)
    logp = logp.gather(-1, target.where(mask, 0).long()[..., None])[..., 0]  # (B, T)
    return torch.where(mask, logp, 0.0).sum(-1)


def bootstrap_shares(model: nn.Module, clean: Tensor, corrupted: Tensor, target: Tensor,
                     mask: Tensor, groups: Sequence[Sequence[tuple[int, int]]],
                     direction: str = "denoise", n: int = 1000, seed: int = 0) -> Tensor:
    """(n, G): each of ``groups``' share of the gap (as ``group_share``, the metric
    ``mean_logprob(logits, target, mask)``), recomputed on ``n`` resamples of the B rows
    drawn with replacement (``bootstrap_rows``, at least ``MIN_ROWS`` rows). A column's
    standard deviation is its share's standard error over the choice of rows. The same
    ``seed`` draws the same rows, so the columns of two calls (say, one each way, or one
    per model on the same rows) combine row for row."""
    n = check_int("bootstrap_shares", "n", n, minimum=2)
    seed = check_int("bootstrap_shares", "seed", seed)
    if len(groups) == 0:
        raise ValueError("bootstrap_shares: groups is empty: pass at least one group of "
                         "(layer, head) pairs, e.g. [[(3, 1)]]")
    groups = [checked_heads(model, heads) for heads in groups]
    patching = _Patching(model, clean, corrupted,
                         lambda logits: mean_logprob(logits, target, mask), direction)
    rows = bootstrap_rows(len(clean), n, seed)  # (n, B)
    with torch.no_grad():
        C, K = (row_logprobs(run_with_hooks(model, x)[0], target, mask)
                for x in (clean, corrupted))  # (B,) each
    P = torch.stack([row_logprobs(patching.logits(heads), target, mask)
                     for heads in groups])  # (G, B)
    count = mask.sum(-1)[rows].sum(-1)  # (n,)
    if not (count > 0).all():
        raise ValueError("bootstrap_shares: a resample drew only rows where mask selects "
                         "no position: drop such rows from clean, corrupted, target, mask")
    c, k = C[rows].sum(-1) / count, K[rows].sum(-1) / count  # (n,): pooled, as the metric
    p = P[:, rows].sum(-1) / count  # (G, n)
    moved = p - k if direction == "denoise" else c - p
    return (moved / (c - k)).T


def mean_logprob(logits: Tensor, target: Tensor, mask: Tensor) -> Tensor:
    """The mean log-probability (nats) of ``target`` (B, T) at the positions where ``mask`` is
    True."""
    if not all(isinstance(x, Tensor) for x in (logits, target, mask)):
        got = ", ".join(type(x).__name__ for x in (logits, target, mask))
        raise ValueError(f"mean_logprob: logits, target and mask are a {got}: pass tensors "
                         "(B, T, V), (B, T) and (B, T) bool, e.g. model(idx)[0] as logits")
    if target.shape != logits.shape[:-1] or mask.shape != target.shape or mask.dtype != torch.bool:
        raise ValueError(f"logits {tuple(logits.shape)}, target {tuple(target.shape)} and mask "
                         f"{tuple(mask.shape)} ({mask.dtype}) must be (B, T, V), (B, T), (B, T) "
                         "bool: target[b, t] is the token that follows position t")
    check_token_ids(target)
    if not mask.any():
        raise ValueError("mask selects no position, so the mean is 0 / 0: select at least one")
    V, chosen = logits.shape[-1], target[mask]
    bad = int((~torch.isfinite(logits[mask])).any(-1).sum())
    if bad:
        raise ValueError(f"mean_logprob: logits hold NaN or inf at {bad} of the "
                         f"{int(mask.sum())} positions mask selects, so their mean is not "
                         "a log-probability: pass the logits of a run whose activations "
                         "are finite (an edit that writes NaN spreads it to every logit)")
    if ((chosen < 0) | (chosen >= V)).any():
        raise ValueError(f"target holds ids in [{int(chosen.min())}, {int(chosen.max())}] "
                         f"where mask is True, outside the vocabulary [0, {V}): pass token "
                         "ids of the model's tokenizer")
    logp = F.log_softmax(logits[mask].float(), dim=-1)  # (N, V): only the masked positions
    return logp.gather(-1, chosen.long()[:, None]).mean()  # ids outside the mask unread
