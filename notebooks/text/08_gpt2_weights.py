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
# (ch-gpt2-weights)=
# # 8. Real GPT-2 weights and what the heads attend to
#
# Chapters 1 to 7 built GPT-2 from its parts and trained a small one on Tiny Shakespeare.
# This chapter puts OpenAI's own GPT-2 small {cite}`radford2019language` into the same `GPT`
# class and looks inside:
#
# 1. counting its parameters from first principles;
# 2. loading the weights, or, without a network, a small model trained to have the same
#    kinds of heads;
# 3. proving that our `GPT` computes what transformers' `GPT2LMHeadModel` computes, on those
#    weights;
# 4. validation loss and generations, next to the model you trained in {ref}`ch-training`;
# 5. reading attention maps out of the model, and checking one by hand;
# 6. pronouns, and a classic probe of learned gender bias;
# 7. two kinds of heads that trained transformers are known for: attention sinks and
#    previous-token heads;
# 8. interactive views with bertviz {cite}`vig2019bertviz`.
#
# ```{note}
# **With or without a network.** GPT-2's weights download from the Hugging Face hub the
# first time (then they are cached). Where the hub cannot be reached, as on the machine that
# builds this book, section 8.2 says so within seconds and the chapter analyses *the offline
# model* instead: a small GPT on GPT-2's tokens, trained once, then cached. Whether it grows
# the heads this chapter looks for, each section measures. Every sentence about the analysed model is written
# from its numbers, and beside each analysis stands what GPT-2 small shows, measured
# elsewhere. Run the chapter in Colab to see GPT-2 itself.
# ```

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
import sys

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F
from IPython.display import Markdown, display
from torch.testing import assert_close

from gpt_from_scratch import heads
from gpt_from_scratch.allocator import reuse_freed_memory
from gpt_from_scratch.data import prepare_tokens, read_tokens
from gpt_from_scratch.generate import generate
from gpt_from_scratch.hf_weights import WeightsUnavailableError, from_hf, from_pretrained
from gpt_from_scratch.model import GPT, GPTConfig
from gpt_from_scratch.tokenizer import gpt2_encoding
from gpt_from_scratch.train import estimate_loss
from gpt_from_scratch.train_config import TrainConfig
from gpt_from_scratch.utils import seed_everything
from gpt_from_scratch.book import heads_prose as prose, induction
from gpt_from_scratch.book.figure_text import book_figures
from gpt_from_scratch.book.heads_plots import (
    attention_grid, attention_lines, compare_attention, head_scores_heatmap,
)
from gpt_from_scratch.book.lessons import verdicts
from gpt_from_scratch.book.offline_model import EOT, offline_model
from gpt_from_scratch.book.plotting import token_labels
from gpt_from_scratch.book.recipes import RECIPES, book_model
from gpt_from_scratch.book.reference import ReferenceUnavailable, reference_run
from gpt_from_scratch.book.reference_prose import found_text

book_figures()  # sharp on high-density screens, each PNG records its smallest text
generator = seed_everything(1337)
torch.set_printoptions(precision=3, sci_mode=False)
reuse_freed_memory()  # Linux: big freed tensors serve the next step (Section 7.8)
enc = gpt2_encoding()

# %% [markdown]
# ## 8.1 What we are about to load: GPT-2's parameters, counted by hand
#
# Every parameter of GPT-2 sits in a matrix or a vector whose shape follows from five sizes
# ({doc}`/book/notation`): the vocabulary $V$, the context $T_{\max}$, the width $D$, the
# number of blocks $L$ and the feed-forward width $d_{ff} = 4D$. A block holds
#
# - attention: `c_attn`, a $D \times 3D$ matrix and $3D$ biases (queries, keys and values at
#   once), and `c_proj`, $D \times D$ and $D$: together $4D^2 + 4D$;
# - the MLP: `c_fc`, $D \times 4D$ and $4D$, and `c_proj`, $4D \times D$ and $D$: together
#   $8D^2 + 5D$;
# - two LayerNorms, each a gain $\gamma$ and a shift $\beta$ of $D$ numbers: $4D$.
#
# That is $12D^2 + 13D$ per block. Around the blocks: the token and position embeddings,
# $VD + T_{\max}D$, and the final LayerNorm, $2D$. The output layer is tied to the token
# embedding {cite}`press2017tying`: it is the same matrix, so it adds nothing.

# %% tags=["nbval-check-output"]
def count_gpt_parameters(V: int, T_max: int, D: int, L: int, d_ff: int | None = None,
                         tied: bool = True) -> dict:
    """GPT-2's parameters by part, from the shapes of its matrices and vectors."""
    d_ff = 4 * D if d_ff is None else d_ff
    parts = {
        "token embeddings wte (V x D)": V * D,
        "position embeddings wpe (T_max x D)": T_max * D,
    }
    attention = (D * 3 * D + 3 * D) + (D * D + D)  # c_attn: D -> 3D (q, k, v)
    mlp = (D * d_ff + d_ff) + (d_ff * D + D)  # c_fc: D -> d_ff; c_proj: d_ff -> D
    layer_norms = 2 * 2 * D  # ln_1 and ln_2, each a gain and a shift of D numbers
    block = f"attention {attention:,} + MLP {mlp:,} + LayerNorms {layer_norms:,}"
    parts[f"{L} blocks x ({block})"] = L * (attention + mlp + layer_norms)
    parts["final LayerNorm ln_f (2 x D)"] = 2 * D
    parts["lm_head (D x V)"] = 0 if tied else V * D  # tied: it *is* wte, counted once
    return parts


def sizes(config: GPTConfig) -> tuple:
    """(V, T_max, D, L, d_ff) of a configuration."""
    c = config
    return c.vocab_size, c.context_length, c.d_model, c.n_layers, c.d_ff


gpt2_config = GPTConfig.from_preset("gpt2")
parts = count_gpt_parameters(*sizes(gpt2_config))
for name, n in parts.items():
    print(f"{n:>13,}  {name.split(' x (')[0]}")  # the blocks' sum; each block below
total = sum(parts.values())
untied = sum(count_gpt_parameters(*sizes(gpt2_config), tied=False).values())
print(f"{total:>13,}  total, head tied to wte (GPT-2)")
print(f"{untied:>13,}  total with an untied head")
block = next(name for name in parts if " x (" in name).split(" x (")[1].rstrip(")")
print(f"each block: {block}")
print(f"in float32: {total * 4 / 1e6:.1f} MB")

# %% [markdown]
# GPT-2 small holds 124,439,808 numbers, the "124M" of its usual name; an untied output
# layer would add another $V \times D$ = 38,597,376. To check the formula, build the models
# themselves on PyTorch's `meta` device, where tensors have shapes but no storage: even
# GPT-2 XL "builds" instantly and takes no memory.

# %% tags=["nbval-check-output"]
# The check: build each model on the "meta" device (shapes only, no memory), count what
# PyTorch holds.
for preset in ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl"):
    for tied in (True, False):
        config = GPTConfig.from_preset(preset, tie_weights=tied)
        with torch.device("meta"):
            shapes_only = GPT(config)
        by_formula = sum(count_gpt_parameters(*sizes(config), tied=tied).values())
        assert shapes_only.num_parameters() == by_formula, (preset, tied)
        print(f"{preset:<12} {'tied' if tied else 'untied':<7} {by_formula:>14,}")

