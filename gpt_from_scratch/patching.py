"""Chapter 13 — ablation and activation patching on the book's ``GPT``: a head's output ``z``
(``blocks.{l}.attn.z``, read and edited with ``interp.run_with_hooks``) replaced by zeros, by its
mean over the positions that play the same role, or by its value on other inputs.

Patching runs in two directions (Heimersheim and Nanda, 2024). *Denoising* moves a head's output
from the clean run into the corrupted one: a head scores high when its clean output alone
suffices to bring the answer back. *Noising* moves it from the corrupted run into the clean one,
which is resample ablation with the corrupted inputs as reference: a head scores high when the
answer needs it.
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .interp import Edit, check_model, check_token_ids, run_with_hooks
from .utils import check_int

ABLATIONS = ("zero", "mean", "resample")
DIRECTIONS = ("denoise", "noise")
PAD_ROLE = -1  # in ``roles``: a position left out of every mean and left as it is
GAP_NOISE = 1e-5  # a clean–corrupted gap this small relative to the metric: float32 noise


def _whole(x) -> int | None:
    """``x`` as a Python int if it is a whole number (a NumPy int or a one-element integer
    tensor too), else None (bools are not numbers of heads)."""
    if isinstance(x, bool) or (isinstance(x, Tensor) and x.dtype == torch.bool):
        return None
    try:
        return operator.index(x)
    except TypeError:
        return None


def _head(model: nn.Module, layer: int, head: int) -> tuple[int, int]:
    """``(layer, head)`` as Python ints (NumPy ints and integer tensors accepted), or a
    ValueError."""
    L, H = len(model.blocks), model.blocks[0].attn.n_heads
    l, h = _whole(layer), _whole(head)
    if l is None or h is None:
        raise ValueError(f"head (layer={layer!r}, head={head!r}) is not a pair of whole "
                         "numbers: pass ints, e.g. (0, 1), or int(t) of a tensor's entries")
    if not (0 <= l < L and 0 <= h < H):
        raise ValueError(f"head (layer={l}, head={h}) does not exist: the model has "
                         f"layers 0..{L - 1} and heads 0..{H - 1}")
    return l, h


def _heads(model: nn.Module, heads) -> list[tuple[int, int]]:
    """``heads`` as a list of ``(layer, head)`` pairs of Python ints, or a ValueError."""
    try:
        pairs = None if isinstance(heads, (dict, str)) else [tuple(pair) for pair in heads]
    except TypeError:  # heads=(0, 1): one pair, whose numbers are not pairs
        pairs = None
    if pairs is None or not pairs or any(len(pair) != 2 for pair in pairs):
        raise ValueError(f"heads={heads!r} must be a non-empty list of (layer, head) pairs: "
                         "for one head pass a list of one pair, e.g. heads=[(0, 1)] for head 1 "
                         "of layer 0")
    return [_head(model, layer, head) for layer, head in pairs]


def _replaced(model: nn.Module, idx: Tensor, values: dict[tuple[int, int], Tensor | float],
              where: Tensor | None = None) -> Tensor:
    """Logits (B, T, V) of ``model`` on ``idx`` with each head's output ``z`` (B, T, d_k) set
    to ``values[(layer, head)]`` where ``where`` (B, T) is True (everywhere if None)."""
    by_layer: dict[int, list[tuple[int, Tensor | float]]] = {}
    for (layer, head), value in values.items():
        by_layer.setdefault(layer, []).append((head, value))

    def edit(replacements) -> Edit:
        def set_heads(z: Tensor) -> Tensor:  # z (B, T, H, d_k)
            z = z.clone()
            for head, value in replacements:
                if where is None:
                    z[:, :, head] = value
                else:
                    z[:, :, head] = torch.where(where[..., None], value, z[:, :, head])
            return z
        return set_heads
    edits = {f"blocks.{layer}.attn.z": edit(r) for layer, r in by_layer.items()}
    return run_with_hooks(model, idx, edit=edits)[0]


def _outputs(model: nn.Module, idx: Tensor, layers) -> dict[int, Tensor]:
    """Each layer's head outputs ``z`` (B, T, H, d_k) in the run on ``idx``."""
    names = {layer: f"blocks.{layer}.attn.z" for layer in sorted(set(layers))}
    cache = run_with_hooks(model, idx, read=list(names.values()))[1]
    return {layer: cache[name] for layer, name in names.items()}


