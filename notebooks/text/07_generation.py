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
# (ch-generation)=
# # 7. Generating text
#
# A trained GPT ({ref}`ch-training`) does one thing: given a sequence, it returns a probability for every
# possible next token. Text comes from asking that question again and again, appending one token each time.
# How we pick the token from the probabilities matters as much as the model: always taking the most likely
# one gives dull, looping text, and sampling blindly from all of them lets in nonsense. This chapter covers
#
# 1. greedy decoding and sampling;
# 2. temperature, which sharpens or flattens the distribution;
# 3. top-k and top-p (nucleus) filtering, which cut off the unreliable tail;
# 4. the generation loop, samples from the book's two models, prompts of different lengths in one
#    batch (padding masks), and an interactive panel;
# 5. the KV cache: why it gives exactly the same tokens, what it costs in memory and what it saves in time.

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
import time

import matplotlib.pyplot as plt
import numpy as np
import torch
from IPython.display import Markdown, display
from torch.testing import assert_close

from gpt_from_scratch.checkpoint import load_checkpoint
from gpt_from_scratch.data import load_tiny_shakespeare, split_text
from gpt_from_scratch.generate import generate, top_k_filter, top_p_filter
from gpt_from_scratch.model import GPT, GPTConfig
from gpt_from_scratch.utils import seed_everything
from gpt_from_scratch.book.figure_text import book_figures
from gpt_from_scratch.book.lessons import verdicts
from gpt_from_scratch.book.recipes import book_model, book_model_path
from gpt_from_scratch.book.reference import ReferenceUnavailable, reference_run
from gpt_from_scratch.book.reference_prose import found_text
from gpt_from_scratch.book.samples import (
    SAMPLE_CHARS, SAMPLE_TEMPERATURE, almost_greedy_text, decoding_lessons, decoding_text,
    real_word_share, real_words_lesson, repeated_share, settings_text,
)

book_figures()  # sharp on high-density screens, each PNG records its smallest text
generator = seed_everything(1337)
FULL_RUN = False  # True on a GPU: the longer-trained BPE model; section 7.8 on CUDA

# %% [markdown]
# The book's character model, trained in {ref}`ch-training` (4 layers, 128 dimensions, a context of 64
# characters). `book_model` loads it from your cache folder, or trains it first (about two minutes on
# 2 CPU cores) if Chapter 6 has not run on this machine.

# %%
model, tokenizer = book_model("shakespeare-char")
T_max = model.config.context_length
print(f"{model.num_parameters():,} parameters, context {T_max} characters, "
      f"vocabulary {tokenizer.vocab_size}")

# %% [markdown]
# ## 7.1 One step: from logits to a token
#
# Give the model a context and keep the logits of the last position: 65 scores, one per character. The
# softmax turns them into probabilities. Here is what the model expects after a line of *Romeo and Juliet*:

# %%
context = "ROMEO:\nBut soft, what light through yonder window breaks?\nIt is the "
idx = torch.tensor([tokenizer.encode(context)])  # (1, T)
with torch.no_grad():
    logits, _ = model(idx[:, -T_max:])  # (1, T, V)
last = logits[0, -1]  # (V,): scores for the character after "It is the "
probs = torch.softmax(last, dim=-1)  # (V,)
top = torch.topk(probs, 10)
pairs = zip(top.values.tolist(), top.indices.tolist())
print(" ".join(f"{tokenizer.decode([i])!r}:{p:.2f}" for p, i in pairs))

# %% [markdown]
# Two ways to choose. **Greedy** decoding takes the most likely token, here the top of that list, every time. It
# is deterministic, and it is a poor writer: the most likely *next character* is not the most likely *text*,
# and once a phrase repeats, the repetition becomes the most likely continuation.
# **Sampling** draws the next token at random with these probabilities: every plausible continuation gets
# its chance in proportion to how plausible it is. A `torch.Generator` with a fixed seed makes the draw
# repeatable.

# %%
prompt = torch.tensor([tokenizer.encode("ROMEO:\n")])  # (1, T)
greedy = generate(model, prompt, 250, greedy=True)
sampled = generate(model, prompt, 250, generator=torch.Generator().manual_seed(1))
print("--- greedy ---")
print(tokenizer.decode(greedy[0].tolist()))
print("--- sampled ---")
print(tokenizer.decode(sampled[0].tolist()))

# %% [markdown]
# Greedy decoding falls into a loop within a line or two and never gets out. The sample keeps moving: mostly
# real words, some invented ones, and the shape of a play, with a name in capitals on its own line followed by a
# colon, short lines and punctuation (the end of section 7.5 measures both). A character model at this loss has
# learned spelling, common words and layout, not meaning. The rest of the chapter is about sampling well.
#
# ## 7.2 Temperature
#
# Dividing the logits by a **temperature** $\tau$ before the softmax reshapes the distribution without
# changing the order of the tokens:
#
# $$p_i(\tau) = \frac{e^{z_i/\tau}}{\sum_j e^{z_j/\tau}} .$$
#
# $\tau < 1$ stretches the gaps between the logits: the likely tokens get likelier. $\tau > 1$ shrinks them
# towards a uniform distribution. As $\tau \to 0$ all the probability goes to the top token (greedy decoding);
# as $\tau \to \infty$ every token gets $1/V$. The entropy $H = -\sum_i p_i \ln p_i$ measures the spread.

# %% tags=["nbval-check-output"] tolerance={"rel": 0.26, "why": "measured over PyTorch's AVX-512, AVX2 and portable kernels with 1, 2 and 4 threads, each model trained under that arithmetic (scripts/arithmetic_spread.py): at most 17% (a top token of 0.15 against 0.18, AVX-512 with 1 thread)"}
temperatures = (0.5, 1.0, 2.0)
tempered = {t: torch.softmax(last / t, dim=-1) for t in temperatures}  # each (V,)
for t, p in tempered.items():
    entropy = -(p * p.log()).sum().item()
    print(f"temperature {t}: top token {p.max():.2f}, entropy {entropy:.2f} nats "
          f"(uniform over 65: {np.log(65):.2f})")

# %% mystnb={"figure": {"caption": "The model's next-character probabilities after “It is the␣” (␣ is the space) at temperatures 0.5, 1 and 2, for the 15 characters most likely at temperature 1.", "name": "fig-generation-temperature"}, "image": {"alt": "Three bar charts, one above the other, over the same 15 characters, t, s, m, a and so on. At temperature 0.5 the bar for t reaches about 0.23, well above the next one at about 0.13; at temperature 1 the bars decrease gradually from about 0.11; at temperature 2 they are nearly even, all between about 0.03 and 0.06."}}
order = torch.argsort(probs, descending=True)[:15]
labels = [repr(tokenizer.decode([i]))[1:-1] or "?" for i in order.tolist()]
fig, axes = plt.subplots(3, 1, figsize=(5.2, 8), sharex=True, sharey=True)
for ax, (t, p) in zip(axes, tempered.items()):
    ax.bar(range(15), p[order].numpy())
    ax.set_xticks(range(15), labels)
    ax.set(title=f"temperature {t}", ylabel="probability")