# %% [markdown]
# The formula and PyTorch agree for all four sizes of the GPT-2 family, tied and untied.
# From now on, `model.num_parameters()` counts for us.
#
# ## 8.2 Loading GPT-2, or the offline model
#
# Section 5.8 of {ref}`ch-gpt` showed how OpenAI's checkpoint, as transformers stores it,
# maps onto our `GPT`: drop the `transformer.` prefix, rename `h.N` to `blocks.N`, transpose
# the four `Conv1D` matrices. `hf_weights.from_hf` does it for a model in memory, and
# `from_pretrained("gpt2")` for the hub's checkpoints: it looks in the local Hugging
# Face cache first, then asks the hub whether it answers at all (in at most 3 seconds)
# before downloading. When the weights can be neither found nor downloaded it raises
# `WeightsUnavailableError`, and this chapter turns to the offline model.
#
# The offline model is trained as Chapter 6 trains its models, on GPT-2's tokens of Tiny
# Shakespeare, with a size and training settings of its own (its recipe,
# `OFFLINE_RECIPES["shakespeare-bpe-heads"]`, is written out under the next cell). Two changes
# of method matter more. The first borrows GPT-2's document separator: every training window
# starts with `<|endoftext|>`, the token that separates the documents of GPT-2's training text
# (GPT-2's own windows were cut from that stream of documents, so not every one of them started
# with it). A token that opens every window and says nothing
# about what follows is where a trained head can park the attention it does not need;
# section 8.8 measures whether it does. The offline model reads every text of this chapter
# the same way, after an `<|endoftext|>`; GPT-2 reads them as they are, as in the published
# measurements. The second change buys training steps: Tiny Shakespeare's training text uses
# only about a fifth of GPT-2's 50,257 tokens, and a 50,257-way output layer spends almost
# all of a CPU's time scoring the others. The offline model (a `CorpusVocabGPT`, from
# `gpt_from_scratch.book.corpus_vocab`) learns only the tokens of its training text plus one
# `<unk>`, which stands for every other token, but it still reads and writes GPT-2's ids
# through a lookup table: a prompt tokenized with GPT-2's BPE goes in unchanged, a token
# the model never learned is read as `<unk>`, and its logits cover all 50,257 tokens (the
# tokens outside share `<unk>`'s probability equally). `model` is whichever was loaded;
# `REAL_GPT2` says which.

# %%
try:
    gpt2 = from_pretrained("gpt2")
    REAL_GPT2 = True
except WeightsUnavailableError:  # not in the cache, and no network to download them
    gpt2, REAL_GPT2 = None, False
    print("Offline: GPT-2's weights cannot be downloaded on this machine, so "
          "the analyses below use a small model trained on Tiny Shakespeare instead.")

mine, _ = book_model("shakespeare-bpe", progress=False)  # Chapter 6's BPE-level model
if REAL_GPT2:
    model, offline_info, MODEL_NAME = gpt2, None, "GPT-2 small"
else:
    model, offline_info = offline_model()  # trains once, then loads from the cache
    MODEL_NAME = "the offline model"
START = [] if REAL_GPT2 else [EOT]  # the offline model reads every text after <|endoftext|>
cfg = model.config
print(f"REAL_GPT2 = {REAL_GPT2}: analysing {MODEL_NAME}, {cfg.n_layers} layers x "
      f"{cfg.n_heads} heads, D = {cfg.d_model}, context {cfg.context_length}, "
      f"{model.num_parameters():,} parameters")

# %% tags=["remove-input"]
display(Markdown(prose.loaded_text(REAL_GPT2, MODEL_NAME, model.num_parameters(),
                                   offline_info)))

# %% [markdown]
# ## 8.3 The same numbers as transformers
#
# Parity is a measurement: run our `GPT` and transformers' `GPT2LMHeadModel` on the same
# tokens with the same weights, and compare their logits, their attention weights
# (transformers returns those with `output_attentions=True`, given its written-out "eager"
# attention) and 20 greedy tokens from each, as {ref}`ch-gpt` did on random weights. With
# GPT-2 loaded, the weights are OpenAI's; without it, a randomly initialised
# `GPT2LMHeadModel` has exactly GPT-2's layout, only smaller.

# %%
from transformers import GPT2Config, GPT2LMHeadModel

if REAL_GPT2:  # the checkpoint from_pretrained just found in the cache
    theirs = GPT2LMHeadModel.from_pretrained("gpt2", attn_implementation="eager").eval()
else:
    torch.manual_seed(0)
    theirs = GPT2LMHeadModel(GPT2Config(
        vocab_size=enc.n_vocab, n_positions=64, n_embd=64, n_layer=2, n_head=4,
        attn_implementation="eager",
    )).eval()
ours = gpt2 if REAL_GPT2 else from_hf(theirs)
idx = torch.tensor([enc.encode("To be, or not to be, that is the question:")])  # (1, T)
parity = heads.parity(ours, theirs, idx)

# %% tags=["nbval-check-output"]
print(f"largest logit difference below 1e-4: {parity.max_logit_diff < 1e-4}")
print(f"the same {parity.n_greedy} greedy tokens: {parity.same_greedy}")
print(f"largest attention-weight difference below 1e-5: {parity.max_attention_diff < 1e-5}")

# %% tags=["remove-input"]
display(Markdown(prose.parity_text(parity.max_logit_diff, parity.same_greedy,
                                   parity.n_greedy, REAL_GPT2)))

# %% [markdown]
# ## 8.4 Validation loss and a few generations
#
# The models score the same 64 windows of 64 tokens, spread evenly over the validation text
# (the last 10% of Tiny Shakespeare, which the small models never trained on). 64 tokens is
# the small models' whole context; GPT-2 could read 1,024, so this comparison handicaps it.
# The offline model reads each window after `<|endoftext|>`, as it was trained, so only the
# window's first 63 targets fit in its context and are scored; the cell also scores it
# without that token, on all 64, as the other models are read.
# GPT-2 never trained on Tiny Shakespeare as such: it learned English from 8 million web
# pages {cite}`radford2019language`. A loss of $\ell$ nats per token means the model is, on
# average, as unsure as a uniform choice among $e^{\ell}$ tokens, its *perplexity*; guessing
# uniformly over the vocabulary scores $\ln V$.

# %%
val = read_tokens(prepare_tokens(enc)["val"])
T_EVAL, N_WINDOWS = 64, 64  # the same 64 windows of 64 tokens for every model
starts = np.linspace(0, len(val) - T_EVAL - 1, N_WINDOWS).astype(int)
windows = np.stack([val[s: s + T_EVAL + 1] for s in starts]).astype(np.int64)  # (64, 65)
windows = torch.from_numpy(windows)
x_val, y_val = windows[:, :-1], windows[:, 1:]  # (B, T) each


