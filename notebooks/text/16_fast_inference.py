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
# (ch-fast-inference)=
# # 16. Fast inference, proven exact
#
# {ref}`ch-generation` generated text one token at a time, with a cache of keys and values.
# Serving a model fast rests on four more ideas, and three of them change *how* the numbers
# are computed without changing *what* is computed. This chapter writes each from scratch,
# proves it exact (or measures what it costs), and says what a CPU run can and cannot show:
#
# 1. **tiled attention**: the softmax computed block by block with a running maximum, as
#    FlashAttention does: the same output, without the $T \times T$ scores in memory;
# 2. **speculative decoding**: a small draft model guesses, the book's model checks several
#    guesses in one forward pass, and an accept/reject rule keeps the target's own output;
# 3. **weight-only quantization**: weights stored as 8-bit (or 4-bit) integers and a scale,
#    and what that costs in Chapter 11's bits per byte;
# 4. **a paged KV cache**: keys and values in fixed-size blocks from one pool, as vLLM
#    serves many requests of different lengths.
#
# A CPU run proves the four exact (or measures their cost) but cannot show their speed on
# the hardware they were made for. With `FULL_RUN = True`, section 16.5 times all four
# beside PyTorch's own where it has one (SDPA's flash kernel, `generate`, torchao's int8
# weights); on a GPU, its lines are this chapter's only GPU measurements.

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
import math
import os
import time

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from IPython.display import Markdown, display

from gpt_from_scratch.attention import scaled_dot_product_attention
from gpt_from_scratch.evaluate import model_bits_per_byte, text_kl
from gpt_from_scratch.generate import generate
from gpt_from_scratch.kv_memory import kv_cache_memory, slot_bytes
from gpt_from_scratch.model import GPT, GPTConfig
from gpt_from_scratch.paged_cache import paged_generate
from gpt_from_scratch.quantize import (QuantizedLinear, model_bytes, quantize_model,
                                       weight_error)
# Three modules by name: the exercises write their own accept_or_resample,
# online_softmax_step and absmax_quantize.
from gpt_from_scratch import quantize
from gpt_from_scratch import speculative
from gpt_from_scratch import tiled_attention as tiling
from gpt_from_scratch.speculative import (RollbackKVCache, sampling_probabilities,
                                          speculative_generate)
from gpt_from_scratch.tiled_attention import (attention_memory, measure_peak_bytes,
                                              tiled_attention)
from gpt_from_scratch.train import train
from gpt_from_scratch.train_config import TrainConfig
from gpt_from_scratch.book import lessons
from gpt_from_scratch.book import fast_prose as prose
from gpt_from_scratch.book import pearson
from gpt_from_scratch.book.figure_text import book_figures
from gpt_from_scratch.book.recipes import RECIPES, book_model, char_level_data

book_figures()  # sharp on high-density screens, each PNG records its smallest text
os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # the profiler's own log lines, off
torch.set_printoptions(precision=3, sci_mode=False)

# FULL_RUN = False: everything runs on the CPU. FULL_RUN = True (on a GPU): section 16.5
# times the four techniques beside PyTorch's own (on a CPU: a rehearsal at tiny sizes).
FULL_RUN = False
SEED = 0
chapter_start = time.perf_counter()
train_ids, val_ids, tok = char_level_data()

# %% [markdown]
# ## 16.1 Tiled attention and the online softmax
#
# Attention as {ref}`ch-attention` wrote it computes all $T_q \times T_k$ scores
# $s_j = q \cdot k_j / \sqrt{d}$ of a query, takes their softmax and the weighted sum of the
# values. The softmax needs every score before it can start: its denominator sums them all,
# and for stability each score is first lowered by the row's maximum $m$. The *online
# softmax* {cite}`milakov2018online` computes that denominator in one pass over the scores,
# and FlashAttention {cite}`dao2022flashattention` carries the output along. Read the keys
# in blocks, and keep per query the largest score $m$ so far, the sum $\ell$ of
# $e^{s_j - m}$ over the scores seen, and the unnormalized output
# $\mathbf{a} = \sum_j e^{s_j - m} \mathbf{v}_j$. When a block of scores arrives with a
# larger maximum $m' = \max(m, \max_j s_j)$, the old sums were taken against $m$;
# multiplying them by $e^{m - m'}$ puts them against $m'$:
#
# $$\ell' = e^{m - m'}\,\ell + \sum_{j \in \text{block}} e^{s_j - m'}, \qquad
# \mathbf{a}' = e^{m - m'}\,\mathbf{a} + \sum_{j \in \text{block}} e^{s_j - m'}\,
# \mathbf{v}_j.$$
#
# After the last block, $\mathbf{a} / \ell$ is exactly $\operatorname{softmax}(s)\,V$: each
# term carries $e^{s_j - m_{\text{final}}}$, whatever block it came in. Keeping
# $\mathbf{a}$ unnormalized and dividing once at the end is FlashAttention-2's form
# {cite}`dao2023flashattention2`; the first FlashAttention divided at every step. Both run
# this loop on a GPU with each block of queries, keys and values in the chip's fast on-chip
# memory, so the scores never travel to the GPU's main memory. The update's body, from
# `tiled_attention.py`:

# %%
source = inspect.getsource(tiling.online_softmax_step)
print(source[source.index("    m_new"):])  # the lines after the docstring

# %% [markdown]
# `tiled_attention` loops over blocks of 64 queries, and for each over blocks of 64 keys,
# skipping the key blocks that a causal mask hides entirely. Against PyTorch's
# `F.scaled_dot_product_attention`, causal and not, for 2 sequences of 200 tokens and 4
# heads of 32 dimensions, beside a tiled loop that forgets to rescale $\mathbf{a}$ (the
# denominator is rescaled, the output is not):

# %%
def tiled_without_rescale(q, k, v, block=64):
    """The online softmax, not causal, with one slip: acc is not rescaled."""
    m = q.new_full((*q.shape[:-1], 1), float("-inf"))
    l, acc = torch.zeros_like(m), torch.zeros_like(q)
    for start in range(0, k.size(-2), block):
        k_block = k[..., start:start + block, :]
        scores = q @ k_block.transpose(-2, -1) / math.sqrt(q.size(-1))
        m_new = torch.maximum(m, scores.amax(-1, keepdim=True))
        p = torch.exp(scores - m_new)
        l = torch.exp(m - m_new) * l + p.sum(-1, keepdim=True)
        acc = acc + p @ v[..., start:start + block, :]  # the slip: no exp(m - m_new)
        m = m_new
    return acc / l


g = torch.Generator().manual_seed(SEED)
B, H, T, d = 2, 4, 200, 32
differences = {}
for dtype in (torch.float32, torch.float64):
    q, k, v = (torch.randn(B, H, T, d, generator=g, dtype=dtype) for _ in range(3))
    for causal in (False, True):
        ours = tiled_attention(q, k, v, causal=causal)
        theirs = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        differences[dtype, causal] = (ours - theirs).abs().max().item()
        print(f"{str(dtype):<14} causal={causal!s:<5}: largest difference "
              f"{differences[dtype, causal]:.1e}")
