"""Chapter 11 — an offline multiple-choice set from Tiny Shakespeare, and a bigram baseline.

"Which line continues this speech?": the context is the start of a speech of the validation split
(its speaker line and its first lines), the right choice its next line, the three others lines of
other speeches. ``next_line_items`` draws such a set from a seed; with ``length_matched`` the
distractors have the right line's length to within ``tolerance`` characters, so that a rule cannot
win by preferring short or long lines. ``BigramTable`` is the counted character bigram of Chapter 6
as a model ``score_choices`` can read, the baseline a model with context must beat.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from torch import Tensor, nn

from ..data import split_text
from ..evaluate import MultipleChoice

DELIMITER = "\n"  # between the context and each choice: a line ends, the next begins


@dataclass(frozen=True)
class NextLineSettings:
    """How ``next_line_items`` draws a set (the chapter's defaults)."""

    n_items: int = 100
    n_choices: int = 4
    min_chars: int = 20  # the right line's length, in characters: long enough to say something,
    max_chars: int = 48  # short enough to leave the character model 15 characters of context
    length_matched: bool = True
    tolerance: int = 2  # a distractor's length differs from the right line's by at most this


def speeches(text: str) -> list[list[str]]:
    """The speeches of ``text``: blocks separated by a blank line whose first line is ``NAME:``,
    as lists of lines (speaker line first)."""
    blocks = [b.split("\n") for b in text.split("\n\n")]
    return [b for b in blocks if len(b) >= 2 and b[0].endswith(":") and b[0][:-1].strip()]


def next_line_items(text: str, seed: int, settings: NextLineSettings = NextLineSettings(),
                    train_frac: float = 0.9) -> list[MultipleChoice]:
    """A set of "which line continues this speech?" items from the validation split of ``text``.

    One item per speech (``settings.n_items`` speeches drawn with ``seed``): the context is the
    speaker line and the speech's first lines, the right choice the next line, at a random place
    among ``n_choices``; the distractors are lines of *other* speeches of the same split. The same
    ``seed`` always gives the same items.
    """
    s = settings
    if s.n_items < 1 or s.n_choices < 2 or s.min_chars > s.max_chars or s.tolerance < 0:
        raise ValueError(f"{s}: needs n_items >= 1, n_choices >= 2, min_chars <= max_chars "
                         "and tolerance >= 0")
    val = split_text(text, train_frac)[1]
    found = speeches(val)
    rng = random.Random(seed)
    lines = [(k, line) for k, sp in enumerate(found) for line in sp[1:]
             if line.strip() and not line.endswith(":")]
    by_length: dict[int, list[tuple[int, str]]] = {}
    for k, line in lines:
        by_length.setdefault(len(line), []).append((k, line))
    candidates = [(k, i) for k, sp in enumerate(found) for i in range(2, len(sp))
                  if s.min_chars <= len(sp[i]) <= s.max_chars]
    by_speech: dict[int, list[int]] = {}
    for k, i in candidates:
        by_speech.setdefault(k, []).append(i)
    if len(by_speech) < s.n_items:
        raise ValueError(f"the validation split has {len(by_speech)} speeches with a line of "
                         f"{s.min_chars}-{s.max_chars} characters after their first: ask for at "
                         f"most that many items (n_items={s.n_items})")
    items = []
    for k in rng.sample(sorted(by_speech), s.n_items):
        i = rng.choice(by_speech[k])
        gold = found[k][i]
        if s.length_matched:
            pool = [line for n in range(len(gold) - s.tolerance, len(gold) + s.tolerance + 1)
                    for j, line in by_length.get(n, []) if j != k]
        else:
            pool = [line for j, line in lines if j != k]
        pool = sorted(set(pool) - {gold})
        if len(pool) < s.n_choices - 1:
            raise ValueError(f"only {len(pool)} lines of other speeches match {gold!r}: raise "
                             "the tolerance")
        choices = rng.sample(pool, s.n_choices - 1)
        answer = rng.randrange(s.n_choices)
        choices.insert(answer, gold)
        items.append(MultipleChoice("\n".join(found[k][:i]), choices, answer))
    return items


def last_word_items(text: str, seed: int, n_items: int = 100, n_choices: int = 4,
                    tolerance: int = 1, train_frac: float = 0.9) -> list[MultipleChoice]:
    """"Which word ends this line?" items from the validation split of ``text`` (a cloze test).

    The context is the speech up to the line's last word (punctuation after it dropped), the
    right choice that word; the distractors are last words of other speeches' lines whose length
    is within ``tolerance`` characters of it. One item per speech, drawn with ``seed``.
    """
    if n_items < 1 or n_choices < 2 or tolerance < 0:
        raise ValueError(f"last_word_items: n_items={n_items!r}, n_choices={n_choices!r}, "
                         f"tolerance={tolerance!r}: needs n_items >= 1, n_choices >= 2 and "
                         "tolerance >= 0 (the chapter's: 100, 4, 1)")
    found = speeches(split_text(text, train_frac)[1])
    rng = random.Random(seed)

    def split_last(line: str) -> tuple[str, str] | None:
        words = line.rstrip(" ,.;:!?'-").split(" ")
        ok = len(words) >= 4 and words[-1].isalpha() and len(words[-1]) >= 3
        return (" ".join(words[:-1]), words[-1]) if ok else None

    endings = {(k, i): split_last(sp[i]) for k, sp in enumerate(found) for i in range(1, len(sp))}
    endings = {key: e for key, e in endings.items() if e}
    words: dict[int, set[str]] = {}
    for (k, _), (_, word) in endings.items():
        words.setdefault(len(word), set()).add((k, word))
    by_speech: dict[int, list[int]] = {}
    for k, i in endings:
        by_speech.setdefault(k, []).append(i)
    if len(by_speech) < n_items:
        raise ValueError(f"the validation split has {len(by_speech)} speeches with a line to end: "
                         f"ask for at most that many items (n_items={n_items})")
    items = []
    for k in rng.sample(sorted(by_speech), n_items):
        i = rng.choice(by_speech[k])
        head, gold = endings[(k, i)]
        pool = sorted({w for n in range(len(gold) - tolerance, len(gold) + tolerance + 1)
                       for j, w in words.get(n, ()) if j != k and w.lower() != gold.lower()})
        if len(pool) < n_choices - 1:
            raise ValueError(f"only {len(pool)} last words of other speeches match {gold!r}"
                             f": raise the tolerance ({tolerance}) or lower n_choices ("
                             f"{n_choices})")
        choices = rng.sample(pool, n_choices - 1)
        answer = rng.randrange(n_choices)
        choices.insert(answer, gold)
        items.append(MultipleChoice("\n".join(found[k][:i] + [head]), choices, answer))
    return items


def write_jsonl(items: list[MultipleChoice], path: str | Path) -> Path:
    """``items`` as JSON lines (``context``, ``choices``, ``gold``): the file a harness task
    reads."""
    path = Path(path)
    path.write_text("".join(json.dumps(asdict(it)) + "\n" for it in items), encoding="utf-8")
    return path


class BigramTable(nn.Module):
    """Chapter 6's counted bigram table (one pseudo-count per pair) as a model: ``forward(idx)``
    returns ``(logits, None)`` with logits (B, T, V) the log-probabilities of the next character
    given the current one. ``config.context_length`` is only how much text it is handed."""

    def __init__(self, train_ids: np.ndarray, vocab_size: int, context_length: int = 64):
        super().__init__()
        ids = torch.from_numpy(np.asarray(train_ids, dtype=np.int64))
        if len(ids) and not 0 <= int(ids.min()) <= int(ids.max()) < vocab_size:
            raise ValueError(f"BigramTable: train_ids span [{int(ids.min())}, "
                             f"{int(ids.max())}], outside the vocabulary [0, {vocab_size}"
                             "): pass the vocab_size of the tokenizer that made them")
        counts = torch.bincount(ids[:-1] * vocab_size + ids[1:], minlength=vocab_size ** 2)
        counts = counts.view(vocab_size, vocab_size).double() + 1.0  # (V, V): row = previous
        self.register_buffer("log_probs", torch.log(counts / counts.sum(1, keepdim=True)).float())
        self.config = SimpleNamespace(context_length=context_length, vocab_size=vocab_size)

    def forward(self, idx: Tensor, targets: Tensor | None = None) -> tuple[Tensor, None]:
        return self.log_probs[idx], None  # (B, T, V)
