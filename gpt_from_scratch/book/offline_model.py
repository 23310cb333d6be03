"""Chapter 8 — the model the chapter analyses when GPT-2's weights cannot be downloaded.

A small GPT on GPT-2 tokens of Tiny Shakespeare, trained like Chapter 6's models with two changes.
Every training window starts with ``<|endoftext|>``, as each of GPT-2's training documents does
(``DocumentStart``): a token that opens every window and carries no information is where trained
heads learn to park the attention they do not need, an attention sink (Xiao et al., 2024). And it
learns only the tokens the training text uses (``CorpusVocabGPT``): its output layer is a fifth of
GPT-2's, which makes a step several times cheaper on a CPU, while it still reads GPT-2's ids.

``offline_model()`` trains it once from seed 1337 and caches it in ``offline_model_path()`` (like
``book_model``); ``offline_model(seed=k)`` is the same recipe from another seed (Chapter 9 reads several,
so that its lessons do not rest on one training run), ``offline_model(full=True)`` a larger run for a GPU.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import torch
from torch import Tensor, nn

from ..checkpoint import save_checkpoint
from ..model import GPT, GPTConfig
from ..train import estimate_loss, train
from ..train_config import TrainConfig
from ..utils import default_device
from .corpus_vocab import CorpusVocabGPT, compact_ids, corpus_vocabulary
from .model_cache import Entry, cached, kept, model_entry, trained_once
from .recipes import Recipe, bpe_level_data

EOT = 50_256  # GPT-2's <|endoftext|>, which separates its training documents
SEED = 1337  # the seed of the offline model Chapter 8 analyses

# vocab_size is the corpus vocabulary's, set when training starts (11,235 rows for Tiny Shakespeare).
_SMALL = dict(context_length=64, d_model=64, n_layers=2, n_heads=4, d_ff=256, dropout=0.0)
OFFLINE_RECIPES = {
    # 2,000 steps, where 300 grew a sink (8.6 times its uniform baseline) but no previous-token head
    # (1.3 times): at 2,000 the previous-token head is 2.4 times its baseline, the sink 3.8 times
    # (Chapter 8's closing note prints the numbers of the run that made the cached model).
    "shakespeare-bpe-heads": Recipe("bpe", _SMALL, dict(
        max_iters=2000, batch_size=8, learning_rate=5e-3, min_lr=5e-4, warmup_iters=100,
        eval_interval=500, eval_iters=20)),
    # The GPU run: 4 layers, 4 heads, 128 dims, context 64, batch 32, lr 1e-3, 6,000 steps.
    "shakespeare-bpe-heads-full": Recipe("bpe", _SMALL | dict(d_model=128, n_layers=4, d_ff=512, dropout=0.1),
                                         dict(max_iters=6000, batch_size=32, warmup_iters=100,
                                              eval_interval=500, eval_iters=20)),
}


class DocumentStart(nn.Module):
    """Runs ``model`` on ``[<|endoftext|>] + idx``: every window is read as the start of a document.

    ``forward(idx, targets)`` takes (B, T-1) windows and their targets, as ``get_batch`` draws them
    with ``block_size = T - 1``; the model sees (B, T) and also learns to predict ``idx[:, 0]`` from
    ``<|endoftext|>`` alone, as GPT-2 learns the first token of each document.
    """

    def __init__(self, model: GPT, start_token: int = EOT):
        super().__init__()
        self.model, self.start_token = model, start_token
        self.training = model.training  # in the mode of the model it wraps, not a new module's "training"

    @property
    def config(self) -> GPTConfig:
        return self.model.config

    def forward(self, idx: Tensor, targets: Tensor | None = None):
        start = idx.new_full((idx.shape[0], 1), self.start_token)  # (B, 1)
        x = torch.cat([start, idx], dim=1)  # (B, T)
        y = None if targets is None else torch.cat([idx[:, :1], targets], dim=1)  # (B, T)
        return self.model(x, y)


def with_document_start(idx: Tensor, start_token: int = EOT) -> Tensor:
    """(B, T) -> (B, T + 1): ``<|endoftext|>`` in front of every row, as the offline model was trained."""
    return torch.cat([idx.new_full((idx.shape[0], 1), start_token), idx], dim=1)


def offline_model_entry(full: bool = False, seed: int = SEED, device: str | None = None) -> Entry:
    """The cache entry of ``offline_model(full, device=device, seed=seed)``: named for the recipe,
    followed by ``-seed<k>`` for a seed other than ``SEED``, and keyed by its settings, the seed,
    the code, the versions and the arithmetic of ``device`` (``model_cache``)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed={seed!r} must be a whole number >= 0 (the offline model's own is "
                         f"{SEED}; Chapter 9 adds 0, 1, ...)")
    name = _name(full) + ("" if seed == SEED else f"-seed{seed}")
    settings = dataclasses.asdict(OFFLINE_RECIPES[_name(full)]) | {"seed": seed}
    return model_entry(name, settings, __name__, device=device or default_device())