axes[-1].set_xlabel("next character")
plt.show()

# %% [markdown]
# ## 7.3 Top-k
#
# Even a good model gives every token some probability, and with 65 characters (or 50,257 BPE tokens) the
# many unlikely ones add up: sample long enough and one of them gets drawn, a typo that the model then has to
# live with. **Top-k** keeps only the $k$ most likely tokens: the others get a logit of $-\infty$, so the
# softmax gives them exactly 0 and spreads their probability over the survivors.

# %%
def top_k_by_hand(logits, k):
    kth_largest = torch.topk(logits, k, dim=-1).values[..., -1:]  # (..., 1)
    return logits.masked_fill(logits < kth_largest, float("-inf"))


random_logits = torch.randn(4, 100, generator=torch.Generator().manual_seed(0))
for k in (1, 5, 50, 100):
    assert_close(top_k_by_hand(random_logits, k), top_k_filter(random_logits, k))
assert_close(top_k_by_hand(last, 10), top_k_filter(last, 10))
print("top_k_by_hand equals gpt_from_scratch.generate.top_k_filter")

# %% [markdown]
# The package's `top_k_filter` also checks its input (`k` must be an integer $\ge 1$) and keeps every token
# tied with the $k$-th largest logit, the convention of nanoGPT and Hugging Face. Its weakness is that $k$ is
# the same everywhere. After “It is the␣” many characters are plausible; in the middle of a word, often only
# one is. A fixed $k$ is too many in the second case and maybe too few in the first.
#
# ## 7.4 Top-p (nucleus) sampling
#
# **Top-p** {cite}`holtzman2020curious` adapts: sort the tokens from most to least likely and keep the
# smallest set whose probabilities add up to at least $p$ (the *nucleus*). A confident prediction keeps one
# or two tokens; an uncertain one keeps many. The most likely token is always kept, so the set is never empty.

# %%
def top_p_by_hand(logits, p):
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)  # (..., V)
    sorted_probs = torch.softmax(sorted_logits, dim=-1)
    # The probability of the tokens ranked above each token:
    mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
    remove = mass_before >= p  # the tokens ranked above already reach p
    # Back to vocabulary order:
    remove_in_place = torch.zeros_like(remove).scatter(-1, order, remove)
    return logits.masked_fill(remove_in_place, float("-inf"))


for p in (0.1, 0.5, 0.9, 1.0):
    assert_close(top_p_by_hand(random_logits, p), top_p_filter(random_logits, p))
print("top_p_by_hand equals gpt_from_scratch.generate.top_p_filter")

# %% [markdown]
# (The package's `top_p_filter` differs in one detail: it also keeps every token exactly as likely as the last
# one kept, so that the result never depends on how the sort orders ties.)
#
# Compare two contexts: the one above, and one where the next character is all but certain (after "What say",
# a space).

# %%
contexts = {"after 'It is the '": context,
            "after 'What say'": "KING RICHARD III:\nWhat say"}
cumulative, nucleus, top = {}, {}, {}
for name, text in contexts.items():
    with torch.no_grad():
        z = model(torch.tensor([tokenizer.encode(text)])[:, -T_max:])[0][0, -1]  # (V,)
    sorted_probs = torch.sort(torch.softmax(z, dim=-1), descending=True).values
    cumulative[name] = torch.cumsum(sorted_probs, dim=0)
    kept = {p: int((top_p_filter(z, p) > float("-inf")).sum()) for p in (0.5, 0.9, 0.99)}
    top_char = tokenizer.decode([int(z.argmax())])
    nucleus[name], top[name] = kept[0.9], (top_char, sorted_probs[0].item())
    print(f"{name}: top token {top_char!r} with {sorted_probs[0]:.2f}; "
          "tokens kept at p = 0.5, 0.9, 0.99: "
          f"{kept[0.5]}, {kept[0.9]}, {kept[0.99]}")

# %% mystnb={"figure": {"caption": "Cumulative probability of the next character, most likely first, for two contexts. Top-p with p = 0.9 keeps the characters up to where each curve crosses the dashed line.", "name": "fig-generation-top-p"}, "image": {"alt": "Two rising step curves against the rank of the character, from 1 to 30. The curve for the context ending in 'What say' starts high and crosses the dashed line at 0.9 within the first few ranks. The curve for the context ending in a space starts low, rises gradually and crosses 0.9 much later."}}
fig, ax = plt.subplots(figsize=(5.2, 3.8))
for name, c in cumulative.items():
    ax.step(range(1, 31), c[:30].numpy(), where="mid", marker=".", label=name)
ax.axhline(0.9, color="gray", linestyle="--", linewidth=1, label="p = 0.9")
ax.set(xlabel="rank of the next character (most likely first)",
       ylabel="cumulative probability",
       title="Top-p keeps as many tokens as the model needs", ylim=(0, 1.02))
ax.legend()
plt.show()

# %% tags=["remove-input"]
(wide, n_wide), (sure, n_sure) = nucleus.items()
k = 10
cut = (f"cut off {n_wide - k} plausible continuations in the first case" if n_wide > k else
       f"keep {k - n_wide} more than the nucleus in the first case")
extra = (f"let in {k - n_sure} extra long shots in the second" if n_sure < k else
         f"cut off {n_sure - k} in the second")
(c_wide, p_wide), (c_sure, p_sure) = top[wide], top[sure]
# The top character as the figures show it: a space is ␣, a newline ↵ (never ' ').
top_char = c_sure.replace(" ", "␣").replace("\n", "↵")
Markdown(f"After “It is the␣” the most likely character has probability {p_wide:.2f} "
         f"and the nucleus of *p* = 0.9 holds {n_wide} characters. After \"What say\" "
         f"the model puts {p_sure:.2f} on “{top_char}” and {n_sure} characters reach 0.9. "
         f"A fixed top-k of {k} would {cut} and {extra}; top-p follows the model's own "
         "confidence.")

# %% [markdown]
# Both filters can be combined: the package applies temperature, then top-k, then top-p, the order
# Hugging Face uses.
#
# ## 7.5 The generation loop
#
# Putting it together: crop the sequence to the last `context_length` tokens (the model has no positions
# beyond that), run the model, keep the last position's logits, apply temperature, top-k and top-p, sample,
# append, repeat.

# %%
@torch.no_grad()
def generate_by_hand(model, idx, max_new_tokens, temperature=1.0, top_k=None, top_p=None,
                     generator=None):
    model.eval()
    for _ in range(max_new_tokens):
        logits, _ = model(idx[:, -model.config.context_length:])  # (B, T, V)
        # (B, V): only the last position predicts the next token
        logits = logits[:, -1, :] / temperature
        if top_k is not None:
            logits = top_k_filter(logits, top_k)
        if top_p is not None:
            logits = top_p_filter(logits, top_p)
        probs = torch.softmax(logits, dim=-1)  # (B, V)
        next_token = torch.multinomial(probs, num_samples=1, generator=generator)  # (B, 1)
        idx = torch.cat([idx, next_token], dim=1)  # (B, T + 1)
    return idx


