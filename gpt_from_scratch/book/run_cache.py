"""Chapters 6, 12 and 14 — the chapters' own runs, kept once per machine for the tests.

``make test`` runs every chapter under nbval, and Chapters 6 and 12 train a few dozen small
models in their own cells (the ladder, the learning rates, overfitting, the ablations, DPO)
and Chapter 14 samples thousands of answers to score its models: most of nbval's
CPU-seconds. Such a call is a pure function of its inputs, as a book model is
(``model_cache``): ``run_key`` names them. ``cached_run(fn)`` wraps a function of
``TRAINERS`` or ``SCORERS`` so that a call whose every input can be keyed runs once and is
then read from the cache; a hit leaves exactly what the call left: its return value (equal
objects, not the same ones), each module argument's weights, gradients, buffers and
train/eval flags, the random generators' states after it, what it printed on stdout and the
warnings it gave (tests/test_run_cache.py compares each, bit for bit).

A call that cannot be keyed runs as written, uncached (``run_key.Unkeyable``: a function
with effects, an object of an unknown type, a notebook's own class, a module or a tensor
with hooks, a GPU, more than one thread), and so does one with an argument of
``side_effects`` set (``out_dir``), one that changed an argument in place (seen after the
call: it is not kept), and a call whose key this process has read once already: a chapter
that trains twice to show that the runs agree trains the second time. A damaged entry is
refused whole, with a warning, before anything is restored, and trained again.

Only the test suite uses it: ``install`` swaps the functions of ``TRAINERS`` and
``SCORERS`` for wrapped
ones that serve calls made by a notebook, in the kernels nbval starts
(``notebooks/conftest.py`` names ``scripts/nbval_startup.py`` in ``PYTHONSTARTUP``), except
for the chapters that time their training (Chapters 10 and 16). A reader's notebook trains
as written. ``GPT_FROM_SCRATCH_RUN_CACHE=0`` turns it off.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import hashlib
import importlib
import inspect
import json
import os
import shutil
import sys
import time
import warnings
from collections.abc import Callable

from safetensors.torch import load_file, save_file
from torch import nn

from ..data import cache_dir
from ..utils import sha256_file
from .model_cache import KEY_DIGITS, Entry, kept, trained_once
from .run_key import (PACKAGE, Unkeyable, random_states, run_key, structure_digest,
                      values_digest)
from .run_record import (Tee, check_record, decode, encode, left_by, module_args, restore,
                         set_random_states)

ENV_VAR = "GPT_FROM_SCRATCH_RUN_CACHE"  # "0": off
# The training functions the chapters call (Chapters 6 and 12), and their arguments with
# effects outside a call.
TRAINERS = {"train:train": ("out_dir",), "book.ladder:train_rung": (),
            "sft:train_sft": (), "dpo:train_dpo": ()}
# Chapter 14's scoring, which samples thousands of answers or runs many forward passes, each
# from a generator of its own (a seed argument) or none: keyed without the global
# generators' states, which a chapter need not have seeded (torch, NumPy and Python seed
# theirs anew in every process); a call that moved one is not kept.
SCORERS = {"book.assistant:evaluate": (), "book.verifier:sampled_scores": (),
           "book.verifier:answer_logprob": (), "book.verifier_control:sampled_answers": (),
           "book.verifier_control:next_token_kl": ()}


# ------------------------------------------------------------------ the cache
def entry_of(fn: Callable, key: str) -> Entry:
    """The folder of a call's record: ``cache_dir() / "runs" / "<function>-<key[:16]>"``,
    named as a model's entry is (its whole key is checked on reading)."""
    folder = cache_dir() / "runs" / f"{fn.__name__}-{key[:KEY_DIGITS]}"
    return Entry(fn.__name__, {"key": key}, folder)


def _read(entry: Entry, key: str, modules: list[nn.Module]):
    """``(tensors, meta)`` of ``entry``, verified whole; None when there is none or it
    cannot be used (said on the process's own stderr, not in the notebook's cell)."""
    if not (entry.path / "run.json").is_file():
        return None
    try:
        text = (entry.path / "run.json").read_bytes()
        if hashlib.sha256(text).hexdigest() != (entry.path / "run.sha256").read_text():
            raise ValueError("run.json is not the file that was saved")
        meta = json.loads(text)
        if meta["key"] != key:
            raise ValueError("made from other inputs (a copied or edited folder)")
        if sha256_file(entry.path / "state.safetensors") != meta["state_sha256"]:
            raise ValueError("state.safetensors is not the file that was saved")
        tensors = load_file(entry.path / "state.safetensors")
        check_record(modules, tensors, meta)
    except Exception as err:  # whatever is wrong with it, it is not used
        _say(f"training {entry.name} again: its cached run {entry.path} cannot be used "
             f"({type(err).__name__}: {err})")
        return None
    entry.path.with_name(entry.path.name + ".used").touch()
    return tensors, meta


def _write(entry: Entry, tensors: dict, meta: dict) -> None:
    """Save into a new folder, then rename it into place (a crash leaves no half entry);
    entries of the same function unread for ``model_cache.UNUSED_DAYS`` go (``kept``), and
    folders half written by a process killed a day ago. A failure is said: the training it
    would keep is done."""
    partial = entry.path.with_name(entry.path.name + f".partial-{os.getpid()}")
    try:
        partial.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in tensors.items()},
                  partial / "state.safetensors")
        meta["state_sha256"] = sha256_file(partial / "state.safetensors")
        text = json.dumps(meta).encode()
        (partial / "run.json").write_bytes(text)
        (partial / "run.sha256").write_text(hashlib.sha256(text).hexdigest())
        shutil.rmtree(entry.path, ignore_errors=True)  # a damaged one, refused by _read
        os.replace(partial, entry.path)
        kept(entry, {})  # stamps it read now, removes the long unread ones
    except OSError as err:
        _say(f"{entry.name}: its run could not be kept in {entry.path} ({err})")
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    for left in entry.path.parent.glob(f"{entry.name}-*.partial-*"):
        if left.stat().st_mtime < time.time() - 86400:
            shutil.rmtree(left, ignore_errors=True)


