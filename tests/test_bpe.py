"""Tests for gpt_from_scratch.bpe (Chapter 1b): byte-pair encoding from scratch.

GPT-2's merges loaded by ``BPETokenizer.from_gpt2`` must give the ids of ``gpt2_encoding()`` (itself
proven identical to tiktoken's ``gpt2`` in test_tokenizer.py) on the whole corpus and on hard strings;
trained tokenizers are checked against a naive re-count written here.
"""

from __future__ import annotations

from collections import Counter

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from gpt_from_scratch.bpe import merge, pretokenize
from gpt_from_scratch.bpe_tokenizer import BPETokenizer
from gpt_from_scratch.tokenizer import ENDOFTEXT, GPT2_PATTERN, bytes_to_unicode

HARD_STRINGS = [
    "",
    " ",
    "\n\n\n",
    "trailing whitespace   ",
    "trailing newlines\n\n\n",
    "   leading and inner   runs \t\t of\u00a0whitespace \r\n\r\n",
    "Hello, world! 你好，世界 こんにちは 안녕하세요 مرحبا Привет Ωμέγα naïve café",
    "emoji 🤖🎉 👩‍👩‍👧 family 👍🏽 flags 🇫🇷🇯🇵 and e\u0301 combining",
    "don't I'LL you're we've she'd it's I'm 'tis 'quoted' ''",
    "12345678901234567890 3.14159 1,000,000 2024-01-31 0x1F ١٢٣ ½",
    "def f(x):\n    return x**2  # square\n\tif x != 0:\n\t\tpass\n",
    'print(f"{a!r:>10}") // {"key": [1, 2.5e-3]} <a href="/">&amp;</a>',
    "a" * 300 + " " + "ab" * 100,
    "!!!!!!!!!!!?!?!... ----- ===== ``` ...",
    "First Citizen:\nBefore we proceed any further, hear me speak.",
    "\x00\x01\x7f control \u200b zero-width \ufeff BOM",
]
SPECIAL_STRINGS = [
    ENDOFTEXT,
    f"text{ENDOFTEXT}more text{ENDOFTEXT}",
    f"a {ENDOFTEXT} b\n\n{ENDOFTEXT}\n",
    f"{ENDOFTEXT}{ENDOFTEXT}  ",
]


@pytest.fixture(scope="module")
def ours():
    return BPETokenizer.from_gpt2()


@pytest.fixture(scope="module")
def trained(corpus):
    """A 512-token tokenizer trained on the first 50,000 characters of the corpus."""
    return BPETokenizer.train(corpus[:50_000], 512)


def naive_train(text: str, n_merges: int) -> dict[tuple[int, int], int]:
    """Training the slow, obvious way: re-count every pair of every chunk before each merge."""
    words = [list(chunk.encode("utf-8")) for chunk in regex.findall(GPT2_PATTERN, text)]
    merges = {}
    for new_id in range(256, 256 + n_merges):
        counts = Counter(pair for ids in words for pair in zip(ids, ids[1:]))
        top = max(counts.values())
        best = min(pair for pair, count in counts.items() if count == top)  # documented tie rule
        merges[best] = new_id
        words = [merge(ids, best, new_id) for ids in words]
    return merges


# ---------------------------------------------------------------- GPT-2's merges


def test_gpt2_vocabulary_is_tiktokens_byte_for_byte(ours, gpt2):
    assert ours.vocab_size == gpt2.n_vocab == 50_257
    assert all(ours.vocab[i] == gpt2.decode_single_token_bytes(i) for i in range(gpt2.n_vocab))


def test_bytes_to_unicode_writes_gpt2s_tokens(ours):
    chars = bytes_to_unicode()
    assert sorted(chars) == list(range(256)) and len(set(chars.values())) == 256
    assert all(c.isprintable() and not c.isspace() for c in chars.values())
    assert chars[ord(" ")] == "Ġ" and chars[ord("\n")] == "Ċ" and chars[ord("A")] == "A"


def test_identical_to_tiktoken_on_the_whole_corpus(ours, gpt2, corpus):
    ids = ours.encode(corpus)
    assert ids == gpt2.encode(corpus)
    assert ours.decode(ids) == corpus


@pytest.mark.parametrize("text", HARD_STRINGS, ids=range(len(HARD_STRINGS)))
def test_identical_to_tiktoken_on_hard_strings(ours, gpt2, text):
    assert ours.encode(text) == gpt2.encode(text)
    assert ours.encode_ordinary(text) == gpt2.encode_ordinary(text)
    assert ours.decode(ours.encode(text)) == text


@pytest.mark.parametrize("text", SPECIAL_STRINGS, ids=range(len(SPECIAL_STRINGS)))
def test_special_token_handled_as_tiktoken_does(ours, gpt2, text):
    with pytest.raises(ValueError):
        gpt2.encode(text)
    with pytest.raises(ValueError, match="allowed_special"):
        ours.encode(text)
    for allowed in ("all", {ENDOFTEXT}):
        assert ours.encode(text, allowed_special=allowed) == gpt2.encode(text, allowed_special=allowed)
    assert ours.encode(text, disallowed_special=()) == gpt2.encode(text, disallowed_special=())
    assert ours.encode_ordinary(text) == gpt2.encode_ordinary(text)
    assert ours.decode(ours.encode(text, allowed_special="all")) == text


