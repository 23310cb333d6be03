"""Chapter 13 — looking inside a GPT: hooks, the logit lens, direct logit attribution, ablation and
activation patching, on the book's ``GPT`` as it is (PyTorch forward hooks, no second model class).

Activations are named as TransformerLens names them, less its ``hook_`` prefix, so that
``blocks.{l}.attn.z`` here is TransformerLens's ``blocks.{l}.attn.hook_z``:

=====================  ================  ==================================================
name                   shape             what it is
=====================  ================  ==================================================
``blocks.l.resid_pre``   (B, T, D)         the residual stream entering block ``l``
``blocks.l.attn.pattern`` (B, H, T, T)     softmax(q kᵀ / √d_k) with the causal mask
``blocks.l.attn.z``      (B, T, H, d_k)    each head's output ``pattern @ v``, before ``c_proj``
``blocks.l.attn_out``    (B, T, D)         what attention adds to the residual stream
``blocks.l.mlp_out``     (B, T, D)         what the MLP adds to the residual stream
``blocks.l.resid_post``  (B, T, D)         the residual stream leaving block ``l``
=====================  ================  ==================================================

``z`` is read where Chapter 8's Exercise 4 ablated a head: the merged head outputs entering
``c_proj``. Editing ``pattern`` recomputes ``z = pattern @ v`` from the edited pattern.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .lora import LoRALinear
from .model import GPT

POINTS = ("resid_pre", "attn.pattern", "attn.z", "attn_out", "mlp_out", "resid_post")
ABLATIONS = ("zero", "mean", "resample")
Edit = Callable[[Tensor], Tensor]  # an activation in, what the model uses instead out (same shape)
_NAME = re.compile(r"blocks\.(\d+)\.(.+)")


def hook_names(model: nn.Module) -> list[str]:
    """Every activation ``run_with_hooks`` can read or edit, block by block in ``POINTS`` order."""
    _check_gpt(model)
    return [f"blocks.{l}.{p}" for l in range(len(model.blocks)) for p in POINTS]


def _parse(model: nn.Module, name: str) -> tuple[int, str]:
    """``"blocks.2.attn.z"`` -> ``(2, "attn.z")``, or a ValueError naming the rule and the fix."""
    m = _NAME.fullmatch(name) if isinstance(name, str) else None
    L = len(model.blocks)
    if m is None or m.group(2) not in POINTS or int(m.group(1)) >= L:
        raise ValueError(f"unknown activation {name!r}: names are 'blocks.{{l}}.{{point}}' with l in "
                         f"0..{L - 1} and point one of {POINTS} (hook_names(model) lists them)")
    return int(m.group(1)), m.group(2)


def _check_gpt(model: nn.Module) -> None:
    """A ValueError unless ``model`` is the book's GPT (with or without LoRA layers)."""
    if isinstance(model, GPT):
        return
    fix = ("for GPT-2, hf_weights.from_hf(model) gives the book's GPT with its weights"
           if type(model).__module__.startswith("transformers") else
           "Chapter 10's Llama has no c_attn to hook and no LayerNorm shift to attribute: "
           "load its to_hf_state_dict() into transformers' LlamaForCausalLM")
    raise ValueError(f"expected the book's GPT (gpt_from_scratch.model.GPT: c_attn, "
                     f"c_proj, LayerNorm ln_f), got a {type(model).__name__}: {fix}; read "
                     "other architectures with TransformerLens (pip install "
                     "\"gpt-from-scratch-book[interp]\")")


def _check_model(model: nn.Module) -> None:
    _check_gpt(model)
    if model.training:
        raise ValueError("the model is in training mode, so dropout would change every activation at "
                         "random: call model.eval() first")