slip = (tiled_without_rescale(q, k, v) - F.scaled_dot_product_attention(q, k, v))
print(f"without rescaling acc (float64): {slip.abs().max():.1e}")

# %% tags=["remove-input"]
found = [prose.tiled_lesson(max(differences[torch.float64, c] for c in (False, True)),
                            max(differences[torch.float32, c] for c in (False, True)),
                            slip.abs().max().item())]
display(Markdown(found[-1].text))

# %% [markdown]
# **Memory.** The written-out attention keeps the $T \times T$ scores, and the softmax
# beside them; the tiled loop keeps one block of $64 \times 64$ scores, the block's queries,
# and $m$, $\ell$, $\mathbf{a}$, whatever $T$ is. `attention_memory` gives both by formula;
# `measure_peak_bytes` measures the most bytes of tensors alive at once while a call runs,
# from PyTorch's profiler. One head of 64 dimensions, not causal, each measured here:
# `attention.scaled_dot_product_attention`, the written-out one, and `tiled_attention`. For
# the written-out attention, its scores by formula and its whole measured peak (scores,
# softmax and output); for the tiled one, its working set by formula, the same measured (the
# peak less its output and log-sum-exp, $T (d + 1)$ numbers), and its whole peak:

# %%
memory_rows = []
print(f"{'':>5} {'written out, MiB':>17} {'tiled, KiB':>23}")
print(f"{'T':>5} {'scores':>8} {'peak':>8} {'working':>7} {'beyond':>7} {'peak':>7}")
for T in (256, 512, 1024, 2048):
    q, k, v = (torch.randn(1, 1, T, 64, generator=g) for _ in range(3))
    formula = attention_memory(T, 64, 64, 64)
    naive = measure_peak_bytes(lambda: scaled_dot_product_attention(q, k, v))
    tiled = measure_peak_bytes(lambda: tiled_attention(q, k, v, causal=False))
    beyond = tiled - T * (64 + 1) * 4  # less the output (T, 64) and lse (T,), float32
    memory_rows.append((T, naive, tiled, beyond))
    print(f"{T:>5} {formula.naive_bytes / 2**20:>8.2f} {naive / 2**20:>8.2f} "
          f"{formula.tiled_bytes / 2**10:>7.0f} {beyond / 2**10:>7.0f} "
          f"{tiled / 2**10:>7.0f}")
print("working: by formula; beyond: measured, the peak less the output")
times = {}
for name, attend in (("written out", lambda: scaled_dot_product_attention(q, k, v)),
                     ("tiled", lambda: tiled_attention(q, k, v, causal=False))):
    runs = []
    for _ in range(3):
        start = time.perf_counter()
        attend()
        runs.append(time.perf_counter() - start)
    times[name] = 1e3 * sorted(runs)[1]
print(f"T = {T:,}, one head, the median of 3: written out {times['written out']:.0f} ms, "
      f"tiled {times['tiled']:.0f} ms")

# %% tags=["remove-input"] mystnb={"figure": {"caption": "Peak memory of one head's attention against the sequence length, measured by PyTorch's profiler: the written-out attention's T × T scores and softmax; the tiled loop's peak, which grows with its output; and the tiled working set beyond that output.", "name": "fig-tiled-memory"}, "image": {"alt": "Log-log plot of peak memory against T from 256 to 2048: the written-out attention's line rises with slope two, the tiled peak rises slowly with its output, and the tiled working set beyond the output is a flat line."}}
fig, ax = plt.subplots(figsize=(5.2, 3.4))
Ts = [row[0] for row in memory_rows]
ax.loglog(Ts, [row[1] / 2**20 for row in memory_rows], "o-", label="written out")
ax.loglog(Ts, [row[2] / 2**20 for row in memory_rows], "s-", label="tiled")
ax.loglog(Ts, [row[3] / 2**20 for row in memory_rows], "^--", label="tiled beyond output")
ax.set_xticks(Ts, [str(T) for T in Ts])
ax.minorticks_off()
ax.set(xlabel="sequence length T", ylabel="peak memory (MiB)")
ax.legend()
fig.tight_layout()
plt.show()

# %% tags=["remove-input"]
found.append(prose.memory_lesson(memory_rows))
display(Markdown(found[-1].text))

# %% [markdown]
# The measured tiled peak counts the output, $T \times d$ numbers, and the log-sum-exp
# beside it: it grows in proportion to $T$. What the loop keeps beyond them (the column
# "beyond") is the same bytes at every $T$: the scores, the term that grows as $T^2$, are
# gone. It is more than the formula's working set: at its peak the loop also holds a block's
# `scores - m`, their exponential, `p @ v` and the rescaled `acc` as temporaries, which the
# formula leaves out (`tests/test_tiled_attention.py` keeps the measurement within 1 to 3
# times the formula). The input check reads 64 rows at a time so as not to grow either:
# checking all of $Q$, $K$, $V$ at once would hold $T \times d$ temporaries, more than the
# loop. What the CPU cannot show is the speed: here each block is a separate small product
# launched from Python, timed above beside the written-out attention's few large ones. On a
# GPU the written-out attention writes the scores to the GPU's main memory and reads them
# back for the softmax and again for the product with $V$; a fused kernel keeps each block
# in on-chip memory, never writes the $T^2$ scores, and reads $Q$, $K$ and $V$ a number of
# times that shrinks as on-chip memory grows. FlashAttention's authors measured that at
# long contexts this traffic, not the arithmetic, sets the time
# {cite}`dao2022flashattention`; this chapter does not measure it on a CPU. With
# `FULL_RUN` on a GPU, section 16.5 times PyTorch's flash kernel against its plain one.

# %% [markdown]
# ## 16.2 Speculative decoding
#
# Decoding runs the model once per token, and every weight is read to produce one token.
# On an accelerator, where such a pass is limited by that memory traffic, checking several
# tokens costs about the same pass: *speculative decoding*
# {cite}`leviathan2023fast,chen2023accelerating` rests on that (section 16.5 measures it
# where `FULL_RUN` runs on a GPU): a cheap *draft* model proposes
# $\gamma$ tokens $x_1, \dots, x_\gamma$, one at a time, from its distributions
# $q_1, \dots, q_\gamma$; the *target* scores all of them in one forward pass, which
# gives its own distributions $p_1, \dots, p_{\gamma+1}$ at the same positions. Each guess
# is kept with probability $\min(1, p_i(x_i) / q_i(x_i))$, in order; at the first
# rejection the token is drawn from the residual $\operatorname{norm}(\max(0, p_i - q_i))$
# and the round ends; if all $\gamma$ are kept, a bonus token comes from $p_{\gamma+1}$.
# Why the tokens follow $p$: with $\beta = \sum_y \min(p(y), q(y))$, a rejection happens
# with probability $1 - \beta$, and
# $\sum_y \max(0, p(y) - q(y)) = 1 - \beta$ too, so a token is $y$ with probability
#
# $$\begin{aligned}
# &q(y) \min\Big(1, \frac{p(y)}{q(y)}\Big) \\
# &+ (1 - \beta)\, \frac{\max(0, p(y) - q(y))}{1 - \beta} \\
# &= \min(p, q)(y) + \max(0, p - q)(y) = p(y).
# \end{aligned}$$
#
# Greedy decoding is the case where both put all their mass on their arg-max: a guess is
# kept while it equals the target's arg-max, so the output is the target's greedy text.
#
# The target is the book's character model of {ref}`ch-training`. The draft must share its
# vocabulary and be much cheaper: one layer of 64 dimensions instead of four of 128,
# trained here with the book's `train` (for the seconds printed below):

