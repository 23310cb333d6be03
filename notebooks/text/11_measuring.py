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
# (ch-measuring)=
# # 11. Measuring a language model
#
# A validation loss says how well a model predicts text like its training text, in its own
# tokens. Two questions it cannot answer come up as soon as there are two models: *which is
# better*, when their tokenizers differ, and *is it any good at something*, a task a person
# would recognise. This chapter answers both for every model the book trained:
#
# 1. bits per byte: the loss over the bytes of the text, not the tokens, so that the character
#    model and the BPE model share one scale;
# 2. multiple choice by likelihood: each answer's log-probability after the question, with
#    the three rules in circulation for comparing answers of different lengths, the same
#    numbers as lm-evaluation-harness {cite}`gao2021harness` computes;
# 3. two offline tests built from the validation split, scored beside the baselines a result
#    must beat: a guess, the most frequent word and a bigram table;
# 4. online (Colab): GPT-2 small on HellaSwag {cite}`zellers2019hellaswag`, the benchmark
#    whose two published GPT-2 numbers differ only by the rule.
#
# Nothing here trains: the chapter loads the two models of {ref}`ch-training` and the offline
# model of {ref}`ch-gpt2-weights` (each trained and cached there, or here the first time) and
# reads them.

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
import math
import time

import matplotlib.pyplot as plt
import torch
from IPython.display import Markdown, display

from gpt_from_scratch.data import load_tiny_shakespeare, split_text
from gpt_from_scratch.evaluate import (
    MultipleChoice, bits_per_byte, encode_pair, score_choices, summed_nats,
)
from gpt_from_scratch.hf_weights import WeightsUnavailableError, from_pretrained
from gpt_from_scratch.utils import default_device
from gpt_from_scratch.book import lessons
from gpt_from_scratch.book import measuring_prose as prose
from gpt_from_scratch.book.figure_text import book_figures
from gpt_from_scratch.book.hellaswag import hellaswag_items, hellaswag_rows
from gpt_from_scratch.book.measuring import (
    DELIMITER, BigramTable, NextLineSettings, frequency_accuracy, last_word_sets,
    next_line_sets, word_counts,
)
from gpt_from_scratch.book.offline_model import EOT, offline_model
from gpt_from_scratch.book.recipes import RECIPES, book_model, char_level_data

book_figures()  # sharp on high-density screens, each PNG records its smallest text
torch.set_printoptions(precision=3, sci_mode=False)
started = time.perf_counter()

DRAWS = 5  # draws of each test set (seed 0), no speech in two draws
LINE_ITEMS = 100  # items per draw of "which line continues"
WORD_ITEMS = 200  # items per draw of "which word ends"
VAL_CHARS = 20_000  # the validation text scored for bits per byte

# %% [markdown]
# ## 11.1 One scale for every tokenizer: bits per byte
#
# Chapter 6 trained the same network twice: on characters (the character model) and on
# GPT-2's tokens (the BPE model). Chapter 8 trained a third model on GPT-2's tokens, the
# offline model, which learns only the tokens of its training text. Their validation losses
# are in nats *per token*, and a token is one character for the first and several for the
# others: the numbers do not compare.
#
# Bits per byte do. Score the same text with each model, add up the loss of every predicted
# token (in nats), and divide by the number of bytes those tokens spell, times $\ln 2$:
#
# $$\text{bpb} = \frac{\sum_t -\ln p(x_t \mid x_{<t})}{\ln 2 \cdot \sum_t \text{bytes}(x_t)}.$$
#
# The bytes of a text are the same whatever it is cut into, so bits per byte price every model
# on one unit: the model with fewer bits per byte predicts the text better. (Tiny Shakespeare is plain ASCII, one byte per
# character.) `summed_nats` cuts the text into windows of the model's context. The offline
# model was trained to read `<|endoftext|>` first, as a document starts: it is given that
# token with `start=[EOT]`, here and in `score_choices`.