settings = dict(temperature=0.8, top_k=20, top_p=0.95)
by_hand = generate_by_hand(model, prompt, 100, generator=torch.Generator().manual_seed(2),
                           **settings)
package = generate(model, prompt, 100, use_cache=False,
                   generator=torch.Generator().manual_seed(2), **settings)
assert torch.equal(by_hand, package)
print("generate_by_hand and gpt_from_scratch.generate (use_cache=False) "
      "give the same 100 characters")

# %% [markdown]
# The package's `generate` adds input checks (a temperature $\le 0$, $k < 1$ or $p$ outside $(0, 1]$ raise an
# error that says what to pass instead), a `greedy` switch, and the KV cache of section 7.7, on by default.
# It puts the model in evaluation mode (no dropout) for the call and restores the mode afterwards.
#
# Here are samples with a few settings, from the same prompt and seed:

# %%
settings = {}
for options in ({"temperature": 0.5}, {"temperature": 1.0}, {"temperature": 1.5},
                {"temperature": 1.0, "top_k": 5}, {"temperature": 1.0, "top_p": 0.8}):
    g = torch.Generator().manual_seed(3)
    out = generate(model, prompt, 150, generator=g, **options)
    print(f"--- {options} ---")
    name = " ".join(f"{k.replace('_', '-')} {v:g}" for k, v in options.items())
    settings[name.removeprefix("temperature 1 ")] = tokenizer.decode(
        out[0, prompt.size(1):].tolist())
    print(settings[name.removeprefix("temperature 1 ")])

# %% [markdown]
# All five use the same random numbers, so they start alike and drift apart. Scored as the longer
# samples are below (the share of their words that are words of the training text):

# %% tags=["remove-input"]
display(Markdown(settings_text(settings, 0.5, 1.5, split_text(load_tiny_shakespeare())[0])))

# %% [markdown]
# Settings around temperature 0.8 with top-p 0.9 to 0.95 are a common default.
#
# The BPE-level model of {ref}`ch-training` generates GPT-2 tokens, whole words or pieces of words at a time:

# %%
bpe_model, encoding = book_model("shakespeare-bpe", full=FULL_RUN)
bpe_ckpt = load_checkpoint(book_model_path("shakespeare-bpe", full=FULL_RUN))
bpe_loss = bpe_ckpt.history.best_val_loss  # the kept weights' (the best) validation loss
print(f"validation loss {bpe_loss:.2f} nats per token")
bpe_prompt = torch.tensor([encoding.encode("ROMEO:\n")])  # (1, T)
out = generate(bpe_model, bpe_prompt, 60, temperature=0.8, top_k=50,
               generator=torch.Generator().manual_seed(3))
print(encoding.decode(out[0].tolist()))

# %% [markdown]
# ### Scoring the samples
#
# How readable is a sample? A fair, repeatable proxy is the share of its words that are words of the
# training text (`real_word_share`; a sample's last word, maybe cut short, is left out): word soup
# scores low, the play's words high, whatever they mean. A loop scores high too, so beside it goes the
# share of words that end a run of three words the sample has already written (`repeated_share`). The
# character model's three ways of decoding, each as long as Chapter 6's samples, after the prompt of section 7.1,
# and the BPE model's sample above, scored:

# %%
train_text = split_text(load_tiny_shakespeare())[0]
decoded = lambda ids: tokenizer.decode(ids[0].tolist())  # noqa: E731
seeded = dict(generator=torch.Generator().manual_seed(1))
scored = {
    "character model, greedy": decoded(generate(model, prompt, SAMPLE_CHARS, greedy=True)),
    "character model, sampled": decoded(generate(model, prompt, SAMPLE_CHARS, **seeded)),
    "character model, tau = 0.8": decoded(generate(
        model, prompt, SAMPLE_CHARS, temperature=SAMPLE_TEMPERATURE,
        generator=torch.Generator().manual_seed(1))),
    "BPE model, sampled": encoding.decode(out[0].tolist()),
}
print(f"{'':<28}{'real words':>11}{'repeated':>10}")
for name, text in scored.items():
    print(f"{name:<28}{real_word_share(text, train_text):>11.0%}"
          f"{repeated_share(text):>10.0%}")

# %% tags=["remove-input"]
greedy_text, sampled_text, tempered_text, bpe_text = scored.values()
display(Markdown(decoding_text(greedy_text, sampled_text, tempered_text, SAMPLE_TEMPERATURE,
                               bpe_text, train_text)))

# %% [markdown]
# One sample per setting can be lucky. The lessons of this section are judged on more: the greedy text
# (there is only one), and five samples at temperature 0.8, the seed above and four others:

# %% tags=["remove-input"]
tempered = [tempered_text] + [decoded(generate(
    model, prompt, SAMPLE_CHARS, temperature=SAMPLE_TEMPERATURE,
    generator=torch.Generator().manual_seed(seed))) for seed in (2, 3, 4, 5)]
found = [real_words_lesson([real_word_share(t, train_text) for t in tempered],
                           f"the character model at temperature {SAMPLE_TEMPERATURE:g}"),
         *decoding_lessons(greedy_text, [sampled_text, *tempered]),
         real_words_lesson([real_word_share(bpe_text, train_text)], "the BPE model",
                           bar=0.60)]
display(Markdown(" ".join(x.text for x in found)))

# %% [markdown]
# ### The reference runs
#
# `make reference-runs` ({ref}`ch-training`) trains the book's full-size models on a GPU: nanoGPT's
# character model and a BPE model of its size. Where `reference_run` finds them (on this machine, or
# a published copy), the next cell decodes the character model greedily and by sampling, as above, and
# prints the BPE model's sample from its manifest, each with its share of real words.

# %%
try:
    ref_char = reference_run("shakespeare-char-full")
    ref_bpe = reference_run("shakespeare-bpe-full")
except ReferenceUnavailable as err:
    ref_char = ref_bpe = None
    print(err)

# %% tags=["remove-input"]
display(Markdown(found_text(
    {"shakespeare-char-full": ref_char, "shakespeare-bpe-full": ref_bpe},
    "their samples, scored as this chapter's")))

# %%
if ref_char is not None:
    ref_model = ref_char.model()
    for name, options in {"greedy": dict(greedy=True), "sampled": dict(
            generator=torch.Generator().manual_seed(1))}.items():
        text = tokenizer.decode(generate(ref_model, prompt, 250, **options)[0].tolist())
        print(f"--- reference character model, {name}: "
              f"{real_word_share(text, train_text):.0%} real words ---\n{text}")
    print(f"--- reference BPE model, sampled: {ref_bpe.info['real_words']:.0%} real words "
          f"---\n{ref_bpe.info['sample']}")

