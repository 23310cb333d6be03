# %% [markdown]
# (ch-bpe)=
# # 1b. Byte-pair encoding from scratch
#
# In {ref}`ch-tokens` GPT-2's tokenizer was a black box: tiktoken turned text into ids and back. This
# chapter opens the box. We build byte-pair encoding (BPE) ourselves, in plain Python: first we *train* it,
# learning merges from a text as {cite}`sennrich2016bpe` did, and then we load the 50,000 merges GPT-2
# learned {cite}`radford2019language` and show that our encoder gives **exactly** tiktoken's ids on all of
# Tiny Shakespeare.
#
# You will see:
#
# - why starting from the 256 bytes means there is no such thing as an unknown token;
# - the training loop: count adjacent pairs, merge the most frequent one, repeat;
# - how GPT-2's regex cuts text into chunks so that merges never cross from a word into punctuation or spaces;
# - how encoding replays the learned merges on a new word, step by step;
# - how much the text shrinks as the vocabulary grows, from 256 to 2,048 tokens and up to GPT-2's 50,257.

# %% tags=["colab-setup"]
# Set-up: on Colab, or wherever the package is missing, install it (your own torch is kept).
# Written by scripts/colab_setup.py from _config.yml and pyproject.toml.
try:
    import gpt_from_scratch
except ImportError:
    %pip install --quiet "gpt-from-scratch-book[notebooks]==0.1.0"
    try:
        import gpt_from_scratch
    except ImportError:
        raise RuntimeError(
            "could not install gpt-from-scratch-book 0.1.0: check that the runtime has "
            "internet access and that this version is on PyPI") from None

# %%
import statistics
import time
from collections import Counter

import matplotlib.pyplot as plt
import pandas as pd
import regex  # like `re`, but knows Unicode classes such as \p{L} (any letter)
import torch

from gpt_from_scratch import bpe
from gpt_from_scratch.bpe_tokenizer import BPETokenizer
from gpt_from_scratch.data import load_tiny_shakespeare, split_text
from gpt_from_scratch.tokenizer import (
    GPT2_PATTERN, bytes_to_unicode, gpt2_encoding, gpt2_files,
)
from gpt_from_scratch.utils import seed_everything
from gpt_from_scratch.book.figure_text import book_figures

book_figures()  # sharp on high-density screens, each PNG records its smallest text
generator = seed_everything(1337)
text = load_tiny_shakespeare()
tiktoken_gpt2 = gpt2_encoding()
print(f"Tiny Shakespeare: {len(text):,} characters")

# %% [markdown]
# ## 1b.1 Text is bytes
#
# {ref}`ch-tokens` weighed two extremes: a character vocabulary built from Shakespeare cannot encode an
# emoji it never saw, while bytes cover every text but make sequences long. A byte-level tokenizer takes
# the 256 possible byte values as its first 256 tokens, so before it learns a single merge it can already
# encode any string in any script: there is no "unknown token". Here is our tokenizer with no merges at
# all, one token per UTF-8 byte:

# %% tags=["nbval-check-output"]
bytes_only = BPETokenizer(merges={})  # the 256 byte tokens and nothing else
samples = ["hello", "café", "Привет", "世界", "🤖", "👩‍👩‍👧"]
for s in samples:
    assert bytes_only.decode(bytes_only.encode(s)) == s
print(bytes_only)
pd.DataFrame({
    "text": samples,
    "characters": [len(s) for s in samples],
    "tokens (= UTF-8 bytes)": [len(bytes_only.encode(s)) for s in samples],
    "token ids": [bytes_only.encode(s) for s in samples],
})

# %% [markdown]
# ASCII letters take one byte, accented Latin letters and Cyrillic two, Chinese characters three, an emoji
# four; the "family" is three emoji glued together by two invisible zero-width joiners, 5 characters and
# 18 bytes. Every one of them encodes and decodes exactly.
#
# The price of bytes is length: one token per byte makes sequences long, and a transformer's cost grows
# with the length of its input (quadratically, in attention, as {ref}`ch-attention` shows). BPE buys the
# length back. It was a compression algorithm {cite}`gage1994bpe` before {cite}`sennrich2016bpe` used it
# for words: **find the most frequent pair of adjacent tokens, give it a new id, replace every occurrence,
# repeat.** Each repetition adds one token to the vocabulary and shortens the text.
#
# ## 1b.2 Counting pairs, merging the most frequent
#
# We train on the tiny corpus of {cite}`sennrich2016bpe`'s own example: the words *low*, *lower*, *newest*
# and *widest*, five, two, six and three times.

