"""Chapter 11 — two offline multiple-choice tests from Tiny Shakespeare, and their baselines.

"Which line continues this speech?": the context is the start of a speech of the validation split
(its speaker line and its first lines), the right choice its next line, the three others lines of
other speeches. ``next_line_sets`` draws such sets from a seed, no speech in two sets; with
``length_matched`` the distractors have the right line's length to within ``tolerance``
characters, so that a rule cannot win by preferring short or long lines. ``last_word_sets`` draws
"which word ends this line?", right words and distractors alike drawn as they occur, and
``frequency_accuracy`` scores the rule that reads no context and picks the most frequent word.
``BigramTable`` is the counted character bigram of Chapter 6 as a model ``score_choices`` can
read, another baseline a model with context must beat.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
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
    """How ``next_line_sets`` draws a set (the chapter's defaults)."""

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


def next_line_sets(text: str, n_draws: int, settings: NextLineSettings = NextLineSettings(),
                   seed: int = 0, train_frac: float = 0.9) -> list[list[MultipleChoice]]:
    """``n_draws`` sets of "which line continues this speech?" items from the validation split of
    ``text``, no speech in two of them (the speeches shuffled with ``seed`` and dealt out).

    ``settings.n_items`` per set, lines of the set's speeches: the context is the speaker line
    and the speech's lines before the line, the right choice that line, at a random place among
    ``n_choices``; the distractors are lines of *other* speeches of the same split. The same
    ``seed`` always gives the same sets.
    """
    s = settings
    if (n_draws < 1 or s.n_items < 1 or s.n_choices < 2 or s.min_chars > s.max_chars
            or s.tolerance < 0):
        raise ValueError(f"n_draws={n_draws!r}, {s}: needs n_draws >= 1, n_items >= 1, "
                         "n_choices >= 2, min_chars <= max_chars and tolerance >= 0")
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
    sets = []
    for group in _speech_groups(sorted(by_speech), n_draws, rng):
        lines_to_go = sorted((k, i) for k in group for i in by_speech[k])
        if len(lines_to_go) < s.n_items:
            raise ValueError(f"the validation split has {len(candidates)} lines of "
                             f"{s.min_chars}-{s.max_chars} characters after a speech's first, "
                             f"{len(lines_to_go)} in one of {n_draws} draws: ask for fewer items "
                             f"(n_items={s.n_items}) or draws")
        items = []
        for k, i in rng.sample(lines_to_go, s.n_items):
            gold = found[k][i]
            if s.length_matched:
                pool = [line for n in range(len(gold) - s.tolerance, len(gold) + s.tolerance + 1)
                        for j, line in by_length.get(n, []) if j != k]
            else:
                pool = [line for j, line in lines if j != k]
            pool = sorted(set(pool) - {gold})
            if len(pool) < s.n_choices - 1:
                raise ValueError(f"only {len(pool)} lines of other speeches match {gold!r}: "
                                 "raise the tolerance")
            choices = rng.sample(pool, s.n_choices - 1)
            answer = rng.randrange(s.n_choices)
            choices.insert(answer, gold)
            items.append(MultipleChoice("\n".join(found[k][:i]), choices, answer))
        sets.append(items)
    return sets


def _speech_groups(keys: list[int], n_draws: int, rng: random.Random) -> list[list[int]]:
    """``keys`` (speech indices) shuffled and dealt into ``n_draws`` groups: no speech in two."""
    order = rng.sample(keys, len(keys))
    return [order[d::n_draws] for d in range(n_draws)]


def _split_last(line: str) -> tuple[str, str] | None:
    """A line cut before its last word (punctuation after it dropped), or None when the line has
    fewer than four words or ends in a word of fewer than three letters."""
    words = line.rstrip(" ,.;:!?'-").split(" ")
    ok = len(words) >= 4 and words[-1].isalpha() and len(words[-1]) >= 3
    return (" ".join(words[:-1]), words[-1]) if ok else None


def last_word_sets(text: str, n_draws: int, n_items: int = 100, n_choices: int = 4,
                   tolerance: int = 0, seed: int = 0,
                   train_frac: float = 0.9) -> list[list[MultipleChoice]]:
    """``n_draws`` sets of "which word ends this line?" items (a cloze test) from the validation
    split of ``text``, no speech in two sets (the speeches shuffled with ``seed`` and dealt out).

    The context is the speech up to a line's last word (punctuation after it dropped), the right
    choice that word. Right answers and distractors are drawn the same way, as *occurrences*: the
    lines to end are visited in an order shuffled with ``seed``, and each line's distractors are
    last words of lines of other speeches, drawn in proportion to how often they end a line, of
    the right word's length to within ``tolerance`` characters. An item whose four words (or
    speeches) are not all different is drawn again from the next line, so that the right word and
    its distractors are exchangeable: a rule that reads only the choices, such as "the most
    frequent word", has a guess's expected score on items of one length.
    """
    if n_draws < 1 or n_items < 1 or n_choices < 2 or tolerance < 0:
        raise ValueError(f"last_word_sets: n_draws={n_draws!r}, n_items={n_items!r}, "
                         f"n_choices={n_choices!r}, tolerance={tolerance!r}: needs n_draws >= 1, "
                         "n_items >= 1, n_choices >= 2 and tolerance >= 0 (the chapter's: 5, "
                         "100, 4, 0)")
    found = speeches(split_text(text, train_frac)[1])
    rng = random.Random(seed)
    endings = {(k, i): e for k, sp in enumerate(found) for i in range(1, len(sp))
               if (e := _split_last(sp[i]))}
    by_length: dict[int, list[tuple[int, str]]] = {}  # length -> (speech, word), one per line
    for (k, _), (_, word) in endings.items():
        by_length.setdefault(len(word), []).append((k, word))
    sets = []
    for group in _speech_groups(sorted({k for k, _ in endings}), n_draws, rng):
        to_end = sorted(key for key in endings if key[0] in set(group))
        items: list[MultipleChoice] = []
        for k, i in rng.sample(to_end, len(to_end)):
            head, gold = endings[(k, i)]
            pool = [kw for n in range(len(gold) - tolerance, len(gold) + tolerance + 1)
                    for kw in by_length.get(n, ())]
            picks = [rng.choice(pool) for _ in range(n_choices - 1)]
            if (len({w.lower() for _, w in picks} | {gold.lower()}) < n_choices
                    or len({j for j, _ in picks} | {k}) < n_choices):
                continue  # two choices alike, or from one speech: the next line instead
            choices = [w for _, w in picks]
            answer = rng.randrange(n_choices)
            choices.insert(answer, gold)
            items.append(MultipleChoice("\n".join(found[k][:i] + [head]), choices, answer))
            if len(items) == n_items:
                break
        else:
            raise ValueError(f"one of {n_draws} draws gave only {len(items)} items of "
                             f"{n_choices} different words from {n_choices} speeches (the "
                             f"split has {len(endings)} lines to end): ask for fewer items "
                             f"(n_items={n_items}) or draws, fewer choices, or raise the "
                             f"tolerance ({tolerance})")
        sets.append(items)
    return sets


def word_counts(text: str, train_frac: float = 0.9) -> Counter:
    """How often each word (letters only, lower-cased) occurs in the training split of ``text``."""
    counts = Counter(w.lower() for w in re.findall(r"[A-Za-z]+", split_text(text, train_frac)[0]))
    if not counts:
        raise ValueError(f"the training split of a {len(text):,}-character text has no word: "
                         "pass the text the items were drawn from")
    return counts


def frequency_accuracy(items: list[MultipleChoice], counts: Counter) -> float:
    """The share of ``items`` a rule that reads no context gets right: pick the choice most
    frequent in ``counts`` (``word_counts``; the first on ties)."""
    if not items:
        raise ValueError("frequency_accuracy: no items (an accuracy needs at least one)")
    right = 0
    for it in items:
        seen = [counts[c.lower()] for c in it.choices]
        right += seen.index(max(seen)) == it.gold
    return right / len(items)


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