def _say(text: str) -> None:
    """The cache's own messages: on the process's stderr, never in a notebook's output
    (where nbval would compare them)."""
    print(f"run_cache: {text}", file=sys.__stderr__, flush=True)


def _replay(caught) -> None:
    """Warn again each warning a call gave: ``(message, category, filename, lineno)``."""
    for message, category, filename, lineno in caught:
        warnings.warn_explicit(message, category, filename, lineno)


def cached_run(fn: Callable, side_effects: tuple[str, ...] = (),
               only_from: str | None = None, global_random: bool = True) -> Callable:
    """``fn`` (a training or scoring function of the package), whose calls are read from
    the cache where they can be keyed exactly (``run_key``) and run once otherwise. A call
    with an argument of ``side_effects`` set (not None), or made from a module other than
    ``only_from`` (where given), runs uncached, and so does a call whose key this process
    has read before (a chapter that trains twice to compare trains the second time).
    Without ``global_random`` (``SCORERS``), the global generators' states are not in the
    key and a hit leaves them as they are; a call that moved one is not kept."""
    if not inspect.isfunction(fn):
        raise TypeError(f"cached_run: fn={fn!r:.60} must be a function of the package, "
                        "such as gpt_from_scratch.train.train")
    signature = inspect.signature(fn)
    unknown = set(side_effects) - set(signature.parameters)
    if unknown:
        raise ValueError(f"cached_run: side_effects {sorted(unknown)} are not arguments of "
                         f"{fn.__name__} {signature}: name its arguments")
    served: set[str] = set()

    @functools.wraps(fn)
    def run(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        caller = sys._getframe(1).f_globals.get("__name__")
        try:
            if any(bound.arguments.get(name) is not None for name in side_effects):
                raise Unkeyable(f"one of {side_effects} is set")
            if only_from is not None and caller != only_from:
                raise Unkeyable(f"called from {caller}, not {only_from}")
            key = run_key(fn, args, kwargs, global_random)
            if key in served:
                raise Unkeyable("this process has read it once: a repeat trains")
        except Unkeyable:
            return fn(*args, **kwargs)
        except Exception as err:  # a key that cannot be made is a call run as written
            _say(f"{fn.__name__} runs uncached: its key failed "
                 f"({type(err).__name__}: {err})")
            return fn(*args, **kwargs)
        served.add(key)
        modules = module_args(args, kwargs)
        entry = entry_of(fn, key)
        with trained_once(entry):
            found = _read(entry, key, modules)
            if found is not None:
                tensors, meta = found
                restore(modules, tensors, meta["modules"])
                if global_random:
                    set_random_states(meta["random"] | {"torch": tensors["random/torch"]})
                _replay((m, getattr(builtins, c), f, n) for m, c, f, n in meta["warnings"])
                print(meta["stdout"], end="")
                return decode(meta["returned"])
            others = [v for v in (*args, *kwargs.values()) if not isinstance(v, nn.Module)]
            before = values_digest(others), structure_digest(modules), \
                values_digest(list(random_states().values()))
            tee = Tee(sys.stdout)
            with contextlib.redirect_stdout(tee), warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                returned = fn(*args, **kwargs)
            said = [[str(x.message), x.category.__name__, x.filename, x.lineno] for x in w]
            _replay((x.message, x.category, x.filename, x.lineno) for x in w)
            try:
                after = random_states().values()
                if (values_digest(others), structure_digest(modules)) != before[:2]:
                    raise Unkeyable("it changed an argument in place, or a module's "
                                    "attributes or submodules")
                if not global_random and values_digest(list(after)) != before[2]:
                    raise Unkeyable("it drew from a global generator")
                if any(not hasattr(builtins, c) for _, c, _, _ in said):
                    raise Unkeyable("it warns with a category of its own")
                meta = {"key": key, "returned": encode(returned)}
            except Unkeyable:
                return returned
            tensors, meta["modules"] = left_by(modules)
            states = random_states()
            tensors["random/torch"] = states.pop("torch")
            meta |= {"random": states, "stdout": tee.copy.getvalue(),
                     "warnings": said}
            _write(entry, tensors, meta)
            return returned

    run.run_cached = True
    return run


def install() -> None:
    """Swap each function of ``TRAINERS`` and ``SCORERS`` in its module for
    ``cached_run``'s, for calls made by a notebook (``__main__``): the test suite's kernels.
    ``GPT_FROM_SCRATCH_RUN_CACHE=0``: nothing."""
    if os.environ.get(ENV_VAR, "1") == "0":
        return
    for runs, global_random in ((TRAINERS, True), (SCORERS, False)):
        for where_, side_effects in runs.items():
            module_name, _, name = where_.partition(":")
            module = importlib.import_module(f"{PACKAGE}.{module_name}")
            fn = getattr(module, name)
            if not getattr(fn, "run_cached", False):
                setattr(module, name, cached_run(fn, side_effects, only_from="__main__",
                                                 global_random=global_random))