# %%
tiny = " ".join(["low"] * 5 + ["lower"] * 2 + ["newest"] * 6 + ["widest"] * 3)
print(tiny)

# %% [markdown]
# Two small functions do all the work. `get_pair_counts` counts adjacent pairs (the `weight` argument
# will let us count a whole word that occurs many times in one go); `merge_pair` replaces a pair by a new
# id, scanning left to right.

# %%
def get_pair_counts(ids, counts=None, weight=1):
    """Add the adjacent pairs of `ids`, each `weight` times, to `counts` (a Counter)."""
    counts = Counter() if counts is None else counts
    for pair in zip(ids, ids[1:]):
        counts[pair] += weight
    return counts


def merge_pair(ids, pair, new_id):
    """Replace every occurrence of `pair` in `ids` by `new_id`, left to right."""
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


# %% tags=["nbval-check-output"]
ids = list(tiny.encode("utf-8"))
counts = get_pair_counts(ids)
print(f"{len(ids)} bytes, {len(counts)} different adjacent pairs; the most frequent:")
pd.DataFrame(
    [(pair, bytes(pair).decode(), n) for pair, n in counts.most_common(8)],
    columns=["pair of ids", "as text", "count"],
)

# %% [markdown]
# Two pairs tie at the top, `es` and `st`. We break ties by the smallest ids, so `es` (101, 115) wins and
# becomes token 256. A token can itself be part of a pair, so merges build on merges:

# %% tags=["nbval-check-output"]
print(merge_pair(ids, (101, 115), 256)[:24], "...")
print(merge_pair([1, 1, 1], (1, 1), 9), "  <- an id already merged is not used twice")

# %% [markdown]
# Our two functions are the ones the package uses; a quick check on random ids before we rely on them:

# %%
# Few values, many repeated pairs:
random_ids = torch.randint(0, 4, (2000,), generator=generator).tolist()
assert get_pair_counts(random_ids) == bpe.pair_counts(random_ids)
for pair in [(0, 0), (1, 2), (3, 3)]:
    assert merge_pair(random_ids, pair, 99) == bpe.merge(random_ids, pair, 99)
print("get_pair_counts and merge_pair equal gpt_from_scratch.bpe.pair_counts and .merge")

# %% [markdown]
# Now the loop, run ten times on the raw bytes of the tiny text. Watch what it learns:

# %% tags=["nbval-check-output"]
def show(token_ids, vocab):
    """Token ids as readable text, a space shown as '␣'."""
    text = "".join(vocab[i].decode("utf-8", errors="replace") for i in token_ids)
    return text.replace(" ", "␣")


vocab = {i: bytes([i]) for i in range(256)}
rows, ids = [], list(tiny.encode("utf-8"))
for new_id in range(256, 266):
    counts = get_pair_counts(ids)
    top = max(counts.values())
    best = min(pair for pair, n in counts.items() if n == top)  # ties: the smallest ids
    vocab[new_id] = vocab[best[0]] + vocab[best[1]]
    ids = merge_pair(ids, best, new_id)
    pair_text = f"{show([best[0]], vocab)} + {show([best[1]], vocab)}"
    rows.append((new_id, pair_text, top, show([new_id], vocab), len(ids)))
columns = ["new id", "merged pair", "count", "new token", "tokens in the text"]
pd.DataFrame(rows, columns=columns)

# %% [markdown]
# The text shrank from 94 tokens to 27, but look at tokens 258 and 265: `est␣` glues a word to the space
# after it, and `newest␣newest␣` is two words in one token. On a real corpus this wastes the vocabulary
# on every combination of a word with what happens to follow it: `dog.`, `dog!`, `dog?`, `dog,` would
# each get a token, which is the very example {cite}`radford2019language` gives.
#
# ## 1b.3 Pre-tokenization: GPT-2's regex
#
# GPT-2's fix is to cut the text into chunks first, with a regular expression, and to count and merge
# only *inside* chunks. Here is the pattern (tiktoken's spelling of it, which splits identically to the
# one in GPT-2's `encoder.py`), one alternative per line, with `␣` standing for a space:
#
# | alternative | matches |
# |---|---|
# | `'(?:[sdmt]\|ll\|ve\|re)` | the English contractions `'s 'd 'm 't 'll 've 're` (lower case only) |
# | `␣?\p{L}++` | a run of letters, with the space before it if there is one |
# | `␣?\p{N}++` | a run of digits, with its space |
# | `␣?[^\s\p{L}\p{N}]++` | a run of anything else (punctuation, symbols, emoji), with its space |
# | `\s++$` | whitespace at the very end of the text |
# | `\s+(?!\S)` | a run of whitespace, except its last character when a non-space character follows |
# | `\s` | a single whitespace character that is left over |
#
# The space usually goes *with the word that follows*: `␣world` is one chunk, so GPT-2 learns the tokens
# `␣the` and `the` separately. Let us see the chunks of a sentence built to hit every rule:

# %% tags=["nbval-check-output"]
sentence = "Hello world! I'm fine,  don't   worry... 2024 tokens, I'LL see\n\n\n"
chunks = regex.findall(GPT2_PATTERN, sentence)
assert chunks == bpe.pretokenize(sentence) and "".join(chunks) == sentence
print(chunks)

# %% [markdown]
# Every chunk is one kind of thing. The two spaces before `don't` became `' '` + `' don'`: the last space
# of a whitespace run is left for the word. `I'LL` shows that the contraction rule is case-sensitive, so
# `'LL` is split into `'` and `LL`. And `"\n\n\n"` stays one chunk.
#
# Training now counts pairs per **distinct chunk**, weighted by how often the chunk occurs. That is
# much cheaper than a pass over every byte, because real text repeats itself:

# %% tags=["nbval-check-output"]
corpus_chunks = Counter(bpe.pretokenize(text))
n_chunks = sum(corpus_chunks.values())
print(f"Tiny Shakespeare: {n_chunks:,} chunks, {len(corpus_chunks):,} distinct, "
      f"{n_chunks / len(corpus_chunks):.1f} chunks per distinct chunk")
print("most frequent:", corpus_chunks.most_common(8))

# %% [markdown]
# Of 297,833 chunks only 15,057 are different: each distinct chunk occurs 19.8 times on average.
#
# ## 1b.4 The training loop
#
# Here is the whole trainer. It is the loop above, run on the distinct chunks with their counts as weights:

# %%
def train_bpe(text, vocab_size):
    """Learn vocab_size - 256 merges from `text`; return them and a table of each step."""
    chunk_counts = Counter(regex.findall(GPT2_PATTERN, text))
    # Each chunk as a list of ids:
    words = {chunk: list(chunk.encode("utf-8")) for chunk in chunk_counts}
    vocab = {i: bytes([i]) for i in range(256)}
    merges, steps = {}, []
    for new_id in range(256, vocab_size):
        counts = Counter()
        for chunk, ids in words.items():
            get_pair_counts(ids, counts, weight=chunk_counts[chunk])
        top = max(counts.values())
        best = min(pair for pair, n in counts.items() if n == top)  # ties: the smallest ids
        merges[best] = new_id
        vocab[new_id] = vocab[best[0]] + vocab[best[1]]
        words = {chunk: merge_pair(ids, best, new_id) for chunk, ids in words.items()}
        n_tokens = sum(len(ids) * chunk_counts[chunk] for chunk, ids in words.items())
        pair_text = f"{show([best[0]], vocab)} + {show([best[1]], vocab)}"
        steps.append((new_id, pair_text, top, show([new_id], vocab), n_tokens))
    columns = ["new id", "merged pair", "count", "new token", "tokens in the text"]
    return merges, pd.DataFrame(steps, columns=columns)


# %% tags=["nbval-check-output"]
tiny_merges, tiny_steps = train_bpe(tiny, 266)
tiny_steps

# %% [markdown]
# The same text, and this time every token stays inside a word: `est`, `␣low`, `␣newest`, and no token
# holds a space at its end. The package's `BPETokenizer.train` learns the same merges. It is faster on
# large texts because after each merge it re-counts only the chunks that contained the merged pair, and
# finds the most frequent pair with a heap instead of a scan; we check it here on the tiny text and on the
# first 20,000 characters of Shakespeare:

# %%
assert BPETokenizer.train(tiny, 266).merges == tiny_merges
start = time.perf_counter()
slow_merges, _ = train_bpe(text[:20_000], 256 + 100)
slow = time.perf_counter() - start
start = time.perf_counter()
fast = BPETokenizer.train(text[:20_000], 256 + 100)
print(f"100 merges on 20,000 characters: train_bpe {slow:.2f} s, "
      f"BPETokenizer.train {time.perf_counter() - start:.2f} s")
assert fast.merges == slow_merges
print("BPETokenizer.train learns exactly the merges of train_bpe")

# %% [markdown]
# Encoding a *new* word replays the merges in the order they were learned. Our tiny tokenizer never saw
# *lowest*, *newer* or *wider*, yet it encodes them with the pieces it knows, falling back to single
# bytes where it must:

# %% tags=["nbval-check-output"]
tiny_tok = BPETokenizer.train(tiny, 266)
for word in [" lowest", " newer", " wider", " 🤖"]:
    word_ids = tiny_tok.encode(word)
    print(f"{word!r:10} -> {word_ids}  {[tiny_tok.vocab[i] for i in word_ids]}")
    assert tiny_tok.decode(word_ids) == word

# %% [markdown]
# ## 1b.5 GPT-2's merges
#
# OpenAI trained GPT-2's tokenizer on web text and kept 50,000 merges, published as two files:
# `vocab.bpe`, the merges in the order they were learned, and `encoder.json`, the id of every token.
# Both are text files, so every token must be written as a string, and raw bytes such as the space or
# the newline would be invisible or break the file's "one merge per line, two tokens separated by a space"
# format. GPT-2 therefore maps each of the 256 bytes to a visible character: printable bytes to
# themselves, and the 68 others, in byte order, to the characters from U+0100 on.

# %% tags=["nbval-check-output"]
byte_chars = bytes_to_unicode()
for b in [ord("A"), ord("é".encode("latin-1")), 0, ord("\n"), ord(" "), 127]:
    print(f"byte {b:3} {bytes([b])!r:8} -> {byte_chars[b]}  (U+{ord(byte_chars[b]):04X})")
merge_lines = gpt2_files()["vocab.bpe"].read_text(encoding="utf-8").split("\n")
print(merge_lines[0])
for rank, line in enumerate(merge_lines[1:9]):
    print(f"merge {rank}: {line!r}")


# %% [markdown]
# Bytes 0 to 32 (controls, then the space) come first among the 68, so they become U+0100 to U+0120:
# the space is `Ġ` and the newline `Ċ`. The first merges of `vocab.bpe` now read: space + `t`, space + `a`,
# `h` + `e`, and at rank 6 `␣t` + `he`, the word `␣the`.
#
# `BPETokenizer.from_gpt2()` reads both files, translates every token back to bytes, and keeps GPT-2's
# ids: the merge on the $r$-th line after the `#version` header (counting from 0) has **rank** $r$ and
# creates token $256 + r$. One detail differs from the tokenizers we train: GPT-2's ids 0 to 255 are the
# 256 bytes, but numbered in the order of the byte table above (printable bytes first), not by byte value.
# `byte_ids` maps each byte to its id:

# %% tags=["nbval-check-output"]
gpt2_bpe = BPETokenizer.from_gpt2()
print(gpt2_bpe)
for ch in ["!", "A", " ", "\n"]:
    print(f"byte {ord(ch):3} {ch!r:5} -> id {gpt2_bpe.byte_ids[ord(ch)]}")
print("rank 0 creates token 256:", gpt2_bpe.vocab[256],
      "| rank 6 creates token 262:", gpt2_bpe.vocab[262])

# %% [markdown]
# To encode a chunk, start from its bytes and apply, among the adjacent pairs present, the one with the
# lowest rank, the one GPT-2 learned first; repeat until no adjacent pair is a known merge. Here is
# that loop, written out for `␣Coriolanus`, the hero of the play Tiny Shakespeare opens with
# (tokens are written GPT-2's way, with `Ġ` for the space):

# %% tags=["nbval-check-output"]
def as_gpt2_text(token_id):
    """A token written with GPT-2's byte characters, as in vocab.bpe."""
    return "".join(byte_chars[b] for b in gpt2_bpe.vocab[token_id])


def encode_chunk_steps(chunk):
    """Encode one chunk with GPT-2's merges, recording every step."""
    ids = [gpt2_bpe.byte_ids[b] for b in chunk.encode("utf-8")]
    steps = [("start", "", " ".join(as_gpt2_text(i) for i in ids))]
    while len(ids) >= 2:
        known = [pair for pair in zip(ids, ids[1:]) if pair in gpt2_bpe.ranks]
        if not known:
            break
        pair = min(known, key=gpt2_bpe.ranks.get)  # learned first = lowest rank
        ids = merge_pair(ids, pair, gpt2_bpe.merges[pair])
        merged = f"{as_gpt2_text(pair[0])} + {as_gpt2_text(pair[1])}"
        steps.append((gpt2_bpe.ranks[pair], merged, " ".join(as_gpt2_text(i) for i in ids)))
    return ids, pd.DataFrame(steps, columns=["rank", "merged pair", "tokens"])


