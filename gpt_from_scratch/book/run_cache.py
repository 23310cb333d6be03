"""Chapters 6 and 12 — the chapters' own training runs, kept once per machine for the tests.

``make test`` runs every chapter under nbval, and Chapters 6 and 12 train a few dozen small
models in their own cells (the ladder, the learning rates, overfitting, the ablations, DPO):
about 400 of nbval's 1,060 CPU-seconds. A training call is a pure function of its inputs,
as a book model is (``model_cache``): ``run_key`` names them. ``cached_run(fn)`` wraps a
training function so that a call whose every input can be keyed is trained once and then
read from the cache; a hit leaves exactly what the call left: its return value, each module
argument's weights, gradients, buffers and train/eval flags, the random generators' states
after it, and what it printed on stdout (tests/test_run_cache.py compares each, bit for
bit).

A call that cannot be keyed runs as written, uncached (``run_key.Unkeyable``: a function
with effects, an object of an unknown type, a notebook's own class, a module with hooks, a
tensor off the CPU), and so does one with an argument of ``side_effects`` set (``out_dir``)
or one that changed an argument in place (seen after the call: it is not kept). A damaged
entry is refused with a warning and trained again.

Only the test suite uses it: ``install`` swaps the functions of ``TRAINERS`` for wrapped
ones, run in the kernels nbval starts (``notebooks/conftest.py`` names
``scripts/nbval_startup.py`` in ``PYTHONSTARTUP``), except for the chapters whose lessons
time their training (Chapter 10). A reader's notebook trains as written.
``GPT_FROM_SCRATCH_RUN_CACHE=0`` turns it off.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import inspect
import io
import json
import os
import random
import shutil
import sys
import warnings
from collections.abc import Callable

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from ..data import cache_dir
from ..utils import sha256_file
from .model_cache import Entry, trained_once
from .run_key import PACKAGE, Unkeyable, random_states, run_key, values_digest, where

ENV_VAR = "GPT_FROM_SCRATCH_RUN_CACHE"  # "0": off
# The training functions the chapters call, and their arguments with effects outside a call.
TRAINERS = {"train:train": ("out_dir",), "book.ladder:train_rung": (),
            "sft:train_sft": (), "dpo:train_dpo": ()}


# ------------------------------------------------------------------ what a call leaves
def _encode(value):
    """``value`` as JSON holds it exactly (floats by repr, nan too), with its tuples and the
    package's dataclasses marked; raises ``Unkeyable`` for anything else."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if isinstance(value, tuple):
        return {"tuple": [_encode(v) for v in value]}
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"dict": {k: _encode(v) for k, v in value.items()}}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {"dataclass": where(type(value), set()),
                "fields": {f.name: _encode(getattr(value, f.name))
                           for f in dataclasses.fields(value)}}
    raise Unkeyable(f"it returns a {type(value).__qualname__}")


def _decode(value):
    """``_encode``'s inverse."""
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "tuple" in value:
        return tuple(_decode(v) for v in value["tuple"])
    if "dict" in value:
        return {k: _decode(v) for k, v in value["dict"].items()}
    module, _, name = value["dataclass"].partition(":")
    cls = functools.reduce(getattr, name.split("."), importlib.import_module(module))
    return cls(**{k: _decode(v) for k, v in value["fields"].items()})


def _modules(args: tuple, kwargs: dict) -> list[nn.Module]:
    return [v for v in (*args, *kwargs.values()) if isinstance(v, nn.Module)]


def _left(modules: list[nn.Module]) -> tuple[dict, list]:
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
        flags.append([sub.training for sub in model.modules()])
    return tensors, flags


def _restore(modules: list[nn.Module], tensors: dict, flags: list) -> None:
    """Put ``_left``'s record back into ``modules``, in place (the same tensors)."""
    for i, model in enumerate(modules):
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(tensors[f"{i}/param/{name}"])
                grad = tensors.get(f"{i}/grad/{name}")
                p.grad = None if grad is None else grad.clone()
            for name, b in model.named_buffers():
                b.copy_(tensors[f"{i}/buffer/{name}"])
        for sub, flag in zip(model.modules(), flags[i], strict=True):
            sub.training = flag


def _setrandom_states(states: dict) -> None:
    torch.set_rng_state(states["torch"])
    version, internal, gauss = states["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, gauss = states["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, gauss))