def _check_roles(roles, idx: Tensor) -> Tensor:
    B, T = idx.shape
    if idx.numel() == 0:
        raise ValueError(f"roles for an input of shape {(B, T)}: there is nothing to "
                         "average; pass at least one row and one position")
    if roles is None:
        raise ValueError("mean ablation averages each position over the positions that play the "
                         "same role, and rows of different lengths do not line up position by "
                         "position: pass roles=, a (B, T) tensor of whole numbers, one per role, "
                         f"{PAD_ROLE} for padding (for rows that do line up, "
                         "roles=torch.arange(T).expand(B, T))")
    if not isinstance(roles, Tensor) or roles.shape != idx.shape:
        got = tuple(roles.shape) if isinstance(roles, Tensor) else type(roles).__name__
        raise ValueError(f"roles has shape {got}, idx {(B, T)}: pass one role per position of "
                         f"idx (and of reference), {PAD_ROLE} for padding")
    if roles.dtype == torch.bool or roles.is_floating_point() or roles.is_complex():
        raise ValueError(f"roles holds {roles.dtype}, not whole numbers: name each role with an "
                         f"integer (roles.long()), {PAD_ROLE} for padding")
    if int(roles.min()) < PAD_ROLE:
        raise ValueError(f"roles holds {int(roles.min())}: roles are whole numbers >= 0, and "
                         f"{PAD_ROLE} marks padding; renumber them")
    if not (roles >= 0).any():
        raise ValueError(f"roles marks every position {PAD_ROLE} (padding), so there is nothing "
                         "to average: give the positions to ablate a role >= 0")
    return roles.to(idx.device)


def role_means(z: Tensor, roles: Tensor, exclude_self: bool = False) -> Tensor:
    """(B, T, d_k): at each position, the mean of ``z`` (B, T, d_k) over every position of every
    row whose role (``roles``, B, T) is the same; padding (role -1) gets zeros. With
    ``exclude_self``, over the *other* positions of that role (leave-one-out), so that a
    position's own value is no part of what replaces it; a role held by one position alone
    then has no mean, and is refused."""
    if not isinstance(z, Tensor) or z.dim() != 3:
        got = tuple(z.shape) if isinstance(z, Tensor) else type(z).__name__
        raise ValueError(f"z has shape {got}: pass one head's output, (B, T, d_k)")
    roles = _check_roles(roles, z[..., 0])
    keep = roles >= 0
    ids, inverse = roles[keep].unique(return_inverse=True)
    sums = z.new_zeros(len(ids), z.shape[-1]).index_add_(0, inverse, z[keep])  # (R, d_k)
    counts = torch.bincount(inverse, minlength=len(ids)).to(z.dtype)  # (R,)
    means = torch.zeros_like(z)
    if not exclude_self:
        means[keep] = (sums / counts[:, None])[inverse]
        return means
    if (counts < 2).any():
        alone = ids[counts < 2].tolist()
        raise ValueError(f"role(s) {alone[:5]} hold one position each: leaving it out "
                         "leaves nothing to average; give each role at least two positions "
                         "(more rows), or pass reference= other inputs to average over")
    means[keep] = (sums[inverse] - z[keep]) / (counts[inverse, None] - 1)
    return means