word_ids, word_steps = encode_chunk_steps(" Coriolanus")
assert word_ids == gpt2_bpe.encode(" Coriolanus") == tiktoken_gpt2.encode(" Coriolanus")
print("ids:", word_ids)
word_steps

# %% [markdown]
# Eleven bytes, eight merges, three tokens: `␣Cor`, `iol`, `anus`. The ranks only go up, and they must:
# each step takes the lowest rank present, so the pairs it leaves behind rank higher, and a pair that
# uses the token just made was learned after the merge that made it. So `i + ol` (rank 1413) waits for
# `o + l` (rank 93). The last merge, `an + us`, is rank 40885: rare endings are learned late.
#
# ## 1b.6 The proof: identical to tiktoken
#
# tiktoken runs the same algorithm in Rust. Our pure-Python encoder must give the same ids on every
# character of Tiny Shakespeare; ids are integers, so `assert_close` demands exact equality:

# %% tags=["nbval-check-output"]
ours = gpt2_bpe.encode(text)
theirs = tiktoken_gpt2.encode(text)
torch.testing.assert_close(torch.tensor(ours), torch.tensor(theirs))
assert gpt2_bpe.decode(ours) == text
print(f"identical ids on the whole corpus: {len(ours):,} tokens "
      f"for {len(text):,} characters "
      f"({len(text) / len(ours):.3f} characters per token)")

# %% [markdown]
# Shakespeare is plain ASCII, so here are strings built to be hard: other scripts, emoji made of several
# code points, whitespace runs at the end, contractions in capitals, digits and code. The tests in
# `tests/test_bpe.py` check many more, and random Unicode strings too.

# %% tags=["nbval-check-output"]
hard = [
    "Hello, world! 你好，世界 こんにちは Привет naïve café",
    "emoji 🤖🎉 👩‍👩‍👧 👍🏽 and e\u0301 (an e with a combining accent)",
    "trailing spaces   ", "\n\n\n", "  leading\t\ttabs \r\n\r\n",
    "don't I'LL you're WE'VE 'tis", "3.14159 1,000,000 2024-01-31 12345678901234567890",
    "def f(x):\n    return x**2  # square\n",
]
for s in hard:
    assert gpt2_bpe.encode(s) == tiktoken_gpt2.encode(s), s
    assert gpt2_bpe.decode(gpt2_bpe.encode(s)) == s
print(f"{len(hard)} hard strings: identical ids, exact round trip")
print("'🤖' ->", gpt2_bpe.encode("🤖"), "  '世界' ->", gpt2_bpe.encode("世界"))

# %% [markdown]
# A robot is three tokens: its four bytes, partly merged. No unknown token anywhere.
#
# ### The special token `<|endoftext|>`
#
# GPT-2 has one token that no merge produces: `<|endoftext|>`, id 50256, the border between two documents
# in the training data. As {ref}`ch-tokens` showed, tiktoken refuses the *text* `<|endoftext|>` unless told
# what to do with it, so that user input cannot fake a document boundary. `BPETokenizer` follows the same
# rules:
#
# - `encode(text)` raises `ValueError` when the text contains `<|endoftext|>`;
# - `encode(text, allowed_special={"<|endoftext|>"})` (or `"all"`) turns it into the single id 50256;
# - `encode_ordinary(text)` (or `encode(text, disallowed_special=())`) encodes it as ordinary text.

# %% tags=["nbval-check-output"]
doc = "The end.<|endoftext|>A new story"
try:
    gpt2_bpe.encode(doc)
except ValueError as err:
    print("ValueError:", err)
for allowed in ["all", {"<|endoftext|>"}]:
    ours_ids = gpt2_bpe.encode(doc, allowed_special=allowed)
    assert ours_ids == tiktoken_gpt2.encode(doc, allowed_special=allowed)
assert gpt2_bpe.encode_ordinary(doc) == tiktoken_gpt2.encode_ordinary(doc)
print("allowed:  ", gpt2_bpe.encode(doc, allowed_special="all"))
print("ordinary: ", gpt2_bpe.encode_ordinary(doc))

# %% [markdown]
# ## 1b.7 Fast enough: a cache per chunk
#
# Pure Python is slow at the inner loop, but it rarely has to run it: text repeats itself. Tiny
# Shakespeare's chunks repeat so much (the counts above) that `BPETokenizer` runs BPE once per *distinct*
# chunk and remembers the result; the rest of the work is the regex and dictionary look-ups. Timings
# depend on your machine (and are not part of the checked outputs):

