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
# (ch-training)=
# # 6. Training on Tiny Shakespeare
#
# {ref}`ch-gpt` assembled GPT-2, but with random weights it predicts every next character with about equal
# probability. This chapter trains it. The loop fits on one screen: draw a batch, measure how wrong the
# predictions are, push every weight a little in the direction that makes them less wrong, repeat. The rest of
# the chapter is about doing that well, and about seeing what each part of the model is worth:
#
# 1. the data at the character level, and the loss: cross-entropy over all $B \times T$ positions;
# 2. two reference points: the untrained model ($\ln 65$) and the best a bigram table can do;
# 3. the training loop written out: AdamW, a warm-up then cosine learning rate, gradient clipping; what makes
#    two runs identical; how batches reach a GPU;
# 4. the build-up ladder of Karpathy's lecture, from a bigram model to a GPT, rerun with his settings and put
#    beside his numbers;
# 5. the character model the book uses from now on, and its loss curves;
# 6. overfitting, and dropout;
# 7. the same model on GPT-2's tokens, and why a 50,257-word vocabulary makes CPU training slow;
# 8. checkpoints, resuming, and the command line (several processes with `torchrun`).
#
# Everything runs on a laptop CPU in a few minutes. Set `FULL_RUN = True` in the next cell but one on a
# GPU (Colab's free T4 will do) for the larger settings described there.

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
import dataclasses
import inspect
import math
import os
import tempfile
import time
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F
from IPython.display import Markdown, display
from torch.testing import assert_close

from gpt_from_scratch.allocator import reuse_freed_memory
from gpt_from_scratch.checkpoint import load_checkpoint
from gpt_from_scratch.data import get_batch, load_tiny_shakespeare, split_text
from gpt_from_scratch.generate import generate
from gpt_from_scratch.model import GPT, GPTConfig
from gpt_from_scratch.train import train
from gpt_from_scratch.train_config import TrainConfig, lr_at, make_optimizer
from gpt_from_scratch.utils import default_device, seed_everything, set_deterministic
from gpt_from_scratch.book.figure_text import book_figures
from gpt_from_scratch.book.ladder import (
    BIGRAM, BIGRAM_PUBLISHED, BigramModel, FINAL, FINAL_CONFIG, LadderConfig, LadderModel,
    RUNGS, train_rung, unigram_loss,
)
from gpt_from_scratch.book.ladder_prose import (
    ladder_frame, ladder_text, layernorm_lesson, prediction_spread,
)
from gpt_from_scratch.book.lessons import lesson, verdicts
from gpt_from_scratch.book.recipes import (
    RECIPES, book_model, book_model_path, bpe_level_data, char_level_data,
)
from gpt_from_scratch.book.reference import ReferenceUnavailable, reference_run
from gpt_from_scratch.book.reference_prose import found_text, loss_curves, run_text
from gpt_from_scratch.book.samples import real_word_share, real_words_lesson, sample_text

book_figures()  # sharp on high-density screens, each PNG records its smallest text
generator = seed_everything(1337)
reuse_freed_memory()  # Linux: big freed tensors serve the next step (Section 7.8)

# FULL_RUN = False: every run below is sized for 2 CPU cores (the whole chapter takes
# a few minutes). FULL_RUN = True (on a GPU): the ladder of section 6.4 takes all the
# lecture's steps with 3 seeds and adds its scaled-up model, section 6.3 measures copies
# to the GPU, and section 6.5 also trains nanoGPT's GPU configuration (6 layers, 6 heads,
# 384 dims, context 256, dropout 0.2, batch 64, 5,000 steps).
FULL_RUN = False
DEVICE = default_device() if FULL_RUN else "cpu"

# %% [markdown]
# ## 6.1 The data and the loss
#
# We start at the character level: every character of Tiny Shakespeare is one token, 65 in all.
# `char_level_data` builds the vocabulary from the whole corpus and splits it 90/10 (the split of
# {ref}`ch-tokens`), exactly as nanoGPT {cite}`karpathy2023nanogpt` does, so our losses can be compared with its.

# %% tags=["nbval-check-output"]
train_ids, val_ids, tokenizer = char_level_data()
print(f"{len(train_ids):,} training and {len(val_ids):,} validation tokens, "
      f"vocabulary {tokenizer.vocab_size}")
print(repr(tokenizer.decode(train_ids[:60])))

# %% [markdown]
# A batch is $B$ windows of $T$ tokens, `x`, and the same windows shifted by one, `y`: `y[b, t]` is the
# token that follows `x[b, t]`. The model reads `x` and returns logits of shape $(B, T, V)$: at **every**
# position $t$ a score for each of the $V$ possible next tokens, computed from `x[b, :t + 1]` only (the
# causal mask). So one batch is $B \times T$ predictions, not $B$. The loss is their average cross-entropy:
# the negative log-probability the model gave to the token that actually came next,
#
# $$\mathcal{L} = -\frac{1}{BT} \sum_{b=1}^{B} \sum_{t=1}^{T} \log \operatorname{softmax}(z_{b,t})_{y_{b,t}} .$$
#
# Written out, it is a `log_softmax`, a `gather` of the right entries and a mean:

# %% tags=["nbval-check-output"]
torch.manual_seed(1337)
model = GPT(GPTConfig.from_preset("shakespeare-char"))  # Chapter 5's GPT: 4 layers, D = 128
g = torch.Generator().manual_seed(0)
x, y = get_batch(train_ids, batch_size=4, block_size=8, generator=g)
logits, loss = model(x, y)  # (B, T, V), scalar
print("x", tuple(x.shape), " y", tuple(y.shape), " logits", tuple(logits.shape))

log_probs = torch.log_softmax(logits, dim=-1)  # (B, T, V)
# (B, T): the log-probability of the true next token
picked = log_probs.gather(-1, y[..., None])[..., 0]
by_hand = -picked.mean()  # average over all B * T = 32 positions
assert_close(by_hand, loss)
# logits (B*T, V) against targets (B*T,):
assert_close(by_hand, F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1)))
print(f"loss of the untrained model {loss.item():.4f}; ln 65 = {math.log(65):.4f}")

# %% [markdown]
# `F.cross_entropy` wants the predictions as rows, so the $(B, T, V)$ logits are flattened to $(BT, V)$ and
# the targets to $(BT,)$; the model does exactly that inside. The untrained loss is almost exactly
# $\ln 65$: GPT-2's initialization makes every logit close to 0, so the model starts out guessing uniformly
# among the 65 characters, and a uniform guess costs $\ln V$ nats per token. Anything below that is learning.
#
# ## 6.2 A baseline: the bigram table
#
# How far can one get by looking only at the previous character? Count, in the training text, how often each
# character follows each other one; the counts, normalized row by row, are the best possible bigram model
# (maximum likelihood). One pseudo-count per pair keeps unseen pairs from getting probability 0.

# %% tags=["nbval-check-output"]
V = tokenizer.vocab_size
ids = train_ids.astype(np.int64)
pairs = torch.from_numpy(ids[:-1] * V + ids[1:])
# (V, V): row = previous character
counts = torch.bincount(pairs, minlength=V * V).view(V, V).double() + 1.0
bigram_log_probs = torch.log(counts / counts.sum(dim=1, keepdim=True))  # (V, V)


def bigram_loss(ids):
    ids = torch.from_numpy(ids.astype(np.int64))
    return -bigram_log_probs[ids[:-1], ids[1:]].mean().item()


bigram_train, bigram_val = bigram_loss(train_ids), bigram_loss(val_ids)
print(f"bigram table: train loss {bigram_train:.4f}, val loss {bigram_val:.4f}")
unigram_val = unigram_loss(train_ids, val_ids, V)  # the characters' frequencies, no context
print(f"unigram (frequencies only): val loss {unigram_val:.4f}")

# %% [markdown]
# On the *training* text no model that sees only the previous character can beat the table: counting is the
# maximum-likelihood fit (up to the one pseudo-count per pair), the lowest training loss such a model can
# have. On *validation* text that guarantee is gone, for it too: the table was fitted to other text, and a
# model that reads more context can do better there. Section 6.4 measures which models do.
#
# One step further down is the **unigram** loss: predict every character with its frequency in the training
# text, whatever came before. A model that scores exactly this has learned nothing from its input; keep the
# number in mind, it comes back in section 6.4.
#
# ### Longer contexts: n-gram models
#
# The bigram table reads one character. The same counting works for any number: an **n-gram model**
# predicts the next character from the $n - 1$ before it, with probability (count of the context
# followed by that character + $\alpha$) / (count of the context + $\alpha V$). These are the Markov
# models language modelling started from. Each context is one integer in base $V$, so NumPy counts
# them all at once. The cell fits orders 1 (the unigram) to 10 and draws from two of them:

# %% tags=["nbval-check-output"]
def ngram_codes(ids, n):
    """For each position from n - 1 on: its context (the n - 1 characters before) and the
    context with the next character, each as one integer in base V."""
    ids = ids.astype(np.int64)
    context = np.zeros(len(ids) - n + 1, dtype=np.int64)
    for j in range(n - 1):
        context = context * V + ids[j: len(ids) - n + 1 + j]
    return context, context * V + ids[n - 1:]


def count_of(table, codes):
    """How often each code occurs in a (sorted codes, counts) table; 0 when absent."""
    keys, counts = table
    at = np.minimum(np.searchsorted(keys, codes), len(keys) - 1)
    return np.where(keys[at] == codes, counts[at], 0)


class NGram:
    """The order-n model: P(next | n - 1 characters) from counts, alpha added to each."""

    def __init__(self, ids, n, alpha=0.01):
        self.n, self.alpha = n, alpha
        context, pair = ngram_codes(ids, n)
        self.contexts = np.unique(context, return_counts=True)  # (codes, counts)
        self.pairs = np.unique(pair, return_counts=True)

    def loss(self, ids):
        context, pair = ngram_codes(ids, self.n)
        p = ((count_of(self.pairs, pair) + self.alpha)
             / (count_of(self.contexts, context) + self.alpha * V))
        return -np.log(p).mean()

    def sample(self, prompt, length, rng):
        """Draw from the counts alone: after a prompt from the training text, every context
        drawn was seen there."""
        out = list(prompt)
        for _ in range(length):
            code = 0
            for c in out[len(out) - self.n + 1:] if self.n > 1 else []:
                code = code * V + int(c)
            counts = count_of(self.pairs, code * V + np.arange(V))  # (V,): no alpha
            out.append(rng.choice(V, p=counts / counts.sum()))
        return out[len(prompt):]


def copied_pieces(sample, text):
    """Cut sample into the longest pieces found verbatim in text, left to right."""
    pieces, i = [], 0
    while i < len(sample):
        j = i + 1
        while j < len(sample) and sample[i:j + 1] in text:
            j += 1
        pieces.append(sample[i:j])
        i = j
    return pieces


train_text = tokenizer.decode(train_ids.tolist())
print(f"{'n':>2} {'contexts':>9} {'train loss':>11} {'val loss':>9}")
ngrams = {}
for n in range(1, 11):
    ngrams[n] = NGram(train_ids, n)
    print(f"{n:2d} {len(ngrams[n].contexts[0]):9,d} {ngrams[n].loss(train_ids):11.3f} "
          f"{ngrams[n].loss(val_ids):9.3f}")
prompt = train_ids[:20].astype(np.int64).tolist()
for n in (3, 10):
    text = tokenizer.decode(ngrams[n].sample(prompt, 300, np.random.default_rng(0)))
    pieces = copied_pieces(text, train_text)
    print(f"--- order {n}: {len(pieces)} pieces of training text, the longest "
          f"{max(map(len, pieces))} characters\n{text[:200]}")


# %% [markdown]
# Every extra character of context lowers the *training* loss: the model can only fit its training
# text better, and in the limit each long context has been seen once, followed by one character. The
# *validation* loss falls for the first few orders and then rises again: most long contexts of new text
# never occurred in training, and a model that has only counts has nothing to say about them. The
# samples show the other side. The short context writes word-like noise; the long one writes
# Shakespeare, because it copies him: its sample is stretches of the training text, joined
# where two passages share a context. A count table cannot generalize to a context it has not seen;
# a neural network can, by learning which contexts are alike, which is what the rest of this chapter
# trains.
#
# ## 6.3 The training loop
#
# Three choices make the difference between a loop that works and one that works well.
#
# **AdamW** {cite}`loshchilov2019adamw`. Adam keeps, for every weight, running averages of its gradient and of
# its squared gradient, and steps by their ratio: every weight moves at a similar pace whatever the scale of its
# gradient. AdamW adds *decoupled* weight decay: each step also shrinks the weights by
# $\text{lr} \times \lambda$ times themselves, pulling unused directions back to zero. We decay only the
# matrices (linear weights, embeddings: parameters with 2 or more dimensions). Biases and LayerNorm gains are
# vectors that set offsets and scales; shrinking LayerNorm's $\gamma$ towards 0 would fight the normalization.

# %%
def param_groups(model, weight_decay):
    """AdamW groups: decay the matrices (>= 2 dimensions), not biases or LayerNorms."""
    params = list(model.parameters())  # a tied matrix (wte = lm_head) appears once
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


ours = [[p.shape for p in g["params"]] for g in param_groups(model, 0.1)]
package_groups = make_optimizer(model, TrainConfig()).param_groups
package = [[p.shape for p in g["params"]] for g in package_groups]
assert ours == package
groups = param_groups(model, 0.1)
decayed, not_decayed = (sum(p.numel() for p in g["params"]) for g in groups)
print(f"decayed: {decayed:,} numbers in {len(ours[0])} matrices; "
      f"not decayed: {not_decayed:,} in {len(ours[1])} vectors")

# %% [markdown]
# **A learning-rate schedule.** At the start the weights are random and Adam's running averages are empty:
# big steps then are risky, so the learning rate rises linearly over the first `warmup_iters` steps. Later, a
# smaller learning rate lets the weights settle into a minimum instead of bouncing around it, so the rate
# decays along a half cosine down to `min_lr`. The schedule is a pure function of the step:

# %%
def lr_schedule(step, cfg):
    decay_iters = cfg.lr_decay_iters or cfg.max_iters
    if step < cfg.warmup_iters:  # linear warm-up
        return cfg.learning_rate * (step + 1) / (cfg.warmup_iters + 1)
    if step >= decay_iters:  # after the decay: the floor
        return cfg.min_lr
    progress = (step - cfg.warmup_iters) / (decay_iters - cfg.warmup_iters)  # 0 -> 1
    cosine = 0.5 * (1 + math.cos(math.pi * progress))  # 1 -> 0
    return cfg.min_lr + cosine * (cfg.learning_rate - cfg.min_lr)


# The settings of the book's character model:
char_cfg = TrainConfig(**RECIPES["shakespeare-char"].train)
steps = range(char_cfg.max_iters + 200)
assert_close(torch.tensor([lr_schedule(s, char_cfg) for s in steps]),
             torch.tensor([lr_at(s, char_cfg) for s in steps]))
print("TrainConfig(")
for field in dataclasses.fields(char_cfg):
    print(f"    {field.name}={getattr(char_cfg, field.name)!r},")
print(")")

# %% mystnb={"figure": {"caption": "The learning rate of the book's character model: 100 steps of linear warm-up to 3e-3, then a half cosine down to 3e-4 at step 3,000.", "name": "fig-training-lr"}, "image": {"alt": "A curve that rises in a straight line from near 0 to 0.003 over the first 100 steps, then falls smoothly like half a cosine wave to 0.0003 at step 3000, and stays flat after that."}}
fig, ax = plt.subplots(figsize=(5.2, 3.4))
ax.plot(list(steps), [lr_at(s, char_cfg) for s in steps])
ax.axvline(char_cfg.warmup_iters, color="gray", linestyle=":", label="end of warm-up")
ax.set(xlabel="step", ylabel="learning rate", title="Warm-up, then cosine decay")
ax.legend()
plt.show()

# %% [markdown]
# **Gradient clipping.** Now and then a batch produces a huge gradient; one such step can undo hours of
# training. Before each update we measure the norm of the whole gradient (all parameters as one long vector)
# and, if it exceeds `grad_clip` (1.0), scale it down to that length. The direction is kept.
#
# Here is the loop with all three. Each step draws its batch from a generator seeded with `seed + step`, so
# the batches depend only on the step number (that will make resuming exact, section 6.8).