def _replace(name: str, old: Tensor, edit: Edit) -> Tensor:
    new = edit(old)
    if not isinstance(new, Tensor) or new.shape != old.shape:
        got = tuple(new.shape) if isinstance(new, Tensor) else type(new).__name__
        raise ValueError(f"the edit of {name} returned {got}, the activation has shape {tuple(old.shape)}: "
                         "return a tensor of the same shape (e.g. a modified clone)")
    return new


@torch.no_grad()
def run_with_hooks(model: nn.Module, idx: Tensor, read: Sequence[str] = (),
                   edit: dict[str, Edit] | None = None) -> tuple[Tensor, dict[str, Tensor]]:
    """Run ``model(idx)`` with hooks: return its logits (B, T, V) and the activations named in ``read``
    (``{name: tensor}``, as the model used them, after any edit), with each ``edit[name]`` applied:
    a function from the activation to what the model should use instead. The hooks are removed
    afterwards, even when the run fails."""
    _check_model(model)
    if isinstance(read, str):
        raise ValueError(f"read={read!r} is one string: pass a list of names, e.g. [{read!r}]")
    edit = dict(edit or {})
    wanted = {name: _parse(model, name) for name in [*read, *edit]}
    cache: dict[str, Tensor] = {}
    H = model.blocks[0].attn.n_heads
    qkv: dict[int, tuple[Tensor, Tensor]] = {}  # layer -> (pattern, v), where pattern is read or edited

    def visit(name: str, value: Tensor) -> Tensor:
        if name in edit:
            value = _replace(name, value, edit[name])
        if name in read:
            cache[name] = value.detach().clone()
        return value

    def pre_block(l):
        return lambda module, args: (visit(f"blocks.{l}.resid_pre", args[0]), *args[1:])

    def post(l, point):
        return lambda module, args, out: visit(f"blocks.{l}.{point}", out)

    def c_attn(l):
        def hook(module, args, out):  # out (B, T, 3D) -> q, k, v (B, H, T, d_k)
            q, k, v = (t.unflatten(-1, (H, -1)).transpose(1, 2) for t in out.chunk(3, dim=-1))
            T = q.shape[-2]
            scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, T, T)
            mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
            pattern = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            qkv[l] = (visit(f"blocks.{l}.attn.pattern", pattern), v)
        return hook

    def c_proj(l):
        def hook(module, args):  # args[0]: merged head outputs (B, T, D)
            merged = args[0]
            if f"blocks.{l}.attn.pattern" in edit:
                pattern, v = qkv[l]
                merged = (pattern @ v).transpose(1, 2).flatten(2)  # (B, H, T, d_k) -> (B, T, D)
            z = visit(f"blocks.{l}.attn.z", merged.unflatten(-1, (H, -1)))  # (B, T, H, d_k)
            return (z.flatten(2), *args[1:])
        return hook

    handles = []
    for l, block in ((l, model.blocks[l]) for l in sorted({l for l, _ in wanted.values()})):
        points = {p for name, (m, p) in wanted.items() if m == l}
        if "resid_pre" in points:
            handles.append(block.register_forward_pre_hook(pre_block(l)))
        for point, module in (("attn_out", block.attn), ("mlp_out", block.mlp), ("resid_post", block)):
            if point in points:
                handles.append(module.register_forward_hook(post(l, point)))
        if points & {"attn.pattern", "attn.z"}:
            handles.append(block.attn.c_proj.register_forward_pre_hook(c_proj(l)))
        if "attn.pattern" in points:
            handles.append(block.attn.c_attn.register_forward_hook(c_attn(l)))
    try:
        logits, _ = model(idx)
    finally:
        for handle in handles:
            handle.remove()
    return logits, cache


def logit_lens(model: nn.Module, idx: Tensor) -> Tensor:
    """The logit lens (nostalgebraist, 2020): the residual stream after each block read out as if it
    were the last, ``lm_head(ln_f(resid_post))``. Returns (n_layers, B, T, V); the last equals the
    model's logits."""
    _check_model(model)
    names = [f"blocks.{l}.resid_post" for l in range(len(model.blocks))]
    _, cache = run_with_hooks(model, idx, read=names)
    with torch.no_grad():
        return torch.stack([model.lm_head(model.ln_f(cache[name])) for name in names])


