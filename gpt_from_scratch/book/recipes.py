"""Chapter 6 — the data at two levels and the two models the book trains (``book_model``).

``char_level_data`` and ``bpe_level_data`` give Tiny Shakespeare's training and validation ids;
``RECIPES`` holds the settings of each model the book trains; ``book_model`` loads one from its
checkpoint in the cache, or trains and saves it.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from filelock import FileLock, Timeout

from ..checkpoint import META_FILE, load_checkpoint, save_checkpoint
from ..data import cache_dir, load_tiny_shakespeare, prepare_tokens, read_tokens, split_text
from ..model import GPT, GPTConfig
from ..tokenizer import CharTokenizer, gpt2_encoding
from ..train import train
from ..train_config import TrainConfig
from ..utils import default_device


def char_level_data(text: str | None = None) -> tuple[np.ndarray, np.ndarray, CharTokenizer]:
    """Character-level Tiny Shakespeare: ``(train_ids, val_ids, tokenizer)``.

    The vocabulary is every character of the whole corpus (65); the first 90% is for training
    (1,003,854 tokens), the rest for validation (111,540). Ids are ``uint16`` NumPy arrays.
    """
    text = load_tiny_shakespeare() if text is None else text
    tokenizer = CharTokenizer(text)
    train_text, val_text = split_text(text, 0.9)
    train_ids = np.array(tokenizer.encode(train_text), dtype=np.uint16)
    val_ids = np.array(tokenizer.encode(val_text), dtype=np.uint16)
    return train_ids, val_ids, tokenizer


def bpe_level_data(text: str | None = None):
    """GPT-2-BPE-level Tiny Shakespeare: ``(train_ids, val_ids, encoding)`` (301,966 and 36,059 tokens).

    The ids come from ``prepare_tokens`` (memory-mapped ``uint16`` files in the cache); ``encoding`` is
    the tiktoken GPT-2 encoding (``encode_ordinary`` / ``decode``).
    """
    encoding = gpt2_encoding()
    paths = prepare_tokens(encoding, text=text)
    return read_tokens(paths["train"]), read_tokens(paths["val"]), encoding


@dataclass(frozen=True)
class Recipe:
    """A model the book trains: its data level, architecture and training settings."""

    data: str  # "char" or "bpe"
    model: dict  # GPTConfig fields
    train: dict  # TrainConfig fields that differ from the defaults


_CHAR = dataclasses.asdict(GPTConfig.from_preset("shakespeare-char"))  # 4 layers, 4 heads, 128 dims, context 64
RECIPES = {
    # nanoGPT's CPU run for Shakespeare-char (4 layers, 128 dims, batch 12, block 64, no dropout), with
    # 3,000 steps instead of 2,000 and a learning rate three times higher (3e-3 -> 3e-4): nanoGPT's own
    # reaches 1.88 in 2,000 steps, this one gets below 1.80, in under two minutes on 2 CPU cores
    # (benchmarks/bench_train.py runs nanoGPT's settings).
    "shakespeare-char": Recipe("char", _CHAR, dict(max_iters=3000, batch_size=12, learning_rate=3e-3,
                                                   min_lr=3e-4, eval_interval=500, eval_iters=40)),
    # The same network on GPT-2 tokens: its 50,257-way output layer is most of the work, hence fewer steps.
    "shakespeare-bpe": Recipe("bpe", _CHAR | {"vocab_size": 50_257},
                              dict(max_iters=100, batch_size=8, warmup_iters=10, eval_interval=25, eval_iters=5)),
    # nanoGPT's GPU run for Shakespeare-char (6 layers, 6 heads, 384 dims, context 256, dropout 0.2): for a GPU.
    "shakespeare-char-full": Recipe("char", _CHAR | dict(context_length=256, d_model=384, n_layers=6, n_heads=6,
                                                         d_ff=1536, dropout=0.2),
                                    dict(max_iters=5000, batch_size=64, eval_interval=250, eval_iters=200)),
    # The BPE model at that GPU size, for FULL_RUN (book_model(..., full=True)); not run on the CPU. Sized by
    # reasoning, not yet measured: 302k training tokens are 37 steps of 32 x 256 tokens, so 2,000 steps are
    # ~54 epochs, past the point where the validation loss turns up (keep_best keeps the best). The 50,257-way
    # output layer costs ~1 TFLOP per step: about 20 ms on an H100, so a minute or two with the estimates.
    "shakespeare-bpe-full": Recipe("bpe", _CHAR | dict(vocab_size=50_257, context_length=256, d_model=384,
                                                       n_layers=6, n_heads=6, d_ff=1536, dropout=0.2),
                                   dict(max_iters=2000, batch_size=32, learning_rate=6e-4, min_lr=6e-5,
                                        eval_interval=100, eval_iters=50)),
}
BOOK_MODELS = ("shakespeare-char", "shakespeare-bpe")  # what book_model returns
FULL = "-full"  # book_model(name, full=True) uses RECIPES[name + FULL], on the GPU


def load_data(level: str):
    """``char_level_data()`` for ``"char"``, ``bpe_level_data()`` for ``"bpe"``."""
    if level == "char":
        return char_level_data()
    if level == "bpe":
        return bpe_level_data()
    raise ValueError(f"unknown data level {level!r}: use 'char' or 'bpe'")


def book_model_path(name: str, full: bool = False) -> Path:
    """Where ``book_model(name, full)`` keeps its checkpoint: ``cache_dir() / "checkpoints" / name``
    (with ``full``, ``name + "-full"``)."""
    if name not in BOOK_MODELS:
        raise ValueError(f"unknown book model {name!r}: choose one of {', '.join(BOOK_MODELS)}")
    if full and name + FULL not in RECIPES:
        raise ValueError(f"book model {name!r} has no full-size recipe: use full=False")
    return cache_dir() / "checkpoints" / (name + FULL if full else name)


QUIET_WAIT_S = 20.0  # longer than loading any book model takes on a busy machine


@contextmanager
def trained_once(path: Path) -> Iterator[None]:
    """Hold the lock file beside the checkpoint folder ``path`` while its model is looked up, trained
    and saved: a second process that asks for the same model (another notebook, a parallel test run)
    waits, then loads what the first one saved, rather than training it again beside it. The lock is
    the operating system's, so it is released when its process ends, even by a crash. A wait longer
    than ``QUIET_WAIT_S`` (a training, not a read) is said on stdout; a shorter one is silent, so
    that a chapter's output does not depend on which chapter beside it read the model first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(path.parent / f"{path.name}.lock")
    try:
        lock.acquire(timeout=QUIET_WAIT_S)  # a process that only reads it holds it briefly
    except Timeout:
        print(f"{path.name}: another process is training this model; waiting for it "
              f"(lock file {lock.lock_file})", flush=True)
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def book_model(name: str, progress: bool = True, full: bool = False):
    """One of the two models Chapter 6 trains, ``"shakespeare-char"`` or ``"shakespeare-bpe"``.

    ``full=True`` (the chapters' ``FULL_RUN``) uses the GPU-sized recipe ``RECIPES[name + "-full"]``
    instead, trained on ``default_device()`` in its fastest exact-enough setting (``precision="auto"``,
    ``torch.compile`` on a GPU), and kept apart (``book_model_path(name, full=True)``).

    Returns ``(model, tokenizer)``: the ``GPT`` in eval mode on the CPU, and what decodes its ids
    (a ``CharTokenizer``, or the tiktoken GPT-2 encoding), both with ``.encode(text)`` and ``.decode(ids)``.

    The checkpoint in ``book_model_path(name)`` is loaded (and verified) when it exists and was made with
    the book's current settings; otherwise the model is trained from seed 1337 with ``RECIPES[name]``
    and saved there. Training is deterministic, so both routes give the same weights on one machine
    (other CPUs, thread counts or PyTorch versions may differ in the last bits). Its ``History`` is
    ``load_checkpoint(book_model_path(name)).history``. Two processes that ask for the same model at
    once train it once (``trained_once``).
    """
    path = book_model_path(name, full)  # checks the name
    with trained_once(path):
        return _book_model(path, RECIPES[name + FULL if full else name], progress, full)


def _book_model(path: Path, recipe: Recipe, progress: bool, full: bool):
    """``book_model``'s work, under its lock."""
    name = path.name
    train_ids, val_ids, tokenizer = load_data(recipe.data)
    device = default_device() if full else "cpu"
    cfg = TrainConfig(**recipe.train, progress=progress, device=device, compile=full and device == "cuda")
    if (path / META_FILE).is_file():
        try:
            ckpt = load_checkpoint(path)
            if ckpt.extra.get("recipe") == dataclasses.asdict(recipe):
                return ckpt.model, tokenizer
        except (ValueError, KeyError, TypeError, OSError) as err:
            warnings.warn(f"retraining {name}: its cached checkpoint could not be used ({err})", stacklevel=3)
    torch.manual_seed(cfg.seed)
    model = GPT(GPTConfig(**recipe.model))
    history = train(model, train_ids, val_ids, cfg)  # ends with the best weights (keep_best)
    save_checkpoint(path, model, history.best_step, cfg, history=history,
                    extra={"recipe": dataclasses.asdict(recipe)})
    return model.cpu().eval(), tokenizer