# %%
def train_by_hand(model, train_ids, cfg):
    groups = param_groups(model, cfg.weight_decay)
    betas = (cfg.beta1, cfg.beta2)
    optimizer = torch.optim.AdamW(groups, lr=cfg.learning_rate, betas=betas)
    block_size = cfg.block_size or model.config.context_length
    losses = []
    model.train()
    for step in range(cfg.max_iters):
        for group in optimizer.param_groups:
            group["lr"] = lr_schedule(step, cfg)
        batch_generator = torch.Generator().manual_seed(cfg.seed + step)
        # (B, T) each:
        x, y = get_batch(train_ids, cfg.batch_size, block_size, batch_generator)
        torch.manual_seed(cfg.seed + step)  # this step's dropout masks
        logits, loss = model(x, y)  # (B, T, V), mean cross-entropy over B * T positions
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        losses.append(loss.item())
    return losses


short = dataclasses.replace(char_cfg, max_iters=40, warmup_iters=10, eval_interval=40,
                            progress=False)
torch.manual_seed(0)
fresh_model = GPT(GPTConfig.from_preset("shakespeare-char"))
by_hand_losses = train_by_hand(fresh_model, train_ids, short)
torch.manual_seed(0)
history = train(GPT(GPTConfig.from_preset("shakespeare-char")), train_ids, val_ids, short)
assert_close(torch.tensor(by_hand_losses), torch.tensor(history.loss))
print(f"40 steps by hand and with gpt_from_scratch.train: the same losses, "
      f"{by_hand_losses[0]:.4f} -> "
      f"{by_hand_losses[-1]:.4f}")

# %% [markdown]
# The package's `train` is this loop plus three things: every `eval_interval` steps it calls `estimate_loss`,
# which averages the loss over `eval_iters` batches of each split (always the same batches, drawn from a
# generator with a fixed seed, so two estimates differ only because the model changed); it shows a `tqdm`
# progress bar; and it returns the `History` (every step's loss and learning rate, every estimate) for
# plotting. From here on we use it.
#
# **Reproducibility.** Both runs above gave the same losses because everything random in them was seeded.
# `seed_everything` (from `gpt_from_scratch.utils`, used at the top of every chapter) seeds Python's
# `random`, NumPy's global generator and PyTorch's (`torch.manual_seed`, which seeds every GPU as well), and
# returns a fresh `torch.Generator` seeded the same way for functions that take one:

# %%
print(inspect.getsource(seed_everything))

# %% [markdown]
# `train` draws the weights' initial values from PyTorch's global generator (when the model is built) and
# each step's batch from a generator seeded with `seed + step`. Same seed, same numbers; another seed,
# other numbers:

# %% tags=["nbval-check-output"]
def twenty_steps(seed):
    seed_everything(seed)  # the initial weights
    net = GPT(GPTConfig(vocab_size=V, context_length=32, d_model=32, n_layers=2, n_heads=2))
    cfg = TrainConfig(max_iters=20, batch_size=8, warmup_iters=2, eval_interval=20,
                      eval_iters=2, seed=seed, progress=False)  # seed: the batches
    return train(net, train_ids, val_ids, cfg).loss


first, again, other = twenty_steps(0), twenty_steps(0), twenty_steps(1)
print("seed 0 twice, all 20 losses bit for bit equal:", first == again)
print("seed 0 vs seed 1, equal losses:", sum(a == b for a, b in zip(first, other)), "of 20")
print(f"last loss: {first[-1]:.2f} (seed 0), {other[-1]:.2f} (seed 1)")

# %% [markdown]
# Seeds are not the whole story on a GPU. Some CUDA kernels add up many numbers in whatever order the threads
# finish (`index_add_`, `scatter_add_`, the backward pass of `nn.Embedding`, where a row used at many
# positions receives the sum of their gradients), and floating-point addition is not associative, so the last
# bits change from run to run; over thousands of steps two runs drift apart. cuBLAS, which computes matrix
# products, is reproducible only with a fixed workspace configuration when several streams are in use.
# `set_deterministic` (also in `utils`) asks for both: `torch.use_deterministic_algorithms(True)` makes
# PyTorch choose a deterministic kernel wherever it has one and complain where it has none (here with a
# warning, `warn_only=True`, rather than an error), and the environment variable
# `CUBLAS_WORKSPACE_CONFIG=:4096:8` (eight workspace buffers of 4,096 KiB) is what cuBLAS needs; it must be
# set before the first CUDA matrix product. Deterministic kernels are often slower. On a CPU the kernels
# these runs use are deterministic already (the two runs above agreed bit for bit), so the call changes
# nothing here; with
# `FULL_RUN` on a GPU the cell also sums a million numbers into ten slots twice with `index_add_`, without and
# with deterministic algorithms, and prints whether the two sums agree bit for bit.

# %%
set_deterministic(True)
print("deterministic algorithms:", torch.are_deterministic_algorithms_enabled(),
      "| only warn:", torch.is_deterministic_algorithms_warn_only_enabled(),
      "| CUBLAS_WORKSPACE_CONFIG =", os.environ.get("CUBLAS_WORKSPACE_CONFIG"))
if torch.cuda.is_available() and FULL_RUN:
    values = torch.randn(1_000_000, device="cuda")
    slots = torch.randint(0, 10, (1_000_000,), device="cuda")
    for deterministic in (False, True):
        torch.use_deterministic_algorithms(deterministic)
        sums = [torch.zeros(10, device="cuda").index_add_(0, slots, values)
                for _ in range(2)]
        print(f"deterministic={deterministic}: two sums equal bit for bit:",
              torch.equal(*sums))
set_deterministic(False)  # back to the fast kernels for the rest of the chapter

# %% [markdown]
# **Getting batches to the GPU.** `get_batch` draws a batch on the CPU, and on a GPU it must then be copied
# across. A copy from ordinary (*pageable*) memory takes two hops: the driver first copies the data into a
# page-locked buffer, and the GPU reads it from there. `tensor.pin_memory()` puts the tensor in page-locked
# memory itself, which saves the first hop, and only from pinned memory can the copy be asynchronous:
# `.to(device, non_blocking=True)` returns at once, and the copy overlaps with what Python does next (the
# GPU's queue still runs it before any kernel that reads the batch). `get_batch` does this whenever the
# device is a GPU; a `DataLoader` does the same with `pin_memory=True`, and its `num_workers` processes prepare
# the next batches while the current one trains. On a CPU there is nothing to copy: the batch already is
# where the model is, and `.to("cpu")` returns the very same tensor. With `FULL_RUN` on a GPU the cell times
# copies of 64 MiB both ways, and how long the asynchronous call takes to return.

# %%
lines = inspect.getsource(get_batch).splitlines()
print("\n".join(line for line in lines if "pin_memory" in line or "chunk.to(" in line))
batch = torch.zeros(64, 256, dtype=torch.int64)  # (B, T): a batch of the full-size run
print("CUDA available:", torch.cuda.is_available(),
      "| batch.to('cpu') is batch:", batch.to("cpu") is batch)
if torch.cuda.is_available() and FULL_RUN:
    def copy_ms(tensor, non_blocking=False, repeats=20):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(repeats):
            tensor.to("cuda", non_blocking=non_blocking)
        torch.cuda.synchronize()
        return 1000 * (time.perf_counter() - start) / repeats

    pageable = torch.zeros(8 * 2**20, dtype=torch.int64)  # 64 MiB
    pinned = pageable.pin_memory()
    for name, tensor in (("pageable", pageable), ("pinned", pinned)):
        ms = copy_ms(tensor)
        print(f"{name}: {ms:.2f} ms per 64 MiB copy, {64 / 1024 / (ms / 1000):.1f} GiB/s")
    torch.cuda.synchronize()
    start = time.perf_counter()
    on_gpu = pinned.to("cuda", non_blocking=True)
    returned = time.perf_counter() - start
    torch.cuda.synchronize()
    print(f"non_blocking=True returned after {1000 * returned:.3f} ms, "
          f"the copy was done after {1000 * (time.perf_counter() - start):.2f} ms")