@torch.no_grad()
def validation_loss(model: GPT, start: list[int] = []) -> float:
    """Mean cross-entropy (nats per token) over the fixed validation windows, each read
    after the `start` tokens, which push its last targets out of the context, unscored."""
    x = torch.cat([torch.tensor(start, dtype=torch.long).expand(N_WINDOWS, -1), x_val], 1)
    y = torch.cat([torch.full((N_WINDOWS, len(start)), -100), y_val], 1)  # -100: not scored
    x, y = x[:, :T_EVAL], y[:, :T_EVAL]  # (B, T) each
    losses = [model(xb, yb)[1] for xb, yb in zip(x.split(16), y.split(16))]
    return torch.stack(losses).mean().item()


models = {"the Chapter 6 model": mine, MODEL_NAME: model}

# %% tags=["nbval-check-output"] tolerance={"abs": 0.1, "why": "the loss, not its exponential: across PyTorch's AVX-512, AVX2 and portable kernels and 1, 2 and 4 threads, each model trained under that arithmetic, the offline model's loss moved at most 0.05 (perplexity 179 against 171 under the portable kernels and 2 threads, 4.7%); the bar is twice that"}
print(f"{N_WINDOWS} windows x {T_EVAL} tokens = {x_val.numel():,} validation tokens scored")
print(f"uniform guess over {enc.n_vocab:,} tokens: ln V = {math.log(enc.n_vocab):.2f} nats")
losses = {name: validation_loss(m, START if m is model else [])
          for name, m in models.items()}
for name, loss in losses.items():
    print(f"{name:<20} validation loss {loss:.2f} nats/token")

# %%
for name, loss in losses.items():
    print(f"{name:<20} perplexity exp(loss) = {math.exp(loss):.0f}")

# %%
if START:  # the offline model, read as the others are: no <|endoftext|> in front
    print(f"the offline model after <|endoftext|>: {T_EVAL - len(START)} of each window's "
          f"{T_EVAL} targets fit the context; without it, on all {T_EVAL}: "
          f"{validation_loss(model):.2f}")

# %% tags=["remove-input"]
display(Markdown(prose.losses_text(losses, math.log(enc.n_vocab))))

# %% [markdown]
# Chapter 6 printed its own validation loss for the same model, and it is not the number
# above. The cell below scores the model the way Chapter 6 did, with `estimate_loss` on the
# random windows its recipe draws, and measures how much one window's loss varies.

# %%
ch6 = TrainConfig(**RECIPES["shakespeare-bpe"].train)  # Chapter 6's evaluation settings
ch6_loss = estimate_loss(mine, {"val": val}, ch6.batch_size, T_EVAL, ch6.eval_iters,
                         seed=ch6.seed)["val"]
with torch.no_grad():
    logits, _ = mine(x_val)  # (B, T, V)
    per_token = F.cross_entropy(logits.transpose(1, 2), y_val, reduction="none")  # (B, T)
per_window = per_token.mean(1)  # (B,): each window's mean loss
n_ch6 = ch6.eval_iters * ch6.batch_size

# %% tags=["nbval-check-output"] tolerance={"abs": 0.08, "why": "measured over PyTorch's AVX-512, AVX2 and portable kernels with 1, 2 and 4 threads, each model trained under that arithmetic (scripts/arithmetic_spread.py): at most 0.03"}
print(f"as Chapter 6 scores it ({n_ch6} random windows, seed {ch6.seed}): {ch6_loss:.2f}")
print(f"on this chapter's {N_WINDOWS} evenly spaced windows:          "
      f"{per_window.mean():.2f}")
print(f"one window's loss: from {per_window.min():.2f} to {per_window.max():.2f}, "
      f"standard deviation {per_window.std():.2f}")

# %% tags=["remove-input"]
display(Markdown(prose.window_loss_text("the Chapter 6 model", ch6_loss, n_ch6,
                                        losses["the Chapter 6 model"], N_WINDOWS,
                                        per_window.std().item())))

# %% [markdown]
# Samples, with top-$k$ = 50 ({ref}`ch-generation`) and a fixed seed:

# %%
sample_prompts = ["ROMEO:\nI", "The girl and the boy walked home."]
continuations = {}
for name, m in models.items():
    start = START if m is model else []
    for prompt in sample_prompts:
        idx = torch.tensor([start + enc.encode(prompt)])
        out = generate(m, idx, max_new_tokens=30, top_k=50,
                       generator=torch.Generator().manual_seed(1337))
        continuations.setdefault(name, []).append(out[0, idx.shape[1]:].tolist())
        text = enc.decode(out[0, len(start):].tolist())
        print(f"--- {name}, prompt {prompt!r}\n{text}\n")

# %% tags=["remove-input"]
display(Markdown(prose.samples_text(continuations)))

# %% [markdown]
# ## 8.5 Attention maps, read out of the weights
#
# `model.attention_maps(idx)` runs the model once and returns every layer's attention
# weights $A$: a list of $L$ tensors of shape $(B, H, T, T)$, the format transformers uses.
# Row $t$ of a head's map is how query $t$ shares its attention over keys $0 \dots t$
# ({ref}`ch-attention`). To be sure the maps are the model's real weights, compute layer 0
# by hand from the parameters: embeddings, `ln_1`, queries and keys from `c_attn`, then
# $\operatorname{softmax}(q k^\top / \sqrt{d_k})$ with the future masked.

# %%
def encode(text: str) -> torch.Tensor:
    """(1, T) token ids of ``text``; after <|endoftext|> for the offline model."""
    return torch.tensor([START + enc.encode(text)])


idx = encode("The girl and the boy walked home. She")
tokens = token_labels(idx[0], enc)
maps = model.attention_maps(idx)  # n_layers tensors of shape (B, H, T, T)

# Layer 0 by hand: embeddings, ln_1, queries and keys, softmax of the masked, scaled scores.
B, T = idx.shape
H, d_k = cfg.n_heads, cfg.d_head
block = model.blocks[0]
with torch.no_grad():
    x = model.wte(idx) + model.wpe(T)  # (B, T, D)
    q, k, _ = block.attn.c_attn(block.ln_1(x)).split(cfg.d_model, dim=-1)  # 3 x (B, T, D)
    q = q.view(B, T, H, d_k).transpose(1, 2)  # (B, H, T, d_k)
    k = k.view(B, T, H, d_k).transpose(1, 2)  # (B, H, T, d_k)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # (B, H, T, T)
    future = torch.ones(T, T, dtype=torch.bool).triu(diagonal=1)  # (T, T): True = future
    A0 = scores.masked_fill(future, float("-inf")).softmax(dim=-1)  # (B, H, T, T)
assert_close(A0, maps[0])

# %% tags=["nbval-check-output"]
print(f"{len(maps)} maps of shape {tuple(maps[0].shape)} (B, H, T, T); layer 0 by hand "
      "matches")
print("every row sums to 1:",
      all(torch.allclose(A.sum(-1), torch.ones(B, H, T)) for A in maps))
print("largest weight on a future token:", max(A[..., future].max().item() for A in maps))

# %% [markdown]
# Layer 0 by hand matches, the rows are probability distributions, and nothing looks ahead.
# Here is every head at once, with `attention_grid` from `gpt_from_scratch.book.heads_plots`, all
# on one colour scale. Two patterns are worth looking for; sections 8.8 and 8.9 measure them: a
# bright first column all the way down (an *attention sink*) and a bright line just below
# the diagonal (a *previous-token head*). The bright top-left corner of every map is no
# pattern: query 0 can only attend to itself.