# %%
target, tok = book_model("shakespeare-char", progress=False)
torch.manual_seed(SEED)
draft = GPT(GPTConfig(**RECIPES["shakespeare-char"].model
                      | dict(n_layers=1, d_model=64, n_heads=2, d_ff=256)))
start = time.perf_counter()
history = train(draft, train_ids, val_ids,
                TrainConfig(max_iters=1500, batch_size=12, learning_rate=3e-3, min_lr=3e-4,
                            warmup_iters=50, eval_interval=1500, eval_iters=10,
                            keep_best=False, progress=False, seed=SEED))
draft_seconds = time.perf_counter() - start
draft.eval()
for name, m in (("target", target), ("draft", draft)):
    print(f"{name}: {m.config.n_layers} layer(s) of {m.config.d_model} dimensions, "
          f"{m.num_parameters():,} parameters")
print(f"the draft's validation loss {history.val_loss[-1]:.3f} after {draft_seconds:.0f} s "
      "of training")

# %% [markdown]
# **Greedy: the target's own tokens.** Four prompts, each extended to the end of the
# context (64 characters), by the target alone with `generate(..., greedy=True)` and by
# speculative decoding with each $\gamma$ of `GAMMAS` below. `speculative_generate` counts
# what it did: guesses proposed and kept, forward passes of each model. Each run is timed
# `REPEATS` times, the kinds taking turns; a greedy run gives the same tokens every time,
# so its generated tokens are compared with the target's once per $\gamma$. Beside the
# counts, what they would be if every guess were kept with one chance $\alpha$, estimated
# by the share kept at $\gamma = 1$ (below):

# %%
prompts = [torch.tensor([tok.encode(s)]) for s in
           ("ROMEO:\n", "First Citizen:\n", "KING HENRY", "JULIET:\nO")]
new = [64 - p.size(1) + 1 for p in prompts]  # to the end of the context
plain = [generate(target, p, n, greedy=True) for p, n in zip(prompts, new)]
GAMMAS, REPEATS = (0, 1, 2, 3, 4, 6), 5
seconds = {gamma: [] for gamma in GAMMAS}
counts, guesses, mismatches = {}, {}, 0
for repeat in range(REPEATS):
    for gamma in GAMMAS[::-1] if repeat % 2 else GAMMAS:  # alternate the order
        start = time.perf_counter()
        runs = [speculative_generate(target, draft, p, n, gamma, greedy=True)
                for p, n in zip(prompts, new)]
        seconds[gamma].append(time.perf_counter() - start)
        if repeat == 0 and gamma:  # the generated tokens, after each prompt
            mismatches += sum(int((out[0, p.size(1):] != ref[0, p.size(1):]).sum())
                              for (out, _), ref, p in zip(runs, plain, prompts))
        stats = [s for _, s in runs]
        kept, proposed = sum(s.accepted for s in stats), sum(s.proposed for s in stats)
        counts[gamma] = (kept / proposed if proposed else math.nan,
                         sum(s.new_tokens for s in stats)
                         / sum(s.target_forwards for s in stats))
        guesses[gamma] = proposed
n_compared = (len(GAMMAS) - 1) * sum(new)
print(f"generated tokens that differ from the target's greedy ones: {mismatches} of "
      f"{n_compared:,}")
alpha = counts[1][0]  # α estimated: the share kept at γ = 1
alpha_se = math.sqrt(alpha * (1 - alpha) / guesses[1])  # its standard error, binomial
print(f"α = {alpha:.3f} ± {2 * alpha_se:.3f} (two standard errors, {guesses[1]} guesses)")
print(f"{'':>2} {'kept':>15} {'tokens/target pass':>19} {'seconds':>9}")
print(f"{'γ':>2} {'counted':>7} {'α says':>7} {'counted':>9} {'α says':>9} {'median':>9}")
for gamma in GAMMAS:
    rate, per_pass = counts[gamma]
    kept_model, tokens_model = prose.leviathan(alpha, gamma) if gamma else (math.nan, 1.0)
    kept_text = f"{rate:>7.1%} {kept_model:>7.1%}" if gamma else f"{'-':>7} {'-':>7}"
    print(f"{gamma:>2} {kept_text} {per_pass:>9.2f} {tokens_model:>9.2f} "
          f"{sorted(seconds[gamma])[REPEATS // 2]:>9.3f}")
print("".join(tok.decode(plain[0][0].tolist())))

# %% [markdown]
# The counts are what speculation buys: fewer forward passes of the target per token. The
# share of guesses kept falls as $\gamma$ grows even if each guess were kept with the same
# chance $\alpha$: the target scores every guess in its one pass, but the rule stops at a
# round's first rejection, and the guesses after it count as not kept. With $\alpha =
# \mathbb{E}[\beta]$ and guesses kept independently, Leviathan et al.
# {cite}`leviathan2023fast` give $(1 - \alpha^{\gamma + 1}) / (1 - \alpha)$ tokens per
# target pass; the same reasoning gives a kept share of $\alpha (1 - \alpha^\gamma) /
# (\gamma (1 - \alpha))$: the "α says" columns, with $\alpha$ fitted at $\gamma = 1$ (that
# row agrees by construction). That $\alpha$ is known only to the two standard errors
# printed beside it, and counts within what that band predicts say nothing either way about
# whether the guesses are independent. They need not be (an easy stretch of text is easy for
# several guesses running), and near the end of the context a round proposes fewer than
# $\gamma$. Whether fewer passes mean fewer seconds depends on what each pass costs. The
# costs measured here, the draft's one-token pass and the target's pass over $\gamma + 1$
# tokens, each over the target's one-token pass, after the context `"ROMEO:\nWhat is this"`;
# the kinds take turns, and each keeps the median of its turns:

# %%
def pass_ms(model, n_tokens, passes=20):
    """Milliseconds of one forward pass of n_tokens after a fixed context, the mean of
    `passes` passes, each after cropping the cache back to the context."""
    where = model.lm_head.weight.device  # the CPU; in section 16.5, maybe a GPU
    sync = torch.cuda.synchronize if where.type == "cuda" else (lambda: None)
    cache = [RollbackKVCache(model.config.context_length) for _ in model.blocks]
    context = torch.tensor([tok.encode("ROMEO:\nWhat is this")], device=where)
    step = torch.zeros(1, n_tokens, dtype=torch.long, device=where)
    with torch.no_grad():
        model(context, kv_cache=cache)
        sync()
        start = time.perf_counter()
        for _ in range(passes):
            for layer in cache:
                layer.crop(context.size(1))
            model(step, kv_cache=cache)
        sync()
    return 1e3 * (time.perf_counter() - start) / passes