# %% [markdown]
# ## 6.4 The build-up ladder
#
# Chapters 4 and 5 added the parts of a transformer one at a time. Which of them matter, and how much?
# Karpathy's lecture "Let's build GPT" {cite}`karpathy2023letsbuild` climbs that ladder on this very data and
# reports the validation loss of each rung, so we climb it again with his settings and put our numbers beside
# his. The first rung is a **bigram model**: a $65 \times 65$ table of logits whose row for the current
# character scores the next one, like the counted table of section 6.2 but trained by gradient descent
# (batch 32, block 8, learning rate $10^{-2}$, 3,000 steps). Every later rung has token and position
# embeddings of $D = 32$ dimensions and an output layer, and trains with batch 32, block 8 and learning rate
# $10^{-3}$ for 5,000 steps:
#
# 1. **one head of 32**: one causal attention head between the embeddings and the output layer;
# 2. **4 heads of 8**: the same 32 dimensions split into four heads, their outputs concatenated;
# 3. **+ feed-forward**: a `Linear(32, 32)` and a ReLU after attention, applied to each position on its own;
# 4. **3 blocks, no residual**: three such blocks in a row (the lecture stacks them before it adds residual
#    connections, and reports no number for this step);
# 5. **+ residual, projections, 4x FFN**: `x + attn(x)` and `x + mlp(x)`, with an output projection after
#    the heads and after a feed-forward network now four times wider, as in GPT-2;
# 6. **+ pre-LN LayerNorm**: before attention and before the feed-forward network in each block, and before
#    the output layer.
#
# The lecture then scales the last rung up (6 layers, 6 heads, $D = 384$, context 256, dropout 0.2, batch 64,
# learning rate $3 \times 10^{-4}$, 5,000 steps) and reports about 1.48 on a GPU; that rung runs here with
# `FULL_RUN = True`. The lecture's loop is plain: AdamW with PyTorch's defaults at a constant learning rate,
# no warm-up, no clipping, and the loss is the mean over 200 batches at the end. `gpt_from_scratch.book.ladder`
# builds every rung from the package's `MultiHeadAttention`, `FeedForward` and `LayerNorm`, leaving out
# what the rung does not have yet (the heads' output projection is an `nn.Identity` until rung 5), with
# PyTorch's default initialization and an untied output layer as in the lecture (its published `gpt.py`
# later added GPT-2's initialization); `train_rung` runs the lecture's loop. Rung 3, for instance:

# %%
print(LadderModel(V, RUNGS[2]))

# %% [markdown]
# **The budget.** The lecture's ladder is 3,000 + 6 × 5,000 steps per seed, and a step of a three-block rung
# takes milliseconds on a CPU (the cell below prints each rung's time): with 3 seeds, far more than the few
# minutes this whole chapter may take on 2 CPU cores. So on a CPU every rung trains for an eighth of the
# lecture's steps; `FULL_RUN = True` runs all of them, and adds the scaled-up rung. Either way every rung
# trains with 3 seeds (the scaled-up one with one: it takes minutes on a GPU), to show how much a result
# moves from seed to seed: fewer steps rather than fewer seeds, because a difference between two rungs means
# little until we know how far a rung moves with the seed alone. Each rung is scored once, at the end,
# on 200 validation batches as in the lecture (the same 200 for every rung of a seed). The cell prints each
# rung's time.

# %%
STEP_FRACTION = 1 if FULL_RUN else 8  # on a CPU, an eighth of the lecture's steps
SEEDS = [0, 1, 2]
probe, _ = get_batch(val_ids, 32, 8, generator=torch.Generator().manual_seed(0))  # (32, 8)
ladder = [(None, BIGRAM)] + [(rung, LadderConfig()) for rung in RUNGS]
if FULL_RUN:
    ladder.append((FINAL, FINAL_CONFIG))
results, spread = [], {}
for rung, cfg in ladder:
    name = "bigram (trained)" if rung is None else rung.name
    steps = cfg.max_iters // STEP_FRACTION
    losses, start = [], time.perf_counter()
    for seed in SEEDS[:1] if rung is FINAL else SEEDS:
        torch.manual_seed(seed)  # the initial weights
        net = BigramModel(V) if rung is None else LadderModel(V, rung, cfg)
        losses.append(train_rung(net, train_ids, val_ids, cfg, seed, DEVICE, steps))
    # How much the last seed's predictions depend on the input (KL from their mean, nats):
    spread[name] = prediction_spread(net, probe.to(DEVICE))
    published = BIGRAM_PUBLISHED if rung is None else rung.published
    results.append(dict(name=name, steps=steps, published_steps=cfg.max_iters,
                        published=published, val=losses))
    print(f"{name}: {len(losses)} x {steps:,} steps in {time.perf_counter() - start:.1f} s")

# %% [markdown]
# The validation losses, the lecture's beside ours (the mean ± standard deviation over the seeds, then each
# seed's):

# %% tags=["nbval-check-output"] tolerance={"abs": 0.05, "why": "measured over PyTorch's AVX-512, AVX2 and portable kernels with 1, 2 and 4 threads, each model trained under that arithmetic (scripts/arithmetic_spread.py): at most 0.02"}
ladder_frame(results)

# %% tags=["remove-input"]
Markdown(ladder_text(results, unigram_val, (bigram_train, bigram_val), spread))

# %% [markdown]
# Two measurements stand behind those sentences. The **unigram loss** of section 6.2 is what a model scores
# that predicts the training text's character frequencies whatever its input, so a rung that lands on it has
# learned those frequencies and nothing else. The **prediction spread** (`prediction_spread`, the last seed of each rung, on one
# validation batch) measures how far a rung's predictions move with what it reads: the mean KL divergence
# between each position's predicted distribution and their average, 0 for a model whose output never
# changes. Without residual connections the embeddings reach the output only through every attention and
# feed-forward layer in turn, and the spread shows how much of the input still arrives; with them, each block
# adds to a stream that carries the embeddings straight through ({ref}`ch-gpt` measured the gradients of a
# deep stack with and without them). On a CPU the runs are an eighth as long as the lecture's, so the
# losses above are not the lecture's. `FULL_RUN = True` runs the lecture's lengths, on a GPU; this page
# shows only the CPU runs, and reports no full-length result to compare with the lecture's.

# %% [markdown]
# **When LayerNorm pays.** The lecture credits pre-LN LayerNorm with a small gain (2.08 → 2.06), and
# the table above may not show one at all. LayerNorm rescales every block's input to one size, whatever the
# updates have done to the residual stream; that would matter most when the updates are large. So we train
# the last two rungs again, with the same steps, at ten times the lecture's learning rate, and compare them
# seed by seed: each seed trains both rungs on the same batches, so the difference of a pair is LayerNorm's
# effect plus less noise than two unrelated runs carry. A gain counts when the mean difference is more than
# two standard errors from zero, a bar that does not depend on one machine's rounding.

# %%
fast = LadderConfig(learning_rate=10 * LadderConfig().learning_rate)
fast_steps = fast.max_iters // STEP_FRACTION  # as many steps as the rungs above
FAST_SEEDS = [0, 1, 2, 3, 4, 5]  # twice the table's: a high learning rate is noisier
fast_results = []
for rung in RUNGS[-2:]:  # without LayerNorm, then with it
    losses = []
    for seed in FAST_SEEDS:
        torch.manual_seed(seed)
        net = LadderModel(V, rung, fast)
        losses.append(train_rung(net, train_ids, val_ids, fast, seed, DEVICE, fast_steps))
    fast_results.append(dict(name=rung.name, val=losses))
    print(f"learning rate {fast.learning_rate:g}, {rung.name}: "
          f"{', '.join(f'{v:.2f}' for v in losses)}")

# %% tags=["remove-input"]
lecture_pair = [next(r for r in results if r["name"] == rung.name) for rung in RUNGS[-2:]]
Markdown(layernorm_lesson(lecture_pair, fast_results, LadderConfig().learning_rate,
                          fast.learning_rate).text)

# %% [markdown]
# ## 6.5 The book's character model
#
# The model later chapters use is Chapter 5's GPT (the `shakespeare-char` preset), with the settings printed in
# section 6.3: nanoGPT's CPU configuration for Shakespeare-char (batch 12, a context of 64 characters, no
# dropout), which reaches about 1.88 in 2,000 steps {cite}`karpathy2023nanogpt`, with a learning rate three
# times higher and half as many steps again, so that the model writes the play's words and this chapter still
# runs in under 5 minutes on 2 CPU cores. `book_model` trains it once, with a fixed seed, and saves it in your
# cache folder (the cell prints how long that took); afterwards it loads the saved weights, checking their
# SHA-256 first, in a fraction of a second. Either way the weights are the same.

# %%
start = time.perf_counter()
char_model, char_tokenizer = book_model("shakespeare-char")
char_history = load_checkpoint(book_model_path("shakespeare-char")).history
print(f"ready in {time.perf_counter() - start:.1f} s")

