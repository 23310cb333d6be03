"""Chapters 6-14 — the book's trained models, kept once per machine, never used stale.

A trained model is a pure function of what made it: its recipe, the source of the code that
trains it, the versions of the libraries it ran on and the arithmetic (PyTorch's CPU kernels,
its thread count, the processor or GPU). ``model_entry`` names the folder keyed by exactly those
inputs, ``cache_dir() / "models" / "<name>-<16 hex digits>"``, so that a second ``make test``,
a second clone and CI on the same machine read a model that a first run trained, while any
change to one input trains it again. The key's inputs are stored in the checkpoint too
(``extra["key"]``) and compared on load: a folder copied or renamed under another key is not
used. ``cached`` loads an entry, verified file by file, or says why it cannot.

``source_closure`` reads the package's imports from its syntax trees (lazy imports too): the code
a trainer runs is its module and every module of the package it imports, transitively; its
docstrings and comments are not part of the key (``code_of``). The same
reading checks that imports run downhill (``tests/test_layers.py``).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import platform
import shutil
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import torch
from filelock import FileLock, Timeout

from ..checkpoint import META_FILE, Checkpoint, load_checkpoint
from ..data import cache_dir

PACKAGE = Path(__file__).resolve().parents[1]  # gpt_from_scratch/
LIBRARIES = ("torch", "numpy", "tiktoken", "safetensors")  # whose versions are in every key
UNUSED_DAYS = 30  # an entry of the same name not read for this long is removed on a new save
KEY_DIGITS = 16  # hex digits of the key's SHA-256 in the folder's name


# ------------------------------------------------------------------ the package's imports
def module_name(path: Path, package: Path = PACKAGE) -> str:
    """``book/ladder.py`` -> ``book.ladder``; ``__init__.py`` names its folder ("" for the root)."""
    parts = list(path.relative_to(package).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path: Path, package: Path, modules: set[str]) -> set[str]:
    """The package's modules that ``path`` imports, anywhere in the file."""
    here = module_name(path, package).split(".") + (["__init__"] if path.name == "__init__.py"
                                                    else [])
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = [p for p in here[: len(here) - node.level] if p]
            elif (node.module or "").split(".")[0] == package.name:
                base = []
            else:
                continue
            module = (node.module or "") if node.level else (node.module or "").partition(".")[2]
            target = ".".join(base + ([module] if module else []))
            for alias in node.names:  # `from . import train` imports a module
                child = f"{target}.{alias.name}" if target else alias.name
                found.add(child if child in modules else target)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == package.name:
                    found.add(alias.name.partition(".")[2])
    return {m for m in found if m in modules and m} - {module_name(path, package)}


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """``{module: the package's modules it imports}``, for every module of ``package``."""
    files = sorted(package.rglob("*.py"))
    return {name: set(deps) for name, deps in
            _graph(package, tuple((p, p.stat().st_mtime_ns, p.stat().st_size) for p in files))}


@functools.lru_cache(maxsize=8)
def _graph(package: Path, files: tuple) -> tuple:
    """``import_graph``'s reading, once per state of the files (their times and sizes)."""
    names = {module_name(p, package): p for p, _, _ in files}
    return tuple((name, tuple(imported_modules(path, package, set(names))))
                 for name, path in names.items() if name)


def source_closure(module: str, package: Path = PACKAGE) -> list[Path]:
    """The files of ``module`` (``"book.recipes"``) and of every module of the package it imports,
    transitively, with the ``__init__.py`` of each package on the way: sorted."""
    graph = import_graph(package)
    if module not in graph:
        raise ValueError(f"source_closure: {module!r} is not a module of {package.name} "
                         f"(one of {len(graph)}, such as 'book.recipes'): name it without "
                         f"the package, dots between folders")
    seen, todo = set(), [module]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(graph[name])
    files = set()
    for name in seen:
        parts = name.split(".")
        for depth in range(len(parts)):  # the packages a Python import runs first
            files.add(package.joinpath(*parts[:depth], "__init__.py"))
        as_file = package.joinpath(*parts).with_suffix(".py")
        files.add(as_file if as_file.is_file() else package.joinpath(*parts, "__init__.py"))
    return sorted(files)


# ------------------------------------------------------------------ the key
def arithmetic(device: str = "cpu") -> dict:
    """What decides the last bits of a training run besides its code: PyTorch's CPU kernels
    (``ATEN_CPU_CAPABILITY`` chooses them), its threads, the processor, and the GPU if any."""
    found = {"capability": torch.backends.cpu.get_cpu_capability(),
             "threads": torch.get_num_threads(), "machine": platform.machine(),
             "processor": _processor(), "device": str(device)}
    if str(device).startswith("cuda"):
        found |= {"gpu": torch.cuda.get_device_name(torch.device(device)),
                  "cuda": torch.version.cuda}
    return found


def _processor() -> str:
    """The processor's model name (``/proc/cpuinfo`` on Linux), else what ``platform`` says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def versions() -> dict:
    """Python's version and each of ``LIBRARIES``' (None where it is not installed)."""
    found = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def code_of(path: Path) -> str:
    """What of a Python file can change what it computes: its syntax tree, less its
    docstrings (comments and line numbers are not in it), as ``ast.dump`` writes it. A
    function whose body was only its docstring gets ``pass``, which does the same."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                node.body = node.body[1:] or [ast.Pass()]
    return ast.dump(tree)