# %%
text = load_tiny_shakespeare()
val_text = split_text(text, 0.9)[1][:VAL_CHARS]
char_model, char_tok = book_model("shakespeare-char", progress=False)
bpe_model, encoding = book_model("shakespeare-bpe", progress=False)
offline, offline_info = offline_model()  # Chapter 8's, a CorpusVocabGPT
char_train, _, _ = char_level_data(text)
models = {  # name: (model, encode, bytes of a token, start tokens)
    "character model": (char_model, char_tok.encode, lambda t: 1, []),
    "BPE model": (bpe_model, encoding.encode_ordinary,
                  lambda t: len(encoding.decode_single_token_bytes(t)), []),
    "offline model": (offline, encoding.encode_ordinary,
                      lambda t: len(encoding.decode_single_token_bytes(t)), [EOT]),
}
steps = {"character model": RECIPES["shakespeare-char"].train["max_iters"],
         "BPE model": RECIPES["shakespeare-bpe"].train["max_iters"],
         "offline model": offline_info["settings"]["train"]["max_iters"]}
bpb = {}
for name, (model, encode, token_bytes, start) in models.items():
    nats, targets = summed_nats(model, encode(val_text), start=start)
    n_bytes = sum(token_bytes(t) for t in targets.tolist())
    bpb[name] = dict(per_token=nats / len(targets), tokens=len(targets), bytes=n_bytes,
                     bpb=bits_per_byte(nats, n_bytes))

# %%
print(f"{'model':<17}{'bits/byte':>11}{'nats/token':>12}{'tokens':>8}{'bytes':>8}")
for name, r in bpb.items():
    print(f"{name:<17}{r['bpb']:>11.3f}{r['per_token']:>12.3f}"
          f"{r['tokens']:>8,}{r['bytes']:>8,}")
print(f"\n{'model':<17}{'parameters':>12}{'steps':>7}")
for name in bpb:
    print(f"{name:<17}{models[name][0].num_parameters():>12,}{steps[name]:>7,}")

# %% tags=["remove-input"]
bpb_text, _ = prose.bpb_text(bpb)
display(Markdown(bpb_text + " " + prose.offline_bpb_text(bpb, steps,
                                                        offline_info["corpus_vocab"])))

# %% [markdown]
# ## 11.2 Multiple choice by likelihood
#
# A language model can answer a multiple-choice question without being taught the format:
# put each answer after the question and ask how probable the model finds it. The answer's
# log-probability is the sum of its tokens' log-probabilities, each given everything before
# it. Three rules turn those sums into a pick:
#
# - `acc`: the highest sum;
# - `acc_norm`: the highest sum *per character* of the answer (lm-evaluation-harness's
#   definition, which it calls `acc_norm`);
# - `acc_token`: the highest sum *per token*, the rule of build-nanogpt's HellaSwag script
#   {cite}`karpathy2024buildnanogpt` (which also calls it `acc_norm`).
#
# Per character, the rule means the same for every tokenizer; per token it does not, since the
# same answer is a few tokens for one model and many for another. `score_choices` encodes each
# pair as the harness does (`encode_pair`: the context and the answer encoded together,
# trailing spaces moved to the answer), truncates long contexts on the left as it does, and
# returns the sums with both lengths. `tests/test_evaluate.py` runs lm-evaluation-harness
# itself, on a local task file and a random GPT-2 whose weights the book's `GPT` loads: every
# choice's log-likelihood and every item's `acc` and `acc_norm` come out the same.
#
# One item, by hand, on the character model and on the BPE model's tokens:

# %% tags=["nbval-check-output"]
item = MultipleChoice("ROMEO:\nBut, soft! what light through yonder window",
                      ["breaks", "sings", "is it"], 0)
print(f"context: {item.context!r}")
for label, encode in (("characters", char_tok.encode),
                      ("GPT-2 tokens", encoding.encode_ordinary)):
    print(f"{label}: how many context ids, the continuation's ids")
    for c in item.choices:
        ctx, cont = encode_pair(encode, item.context, " " + c)
        print(f"  {c!r:<9}{len(ctx):>3}  {cont}")

