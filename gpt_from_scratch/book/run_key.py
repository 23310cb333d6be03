"""Chapters 6 and 12 — the key of a training call: everything it depends on, or a refusal.

``run_key(fn, args, kwargs)`` is the SHA-256 of a call's arguments (tensors and arrays byte
for byte, each module's classes, flags, attributes, weights, gradients and buffers, the
package's dataclasses field by field), the global random generators' states, the code of
every module of the package it runs (``model_cache.source_digest``, what they import
included), the library versions and the arithmetic. What it cannot key exactly raises
``Unkeyable``: ``run_cache`` then runs the call uncached.
"""

from __future__ import annotations

import dataclasses
import dis
import hashlib
import inspect
import json
import random
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from .model_cache import arithmetic, source_digest, versions

PACKAGE = "gpt_from_scratch"
_NN_INTERNALS = set(vars(nn.Module()))  # _parameters, _buffers, the hooks' dicts...
_HOOKS = [name for name in _NN_INTERNALS if "hook" in name]


class Unkeyable(Exception):
    """A call whose inputs ``run_key`` cannot key exactly: it runs uncached."""


def _feed(h, value, codes: set[str]) -> None:
    """Feed ``value`` to the hash ``h``, exactly; the package modules whose code it runs go
    to ``codes``. Raises ``Unkeyable`` for what it cannot key."""
    if value is None or isinstance(value, (bool, int, float, str)):
        h.update(f"{type(value).__name__}:{value!r}\0".encode())  # repr: a float exactly
    elif isinstance(value, (torch.dtype, torch.device)):
        h.update(f"{value!r}\0".encode())
    elif isinstance(value, torch.Tensor):
        if value.device.type != "cpu":
            raise Unkeyable(f"a tensor on {value.device}")
        shape, grad = tuple(value.shape), value.requires_grad
        h.update(f"tensor:{value.dtype}:{shape}:{grad}\0".encode())
        h.update(value.detach().contiguous().flatten().view(torch.uint8).numpy().tobytes())
    elif isinstance(value, np.ndarray):
        h.update(f"ndarray:{value.dtype}:{value.shape}\0".encode())
        h.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, nn.Module):
        _feed_module(h, value, codes)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        h.update(f"dataclass:{where(type(value), codes)}\0".encode())
        for f in dataclasses.fields(value):
            _feed(h, f.name, codes)
            _feed(h, getattr(value, f.name), codes)
    elif isinstance(value, (list, tuple)):
        h.update(f"{type(value).__name__}:{len(value)}\0".encode())
        for item in value:
            _feed(h, item, codes)
    elif isinstance(value, dict):
        h.update(f"dict:{len(value)}\0".encode())
        for key, item in value.items():
            _feed(h, key, codes)
            _feed(h, item, codes)
    elif inspect.isfunction(value) and value.__module__ not in (None, "__main__"):
        h.update(f"function:{where(value, codes)}\0".encode())
    elif inspect.isfunction(value):
        _feed_expression(h, value, codes)
    elif inspect.isbuiltin(value):
        h.update(f"function:{where(value, codes)}\0".encode())
    else:
        raise Unkeyable(f"an argument of type {type(value).__qualname__}")


def where(obj, codes: set[str]) -> str:
    """``module:qualname`` of a class or function of the package or of torch; the package's
    module goes to ``codes``. Raises ``Unkeyable`` for any other (a notebook's class)."""
    module, name = getattr(obj, "__module__", "") or "", obj.__qualname__
    if "<locals>" in name or "<lambda>" in name:
        raise Unkeyable(f"{name} is defined inside a function")
    if module.startswith(PACKAGE + "."):
        codes.add(module.partition(".")[2])
    elif module.split(".")[0] != "torch":
        raise Unkeyable(f"{name} comes from {module!r}, not from {PACKAGE} or torch")
    return f"{module}:{name}"


