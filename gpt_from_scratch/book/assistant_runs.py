"""Chapter 12 — its supervised fine-tuning runs, trained once and kept beside the book's models.

``sft_run(SFTRecipe(seed=s))`` fine-tunes Chapter 6's character model on the play's instructions
(``train_sft`` with the loss mask, the examples ``sft_examples`` draws for seed ``s``), keeps a
copy of the model ``halfway`` through (the step where Chapter 12's mask ablation compares), and
saves both with each step's loss and the run's CPU time. Chapter 12, a second run of it, Chapter
13 and ``scripts/book_models.py`` then read the same run in a second instead of training it again.
"""

from __future__ import annotations

import copy
import dataclasses
import numbers
import time
from dataclasses import dataclass

import torch

from ..chat import ChatTokenizer, add_chat_tokens
from ..checkpoint import save_checkpoint
from ..data import load_tiny_shakespeare
from ..model import GPT
from ..sft import train_sft
from ..utils import check_int
from .assistant import sft_examples, task_items
from .model_cache import Entry, cached, kept, model_entry, trained_once
from .recipes import book_model, book_model_entry


@dataclass(frozen=True)
class SFTRecipe:
    """One fine-tuning run of Chapter 12 (its CPU settings by default)."""

    steps: int = 600  # Chapter 12's SFT_STEPS, SFT_BATCH and SFT_LR on the CPU
    batch_size: int = 16
    lr: float = 2e-3
    seed: int = 0
    halfway: int = 300  # the step whose model is kept too: ABLATION_STEPS

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "seed", "halfway"):  # NumPy ints become ints
            value = check_int("SFTRecipe", name, getattr(self, name),
                              minimum=0 if name == "seed" else 1)
            object.__setattr__(self, name, value)
        if (isinstance(self.lr, bool) or not isinstance(self.lr, numbers.Real)
                or not 0 < self.lr < 1):
            raise ValueError(f"SFTRecipe.lr={self.lr!r} must be a number in (0, 1): Chapter 12 "
                             "uses 2e-3 on the CPU")
        object.__setattr__(self, "lr", float(self.lr))
        if self.halfway > self.steps:
            raise ValueError(f"SFTRecipe.halfway={self.halfway} is past steps={self.steps}: keep "
                             "a step of the run (Chapter 12 keeps steps // 2)")

    @property
    def name(self) -> str:
        """The checkpoint's folder name: ``assistant-sft-<seed>``, sizes added when not the CPU's."""
        default = SFTRecipe(seed=self.seed)
        sizes = f"-{self.steps}x{self.batch_size}-lr{self.lr:g}-h{self.halfway}"
        return f"assistant-sft-{self.seed}{'' if self == default else sizes}"


@dataclass
class SFTRun:
    """What ``sft_run`` returns: both models in eval mode, on the CPU."""

    model: GPT  # after recipe.steps steps
    halfway: GPT  # after recipe.halfway steps
    losses: list[float]  # each step's masked training loss
    seconds: float  # CPU seconds the training took, on the machine that trained it
    tokenizer: ChatTokenizer  # the character tokenizer with the chat tokens


def sft_entries(recipe: SFTRecipe) -> tuple[Entry, Entry]:
    """The cache entries of ``sft_run(recipe)``: the final model's and the ``halfway`` copy's,
    keyed by the recipe, this code, the versions, the arithmetic and the character model's own
    entry (``model_cache``)."""
    if not isinstance(recipe, SFTRecipe):
        raise TypeError(f"sft_run takes an SFTRecipe, got {type(recipe).__name__}: "
                        "sft_run(SFTRecipe(seed=0))")
    parent = book_model_entry("shakespeare-char")
    settings = dataclasses.asdict(recipe)
    return tuple(model_entry(recipe.name + part, settings, __name__, parents=(parent,))
                 for part in ("", "-halfway"))


def sft_run(recipe: SFTRecipe) -> SFTRun:
    """Chapter 12's fine-tuning run ``recipe``: read from its cache entries (``sft_entries``)
    when they are there, else trained and saved there once (two processes that ask at once train
    it once): ``torch.manual_seed(seed)``, ``add_chat_tokens`` on
    ``book_model("shakespeare-char")``, then ``train_sft`` on ``sft_examples(train, tok, seed)``."""
    entry, halfway_entry = sft_entries(recipe)
    base, char_tok = book_model("shakespeare-char", progress=False)
    tok = ChatTokenizer(char_tok, char_tok.vocab_size)
    with trained_once(entry):
        final, half = cached(entry), cached(halfway_entry)
        if final is not None and half is not None:
            return SFTRun(final.model, half.model, final.extra["losses"],
                          final.extra["seconds"], tok)
        examples = sft_examples(task_items(load_tiny_shakespeare())["train"], tok, recipe.seed)
        torch.manual_seed(recipe.seed)
        model = add_chat_tokens(base)
        kept_models = {}

        def keep(step, model):
            if step == recipe.halfway:
                kept_models["model"] = copy.deepcopy(model).eval()

        start = time.process_time()
        losses = train_sft(model, examples, tok.pad_id, recipe.steps, recipe.batch_size,
                           recipe.lr, seed=recipe.seed, on_step=keep)
        seconds = time.process_time() - start
        settings = dataclasses.asdict(recipe)
        save_checkpoint(halfway_entry.path, kept_models["model"], recipe.halfway,
                        extra=kept(halfway_entry, {"sft": settings}))
        save_checkpoint(entry.path, model, recipe.steps,
                        extra=kept(entry, {"sft": settings, "losses": losses, "seconds": seconds}))
    return SFTRun(model.eval(), kept_models["model"], losses, seconds, tok)
