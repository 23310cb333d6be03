"""Chapter 9 — LoRA, low-rank adaptation (Hu et al., 2021), written from scratch.

``LoRALinear`` wraps a frozen ``nn.Linear`` ``W`` and learns a low-rank update: it computes
``W x + (alpha / r) B A x`` with ``A`` (r, in) and ``B`` (out, r). ``B`` starts at zero, so a model
with LoRA computes exactly what it computed before training. ``apply_lora`` puts one on every
projection of the attention and the MLP (``c_attn``, ``c_proj``, ``c_fc``) and freezes the rest;
``merge_lora`` folds ``W + (alpha / r) B A`` into the weight (no extra cost at inference) and
``unmerge_lora`` takes it out again. The initialization, the names of the targets and the scaling
are those of Hugging Face ``peft``, whose outputs ours equal on the same weights (tests/test_lora.py).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .utils import check_float, check_int

TARGETS = ("c_attn", "c_proj", "c_fc")  # GPT-2's attention and MLP projections, as peft names them


class LoRALinear(nn.Module):
    """A frozen ``nn.Linear`` plus a trainable low-rank update ``(alpha / r) B A`` (Chapter 9).

    ``A`` (r, in) starts like ``nn.Linear``'s weights (Kaiming-uniform, as in peft) and ``B`` (out, r)
    at zero: at initialization the layer computes what ``base`` computes. The base layer's weight and
    bias are frozen (``requires_grad=False``); only ``lora_A`` and ``lora_B`` train.
    """

    def __init__(self, base: nn.Linear, r: int, alpha: float = 1.0):
        super().__init__()
        if not isinstance(base, nn.Linear):
            raise TypeError(f"LoRALinear wraps an nn.Linear, got {type(base).__name__}: apply it to a linear "
                            f"layer (apply_lora finds them by name)")
        r = check_int("LoRALinear", "r", r, minimum=1)
        out_features, in_features = base.weight.shape
        if r > min(in_features, out_features):
            raise ValueError(
                f"LoRALinear.r={r} is larger than the layer allows: a ({out_features} x {in_features}) weight has "
                f"rank at most {min(in_features, out_features)}, so choose r <= {min(in_features, out_features)} "
                f"(LoRA is useful with r much smaller)")
        self.alpha = check_float("LoRALinear", "alpha", alpha, 0.0, low_open=True)
        self.r, self.scaling = r, self.alpha / r
        self.base = base
        for p in base.parameters():
            p.requires_grad_(False)
        factory = dict(device=base.weight.device, dtype=base.weight.dtype)
        self.lora_A = nn.Parameter(torch.empty(r, in_features, **factory))  # (r, in)
        self.lora_B = nn.Parameter(torch.zeros(out_features, r, **factory))  # (out, r): the update starts at 0
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))  # nn.Linear's (and peft's) initialization
        self.merged = False

    @property
    def in_features(self) -> int:
        return self.base.in_features

    @property
    def out_features(self) -> int:
        return self.base.out_features

    def delta_weight(self) -> Tensor:
        """The update ``(alpha / r) B A`` (out, in) that ``merge`` adds to the base weight."""
        return (self.lora_B @ self.lora_A) * self.scaling

    def forward(self, x: Tensor) -> Tensor:
        """(..., in) -> (..., out): ``base(x) + (alpha / r) (x A^T) B^T``, or ``base(x)`` once merged."""
        if self.merged:
            return self.base(x)  # W already holds W + (alpha / r) B A
        return self.base(x) + (x @ self.lora_A.T @ self.lora_B.T) * self.scaling  # (..., r) in between

    @torch.no_grad()
    def merge(self) -> None:
        """Fold the update into the base weight: ``W <- W + (alpha / r) B A``; forward is then one matmul."""
        if self.merged:
            raise RuntimeError("this LoRALinear is already merged: merging twice would add B A twice "
                               "(call unmerge() first)")
        delta = self.delta_weight()
        if not torch.isfinite(delta).all():
            raise FloatingPointError("the LoRA update B A holds non-finite values (nan or inf): training "
                                     "diverged; lower the learning rate and train again before merging")
        self.base.weight += delta
        self.merged = True

    @torch.no_grad()
    def unmerge(self) -> None:
        """Take the update out of the base weight again: ``W <- W - (alpha / r) B A``."""
        if not self.merged:
            raise RuntimeError("this LoRALinear is not merged: there is nothing to unmerge (call merge() first)")
        self.base.weight -= self.delta_weight()
        self.merged = False

    def extra_repr(self) -> str:
        return f"r={self.r}, alpha={self.alpha:g}, merged={self.merged}"


def lora_layers(model: nn.Module) -> dict[str, LoRALinear]:
    """Every ``LoRALinear`` of ``model``, by module name (Chapter 9)."""
    return {name: m for name, m in model.named_modules() if isinstance(m, LoRALinear)}


def apply_lora(model: nn.Module, r: int, alpha: float = 1.0, targets: tuple[str, ...] = TARGETS) -> nn.Module:
    """Freeze ``model`` and replace each ``nn.Linear`` whose name ends with one of ``targets`` by a
    ``LoRALinear`` of rank ``r`` (Chapter 9). Returns the model, changed in place.

    With the default targets, a GPT gets LoRA on the four projections of every block (attention's
    ``c_attn`` and ``c_proj``, the MLP's ``c_fc`` and ``c_proj``), as peft does for GPT-2 with
    ``target_modules=["c_attn", "c_proj", "c_fc"]``. Only the LoRA matrices are left trainable.
    """
    if lora_layers(model):
        raise RuntimeError("this model already has LoRA layers: applying LoRA twice would wrap them again; "
                           "start from the original model (or use the LoRA layers it has)")
    r = check_int("apply_lora", "r", r, minimum=1)
    found = [(name, m) for name, m in model.named_modules()
             if isinstance(m, nn.Linear) and name.split(".")[-1] in targets]
    if not found:
        raise ValueError(f"no nn.Linear of the model is named like one of targets={targets}: name the "
                         f"projections to adapt (a GPT's are {TARGETS})")
    wrapped = {name: LoRALinear(m, r, alpha) for name, m in found}  # checks r against every layer first
    for p in model.parameters():
        p.requires_grad_(False)
    for name, layer in wrapped.items():
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name), child, layer)
        layer.lora_A.requires_grad_(True)
        layer.lora_B.requires_grad_(True)
    return model


def _layers_or_raise(model: nn.Module) -> dict[str, LoRALinear]:
    layers = lora_layers(model)
    if not layers:
        raise ValueError("the model has no LoRA layers: call apply_lora(model, r) first")
    return layers


def merge_lora(model: nn.Module) -> nn.Module:
    """Fold every LoRA update into its base weight (Chapter 9): the model computes the same, faster."""
    layers = _layers_or_raise(model)
    if any(layer.merged for layer in layers.values()):
        raise RuntimeError("the model's LoRA layers are already merged: merging twice would add B A twice "
                           "(call unmerge_lora(model) first)")
    for layer in layers.values():
        layer.merge()
    return model


def unmerge_lora(model: nn.Module) -> nn.Module:
    """Subtract every merged LoRA update from its base weight again (Chapter 9)."""
    layers = _layers_or_raise(model)
    if not all(layer.merged for layer in layers.values()):
        raise RuntimeError("the model's LoRA layers are not merged: there is nothing to unmerge "
                           "(call merge_lora(model) first)")
    for layer in layers.values():
        layer.unmerge()
    return model


def count_trainable(model: nn.Module) -> int:
    """How many numbers the optimizer would update: the parameters with ``requires_grad`` (Chapter 9).

    A parameter shared by two modules (a tied ``wte`` / ``lm_head``) counts once.
    """
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def lora_settings(model: nn.Module) -> dict | None:
    """What rebuilds ``model``'s LoRA layers on a fresh copy of its network (``with_lora``), for a
    checkpoint: ``{"r", "alpha", "targets", "merged"}``, or None without LoRA layers.

    A ValueError when one setting cannot describe them all (layers of different ranks, some merged
    and some not, or layers ``apply_lora`` would not have put there), saying what to do instead.
    """
    layers = lora_layers(model)
    if not layers:
        return None
    kinds = {(layer.r, layer.alpha, layer.merged) for layer in layers.values()}
    if len(kinds) > 1:
        raise ValueError(f"the model's LoRA layers differ in (r, alpha, merged): {sorted(kinds)}; a "
                         "checkpoint records one setting for all: merge_lora(model) or "
                         "unmerge_lora(model) first, or apply_lora once with one r and alpha")
    (r, alpha, merged), = kinds
    settings = dict(r=r, alpha=alpha, targets=sorted({n.rsplit(".", 1)[-1] for n in layers}),
                    merged=merged)
    missed = [name for name, m in model.named_modules()  # where apply_lora would put one more
              if type(m) is nn.Linear and name.rsplit(".", 1)[-1] in settings["targets"]]
    if missed:
        raise ValueError(f"the model's LoRA layers are not the ones apply_lora(model, r, alpha, "
                         f"targets={tuple(settings['targets'])}) puts there ({missed[0]} has "
                         "none), so no checkpoint can rebuild them: apply LoRA with apply_lora")
    return settings


def with_lora(model: nn.Module, settings: dict | None) -> nn.Module:
    """``model`` with the LoRA layers ``lora_settings`` describes (the weights still to be loaded;
    ``merged`` set, so that a merged checkpoint's base weights are not merged a second time)."""
    if settings is None:
        return model
    apply_lora(model, settings["r"], settings["alpha"], tuple(settings["targets"]))
    for layer in lora_layers(model).values():
        layer.merged = bool(settings["merged"])
    return model

