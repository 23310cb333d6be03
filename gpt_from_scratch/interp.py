"""Chapter 13 — looking inside a GPT: hooks, the logit lens and direct logit attribution, on the
book's ``GPT`` as it is (PyTorch forward hooks, no second model class); ``patching`` builds
ablation and activation patching on these hooks.

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
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .lora import LoRALinear
from .model import GPT

POINTS = ("resid_pre", "attn.pattern", "attn.z", "attn_out", "mlp_out", "resid_post")
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
    l, point = int(m.group(1)), m.group(2)
    if name != f"blocks.{l}.{point}":
        raise ValueError(f"activation {name!r}: write the layer as a plain number, with no "
                         f"leading zero or sign, so that the hooks find it: "
                         f"'blocks.{l}.{point}'")
    return l, point


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


def check_token_ids(target: Tensor, fix: str = "target.long() if they are whole") -> None:
    """A ValueError unless ``target`` holds whole numbers (not bool, float or complex); ``fix``
    says where the caller's ids come from."""
    if target.dtype == torch.bool or target.is_floating_point() or target.is_complex():
        raise ValueError(f"target holds {target.dtype}, not token ids: pass whole numbers "
                         f"({fix})")


def check_model(model: nn.Module) -> None:
    """A ValueError unless ``model`` is the book's GPT, in eval mode."""
    _check_gpt(model)
    if model.training:
        raise ValueError("the model is in training mode, so dropout would change every activation at "
                         "random: call model.eval() first")


def _replace(name: str, old: Tensor, edit: Edit) -> Tensor:
    new = edit(old)
    if not isinstance(new, Tensor) or new.shape != old.shape or new.dtype != old.dtype:
        got = (f"{tuple(new.shape)} {new.dtype}" if isinstance(new, Tensor)
               else type(new).__name__)
        raise ValueError(f"the edit of {name} returned {got}, the activation is "
                         f"{tuple(old.shape)} {old.dtype}: return a tensor of the same shape "
                         "and dtype (e.g. a modified clone)")
    if new.is_floating_point() and not torch.isfinite(new).all():
        raise ValueError(f"the edit of {name} returned NaN or inf, which would spread to "
                         "every logit after it: return finite values (e.g. zeros, or a "
                         "mean over finite activations)")
    return new


@torch.no_grad()
def run_with_hooks(model: nn.Module, idx: Tensor, read: Sequence[str] = (),
                   edit: dict[str, Edit] | None = None) -> tuple[Tensor, dict[str, Tensor]]:
    """Run ``model(idx)`` with hooks: return its logits (B, T, V) and the activations named in ``read``
    (``{name: tensor}``, as the model used them, after any edit), with each ``edit[name]`` applied:
    a function from the activation to what the model should use instead. The hooks are removed
    afterwards, even when the run fails."""
    check_model(model)
    if isinstance(read, str):
        raise ValueError(f"read={read!r} is one string: pass a list of names, e.g. [{read!r}]")
    read = list(read)  # a generator would be used up by the first look below
    edit = dict(edit or {})
    for name, fn in edit.items():
        if not callable(fn):
            raise ValueError(f"edit[{name!r}] is a {type(fn).__name__}, not a function: pass "
                             "a function from the activation to what the model uses instead, "
                             "e.g. lambda z: z * 0")
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
    check_model(model)
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
    check_model(model)
    L, ln, V = len(model.blocks), model.ln_f, model.config.vocab_size
    if not isinstance(idx, Tensor) or idx.dim() != 2 or idx.numel() == 0:
        got = tuple(idx.shape) if isinstance(idx, Tensor) else type(idx).__name__
        raise ValueError(f"direct_logit_attribution: idx has shape {got}: pass token ids "
                         "(B, T) with at least one row and one position")
    if not isinstance(target, Tensor) or target.shape != idx.shape:
        raise ValueError(f"target must be a tensor of token ids of idx's shape {tuple(idx.shape)}, got "
                         f"{tuple(target.shape) if isinstance(target, Tensor) else type(target).__name__}: "
                         "for the next token at each position pass idx's shifted ids")
    check_token_ids(target, "e.g. idx's shifted ids, or target.long() if they are whole")
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