# %%
one = score_choices(char_model, char_tok.encode, [item])
print(f"{'choice':<10}{'log p':>9}{'chars':>7}{'tokens':>8}{'per char':>10}"
      f"{'per token':>11}")
for j, c in enumerate(item.choices):
    ll = one.loglik[0, j].item()
    n_c, n_t = one.n_chars[0, j].item(), one.n_tokens[0, j].item()
    print(f"{c!r:<10}{ll:>9.2f}{n_c:>7.0f}{n_t:>8.0f}{ll / n_c:>10.2f}{ll / n_t:>11.2f}")
print("picks:", {rule: item.choices[one.picks(rule).item()] for rule in prose.RULES})

# %% [markdown]
# Even on characters, `acc_norm` and `acc_token` are two rules: the continuation starts with
# the space before the answer, one token more than the answer's characters.
#
# ## 11.3 Two tests from the validation split
#
# **Which line continues this speech?** The context is the start of a speech of the
# validation split, its speaker line first; the right answer is the speech's next line, the
# three others are lines of other speeches, each the same length as the right one to within
# two characters, so that no rule can win by liking short or long lines. **Which word ends
# this line?** The context runs up to a line's last word; the answer is that word, the
# distractors the last words of lines of three other speeches, of exactly its length. A
# right answer is a word as it occurs, a common word as often as it ends a line; so are the
# distractors, drawn in proportion to how often each word ends a line of the split (an item
# whose four words are not all different is drawn again from another line). Right answers and
# distractors then come from one distribution, and a rule that reads only the choices (*the
# most frequent word*, say) is right one time in four on average. Both tests are drawn with
# one seed, the answer's place at random, in five draws that share no speech:

# %% tags=["nbval-check-output"]
line_sets = next_line_sets(text, DRAWS, NextLineSettings(n_items=LINE_ITEMS))
word_sets = last_word_sets(text, DRAWS, n_items=WORD_ITEMS)
for name, sets in (("which line continues", line_sets), ("which word ends", word_sets)):
    first = sets[0][0]
    print(f"--- {name}: {DRAWS} draws of {len(sets[0])} items; draw 0, item 0:")
    print(first.context[-90:])
    for j, c in enumerate(first.choices):
        print(f"  {'*' if j == first.gold else ' '} {c}")

# %% [markdown]
# Three baselines read no context. A guess is right one time in four. *The most frequent
# word* picks, on the word test, the choice that occurs most often in the training split.
# The bigram table of {ref}`ch-training` (counted on the training split) reads only the
# character before each one it predicts: it knows which lines *look* like Shakespeare, and
# which words are common, nothing of what came before. A model that reads its context must
# beat all three. Every model scores every draw (the character-level ones on characters, the
# others on GPT-2's tokens), under the three rules:

# %%
bigram = BigramTable(char_train, char_tok.vocab_size)
readers = {"bigram table": (bigram, char_tok.encode, [])} | {
    name: (m, encode, start) for name, (m, encode, _, start) in models.items()}
tasks = {"which line continues": (line_sets, DELIMITER),
         "which word ends": (word_sets, " ")}
results = {task: {name: {rule: [] for rule in prose.RULES} for name in readers}
           for task in tasks}
for task, (sets, delimiter) in tasks.items():
    for items in sets:
        for name, (model, encode, start) in readers.items():
            scores = score_choices(model, encode, items, delimiter, start=start)
            for rule in prose.RULES:
                results[task][name][rule].append(scores.accuracy(rule))

# %%
counts = word_counts(text)
frequent = [frequency_accuracy(items, counts) for items in word_sets]
results["which word ends"] = {"most frequent word": {rule: frequent for rule in prose.RULES}
                              } | results["which word ends"]