# %% tags=["nbval-check-output"] tolerance={"abs": 0.05, "why": "measured over PyTorch's AVX-512, AVX2 and portable kernels with 1, 2 and 4 threads, each model trained under that arithmetic (scripts/arithmetic_spread.py): at most 0.02"}
seen = char_cfg.max_iters * char_cfg.batch_size * char_model.config.context_length
c = char_model.config
print(f"{c.n_layers} layers, {c.n_heads} heads, D = {c.d_model}, "
      f"context {c.context_length}: "
      f"{char_model.num_parameters():,} parameters")
passes = seen / len(train_ids)
print(f"{seen:,} characters drawn, {passes:.1f} passes over the training text")
hist = char_history
for step, tr, va in zip(hist.eval_step, hist.train_loss, hist.val_loss):
    print(f"step {step:5d}  train {tr:.2f}  val {va:.2f}")

# %% mystnb={"figure": {"caption": "Training the book's character model: the loss of every mini-batch (light), and the train and validation losses estimated every 500 steps.", "name": "fig-training-char-curves"}, "image": {"alt": "A noisy light curve of mini-batch losses falling from about 4.2 quickly, then slowly over the remaining steps to below 1.8. The train and validation estimates follow it closely, the validation points slightly above the training points at the end."}}
fig, ax = plt.subplots(figsize=(5.2, 3.8))
ax.plot(char_history.step, char_history.loss, color="lightgray", label="mini-batch loss")
hist = char_history
ax.plot(hist.eval_step, hist.train_loss, marker="o", label="train (estimate)")
ax.plot(hist.eval_step, hist.val_loss, marker="o", label="validation (estimate)")
ax.axhline(bigram_val, color="black", linestyle="--", linewidth=1, label="bigram table")
ax.set(xlabel="step", ylabel="loss (nats per character)",
       title="The book's character model", ylim=(1.4, 4.3))
ax.legend()
plt.show()

# %% tags=["remove-input"]
best, last = char_history.best_val_loss, char_history.val_loss[-1]
gap = char_history.val_loss[-1] - char_history.train_loss[-1]
memorizing = ("the model already predicts text it has seen better than new text, the first "
              "sign of memorizing" if gap > 0.1 else "too few to memorize it")
loss_bar = lesson(
    "the character model's best validation loss is at most 1.80", 1.80 - best, "nats",
    "That is below 1.80, the bar this book sets for a model that writes the play's words.",
    "That is above 1.80, the bar this book sets for a model that writes the play's words: "
    "a CPU that sums in another order trains another model from the same seed, and this "
    "one learned less in the same steps.")
Markdown(f"After {char_cfg.max_iters:,} steps the validation loss is {last:.2f} nats per "
         f"character (the lowest estimate, which `train` keeps, {best:.2f}), well below "
         f"the bigram table's {bigram_val:.2f}. {loss_bar.text} The training loss is "
         f"{char_history.train_loss[-1]:.2f}, after {passes:.1f} passes over the training "
         f"text: {memorizing}"
         + " (section 6.6 shows what memorizing looks like).")

# %% [markdown]
# `benchmarks/bench_train.py` trains nanoGPT {cite}`karpathy2023nanogpt`'s own 2,000 steps and
# compares the result with nanoGPT's, and our training speed with Hugging Face's. It also replays nanoGPT's own
# run with this book's model, optimizer and schedule, drawing its random numbers in nanoGPT's order, so that
# its losses can be compared with nanoGPT's number for number.
#
# What does a loss like that read like? {ref}`ch-generation` is about generating text; here is a first taste,
# 500 characters sampled after the prompt "ROMEO:" at temperature 0.8, nanoGPT's default (Chapter 7 explains
# the temperature). One repeatable measure of its spelling, though not of its sense, is the share of its
# words that are words of the training text (`real_word_share`): letters strung into words the play never
# uses score low, the play's words score high, whatever they mean. One sample can be lucky, so the cell also
# scores four more, drawn with other seeds:

# %%
train_text = split_text(load_tiny_shakespeare())[0]
codec = (char_tokenizer.encode, char_tokenizer.decode)
samples = [sample_text(char_model, *codec, seed=seed) for seed in (1337, 1, 2, 3, 4)]
cpu_sample = samples[0]
shares = [real_word_share(sample, train_text) for sample in samples]
print(cpu_sample)
print(f"\nreal words: {shares[0]:.0%} of this sample's; "
      f"{', '.join(f'{v:.0%}' for v in shares)} in five samples")

# %% tags=["remove-input"]
Markdown(real_words_lesson(shares, "the character model").text)

# %% [markdown]
# ```{admonition} The full-size run (FULL_RUN = True)
# On a GPU, the next cell trains nanoGPT's GPU configuration for Shakespeare-char, the `shakespeare-char-full`
# recipe: 6 layers, 6 heads, 384 dimensions, a context of 256 characters, dropout 0.2, batch 64, 5,000 steps,
# with the losses estimated on 200 batches every 250 steps, in bf16 with `torch.compile` (Chapter 7's last
# section). Such a model overfits before the end, so `train` keeps the weights of the lowest validation loss
# (`keep_best`, as nanoGPT does): the cell prints that best loss and its step beside the final one. It also
# trains the BPE model at the same size (`book_model(..., full=True)`). The same run from a terminal:
# `python -m gpt_from_scratch.book.cli --preset shakespeare-char-full --out runs/char-full`.
# On 2 CPU cores it would take many hours, so with `FULL_RUN = False` the cell only prints the settings.
# ```

# %% mystnb={"figure": {"caption": "With FULL_RUN = True only: the full-size run's train and validation losses; the dotted line marks the step whose weights train keeps, the lowest validation loss.", "name": "fig-training-full-run"}, "image": {"alt": "Two loss curves against training step falling together, then the validation curve turning up while the training curve keeps falling; a dotted vertical line at the validation minimum."}}
full = RECIPES["shakespeare-char-full"]
print("model:", full.model)
print("training:", full.train)
if FULL_RUN:
    torch.manual_seed(1337)
    full_model = GPT(GPTConfig(**full.model))
    start = time.perf_counter()
    full_cfg = TrainConfig(**full.train, device=DEVICE, compile=DEVICE == "cuda")
    full_history = train(full_model, train_ids, val_ids, full_cfg)
    print(f"{time.perf_counter() - start:.0f} s on {DEVICE}: {full_history.summary()}")
    fig, ax = plt.subplots(figsize=(5.2, 3.4))
    ax.plot(full_history.eval_step, full_history.val_loss, marker=".", label="validation")
    ax.plot(full_history.eval_step, full_history.train_loss, marker=".", label="training")
    ax.axvline(full_history.best_step, color="gray", linestyle=":", label="best (kept)")
    ax.set(xlabel="step", ylabel="loss (nats)")
    ax.legend()
    plt.show()
    start = time.perf_counter()
    book_model("shakespeare-bpe", full=True)  # trained once, then cached like the others
    bpe_full = load_checkpoint(book_model_path("shakespeare-bpe", full=True)).history
    print(f"BPE model, full size: {time.perf_counter() - start:.0f} s, "
          f"{bpe_full.summary()}")

# %% [markdown]
# ### The reference run
#
# `make reference-runs` trains the full-size run on a GPU, and the ladder at the lecture's full step
# counts, and writes their weights, losses, a sample and the ladder's table, with a manifest of the
# SHA-256 of every file. `reference_run(name)` finds such a folder in `$GPT_FROM_SCRATCH_DATA/reference`
# or the cache, or downloads the published copy where the package pins one, and checks every file
# against the manifest. The cell below looks for them:

# %%
try:
    ref_char, ref_ladder = reference_run("shakespeare-char-full"), reference_run("ladder")
except ReferenceUnavailable as err:
    ref_char = ref_ladder = None
    print(err)

# %% tags=["remove-input"]
display(Markdown(found_text(
    {"shakespeare-char-full": ref_char, "ladder": ref_ladder},
    "the two validation curves, the two samples of 500 characters after \"ROMEO:\" with "
    "their shares of real words, and the ladder of section 6.4 at the lecture's step "
    "counts")))

# %%
if ref_char is not None:
    print(f"This chapter's model: {shares[0]:.0%} real words\n{cpu_sample}")
    print(f"\nThe reference run: {ref_char.info['real_words']:.0%} real words\n"
          f"{ref_char.info['sample']}")