def offline_model_path(full: bool = False, seed: int = SEED, device: str | None = None) -> Path:
    """Where ``offline_model(full, device=device, seed=seed)`` keeps its checkpoint:
    ``offline_model_entry(...).path``, ``cache_dir() / "models" / "<name>-<key>"``."""
    return offline_model_entry(full, seed, device).path


def _name(full: bool) -> str:
    return "shakespeare-bpe-heads-full" if full else "shakespeare-bpe-heads"


def offline_model(full: bool = False, progress: bool = False, device: str | None = None,
                  seed: int = SEED):
    """Chapter 8's offline model: ``(model, info)``, a ``CorpusVocabGPT`` in eval mode on the CPU and a
    dict with its ``recipe`` name and settings, ``corpus_vocab`` (tokens learned, ``<unk>`` aside),
    ``train_seconds`` (of the run that made it) and ``val_loss`` (over GPT-2's 50,257 tokens).

    Loaded from ``offline_model_path(full, seed, device)`` when it is there (its folder is keyed by
    the recipe, the code, the versions and the arithmetic: ``model_cache``); otherwise trained from
    ``seed`` (on ``device``, by default the best available) and saved there, once when two
    processes ask at the same time (``trained_once``).
    """
    device = device or default_device()
    entry = offline_model_entry(full, seed, device)
    with trained_once(entry):
        return _offline_model(full, progress, device, seed, entry)


def _offline_model(full: bool, progress: bool, device: str, seed: int, entry: Entry):
    """``offline_model``'s work, under its lock."""
    name = _name(full)
    recipe = OFFLINE_RECIPES[name]
    if (ckpt := cached(entry)) is not None:
        vocab = torch.tensor(ckpt.extra["vocabulary"], dtype=torch.long)
        return CorpusVocabGPT(ckpt.model, vocab).eval(), ckpt.extra["info"]
    train_ids, val_ids, _ = bpe_level_data()
    vocab = corpus_vocabulary(train_ids, extra=(EOT,))  # (V_corpus,) GPT-2 ids; <unk> comes after them
    table = compact_ids(vocab).numpy()
    cfg = TrainConfig(**recipe.train, block_size=recipe.model["context_length"] - 1, device=device,
                      progress=progress, seed=seed)
    torch.manual_seed(cfg.seed)
    compact = GPT(GPTConfig(**recipe.model, vocab_size=len(vocab) + 1))
    started = time.perf_counter()
    history = train(DocumentStart(compact, start_token=int(table[EOT])), table[train_ids], table[val_ids], cfg)
    seconds = time.perf_counter() - started
    model = CorpusVocabGPT(compact, vocab)
    val = estimate_loss(DocumentStart(model), {"val": val_ids}, cfg.batch_size, cfg.block_size, cfg.eval_iters,
                        seed=SEED, device=device)["val"]  # over GPT-2's tokens, <unk> shared out
    model.cpu().eval()
    info = dict(recipe=name, settings=dataclasses.asdict(recipe), corpus_vocab=len(vocab),
                train_seconds=round(seconds, 1), threads=torch.get_num_threads(), device=device,
                val_loss=round(val, 4))
    save_checkpoint(entry.path, compact.cpu(), cfg.max_iters, cfg, history=history,
                    extra=kept(entry, {"recipe": dataclasses.asdict(recipe), "info": info,
                                       "vocabulary": vocab.tolist()}))
    return model, info