# %%
def median_time(fn, setup=lambda: None, runs=3):
    """Median seconds of fn() over `runs` runs, calling setup() untimed before each."""
    times = []
    for _ in range(runs):
        setup()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


t_tiktoken = median_time(lambda: tiktoken_gpt2.encode(text))
t_cold = median_time(lambda: gpt2_bpe.encode(text), setup=gpt2_bpe.clear_cache)
t_warm = median_time(lambda: gpt2_bpe.encode(text))
print(f"tiktoken (Rust):                {t_tiktoken:.3f} s")
for name, t in [("ours, empty cache:", t_cold), ("ours, cache already filled:", t_warm)]:
    print(f"{name:<31} {t:.3f} s  ({t / t_tiktoken:.1f}x tiktoken)")

# %% [markdown]
# ## 1b.8 Vocabulary size versus compression
#
# How much does each merge buy? We train on the training part of Tiny Shakespeare (the first 90%, as in
# {ref}`ch-tokens`) and measure **characters per token** on the validation part, text the tokenizer has
# never seen. Training is greedy: the first $k$ merges of a 2,048-token vocabulary are exactly what
# training a $(256 + k)$-token vocabulary would learn. So we train once, to 2,048, and cut the merge list
# for the smaller sizes.

# %%
train_text, val_text = split_text(text, 0.9)
start = time.perf_counter()
tok_2048 = BPETokenizer.train(train_text, 2048)
print(f"trained {len(tok_2048.merges):,} merges on {len(train_text):,} characters "
      f"in {time.perf_counter() - start:.1f} s")

# %%
def first_merges(tok, vocab_size):
    """The tokenizer that training to `vocab_size` would have produced.

    That is the first merges of a bigger one.
    """
    return BPETokenizer(dict(list(tok.merges.items())[: vocab_size - 256]))


assert BPETokenizer.train(train_text, 512).merges == first_merges(tok_2048, 512).merges
print("training to 512 gives exactly the first 256 merges of the 2,048-token tokenizer")

# %% tags=["nbval-check-output"]
vocab_sizes = [256, 320, 384, 512, 768, 1024, 1536, 2048]
rows = []
for V in vocab_sizes:
    n_tokens = len(first_merges(tok_2048, V).encode(val_text))
    rows.append(("ours", V, n_tokens, len(val_text) / n_tokens))
n_tokens = len(gpt2_bpe.encode(val_text))
rows.append(("GPT-2", gpt2_bpe.vocab_size, n_tokens, len(val_text) / n_tokens))
columns = ["tokenizer", "vocab size", "validation tokens", "characters per token"]
compression = pd.DataFrame(rows, columns=columns)
compression.round(3)

# %% mystnb={"figure": {"caption": "Characters per token on the validation text of Tiny Shakespeare, for byte-level BPE tokenizers trained on the training text with 256 to 2,048 tokens, and for GPT-2's 50,257-token tokenizer trained on web text.", "name": "fig-bpe-compression"}, "image": {"alt": "A line rising steeply from 1.0 character per token at 256 tokens and flattening towards 2,048 tokens, with a separate star for GPT-2 at 50,257 tokens, higher still."}}
ours_rows = compression[compression["tokenizer"] == "ours"]
gpt2_row = compression[compression["tokenizer"] == "GPT-2"]
fig, ax = plt.subplots(figsize=(5.2, 3.8))
ax.plot(ours_rows["vocab size"], ours_rows["characters per token"], "o-",
        label="ours, trained on Tiny Shakespeare")
ax.plot(gpt2_row["vocab size"], gpt2_row["characters per token"], "*", markersize=14,
        label="GPT-2 (web text)")
ax.set_xscale("log", base=2)
ax.set_xticks([256, 512, 1024, 2048, 4096, 8192, 16384, 50257])
ax.set_xticklabels(["256", "512", "1k", "2k", "4k", "8k", "16k", "50,257"])
ax.set_xlabel("vocabulary size (log scale)")
ax.set_ylabel("characters per token (validation text)")
ax.set_title("More merges, fewer tokens: compression versus vocabulary size")
ax.grid(alpha=0.3)
ax.legend(loc="lower right")
plt.show()

# %% [markdown]
# The first merges buy the most: from 256 to 512 tokens the validation text goes from 1.000 to 1.878
# characters per token, while the last doubling, 1,024 to 2,048, only takes it from 2.257 to 2.561.
# GPT-2's 50,257 tokens reach 3.093 on this text, better than our 2,048-token tokenizer, though it was
# trained on modern web text and spends most of its vocabulary on words Shakespeare never used. What did
# our tokenizer spend its last merges on, and what are its longest tokens?