# %% tags=["remove-input"]
if ref_char is not None:
    display(Markdown(run_text(ref_char.info, char_history.best_val_loss,
                              RECIPES["shakespeare-char"].train["max_iters"])))
    loss_curves(ref_char.info, char_history)
    plt.show()

# %% tags=["remove-input"]
if ref_ladder is not None:
    rows = ref_ladder.info["tables"]["ladder"]
    seeds, last_seeds = len(rows[1]["val"]), len(rows[-1]["val"])
    display(Markdown(f"The ladder of section 6.4 at the lecture's step counts, from the "
                     f"reference run, the lecture's numbers beside it ({seeds} seeds a "
                     f"rung, the scaled-up rung {last_seeds}):"))
    display(ladder_frame(rows))
    display(Markdown(ladder_text(rows, unigram_val, (bigram_train, bigram_val))))

# %% [markdown]
# ## 6.6 Overfitting and dropout
#
# The validation loss is what we care about: how well the model predicts text it has never seen. The training
# loss can also fall by memorizing the training text, which does not help on new text. With a million training
# characters and 3,000 steps our model sees each character only a few times (section 6.5 printed how often).
# To watch memorization happen, give the same model only the first 2,000 characters and train it for 300 steps:

# %%
small_train = train_ids[:2_000]
overfit_cfg = TrainConfig(max_iters=300, batch_size=8, learning_rate=1e-3, min_lr=1e-4,
                          warmup_iters=30, eval_interval=50, eval_iters=5, device=DEVICE,
                          progress=False)
seen = overfit_cfg.max_iters * overfit_cfg.batch_size * 64
print(f"{seen:,} characters drawn from a text of {len(small_train):,}: "
      f"about {seen / len(small_train):.0f} passes")
overfit = {}
for dropout in (0.0, 0.2):
    torch.manual_seed(0)
    net = GPT(GPTConfig.from_preset("shakespeare-char", dropout=dropout))
    overfit[dropout] = train(net, small_train, val_ids, overfit_cfg)

# %% tags=["nbval-check-output"]
for dropout, h in overfit.items():
    best = int(np.argmin(h.val_loss))
    print(f"dropout {dropout}: lowest val loss {h.val_loss[best]:.2f} "
          f"at step {h.eval_step[best]}; "
          f"at the end train {h.train_loss[-1]:.2f}, val {h.val_loss[-1]:.2f}")

# %% mystnb={"figure": {"caption": "The book's model trained on only 2,000 characters. Without dropout (top) the training loss keeps falling while the validation loss turns back up: overfitting. With dropout 0.2 (bottom) the gap opens more slowly.", "name": "fig-training-overfit"}, "image": {"alt": "Two panels of loss against step. Top, without dropout: the training curve falls steadily; the validation curve falls, reaches a minimum and then rises, so the two curves separate widely. Bottom, with dropout 0.2: the training curve falls more slowly and the validation curve stays lower at the end than in the top panel."}}
fig, axes = plt.subplots(2, 1, figsize=(5.2, 6.5), sharex=True, sharey=True)
for ax, (dropout, h) in zip(axes, overfit.items()):
    ax.plot(h.eval_step, h.train_loss, marker=".", label="train")
    ax.plot(h.eval_step, h.val_loss, marker=".", label="validation")
    ax.set(ylabel="loss (nats per character)", title=f"dropout {dropout}")
axes[-1].set_xlabel("step")
axes[0].legend()
plt.show()

# %% [markdown]
# Without dropout the two curves part quickly: the validation loss is lowest at step 50 (2.96) and then climbs
# back (3.29 at the end), while the training loss keeps falling, to 1.55. The model is memorizing those 2,000
# characters, and what it memorizes does not carry over to new text. **Dropout** {cite}`srivastava2014dropout`
# zeroes a random 20% of the activations at each training step (GPT-2 drops at the embeddings, the attention
# weights and each residual branch, and scales the kept ones up by 1/(1 − p), here 1/0.8), so the model cannot rely on any single
# feature and memorizes more slowly: the training loss ends higher (1.87) and the validation loss ends lower (3.12).
# Its best validation loss is no better (2.98), though: dropout slows memorization down, it does not make 2,000
# characters teach more. With the whole training text and 3,000 steps our model is far from this regime, which
# is why the book's models use no dropout (nanoGPT's choice for this configuration).
#
# ## 6.7 The same model on GPT-2's tokens
#
# Chapter 8 compares our model with GPT-2, which reads GPT-2 tokens, so the book also trains the same network
# (4 layers, 128 dimensions, context 64) on the BPE tokens of {ref}`ch-bpe`. The text becomes
# about three times shorter in tokens, and the vocabulary goes from 65 to 50,257:

# %% tags=["nbval-check-output"]
bpe_train, bpe_val, encoding = bpe_level_data()
print(f"{len(bpe_train):,} training and {len(bpe_val):,} validation tokens; "
      f"{len(val_ids) / len(bpe_val):.2f} characters per token in the validation text")
bpe_config = GPTConfig(**RECIPES["shakespeare-bpe"].model)
torch.manual_seed(0)
bpe_net = GPT(bpe_config)
embedding = bpe_net.wte.weight.numel()
n_params = bpe_net.num_parameters()
print(f"{n_params:,} parameters, of which the "
      f"{bpe_config.vocab_size:,} x {bpe_config.d_model} "
      f"token embedding (tied with the output layer) is {embedding:,} "
      f"({embedding / n_params:.0%})")
L, D = bpe_config.n_layers, bpe_config.d_model
print(f"multiply-adds per token: blocks about 12 L D^2 = {12 * L * D**2:,}, "
      "output layer D V = "
      f"{D * bpe_config.vocab_size:,}")

# %% [markdown]
# The embedding table costs nothing to *use* at the input (a row lookup per token). The output layer is
# another matter: it maps every position's $D = 128$ numbers to 50,257 logits, a $128 \times 50{,}257$ matrix
# product followed by a softmax over 50,257 entries, forwards and backwards. That cost comes from the size of
# the vocabulary, not from the weight tying: tying only makes the output layer reuse the embedding's matrix
# instead of having its own, and an untied model would do the same product. Per token it is eight times the
# multiply-adds of all four blocks together (the count printed above: $4D^2$ for attention's projections and
# $8D^2$ for the MLP, per block). Timing one training step shows the share:

# %%
xb, yb = get_batch(bpe_train, 8, 64, generator=torch.Generator().manual_seed(0))  # (8, 64)
# What the blocks would hand over:
hidden = torch.randn(8, 64, bpe_config.d_model, requires_grad=True)


def whole_step():
    _, loss = bpe_net(xb, yb)
    loss.backward()


def output_layer_only():  # ln_f, lm_head and the cross-entropy, forward and backward
    logits = bpe_net.lm_head(bpe_net.ln_f(hidden))  # (B, T, V)
    F.cross_entropy(logits.flatten(0, 1), yb.flatten()).backward()


def median_seconds(fn, repeats=5):
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


t_all, t_out = median_seconds(whole_step), median_seconds(output_layer_only)
print(f"forward + backward of a batch of 8 x 64 tokens: {1000 * t_all:.0f} ms, "
      "of which the output layer "
      f"{1000 * t_out:.0f} ms ({t_out / t_all:.0%})")

# %% [markdown]
# On a CPU, the output layer is most of the time of a training step. On a GPU this large matrix product is
# exactly what the hardware is good at; on two CPU cores it makes each step of the BPE model several times
# slower than a step of the character model, for the same blocks. (GPT-2 itself spends a smaller share there:
# its blocks are far wider.)
#
# So the book's BPE model gets a smaller budget, printed below with its losses: fewer steps of fewer windows.
# `book_model` trains it, or loads it when it is cached, and the cell prints how long that took:

# %%
start = time.perf_counter()
bpe_model, bpe_encoding = book_model("shakespeare-bpe")
bpe_history = load_checkpoint(book_model_path("shakespeare-bpe")).history
print(f"ready in {time.perf_counter() - start:.1f} s")