# %% mystnb={"figure": {"caption": "Every head of the analysed model on one sentence: one small map per layer (rows) and head (columns), all on one colour scale from 0 to 1. Within a map, row t is where query t puts its attention; the future (above the diagonal) is always 0.", "name": "fig-attention-grid"}, "image": {"alt": "A grid of small triangular heatmaps, one per layer and head, showing the attention weights of each head on the sentence 'The girl and the boy walked home. She'."}}
fig = attention_grid(maps, tokens, title=f"{MODEL_NAME}: every head",
                     cell_size=min(1.8, 3.4 / cfg.n_heads))  # the grid within WIDTH_IN
plt.show()

# %% [markdown]
# A map is half of what a head computes. Its output for query $t$ is the weighted sum of the
# value vectors, $z_t = \sum_s A[t, s]\, v_s$, with $v_s$ the value part of `c_attn`'s output
# for token $s$; the heads' outputs, side by side, go through `c_proj`, and that is the
# attention layer's output. Below, the last token's sum in layer 0's first head, written out
# with its weights, and the whole layer rebuilt from the sums and checked against the module:

# %%
with torch.no_grad():
    v = block.attn.c_attn(block.ln_1(x)).split(cfg.d_model, dim=-1)[2]  # (B, T, D)
    v = v.view(B, T, H, d_k).transpose(1, 2)  # (B, H, T, d_k)
    z = A0 @ v  # (B, H, T, d_k): each query's weighted sum of the value vectors
    layer_out = block.attn.c_proj(z.transpose(1, 2).reshape(B, T, cfg.d_model))  # (B, T, D)
assert_close(layer_out, block.attn(block.ln_1(x)))
terms = " + ".join(f"{w:.2f} v[{tok}]" for w, tok in zip(A0[0, 0, -1].tolist(), tokens))
print(f"layer 0, head 0: z[{tokens[-1]}] = {terms}")
print("the weighted sums of every head, through c_proj, equal the layer's output: True")

# %% [markdown]
# ## 8.6 She and He
#
# To predict what follows "The girl and the boy walked home. She", a model does well to know
# who "She" is. bertviz {cite}`vig2019bertviz` is a general viewer of attention, and among
# the patterns its paper shows are heads in which a pronoun attends to the noun it refers to;
# the sentence here is adapted from that paper, not taken from it. The cell below compares the last row of a head's
# map, where the pronoun looks, between "... She" and "... He". With GPT-2 loaded it uses
# the head of the reference measurement, layer 5, head 10 (counting from 0, as transformers
# does), whose weights were measured with transformers' `gpt2` checkpoint (bertviz's paper
# gives the sentence and the kind of head, not these numbers); another model has no such head fixed in advance, so the cell picks the head whose
# last row changes most between the two sentences (the total variation distance, half the
# summed absolute difference: 0 for identical rows, 1 for rows with nothing in common).

# %%
she = encode("The girl and the boy walked home. She")
he = encode("The girl and the boy walked home. He")
maps_she, maps_he = model.attention_maps(she), model.attention_maps(he)
last_she = torch.stack([A[0, :, -1] for A in maps_she])  # (L, H, T): where "She" looks
last_he = torch.stack([A[0, :, -1] for A in maps_he])  # (L, H, T)
change = 0.5 * (last_she - last_he).abs().sum(-1)  # (L, H): total variation, 0 .. 1
if REAL_GPT2:
    layer, head = heads.GPT2_REFERENCE.pronoun_head
    why = "the head of the reference measurement"
else:
    layer, head = divmod(int(change.argmax()), cfg.n_heads)
    why = "the head whose last row changes most between She and He"

# %%
print(f"layer {layer}, head {head}: {why}")
print(f"total variation between the two last rows: {change[layer, head]:.3f}")
labels = token_labels(she[0], enc)[:-1] + ["She/He"]
published = heads.GPT2_REFERENCE.pronoun_row  # the last tokens' weights
gpt2 = [None] * (len(labels) - len(published)) + list(published)
print(f"{'key':<10}{'She ->':>8}{'He ->':>8}{'GPT-2':>8}   (GPT-2: She, the reference run)")
rows = zip(labels, last_she[layer, head].tolist(), last_he[layer, head].tolist(), gpt2)
for token, w_she, w_he, w_gpt2 in rows:
    reference = f"{w_gpt2:>8.3f}" if w_gpt2 is not None else ""
    token = token.replace("<|endoftext|>", "<|eot|>")
    print(f"{token:<10}{w_she:>8.3f}{w_he:>8.3f}{reference}")

# %% tags=["remove-input"]
display(Markdown(prose.pronoun_text(
    MODEL_NAME, layer, head, token_labels(she[0], enc), last_she[layer, head].tolist(),
    last_he[layer, head].tolist(), REAL_GPT2)))

# %% mystnb={"figure": {"caption": "One head on the two sentences, on one colour scale. The last row is where the pronoun looks; every earlier row is identical in both, since a query cannot see the tokens after it.", "name": "fig-she-he"}, "image": {"alt": "Two triangular attention heatmaps, one above the other, with a shared colour bar, for the sentences ending in She and in He, with each weight written in its cell."}}
fig = compare_attention(
    [maps_she[layer][0, head], maps_he[layer][0, head]],
    [f"... She (layer {layer}, head {head})", f"... He (layer {layer}, head {head})"],
    [token_labels(she[0], enc), token_labels(he[0], enc)],
)
plt.show()

# %% [markdown]
# Choosing the head that changes most, as the cell does for any model but GPT-2, is not the
# same as finding a head that resolves pronouns. A head in layer 0 could not even know who
# "She" is: its queries and keys come from token and position embeddings alone, so each
# token is scored on its own, not in context.
#
# ## 8.7 The doctor and the nurse: attention and learned bias
#
# Vig's paper on bertviz {cite}`vig2019bertviz` used a sharper pair: "The doctor asked the
# nurse a question. She" and "... He". The sentence does not say who "She" is, so where a
# head sends the pronoun shows what the model has *learned* to associate. First the
# attention of the head chosen above:

# %%
bias_weights = {}
for pronoun in ("She", "He"):
    ids = encode(heads.GPT2_REFERENCE.bias_sentence.format(pronoun=pronoun))
    row = model.attention_maps(ids)[layer][0, head, -1]  # (T,)
    labels = token_labels(ids[0], enc)
    bias_weights[pronoun] = {w: row[labels.index(w)].item() for w in ("␣doctor", "␣nurse")}
    print(f"{pronoun:>3} -> doctor {bias_weights[pronoun]['␣doctor']:.3f}   "
          f"nurse {bias_weights[pronoun]['␣nurse']:.3f}   (layer {layer}, head {head})")

# %% tags=["remove-input"]
display(Markdown(prose.bias_attention_text(MODEL_NAME, layer, head, bias_weights,
                                           REAL_GPT2)))