def test_endoftext_is_one_id_only_when_allowed(ours, gpt2):
    assert ours.encode(ENDOFTEXT, allowed_special="all") == [gpt2.eot_token]
    assert len(ours.encode_ordinary(ENDOFTEXT)) > 1


def test_unknown_special_token_is_named(ours):
    with pytest.raises(ValueError, match="<|eot|>"):
        ours.encode("hi", allowed_special={"<|eot|>"})


@pytest.mark.parametrize("text, fix", [(None, "pass the text itself"), (b"hi", r"decode it first"),
                                       (["hi"], "encode each one")])
def test_encode_names_a_text_that_is_not_a_str(ours, text, fix):
    for encode in (ours.encode, ours.encode_ordinary):
        with pytest.raises(TypeError, match=rf"text must be a str, got {type(text).__name__}.*{fix}"):
            encode(text)


def test_lone_surrogates_are_replaced_like_tiktoken(ours, gpt2):
    text = "a\ud800b \udfff"
    assert ours.encode(text) == gpt2.encode(text)


def test_decode_of_a_cut_character_uses_the_replacement_character(ours, gpt2):
    ids = ours.encode("🦄")
    assert len(ids) > 1
    assert ours.decode(ids[:1]) == gpt2.decode(ids[:1])
    assert "\ufffd" in ours.decode(ids[:1])
    with pytest.raises(UnicodeDecodeError):
        ours.decode(ids[:1], errors="strict")


def test_decode_names_an_unknown_id(ours):
    with pytest.raises(ValueError, match="50257"):
        ours.decode([31373, 50257])


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=40))
def test_random_unicode_round_trips_and_matches_tiktoken(ours, gpt2, text):
    ids = ours.encode_ordinary(text)
    assert ours.decode(ids) == text
    assert ids == gpt2.encode_ordinary(text)


# ---------------------------------------------------------------- training


def test_first_merge_is_the_most_frequent_pair_inside_chunks():
    text = "ab. cd. ef. gh. ab ab"
    counts = Counter()
    for chunk in regex.findall(GPT2_PATTERN, text):
        data = chunk.encode("utf-8")
        counts.update(zip(data, data[1:]))
    (best, top), (_, runner_up) = counts.most_common(2)
    assert top > runner_up  # the text was chosen so that the answer has no tie ...
    data = text.encode("utf-8")
    assert Counter(zip(data, data[1:])).most_common(1)[0][0] != best  # ... and ". " wins across chunks
    tok = BPETokenizer.train(text, 257)
    assert tok.merges == {best: 256}
    assert tok.vocab[256] == bytes(best)


def test_merges_equal_a_naive_recount(corpus):
    text = corpus[200_000:215_000]
    assert BPETokenizer.train(text, 256 + 60).merges == naive_train(text, 60)


def test_vocab_grows_by_one_per_merge_and_smaller_vocabs_are_prefixes(corpus):
    text = corpus[:20_000]
    largest = BPETokenizer.train(text, 300)
    for vocab_size in (256, 257, 258, 280, 300):
        tok = BPETokenizer.train(text, vocab_size)
        assert tok.vocab_size == vocab_size == 256 + len(tok.merges)
        assert list(tok.merges.values()) == list(range(256, vocab_size))
        assert list(tok.merges.items()) == list(largest.merges.items())[: vocab_size - 256]


def test_merges_never_cross_chunk_borders(trained):
    for token_id in range(256, trained.vocab_size):
        token = trained.vocab[token_id].decode("utf-8")  # the corpus is ASCII, so every token is text
        assert pretokenize(token) == [token], f"token {token_id} = {token!r} spans two chunks"


def test_trained_tokenizer_compresses_and_round_trips(trained, corpus):
    text = corpus[100_000:110_000]
    ids = trained.encode(text)
    assert len(ids) < 0.6 * len(text.encode("utf-8"))
    assert trained.decode(ids) == text


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=40))
def test_trained_tokenizer_round_trips_any_unicode(trained, text):
    assert trained.decode(trained.encode(text)) == text  # bytes never seen in training still encode


@pytest.mark.parametrize("vocab_size", [255, 0, -1])
def test_vocab_size_below_256_is_refused(vocab_size):
    with pytest.raises(ValueError, match=f"vocab_size={vocab_size} .*choose vocab_size >= 256"):
        BPETokenizer.train("some text", vocab_size)


def test_a_text_too_short_for_the_vocab_size_is_named():
    with pytest.raises(ValueError, match="vocab_size=300.*vocab_size <= 257"):
        BPETokenizer.train("ab", 300)


def test_a_merge_of_an_undefined_id_is_refused():
    with pytest.raises(ValueError, match="uses id 999"):
        BPETokenizer({(97, 999): 256})
