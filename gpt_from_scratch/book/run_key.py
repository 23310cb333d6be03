"""Chapters 6, 12 and 14 — the key of a run: everything it depends on, or a refusal.

``run_key(fn, args, kwargs)`` is the SHA-256 of a call's arguments (tensors and arrays byte
for byte, which of them share memory, each module's classes, flags, attributes, weights,
gradients and buffers, the package's dataclasses field by field and its other objects
attribute by attribute (a tokenizer), a notebook's callback by its code), the global random
generators' states, PyTorch's global settings and the
environment variables its kernels read, the code of every module of the package it runs
(``model_cache.source_digest``, what they import included, and of this cache), the library
versions and the arithmetic. What it cannot key exactly raises ``Unkeyable``, and so does a
package file edited since this process started (the code it runs is not the code on disk).
"""

from __future__ import annotations

import dataclasses
import dis
import hashlib
import inspect
import json
import os
import random
import time
from collections.abc import Callable

import numpy as np
import torch
from torch import nn
from torch.optim import optimizer

from .model_cache import PACKAGE as PACKAGE_DIR
from .model_cache import arithmetic, source_closure, source_digest, versions

PACKAGE = "gpt_from_scratch"
STARTED = time.time()  # a package file changed after this is not the code this process runs
ENV_PREFIXES = ("OMP_", "MKL_", "DNNL_", "ONEDNN_", "ATEN_", "KMP_", "GOMP_")
_NN_INTERNALS = set(vars(nn.Module()))  # _parameters, _buffers, the hooks' dicts...
_HOOKS = [name for name in _NN_INTERNALS if "hook" in name]
_PLAIN = (type(None), bool, int, float, str)
_EFFECTS = ("STORE_", "DELETE_", "IMPORT_", "CALL", "ATTR", "METHOD", "YIELD", "MAKE_",
            "SEND", "RAISE", "PUSH_EXC", "SETUP_", "SUPER")  # found anywhere in an opname


class Unkeyable(Exception):
    """A call whose inputs ``run_key`` cannot key exactly: it runs uncached."""