@dataclass
class Attribution:
    """Direct logit attribution of one token per position (B, T): each part of the final residual
    stream, through ``ln_f`` with its scale σ frozen, and the unembedding. The parts add up to the
    logit: ``total() == logits.gather(-1, target)``."""

    heads: Tensor  # (L, H, B, T) each head's output z_h W_O_h
    mlps: Tensor  # (L, B, T) each MLP's output
    embed: Tensor  # (B, T) token and position embeddings
    bias: Tensor  # (B, T) the attention output biases b_O and ln_f's shift β

    def total(self) -> Tensor:
        return self.heads.sum((0, 1)) + self.mlps.sum(0) + self.embed + self.bias


def direct_logit_attribution(model: nn.Module, idx: Tensor, target: Tensor) -> Attribution:
    """How much each head, MLP and the embeddings add directly to the logit of ``target`` (B, T) at each
    position. ``ln_f(x) = γ (x − mean x) / σ + β`` is linear in ``x`` once σ (the position's standard
    deviation) is fixed, so each part ``c`` of ``x`` contributes ``γ (c − mean c) / σ · W_U[target]``."""
    _check_model(model)
    L, ln, V = len(model.blocks), model.ln_f, model.config.vocab_size
    if not isinstance(target, Tensor) or target.shape != idx.shape:
        raise ValueError(f"target must be a tensor of token ids of idx's shape {tuple(idx.shape)}, got "
                         f"{tuple(target.shape) if isinstance(target, Tensor) else type(target).__name__}: "
                         "for the next token at each position pass idx's shifted ids")
    if ((target < 0) | (target >= V)).any():
        raise ValueError(f"target holds ids in [{int(target.min())}, {int(target.max())}], "
                         f"outside the vocabulary [0, {V}): pass token ids of the model's "
                         "tokenizer")
    names = ["blocks.0.resid_pre", f"blocks.{L - 1}.resid_post"]
    names += [f"blocks.{l}.{p}" for l in range(L) for p in ("attn.z", "mlp_out")]
    logits, cache = run_with_hooks(model, idx, read=names)
    x = cache[f"blocks.{L - 1}.resid_post"]  # (B, T, D)
    sigma = (x.var(-1, unbiased=False, keepdim=True) + ln.eps).sqrt()  # (B, T, 1)
    W_U = _weight(model.lm_head)[0]  # (V, D)
    u = W_U[target.long()] * ln.weight  # (B, T, D): γ ⊙ W_U[target]

    def through(c: Tensor) -> Tensor:  # (..., B, T, D) -> (..., B, T)
        return ((c - c.mean(-1, keepdim=True)) / sigma * u).sum(-1)

    with torch.no_grad():
        heads, mlps, b_O = [], [], torch.zeros_like(x[0, 0])
        for l, block in enumerate(model.blocks):
            W, b = _weight(block.attn.c_proj)
            W_O = W.T.unflatten(0, (block.attn.n_heads, -1))  # (H, d_k, D)
            heads.append(through(torch.einsum("bthk,hkd->hbtd", cache[f"blocks.{l}.attn.z"], W_O)))
            mlps.append(through(cache[f"blocks.{l}.mlp_out"]))
            if b is not None:
                b_O = b_O + b
        beta = 0.0 if ln.bias is None else W_U[target.long()] @ ln.bias  # (B, T)
        bias = through(b_O.expand_as(x)) + beta
        return Attribution(torch.stack(heads), torch.stack(mlps), through(cache["blocks.0.resid_pre"]), bias)