# %% [markdown]
# ### Prompts of different lengths in one batch: padding masks
#
# `generate` extends every row of a $(B, T)$ tensor, so all prompts must have the same length. Real prompts
# do not, and a tensor must be rectangular: the short ones are **padded** with a filler id. For generation
# the pads go on the **left**, so that every row's last column is its newest token, the one whose logits
# pick the next token. Two things then keep the pads from changing anything:
#
# - an **attention mask** (True = real token), combined with the causal mask, so no query reads a pad:
#   query $t$ of row $b$ may read key $s$ when $s \le t$ *and* $s$ is real. The mask becomes
#   $(B, 1, T, T)$, one per row, where the causal mask alone was one $(T, T)$ for all;
# - **position ids that skip the pads**: a prompt's first real token gets position 0, as it would alone,
#   instead of the index of its column.
#
# `gpt_from_scratch.padding` does both with the model's own modules (`padded_forward`), and
# `generate_padded` runs the loop. Three prompts for the character model, left-padded with id 0 (any id
# will do: the mask hides it), shown as `·`:

# %% tags=["nbval-check-output"]
from gpt_from_scratch.padding import generate_padded, left_pad, position_ids

texts = ["ROMEO:\n", "KING RICHARD III:\nWhat says", "JULIET:\nO Romeo"]
prompts = [tokenizer.encode(t) for t in texts]
padded, attention_mask = left_pad(prompts, pad_id=0)  # (B, T) each
print("idx:", tuple(padded.shape))
for row, real in zip(padded.tolist(), attention_mask.tolist()):
    shown = "".join(tokenizer.decode([i]) if r else "·" for i, r in zip(row, real))
    print(f"  {shown.replace(chr(10), '↵')}   mask: {''.join(str(int(r)) for r in real)}")
print("position ids of the last 8 columns:\n", position_ids(attention_mask)[:, -8:])

# %% [markdown]
# Greedy decoding of the three at once, checked against each prompt run alone through `generate`, and
# against the same padded batch fed to `generate`, which knows nothing of the mask or the positions:

# %%
n_new = 30
batched = generate_padded(model, prompts, n_new, greedy=True)  # one list of ids per prompt
alone = [generate(model, torch.tensor([p]), n_new, greedy=True)[0].tolist()
         for p in prompts]
unmasked = generate(model, padded, n_new, greedy=True)[:, padded.size(1):]  # (B, n_new)
for b, ids in enumerate(prompts):
    new_tokens = batched[b][len(ids):]
    print(f"prompt {b}: batch == alone: {batched[b] == alone[b]}; "
          f"unmasked == alone: {unmasked[b].tolist() == new_tokens}")
    print(f"  masked:   {tokenizer.decode(new_tokens)!r}")
    print(f"  unmasked: {tokenizer.decode(unmasked[b].tolist())!r}")

# %% [markdown]
# With the masks, every prompt gets exactly the tokens it gets alone. The longest prompt has no pads, so
# it is the same either way; the two padded prompts, fed without the masks, read the pads as text and
# start at the wrong positions, and their continuations change. The package's tests check
# `padded_forward` against Hugging Face's `GPT2LMHeadModel` given the same attention mask and position
# ids, and `generate_padded` against its `generate` with left padding.
#
# ## 7.6 Try it yourself
#
# In the HTML edition, the live model here is this chapter's model, Chapter 6's character
# model exported to ONNX (`python -m gpt_from_scratch.export`), running in your browser:
# ONNX Runtime Web, served by the book, loads when you press Run. Type a prompt, set the
# temperature (0 is greedy), top-k (0: all), top-p and a seed; the characters appear one
# by one, each with the probability it was drawn with (hover over it, or tap it).
# The sampler follows `generate`'s rules: top-k, then the temperature, then top-p, the
# window cropped to the newest 64 characters. Its random numbers come from a seeded
# generator of the page's own (mulberry32): a seed gives the same text on every run of the
# page, not the text of `torch.Generator().manual_seed(seed)`. The book's browser test
# checks that the page's logits are PyTorch's and that its greedy text is `generate`'s.
# **Load your own model** runs a checkpoint you trained, once exported.
#
# <div class="live-model" data-model="shakespeare-char" data-mode="generate"></div>
#
# In a running notebook, the panel below regenerates a sample whenever you move a slider (top-k 0 means no
# top-k; top-p 1 means no top-p). In the rendered book the sliders cannot run the model; the sample printed
# under the panel is the one for the default settings.

# %%
import ipywidgets as widgets


def sample_text(temperature=0.8, top_k=0, top_p=0.95, seed=1337, n=300):
    out = generate(model, prompt, n, temperature=temperature, top_k=top_k or None,
                   top_p=top_p if top_p < 1 else None,
                   generator=torch.Generator().manual_seed(seed))
    return tokenizer.decode(out[0].tolist())


sliders = {
    "temperature": widgets.FloatSlider(
        value=0.8, min=0.1, max=2.0, step=0.05, description="temperature"),
    "top_k": widgets.IntSlider(value=0, min=0, max=65, description="top-k"),
    "top_p": widgets.FloatSlider(
        value=0.95, min=0.05, max=1.0, step=0.05, description="top-p"),
    "seed": widgets.IntText(value=1337, description="seed"),
}
for s in sliders.values():
    s.continuous_update = False
panel_output = widgets.Output()


def regenerate(change=None):
    with panel_output:
        panel_output.clear_output(wait=True)
        print(sample_text(**{name: s.value for name, s in sliders.items()}))


for s in sliders.values():
    s.observe(regenerate, names="value")
controls = list(sliders.values())
display(widgets.VBox([widgets.HBox(controls[:2]), widgets.HBox(controls[2:]),
                      panel_output]))
print(sample_text())

# %% [markdown]
# The sliders above need the model; the explorer below does not. It holds the distribution
# `generate` samples from after “It is the␣”, computed here for every temperature and
# filter: the slider sets the temperature, the buttons pick top-k or top-p, and the last bar
# is every other character together. In the rendered book it works without a running
# notebook.

# %%
from gpt_from_scratch.book.interactive import Interactive, SamplingFilter, sampling_explorer
from gpt_from_scratch.book.plotting import token_labels

filters = [SamplingFilter("all"), SamplingFilter("top-k 3", top_k=3),
           SamplingFilter("top-k 10", top_k=10), SamplingFilter("top-p 0.5", top_p=0.5),
           SamplingFilter("top-p 0.9", top_p=0.9)]
temperatures = (0.1, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0)
explorer = sampling_explorer(last, token_labels(range(len(last)), tokenizer), temperatures,
                             filters, title="The next character after “It is the␣”")
Interactive(explorer, "(The interactive version of this figure is in the HTML edition.)")

# %% [markdown]
# ## 7.7 The KV cache
#
# The loop of section 7.5 is wasteful. To produce token 100 it runs the model on tokens 0 to 99; to produce
# token 101, on tokens 0 to 100, recomputing everything it computed a moment earlier. Only the new token is new.
#
# **Why the old work can be reused.** Inside each attention layer, token $t$ contributes a key $k_t$ and a
# value $v_t$ that depend only on tokens $0 \ldots t$ (the causal mask, {ref}`ch-attention`; its rows
# for new queries after $P$ cached positions are the `causal_mask(T, n_past=P)` of section 4.9), so
# appending tokens never changes them. To predict the next token, the model needs the new token's query, key and value
# in every layer, and the keys and values of all earlier positions, which it already computed. The **KV cache**
# {cite}`pope2023kvcache` stores them: one `KVCache` per layer holds the keys and values of shape
# $(B, H, P, d_k)$ of the $P$ positions seen so far, in buffers allocated ahead (appending with `torch.cat`
# would copy the whole cache at every step). A step then processes one token instead of $P + 1$. The result is
# the same computation, not an approximation:

# %% tags=["nbval-check-output"]
tokens = torch.tensor([tokenizer.encode(context)])[:, -T_max:]  # (1, T)
with torch.no_grad():
    full, _ = model(tokens)  # (1, T, V): every position from scratch
    cache = model.new_kv_cache()  # one empty KVCache per layer
    # All but the last token: fills the cache
    prefill, _ = model(tokens[:, :-1], kv_cache=cache)
    # (1, 1, V): the last token alone, at position T - 1
    step, _ = model(tokens[:, -1:], kv_cache=cache)
assert_close(step[:, -1], full[:, -1])
print(f"cached positions per layer: {len(cache[0])}; "
      f"keys of layer 0: {tuple(cache[0].keys.shape)} = (B, H, P, d_k)")
print(f"largest difference between the cached and the full logits: "
      f"{(step[:, -1] - full[:, -1]).abs().max():.1e}")

# %% [markdown]
# The difference is float rounding: the same sums, added in a different order. With the cache the generation
# loop becomes: run the prompt once (the **prefill**), then feed only the newest token each step.

# %%
@torch.no_grad()
def generate_cached_by_hand(model, idx, max_new_tokens, generator=None):
    """Sampling at temperature 1 with a KV cache, while the sequence fits in the context."""
    fits = idx.size(1) + max_new_tokens <= model.config.context_length
    assert fits, "see below for longer sequences"
    model.eval()
    cache = model.new_kv_cache()
    logits, _ = model(idx, kv_cache=cache)  # prefill: (B, T, V)
    for _ in range(max_new_tokens):
        probs = torch.softmax(logits[:, -1, :], dim=-1)  # (B, V)
        next_token = torch.multinomial(probs, num_samples=1, generator=generator)  # (B, 1)
        idx = torch.cat([idx, next_token], dim=1)
        logits, _ = model(next_token, kv_cache=cache)  # (B, 1, V): one new position
    return idx


short_prompt = prompt[:, :4]
cached = generate_cached_by_hand(
    model, short_prompt, 60, generator=torch.Generator().manual_seed(4))
uncached = generate(model, short_prompt, 60, use_cache=False,
                    generator=torch.Generator().manual_seed(4))
assert torch.equal(cached, uncached)
print("with and without the cache: the same 60 sampled characters")

# %% [markdown]
# **Past the context length.** Our model has learned position embeddings for positions 0 to 63 only. Once the
# sequence is longer, the loop of section 7.5 feeds the last 64 tokens, so at every step each token moves one
# position down and every key and value changes. No cached entry stays valid. `generate` therefore keeps the
# cache while the sequence fits; once the cache holds `context_length` positions it drops it and prefills the
# newest `context_length` tokens again, which is exactly what the slow path computes. So both paths give the
# same tokens at any length, and the cache saves work only up to the context length. (Models with relative
# positions, such as rotary embeddings, can instead keep a sliding window of cached keys.)

# %% tags=["nbval-check-output"]
for options in ({"greedy": True}, {"temperature": 0.9, "top_p": 0.9}):
    slow = generate(model, prompt, 200, use_cache=False,
                    generator=torch.Generator().manual_seed(5), **options)
    fast = generate(model, prompt, 200, use_cache=True,
                    generator=torch.Generator().manual_seed(5), **options)
    past = prompt.size(1) + 200 - T_max
    print(f"{options}: 200 tokens, {past} of them past the context, identical: "
          f"{torch.equal(slow, fast)}")

# %% [markdown]
# **Memory.** Each layer stores a key and a value vector of $H \times d_k = D$ numbers for each position of each
# sequence: $2 \cdot L \cdot B \cdot T \cdot D$ numbers in all. For our model after 64 positions:

# %% tags=["nbval-check-output"]
def kv_cache_bytes(n_layers, batch, positions, d_model, bytes_per_number=4):
    return 2 * n_layers * batch * positions * d_model * bytes_per_number


cache = model.new_kv_cache()
with torch.no_grad():
    model(torch.tensor([tokenizer.encode(context)])[:, -T_max:], kv_cache=cache)
measured = sum(c.keys.numel() * c.keys.element_size()
               + c.values.numel() * c.values.element_size() for c in cache)
c = model.config
formula = kv_cache_bytes(c.n_layers, 1, len(cache[0]), c.d_model)
print(f"measured {measured:,} bytes; formula {formula:,} bytes; "
      f"the weights take {model.num_parameters() * 4:,} bytes")
for name in ("gpt2", "gpt2-xl"):
    g = GPTConfig.from_preset(name)
    size = kv_cache_bytes(g.n_layers, 1, g.context_length, g.d_model)
    print(f"{name}: {size / 2**20:,.0f} MiB per sequence of {g.context_length} tokens "
          "in float32")

# %% [markdown]
# The formula and the measurement agree: 2 (keys and values) x 4 layers x 64 positions x 128 numbers x
# 4 bytes. For our small model that is a twelfth of the weights. For GPT-2 small with its full context it is
# 72 MiB per sequence, and 600 MiB for GPT-2 XL; multiply by the batch size. Serving many long sequences at
# once, the cache and not the weights fills a GPU's memory, which is what much of the engineering of fast
# inference is about {cite}`pope2023kvcache`.
#
# **Speed.** Within the context, a step without the cache processes all $P + 1$ tokens; with it, one. Our
# character model's context is only 64, so the saving is modest there. The gap grows with the context: below
# the same comparison runs on a model with a 512-token context (random weights: the speed does not depend on
# what the weights say), 192 new tokens after a 64-token prompt. These timings are shown, not checked; they
# depend on your machine and on what else it is doing.

# %%
def tokens_per_second(model, prompt, n, use_cache):
    generate(model, prompt, 4, greedy=True, use_cache=use_cache)  # warm-up
    start = time.perf_counter()
    generate(model, prompt, n, greedy=True, use_cache=use_cache)
    return n / (time.perf_counter() - start)


torch.manual_seed(0)
long_model = GPT(GPTConfig.from_preset("shakespeare-char", context_length=512)).eval()
long_prompt = torch.randint(65, (1, 64), generator=torch.Generator().manual_seed(6))
for name, m, p, n in (("book model, context 64", model, prompt, 56),
                      ("context-512 model", long_model, long_prompt, 192)):
    with_cache = tokens_per_second(m, p, n, True)
    without = tokens_per_second(m, p, n, False)
    print(f"{name}: {with_cache:,.0f} tokens/s with the cache, {without:,.0f} without "
          f"({with_cache / without:.1f}x)")