# %% tags=["nbval-check-output"] tolerance={"abs": 0.05, "why": "measured over PyTorch's AVX-512, AVX2 and portable kernels with 1, 2 and 4 threads, each model trained under that arithmetic (scripts/arithmetic_spread.py): at most 0.01"}
chars_per_token = len(val_ids) / len(bpe_val)
bpe_cfg = TrainConfig(**RECIPES["shakespeare-bpe"].train)
drawn = bpe_cfg.max_iters * bpe_cfg.batch_size * bpe_config.context_length
print(f"{bpe_cfg.max_iters} steps of {bpe_cfg.batch_size} windows: {drawn:,} tokens drawn, "
      f"{drawn / len(bpe_train):.0%} of the training tokens, "
      f"about {drawn * chars_per_token:,.0f} characters")
hist = bpe_history
for step, tr, va in zip(hist.eval_step, hist.train_loss, hist.val_loss):
    print(f"step {step:4d}  train {tr:.2f}  val {va:.2f}")
bpe_final = bpe_history.val_loss[-1]
print(f"per character: BPE model {bpe_final / chars_per_token:.2f} nats, "
      f"character model {char_history.val_loss[-1]:.2f} nats, "
      f"bigram table {bigram_val:.2f} nats (ln 50257 = {math.log(50257):.2f})")

# %% tags=["remove-input"]
per_char, char_final = bpe_final / chars_per_token, char_history.val_loss[-1]
char_seen = char_cfg.max_iters * char_cfg.batch_size * char_model.config.context_length
bpe_chars = drawn * chars_per_token
falling = "still falling" if hist.val_loss[-1] < hist.val_loss[-2] else "no longer falling"
lower = "lower" if per_char < char_final else "higher"
display(Markdown(
    f"After {hist.eval_step[-1]} steps the validation loss is {bpe_final:.2f} nats per "
    f"token, {falling}. The two models' losses are in different units: a BPE token is "
    f"{chars_per_token:.2f} characters on average, so {bpe_final:.2f} nats per token are "
    f"{per_char:.2f} nats per character, {lower} than the character model's "
    f"{char_final:.2f}, with {bpe_chars / char_seen:.0%} of the characters seen ({drawn:,} "
    f"tokens, about {bpe_chars:,.0f} characters, against {char_seen:,})."))

# %% [markdown]
# Each BPE token arrives with its spelling already solved. Its sample is
# built from GPT-2's tokens, whole words and pieces of words: common words come out whole, but strung together
# with little grammar yet, and rare pieces glue into non-words ("myINGSle", "likeraham"). The character model
# spells its own words.

# %%
prompt = torch.tensor([bpe_encoding.encode("ROMEO:")])  # (1, T)
sample = generate(bpe_model, prompt, max_new_tokens=60,
                  generator=torch.Generator().manual_seed(1337))
print(bpe_encoding.decode(sample[0].tolist()))

# %% [markdown]
# ## 6.8 Checkpoints, resuming and the command line
#
# A checkpoint is a folder: `model.safetensors` (the weights), `optimizer.safetensors` (AdamW's two running
# averages and step count for every weight) and `checkpoint.json` (the model and training configurations, the
# step, the history, and the SHA-256 of the two other files). safetensors stores plain tensors, no pickled
# Python objects, so loading a checkpoint can never run code. It also refuses to store one tensor under two
# names, which is what tied weights are: `save_checkpoint` stores `wte.weight` once, records that
# `lm_head.weight` is the same tensor, and `load_checkpoint` ties them again. Each file is written to a
# temporary name and renamed into place, so a crash never leaves half a file. Beside them, `train` writes
# the subfolder `best`, a checkpoint of the weights with the lowest validation loss so far (without the
# optimizer), and by default ends with those weights (`keep_best`): a model trained past the point where
# it starts to overfit is not the one you want to keep.
#
# Because each step's batch and dropout masks depend only on `(seed, step)`, a run stopped at step 20 and
# resumed from its checkpoint takes exactly the steps an uninterrupted run would. One thing must not change
# between the two: the learning-rate schedule. By default the cosine ends at `max_iters`, so a run meant to be
# resumed later names its end with `lr_decay_iters`. (Resuming with a larger `max_iters` and no
# `lr_decay_iters` is allowed: it stretches the rest of the schedule, which is what you want when you decide
# to train longer.)

# %% tags=["nbval-check-output"]
tiny = dict(vocab_size=65, context_length=32, d_model=32, n_layers=2, n_heads=2,
            dropout=0.1)
resume_cfg = TrainConfig(max_iters=40, lr_decay_iters=40, batch_size=8, warmup_iters=5,
                         eval_interval=20, eval_iters=2, progress=False)
torch.manual_seed(0)
uninterrupted = train(GPT(GPTConfig(**tiny)), train_ids, val_ids, resume_cfg)
with tempfile.TemporaryDirectory() as folder:
    torch.manual_seed(0)
    # Stops at step 20, with the same schedule (lr_decay_iters=40):
    stopped = dataclasses.replace(resume_cfg, max_iters=20)
    train(GPT(GPTConfig(**tiny)), train_ids, val_ids, stopped, out_dir=folder)
    print(sorted(p.name for p in Path(folder).iterdir()))
    fresh = GPT(GPTConfig(**tiny))  # any weights: they all come from the checkpoint
    resumed = train(fresh, train_ids, val_ids, resume_cfg, out_dir=folder, resume=True)
print("losses of steps 20-39 identical:", resumed.loss[20:] == uninterrupted.loss[20:])
print(f"final val loss {resumed.val_loss[-1]:.4f} and {uninterrupted.val_loss[-1]:.4f}")

# %% [markdown]
# The same loop runs from a terminal. Every field of `TrainConfig` and `GPTConfig` can be overridden:
#
# ```bash
# python -m gpt_from_scratch.book.cli --preset shakespeare-char --max-iters 5000 --lr 6e-4 --out runs/char
# python -m gpt_from_scratch.book.cli --preset shakespeare-char --max-iters 8000 --out runs/char --resume
# ```
#
# With several GPUs, or several CPU processes, `torchrun` starts one process per device and `train` wraps the
# model in PyTorch's `DistributedDataParallel`: each process draws its own batches, the gradients are averaged
# across processes during `backward`, and every process applies the same update, so the copies stay identical
# (the command checks this at the end):
#
# ```bash
# torchrun --standalone --nproc_per_node 2 -m gpt_from_scratch.book.cli --preset shakespeare-char
# ```
#
# ## Summary
#
# - A language model's loss is the cross-entropy of its next-token predictions, averaged over all $B \times T$
#   positions of a batch; an untrained GPT starts near $\ln V$ (4.17 for 65 characters).
# - A counted bigram table scores 2.48 nats per character on validation text. On the training text nothing
#   that sees only the previous character can beat it; on validation text a model with context can. A loss
#   equal to the unigram loss (3.35) means the output ignores the input.
# - Same seed, same numbers: `seed_everything` seeds every generator; on a GPU, deterministic kernels
#   (`torch.use_deterministic_algorithms`, `CUBLAS_WORKSPACE_CONFIG`) are needed too. Pinned memory saves
#   the copy of a batch to the GPU a staging hop, and lets `non_blocking=True` run it asynchronously.
# - The loop: AdamW with weight decay on matrices only, linear warm-up then cosine decay, gradient clipping at 1.
#   `estimate_loss` scores fixed batches of both splits; `train` records a `History`.
# - Karpathy's ladder, rerun with his settings and 3 seeds: the table of section 6.4 puts every rung beside
#   his number, and the sentences under it say, from the measured losses, which rungs help and which go the
#   other way. LayerNorm's gain, hidden at the lecture's learning rate in a short run, shows at ten times it.
# - On a CPU, 3,000 steps bring the book's character model to the validation loss section 6.5 prints, and most
#   of the words it writes are the play's; 100 steps bring the same network on GPT-2's tokens to 1.99 nats per
#   character, more than the character model's (section 6.7).
# - Overfitting shows as a validation loss that rises while the training loss falls; dropout slows it.
# - On a CPU, a 50,257-token vocabulary makes the output layer most of the work.
# - Checkpoints are safetensors plus JSON, written atomically, verified by SHA-256, and resume exactly;
#   `python -m gpt_from_scratch.book.cli` and `torchrun` run the same loop from a terminal.

# %% tags=["remove-cell", "nbval-check-output"]
print(verdicts())

# %% [markdown]
# ## Exercises
#
# ### Exercise 1. Two reference losses (predict, then run)
#
# An untrained GPT with GPT-2's vocabulary starts near $\ln V$ nats per *token*. Section 6.7
# compared models per *character*: is the untrained BPE model, counted per character of the
# validation text, better or worse than the untrained character model's $\ln 65 = 4.17$?
# And a model that puts probability 1/2 on the right token every time: what does it score
# per token and per character? Write your answers down, then run the cell after the answer.

