"""Checkers for the exercises of Chapter 1b (BPE from scratch): ``check_bpe_encode``."""

from __future__ import annotations

from collections.abc import Callable

import regex

from ..bpe import merge
from ..bpe_tokenizer import BPETokenizer
from ..tokenizer import GPT2_PATTERN
from .core import _call, _Case, _describe, _Mismatch, _run_cases, _short

__all__ = ["check_bpe_encode"]

_TRAINING_TEXT = ("To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer "
                  "the slings and arrows of outrageous fortune. Café, naïve, déjà vu; 東京 and 東京都. ") * 3


def _bpe_variants(text: str, merges: dict) -> list[tuple[list[int], str]]:
    """What the usual mistakes return for ``text``, each with the hint that names it."""
    def encode(chunks, start, pick) -> list[int]:
        out = []
        for chunk in chunks:
            ids = start(chunk)
            while len(ids) >= 2:
                known = [pair for pair in zip(ids, ids[1:]) if pair in merges]
                if not known:
                    break
                best = pick(known)
                ids = merge(ids, best, merges[best])
            out.extend(ids)
        return out

    chunks = regex.findall(GPT2_PATTERN, text)
    utf8 = lambda chunk: list(chunk.encode("utf-8"))  # noqa: E731
    earliest = lambda known: min(known, key=merges.get)  # noqa: E731
    return [
        (list(text.encode("utf-8")), "apply the merges: after starting from the bytes, replace the adjacent pair "
                                     "with the lowest new id, again and again, until no pair of the table is left"),
        (encode([text], utf8, earliest), "cut the text into chunks with regex.findall(GPT2_PATTERN, text) first: "
                                         "merges never cross a chunk boundary"),
        (encode(chunks, utf8, lambda known: known[0]), "among the pairs present, apply the one learned first "
                                                       "(the lowest new id, min(known, key=merges.get)), not the "
                                                       "leftmost"),
        (encode(chunks, utf8, lambda known: max(known, key=merges.get)),
         "apply the earliest-learned merge (the lowest new id), not the latest"),
    ]


def check_bpe_encode(candidate) -> bool:
    """Check ``encode(text, merges)`` -> list of ids, for a merge table ``{(a, b): new_id}``: GPT-2's
    chunks, each started from its UTF-8 bytes, earliest-learned merge first. Texts include accents,
    Japanese and an emoji (several bytes per character)."""
    tokenizer = BPETokenizer.train(_TRAINING_TEXT, 300)
    merges = dict(tokenizer.merges)
    specs = [
        ("an English sentence seen in training", "whether tis nobler in the mind"),
        ("text with accents, Japanese and an emoji (several bytes per character)", "Café déjà vu, 東京 🙂!"),
        ("text never seen in training, with digits and newlines", "Shall I compare thee\n\nto 2024 days?"),
        ("an empty text", ""),
    ]

    def make(text: str) -> Callable[[], None]:
        def run() -> None:
            expected = tokenizer.encode_ordinary(text)
            got = _call(candidate, text, dict(merges))
            try:
                got = [int(i) for i in got]
            except (TypeError, ValueError):
                raise _Mismatch(f"expected a list of ints, got {_describe(got)}",
                                hint="return the ids as a list of ints") from None
            if got == expected:
                return
            hint = "start each chunk from its UTF-8 bytes (chunk.encode('utf-8')), then merge"
            if any(i > 255 and i not in merges.values() for i in got):
                hint = "start from the UTF-8 bytes, not from ord(): 'é' is two bytes, '東' three"
            for wrong, mistake in _bpe_variants(text, merges):
                if got == wrong:
                    hint = mistake
                    break
            raise _Mismatch(f"encode({_short(text)}):", f"expected {_short(expected)}", f"got      {_short(got)}",
                            hint=hint)
        return run

    cases = [_Case(label, make(text), "the function is called as encode(text, merges) with merges a dict "
                                      "{(a, b): new_id}")
             for label, text in specs]
    return _run_cases("check_bpe_encode", cases)