def ablate_heads(model: nn.Module, idx: Tensor, heads: Sequence[tuple[int, int]],
                 how: str = "zero", reference: Tensor | None = None,
                 roles: Tensor | None = None) -> Tensor:
    """Logits (B, T, V) with the output ``z`` of each ``(layer, head)`` replaced:

    - ``"zero"``: by zeros;
    - ``"mean"``: at each position, by the head's mean output over the positions of
      ``reference`` (of ``idx``'s shape) that play the same role; without ``reference``,
      over the *other* positions of ``idx`` that play it (``role_means(...,
      exclude_self=True)``: a row's own output is no part of its mean). ``roles``
      (B, T) names each position's role with a whole number, the same for ``idx`` and
      ``reference``; -1 marks padding, left out of every mean and left as it is. ARENA's
      IOI exercises (``compute_means_by_template``) average over the sentences of one
      template, whose positions line up, as roles do here;
    - ``"resample"``: by its value in the run on ``reference`` (``idx``'s shape) at the same
      position. With the corrupted inputs as reference, this is noising (``patching_shares``)."""
    check_model(model)
    if how not in ABLATIONS:
        raise ValueError(f"how={how!r} is not an ablation: choose one of {ABLATIONS}")
    heads = _heads(model, heads)
    if not isinstance(idx, Tensor) or idx.dim() != 2 or idx.numel() == 0:
        got = tuple(idx.shape) if isinstance(idx, Tensor) else type(idx).__name__
        raise ValueError(f"idx has shape {got}: pass token ids (B, T) with at least one row "
                         "and one position")
    if how == "zero" and (reference is not None or roles is not None):
        raise ValueError("zero ablation reads no reference and no roles: leave them out, or "
                         "choose how='mean' or how='resample'")
    if how == "resample" and roles is not None:
        raise ValueError("roles= is for mean ablation: resampling takes each position's output "
                         "from the same position of reference; leave roles out")
    if how != "zero" and reference is not None and (not isinstance(reference, Tensor)
                                                     or reference.shape != idx.shape):
        got = tuple(reference.shape) if isinstance(reference, Tensor) else type(reference).__name__
        raise ValueError(f"reference has shape {got}, idx {tuple(idx.shape)}: {how} ablation "
                         "reads reference position by position; pass token ids of idx's shape")
    if how == "resample" and reference is None:
        raise ValueError(f"resample ablation takes each head's output from other inputs: pass "
                         f"reference= token ids of idx's shape {tuple(idx.shape)}")
    if how == "zero":
        return _replaced(model, idx, {head: 0.0 for head in heads})
    roles = _check_roles(roles, idx) if how == "mean" else None
    where = None if roles is None else roles >= 0
    z = _outputs(model, idx if reference is None else reference, [l for l, _ in heads])
    own = reference is None  # the mean of the other positions of each role
    values = {(l, h): z[l][:, :, h] if how == "resample"
              else role_means(z[l][:, :, h], roles, exclude_self=own) for l, h in heads}
    return _replaced(model, idx, values, where)


def patch_head(model: nn.Module, corrupted: Tensor, clean_z: Tensor, layer: int,
               head: int) -> Tensor:
    """Logits (B, T, V) of the run on ``corrupted`` with one head's output taken from the clean
    run: ``clean_z`` is ``blocks.{layer}.attn.z`` read on the clean inputs, (B, T, H, d_k)."""
    check_model(model)
    layer, head = _head(model, layer, head)
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
    return _replaced(model, corrupted, {(layer, head): clean_z[:, :, head]})


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
        self.z = _outputs(model, source, range(len(model.blocks)))
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
        return _replaced(self.model, self.into, values)

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
    heads = _heads(model, heads)
    return _Patching(model, clean, corrupted, metric, direction).share(heads)


def bootstrap_shares(model: nn.Module, clean: Tensor, corrupted: Tensor, target: Tensor,
                     mask: Tensor, groups: Sequence[Sequence[tuple[int, int]]],
                     direction: str = "denoise", n: int = 1000, seed: int = 0) -> Tensor:
    """(n, G): each of ``groups``' share of the gap (as ``group_share``, the metric
    ``mean_logprob(logits, target, mask)``), recomputed on ``n`` resamples of the B rows
    drawn with replacement (the bootstrap). A column's standard deviation is its share's
    standard error over the choice of rows. The same ``seed`` draws the same rows, so the
    columns of two calls (say, one each way) combine row for row."""
    n = check_int("bootstrap_shares", "n", n, minimum=2)
    if len(groups) == 0:
        raise ValueError("bootstrap_shares: groups is empty: pass at least one group of "
                         "(layer, head) pairs, e.g. [[(3, 1)]]")
    groups = [_heads(model, heads) for heads in groups]
    patching = _Patching(model, clean, corrupted,
                         lambda logits: mean_logprob(logits, target, mask), direction)

    def row_sums(logits: Tensor) -> Tensor:  # (B,): log-probabilities summed over mask
        logp = F.log_softmax(logits.float(), dim=-1).gather(-1, target.long()[..., None])
        return torch.where(mask, logp[..., 0], 0.0).sum(-1)
    with torch.no_grad():
        C, K = (row_sums(run_with_hooks(model, x)[0]) for x in (clean, corrupted))  # (B,)
    P = torch.stack([row_sums(patching.logits(heads)) for heads in groups])  # (G, B)
    g = torch.Generator().manual_seed(seed)
    rows = torch.randint(0, len(C), (n, len(C)), generator=g)  # (n, B)
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
    if ((chosen < 0) | (chosen >= V)).any():
        raise ValueError(f"target holds ids in [{int(chosen.min())}, {int(chosen.max())}] "
                         f"where mask is True, outside the vocabulary [0, {V}): pass token "
                         "ids of the model's tokenizer")
    logp = F.log_softmax(logits[mask].float(), dim=-1)  # (N, V): only the masked positions
    return logp.gather(-1, chosen.long()[:, None]).mean()  # ids outside the mask unread