kinds = {"target": (target, 1), "draft": (draft, 1)} | {
    gamma: (target, gamma + 1) for gamma in GAMMAS if gamma}
samples = {kind: [] for kind in kinds}
for _ in range(10):  # the kinds take turns, so a slow spell of the machine hits them all
    for kind, (model, n_tokens) in kinds.items():
        samples[kind].append(pass_ms(model, n_tokens))
pass_median = {kind: sorted(times)[len(times) // 2] for kind, times in samples.items()}
one = pass_median["target"]
c_draft = pass_median["draft"] / one
verify = {gamma: pass_median[gamma] / one for gamma in GAMMAS if gamma}
print(f"target, one token: {one:.2f} ms; draft: {c_draft:.2f} of it")
print("target over γ + 1 tokens, over one token:")
print("  " + ", ".join(f"γ = {g}: {v:.2f}" for g, v in verify.items()))
plain_ms = 1e3 * sorted(seconds[0])[REPEATS // 2] / sum(new)  # γ = 0, per token
overhead = plain_ms / one - 1  # o: beyond the pass, in units of one target pass
print(f"plain decoding (γ = 0): {plain_ms:.2f} ms a token, o = {overhead:.2f} target "
      "passes beyond its pass")

# %% tags=["remove-input"]
found.append(prose.greedy_lesson(mismatches, n_compared))
display(Markdown(found[-1].text))
found.append(prose.tokens_lesson({g: counts[g] for g in GAMMAS if g}))
display(Markdown(found[-1].text))
display(Markdown(prose.speedup_text(c_draft, verify, counts, seconds,
                                     draft.num_parameters() / target.num_parameters(),
                                     overhead)))

# %% [markdown]
# **Sampling: the target's distribution.** Greedy identity is a check token by token; a
# sampled run is checked by its distribution. At the position after `"ROMEO:\n"`, the
# target's distribution $p$ and the draft's $q$, each restricted to its 5 likeliest
# characters (`top_k=5`, which the rule allows: both models sample from what they are
# given). One round with $\gamma = 1$, drawn `DRAWS` times: the draft draws $x_1$ from $q$,
# `accept_or_resample` keeps it or draws from the residual. Pearson's chi-square test
# compares the counts of the round's first token with `DRAWS` $\times\, p$. Beside it, the
# slip of Exercise 2, drawing from $q$ instead of the residual after a rejection, run the
# same way. How many draws: enough that the test rejects that slip, and drawing from $p$
# after a rejection, with probability 0.999 (its *power*) at the level each of this
# section's four tests is judged at (0.01 / 4, so that a right rule fails one of them
# about one time in a hundred, at most, as far as Pearson's approximation holds). The
# power comes from the non-central chi-square law with
# $\lambda = N \sum_y (w(y) - p(y))^2 / p(y)$ for the slip's law $w$, before anything is
# drawn: the nearer the draft's $q$ is to $p$, the nearer the slips' laws are to $p$, and
# the more draws it takes (`draws_for_power`). That law is an
# approximation for laws near $p$, so a power near 1 is stated as "> 0.999"; drawing for
# more power than the lesson's bar asks for leaves room for its error, and makes the power
# hold by construction unless the most draws it allows fall short. The evidence is the counts:
# the slip's own run, beside the right rule's.

# %%
TESTS = 4  # the step's first token, then tokens 1 to 3 end to end
context = prompts[0]


def target_law(ids):
    """The target's top-5 law of the next character after the ids."""
    with torch.no_grad():
        return sampling_probabilities(target(torch.tensor([ids]))[0][0, -1:], top_k=5)[0]


p_row = target_law(context[0].tolist())  # (V,)
with torch.no_grad():
    q_row = sampling_probabilities(draft(context)[0][0, -1:], top_k=5)[0]  # (V,)
p, q = torch.stack([p_row, p_row]), q_row[None]  # γ = 1: p_1, p_2 and q_1
support = (p_row > 0).nonzero()[:, 0]  # the target's 5 characters
kept = q_row * torch.where(q_row > 0, p_row / q_row, 0.0).clamp(max=1.0)  # (V,)
slip_laws = {slip: kept + (1 - kept.sum()) * law  # the first token's law under the slip
             for slip, law in (("from q", q_row), ("from p", p_row))}
DRAWS = pearson.draws_for_power(p_row[support], [w[support] for w in slip_laws.values()],
                                prose.level(TESTS))
print(f"draws: {DRAWS:,}")


def resample_from_q(p, q, drafts, generator):
    """Exercise 2's slip: after a rejection, draw from q, not from the residual."""
    x = int(drafts[0])
    if torch.rand((), generator=generator) < p[0, x] / q[0, x]:
        return torch.cat([drafts, torch.multinomial(p[1], 1, generator=generator)]), 1
    return torch.multinomial(q[0], 1, generator=generator), 0


def chi_square_of(tokens, law):
    """Pearson's test of the tokens against law's support; and the draws outside it."""
    support = (law > 0).nonzero()[:, 0]
    counts_y = torch.bincount(torch.tensor(tokens), minlength=len(law))
    outside = int(counts_y.sum() - counts_y[support].sum())
    return pearson.chi_square(counts_y[support], len(tokens) * law[support]), outside


g = torch.Generator().manual_seed(SEED)
firsts = {"accept_or_resample": [], "resample from q": []}
for _ in range(DRAWS):
    x = torch.multinomial(q[0], 1, generator=g)
    tokens, _ = speculative.accept_or_resample(p, q, x, g)
    firsts["accept_or_resample"].append(int(tokens[0]))
    firsts["resample from q"].append(int(resample_from_q(p, q, x, g)[0][0]))
print("characters:", [tok.decode([int(i)]) for i in support])
print("p:", [round(v, 3) for v in p_row[support].tolist()])
chi = {}
for rule, tokens in firsts.items():
    chi[rule] = chi_square_of(tokens, p_row)
    (stat, df, p_value), outside = chi[rule]
    print(f"{rule}:", [round(tokens.count(int(i)) / DRAWS, 3) for i in support])
    print(f"  outside p {outside}; chi-square {stat:.1f}, {df} degrees of freedom, "
          f"p-value {p_value:.2g}")
print(f"the smallest expected count {DRAWS * p_row[support].min().item():.0f}")

# %% [markdown]
# The smallest expected count, printed above, is what Pearson's approximation of the
# statistic's law needs to be large (five or more, by the usual rule). That checks the step
# alone, on one round's first token. End to end, `speculative_generate` with $\gamma = 2$
# makes 3 characters after `"ROMEO:\n"`, again and again: its first round drafts two guesses
# and, when both are kept, draws the third character as the bonus token from the target's
# last row. Token 1 is checked against $p$; token 2 among the runs whose token 1 was the
# commonest one, against the target's law after it; token 3 the same way after the commonest
# pair:

# %%
E2E_RUNS = 1_200
g = torch.Generator().manual_seed(SEED)
e2e = [speculative_generate(target, draft, context, 3, 2, top_k=5, generator=g)
       for _ in range(E2E_RUNS)]
outputs = [out[0, -3:].tolist() for out, _ in e2e]
bonus_runs = sum(stats.accepted == 2 for _, stats in e2e)
tests = {"the step's first token": (chi["accept_or_resample"][0][2], DRAWS,
                                    chi["accept_or_resample"][1])}
prefix = []
for j in range(TESTS - 1):
    runs_j = [out for out in outputs if out[:j] == prefix]
    law = target_law(context[0].tolist() + prefix)
    (stat, df, p_value), outside = chi_square_of([out[j] for out in runs_j], law)
    name = f"token {j + 1}" + (f" after {tok.decode(prefix)!r}" if prefix else "")
    tests[name] = (p_value, len(runs_j), outside)
    print(f"{name}: {len(runs_j):,} runs, outside p {outside}, chi-square {stat:.1f}, "
          f"p-value {p_value:.2g}, smallest expected count "
          f"{len(runs_j) * law[law > 0].min().item():.0f}")
    prefix = prefix + [int(torch.bincount(torch.tensor([o[j] for o in runs_j])).argmax())]
print(f"runs whose first round kept both guesses (token 3 from the bonus): {bonus_runs:,}")
power = {}
for slip, law in slip_laws.items():  # the step's slips, its first test
    power[f"{slip} after a rejection"] = pearson.chi_square_power(
        DRAWS, p_row[support], law[support], prose.level(len(tests)))
    print(f"power against drawing {slip} after a rejection, at level "
          f"{prose.level(len(tests))}: "
          f"{prose.power_text(power[f'{slip} after a rejection'])}")

# %% tags=["remove-input"]
found.append(prose.sampled_lesson(tests, power, top_k=5))
display(Markdown(found[-1].text))

# %% [markdown]
# Sampled end to end at the default temperature, without top-k, over the four prompts
# with $\gamma = 4$: the share of guesses kept and the tokens per target pass, beside
# greedy decoding's:

# %%
g = torch.Generator().manual_seed(SEED)
sampled = [speculative_generate(target, draft, p_, n, 4, generator=g)[1]
           for p_, n in zip(prompts, new)]
kept_share = sum(s.accepted for s in sampled) / sum(s.proposed for s in sampled)
per_pass = sum(s.new_tokens for s in sampled) / sum(s.target_forwards for s in sampled)
print(f"sampled, γ = 4: kept {kept_share:.1%}, {per_pass:.2f} tokens per target pass")
print(f"greedy, γ = 4: kept {counts[4][0]:.1%}, {counts[4][1]:.2f}")
display(Markdown(prose.sampled_speed_text(kept_share, counts[4][0])))

# %% [markdown]
# ## 16.3 Int8 and int4 weights
#
# A forward pass of one token reads every weight once. Where decoding at batch 1 is
# limited by the bytes of the weights (the case weight-only quantization is made for, on
# GPUs), fewer bytes are fewer seconds; section 16.5 times it where `FULL_RUN` runs on a
# GPU. *Weight-only quantization* stores each weight matrix $W$ as small integers and a
# scale per row (or per group of a row). *Absmax* quantization rounds to the nearest step
# of a symmetric grid
# {cite}`dettmers2022llmint8` (LLM.int8() applies it to rows of the weights and of the
# activations, with the activations' outlier features kept in float16); weight-only
# methods such as GPTQ {cite}`frantar2022gptq` quantize a row in groups, as the int4 copy
# here does, and choose the integers more carefully than by rounding:
#
# $$s = \frac{\max |W_{\text{row}}|}{q_{\max}}, \qquad
# q = \operatorname{clamp}\big(\operatorname{round}(W / s), -q_{\max}, q_{\max}\big), \qquad
# W \approx q\, s,$$
#
# with $q_{\max} = 127$ for int8 and 7 for int4. Rounding moves each weight by at most half
# a step, $s/2$. The activations stay in floating point; `quantize_model` replaces every
# `nn.Linear` of a copy by a `QuantizedLinear` that multiplies by $q s$. The embedding and
# the output layer tied to it stay in float32. The int8 copy with one scale per row, the
# int4 copy with one scale per group of 32 weights, and beside them a slip: int8 whose
# integers are truncated toward zero instead of rounded (Exercise 3 asks for the rounding):

# %%
def truncated_int8(model):
    """The slip: int8 with one scale per row, trunc(W / s) where round(W / s) belongs."""
    slip = quantize_model(model, bits=8)
    for name, layer in slip.named_modules():
        if isinstance(layer, QuantizedLinear):
            w = model.get_submodule(name).weight.detach()  # (out, in)
            layer.q.copy_(torch.trunc(w / layer.scale).to(torch.int8))  # scale (out, 1)
    return slip


models = {"fp32": target, "int8": quantize_model(target, bits=8),
          "int4": quantize_model(target, bits=4, group_size=32),
          "int8 truncated": truncated_int8(target)}
print(f"{'':<14} {'bytes':>9} {'rel. err.':>9}")
for name, model in models.items():
    errors = [weight_error(dict(target.named_modules())[n].weight, m.quantized_weight)
              for n, m in model.named_modules() if hasattr(m, "quantized_weight")]
    worst = max((e.relative for e in errors), default=0.0)
    print(f"{name:<14} {model_bytes(model):>9,} {worst:>9.2%}")
print("rel. err.: the largest ||W - Ŵ|| / ||W|| of")
print("the weight matrices (Frobenius norms)")
print(f"int8: {model_bytes(models['int8']) / model_bytes(target):.1%} of float32's bytes, "
      f"int4: {model_bytes(models['int4']) / model_bytes(target):.1%}")

# %% [markdown]
# The logits on 8 windows of validation text, the share of positions where the likeliest
# next character is float32's, and the greedy continuations of the four prompts; then the
# quality that counts, bits per byte on the whole validation text (Chapter 11's measure),
# and how far each copy's next-character law lies from float32's there: the mean
# Kullback-Leibler divergence $\mathrm{KL}(p_{\text{fp32}} \,\|\, p_{\text{copy}})$ over the
# same positions (`text_kl`). A small change $\delta$ of the weights moves the loss
# first by $\delta \cdot \nabla L$, which has either sign, so quantizing can even lower
# it by chance; the KL has no first-order part (about $\frac12 \delta^\top F \delta$,
# $F$ the Fisher information) and is never negative, so the lesson judges it:

# %%
g = torch.Generator().manual_seed(SEED)
starts = torch.randint(0, len(val_ids) - 64, (8,), generator=g)
windows = torch.stack([torch.as_tensor(val_ids[s:s + 64].astype("int64")) for s in starts])
with torch.no_grad():
    logits = {name: m(windows)[0] for name, m in models.items()}
bpb = {name: model_bits_per_byte(m, val_ids, lambda t: len(tok.decode([t]).encode()))
       for name, m in models.items()}
kl = text_kl(target, {name: m for name, m in models.items() if name != "fp32"}, val_ids)
greedy_text = {name: [generate(m, p_, n, greedy=True) for p_, n in zip(prompts, new)]
               for name, m in models.items()}
print(f"{'':<14} {'|Δ logit|':>9} {'arg-max':>7} {'same':>5} {'bits/byte':>9}")
for name in models:
    gap = (logits[name] - logits["fp32"]).abs().max().item()
    agree = (logits[name].argmax(-1) == logits["fp32"].argmax(-1)).float().mean().item()
    before = []  # per prompt: generated tokens equal to float32's before the first not
    for a, b, p_ in zip(greedy_text[name], greedy_text["fp32"], prompts):
        differ = (a[0, p_.size(1):] != b[0, p_.size(1):]).nonzero()  # (k, 1)
        before.append(int(differ[0, 0]) if len(differ) else a.size(1) - p_.size(1))
    same = f"{min(before)}-{max(before)}"
    print(f"{name:<14} {gap:>9.4f} {agree:>7.1%} {same:>5} {bpb[name]:>9.4f}")
print("same: generated tokens equal to float32's")
print("before the first that differs, fewest-most")
print(f"over the {len(prompts)} prompts (of {min(new)}-{max(new)})")
print(f"the logits' spread (float32): {logits['fp32'].std().item():.2f}")
print("mean KL from float32's next-character law:")
for name, value in kl.items():
    print(f"{name:<14} {value:.2e} nats a character")

# %% tags=["remove-input"]
found.append(prose.quantize_lesson(kl, bpb))
display(Markdown(found[-1].text))

# %% [markdown]
# The column "same" stops at the first generated token that differs: from there a greedy
# continuation goes its own way, and agreement position by position would be chance. A
# change of the arg-max at one position is enough to end it. The bytes: int8 is one byte a
# weight and int4 half, plus the scales; the embedding (which the output layer shares), the
# biases and the LayerNorms stay in float32. Here nothing is faster: `QuantizedLinear`
# multiplies its integers back into a float32 matrix at every call, to show the arithmetic
# plainly. Fast kernels (torchao's, or bitsandbytes') read the integers and scale inside the
# matrix product, so that the bytes saved can become time saved; with `FULL_RUN` on a GPU,
# section 16.5 times torchao's beside `QuantizedLinear`.
#
# ## 16.4 A paged KV cache
#
# Chapter 7's cache keeps each sequence's keys and values in one tensor. A batch of prompts
# of different lengths is padded to its longest, and a static cache reserves the whole
# context for every sequence. vLLM's PagedAttention {cite}`kwon2023pagedattention` cuts
# the cache into blocks of a fixed number of positions, handed out from one pool as a
# sequence grows, with a *block table* per sequence, as an operating system pages memory:
# a sequence wastes at most one block's unused tail. `paged_generate` decodes prompts of any
# lengths with blocks of 16 positions, running the model's own forward on each sequence's
# keys and values gathered through its table. Five prompts of 3 to 40 characters, 20 new
# characters each, greedy, against `generate` on each prompt alone:

# %%
lengths = (3, 11, 17, 26, 40)
ragged = [torch.as_tensor(val_ids[100 * i:100 * i + n].astype("int64"))
          for i, n in enumerate(lengths)]
N_NEW, BLOCK = 20, 16
paged, cache = paged_generate(target, ragged, N_NEW, block_size=BLOCK)
alone = [generate(target, p_[None], N_NEW, greedy=True)[0] for p_ in ragged]
paged_mismatches = sum(int((a[n:] != b[n:]).sum())  # the generated tokens only
                       for a, b, n in zip(paged, alone, lengths))
print(f"generated tokens that differ: {paged_mismatches} of {len(lengths) * N_NEW}")
print(cache)
held = [n + N_NEW - 1 for n in lengths]  # the last new token is never fed back
memory = kv_cache_memory(held, BLOCK, target.config.context_length)
per_slot = slot_bytes(target)
print(f"{'layout':<8} {'slots':>6} {'wasted':>7} {'KiB':>6}")
for layout in ("padded", "static", "paged"):
    slots = getattr(memory, layout)
    kib = slots * per_slot / 1024
    print(f"{layout:<8} {slots:>6} {memory.waste[layout]:>7} {kib:>6.0f}")
print(f"needed: {memory.needed} slots of {per_slot:,} bytes")

# %% tags=["remove-input"]
found.append(prose.paged_lesson(paged_mismatches, len(lengths) * N_NEW, memory.waste,
                                memory.needed))
display(Markdown(found[-1].text))

# %% [markdown]
# The paged layout's waste does not depend on how different the lengths are: at most one
# block less one position per sequence. vLLM adds what this chapter leaves out: the
# attention kernel reads the blocks through the table in place, where `gather` here copies
# them into one tensor; sequences that share a prefix share its blocks; and a scheduler
# adds and removes sequences from the running batch at every step.

# %% [markdown]
# ## 16.5 On a GPU: the four beside PyTorch's own (`FULL_RUN`)
#
# With `FULL_RUN = True` the cells below time each technique beside what PyTorch offers for
# it, on the GPU where there is one: PyTorch's flash and plain ("math") attention kernels
# and `tiled_attention`; `generate` against `speculative_generate` at $\gamma = 0$ and 4,
# with $c$ and $v$ measured there; a float Linear against `QuantizedLinear` and torchao's
# int8 weight-only layer (where torchao imports); `generate` prompt by prompt against
# `paged_generate`. Without a GPU they run at tiny sizes on the CPU, a rehearsal of the
# code whose times say nothing about a GPU. Each time is the median of several calls, the
# GPU's queue waited for before and after each. The math kernel is told to compute float16
# in float16 (`allow_fp16_bf16_reduction_math_sdp`), so that both kernels do the same
# arithmetic and their gap is the memory traffic; a PyTorch without that switch computes
# its scores in float32, and the line says so.

# %%
device = "cuda" if FULL_RUN and torch.cuda.is_available() else "cpu"
on_gpu = device == "cuda"


def sync():
    """Wait for the work queued on the GPU (on the CPU there is none)."""
    if on_gpu:
        torch.cuda.synchronize()


def device_ms(fn, repeats=10):
    """Milliseconds of one call of fn, the median of `repeats` after one warm-up call."""
    fn()
    runs = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        runs.append(1e3 * (time.perf_counter() - start))
    return sorted(runs)[repeats // 2]


if not FULL_RUN:
    print("skipped: FULL_RUN is False")
elif not on_gpu:
    print("no GPU here: a rehearsal at tiny sizes on the CPU, whose times say nothing "
          "about a GPU")
else:
    print(f"on {torch.cuda.get_device_name()}")

# %%
if FULL_RUN:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    B_, H_, d_ = (4, 16, 64) if on_gpu else (1, 2, 32)
    attention_dtype = torch.float16 if on_gpu else torch.float32
    switch = getattr(torch.backends.cuda, "allow_fp16_bf16_reduction_math_sdp", None)
    if switch is not None:
        was = torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed()
        switch(True)  # the math kernel computes float16 in float16, as flash does
    print(f"{B_} x {H_} heads of {d_}, {attention_dtype}, causal; math in "
          f"{'the inputs dtype' if switch else 'float32 (no switch here)'}")
    for T in (1024, 4096, 16384) if on_gpu else (128, 256):
        q, k, v = (torch.randn(B_, H_, T, d_, device=device, dtype=attention_dtype)
                   for _ in range(3))
        line = f"T = {T:>6}:"
        for name, backend in (("flash", SDPBackend.FLASH_ATTENTION),
                              ("math", SDPBackend.MATH)):
            scores_gib = B_ * H_ * T * T * q.element_size() / 2**30
            if name == "math" and scores_gib > 16:
                line += f" math not run (its scores: {scores_gib:.0f} GiB)"
                continue
            with sdpa_kernel(backend):
                attend_ms = device_ms(
                    lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
            line += f" {name} {attend_ms:.2f} ms,"
        if T <= 4096:  # a Python loop over 64 x 64 blocks: slow at long T
            line += f" tiled {device_ms(lambda: tiled_attention(q, k, v), 3):.1f} ms"
        print(line)
    if switch is not None:
        switch(was)

# %%
if FULL_RUN:
    target, draft = target.to(device), draft.to(device)
    on_device = [p_.to(device) for p_ in prompts]
    decoders = {"generate": lambda p_, n: generate(target, p_, n, greedy=True)} | {
        f"γ = {gamma}": lambda p_, n, gamma=gamma: speculative_generate(
            target, draft, p_, n, gamma, greedy=True)[0] for gamma in (0, 4)}
    decode_ms, decoded = {}, {}
    for name, decode in decoders.items():
        decode_ms[name] = device_ms(lambda: [decode(p_, n) for p_, n in
                                             zip(on_device, new)], 3)
        decoded[name] = [decode(p_, n) for p_, n in zip(on_device, new)]
    same = all(torch.equal(a, b) for a, b in zip(decoded["γ = 4"], decoded["generate"]))
    print(f"greedy, {sum(new)} tokens over {len(prompts)} prompts: " + ", ".join(
        f"{name} {ms:.0f} ms" for name, ms in decode_ms.items()))
    print(f"γ = 4 over generate: {decode_ms['generate'] / decode_ms['γ = 4']:.2f} times as "
          f"fast; the same tokens: {same}")
    one_here = pass_ms(target, 1)
    print(f"on {device}: target, one token {one_here:.2f} ms; c = "
          f"{pass_ms(draft, 1) / one_here:.2f}, v (γ = 4) = "
          f"{pass_ms(target, 5) / one_here:.2f}")

# %%
if FULL_RUN:
    import copy

    width = 8192 if on_gpu else 256
    dtype = torch.bfloat16 if on_gpu else torch.float32
    torch.manual_seed(SEED)
    linear = torch.nn.Linear(width, width, bias=False).to(device, dtype)
    x = torch.randn(1, width, device=device, dtype=dtype)  # (1, width): one token
    layers = {f"float ({dtype})": linear, "QuantizedLinear, int8": QuantizedLinear(
        quantize.absmax_quantize(linear.weight, bits=8))}
    try:
        from torchao.quantization import Int8WeightOnlyConfig, quantize_
    except ImportError as err:
        print(f"torchao's int8 weight-only: not run, torchao does not import ({err})")
    else:
        theirs = torch.nn.Sequential(copy.deepcopy(linear))
        quantize_(theirs, Int8WeightOnlyConfig())
        layers["torchao, int8 weight-only"] = theirs
    print(f"one token through a {width} x {width} Linear:")
    with torch.no_grad():
        for name, layer in layers.items():
            print(f"  {name}: {device_ms(lambda: layer(x), 20):.3f} ms")

# %%
if FULL_RUN:
    ragged_here = [r.to(device) for r in ragged]
    paged_ms = device_ms(lambda: paged_generate(target, ragged_here, N_NEW,
                                                block_size=BLOCK), 3)
    alone_ms = device_ms(lambda: [generate(target, r[None], N_NEW, greedy=True)
                                  for r in ragged_here], 3)
    paged_here, _ = paged_generate(target, ragged_here, N_NEW, block_size=BLOCK)
    same = all(torch.equal(a, generate(target, r[None], N_NEW, greedy=True)[0])
               for a, r in zip(paged_here, ragged_here))
    print(f"{len(ragged)} prompts, {N_NEW} new tokens each: paged_generate "
          f"{paged_ms:.0f} ms, generate prompt by prompt {alone_ms:.0f} ms; the same "
          f"tokens: {same}")

# %% [markdown]
# On a GPU, the lines above are what this track measured there, and the chapter claims no
# more: whether the flash kernel beats the math kernel once both compute in float16, and
# by how much as $T$ grows; whether speculation at $\gamma = 4$ is faster than `generate`
# for these two small models, with the $c$ and $v$ that would explain it; whether
# `QuantizedLinear`, which dequantizes at every call, is slower than the float layer, and
# torchao's fused int8 layer faster; and what `paged_generate`, which runs the model once
# per sequence per step and gathers the blocks by copying, costs against `generate`. These
# models are small: a GPU pass of them is short, and may be bound by launching kernels
# rather than by memory traffic, which is why the Linear timed above is a large one.

# %% tags=["remove-input"]
display(Markdown(f"This chapter ran in {time.perf_counter() - chapter_start:.0f} s here, "
                 f"wall clock, {draft_seconds:.0f} s of it training the draft."))

# %% [markdown]
# ## Summary
#
# - The online softmax folds a block of scores into a running maximum, sum and output,
#   rescaling the old sums by $e^{m - m'}$: tiled attention is the same attention, to
#   rounding, whose working set beyond its output does not grow with $T$. Its speed
#   needs a fused kernel that keeps the blocks on chip: a CPU run does not show it.
# - Speculative decoding keeps the target's output: greedy, token for token; sampled, in
#   distribution, by accepting with $\min(1, p/q)$ and drawing from the residual. It saves
#   forward passes of the target; whether it saves seconds depends on the draft's cost
#   and on the cost of checking $\gamma + 1$ tokens, both measured in section 16.2: on a
#   CPU a small model's pass is largely fixed cost, so the draft is not cheap.
# - Absmax quantization stores a weight as an integer and a scale per row or group: int8's
#   next-character law lies less than a thousandth of a nat a character from float32's
#   (their mean KL), half or less of the KL of int4 in groups of 32 and of an int8 that
#   truncates instead of rounding.
# - A paged cache hands out fixed-size blocks through a block table: the same tokens as a
#   contiguous cache, and at most one block's tail wasted per sequence.

# %% tags=["remove-cell", "nbval-check-output"]
print(lessons.verdicts())

# %% [markdown]
# ## Exercises
#
# ### Exercise 1. The online softmax update (implement)
#
# Write `online_softmax_step(m, l, acc, scores, v_block)`: `m` and `l` are $(Q, 1)$, the
# running maximum and sum of each query row, `acc` $(Q, d)$ the unnormalized output,
# `scores` $(Q, K)$ the next block of scores (some may be `-inf`, and a row may be all
# `-inf` in a block after its first, as a causal mask leaves it), `v_block` $(K, d)$ its
# values. Return the new `(m, l, acc)` of section 16.1. The checker starts from
# `m = -inf`, `l = 0`, `acc = 0`, folds several blocks, and compares `acc / l` with
# `softmax(scores) @ v`.

# %% tags=["solution", "hide-input"] mystnb={"code_prompt_show": "Show the solution", "code_prompt_hide": "Hide the solution"}
def online_softmax_step(m, l, acc, scores, v_block):
    m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))  # (Q, 1)
    rescale = torch.exp(m - m_new)  # (Q, 1): 0 for the first block
    p = torch.exp(scores - m_new)  # (Q, K)
    return m_new, rescale * l + p.sum(dim=-1, keepdim=True), rescale * acc + p @ v_block


# %%
from gpt_from_scratch.exercises import check_online_softmax_step
check_online_softmax_step(online_softmax_step);

# %% [markdown]
# ### Exercise 2. The accept/reject step (implement)
#
# Write `accept_or_resample(p, q, draft_tokens, generator)`: `p` is the target's
# probabilities $(\gamma + 1, V)$, `q` the draft's $(\gamma, V)$, `draft_tokens` the
# $\gamma$ drafted ids. Keep $x_i$ with probability $\min(1, p_i(x_i) / q_i(x_i))$, in
# order (draw `torch.rand((), generator=generator)`); at the first rejection, draw one
# token from $\operatorname{norm}(\max(0, p_i - q_i))$ with `torch.multinomial` and stop;
# when all are kept, draw a bonus token from $p_{\gamma+1}$. Return `(tokens, n_accepted)`:
# the kept drafts followed by the new token, and how many drafts were kept.

# %% tags=["solution", "hide-input"] mystnb={"code_prompt_show": "Show the solution", "code_prompt_hide": "Hide the solution"}
def accept_or_resample(p, q, draft_tokens, generator):
    for i, x in enumerate(draft_tokens.tolist()):
        if torch.rand((), generator=generator) < p[i, x] / q[i, x]:
            continue  # kept: min(1, p/q), since a uniform draw is below 1
        residual = (p[i] - q[i]).clamp(min=0)  # (V,)
        new = torch.multinomial(residual / residual.sum(), 1, generator=generator)
        return torch.cat([draft_tokens[:i], new]), i
    bonus = torch.multinomial(p[-1], 1, generator=generator)  # (1,)
    return torch.cat([draft_tokens, bonus]), len(draft_tokens)


# %%
from gpt_from_scratch.exercises import check_accept_or_resample
check_accept_or_resample(accept_or_resample);

# %% [markdown]
# ### Exercise 3. Absmax quantization (implement)
#
# Write `absmax_quantize(w, bits)`: `w` is a float32 weight $(\text{out}, \text{in})$.
# Return `(q, scale)`: per row, `scale` $= \max |w_{\text{row}}| / q_{\max}$ with
# $q_{\max} = 2^{\text{bits} - 1} - 1$, as float32 $(\text{out}, 1)$, at least float32's
# machine epsilon (a row of zeros); `q` $= \operatorname{round}(w / \text{scale})$ clamped
# to $[-q_{\max}, q_{\max}]$, as int8. (The clamp is a guard: with the row's own scale,
# $|w / \text{scale}| \le q_{\max}$ already.)

# %% tags=["solution", "hide-input"] mystnb={"code_prompt_show": "Show the solution", "code_prompt_hide": "Hide the solution"}
def absmax_quantize(w, bits):
    q_max = 2 ** (bits - 1) - 1
    scale = w.abs().amax(dim=1, keepdim=True) / q_max  # (out, 1)
    scale = scale.clamp(min=torch.finfo(torch.float32).eps)
    q = torch.round(w / scale).clamp(-q_max, q_max).to(torch.int8)  # (out, in)
    return q, scale


# %%
from gpt_from_scratch.exercises import check_absmax_quantize
check_absmax_quantize(absmax_quantize);

# %% [markdown] tags=["quiz"]
# ## Check yourself
#
# A few questions on this chapter, each answer with its explanation. The numbers in them
# are the ones this chapter printed.

# %% tags=["quiz", "remove-input"]
from gpt_from_scratch.book.quiz import Choice, MultipleChoice, Numeric, show_quiz
best_gamma = max((g for g in GAMMAS if g), key=lambda g: counts[g][1])
show_quiz([
    MultipleChoice("In the online softmax, a new block raises the running maximum from m "
                   "to m'. What happens to the running sum l and output acc?", [
        Choice("both are multiplied by exp(m - m') before the block is added", True,
               "They were sums of exp(s - m); multiplying puts them against m'."),
        Choice("only l is rescaled: acc is divided by l at the end anyway", False,
               "acc / l is right only if both carry the same exp(-m_final): section "
               "16.1's slip shows the error."),
    ]),
    Numeric("How many times larger was the written-out attention's whole peak than the "
            f"tiled one's (its output included), at T = {memory_rows[-1][0]:,}? "
            "(No decimals.)",
            memory_rows[-1][1] / memory_rows[-1][2], 0.6,
            "Section 16.1's measured peaks, one over the other."),
    MultipleChoice("After a draft token is rejected, the next token is drawn from:", [
        Choice("norm(max(0, p - q)), the residual", True,
               "With the accepted share min(p, q) it adds up to p."),
        Choice("q, the draft's distribution", False,
               "That is the slip the chi-square test rejected in section 16.2."),
        Choice("p, the target's distribution", False,
               "Then tokens where q > p would come out too often: min(p, q) + (1 - β) p "
               "is not p."),
    ]),
    Numeric(f"How many tokens per forward pass of the target did greedy speculative "
            f"decoding give at γ = {best_gamma}? (Two decimals.)",
            counts[best_gamma][1], 0.006,
            "Section 16.2's table: new tokens over target passes."),
    Numeric("How many times as large as int8's mean KL from float32 was the truncating "
            "int8's? (A whole number.)", kl["int8 truncated"] / kl["int8"], 0.55,
            "Section 16.3's KL lines: the truncating int8's over int8's (0.05 more than "
            "half a unit: the printed KLs have three figures)."),
    MultipleChoice("At most how many positions does a paged cache with blocks of B "
                   "positions waste per sequence?", [
        Choice("B - 1, in its last block", True,
               "Every other block is full; the last holds at least one position."),
        Choice("the context length less the sequence's length", False,
               "That is a static cache's reserve."),
    ]),
])