# %% [markdown] tags=["answer"]
# ```{admonition} Answer
# :class: dropdown
# Per token, the untrained model pays $\ln 50{,}257 \approx 10.82$ nats; the validation text
# has 3.09 characters per token, so that is about $10.82 / 3.09 \approx 3.50$ nats per
# character, *better* than the character model's 4.17 before any training. A uniform guess
# over tokens is not a uniform guess over characters: every token is a string that occurs in
# real text, so the vocabulary itself already knows something about English. Probability
# 1/2 every time gives $-\ln(1/2) = \ln 2 \approx 0.69$ nats per token, about $0.69 / 3.09
# \approx 0.22$ per character: the same confidence is worth far less per character when each
# token covers three of them.
# ```

# %%
print(f"untrained, V = 50,257: {math.log(50257):.2f} nats")
print(f"probability 1/2 every time: {math.log(2):.2f} nats")

# %% [markdown]
# ### Exercise 2. Cross-entropy by hand (implement)
#
# Write `cross_entropy_by_hand(logits, targets)` for logits of shape $(B, T, V)$ and targets
# $(B, T)$: subtract each row's maximum (for numerical stability), take the log of the sum
# of exponentials, and pick the targets' logits with `gather`; return the mean over the $B
# \times T$ positions. Calling `F.cross_entropy`, `log_softmax`, `logsumexp` or `nll_loss`
# fails the check, whose cases include logits large enough to overflow `exp` without the
# maximum.

# %% tags=["solution", "hide-input"] mystnb={"code_prompt_show": "Show the solution", "code_prompt_hide": "Hide the solution"}
def cross_entropy_by_hand(logits, targets):
    z = logits - logits.max(dim=-1, keepdim=True).values  # (B, T, V): largest is 0
    log_sum_exp = torch.log(torch.exp(z).sum(dim=-1))  # (B, T)
    target_logit = z.gather(-1, targets[..., None])[..., 0]  # (B, T)
    return (log_sum_exp - target_logit).mean()


# %%
from gpt_from_scratch.exercises import check_cross_entropy

check_cross_entropy(cross_entropy_by_hand);

# %% [markdown]
# ### Exercise 3. Warm-up (predict, then run)
#
# The cell after the answer trains the book's character model (the `shakespeare-char`
# preset) for the first 100 steps of a 300-step schedule: batches of 16 windows of 32
# characters, a learning rate of $3 \times 10^{-3}$ after 30 warm-up steps. Then it trains it
# again with $10^{-2}$ instead, once with the 30 warm-up steps and once without any. Predict
# the order of the three validation losses at step 100. Then predict what `grad_clip=0.0`
# changes in the run without warm-up (the cell's fourth run).

# %% [markdown] tags=["answer"]
# ```{admonition} Answer
# :class: dropdown
# The first settings end lowest, the higher rate with warm-up about a tenth of a nat higher,
# and the higher rate without warm-up far higher, about half a nat (the cell below prints
# the four losses; their second decimal can move with the machine and its number of
# threads). Its first steps at the full rate, on random weights and with Adam's running
# averages still empty, throw the model into a poor region it has not left by step 100.
# Clipping does not bound those steps: Adam divides each gradient by its own running size, so
# its first update moves every weight by about the learning rate, $\text{lr} \cdot
# \operatorname{sign}(g)$, whatever the gradient's norm. The learning rate bounds them, which is
# what warm-up lowers. The cell's last run turns clipping off as well (`grad_clip=0.0`): it ends
# higher still, since clipping tames the occasional large gradient later on, but the large gap
# is the one warm-up closes.
# ```

# %% tags=["nbval-check-output"] tolerance={"abs": 0.05, "why": "measured over PyTorch's AVX-512, AVX2 and portable kernels with 1, 2 and 4 threads, each model trained under that arithmetic (scripts/arithmetic_spread.py): at most 0.01"}
warm_cfg = TrainConfig(max_iters=100, lr_decay_iters=300, batch_size=16, block_size=32,
                       learning_rate=3e-3, min_lr=3e-4, warmup_iters=30, eval_interval=50,
                       eval_iters=10, device=DEVICE, progress=False)
high = dict(learning_rate=1e-2, min_lr=1e-3)
runs = {"lr 3e-3, warm-up 30": {}, "lr 1e-2, warm-up 30": high,
        "lr 1e-2, no warm-up": {**high, "warmup_iters": 0},
        "lr 1e-2, no warm-up, no clipping": {**high, "warmup_iters": 0, "grad_clip": 0.0}}
for name, changes in runs.items():
    torch.manual_seed(0)
    net = GPT(GPTConfig.from_preset("shakespeare-char"))
    h = train(net, train_ids, val_ids, dataclasses.replace(warm_cfg, **changes))
    print(f"{name}: {h.val_loss[-1]:.2f}")

# %% [markdown]
# ### Exercise 4. Weight decay and unused tokens (explain)
#
# In the BPE model of section 6.7 the tied token embedding is 6,432,896 of the 7,234,432
# parameters, and many of its 50,257 rows belong to tokens that never occur in Tiny
# Shakespeare. Which gradient do those rows receive, if any, and what does Adam do with it?
# What does weight decay add, and what would those rows become without it?

# %% [markdown] tags=["answer"]
# ```{admonition} Answer
# :class: dropdown
# As inputs they receive nothing: no batch ever looks them up. As rows of the tied output
# layer they receive a gradient at every position, always the same push, "lower this
# logit", since they are never the target. Adam divides by the running size of the gradient,
# so even a tiny but consistent push moves them by about the full learning rate at every
# step. Without decay nothing pulls back, and the rows drift ever further along that push,
# their norms growing with training. Decoupled decay shrinks every row by $\text{lr} \times
# \lambda$ of itself at each step, a force towards zero that grows with the row, so the rows
# of unused tokens settle at a bounded size instead of drifting.
# ```

# %% [markdown]
# ### Exercise 5. Overfitting (explain)
#
# In section 6.6, how would the curves change with 20,000 training characters instead of
# 2,000? With a model of 2 layers instead of 4?

# %% [markdown] tags=["answer"]
# ```{admonition} Answer
# :class: dropdown
# More data delays overfitting: the validation minimum comes later and is lower. A smaller
# model memorizes more slowly, so the gap opens later too, but its best validation loss is
# usually higher.
# ```

# %% [markdown] tags=["quiz"]
# ## Check yourself
#
# A few questions on this chapter, each answer with its explanation. The numbers in them
# are the ones this chapter printed.

# %% tags=["quiz", "remove-input"]
from gpt_from_scratch.book.quiz import Choice, MultipleChoice, Numeric, show_quiz

show_quiz([
    Numeric("What validation loss does the bigram table reach? (Nats, two decimals.)",
            bigram_val, 0.006, "The floor a model that sees one character must beat."),
    MultipleChoice("An untrained model's loss is close to ln 65 ≈ 4.17 nats because:", [
        Choice("its predictions are nearly uniform over the 65 characters", True,
               "Yes: -ln(1/65) = ln 65."),
        Choice("65 steps of training have run", False,
               "No: the loss is measured before any step."),
        Choice("the loss is the number of wrong characters", False,
               "No: it is the mean negative log-probability of the right one."),
    ]),
    MultipleChoice("In this chapter's short ladder runs, where did LayerNorm lower the "
                   "loss by more than the seeds' spread?", [
        Choice("at ten times the lecture's learning rate", True,
               "Yes: it keeps each block's input at one scale when the updates are large."),
        Choice("nowhere: LayerNorm only matters in much deeper models", False,
               "No: section 6.4's second run, at ten times the learning rate, shows it."),
    ]),
    MultipleChoice("To resume training exactly where it stopped, this chapter's checkpoint "
                   "needs:", [
        Choice("the weights, the optimizer's state and the step", True,
               "Yes: each step's batch and dropout masks follow from (seed, step), so the "
               "resumed run took exactly the uninterrupted run's steps."),
        Choice("those and the random generators' states", False,
               "Not here: no generator's state is saved, since nothing is drawn from a "
               "running generator. A loop that did draw from one would need it."),
        Choice("the weights only", False,
               "No: AdamW's moments and the learning-rate schedule would restart."),
    ]),
])