# %% tags=["nbval-check-output"]
print("last merges:   ", [tok_2048.vocab[i].decode() for i in range(2038, 2048)])
learned = (tok_2048.vocab[i].decode() for i in tok_2048.merges.values())
print("longest tokens:", sorted(learned, key=len)[-6:])

# %% [markdown]
# Late merges are ordinary word pieces (`␣canst`, `␣hearts`). The longest tokens are names: a speaker
# label opens every speech (`NORTHUMBERLAND`) and characters are named in the verse (`␣Bolingbroke`),
# often enough to earn a token of their own.
#
# ## Summary
#
# - A byte-level tokenizer starts from the 256 byte values, so every string of every script, emoji
#   included, has an encoding: no unknown tokens.
# - Training BPE is a loop: count adjacent pairs, merge the most frequent into a new token, repeat until
#   the vocabulary is as large as wanted. It is greedy, so a smaller vocabulary is a prefix of a larger one.
# - GPT-2's regex cuts text into chunks (words with their leading space, numbers, punctuation, whitespace)
#   and merges never cross a chunk's border, so the vocabulary is not spent on `dog.`, `dog!` and `dog?`.
# - Encoding replays the learned merges on each chunk, lowest rank first. With GPT-2's 50,000 merges our
#   `BPETokenizer.from_gpt2()` gives exactly tiktoken's ids on all of Tiny Shakespeare, and `<|endoftext|>`
#   is refused, allowed or treated as text just as tiktoken does.
# - More merges mean fewer tokens per text, with diminishing returns: see the figure above.
#
# From now on the book uses `gpt2_encoding()` (tiktoken, fast) knowing exactly what it computes;
# `gpt_from_scratch.bpe` is there when you want to look inside.
#
# ## Exercises
#
# ### Exercise 1. Whose text, whose tokenizer (predict, then run)
#
# Our 2,048-token tokenizer was trained on Shakespeare; GPT-2's 50,257 on web text. Section
# 1b.8 compared them on Shakespeare's validation text. Now take a sentence of modern English
# (a startup, investors, a smartphone app): how does each tokenizer's characters-per-token
# rate move from Shakespeare to it, up, down or flat, and why? Write down a guess for the
# four characters-per-token numbers, then run the cell after the answer.

# %% [markdown] tags=["answer"]
# ```{admonition} Answer
# :class: dropdown
# GPT-2's rate jumps, from 3.23 on the Shakespeare passage to 5.38 on the modern sentence:
# this is the kind of text it was trained on, and its vocabulary holds most of these words
# whole. Ours does not drop, as one might guess, but stays flat at 2.58: it holds its rate
# thanks to short common words (" the", " on", " new"), while "startup", "emailed" and
# "investors", which never occurred in its training text, are spelled from short pieces (the
# last line prints them). A tokenizer compresses best the kind of text it was trained on,
# one reason each new model family trains its own.
# ```

# %%
modern = ("The startup emailed its investors on Monday: the new smartphone app had reached "
          "2 million users, and the servers were struggling.")
for name, tok in [("ours, 2,048 tokens", tok_2048), ("GPT-2, 50,257 tokens", gpt2_bpe)]:
    for label, passage in [("Shakespeare", val_text[:3000]), ("modern English", modern)]:
        rate = len(passage) / len(tok.encode(passage))
        print(f"{name:21} {label:15} {rate:.2f} characters per token")
print([tok_2048.vocab[i].decode() for i in tok_2048.encode(modern)][:16])

# %% [markdown]
# ### Exercise 2. Cutting the merge list (explain)
#
# The chapter trained one tokenizer to 2,048 tokens and *cut its merge list* to get the
# 512-token one, and checked that this equals training to 512 directly, because training
# is greedy. Is greed enough? Which change to `train_bpe` would break the prefix property:
# (a) breaking ties by the largest ids instead of the smallest, (b) choosing among the tied
# pairs at random, (c) stopping when no pair occurs more than once? The cell after the
# answer checks the prefix property once more, on two small sizes.

# %% [markdown] tags=["answer"]
# ```{admonition} Answer
# :class: dropdown
# Greed is not enough on its own; training must also be deterministic: merge $k$ depends
# only on the text and on merges $0 \ldots k-1$, never on how many merges will follow. So
# whatever the target size, the first $k$ steps are the same computation. (a) keeps that: a
# different but fixed rule still gives the same first $k$ merges for every target size. (b)
# breaks it: two runs can pick different pairs at a tie, and from then on everything
# differs. (c) only stops the loop earlier; the merges it does learn are still a prefix.
# ```