# %% [markdown]
# Attention shows where a head looks, not what the model concludes. The model's conclusion
# is its next-token distribution: how likely is " he" or " she" to come next after an
# occupation? Swapping the two occupations shows whether the prediction follows them. For a
# baseline, count the two words in the text the small models learned from.

# %%
@torch.no_grad()
def next_token_probs(model: GPT, prompt: str, words: list[str]) -> list[float]:
    """P(word | prompt) for single-token words, from the last position's softmax."""
    ids = [enc.encode(w) for w in words]
    assert all(len(i) == 1 for i in ids), "each word must be one token"
    logits, _ = model(encode(prompt))
    probs = logits[0, -1].softmax(-1)
    return [probs[i[0]].item() for i in ids]


prompts = [
    "The doctor asked the nurse a question because",
    "The nurse asked the doctor a question because",
    "The doctor said that",
    "The nurse said that",
]
ratios = {}
print(f"{MODEL_NAME}:")
print(f"{'P( he)':>7}{'P( she)':>9}{'he/she':>8}  prompt")
for prompt in prompts:
    p_he, p_she = next_token_probs(model, prompt, [" he", " she"])
    ratios[prompt] = p_he / p_she
    print(f"{p_he:>7.4f}{p_she:>9.4f}{p_he / p_she:>8.1f}  {prompt}")

train_ids = read_tokens(prepare_tokens(enc)["train"])
n_he, n_she = (int((train_ids == enc.encode(w)[0]).sum()) for w in (" he", " she"))
print(f"\nTiny Shakespeare's training split: ' he' {n_he:,} times, ' she' {n_she:,} times "
      f"(ratio {n_he / n_she:.1f})")

# %% tags=["remove-input"]
display(Markdown(prose.bias_probs_text(MODEL_NAME, ratios, n_he / n_she)))

# %% [markdown]
# The simplest learned bias is a base rate: Shakespeare writes " he" far more often than
# " she", and a model trained on his plays can learn that rate without any link to
# occupations; compare its ratios with the corpus's. A model trained on web text learns the
# base rates of web text, and on top of them associations such as occupation and gender;
# {cite}`vig2020causal` measured those in GPT-2.
#
# What the parameters hold is the point. Training fits a model's next-token probabilities
# $P(t_i \mid t_{<i})$ to its corpus; the weights store those statistics, not the text: no
# sentence of the training data sits anywhere in them to be looked up (a model that has seen
# a passage often enough can still reproduce it, since memorizing is one way to predict it:
# {ref}`ch-training` showed n-gram tables copying their text verbatim, and a network's training
# loss falling on a short text it memorized while its validation loss rose). Whatever regularities the corpus
# holds come with the statistics, its grammar and its facts as much as its stereotypes: the
# model cannot learn the one without the other, and reading a bias off its probabilities is
# reading the corpus through it.
#
# ## 8.8 Attention sinks: the first token
#
# Every row of an attention map must sum to 1, even when a head has nothing useful to read.
# Trained transformers solve this with an *attention sink*: they park the spare attention on
# the first token, which every query can see. {cite}`xiao2024sinks` found that large
# language models put a surprising share of their attention there whatever that token is,
# and that a sliding window of context which drops the first tokens makes the model's
# perplexity explode. {cite}`gu2025sinks` found that sinks emerge during pretraining, once a
# model is well optimized on enough data.
#
# The measurement: run 16 validation windows through the model (after `<|endoftext|>` for
# the offline model, as it was trained) and, for each layer and head, average the weight
# that queries $t = 8, \dots, T-1$ put on position 0; early queries have few tokens to
# choose from. The baseline is a head that spreads its attention evenly: query $t$ gives
# $1/(t+1)$ to each key.

# %%
x_batch = torch.cat([torch.tensor([START] * 16, dtype=torch.long).view(16, len(START)),
                     x_val[:16, :cfg.context_length - len(START)]], dim=1)  # (16, 64)
batch_maps = torch.stack(model.attention_maps(x_batch))  # (L, B, H, T, T)
T = x_batch.shape[1]
first_share = heads.sink_scores(batch_maps)  # (L, H): mean A[t, 0], t = 8 .. T-1
sink_baseline = heads.uniform_share(T, start=heads.SINK_FROM)  # a head spreading evenly

# %%
print(f"uniform attention would put {sink_baseline:.3f} on position 0 "
      f"(mean of 1/(t+1), t = {heads.SINK_FROM} .. {T - 1})")
print("share of attention on position 0, per layer: the heads' mean, the largest head")
for l in range(cfg.n_layers):
    print(f"layer {l:>2}  mean {first_share[l].mean():.3f}  "
          f"largest {first_share[l].max():.3f} (head {first_share[l].argmax()})")

# %% tags=["remove-input"]
seen = None  # how many tokens the offline model trained on
if not REAL_GPT2:
    recipe = offline_info["settings"]
    seen = (recipe["train"]["max_iters"] * recipe["train"]["batch_size"]
            * recipe["model"]["context_length"])
display(Markdown(prose.sink_text(MODEL_NAME, first_share, sink_baseline, seen)))

# %% mystnb={"figure": {"caption": "Share of attention on the first token, per layer and head, averaged over queries 8 to 63 of 16 validation windows. A head attending evenly would score the uniform baseline printed above; an attention sink scores close to 1.", "name": "fig-sinks"}, "image": {"alt": "A heatmap with layers as rows and heads as columns; each cell is annotated with the head's mean attention weight on position 0."}}
fig = head_scores_heatmap(first_share,
                          f"{MODEL_NAME}: share of attention on the first token",
                          "mean weight on position 0")
plt.show()

# %% [markdown]
# ## 8.9 Previous-token heads
#
# A *previous-token head* sends each query to the token just before it: its maps are a
# bright line under the diagonal. It copies "what came before me" into each position: the
# first half of the two-head *induction circuit* that {cite}`olsson2022induction` found
# behind much of in-context learning (exercise 3 measures the second half, the induction
# head). Its score is the mean weight on position $t-1$ over the queries $t = 1, \dots, T-1$
# of the same windows; a head attending evenly scores the mean of $1/(t+1)$.

# %%
prev_score = heads.previous_token_scores(batch_maps)  # (L, H): mean A[t, t-1]
prev_baseline = heads.uniform_share(T)
top_heads = heads.best_heads(prev_score, 3)

# %%
print(f"uniform attention would put {prev_baseline:.3f} on position t-1")
for l, h in top_heads:
    print(f"layer {l}, head {h}: mean weight on the previous token {prev_score[l, h]:.3f}")

# %% tags=["remove-input"]
display(Markdown(prose.previous_token_text(MODEL_NAME, prev_score, prev_baseline,
                                           REAL_GPT2)))

# %% mystnb={"figure": {"caption": "Mean attention weight on the previous token, per layer and head, over the same 16 validation windows. A previous-token head scores close to 1.", "name": "fig-prev-token"}, "image": {"alt": "A heatmap with layers as rows and heads as columns; each cell is annotated with the head's mean attention weight on the token just before the query."}}
fig = head_scores_heatmap(prev_score, f"{MODEL_NAME}: mean weight on the previous token",
                          "mean A[t, t-1]")
plt.show()