class _Tee(io.TextIOBase):
    """Writes to ``out`` and keeps a copy."""

    def __init__(self, out):
        self.out, self.copy = out, io.StringIO()

    def write(self, text: str) -> int:
        self.copy.write(text)
        return self.out.write(text)

    def flush(self) -> None:
        self.out.flush()


# ------------------------------------------------------------------ the cache
def entry_of(fn: Callable, key: str) -> Entry:
    """The folder of a call's record: ``cache_dir() / "runs" / "<function>-<key>"``."""
    folder = cache_dir() / "runs" / f"{fn.__name__}-{key[:16]}"
    return Entry(fn.__name__, {"key": key}, folder)


def _read(entry: Entry, key: str):
    """``(tensors, meta)`` of ``entry``, verified; None when there is none or it is damaged
    (said in a warning)."""
    meta_file = entry.path / "run.json"
    if not meta_file.is_file():
        return None
    try:
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
        if meta["key"] != key:
            raise ValueError("made from other inputs (a copied or edited folder)")
        if sha256_file(entry.path / "state.safetensors") != meta["sha256"]:
            raise ValueError("state.safetensors is not the file that was saved")
        return load_file(entry.path / "state.safetensors"), meta
    except (OSError, ValueError, KeyError) as err:
        warnings.warn(f"training {entry.name} again: its cached run {entry.path} cannot be "
                      f"used ({err})", stacklevel=4)
        return None


def _write(entry: Entry, tensors: dict, meta: dict) -> None:
    """Save into a new folder, then rename it into place: a crash leaves no half entry."""
    partial = entry.path.with_name(entry.path.name + f".partial-{os.getpid()}")
    partial.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()},
              partial / "state.safetensors")
    meta["sha256"] = sha256_file(partial / "state.safetensors")
    (partial / "run.json").write_text(json.dumps(meta), encoding="utf-8")
    shutil.rmtree(entry.path, ignore_errors=True)  # a damaged one, refused by _read
    os.replace(partial, entry.path)


def cached_run(fn: Callable, side_effects: tuple[str, ...] = ()) -> Callable:
    """``fn`` (a training function of the package), whose calls are read from the cache
    where they can be keyed exactly (``run_key``) and trained once otherwise. A call with an
    argument of ``side_effects`` set (not None) runs uncached."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def run(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        try:
            if any(bound.arguments.get(name) is not None for name in side_effects):
                raise Unkeyable(f"one of {side_effects} is set")
            key = run_key(fn, args, kwargs)
        except Unkeyable:
            return fn(*args, **kwargs)
        modules = _modules(args, kwargs)
        entry = entry_of(fn, key)
        with trained_once(entry):
            found = _read(entry, key)
            if found is not None:
                tensors, meta = found
                _restore(modules, tensors, meta["flags"])
                states = json.loads(meta["random"])
                _setrandom_states(states | {"torch": tensors["random/torch"]})
                print(meta["stdout"], end="")
                return _decode(meta["returned"])
            others = [v for v in (*args, *kwargs.values()) if not isinstance(v, nn.Module)]
            before = values_digest(others)
            tee = _Tee(sys.stdout)
            with contextlib.redirect_stdout(tee):
                returned = fn(*args, **kwargs)
            try:
                if values_digest(others) != before:
                    raise Unkeyable("it changed an argument in place")
                meta = {"key": key, "returned": _encode(returned)}
            except Unkeyable:
                return returned
            tensors, meta["flags"] = _left(modules)
            states = random_states()
            tensors["random/torch"] = states.pop("torch")
            meta |= {"random": json.dumps(states), "stdout": tee.copy.getvalue()}
            _write(entry, tensors, meta)
            return returned

    return run


def install() -> None:
    """Swap each function of ``TRAINERS`` in its module for ``cached_run``'s (the test
    suite's kernels; ``GPT_FROM_SCRATCH_RUN_CACHE=0``: nothing). A name imported before
    keeps the function as written."""
    if os.environ.get(ENV_VAR, "1") == "0":
        return
    for where, side_effects in TRAINERS.items():
        module_name, _, name = where.partition(":")
        module = importlib.import_module(f"{PACKAGE}.{module_name}")
        fn = getattr(module, name)
        if not hasattr(fn, "__wrapped__"):
            setattr(module, name, cached_run(fn, side_effects))