# %% [markdown]
# The cache wins more on the longer context. Without it, the step that produces token $P$ processes all $P$
# tokens, so $n$ new tokens cost work growing like $n^2$; with it, each step processes one token (attention
# still reads all $P$ cached keys, a small part of the work at these sizes). On a CPU and a small model the
# gain is smaller than the saving in arithmetic, because a one-token step spends much of its time in fixed
# per-call overheads. `benchmarks/bench_generate.py` measures a larger case against Hugging Face's `generate`.
#
# ## 7.8 Making training and generation fast
#
# Everything so far ran in float32, one operation at a time, as written. Where does a step's
# time go? To three things: **arithmetic** (the multiply-adds), **memory traffic** (reading
# and writing tensors), and **overhead** (launching each operation, waiting for a result).
# Making a model fast means finding which of the three dominates and removing it. On a GPU
# the arithmetic is cheap and the other two dominate; the techniques below each remove one
# of them, and `train` and `generate` use each on a GPU, or offer it as a setting.
#
# *Less overhead.*
#
# - **No waits for the GPU.** A GPU runs asynchronously: the CPU queues work and moves on
#   until it needs a value back. `loss.item()`, or an `if` on a tensor (such as `GPT.forward`'s
#   check that every token id is below $V$), makes it wait until the queue has run, and the
#   GPU idles meanwhile. `train` reads the losses back every `eval_interval` steps only and
#   checks each batch's ids on the host (`model.check_token_ids = False`); greedy `generate`
#   reads back once per call, not per token. `host_reads` counts these reads below.
# - **A static cache and CUDA graphs.** Decoding one token launches hundreds of small
#   kernels, each faster than the CPU can launch the next. `generate(..., compile=True)`
#   keeps keys and values in fixed-size buffers (`fast.StaticDecoder`), so every step has
#   the same shapes, and records the step once as a CUDA graph replayed with one launch.
#
# *Less memory traffic.*
#
# - **`torch.compile`** fuses a LayerNorm, a GELU or a residual addition into the kernels
#   around them, so they no longer each read and write the whole activation tensor
#   (`TrainConfig(compile=True)`). **Fused AdamW** updates every parameter in one kernel
#   (`make_optimizer` uses it on a GPU).
# - **Flash attention.** `F.scaled_dot_product_attention` (SDPA, Chapter 4) never writes the
#   $(T, T)$ score matrix to memory on a GPU: it computes attention in tiles kept on chip.
#
# *Cheaper arithmetic.*
#
# - **TF32 and bf16.** On recent NVIDIA GPUs, float32 products can run on the tensor cores
#   with a 10-bit mantissa (TF32): `train` turns it on for a GPU and back off when it
#   returns. `torch.autocast` runs the products in bfloat16 (float32's range, 7 bits of
#   mantissa), half the bytes too, while weights, optimizer and loss stay float32:
#   `TrainConfig(precision="bf16")`, or `"fp16"` with a gradient scaler on a GPU without
#   bfloat16 (Colab's T4); `"auto"` picks.
#
# The next cell measures what it can on this machine: one training step of the character
# model's shape with each setting (on a GPU, with `FULL_RUN = True` in the imports cell:
# nanoGPT's 6-layer, 384-dimension shape, and also the waits, TF32 and `torch.compile`). The
# settings take turns, one step each per round, so that a busy moment slows them alike.
# Timings are shown, not checked: they depend on the machine.

# %%
import pandas as pd

from gpt_from_scratch.allocator import reuse_freed_memory
from gpt_from_scratch.precision import resolve_precision
from gpt_from_scratch.utils import default_device
from gpt_from_scratch.book.speed_prose import (
    allocator_prose, bandwidth_prose, lesson_prose, speedups_prose,
)
from gpt_from_scratch.book.timing import (
    copy_bandwidth, decode_rate, host_reads, median_time, page_faults, step_time,
    step_times,
)

FAST_DEVICE = default_device() if FULL_RUN else "cpu"
# train's half precision there: bf16, or fp16 on a GPU that only emulates bf16 (a T4)
HALF = resolve_precision("auto", FAST_DEVICE) if FAST_DEVICE == "cuda" else "bf16"
if FAST_DEVICE == "cuda":
    torch.backends.cuda.matmul.allow_tf32 = False  # measured below: TF32 off, then on
gpu_shape = dict(context_length=256, d_model=384, n_layers=6, n_heads=6)
fast_config = GPTConfig.from_preset(
    "shakespeare-char", dropout=0.0, **(gpu_shape if FULL_RUN else {}))
torch.manual_seed(0)
fast_model = GPT(fast_config).to(FAST_DEVICE)
B = 64 if FULL_RUN else 8
x, y = torch.randint(65, (2, B, fast_config.context_length),
                     generator=torch.Generator().manual_seed(7)).to(FAST_DEVICE)
fast_model.check_token_ids = False  # as in train, which checks every batch on the host
times = step_times(fast_model, x, y, {  # in alternating rounds: noise hits all alike
    "base": {},
    "written out": dict(sdpa=False),  # attention written out: (T, T) scores materialized
    "fused": dict(fused=True),
    HALF: dict(precision=HALF)})
base = times["base"]
rows = {"SDPA attention": (times["written out"], base),
        "fused AdamW": (base, times["fused"]),
        f"{HALF} autocast": (base, times[HALF])}
if FAST_DEVICE == "cuda":
    fast_model.check_token_ids = True  # the model checks x and y: three waits per step
    rows["ids checked on the host"] = (step_time(fast_model, x, y), base)
    fast_model.check_token_ids = False
    torch.backends.cuda.matmul.allow_tf32 = True
    rows["TF32"] = (base, step_time(fast_model, x, y))
    rows[f"{HALF} + torch.compile"] = (
        base, step_time(torch.compile(fast_model), x, y, precision=HALF, fused=True))
table = {name: {"before (ms)": round(1e3 * a, 1), "after (ms)": round(1e3 * b, 1),
                "speed-up": round(a / b, 2)} for name, (a, b) in rows.items()}
print(f"one training step, batch {B} x {fast_config.context_length} tokens, {FAST_DEVICE}")
print(pd.DataFrame(table).T)

# %% tags=["remove-input"]
Markdown(speedups_prose(rows, FAST_DEVICE))

# %% [markdown]
# The waits, counted: `host_reads(fn)` runs `fn` and counts the values it reads back from its tensors,
# each a moment where a GPU's queue must drain before the CPU can go on.

# %% tags=["nbval-check-output"]
def forward_backward():
    _, loss = fast_model(x, y)  # one batch's loss, as train computes it
    loss.backward()


fast_model.check_token_ids = True  # the model checks x and y itself
reads = {"training step, model checks its ids": host_reads(forward_backward)}
fast_model.check_token_ids = False  # as in train: the batch was checked on the host
reads["training step, as train runs it"] = host_reads(forward_backward)
fast_model.zero_grad(set_to_none=True)
for n in (8, 32):
    reads[f"greedy generate, {n} new tokens"] = host_reads(
        lambda: generate(fast_model, x[:1, :16], n, greedy=True))
for what, count in reads.items():
    print(f"{what:38s} {count} reads back")