_PLAIN = (type(None), bool, int, float, str)
_EFFECTS = ("STORE_", "DELETE_", "IMPORT_", "CALL", "ATTR", "METHOD", "YIELD", "MAKE_",
            "SEND")


def _feed_expression(h, fn, codes: set[str]) -> None:
    """A notebook's own function keyed by its code, where it is an expression that can have
    no effect: no call, no attribute, no store but to its locals, its free names plain
    values (``lambda step, _: step == ABLATION_STEPS``)."""
    code = fn.__code__
    names = {**fn.__globals__, **dict(zip(code.co_freevars,
                                          (c.cell_contents for c in fn.__closure__ or ())))}
    for op in dis.get_instructions(fn):
        if op.opname.startswith(_EFFECTS) and op.opname != "STORE_FAST":
            raise Unkeyable(f"{fn.__qualname__} does {op.opname}")
    free = [*code.co_names, *code.co_freevars]
    values = [names.get(n, _EFFECTS) for n in free]
    if not all(isinstance(v, _PLAIN) for v in
               (*values, *code.co_consts, *(fn.__defaults__ or ()))):
        raise Unkeyable(f"{fn.__qualname__} reads a name or a constant that is not plain")
    _feed(h, ["expression", code.co_code.hex(), list(code.co_consts),
              list(code.co_varnames), code.co_argcount, free, values,
              list(fn.__defaults__ or ())], codes)


def _feed_module(h, model: nn.Module, codes: set[str]) -> None:
    """Every submodule's class, flags and plain attributes; every parameter (its gradient
    too), every buffer."""
    if any(getattr(nn.modules.module, f"_global{name}", None) for name in _HOOKS):
        raise Unkeyable("a global module hook is registered")
    for name, sub in model.named_modules():
        if any(getattr(sub, hook) for hook in _HOOKS):
            raise Unkeyable(f"module {name or 'the model'} has a hook")
        h.update(f"module:{name}:{where(type(sub), codes)}:{sub.training}\0".encode())
        for attr, value in sorted(vars(sub).items()):
            if attr not in _NN_INTERNALS and attr != "training":
                _feed(h, attr, codes)
                _feed(h, value, codes)
    for name, p in model.named_parameters():
        _feed(h, name, codes)
        _feed(h, p, codes)
        _feed(h, p.grad, codes)
    for name, b in model.named_buffers():
        _feed(h, name, codes)
        _feed(h, b, codes)


def random_states() -> dict:
    """The global generators: torch's (bytes), Python's and NumPy's (as JSON can hold)."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    return {"torch": torch.get_rng_state(), "python": random.getstate(),
            "numpy": [kind, keys.tolist(), pos, has_gauss, gauss]}


def values_digest(values: list) -> str:
    """SHA-256 of ``values`` alone (to see whether a call changed one in place)."""
    h = hashlib.sha256()
    _feed(h, values, set())
    return h.hexdigest()


def run_key(fn: Callable, args: tuple, kwargs: dict) -> str:
    """SHA-256 of everything a call ``fn(*args, **kwargs)`` depends on: its arguments, the
    random generators' states, the code of ``fn``'s module and of each class and function it
    is handed (with what they import), the library versions and the arithmetic. Raises
    ``Unkeyable`` where an input cannot be keyed exactly."""
    h, codes = hashlib.sha256(), set()
    _feed(h, f"function:{where(fn, codes)}", codes)
    _feed(h, list(args), codes)
    _feed(h, dict(sorted(kwargs.items())), codes)
    states = random_states()
    _feed(h, [states["torch"], repr(states["python"]), repr(states["numpy"])], codes)
    _feed(h, [str(torch.get_default_dtype()), torch.get_float32_matmul_precision(),
              torch.is_grad_enabled(), torch.are_deterministic_algorithms_enabled()], codes)
    _feed(h, [[m, source_digest(m)] for m in sorted(codes)], codes)
    _feed(h, json.dumps([versions(), arithmetic()], sort_keys=True), codes)
    return h.hexdigest()