CHANCE = 1 / 4
for task, rows in results.items():
    print(f"--- {task} (accuracy in %, mean ± standard error over {DRAWS} draws)")
    print(f"{'':<18}" + "".join(f"{rule:>13}" for rule in prose.RULES))
    print(f"{'a guess':<18}" + f"{100 * CHANCE:>13.1f}" * len(prose.RULES))
    for name, r in rows.items():
        cells = [prose.mean_se(r[rule]) for rule in prose.RULES]
        print(f"{name:<18}"
              + "".join(f"{100 * m:>7.1f} ± {100 * s:>3.1f}" for m, s in cells))

# %% tags=["remove-input"]
word = results["which word ends"]
found = [prose.above_chance("the character model", word["character model"]["acc_norm"],
                            CHANCE, "acc_norm", "which word ends"),
         prose.beats("the character model", word["character model"],
                     word["most frequent word"], "acc_norm", "the most frequent word",
                     "which word ends"),
         prose.beats("the character model", word["character model"], word["bigram table"],
                     "acc_norm", "the bigram table", "which word ends"),
         prose.beats("the offline model", word["offline model"], word["character model"],
                     "acc_norm", "the character model", "which word ends")]
r = bpb["BPE model"]
display(Markdown(prose.context_free_text(word, CHANCE) + " "
                 + " ".join(f.text for f in found) + " "
                 + prose.next_line_text(results["which line continues"], CHANCE,
                                        r["bytes"] / r["tokens"])))

# %% mystnb={"figure": {"caption": "Accuracy of each model on the two tests (acc_norm), mean and one standard error over the draws; the dashed line is a guess.", "name": "fig-measuring-tests"}, "image": {"alt": "Grouped bars: for each test, the accuracy of the bigram table and of the three language models, with error bars, and a dashed line for a guess."}}
fig, ax = plt.subplots(figsize=(5.2, 3.8))
width = 0.8 / len(readers)
for k, name in enumerate(readers):
    stats = [prose.mean_se(results[task][name]["acc_norm"]) for task in tasks]
    ax.bar([i + k * width for i in range(len(tasks))], [100 * m for m, _ in stats], width,
           yerr=[100 * s for _, s in stats], capsize=3, label=name)
ax.axhline(100 * CHANCE, ls="--", color="grey", label="a guess")
ax.set(xticks=[i + width * (len(readers) - 1) / 2 for i in range(len(tasks))],
       xticklabels=list(tasks), ylabel="acc_norm (%)", title="Two tests from the play")
ax.legend(loc="upper left")
plt.show()

# %% [markdown]
# ### Why the rules disagree: answers of different lengths
#
# With length-matched choices the three rules mostly agree. Draw the distractors of *which word
# ends this line* from last words of any length instead, and count how often each rule picks
# the shortest choice:

# %%
short = {"acc": [], "acc_norm": [], "gold": []}
for items in last_word_sets(text, DRAWS, n_items=WORD_ITEMS, tolerance=20):  # any length
    s = score_choices(char_model, char_tok.encode, items, " ")
    shortest = s.n_chars.argmin(dim=1)  # (N,)
    for rule in ("acc", "acc_norm"):
        short[rule].append((s.picks(rule) == shortest).float().mean().item())
    short["gold"].append((s.gold == shortest).float().mean().item())
print("share of picks that are the shortest choice:",
      {k: f"{100 * prose.mean_se(v)[0]:.1f}%" for k, v in short.items()})

# %% tags=["remove-input"]
prefers_short = prose.beats("acc", {"share": short["acc"]}, {"share": short["acc_norm"]},
                            "share", "acc_norm", "picking the shortest choice")
display(Markdown(prose.shortest_text(short)))

# %% [markdown]
# ## 11.4 Online: GPT-2 small on HellaSwag
#
# HellaSwag {cite}`zellers2019hellaswag` asks for the most plausible ending of a short
# description of an activity, among four written to fool models of its time. GPT-2 small has
# two published scores on its validation split, 0.2955 from build-nanogpt's script and 0.3114
# from lm-evaluation-harness {cite}`karpathy2024buildnanogpt`. The model and the items are
# the same; the readings differ twice. build-nanogpt scores the raw context and endings and
# picks the lowest loss *per token*; the harness cleans the text (drops WikiHow's bracketed
# markers), puts the activity's label in front of the context (`"Baking cookies: A
# woman..."`) and picks the highest log-likelihood *per character*. Where GPT-2's weights
# can be downloaded (Colab), the next cell scores both readings under both rules, so that each
# change is measured alone (the whole split on a GPU, its first 200 items on a CPU):

