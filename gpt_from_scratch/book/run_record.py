"""Chapters 6 and 12 — what a training call leaves, written down and put back for
``run_cache``: its return value as JSON holds it exactly, each module argument's weights,
gradients, buffers and train/eval flags, the random generators' states, what it printed.
"""

from __future__ import annotations

import builtins
import dataclasses
import functools
import importlib
import io
import random

import numpy as np
import torch
from torch import nn

from .run_key import PACKAGE, Unkeyable, plain_attributes, where

_PLAIN = (type(None), bool, int, float, str)


def encode(value):
    """``value`` as JSON holds it exactly (floats by repr, nan too), with its tuples and the
    package's dataclasses marked; raises ``Unkeyable`` for anything else (a NumPy float,
    which would come back a Python one, too)."""
    kind = type(value)
    if kind in _PLAIN:
        return value
    if kind is list:
        return [encode(v) for v in value]
    if kind is tuple:
        return {"tuple": [encode(v) for v in value]}
    if kind is dict and all(type(k) is str for k in value):
        return {"dict": {k: encode(v) for k, v in value.items()}}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {"dataclass": where(kind, set()),
                "fields": {f.name: encode(getattr(value, f.name))
                           for f in dataclasses.fields(value)}}
    raise Unkeyable(f"it returns a {kind.__qualname__}")


def decode(value):
    """``_encode``'s inverse."""
    if isinstance(value, list):
        return [decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "tuple" in value:
        return tuple(decode(v) for v in value["tuple"])
    if "dict" in value:
        return {k: decode(v) for k, v in value["dict"].items()}
    module, _, name = value["dataclass"].partition(":")
    if not module.startswith(PACKAGE + "."):
        raise ValueError(f"a dataclass {value['dataclass']!r} from outside {PACKAGE}")
    cls = functools.reduce(getattr, name.split("."), importlib.import_module(module))
    return cls(**{k: decode(v) for k, v in value["fields"].items()})


def module_args(args: tuple, kwargs: dict) -> list[nn.Module]:
    return [v for v in (*args, *kwargs.values()) if isinstance(v, nn.Module)]


def _names(modules: list[nn.Module]) -> set[str]:
    """The names ``left_by`` gives the weights and buffers of ``modules`` (gradients
    aside)."""
    return {f"{i}/{kind}/{name}" for i, model in enumerate(modules)
            for kind, named in (("param", model.named_parameters()),
                                ("buffer", model.named_buffers()))
            for name, _ in named}


def left_by(modules: list[nn.Module]) -> tuple[dict, list]:
    """The tensors the call left in ``modules`` (weights, gradients, buffers) and each
    submodule's train/eval flag."""
    tensors, flags = {}, []
    for i, model in enumerate(modules):
        for name, p in model.named_parameters():
            tensors[f"{i}/param/{name}"] = p.detach().clone()
            if p.grad is not None:
                tensors[f"{i}/grad/{name}"] = p.grad.detach().clone()
        for name, b in model.named_buffers():
            tensors[f"{i}/buffer/{name}"] = b.detach().clone()
        flags.append([[sub.training, plain_attributes(sub)] for sub in model.modules()])
    return tensors, flags


def check_record(modules: list[nn.Module], tensors: dict, meta: dict) -> None:
    """Raise a ValueError unless ``tensors`` and ``meta`` fit ``modules`` whole: nothing is
    restored from a record that does not."""
    kept = {k for k in tensors if "/grad/" not in k and not k.startswith("random/")}
    if kept != _names(modules) or "random/torch" not in tensors:
        raise ValueError("its tensors are not those of the modules passed")
    for k, t in tensors.items():
        if "/grad/" in k and k.replace("/grad/", "/param/") not in kept:
            raise ValueError(f"a gradient {k} of no parameter")
    for i, model in enumerate(modules):
        for kind, named in (("param", model.named_parameters()),
                            ("buffer", model.named_buffers())):
            for name, t in named:
                kept_t = tensors[f"{i}/{kind}/{name}"]
                grad = tensors.get(f"{i}/grad/{name}")
                if any(x is not None and (x.shape, x.dtype) != (t.shape, t.dtype)
                       for x in (kept_t, grad)):
                    raise ValueError(f"{name}'s kept shape or dtype is not the module's")
    flags = meta["modules"]
    if [len(f) for f in flags] != [len(list(m.modules())) for m in modules] or not all(
            type(flag) is bool and type(attrs) is dict for f in flags for flag, attrs in f):
        raise ValueError("its train/eval flags are not those of the modules passed")
    version, internal, gauss = meta["random"]["python"]
    random.Random().setstate((version, tuple(internal), gauss))  # each state, tried aside
    kind, keys, pos, has_gauss, gauss = meta["random"]["numpy"]
    np.random.RandomState().set_state((kind, np.array(keys, dtype=np.uint32), pos,
                                       has_gauss, gauss))
    torch.Generator().set_state(tensors["random/torch"])
    if not isinstance(meta["stdout"], str) or any(
            not hasattr(builtins, c) for _, c, _, _ in meta["warnings"]):
        raise ValueError("its printed text or its warnings are not as saved")
    decode(meta["returned"])


def restore(modules: list[nn.Module], tensors: dict, flags: list) -> None:
    """Put ``left_by``'s record back into ``modules``, in place (the same tensors); a
    tensor already equal to its record, and a gradient equal to it, are left untouched
    (a scoring call changes none: a graph built before it can still be differentiated)."""
    for i, model in enumerate(modules):
        with torch.no_grad():
            for name, p in model.named_parameters():
                _put(p, tensors[f"{i}/param/{name}"])
                grad = tensors.get(f"{i}/grad/{name}")
                if grad is None or p.grad is None or not torch.equal(p.grad, grad):
                    p.grad = None if grad is None else grad.clone()
            for name, b in model.named_buffers():
                _put(b, tensors[f"{i}/buffer/{name}"])
        for sub, (flag, attrs) in zip(model.modules(), flags[i], strict=True):
            sub.training = flag
            for attr, value in attrs.items():
                setattr(sub, attr, value)


def _put(tensor: torch.Tensor, saved: torch.Tensor) -> None:
    if not torch.equal(tensor, saved):
        tensor.copy_(saved)


def set_random_states(states: dict) -> None:
    torch.set_rng_state(states["torch"])
    version, internal, gauss = states["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, gauss = states["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, gauss))


class Tee(io.TextIOBase):
    """Writes to ``out`` and keeps a copy; anything else is ``out``'s."""

    def __init__(self, out):
        self.out, self.copy = out, io.StringIO()

    def write(self, text: str) -> int:
        self.copy.write(text)
        return self.out.write(text)

    def flush(self) -> None:
        self.out.flush()

    def __getattr__(self, name):
        return getattr(self.out, name)

    @property
    def encoding(self):
        return self.out.encoding

    def isatty(self) -> bool:
        return self.out.isatty()

    def fileno(self) -> int:
        return self.out.fileno()

    def writable(self) -> bool:
        return True