def _weight(linear: nn.Module) -> tuple[Tensor, Tensor | None]:
    """The weight and bias a projection applies: a LoRA layer's (Chapter 9) base weight plus
    its update ``(alpha / r) B A`` unless merged into it already."""
    if not isinstance(linear, LoRALinear):
        return linear.weight, linear.bias
    update = 0 if linear.merged else linear.delta_weight()
    return linear.base.weight + update, linear.base.bias


def _head(model: nn.Module, layer: int, head: int) -> tuple[int, int]:
    """``(layer, head)`` as Python ints (NumPy ints accepted), or a ValueError."""
    L, H = len(model.blocks), model.blocks[0].attn.n_heads
    whole = all(isinstance(x, numbers.Integral) and not isinstance(x, bool)
                for x in (layer, head))
    if not (whole and 0 <= layer < L and 0 <= head < H):
        raise ValueError(f"head (layer={layer!r}, head={head!r}) does not exist: the model has layers "
                         f"0..{L - 1} and heads 0..{H - 1}, each a whole number")
    return int(layer), int(head)


def _heads(model: nn.Module, heads) -> list[tuple[int, int]]:
    """``heads`` as a list of ``(layer, head)`` pairs of Python ints, or a ValueError."""
    try:
        pairs = [tuple(pair) for pair in heads]
    except TypeError:  # heads=(0, 1): one pair, whose numbers are not pairs
        pairs = None
    if pairs is None or any(len(pair) != 2 for pair in pairs):
        raise ValueError(f"heads={heads!r} must be a list of (layer, head) pairs: for one "
                         "head pass a list of one pair, e.g. heads=[(0, 1)] for head 1 of "
                         "layer 0")
    return [_head(model, layer, head) for layer, head in pairs]


def _set_head(head: int, source: Tensor) -> Edit:
    def edit(z: Tensor) -> Tensor:  # z (B, T, H, d_k)
        z = z.clone()
        z[:, :, head] = source
        return z
    return edit


def ablate_heads(model: nn.Module, idx: Tensor, heads: Sequence[tuple[int, int]], how: str = "zero",
                 reference: Tensor | None = None) -> Tensor:
    """Logits (B, T, V) with the output ``z`` of each ``(layer, head)`` replaced: by zeros (``"zero"``),
    by its mean over the batch of ``reference`` at each position (``"mean"``; ``reference`` defaults
    to ``idx``), or by its value on ``reference``'s rows, other inputs of ``idx``'s shape (``"resample"``)."""
    _check_model(model)
    if how not in ABLATIONS:
        raise ValueError(f"how={how!r} is not an ablation: choose one of {ABLATIONS}")
    heads = _heads(model, heads)
    if how == "resample" and (reference is None or reference.shape != idx.shape):
        raise ValueError(f"resample ablation takes each head's output from other inputs: pass reference= "
                         f"token ids of idx's shape {tuple(idx.shape)}")
    reference = idx if reference is None else reference
    if how == "mean" and reference.shape[1] != idx.shape[1]:
        raise ValueError(f"mean ablation averages over reference's rows at each position: reference has "
                         f"T={reference.shape[1]}, idx T={idx.shape[1]}; pass inputs of idx's length")
    names = sorted({f"blocks.{layer}.attn.z" for layer, _ in heads})
    source = run_with_hooks(model, reference, read=names)[1] if how != "zero" else {}
    edits: dict[str, list[Edit]] = {name: [] for name in names}
    for layer, head in heads:
        name = f"blocks.{layer}.attn.z"
        z = source[name][:, :, head] if how != "zero" else 0.0  # (B, T, d_k)
        edits[name].append(_set_head(head, z.mean(0) if how == "mean" else z))

    def chain(fns: list[Edit]) -> Edit:
        return lambda z: _compose(fns, z)
    return run_with_hooks(model, idx, edit={n: chain(fns) for n, fns in edits.items()})[0]


def _compose(fns: list[Edit], z: Tensor) -> Tensor:
    for fn in fns:
        z = fn(z)
    return z