# %% [markdown]
# Memory traffic can hide outside PyTorch, too. Chapter 6's BPE model computes 50,257 logits
# at each of its 8 x 64 positions, 103 MB, and as much again for their log-softmax and each
# of their gradients. By default, Linux's C allocator returns every freed block that large to
# the operating system, which must then map and zero the same memory again at the next step,
# one *page fault* per 4 KiB page. `reuse_freed_memory()` keeps such blocks for the next step
# instead (Chapter 6 calls it before it trains). The next cell times a forward and backward
# pass of that shape, and counts its page faults, before and after the call.

# %%
big_vocab = GPT(GPTConfig.from_preset("shakespeare-char", vocab_size=50_257, dropout=0.0))
xv, yv = torch.randint(50_257, (2, 8, 64), generator=torch.Generator().manual_seed(10))


def big_vocab_pass():
    _, loss = big_vocab(xv, yv)  # logits (8, 64, 50,257): 103 MB
    loss.backward()


passes = {}
for when in ("before", "after"):
    if when == "after":
        reused = reuse_freed_memory()  # process-wide, for the rest of this session
    passes[when] = (median_time(big_vocab_pass, repeats=3), page_faults(big_vocab_pass))
    seconds, faults = passes[when]
    print(f"{when:6s} {1e3 * seconds:5.0f} ms a pass, {faults} page faults")
big_vocab.zero_grad(set_to_none=True)

# %% tags=["remove-input"]
Markdown(allocator_prose(passes, reused))

# %% [markdown]
# Generation next: 32 new tokens after a 64-token prompt, greedy, with the KV cache of Section 7.7, the
# static cache, and the static cache with the compiled step. The first compiled call pays for the
# compilation (seconds on a CPU); `decode_rate` times later calls. The tokens must not change.

# %%
fast_model.eval()
fast_prompt = torch.randint(65, (1, 64), generator=torch.Generator().manual_seed(8))
fast_prompt = fast_prompt.to(FAST_DEVICE)
n_new = 32
rates = {"KV cache": decode_rate(fast_model, fast_prompt, n_new),
         "static cache": decode_rate(fast_model, fast_prompt, n_new, static_cache=True),
         "compiled step": decode_rate(fast_model, fast_prompt, n_new, compile=True)}
for name, rate in rates.items():
    print(f"{name:14s} {rate:8,.0f} tokens/s")
same = torch.equal(generate(fast_model, fast_prompt, n_new, greedy=True),
                   generate(fast_model, fast_prompt, n_new, greedy=True, compile=True))
print(f"compiled step gives the same tokens: {same}")

# %% tags=["remove-input"]
per_token = {name: (1 / rates["KV cache"], 1 / rate) for name, rate in rates.items()
             if name != "KV cache"}
Markdown(speedups_prose(per_token, FAST_DEVICE))

# %% [markdown]
# How fast could decoding be? At batch 1, each new token needs every weight of the model once, and the
# arithmetic per weight is two operations, far less than a processor can do per byte it reads. So the
# speed limit is the memory bandwidth: tokens per second $\le$ bandwidth / bytes of weights. The next cell
# measures the bandwidth of a large copy and the decoding speed of GPT-2 small's shape (random weights,
# 124 million parameters), 8 tokens after 8.

# %%
gpt2_shape = GPT(GPTConfig(context_length=64, dropout=0.0)).to(FAST_DEVICE).eval()
bandwidth = copy_bandwidth(FAST_DEVICE)
small_prompt = torch.randint(50_257, (1, 8), generator=torch.Generator().manual_seed(9))
gpt2_rate = decode_rate(gpt2_shape, small_prompt.to(FAST_DEVICE), 8, repeats=1,
                        compile=FAST_DEVICE == "cuda")
n_weights = gpt2_shape.num_parameters()
print(f"copy bandwidth {bandwidth / 1e9:.1f} GB/s; GPT-2 small shape: {n_weights:,} "
      f"parameters, {gpt2_rate:.1f} tokens/s")
H100 = 3.35e12  # bytes/s: NVIDIA's specification for the H100 SXM's memory
print(f"the limit on an H100: {H100 / (4 * n_weights):,.0f} tokens/s in float32, "
      f"{H100 / (2 * n_weights):,.0f} in bf16")

# %% tags=["remove-input"]
Markdown(bandwidth_prose(n_weights, 4, bandwidth, gpt2_rate, FAST_DEVICE))

# %% [markdown]
# On an H100 the same arithmetic (the last line of the cell's output) allows thousands of tokens per second,
# twice as many in bf16, whose weights are half the bytes. An eager decoding loop on a GPU stays far below
# that limit: it is bound by kernel launches, not by memory, and CUDA graphs remove most of that overhead.
# `python -m benchmarks generate --device cuda` measures all of this on a GPU, against transformers'
# `generate`, and `python -m benchmarks train --device cuda` the training step against transformers'.

# %% tags=["remove-input"]
Markdown(lesson_prose({**rows, **per_token}, gpt2_rate,
                      bandwidth / (4 * n_weights), FAST_DEVICE))

# %% [markdown]
# ## Summary
#
# - A language model gives a distribution over the next token; generating text is choosing from it, one token
#   at a time, and appending.
# - **Greedy** decoding is deterministic and loops. **Sampling** is varied; a seeded `torch.Generator` makes
#   it reproducible.
# - **Temperature** divides the logits: below 1 sharper, above 1 flatter. **Top-k** keeps the $k$ most likely
#   tokens; **top-p** keeps the smallest set with probability at least $p$, so it adapts to the model's
#   confidence. Filtered tokens get $-\infty$, hence probability 0.
# - The **KV cache** stores every layer's keys and values: each step then processes one token instead of the
#   whole sequence, with the same result up to float rounding. It costs $2LBTD$ numbers of memory. With learned
#   absolute positions it is rebuilt when the window slides past the context length.
# - Prompts of different lengths share a batch when **padded on the left**, with an attention mask combined
#   with the causal mask and position ids that skip the pads: each prompt then gets exactly the tokens it
#   gets alone (section 7.5).
# - **Speed** (section 7.8): on a GPU, no waits for values read back, TF32, bf16 autocast (fp16 with a
#   gradient scaler on a T4), fused AdamW, flash attention, `torch.compile`, and CUDA graphs for decoding.
#   Each removes one of a step's three costs (overhead, memory traffic, arithmetic) and helps
#   only where that cost dominates: measure first. At batch 1, decoding is bound by memory:
#   tokens per second $\le$ bandwidth / bytes of weights.

# %% tags=["remove-cell", "nbval-check-output"]
print(verdicts())

# %% [markdown]
# ## Exercises
#
# ### Exercise 1. Min-p (implement)
#
# Min-p sampling keeps the tokens whose probability is at least a fraction `min_p` of the
# most probable token's: a cut-off that adapts to how sure the model is. Write
# `min_p_filter(logits, min_p)` for logits of shape $(V,)$ or $(B, V)$: keep, in each row,
# the entries whose probability is at least `min_p` times the row's largest probability, and
# set the others to $-\infty$.

