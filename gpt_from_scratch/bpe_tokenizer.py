"""Chapter 1b — a byte-pair tokenizer: learn merges from a text, or load GPT-2's, and encode.

A ``BPETokenizer`` starts from the 256 possible bytes, so every string has an encoding (no unknown
tokens), and owns an ordered list of merges (``bpe``). Each chunk of ``pretokenize`` is merged,
earliest-learned merge first, until no learned pair is left.

``BPETokenizer.train(text, vocab_size)`` learns merges (``bpe.learn_merges``);
``BPETokenizer.from_gpt2()`` loads GPT-2's 50,000 merges and gives the same ids as tiktoken's ``gpt2``.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from typing import Literal

import regex

from .bpe import Pair, learn_merges, merge, pretokenize
from .tokenizer import ENDOFTEXT, ENDOFTEXT_ID, bytes_to_unicode, gpt2_files

# A place between a non-space character and a whitespace character. Every alternative of
# GPT2_PATTERN ends there (a space may only start a chunk, and the one look-ahead, (?!\S), belongs to
# runs of whitespace), and the chunks after it do not depend on the text before it. (?r): backwards.
_SAFE_CUT = regex.compile(r"(?r)(?<=\S)(?=\s)")


def _alternation(tokens: Collection[str]) -> str:
    """A regex matching any of ``tokens``, the longest first (as tiktoken): with ``<|a|>`` and
    ``<|a|><|a|>`` both special, the text ``<|a|><|a|>`` is the second token, whatever the hash seed."""
    return "|".join(regex.escape(t) for t in sorted(tokens, key=lambda t: (-len(t), t)))


def _check_text(text) -> None:
    """``encode`` takes one ``str``: a TypeError naming what it got, and the fix, for anything else."""
    if isinstance(text, (bytes, bytearray)):
        raise TypeError(f"text must be a str, got {type(text).__name__}: decode it first, "
                        "text.decode('utf-8'), or pass the file opened in text mode")
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__} ({text!r:.40}): pass the text "
                        "itself; for many texts, encode each one or use encode_iterable")


class BPETokenizer:
    """Byte-level BPE: ``encode`` text to ids and ``decode`` ids to text, tiktoken-style.

    Args:
        merges: ``{(a, b): c}`` in the order the merges were learned. Encoding applies the
            earliest-learned merge among the pairs present first (its *rank* is its position).
        byte_ids: the id of each byte value 0..255 (``range(256)`` for trained tokenizers; GPT-2 uses
            its own order, e.g. byte ``b"!"`` has id 0).
        special_tokens: ``{text: id}`` for tokens that are never produced by merges, such as GPT-2's
            ``<|endoftext|>`` (50256). See ``encode`` for when the text of one becomes its id.

    Each distinct chunk is encoded once and cached (``clear_cache`` empties the cache): real text repeats
    its words, so encoding a long text costs little more than the regex that cuts it.
    """

    def __init__(
        self,
        merges: Mapping[Pair, int],
        byte_ids: Sequence[int] = range(256),
        special_tokens: Mapping[str, int] | None = None,
    ):
        if len(byte_ids) != 256 or len(set(byte_ids)) != 256:
            raise ValueError(
                f"byte_ids has {len(byte_ids)} entries, {len(set(byte_ids))} distinct: "
                "give exactly 256 distinct ids, one per byte value 0..255"
            )
        self.merges: dict[Pair, int] = dict(merges)
        self.byte_ids: list[int] = list(byte_ids)
        self.special_tokens: dict[str, int] = dict(special_tokens or {})
        self.ranks: dict[Pair, int] = {pair: rank for rank, pair in enumerate(self.merges)}

        self.vocab: dict[int, bytes] = {i: bytes([b]) for b, i in enumerate(self.byte_ids)}
        for (a, b), new_id in self.merges.items():
            if a not in self.vocab or b not in self.vocab:
                missing = a if a not in self.vocab else b
                raise ValueError(
                    f"merge {(a, b)} -> {new_id} uses id {missing}, which no byte or earlier merge defines: "
                    "list merges in the order they were learned"
                )
            if new_id in self.vocab:
                raise ValueError(f"merge {(a, b)} -> {new_id} reuses id {new_id}: every merge needs a new id")
            self.vocab[new_id] = self.vocab[a] + self.vocab[b]
        for token, token_id in self.special_tokens.items():
            if token_id in self.vocab:
                raise ValueError(
                    f"special token {token!r} has id {token_id}, already a byte or merged token: give it an unused id"
                )
            self.vocab[token_id] = token.encode("utf-8")

        self._cache: dict[str, list[int]] = {}

    @property
    def vocab_size(self) -> int:
        """Number of tokens: 256 bytes + one per merge + the special tokens (GPT-2: 50,257)."""
        return len(self.vocab)

    def __repr__(self) -> str:
        specials = list(self.special_tokens)
        return f"BPETokenizer(vocab_size={self.vocab_size}, merges={len(self.merges)}, special_tokens={specials})"

    # ------------------------------------------------------------------ building
    @classmethod
    def train(cls, text: str, vocab_size: int) -> BPETokenizer:
        """Learn ``vocab_size - 256`` merges from ``text``.

        The text is cut by ``pretokenize``; each distinct chunk is kept once with its count, so a pair
        inside a chunk that occurs 500 times counts 500. Each step merges the most frequent pair
        (ties: the pair with the smallest ids) into the next id, 256, 257, ..., then updates the
        counts of only the chunks that contained it. Training is greedy, so the merges learned for a
        small ``vocab_size`` are the first merges learned for any larger one.
        """
        return cls(learn_merges(text, vocab_size))

    @classmethod
    def from_gpt2(cls) -> BPETokenizer:
        """GPT-2's tokenizer, read from its published ``encoder.json`` and ``vocab.bpe``.

        ``vocab.bpe`` lists the 50,000 merges in the order they were learned, one per line, as two
        tokens written with ``bytes_to_unicode`` characters (``"Ġ t"`` merges a space and a ``t``);
        ``encoder.json`` gives every token's id. The ids are GPT-2's, so they equal tiktoken's.
        """
        files = gpt2_files()
        encoder: dict[str, int] = json.loads(files["encoder.json"].read_text(encoding="utf-8"))
        byte_ids = [encoder[char] for char in bytes_to_unicode().values()]
        lines = files["vocab.bpe"].read_text(encoding="utf-8").split("\n")[1:-1]  # skip "#version: 0.2"
        merges = {}
        for line in lines:
            a, b = line.split(" ")
            merges[(encoder[a], encoder[b])] = encoder[a + b]
        return cls(merges, byte_ids=byte_ids, special_tokens={ENDOFTEXT: ENDOFTEXT_ID})

    # ------------------------------------------------------------------ encoding
    def _encode_chunk(self, chunk: str) -> list[int]:
        """BPE on one pre-tokenized chunk: apply the lowest-ranked merge present until none is left."""
        ids = [self.byte_ids[b] for b in chunk.encode("utf-8")]
        while len(ids) >= 2:
            pair = min(zip(ids, ids[1:]), key=lambda p: self.ranks.get(p, len(self.ranks)))
            if pair not in self.ranks:
                break  # no adjacent pair was ever merged: done
            ids = merge(ids, pair, self.merges[pair])
        return ids

    def encode_ordinary(self, text: str) -> list[int]:
        """Encode ``text`` with no special tokens: ``"<|endoftext|>"`` becomes ordinary text (7 ids in GPT-2)."""
        _check_text(text)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates: tiktoken replaces them by U+FFFD, and so do we
            text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        ids: list[int] = []
        cache = self._cache
        for chunk in pretokenize(text):
            chunk_ids = cache.get(chunk)
            if chunk_ids is None:
                chunk_ids = cache[chunk] = self._encode_chunk(chunk)
            ids.extend(chunk_ids)
        return ids

    def encode(
        self,
        text: str,
        *,
        allowed_special: Literal["all"] | Collection[str] = frozenset(),
        disallowed_special: Literal["all"] | Collection[str] = "all",
    ) -> list[int]:
        """Encode ``text`` to ids, treating special tokens exactly as tiktoken's ``Encoding.encode`` does.

        - By default the text of a special token (``"<|endoftext|>"``) raises ``ValueError``: such text
          in user input could otherwise fake a document boundary.
        - ``allowed_special="all"`` (or a set naming it) turns it into its id, 50256 for GPT-2; the text
          between special tokens is pre-tokenized on its own.
        - ``disallowed_special=()`` (or ``encode_ordinary``) encodes it as ordinary text.

        Unlike tiktoken, naming a special token this tokenizer does not have raises ``ValueError``.
        """
        _check_text(text)
        allowed, disallowed = self._special_sets(allowed_special, disallowed_special)
        if disallowed:
            found = regex.search(_alternation(disallowed), text)
            if found:
                raise ValueError(
                    f"the text contains the special token {found.group()!r} at character {found.start()}: pass "
                    f"allowed_special={{{found.group()!r}}} (or 'all') to encode it as its id "
                    f"{self.special_tokens[found.group()]}, or use encode_ordinary(text) to encode it as plain text"
                )
        if not allowed:
            return self.encode_ordinary(text)
        ids: list[int] = []
        splitter = regex.compile("(" + _alternation(allowed) + ")")
        for n, piece in enumerate(splitter.split(text)):  # text, special, text, special, ..., text
            if n % 2:
                ids.append(self.special_tokens[piece])
            elif piece:
                ids.extend(self.encode_ordinary(piece))
        return ids

    def _special_sets(self, allowed_special, disallowed_special) -> tuple[set[str], set[str]]:
        """The special tokens ``encode`` turns into ids, and those it refuses, checked."""
        specials = set(self.special_tokens)
        allowed = specials if allowed_special == "all" else set(allowed_special)
        disallowed = specials - allowed if disallowed_special == "all" else set(disallowed_special)
        unknown = (allowed | disallowed) - specials
        if unknown:
            raise ValueError(
                f"{sorted(unknown)} are not special tokens of this tokenizer, whose special tokens are "
                f"{sorted(specials)}: pass only those"
            )
        return allowed, disallowed

    def encode_iterable(
        self,
        texts: Iterable[str],
        *,
        allowed_special: Literal["all"] | Collection[str] = frozenset(),
        disallowed_special: Literal["all"] | Collection[str] = "all",
    ) -> Iterator[int]:
        """Encode a stream of strings (an open text file, a generator of lines) lazily, one id at a time.

        The ids are exactly ``encode("".join(texts), ...)``'s, but only a little text is held at once:
        the stream is cut where no chunk or special token can straddle the cut: between a non-space
        character and a whitespace character (at the end of a word). Memory therefore grows with the
        longest stretch of text without such a place, not with the whole input. Special tokens must not
        contain whitespace (GPT-2's ``<|endoftext|>`` does not).
        """
        self._special_sets(allowed_special, disallowed_special)  # fail before reading anything
        if any(regex.search(r"\s", token) for token in self.special_tokens):
            raise ValueError("encode_iterable cannot stream special tokens that contain whitespace: "
                             "use encode on the whole text")
        options = dict(allowed_special=allowed_special, disallowed_special=disallowed_special)
        pending = ""
        for text in texts:
            if not isinstance(text, str):
                raise ValueError(f"encode_iterable expects strings, got a {type(text).__name__}: "
                                 "open files in text mode (open(path, encoding='utf-8'))")
            pending += text
            cut = _SAFE_CUT.search(pending)  # the last safe place (the pattern searches backwards)
            if cut is not None and cut.start() > 0:
                yield from self.encode(pending[:cut.start()], **options)
                pending = pending[cut.start():]
        if pending:
            yield from self.encode(pending, **options)

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        """The bytes the ids stand for, concatenated."""
        try:
            return b"".join(self.vocab[int(i)] for i in ids)
        except KeyError as err:
            raise ValueError(
                f"token id {err.args[0]} is not in this tokenizer's vocabulary of {self.vocab_size} ids"
            ) from None

    def decode(self, ids: Iterable[int], errors: str = "replace") -> str:
        """Decode ids to text. As in tiktoken, bytes that are not valid UTF-8 (a token sequence cut
        inside a character) become ``"\\ufffd"`` unless ``errors="strict"``."""
        return self.decode_bytes(ids).decode("utf-8", errors=errors)

    def clear_cache(self) -> None:
        """Forget the cached encodings of chunks (to time encoding from a cold start)."""
        self._cache.clear()
