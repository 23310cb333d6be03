"""Chapter 13 — ablation on the book's ``GPT``: a head's output ``z`` (``blocks.{l}.attn.z``,
read and edited with ``interp.run_with_hooks``) replaced by zeros, by its mean over the
positions that play the same role, or by its value on other inputs (``ablate_heads``). The
helpers that read and replace head outputs serve ``patching`` too.
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from .interp import Edit, check_model, run_with_hooks

ABLATIONS = ("zero", "mean", "resample")
PAD_ROLE = -1  # in ``roles``: a position left out of every mean and left as it is


def _whole(x) -> int | None:
    """``x`` as a Python int if it is a whole number (a NumPy int or a one-element integer
    tensor too), else None (bools are not numbers of heads)."""
    if isinstance(x, bool) or (isinstance(x, Tensor) and x.dtype == torch.bool):
        return None
    try:
        return operator.index(x)
    except TypeError:
        return None


def checked_head(model: nn.Module, layer: int, head: int) -> tuple[int, int]:
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


def checked_heads(model: nn.Module, heads) -> list[tuple[int, int]]:
    """``heads`` as a list of ``(layer, head)`` pairs of Python ints, or a ValueError."""
    try:
        pairs = None if isinstance(heads, (dict, str)) else [tuple(pair) for pair in heads]
    except TypeError:  # heads=(0, 1): one pair, whose numbers are not pairs
        pairs = None
    if pairs is None or not pairs or any(len(pair) != 2 for pair in pairs):
        raise ValueError(f"heads={heads!r} must be a non-empty list of (layer, head) pairs: "
                         "for one head pass a list of one pair, e.g. heads=[(0, 1)] for head 1 "
                         "of layer 0")
    return [checked_head(model, layer, head) for layer, head in pairs]


def _checked_value(name: str, value, shape: tuple[int, ...]) -> Tensor | float:
    """A head's replacement: a finite number, or a finite float tensor of exactly ``shape``
    (B, T, d_k); anything else (a shape that would broadcast, NaN) is refused."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ValueError(f"replaced_logits: the value for {name} is {value!r}: pass a "
                             "finite number, e.g. 0.0 for zero ablation")
        return float(value)
    if not isinstance(value, Tensor) or tuple(value.shape) != shape:
        got = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
        raise ValueError(f"replaced_logits: the value for {name} has shape {got}, the "
                         f"head's output (B, T, d_k) = {shape}: pass a number or a tensor "
                         "of exactly that shape (one that would broadcast is refused: "
                         "expand it yourself if that is what you mean)")
    if not value.is_floating_point():
        raise ValueError(f"replaced_logits: the value for {name} holds {value.dtype}, not "
                         "floats: pass a head's output as read (floats), e.g. "
                         "value.float()")
    if not torch.isfinite(value).all():
        raise ValueError(f"replaced_logits: the value for {name} holds NaN or inf: pass "
                         "finite values, e.g. a head's output read from a finite run")
    return value


def replaced_logits(model: nn.Module, idx: Tensor,
                    values: dict[tuple[int, int], Tensor | float],
                    where: Tensor | None = None) -> Tensor:
    """Logits (B, T, V) of ``model`` on ``idx`` (B, T) with each head's output ``z``
    (B, T, d_k) set to ``values[(layer, head)]`` (a number, or a tensor of exactly that
    shape) where ``where`` (B, T, bool) is True (everywhere if None)."""
    check_model(model)
    if not isinstance(idx, Tensor) or idx.dim() != 2 or idx.numel() == 0:
        got = tuple(idx.shape) if isinstance(idx, Tensor) else type(idx).__name__
        raise ValueError(f"replaced_logits: idx has shape {got}: pass token ids (B, T) "
                         "with at least one row and one position")
    if not isinstance(values, dict) or not values:
        raise ValueError(f"replaced_logits: values={values!r:.60} must be a non-empty dict "
                         "{(layer, head): value}: for the run with nothing replaced, call "
                         "the model itself")
    if where is not None and (not isinstance(where, Tensor) or where.dtype != torch.bool
                              or where.shape != idx.shape):
        got = (f"{tuple(where.shape)} {where.dtype}" if isinstance(where, Tensor)
               else type(where).__name__)
        raise ValueError(f"replaced_logits: where is {got}, idx {tuple(idx.shape)}: pass a "
                         "bool tensor of idx's shape (B, T), True where the heads are "
                         "replaced, or None for every position")
    d_k = model.blocks[0].attn.c_proj.in_features // model.blocks[0].attn.n_heads
    by_layer: dict[int, list[tuple[int, Tensor | float]]] = {}
    for key, value in values.items():
        layer, head = checked_head(model, *_pair(key))
        value = _checked_value(f"L{layer}H{head}", value, (*idx.shape, d_k))
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


def _pair(key) -> tuple:
    """A key of ``values`` as (layer, head), or a ValueError."""
    try:
        layer, head = key
    except (TypeError, ValueError):
        raise ValueError(f"replaced_logits: the key {key!r} is not a (layer, head) pair: "
                         "key values by pairs, e.g. {(0, 1): 0.0}") from None
    return layer, head


def head_outputs(model: nn.Module, idx: Tensor, layers) -> dict[int, Tensor]:
    """Each layer's head outputs ``z`` (B, T, H, d_k) in the run on ``idx``."""
    L = len(model.blocks)
    try:
        wanted = [_whole(layer) for layer in layers]
    except TypeError:
        wanted = None
    if not wanted or any(l is None or not 0 <= l < L for l in wanted):
        raise ValueError(f"head_outputs: layers={layers!r:.60} must be a non-empty list of "
                         f"layer numbers in 0..{L - 1}: for one layer pass a list, e.g. "
                         "[1]")
    names = {layer: f"blocks.{layer}.attn.z" for layer in sorted(set(wanted))}
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
    if not z.is_floating_point():
        raise ValueError(f"role_means: z holds {z.dtype}, not floats: pass a head's output "
                         "as read (floats), e.g. z.float()")
    if not torch.isfinite(z).all():
        raise ValueError("role_means: z holds NaN or inf, which would spread to every mean "
                         "of its role: pass the output of a run whose activations are "
                         "finite")
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
    heads = checked_heads(model, heads)
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
        return replaced_logits(model, idx, {head: 0.0 for head in heads})
    roles = _check_roles(roles, idx) if how == "mean" else None
    where = None if roles is None else roles >= 0
    z = head_outputs(model, idx if reference is None else reference, [l for l, _ in heads])
    own = reference is None  # the mean of the other positions of each role
    values = {(l, h): z[l][:, :, h] if how == "resample"
              else role_means(z[l][:, :, h], roles, exclude_self=own) for l, h in heads}
    return replaced_logits(model, idx, values, where)
