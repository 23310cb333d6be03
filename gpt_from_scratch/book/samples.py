"""How much a generated sample reads like its corpus: the share of its words that are real words.

A fair, repeatable proxy for "readable" (issue 30): the fraction of a sample's words that occur
anywhere in the training text. Word soup ("theee", "rolsunsee") scores low, a sample made of the
play's words scores high, whatever it means.
"""

from __future__ import annotations

import functools
import re

import torch

from ..generate import generate

WORD = re.compile(r"[a-z]+(?:'[a-z]+)*")  # lower-cased letters, with inner apostrophes (o'er)
SAMPLE_CHARS = 500  # the length of the samples the book scores


@functools.lru_cache(maxsize=4)
def corpus_words(text: str) -> frozenset[str]:
    """Every word of ``text``, lower-cased."""
    return frozenset(WORD.findall(text.lower()))


def sample_words(sample: str) -> list[str]:
    """The words of ``sample``, lower-cased; a last word that the sample's end may have cut short
    (the sample ends in a letter) is left out."""
    words = WORD.findall(sample.lower())
    return words[:-1] if sample[-1:].isalpha() else words


def real_word_share(sample: str, training_text: str) -> float:
    """The fraction of the words of ``sample`` that occur in ``training_text`` (0 to 1)."""
    words = sample_words(sample)
    if not words:
        raise ValueError(f"the sample has no words to score ({sample[:40]!r}...): generate a longer "
                         f"sample ({SAMPLE_CHARS:,} characters, say)")
    known = corpus_words(training_text)
    return sum(w in known for w in words) / len(words)


def sample_text(model, encode, decode, prompt: str = "ROMEO:", start: tuple[int, ...] = (),
                seed: int = 1337) -> str:
    """``SAMPLE_CHARS`` characters sampled at temperature 1 after ``prompt`` (``SAMPLE_CHARS`` new
    tokens from a generator seeded with ``seed``), the prompt included; ``start`` are token ids put
    before the prompt and left out of the text (``<|endoftext|>`` for Chapter 8's offline model)."""
    idx = torch.tensor([[*start, *encode(prompt)]])  # (1, T)
    out = generate(model, idx, SAMPLE_CHARS, generator=torch.Generator().manual_seed(seed))
    return decode(out[0, len(start):].tolist())[:SAMPLE_CHARS]