class _Hasher:
    """A SHA-256 fed value by value; the package modules whose code the values run collect
    in ``codes``, and each tensor's memory and each module get the number of their first
    sight, so that two arguments sharing weights key otherwise than two copies."""

    def __init__(self):
        self.h, self.codes, self.seen = hashlib.sha256(), set(), {}
        self.open = set()  # the objects being fed: one met again inside itself is a cycle

    def text(self, *parts) -> None:
        self.h.update(":".join(map(str, parts)).encode() + b"\0")

    def first_seen(self, obj_id) -> int:
        return self.seen.setdefault(obj_id, len(self.seen))

    def feed(self, value) -> None:
        kind = type(value)
        if kind in _PLAIN:
            self.text(kind.__name__, repr(value))  # repr: a float exactly
        elif kind in (torch.dtype, torch.device):
            if kind is torch.device and value.type != "cpu":
                raise Unkeyable(f"a device {value}: the cache keeps CPU runs only")
            self.text(repr(value))
        elif isinstance(value, torch.Tensor):
            self.tensor(value)
        elif kind is np.ndarray:
            if value.dtype.hasobject:
                raise Unkeyable("an array of Python objects")
            self.text("ndarray", value.dtype, value.shape)
            self.h.update(np.ascontiguousarray(value).tobytes())
        elif isinstance(value, nn.Module):
            self.module(value)
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            self.text("dataclass", where(kind, self.codes))
            for f in dataclasses.fields(value):
                self.feed(f.name)
                self.feed(getattr(value, f.name))
        elif kind is list and value and all(type(v) is int for v in value) \
                and -2**63 <= min(value) and max(value) < 2**63:  # token ids, at once
            self.text("ints", len(value))
            self.h.update(np.array(value, dtype=np.int64).tobytes())
        elif kind in (list, tuple, dict):
            items = value.items() if kind is dict else enumerate(value)
            self.text(kind.__name__, len(value))
            for key, item in items:
                if kind is dict:
                    self.feed(key)
                self.feed(item)
        elif inspect.isfunction(value) and value.__module__ not in (None, "__main__"):
            self.text("function", where(value, self.codes))
        elif inspect.isfunction(value):
            self.expression(value)
        elif all((c.__module__ or "").startswith(PACKAGE + ".")
                 for c in kind.__mro__[:-1]) \
                and type(getattr(value, "__dict__", None)) is dict \
                and not any("__slots__" in vars(c) for c in kind.__mro__[:-1]):
            # a tokenizer: its class and its state, every base a plain class of the package
            # (a list's or a generator's state would lie outside its __dict__)
            if id(value) in self.open:
                raise Unkeyable(f"a {kind.__qualname__} that holds itself")
            self.open.add(id(value))
            self.text("object", where(kind, self.codes))
            self.feed(dict(sorted(vars(value).items())))
            self.open.remove(id(value))
        else:
            raise Unkeyable(f"an argument of type {kind.__qualname__}")

    def tensor(self, t: torch.Tensor) -> None:
        """Its type, dtype, shape, strides, where its memory lies among the tensors seen,
        its bytes; refused off the CPU, sparse, quantized, lazily conjugated, or hooked."""
        if type(t) not in (torch.Tensor, nn.Parameter):
            raise Unkeyable(f"a tensor of type {type(t).__qualname__}")
        if t.device.type != "cpu" or t.layout != torch.strided or t.is_quantized:
            raise Unkeyable(f"a {t.layout} tensor on {t.device} (quantized or not)")
        if t.is_conj() or t.is_neg() or getattr(t, "_backward_hooks", None) \
                or getattr(t, "_post_accumulate_grad_hooks", None):
            raise Unkeyable("a tensor with a hook, or a lazy conjugate or negative view")
        memory = self.first_seen(("storage", t.untyped_storage().data_ptr()))
        self.text("tensor", type(t).__name__, t.dtype, tuple(t.shape), t.stride(),
                  memory, t.storage_offset(), t.requires_grad)
        self.h.update(t.detach().contiguous().flatten().view(torch.uint8).numpy().tobytes())

    def structure(self, model: nn.Module, state: bool = True) -> None:
        """Every submodule's name, class and attributes, all but its weights; without
        ``state``, not its train/eval flag nor its attributes of plain types either (what
        ``run_record`` writes down and puts back)."""
        for name, sub in model.named_modules():
            flag = sub.training if state else ""
            self.text("submodule", name, where(type(sub), self.codes), flag)
            for attr, value in _attributes(sub):
                if state or type(value) not in _PLAIN:
                    self.feed(attr)
                    self.feed(value)

    def module(self, model: nn.Module) -> None:
        """Its number of first sight; every submodule's class, flag and attributes; every
        parameter (its gradient too) and buffer. Refused where a hook is registered."""
        if any(getattr(nn.modules.module, f"_global{name}", None) for name in _HOOKS):
            raise Unkeyable("a global module hook is registered")
        self.text("module", self.first_seen(("module", id(model))))
        for name, sub in model.named_modules():
            if any(getattr(sub, hook) for hook in _HOOKS):
                raise Unkeyable(f"module {name or 'the model'} has a hook")
        self.structure(model)
        for name, p in model.named_parameters(remove_duplicate=False):
            self.feed(name)
            self.tensor(p)
            self.feed(p.grad)
        for name, b in model.named_buffers(remove_duplicate=False):
            self.feed(name)
            self.tensor(b)

    def expression(self, fn) -> None:
        """A notebook's own function keyed by its code, where it is an expression that can
        have no effect: no call, no attribute, no store but to its locals, its free names
        and defaults values of plain types (``lambda step, _: step == ABLATION_STEPS``)."""
        code = fn.__code__
        for op in dis.get_instructions(fn):
            if any(e in op.opname for e in _EFFECTS) and op.opname != "STORE_FAST":
                raise Unkeyable(f"{fn.__qualname__} does {op.opname}")
        try:
            cells = [c.cell_contents for c in fn.__closure__ or ()]
        except ValueError:  # an empty cell
            raise Unkeyable(f"{fn.__qualname__} reads a name not yet set") from None
        free = dict(zip(code.co_freevars, cells))
        values = [free[n] if n in free else fn.__globals__.get(n, _EFFECTS)
                  for n in (*code.co_names, *code.co_freevars)]
        keywords = sorted((fn.__kwdefaults__ or {}).items())
        defaults = [*(fn.__defaults__ or ()), *(value for _, value in keywords)]
        if not all(type(v) in _PLAIN for v in (*values, *code.co_consts, *defaults)):
            raise Unkeyable(f"{fn.__qualname__} reads a value that is not of a plain type")
        self.feed(["expression", code.co_code.hex(), code.co_exceptiontable.hex(),
                   list(code.co_consts), list(code.co_varnames), code.co_flags,
                   code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount,
                   list(code.co_names), list(code.co_freevars), values, defaults,
                   [name for name, _ in keywords]])


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