# %% tags=["solution", "hide-input"] mystnb={"code_prompt_show": "Show the solution", "code_prompt_hide": "Hide the solution"}
def min_p_filter(logits, min_p):
    probs = torch.softmax(logits, dim=-1)  # (..., V)
    threshold = min_p * probs.max(dim=-1, keepdim=True).values  # (..., 1), relative
    return logits.masked_fill(probs < threshold, float("-inf"))


# %%
from gpt_from_scratch.exercises import check_min_p_filter

check_min_p_filter(min_p_filter);

# %% [markdown]
# ### Exercise 2. Top-p without sorting (implement)
#
# Section 7.4 sorts the probabilities to find the nucleus. Write `top_p_unsorted(logits, p)`
# without any sorting (`sort`, `argsort` and `topk` fail the check): a token is removed
# exactly when the tokens *more probable than it* already reach probability $p$. Compute
# that mass for every token at once by comparing the probabilities with each other
# (broadcasting a $(\ldots, V, V)$ comparison), then set the removed entries to $-\infty$.
# Logits are $(V,)$ or $(B, V)$, without ties.

# %% tags=["solution", "hide-input"] mystnb={"code_prompt_show": "Show the solution", "code_prompt_hide": "Hide the solution"}
def top_p_unsorted(logits, p):
    probs = torch.softmax(logits, dim=-1)  # (..., V)
    above = probs[..., None, :] > probs[..., :, None]  # (..., V, V): [i, j] = j beats i
    mass_above = (above * probs[..., None, :]).sum(dim=-1)  # (..., V)
    return logits.masked_fill(mass_above >= p, float("-inf"))


# %%
from gpt_from_scratch.exercises import check_top_p_filter

check_top_p_filter(top_p_unsorted, allow_sort=False);

# %% [markdown]
# ### Exercise 3. Almost greedy (predict, then run)
#
# Is sampling at temperature 0.01 the same as greedy decoding? Predict for the 250
# characters of section 7.1, then run the cell after the answer.

# %% [markdown] tags=["answer"]
# ```{admonition} Answer
# :class: dropdown
# Not necessarily, even when the cell prints `True`. At $\tau = 0.01$ the logits are
# multiplied by 100, so the runner-up keeps a probability of about $e^{-100\Delta}$, where
# $\Delta$ is its gap to the top logit. When every draw takes the top token the two texts
# agree; but once a near-tie comes up, one draw can go the other way, and everything after
# it differs.
# ```

# %%
cold = generate(model, prompt, 250, temperature=0.01,
                generator=torch.Generator().manual_seed(1))
differ = (cold != greedy)[0].nonzero()
print("identical to greedy:", torch.equal(cold, greedy),
      f"; first difference at position {int(differ[0])}" if len(differ) else "")

# %% tags=["remove-input"]
first = int(differ[0]) if len(differ) else None
there = None if first is None else model(
    greedy[:, max(0, first - model.config.context_length):first])[0][0, -1]  # (V,)
display(Markdown(almost_greedy_text(0.01, first, there)))

# %% [markdown]
# ### Exercise 4. The size of a KV cache (explain)
#
# Section 7.7 found 600 MiB of cache per 1,024-token sequence for GPT-2 XL in float32. (a)
# Serving it in bfloat16 (2 bytes per number, weights too: 1.56 billion parameters), how
# many full-length sequences can run at once before the cache is larger than the weights?
# (b) GPT-2 XL has 25 heads. A variant with *grouped-query attention* keeps 25 query heads
# but only 5 key and value heads, each shared by 5 query heads. What does that change in the
# cache, and in the formula of section 7.7?

# %% [markdown] tags=["answer"]
# ```{admonition} Answer
# :class: dropdown
# (a) In bfloat16 a sequence's cache is half of 600 MiB, 300 MiB; the weights take $1.56
# \times 10^9 \times 2$ bytes, about 2.9 GiB, just under ten such caches: nine sequences fit
# below the weights, and at ten the cache already outweighs the model. At serving batch
# sizes the cache, not the model, fills the memory. (b) Only the keys and values are stored,
# and now there are 5 heads of them instead of 25: the cache is five times smaller, 60 MiB
# per sequence in bfloat16. In the formula, $D$ (all the heads' keys side by side) becomes
# $5 \times d_k$, a fifth of $D$; the queries, computed afresh at every step, are untouched.
# Each group of 5 query heads reads the same keys and values, which costs some quality and
# buys batch size.
# ```

# %% [markdown]
# ### Exercise 5. Decoding and caches (explain)
#
# (a) Section 7.7 says that models with rotary position embeddings (section 2.5) can keep a
# sliding window of cached keys past the context, where GPT-2 must prefill again. What is it
# about rotary embeddings that allows this, and is the result then exactly what running the
# model on the last `context_length` tokens would give? (b) Top-k with $k = 1$ and top-p
# with a very small $p$ both reduce to which decoding method? (c) The package applies
# temperature before top-k and top-p. Does a temperature of 0.5 change which tokens top-k
# keeps? Which tokens top-p keeps?

# %% [markdown] tags=["answer"]
# ```{admonition} Answer
# :class: dropdown
# (a) With rotary embeddings nothing is added to the input: each layer rotates queries and
# keys by angles proportional to their positions, so a query-key score depends only on the
# offset between the two. When the window slides, the offsets between the kept tokens do not
# change, and neither does any cached key's relation to a new query (implementations store
# keys with their original angles and give new queries their true positions). It is not
# exactly the recomputed window, though: the cached keys and values of the upper layers were
# computed while tokens now out of the window were still visible, so they still carry a
# trace of them. (b) Greedy decoding (up to ties). (c) Top-k keeps the same tokens: dividing
# by $\tau$ never changes the order of the logits. Top-p keeps fewer, or as many: at $\tau =
# 0.5$ the likely tokens get likelier, so fewer of them reach the mass $p$.
# ```

# %% [markdown] tags=["quiz"]
# ## Check yourself
#
# A few questions on this chapter, each answer with its explanation. The numbers in them
# are the ones this chapter printed.

# %% tags=["quiz", "remove-input"]
from gpt_from_scratch.book.quiz import Choice, MultipleChoice, Numeric, show_quiz

show_quiz([
    Numeric("At temperature 1, what probability does the model give its most likely "
            "character after “It is the␣”? (Two decimals.)",
            torch.softmax(last, dim=-1).max().item(), 0.006,
            "A flat distribution: many characters can start the next word."),
    Numeric("After “It is the␣”, how many characters does top-p with p = 0.9 keep?",
            int((top_p_filter(last, 0.9) > float("-inf")).sum()), 0.5,
            "The nucleus follows the model's confidence: wide here."),
    MultipleChoice("As the temperature goes to 0, sampling becomes:", [
        Choice("greedy decoding: all the probability on the top token", True,
               "Yes: try temperature 0.1 in the explorer above."),
        Choice("uniform over the vocabulary", False,
               "No: that is the limit of a high temperature."),
    ]),
    MultipleChoice("In what order does the package apply the three settings?", [
        Choice("temperature, then top-k, then top-p", True, "Yes: Hugging Face's order."),
        Choice("top-p, then top-k, then temperature", False,
               "No: the temperature comes first."),
    ]),
])