# %%
small, large = BPETokenizer.train(val_text, 300), BPETokenizer.train(val_text, 400)
same = list(small.merges.items()) == list(large.merges.items())[: len(small.merges)]
print(f"the {len(small.merges)} merges of the 300-token tokenizer open the 400-token list:",
      same)

# %% [markdown]
# ### Exercise 3. Encoding with a merge table (implement)
#
# Write `bpe_encode(text, merges)`, the encoder of a tokenizer you trained: `merges` maps a
# pair of ids to the new id it creates, `{(a, b): new_id}`, like `tok_2048.merges`, so a
# lower new id means a merge learned earlier. Cut the text into chunks with `GPT2_PATTERN`,
# start each chunk from its UTF-8 bytes (byte $b$ is id $b$), apply the earliest-learned
# merge among the adjacent pairs present until none applies, and return the ids of all the
# chunks in order. You may use this chapter's `merge_pair`. The check trains its own small
# tokenizer, on text with accents, Japanese and an emoji.

# %% tags=["solution", "hide-input"] mystnb={"code_prompt_show": "Show the solution", "code_prompt_hide": "Hide the solution"}
def bpe_encode(text, merges):
    """Encode `text` with merges {(a, b): new_id}, earliest merge first, per chunk."""
    out = []
    for chunk in regex.findall(GPT2_PATTERN, text):
        ids = list(chunk.encode("utf-8"))
        while len(ids) >= 2:
            known = [pair for pair in zip(ids, ids[1:]) if pair in merges]
            if not known:
                break
            best = min(known, key=merges.get)  # the lowest new id: learned first
            ids = merge_pair(ids, best, merges[best])
        out.extend(ids)
    return out


# %%
from gpt_from_scratch.exercises import check_bpe_encode

check_bpe_encode(bpe_encode);

# %% [markdown]
# ### Exercise 4. Digits (explain)
#
# GPT-2's regex keeps a whole run of digits in one chunk (` ?\p{N}++`), so the merges decide
# how numbers are cut. Run the cell below to see the pieces of `" 1234 12345 123456 2024
# 1999"`. Why could this make arithmetic hard for the model, and what would you change in
# the regex? (Later OpenAI tokenizers, such as tiktoken's `cl100k_base`, use `\p{N}{1,3}`:
# chunks of at most three digits.)

# %%
numbers = " 1234 12345 123456 2024 1999"
print([gpt2_bpe.vocab[i].decode() for i in gpt2_bpe.encode(numbers)])

# %% [markdown] tags=["answer"]
# ```{admonition} Answer
# :class: dropdown
# The pieces follow how often digit strings appeared in web text, not place value: years
# such as 2024 and 1999 can be single tokens while other numbers are cut at irregular
# places, so the same digit lands in differently shaped tokens from one number to the next
# and the model cannot line up units, tens and hundreds. Splitting digit runs into chunks of
# at most three digits (or single digits) makes the cuts predictable.
# ```

# %% [markdown] tags=["quiz"]
# ## Check yourself
#
# A few questions on this chapter, each answer with its explanation. The numbers in them
# are the ones this chapter printed.

# %% tags=["quiz", "remove-input"]
from gpt_from_scratch.book.quiz import Choice, MultipleChoice, Numeric, show_quiz

show_quiz([
    Numeric("With GPT-2's 50,000 merges, how many characters of Tiny Shakespeare does one "
            "token cover on average? (Two decimals.)", len(text) / len(ours), 0.006,
            "Our tokenizer gives exactly tiktoken's ids, so the same ratio."),
    MultipleChoice("Why can a byte-level BPE tokenizer encode any string, emoji "
                   "included?", [
        Choice("It starts from the 256 byte values: any UTF-8 text is a sequence of "
               "them", True,
               "Yes: merges only shorten the sequence; nothing is ever unknown."),
        Choice("It has a token for every Unicode character", False,
               "No: there are far more characters than its 50,257 tokens."),
        Choice("Unknown characters become an <unk> token", False,
               "No: a byte-level tokenizer has no unknown token at all."),
    ]),
    MultipleChoice("Encoding a chunk replays the learned merges in which order?", [
        Choice("Lowest rank first: the merge learned earliest", True,
               "Yes: the order training found them in."),
        Choice("The pair most frequent in the text being encoded first", False,
               "No: frequencies matter only during training."),
        Choice("Longest resulting token first", False,
               "No: merges are applied by rank, not by length."),
    ]),
])