def random_states() -> dict:
    """The global generators: torch's (bytes), Python's and NumPy's (as JSON can hold)."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    return {"torch": torch.get_rng_state(), "python": random.getstate(),
            "numpy": [kind, keys.tolist(), pos, has_gauss, gauss]}


def values_digest(values: list) -> str:
    """SHA-256 of ``values`` alone (to see whether a call changed one in place)."""
    hasher = _Hasher()
    hasher.feed(values)
    return hasher.h.hexdigest()


def structure_digest(modules: list[nn.Module]) -> str:
    """SHA-256 of what ``modules`` are besides their weights, flags and plain attributes:
    their submodules' names, classes and other attributes (to see whether a call changed
    one, which ``run_record`` could not put back)."""
    hasher = _Hasher()
    for model in modules:
        hasher.structure(model, state=False)
    return hasher.h.hexdigest()


def plain_attributes(sub: nn.Module) -> dict:
    """``sub``'s own attributes of plain types (``train`` sets ``check_token_ids``)."""
    return {attr: value for attr, value in _attributes(sub) if type(value) in _PLAIN}


def _attributes(sub: nn.Module) -> list[tuple]:
    """``sub``'s own attributes, by name: not ``nn.Module``'s machinery, not its flag."""
    return sorted((attr, value) for attr, value in vars(sub).items()
                  if attr not in _NN_INTERNALS and attr != "training")


def _settings() -> list:
    """PyTorch's global settings a CPU run depends on, and the environment its kernels
    read."""
    if torch.get_num_threads() != 1:
        raise Unkeyable(f"{torch.get_num_threads()} threads: train() may take fewer on a "
                        "busy machine (utils.free_threads), which no key can know before")
    if torch.cuda.is_available() or torch.backends.mps.is_available():
        raise Unkeyable("a GPU is present: the cache keeps CPU runs only")
    if optimizer._global_optimizer_pre_hooks or optimizer._global_optimizer_post_hooks:
        raise Unkeyable("a global optimizer hook is registered")
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        raise Unkeyable("a process group: train() runs data-parallel under it")
    try:
        precision = torch.get_float32_matmul_precision()
    except RuntimeError as err:  # per-backend precisions set apart
        raise Unkeyable(f"float32 matmul precision: {err}") from None
    return [str(torch.get_default_dtype()), precision,
            torch.is_grad_enabled(), torch.are_deterministic_algorithms_enabled(),
            torch.is_autocast_enabled("cpu"), str(torch.get_autocast_dtype("cpu")),
            torch.is_anomaly_enabled(), torch.is_inference_mode_enabled(),
            sorted((k, v) for k, v in os.environ.items() if k.startswith(ENV_PREFIXES))]


def _code(module: str) -> str:
    """``source_digest(module)``, refused if a file it covers changed after ``STARTED``."""
    for path in source_closure(module):
        if path.stat().st_mtime >= STARTED:
            raise Unkeyable(f"{path.relative_to(PACKAGE_DIR)} changed after this process "
                            "started: the code it runs may not be the code on disk")
    return source_digest(module)


def run_key(fn: Callable, args: tuple, kwargs: dict, global_random: bool = True) -> str:
    """SHA-256 of everything a call ``fn(*args, **kwargs)`` depends on (the module's
    docstring); without ``global_random``, not the global generators' states, for a
    function that draws from its own generator only (``run_cache`` checks that a call left
    them as they were). Raises ``Unkeyable`` where an input cannot be keyed exactly."""
    if not inspect.isfunction(fn):
        raise TypeError(f"run_key: fn={fn!r:.60} must be a function of the package, such "
                        "as gpt_from_scratch.train.train")
    hasher = _Hasher()
    hasher.text("function", where(fn, hasher.codes))
    hasher.feed(list(args))
    hasher.feed(dict(sorted(kwargs.items())))
    if global_random:
        states = random_states()
        hasher.feed([states["torch"], repr(states["python"]), repr(states["numpy"])])
    else:
        hasher.text("its own generator")
    hasher.feed(_settings())
    codes = sorted(hasher.codes | {"book.run_cache"})
    hasher.feed([[m, _code(m)] for m in codes])
    hasher.feed(json.dumps([versions(), arithmetic()], sort_keys=True))
    return hasher.h.hexdigest()