# %% [markdown]
# The three best-scoring heads, on the first line of the play:

# %% mystnb={"figure": {"caption": "The three heads with the highest previous-token scores, on one sentence, on one colour scale from 0 to 1; each title gives the head's mean weight, over the 16 windows, on the previous token and on the query's own. A previous-token head draws a bright line just below the diagonal; a current-token head, a line on the diagonal itself; a sink, a bright first column.", "name": "fig-prev-token-maps"}, "image": {"alt": "Three triangular attention heatmaps, one above the other, with a shared colour bar, one for each of the three heads with the highest previous-token score, each titled with its mean weights on the previous token and on its own."}}
idx = encode("First Citizen:\nBefore we proceed any further, hear me speak.")
top_maps = model.attention_maps(idx)
own_score = heads.own_token_scores(batch_maps)  # (L, H): mean A[t, t]
fig = compare_attention([top_maps[l][0, h] for l, h in top_heads],
                        [f"layer {l}, head {h}\nprevious {prev_score[l, h]:.2f}, "
                         f"own {own_score[l, h]:.2f}" for l, h in top_heads],
                        token_labels(idx[0], enc), vmax=1.0, annotate=False)
plt.show()

# %% tags=["remove-input"]
display(Markdown(prose.ranked_heads_text(top_heads, prev_score, own_score)))

# %% [markdown]
# {cite}`olsson2022induction` saw induction heads form abruptly, early in training, in what
# they call a phase change, and the previous-token heads they rely on form before them. Both
# kinds of head are learned, not built in. The offline model was trained on windows that
# start with `<|endoftext|>`, so that a sink had a token to form on, and only for as many
# steps as a chapter can afford on a laptop CPU; the closing note gives its recipe, its
# training time and both scores. `offline_model(full=True)` trains a larger one for a GPU
# (`OFFLINE_RECIPES["shakespeare-bpe-heads-full"]`: wider, deeper and trained longer).

# %% [markdown]
# ### An induction head, trained to be seen
#
# The circuit is clearest in a model trained for it. Following {cite}`olsson2022induction`: a
# transformer of two layers of attention only (the ladder's blocks of {ref}`ch-training` without
# their feed-forward networks, 4 heads of width 16) learns to continue random sequences over a
# vocabulary of 64 tokens that repeat, `[s, s]`. The second copy can be predicted only by finding where the
# current token occurred before and copying the token that followed it. Each batch has its own
# half length $n$, between 8 and 24, so that no head can find the earlier copy by its position
# alone. Then each head is scored as in exercise 3, by its mean weight from query $t$ of the
# second copy to key $t - n + 1$ (here with $n = 16$), and by its previous-token score:

# %%
ind_model = induction.attention_only_model(64, n_max=24)
ind_losses = induction.train_on_repeats(ind_model, n_min=8, n_max=24, steps=600)
n_ind = 16
ind_idx = induction.repeated_sequences(16, n_ind, 64, torch.Generator().manual_seed(1))
ind_maps = induction.attention_maps(ind_model, ind_idx)
ind_scores = induction.induction_scores(ind_maps, n_ind)  # (L, H)
ind_prev = heads.previous_token_scores(ind_maps)  # (L, H)
for l in range(ind_scores.shape[0]):
    print(f"layer {l}: induction {[round(v, 2) for v in ind_scores[l].tolist()]}, "
          f"previous token {[round(v, 2) for v in ind_prev[l].tolist()]}")

# %% tags=["remove-input"]
display(Markdown(induction.induction_text(ind_scores, ind_prev, n_ind, ind_losses, 64)))

# %% tags=["remove-input"]
display(Markdown(induction.previous_token_lesson(ind_prev, n_ind).text))

# %% mystnb={"figure": {"caption": "The best previous-token head of layer 0 and the best induction head of layer 1 of the attention-only model, on one sequence of 16 random tokens repeated (positions 0 to 15, then 16 to 31 below the dotted line). The previous-token head draws the line just below the diagonal; the induction head, a line n - 1 positions below it, from each token of the second copy to the token after its earlier occurrence.", "name": "fig-induction-head"}, "image": {"alt": "Two triangular attention heatmaps, one above the other, over positions 0 to 31: on top a bright line just below the diagonal, below it a bright diagonal line in the lower half, offset by fifteen positions."}}
(pl, ph), = heads.best_heads(ind_prev[:1], 1)
(il, ih), = heads.best_heads(ind_scores, 1)
fig = compare_attention([ind_maps[pl][0, ph], ind_maps[il][0, ih]],
                        [f"layer {pl}, head {ph}: previous token",
                         f"layer {il}, head {ih}: induction"], vmax=1.0, annotate=False)
for ax in fig.axes[:2]:  # positions every 4, not the 2n random token ids: legible
    ax.set(xticks=range(0, 2 * n_ind, 4), yticks=range(0, 2 * n_ind, 4),
           xlabel="key position", ylabel="query position")
    ax.axhline(n_ind - 0.5, color="white", lw=0.8, ls=":")  # where the second copy starts
plt.show()

# %% [markdown]
# ### The reference run
#
# `make reference-runs` trains that larger offline model on a GPU and stores the scores of its
# heads, measured as above on 16 validation windows, in its manifest. Where `reference_run` finds
# it (on this machine, or a published copy), its maps and the sentences on them come next:

# %%
try:
    ref_heads = reference_run("shakespeare-bpe-heads-full")
except ReferenceUnavailable as err:
    ref_heads = None
    print(err)

# %% tags=["remove-input"]
display(Markdown(found_text({"shakespeare-bpe-heads-full": ref_heads},
                            "its sinks and previous-token heads, scored as this model's")))

# %%
if ref_heads is not None:
    ref_scores = ref_heads.info["tables"]
    ref_sink, ref_prev = (torch.tensor(ref_scores[k]) for k in ("sink", "previous_token"))
    ref_name, ref_base = "the reference run", ref_scores["previous_token_baseline"]
    display(Markdown(prose.sink_text(ref_name, ref_sink, ref_scores["sink_baseline"])))
    display(Markdown(prose.previous_token_text(ref_name, ref_prev, ref_base, False)))
    for scores, label in ((ref_sink, "mean weight on position 0"),
                          (ref_prev, "mean A[t, t-1]")):
        head_scores_heatmap(scores, f"the reference run: {label}", label)
        plt.show()

# %% [markdown]
# ## 8.10 Interactive views with bertviz
#
# bertviz {cite}`vig2019bertviz` draws attention interactively: `head_view` shows one layer
# as lines from each token to the tokens it attends to (hover over a token, pick heads by
# colour), `model_view` shows every layer and head at once. It takes exactly what
# `attention_maps` returns, a sequence of $(1, H, T, T)$ tensors, one per layer (the format
# of transformers' `output_attentions`), plus the token strings: any model's attention,
# GPT-2's or the offline model's. Its views load their JavaScript libraries from the
# internet and do not display on this static page, so the cell builds them and shows them
# only when `SHOW_BERTVIZ` is true (by default on Colab; set it to `True` in Jupyter).

# %%
from bertviz import head_view, model_view

SHOW_BERTVIZ = "google.colab" in sys.modules  # True in Jupyter: the interactive views