# %%
hellaswag, why_not = None, None
try:
    gpt2 = from_pretrained("gpt2")
    rows = hellaswag_rows()  # downloaded once into the cache
except WeightsUnavailableError:  # offline, as Chapters 8 and 9 find out
    why_not = "GPT-2's weights cannot be downloaded"
except OSError as err:  # the weights came, the items did not
    why_not = f"HellaSwag's items could not be downloaded: {err}"
if why_not is None:
    rows = rows if default_device() == "cuda" else rows[:200]
    gpt2.to(default_device())
    hellaswag = {}
    for reading in ("nanogpt", "harness"):
        items = hellaswag_items(rows, reading)
        hellaswag[reading] = score_choices(gpt2, encoding.encode_ordinary, items)
    print(f"{'reading of the text':<22}" + "".join(f"{rule:>11}" for rule in prose.RULES))
    for reading, scores in hellaswag.items():
        print(f"{reading:<22}"
              + "".join(f"{scores.accuracy(r):>11.4f}" for r in prose.RULES))
    print(f"({len(rows):,} items)")

# %% tags=["remove-input"]
display(Markdown(prose.hellaswag_text(why_not, hellaswag)))

# %% [markdown]
# The lesson for reading a leaderboard: a score is a model, a rule and a way of writing the
# items. Compare two scores only when the rule and the items are the same.
#
# ## Summary
#
# - Losses per token compare models with the same tokenizer only. Bits per byte (the summed
#   loss in bits over the bytes of the text) put every tokenizer on one scale.
# - A language model answers multiple choice by likelihood. `acc` sums the answer's
#   log-probabilities and prefers short answers; `acc_norm` divides by the answer's characters
#   and means the same for every tokenizer; per-token normalisation depends on the tokenizer.
#   Ours equals lm-evaluation-harness's on the same weights and items.
# - A score means something beside its baselines and its noise: a guess, the most frequent
#   word and a bigram table, which read no context, and several draws of the items with a
#   standard error. Distractors drawn as the right answers are (as they occur, of the same
#   length) leave those baselines at a guess.
# - Published numbers carry their rule: GPT-2 small on HellaSwag is 0.2955 or 0.3114 by the
#   rule and the reading of the text {cite}`karpathy2024buildnanogpt`.
#
# Time for the whole chapter on this machine:

# %%
print(f"{time.perf_counter() - started:.0f} s from the imports to here")

# %% tags=["remove-cell", "nbval-check-output"]
print(lessons.verdicts())

# %% [markdown]
# ## Exercises
#
# ### Exercise 1. `acc_norm` (implement)
#
# Write `acc_norm_picks(loglik, choices)`: for N items of C choices, `loglik` is an (N, C)
# tensor of summed log-probabilities and `choices` a list of N lists of C strings. Return the
# (N,) tensor of picked indices under the harness's `acc_norm`: the highest log-likelihood per
# character of the choice (without the delimiter), the first on ties.

# %% tags=["solution", "hide-input"] mystnb={"code_prompt_show": "Show the solution", "code_prompt_hide": "Hide the solution"}
def acc_norm_picks(loglik, choices):
    lengths = torch.tensor([[len(c) for c in row] for row in choices], dtype=loglik.dtype)
    return (loglik / lengths).argmax(dim=1)


# %%
from gpt_from_scratch.exercises import check_acc_norm

check_acc_norm(acc_norm_picks);

# %% [markdown]
# ### Exercise 2. Bits per byte from token losses (implement)
#
# Write `bits_per_byte_of(losses, token_bytes)`: `losses` is a (T,) tensor of per-token
# losses in nats, `token_bytes` a (T,) tensor of how many bytes each predicted token spells.
# Return the bits per byte as a Python float.