def patch_head(model: nn.Module, corrupted: Tensor, clean_z: Tensor, layer: int, head: int) -> Tensor:
    """Logits (B, T, V) of the run on ``corrupted`` with one head's output taken from the clean run:
    ``clean_z`` is ``blocks.{layer}.attn.z`` read on the clean inputs, (B, T, H, d_k)."""
    _check_model(model)
    layer, head = _head(model, layer, head)
    H = model.blocks[0].attn.n_heads
    if clean_z.dim() != 4 or clean_z.shape[:2] != corrupted.shape or clean_z.shape[2] != H:
        raise ValueError(f"clean_z has shape {tuple(clean_z.shape)}, expected (B, T, H, d_k) with (B, T) = "
                         f"{tuple(corrupted.shape)} and H = {H}: read blocks.{layer}.attn.z on the clean "
                         "inputs, which must align position by position with the corrupted ones")
    edit = _set_head(head, clean_z[:, :, head])
    return run_with_hooks(model, corrupted, edit={f"blocks.{layer}.attn.z": edit})[0]


def patching_shares(model: nn.Module, clean: Tensor, corrupted: Tensor,
                    metric: Callable[[Tensor], Tensor]) -> Tensor:
    """Activation patching, head by head (L, H): the share of the clean–corrupted gap in ``metric``
    (logits -> a number) that one head's clean output restores in the corrupted run,
    ``(metric(patched) − metric(corrupted)) / (metric(clean) − metric(corrupted))``: 1 restores it all."""
    _check_model(model)
    if not (isinstance(clean, Tensor) and isinstance(corrupted, Tensor) and clean.shape == corrupted.shape):
        raise ValueError(f"clean and corrupted must be token ids of one shape, so that positions align, got "
                         f"{getattr(clean, 'shape', clean)} and {getattr(corrupted, 'shape', corrupted)}: "
                         "pair inputs of equal length")
    L, H = len(model.blocks), model.blocks[0].attn.n_heads
    names = [f"blocks.{l}.attn.z" for l in range(L)]
    clean_logits, cache = run_with_hooks(model, clean, read=names)
    m_clean, m_corrupt = float(metric(clean_logits)), float(metric(run_with_hooks(model, corrupted)[0]))
    if not (math.isfinite(m_clean) and math.isfinite(m_corrupt)):
        raise ValueError(f"metric is {m_clean} on clean and {m_corrupt} on corrupted "
                         "inputs: it must return a finite number; check it on the logits, "
                         "e.g. that its mask selects a position and that it reads no -inf")
    if abs(m_clean - m_corrupt) < 1e-9:
        raise ValueError(f"metric is {m_clean} on clean and {m_corrupt} on corrupted inputs: with no gap "
                         "between them there is nothing to restore; corrupt what the metric measures")
    shares = torch.empty(L, H)
    for l in range(L):
        for h in range(H):
            patched = metric(patch_head(model, corrupted, cache[names[l]], l, h))
            shares[l, h] = (float(patched) - m_corrupt) / (m_clean - m_corrupt)
    return shares


def mean_logprob(logits: Tensor, target: Tensor, mask: Tensor) -> Tensor:
    """The mean log-probability (nats) of ``target`` (B, T) at the positions where ``mask`` is True."""
    if target.shape != logits.shape[:-1] or mask.shape != target.shape or mask.dtype != torch.bool:
        raise ValueError(f"logits {tuple(logits.shape)}, target {tuple(target.shape)} and mask "
                         f"{tuple(mask.shape)} ({mask.dtype}) must be (B, T, V), (B, T), (B, T) bool: "
                         "target[b, t] is the token that follows position t")
    if not mask.any():
        raise ValueError("mask selects no position, so the mean is 0 / 0: select at least one")
    logp = F.log_softmax(logits.float(), dim=-1).gather(-1, target.long()[..., None])[..., 0]  # (B, T)
    return logp[mask].mean()