def source_digest(module: str, package: Path = PACKAGE) -> str:
    """SHA-256 over the files of ``source_closure(module)``: each one's path in the package and
    its code (``code_of``: a docstring or a comment edited trains nothing anew; not where the
    package lies: two clones of one commit give one digest)."""
    digest = hashlib.sha256()
    for path in source_closure(module, package):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0")
        digest.update(code_of(path).encode() + b"\0")
    return digest.hexdigest()


@dataclass(frozen=True)
class Entry:
    """One cached model: its ``name``, the ``key`` it was made from and the folder ``path``."""

    name: str
    key: dict  # every input, as JSON reads it back
    path: Path

    @property
    def digest(self) -> str:
        return self.path.name.rpartition("-")[2]


def model_entry(name: str, settings: dict, trainer: str, parents: tuple[Entry, ...] = (),
                device: str = "cpu") -> Entry:
    """The cache entry of the model ``name`` trained with ``settings`` (JSON-able: numbers,
    strings, lists, dicts) by the module ``trainer`` (``__name__`` of the caller), from the
    models ``parents`` (their entries), on ``device``."""
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"model_entry: name={name!r} must be a plain folder name such as "
                         "'shakespeare-char'")
    if not trainer.startswith(PACKAGE.name + "."):
        raise ValueError(f"model_entry: trainer={trainer!r} is not a module of {PACKAGE.name}: "
                         "pass the training module's __name__")
    try:
        settings = json.loads(json.dumps(settings, allow_nan=False))
    except (TypeError, ValueError) as err:
        raise ValueError(f"model_entry: the settings of {name!r} cannot be stored exactly "
                         f"({err}): give each setting as a Python int, float, str or bool "
                         "(int(x) or float(x) for a NumPy number), never nan or inf") from None
    key = {"name": name, "settings": settings,
           "code": source_digest(trainer.partition(".")[2]),
           "parents": {p.name: p.digest for p in parents},
           "versions": versions(), "arithmetic": arithmetic(device)}
    text = json.dumps(key, sort_keys=True)
    digest = hashlib.sha256(text.encode()).hexdigest()[:KEY_DIGITS]
    return Entry(name, json.loads(text), cache_dir() / "models" / f"{name}-{digest}")


# ------------------------------------------------------------------ reading and keeping
QUIET_WAIT_S = 20.0  # longer than loading any book model takes on a busy machine


@contextmanager
def trained_once(entry: Entry) -> Iterator[None]:
    """Hold the lock file beside ``entry``'s folder while its model is looked up, trained and
    saved: a second process that asks for the same model (another notebook, a parallel test run)
    waits, then loads what the first one saved, rather than training it again beside it. The lock
    is the operating system's, so it is released when its process ends, even by a crash. A wait
    longer than ``QUIET_WAIT_S`` (a training, not a read) is said on stdout; a shorter one is
    silent, so that a chapter's output does not depend on which chapter beside it read the model
    first."""
    entry.path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(entry.path.with_name(entry.path.name + ".lock"))
    try:
        lock.acquire(timeout=QUIET_WAIT_S)  # a process that only reads it holds it briefly
    except Timeout:
        print(f"{entry.name}: another process is training this model; waiting for it "
              f"(lock file {lock.lock_file})", flush=True)
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def cached(entry: Entry) -> Checkpoint | None:
    """The checkpoint of ``entry``, verified (every file's SHA-256, its key); None when there is
    none yet, or when it cannot be used (damaged, another key), which is said in a warning."""
    if not (entry.path / META_FILE).is_file():
        return None
    try:
        ckpt = load_checkpoint(entry.path)
    except (ValueError, OSError) as err:  # CheckpointError is a ValueError
        warnings.warn(f"retraining {entry.name}: its cached checkpoint {entry.path} could not "
                      f"be used ({err})", stacklevel=3)
        return None
    if ckpt.extra.get("key") != entry.key:
        warnings.warn(f"retraining {entry.name}: {entry.path} was made from other inputs than "
                      "its name's key (a copied or edited folder)", stacklevel=3)
        return None
    _used(entry.path)
    return ckpt


def kept(entry: Entry, extra: dict) -> dict:
    """``extra`` for ``save_checkpoint`` with the entry's key in it; older entries of the same
    name that no run has read for ``UNUSED_DAYS`` days are removed."""
    _used(entry.path)
    cutoff = time.time() - UNUSED_DAYS * 86400
    for stamp in entry.path.parent.glob(f"{entry.name}-*.used"):
        other = stamp.with_suffix("")
        if other != entry.path and stamp.stat().st_mtime < cutoff and _is_entry(other, entry):
            _remove(other)
    return extra | {"key": entry.key}


def _is_entry(path: Path, of: Entry) -> bool:
    """``path`` is another entry of ``of.name`` (not of a longer name that starts alike)."""
    digest = path.name[len(of.name) + 1:]
    return len(digest) == KEY_DIGITS and all(c in "0123456789abcdef" for c in digest)


def _remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
    for suffix in (".used", ".lock"):
        path.with_name(path.name + suffix).unlink(missing_ok=True)


def _used(path: Path) -> None:
    """Stamp ``path``'s entry as read now (the ``.used`` file beside it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_name(path.name + ".used").touch()