ids = encode("The doctor asked the nurse a question. She")
labels = token_labels(ids[0], enc)
attention = tuple(model.attention_maps(ids))  # bertviz's format: L tensors (1, H, T, T)
head_html = head_view(attention, labels, layer=layer, heads=[head], html_action="return")
model_html = model_view(attention, labels, html_action="return")
print(f"head_view: {len(head_html.data):,} characters of HTML and JavaScript; "
      f"model_view: {len(model_html.data):,}")
if SHOW_BERTVIZ:
    display(head_html)
    display(model_html)

# %% [markdown]
# For this page, `attention_lines` from `gpt_from_scratch.book.heads_plots` draws what the head
# view shows as a static figure: every head of the chosen layer, each line from a query
# token (left) to a key token (right) as opaque as its weight. The model view's grid of
# every layer and head is the `attention_grid` of section 8.5.

# %% mystnb={"figure": {"caption": "A static head view of the layer chosen in section 8.6, on the doctor and nurse sentence: one panel per head, a line from each query token (left) to each key token (right), as opaque as its attention weight.", "name": "fig-head-view"}, "image": {"alt": "Panels one above the other, one per attention head, each listing the tokens of 'The doctor asked the nurse a question. She' twice, in two columns, joined by lines whose opacity is the attention weight."}}
fig = attention_lines(attention[layer][0], labels, title=f"{MODEL_NAME}, layer {layer}")
plt.show()

# %% [markdown]
# And, in the HTML edition and in a notebook, every map of every head, one at a time: the
# menu picks the layer, the slider the head, and hovering over a cell shows its query token,
# key token and weight. It starts at the layer and head of section 8.6 and works in the page
# itself, without a running kernel.

# %%
from gpt_from_scratch.book.interactive import Interactive, layer_head_explorer

explorer = layer_head_explorer(torch.stack(attention)[:, 0], labels, layer=layer, head=head,
                               title=f"{MODEL_NAME}: pick a layer and a head")
Interactive(explorer, "(The interactive version of this figure is in the HTML edition.)")

# %% [markdown]
# ## Summary
#
# - GPT-2 small holds 124,439,808 parameters: $12D^2 + 13D$ per block, the token and
#   position embeddings, a final LayerNorm, and an output layer tied to the token embedding
#   (163,037,184 untied).
# - `from_pretrained("gpt2")` loads OpenAI's weights through the conversion of
#   {ref}`ch-gpt`, and fails within seconds with a clear `WeightsUnavailableError` when they
#   can be neither found nor downloaded. Parity with transformers is measured: the largest
#   logit difference and whether the most likely tokens agree, on the weights loaded.
# - `model.attention_maps(idx)` returns $L$ tensors of shape $(B, H, T, T)$, transformers'
#   format, ready for plots and for bertviz; layer 0 computed by hand from the weights
#   matches it.
# - A head's map shows where it looks, not what the model concludes. Measure conclusions on
#   the outputs (next-token probabilities) and test a head's role by intervening (exercise
#   4).
# - Attention sinks and previous-token heads are measurable, one number per head against the
#   baseline of a head that attends evenly. They are learned, not built in, and they take
#   training to emerge: section 8.8 sets the tokens a model read beside what the literature
#   found it takes.
# - An induction head needs two layers: a previous-token head below, a head above that
#   matches the current token against what each position's predecessor was. A two-layer
#   attention-only model trained on repeated random tokens grows both, shown in section 8.9.

# %% tags=["remove-input"]
if offline_info is not None:
    display(Markdown(prose.offline_recipe_text(
        offline_info, prev_score.max().item(), first_share.max().item(), prev_baseline,
        sink_baseline)))

# %% tags=["remove-cell", "nbval-check-output"]
print(verdicts())

# %% [markdown]
# ## Exercises
#
# ### Exercise 1. Scores at any offset (implement)
#
# Section 8.9 scored each head by its weight on the previous token, $A[t, t-1]$. Generalize
# it: write `offset_scores(maps, k)` that takes the output of `model.attention_maps(x)` (a
# list of $L$ tensors of shape $(B, H, T, T)$) and returns an $(L, H)$ tensor whose entry
# `[l, h]` is the mean of $A[t, t-k]$ over the batch and over the queries $t = k, \dots,
# T-1$. Pick the entries by indexing with two `torch.arange` vectors: `diagonal` fails the
# check. With $k = 1$ you get section 8.9's `prev_score` back.

# %% tags=["solution", "hide-input"] mystnb={"code_prompt_show": "Show the solution", "code_prompt_hide": "Hide the solution"}
def offset_scores(maps, k):
    A = torch.stack(maps)  # (L, B, H, T, T)
    t = torch.arange(k, A.shape[-1])  # the queries that have a key k steps back
    return A[..., t, t - k].mean(dim=(1, 3))  # (L, B, H, T - k) -> (L, H)


# %%
from gpt_from_scratch.exercises import check_offset_scores

check_offset_scores(offset_scores);

# %% [markdown]
# ### Exercise 2. Is the sink a token or a position? (predict, then run)
#
# Drop the first token of every window (`x_batch[:, 1:]`) so that the token that used to be
# second now comes first. Before running the cell after the answer: will the large share of
# attention stay with the token that used to be first (now gone), or move to whatever token
# sits at position 0?

# %% [markdown] tags=["answer"]
# ```{admonition} Answer
# :class: dropdown
# Compare the two numbers of each layer. If the large share belonged to the token, it would
# vanish with that token; if it belongs to the position, it reappears on whatever token now
# comes first. {cite}`xiao2024sinks` found the latter in large models: the sink is the
# first position, whatever its token. A model whose shares sit near the uniform baseline
# printed in section 8.8 has no sink, and nothing to move.
# ```

# %%
shifted_maps = model.attention_maps(x_batch[:, 1:])  # L tensors (B, H, T-1, T-1)
shifted_share = heads.sink_scores(shifted_maps)  # (L, H): as first_share, queries t >= 8
for l in range(cfg.n_layers):
    before, after = first_share[l].mean(), shifted_share[l].mean()
    print(f"layer {l}: share on position 0 {before:.3f} -> {after:.3f} after the shift")

# %% tags=["remove-input"]
display(Markdown(prose.shift_text(
    first_share.mean(dim=1).tolist(), shifted_share.mean(dim=1).tolist(), sink_baseline,
    heads.uniform_share(T - 1, start=heads.SINK_FROM),
    "`<|endoftext|>`" if START else "the window's first token")))

# %% [markdown]
# ### Exercise 3. Induction heads (predict, then run)
#
# {cite}`olsson2022induction` found heads that complete repeated patterns: after "... A B
# ... A", they attend from the second "A" to the "B" that followed the first one, and copy
# it. The cell after the answer feeds a batch of random token sequences of length $n$ (tokens of
# the training split), each repeated twice (length $2n$; the offline model reads them after
# `<|endoftext|>`, as in section 8.4), and scores each head by its mean weight from each position
# $t$ of the second copy to the key $n - 1$ positions back, the token after its earlier occurrence. Before running it: can a model of
# a single layer have an induction head, and why? What is the fewest layers it takes, and
# what should the scores look like in a model whose previous-token heads are weak?

