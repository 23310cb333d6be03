"""Chapter 6 — the data at two levels and the two models the book trains (``book_model``).

``char_level_data`` and ``bpe_level_data`` give Tiny Shakespeare's training and validation ids;
``RECIPES`` holds the settings of each model the book trains; ``book_model`` loads one from its
checkpoint in the cache, or trains and saves it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..checkpoint import save_checkpoint
from ..data import load_tiny_shakespeare, prepare_tokens, read_tokens, split_text
from ..model import GPT, GPTConfig
from ..tokenizer import CharTokenizer, gpt2_encoding
from ..train import train
from ..train_config import TrainConfig
from ..utils import default_device
from .model_cache import Entry, cached, kept, model_entry, trained_once


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


def book_model_entry(name: str, full: bool = False) -> Entry:
    """The cache entry of ``book_model(name, full)`` (``model_cache.model_entry``): its folder,
    ``book_model_path(name, full)``, is keyed by the recipe, this code, the library versions and
    the arithmetic of this process (and, with ``full``, of ``default_device()``)."""
    if name not in BOOK_MODELS:
        raise ValueError(f"unknown book model {name!r}: choose one of {', '.join(BOOK_MODELS)}")
    if full and name + FULL not in RECIPES:
        raise ValueError(f"book model {name!r} has no full-size recipe: use full=False")
    recipe = RECIPES[name + FULL if full else name]
    return model_entry(name + FULL if full else name, dataclasses.asdict(recipe), __name__,
                       device=default_device() if full else "cpu")


def book_model_path(name: str, full: bool = False) -> Path:
    """Where ``book_model(name, full)`` keeps its checkpoint, for the current settings:
    ``cache_dir() / "models" / "<name>-<key>"`` (with ``full``, ``name + "-full"``)."""
    return book_model_entry(name, full).path


def book_model(name: str, progress: bool = True, full: bool = False):
    """One of the two models Chapter 6 trains, ``"shakespeare-char"`` or ``"shakespeare-bpe"``.

    ``full=True`` (the chapters' ``FULL_RUN``) uses the GPU-sized recipe ``RECIPES[name + "-full"]``
    instead, trained on ``default_device()`` in its fastest exact-enough setting (``precision="auto"``,
    ``torch.compile`` on a GPU), and kept apart (``book_model_path(name, full=True)``).

    Returns ``(model, tokenizer)``: the ``GPT`` in eval mode on the CPU, and what decodes its ids
    (a ``CharTokenizer``, or the tiktoken GPT-2 encoding), both with ``.encode(text)`` and ``.decode(ids)``.

    The checkpoint in ``book_model_path(name)`` is loaded (and verified) when it exists: its folder
    is keyed by the recipe, the code, the versions and the arithmetic (``model_cache``). Otherwise
    the model is trained from seed 1337 with ``RECIPES[name]`` and saved there. Training is
    deterministic, so both routes give the same weights (other CPUs, thread counts or PyTorch
    versions differ in the last bits, and have folders of their own). Its ``History`` is
    ``load_checkpoint(book_model_path(name)).history``. Two processes that ask for the same model
    at once train it once (``trained_once``).
    """
    entry = book_model_entry(name, full)  # checks the name
    with trained_once(entry):
        return _book_model(entry, RECIPES[name + FULL if full else name], progress, full)


def _book_model(entry: Entry, recipe: Recipe, progress: bool, full: bool):
    """``book_model``'s work, under its lock."""
    train_ids, val_ids, tokenizer = load_data(recipe.data)
    if (ckpt := cached(entry)) is not None:
        return ckpt.model, tokenizer
    device = default_device() if full else "cpu"
    cfg = TrainConfig(**recipe.train, progress=progress, device=device,
                      compile=full and device == "cuda")
    torch.manual_seed(cfg.seed)
    model = GPT(GPTConfig(**recipe.model))
    history = train(model, train_ids, val_ids, cfg)  # ends with the best weights (keep_best)
    save_checkpoint(entry.path, model, history.best_step, cfg, history=history,
                    extra=kept(entry, {"recipe": dataclasses.asdict(recipe)}))
    return model.cpu().eval(), tokenizer