# %% tags=["solution", "hide-input"] mystnb={"code_prompt_show": "Show the solution", "code_prompt_hide": "Hide the solution"}
def bits_per_byte_of(losses, token_bytes):
    return (losses.sum() / (math.log(2) * token_bytes.sum())).item()


# %%
from gpt_from_scratch.exercises import check_bits_per_byte

check_bits_per_byte(bits_per_byte_of);

# %% [markdown]
# ### Exercise 3. A uniform guess (predict, then run)
#
# A model that gives every one of GPT-2's 50,257 tokens the same probability: predict its loss
# per token in nats and its bits per byte on the validation text of section 11.1. Then run the
# cell.

# %% [markdown] tags=["answer"]
# ```{admonition} Answer
# :class: dropdown
# Each token costs $\ln 50{,}257 \approx 10.8$ nats, or $\log_2 50{,}257 \approx 15.6$ bits.
# Spread over the bytes a GPT-2 token spells on this text (the table of section 11.1 gives
# tokens and bytes), that is a few bits per byte: worse than every trained model, and far less
# alarming than the per-token number.
# ```

# %%
r = bpb["BPE model"]
print(f"uniform over 50,257 tokens: {math.log(50_257):.2f} nats or "
      f"{math.log2(50_257):.2f} bits per token; "
      f"{r['bytes'] / r['tokens']:.2f} bytes per token here, so "
      f"{math.log2(50_257) * r['tokens'] / r['bytes']:.2f} bits per byte")

# %% [markdown]
# ### Exercise 4. A benchmark a bigram table passes (explain)
#
# Suppose that on some multiple-choice test the bigram table scored far above a guess. What
# would that say about the test, and how would you change the distractors to fix it?

# %% [markdown] tags=["answer"]
# ```{admonition} Answer
# :class: dropdown
# The bigram table reads no context: it only knows which character sequences are common. If
# it beats a guess, the right answers differ from the distractors in a way that needs no
# understanding of the question: they are more common words, better-formed lines, or of a
# length the rule favours. The test then partly measures that surface difference. This
# chapter's word test had that flaw in its first version: its right answers were words as
# they occur (common words often), its distractors distinct words (rare ones as often as
# common ones), and *the most frequent word* scored as well as the character model. Draw the
# distractors the way the answers are drawn (here: last words of lines, in proportion to how
# often they occur, of the same length), then check again that every context-free baseline
# is near a guess, as the table of section 11.3 does. The harness offers a rule for the same
# worry, `acc_mutual_info`: it subtracts each answer's log-probability *without* the context,
# so that an answer gains only what the context adds to it.
# ```

# %% [markdown] tags=["quiz"]
# ## Check yourself
#
# A few questions on this chapter, each answer with its explanation. The numbers in them
# are the ones this chapter printed.

# %% tags=["quiz", "remove-input"]
from gpt_from_scratch.book.quiz import Choice, MultipleChoice, Numeric, show_quiz

show_quiz([
    Numeric("How many bits per byte does the character model score on the validation text? "
            "(Two decimals.)", bpb["character model"]["bpb"], 0.006,
            "The summed loss in bits over the bytes of the same text as the other models."),
    Numeric("What share of \"which word ends this line\" does the character model get "
            "right under acc_norm? (Percent, one decimal.)",
            100 * prose.mean_se(word["character model"]["acc_norm"])[0], 0.06,
            "The mean over the draws of section 11.3."),
    MultipleChoice("Which rule depends on the tokenizer?", [
        Choice("acc_token, the log-likelihood per token", True,
               "Yes: the same answer is a different number of tokens for each tokenizer."),
        Choice("acc_norm, the log-likelihood per character", False,
               "No: the characters of an answer do not depend on the tokenizer."),
        Choice("acc, the summed log-likelihood", False,
               "No: the sum is the log-probability of the answer's text, the same "
               "event for every tokenizer (section 11.1); it does prefer short answers."),
    ]),
])