# %% [markdown] tags=["answer"]
# ```{admonition} Answer
# :class: dropdown
# One layer is not enough. In the second copy, query "A" must find the position of "B",
# whose key in one layer is built only from "B" itself and its position: nothing there says
# "A came before me". A previous-token head in an earlier layer writes that into B's
# residual stream; only then can a later head match its query "A" against it. So it takes
# at least two layers, the induction head above the previous-token head. A model whose best
# previous-token score sits near its baseline (section 8.9) has little to build on: its best
# induction scores stay near the uniform baseline printed first, and a best score in layer
# 0 cannot be an induction head. Larger, longer-trained models show clear ones.
# ```

# %%
# Random tokens from those of the training split, which every model here has learned.
pool = torch.from_numpy(np.unique(train_ids).astype(np.int64))  # (V_train,) token ids


def induction_scores(model: GPT, n: int = 24, B: int = 8, generator=None) -> torch.Tensor:
    half = pool[torch.randint(0, len(pool), (B, n), generator=generator)]  # (B, n)
    start = torch.tensor([START] * B, dtype=torch.long).view(B, len(START))  # (B, S)
    idx = torch.cat([start, half, half], dim=1)  # (B, S + 2n)
    A = torch.stack(model.attention_maps(idx))  # (L, B, H, S + 2n, S + 2n)
    t = torch.arange(len(START) + n, len(START) + 2 * n)  # the queries of the second copy
    return A[..., t, t - n + 1].mean(dim=(1, 3))  # (L, H): mean A[t, t-n+1]


n, s = 24, len(START)
induction = induction_scores(model, n=n, generator=torch.Generator().manual_seed(0))
uniform = (1 / torch.arange(s + n + 1, s + 2 * n + 1)).mean()
print(f"uniform attention would score {uniform:.3f} "
      f"(mean of 1/(t+1), t = {s + n} .. {s + 2 * n - 1})")
for i in induction.flatten().topk(3).indices:
    l, h = divmod(int(i), cfg.n_heads)
    print(f"layer {l}, head {h}: induction score {induction[l, h]:.3f}, "
          f"previous-token score {prev_score[l, h]:.3f}")

# %% [markdown]
# ### Exercise 4. Does the pronoun head matter? (predict, then run)
#
# A large weight from "She" to "nurse" says where a head *looks*, not what the model *does*
# with it: attention weights alone are not an explanation {cite}`jain2019attention`. The
# cell after the answer silences head (`layer`, `head`) by zeroing its $d_k$ columns of the
# merged heads just before `c_proj` (a forward pre-hook), and compares $P(\text{" he"})$ and
# $P(\text{" she"})$ after each prompt of section 8.7 with and without it. Predict: will the
# he/she ratio change much? What does a small change tell you? {cite}`vig2020causal` turn
# this idea into a careful causal analysis of gender bias in GPT-2.

# %% [markdown] tags=["answer"]
# ```{admonition} Answer
# :class: dropdown
# If silencing the head barely changes the he/she ratio, the model does not need that head
# for this prediction, however striking its map: other heads, or the MLPs, carry the
# information. A large change says the head's output feeds this prediction, but not that it
# carries *gender*: silencing a head can damage whatever else it passes on. Careful causal
# analyses therefore compare many interventions, not one. Either way, where the head looks
# and what the model does with it are different questions.
# ```

# %%
from contextlib import contextmanager


@contextmanager
def without_head(layer: int, head: int):
    """Inside this block, head `head` of block `layer` contributes nothing to the model."""
    d_k = cfg.d_head

    def zero_head(module, args):
        (merged,) = args  # (B, T, D): head h in columns h*d_k .. (h+1)*d_k - 1
        merged = merged.clone()
        merged[..., head * d_k:(head + 1) * d_k] = 0.0
        return (merged,)

    handle = model.blocks[layer].attn.c_proj.register_forward_pre_hook(zero_head)
    try:
        yield
    finally:
        handle.remove()


for prompt in prompts:
    p_he, p_she = next_token_probs(model, prompt, [" he", " she"])
    with without_head(layer, head):
        q_he, q_she = next_token_probs(model, prompt, [" he", " she"])
    print(f"{prompt:<48} he/she {p_he / p_she:5.2f} -> {q_he / q_she:5.2f} "
          f"without layer {layer}, head {head}")

# %% [markdown]
# ### Exercise 5. Where the parameters are (explain)
#
# Run the cell below: it uses `count_gpt_parameters` to find what share of GPT-2 small's
# parameters sits in the token embeddings, and how that share changes from GPT-2 small to
# GPT-2 XL. Then explain why the Chapter 6 model, with $D = 128$, keeps an even larger share
# there, and what that means for what its short training can teach it.

# %%
configs = [("gpt2", GPTConfig.from_preset("gpt2")),
           ("gpt2-xl", GPTConfig.from_preset("gpt2-xl")), ("Chapter 6 model", mine.config)]
for name, config in configs:
    parts = count_gpt_parameters(*sizes(config))
    total = sum(parts.values())
    share = parts["token embeddings wte (V x D)"] / total
    print(f"{name:<17} D = {config.d_model:>4}: wte holds {share:.1%} of {total:,}")
distinct = len(np.unique(train_ids))
print(f"distinct tokens in the training split: {distinct:,} of {enc.n_vocab:,}")

# %% [markdown] tags=["answer"]
# ```{admonition} Answer
# :class: dropdown
# The blocks grow as $12 L D^2$, the token embedding only as $V D$: the wider and deeper the
# model, the smaller the embedding's share. At $D = 128$ the four blocks are small next to
# 50,257 rows of 128 numbers, so almost all of the Chapter 6 model is its embedding table.
# Yet only a fraction of the vocabulary occurs in the training text (printed above): the
# other rows are never read as inputs and never the right answer, so all that training
# teaches them, through the tied output layer, is to be unlikely. The parameters that do the
# work are few.
# ```

# %% [markdown] tags=["quiz"]
# ## Check yourself
#
# A few questions on this chapter, each answer with its explanation. The numbers in them
# are the ones this chapter printed.

# %% tags=["quiz", "remove-input"]
from gpt_from_scratch.book.quiz import Choice, MultipleChoice, Numeric, show_quiz

show_quiz([
    Numeric("How many parameters does GPT-2 small hold, with its output layer tied?",
            sum(count_gpt_parameters(*sizes(gpt2_config)).values()), 0.5,
            "124M: the name of the model."),
    MultipleChoice("A head's attention map shows:", [
        Choice("where each query looks, not what the model concludes", True,
               "Yes: conclusions are measured on the outputs, roles by intervening."),
        Choice("which tokens the model considers correct", False,
               "No: a weight says how values are mixed, not what is true."),
    ]),
    MultipleChoice("An attention sink is a head that:", [
        Choice("puts most of its attention on the first token, whatever it is", True,
               "Yes: a bright first column, section 8.8."),
        Choice("attends to the token just before each query", False,
               "No: that is a previous-token head, section 8.9."),
        Choice("ignores the query and attends evenly", False,
               "No: that is the baseline both scores are measured against."),
    ]),
])
