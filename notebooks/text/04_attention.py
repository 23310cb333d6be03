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
# (ch-attention)=
# # 4. Attention
#
# Embeddings ({ref}`ch-embeddings`) give every token a vector, but each vector only knows its own token
# and position. To predict what comes after "To be or not to", the model must let the last token *read* the
# ones before it. Attention {cite}`vaswani2017attention` is that reading step: every token builds a weighted
# average of the tokens before it, with weights it computes itself. This chapter builds it in small steps:
#
# 1. averaging the past with a Python loop;
# 2. the same average as one matrix multiply;
# 3. softmax of masked scores, which makes the weights depend on the data;
# 4. queries, keys and values;
# 5. why the scores are divided by $\sqrt{d_k}$, and what goes wrong with the softmax on the wrong axis;
# 6. the causal mask on a real batch of Tiny Shakespeare;
# 7. many heads in parallel: GPT-2's `MultiHeadAttention`, and why several heads;
# 8. why attention needs positions;
# 9. what attention costs, against recurrence and convolution, and the mask that a KV cache
#    (Chapter 7) needs;
# 10. attention as message passing, and its three uses in the Transformer.

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
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.testing import assert_close

from gpt_from_scratch.data import get_batch, load_tiny_shakespeare
from gpt_from_scratch.tokenizer import gpt2_encoding
from gpt_from_scratch.utils import seed_everything
from gpt_from_scratch.book.figure_text import book_figures
from gpt_from_scratch.book.plotting import attention_heatmap, token_labels

book_figures()  # sharp on high-density screens, each PNG records its smallest text
generator = seed_everything(1337)
torch.set_printoptions(precision=3, sci_mode=False)

# %% [markdown]
# ## 4.1 Averaging the past with a loop
#
# Take a batch of $B$ sequences of $T$ tokens, each token a vector of $D$ numbers. The simplest way to let
# token $t$ know about its past is to replace $x_t$ with the average of $x_0, \dots, x_t$. It throws away
# the order of the past (a "bag of words"), but it is a start. Only the past: position $t$ will have to
# predict token $t+1$, so it must never see it.

# %% tags=["nbval-check-output"]
B, T, D = 2, 5, 3
x = torch.randn(B, T, D, generator=generator)  # (B, T, D)

xbow = torch.zeros(B, T, D)  # (B, T, D): "x bag of words"
for b in range(B):
    for t in range(T):
        xbow[b, t] = x[b, : t + 1].mean(dim=0)  # average of positions 0..t

print("x[0] =\n", x[0])
print("xbow[0] =\n", xbow[0])

# %% [markdown]
# The first row of `xbow[0]` is the first row of `x[0]` (an average of one vector); the last row is the
# mean of all five.
#
# ## 4.2 The same average as one matrix multiply
#
# A loop over positions is slow. Write the averages as a $T \times T$ matrix $W$ whose row $t$ holds
# $1/(t+1)$ in columns $0..t$ and 0 after: then `W @ x` computes every average at once, and the matrix
# multiply broadcasts over the batch: $(T, T) \times (B, T, D) \to (B, T, D)$.

# %% tags=["nbval-check-output"]
W = torch.tril(torch.ones(T, T))  # (T, T): 1 on and below the diagonal
W = W / W.sum(dim=1, keepdim=True)  # each row sums to 1
print(W)
xbow2 = W @ x  # (T, T) @ (B, T, D) -> (B, T, D)
assert_close(xbow2, xbow)
print("loop and matrix multiply agree:", torch.allclose(xbow2, xbow))

# %% [markdown]
# Row $t$ of $W$ is a probability distribution over the positions $0..t$: non-negative, summing to 1.
# Every output is a weighted average of the inputs, and the zeros above the diagonal keep the future out.
#
# ## 4.3 Softmax of masked scores: data-dependent weights
#
# The same $W$ comes out of a softmax. Start from a matrix of *scores* (here all zero), set the future
# entries to $-\infty$, and apply the softmax along each row: $e^{-\infty} = 0$, so the future gets weight
# exactly 0, and equal scores give equal weights over the past.

# %% tags=["nbval-check-output"]
scores = torch.zeros(T, T)  # (T, T)
mask = torch.tril(torch.ones(T, T, dtype=torch.bool))  # True = may attend
scores = scores.masked_fill(~mask, float("-inf"))
W3 = torch.softmax(scores, dim=-1)  # softmax over the last dimension: each ROW sums to 1
assert_close(W3, W)
print(scores)
print("softmax of masked zeros equals W:", torch.allclose(W3, W))

# %% [markdown]
# Why bother? Because the scores no longer have to be zero. If they are computed *from the tokens*, each
# token decides how much of each past token it wants. The same three lines then give a different average
# for every input:

# %% tags=["nbval-check-output"]
# A stand-in for scores computed from the data:
data_scores = torch.randn(T, T, generator=generator) * 2
weights = torch.softmax(data_scores.masked_fill(~mask, float("-inf")), dim=-1)
print(weights)
print("row sums:", weights.sum(dim=-1).round(decimals=3))  # 1 or 0.99999994, by CPU

# %% [markdown]
# The rows still sum to 1 and the upper triangle is still exactly 0, but now the weights are uneven:
# some past tokens matter more than others.
#
# ## 4.4 Queries, keys and values
#
# Where do the scores come from? Think of a soft database lookup. Each token emits three vectors, each a
# learned linear map of its embedding:
#
# - a **query** $q_t$: "what am I looking for?";
# - a **key** $k_s$: "what do I contain?", matched against queries;
# - a **value** $v_s$: "what do I hand over if I am picked?".
#
# The score of query $t$ for key $s$ is the dot product $q_t \cdot k_s$: large when they point the same
# way. A database returns the value whose key matches exactly; attention returns a *blend* of all values,
# weighted by the softmax of the scores. Stack the queries, keys and values of all tokens as the rows
# of matrices $q$, $k$ and $v$ (as the code names them; the capital $V$ is the vocabulary size):
#
# $$\operatorname{attention}(q, k, v) = \operatorname{softmax}\!\left(\frac{q k^\top}{\sqrt{d_k}}\right) v .$$
#
# Here is that formula written out as a function, the chapter's own build of attention (section 4.5
# explains the $\sqrt{d_k}$). It works on any leading dimensions, and the number of queries may differ from the number
# of keys.

# %%
def attention(q, k, v, mask=None):
    """softmax(q kᵀ / sqrt(d_k)) v.

    q: (..., T_q, d_k), k: (..., T_k, d_k), v: (..., T_k, d_v).

    mask: boolean, broadcastable to (..., T_q, T_k), True = may attend.
    """
    d_k = q.size(-1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # (..., T_q, T_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)  # (..., T_q, T_k), rows sum to 1
    return weights @ v, weights  # (..., T_q, d_v), (..., T_q, T_k)


# %% [markdown]
# An exact-match query: eight random keys of width $d_k = 64$, and a query equal to key 3. Its scaled score
# for key 3 is $\lVert k_3 \rVert^2 / \sqrt{d_k}$, on average $d_k / \sqrt{d_k} = 8$, while its scores for
# the other, unrelated keys have mean 0 and standard deviation 1, so nearly all the weight lands on key 3
# and the output is nearly value 3:

# %% tags=["nbval-check-output"]
d_k, n_keys = 64, 8
keys = torch.randn(n_keys, d_k, generator=generator)  # (8, d_k)
values = torch.randn(n_keys, d_k, generator=generator)  # (8, d_k)
query = keys[3:4].clone()  # (1, d_k): exactly key 3
out, w = attention(query, keys, values)
scaled_scores = (query @ keys.T)[0] / math.sqrt(d_k)  # (8,)
others = scaled_scores[torch.arange(n_keys) != 3]
print(f"scaled scores: key 3 {scaled_scores[3]:.2f}, "
      f"the other keys {others.min():.2f} to {others.max():.2f}")
print("weights:", w[0])
print(f"weight on key 3: {w[0, 3]:.4f}")
relative_error = (out[0] - values[3]).norm() / values[3].norm()
print(f"|output - value 3| / |value 3| = {relative_error:.4f}")

# %% [markdown]
# Key 3 scores 10.60 against at most 1.63 for the others, so it gets a weight of 0.9998, and the output
# is within 0.0003 (relative) of value 3: a near one-hot lookup. In a trained model, queries and keys are
# learned so that the tokens which *should* be read produce large dot products. A soft lookup is
# differentiable, so gradient descent can learn what to look for.
#
# The package's `scaled_dot_product_attention` is the same function (it also handles dropout and a fully
# masked row, see below), and PyTorch ships a fused version, `torch.nn.functional.scaled_dot_product_attention`.
# All three agree, with and without a mask, and with fewer queries than keys:

# %%
from gpt_from_scratch.attention import causal_mask, scaled_dot_product_attention

q = torch.randn(2, 3, 6, 16, generator=generator)  # (B, H, T_q, d_k)
k = torch.randn(2, 3, 9, 16, generator=generator)  # (B, H, T_k, d_k)
v = torch.randn(2, 3, 9, 16, generator=generator)  # (B, H, T_k, d_k)
m = torch.rand(6, 9, generator=generator) > 0.5  # a random mask, (T_q, T_k) ...
m[:, 0] = True  # ... where every query may see at least one key
for mask_ in (None, m):
    ours, ours_w = attention(q, k, v, mask_)
    package, package_w = scaled_dot_product_attention(q, k, v, mask_)
    fused = F.scaled_dot_product_attention(q, k, v, attn_mask=mask_)
    assert_close(ours, package)
    assert_close(ours_w, package_w)
    assert_close(ours, fused)
    which = "yes" if mask_ is not None else "no "
    print(f"mask={which}  max |ours - torch| = {(ours - fused).abs().max():.1e}")

assert_close(torch.tril(torch.ones(7, 7, dtype=torch.bool)), causal_mask(7))

# %% [markdown]
# One case needs a decision: a query whose mask row is all False has nothing to attend to, and the softmax
# of a row of $-\infty$ is $0/0$, NaN. The NaN then spreads through every later layer and the loss. The
# package defines such a row's weights and output as 0 (a padding query that reads nothing). Our inline
# `attention` returns the NaN:

# %% tags=["nbval-check-output"]
row_mask = torch.tensor([[True, False], [False, False]])  # query 1 may see nothing
qq, kk = torch.ones(2, 4), torch.ones(2, 4)
print("inline :", attention(qq, kk, kk, row_mask)[1])
print("package:", scaled_dot_product_attention(qq, kk, kk, row_mask)[1])

# %% [markdown]
# ## 4.5 Why divide by $\sqrt{d_k}$
#
# If the entries of $q$ and $k$ are independent with mean 0 and variance 1, their dot product is a sum of
# $d_k$ terms of variance 1, so it has variance $d_k$. GPT-2's heads have $d_k = 64$; take $d_k = 512$ to
# make the effect plain.

# %% tags=["nbval-check-output"]
d_k, n = 512, 20_000
qs = torch.randn(n, d_k, generator=generator)
ks = torch.randn(n, d_k, generator=generator)
raw = (qs * ks).sum(dim=-1)  # n dot products
scaled = raw / math.sqrt(d_k)
print(f"variance of q·k          : {raw.var():.1f}   (d_k = {d_k})")
print(f"variance of q·k / sqrt(d_k): {scaled.var():.3f}")

# %% mystnb={"figure": {"caption": "Dot products of unit-Gaussian vectors of width 512: unscaled (top) they have variance about 512 and spread over roughly ±90; divided by the square root of 512 (bottom) they have variance about 1.", "name": "fig-attention-scaling-hist"}, "image": {"alt": "Two histograms. The top one, of raw dot products, spans roughly minus 90 to 90. The bottom one, of scaled dot products, is a standard bell curve between minus 4 and 4."}}
fig, axes = plt.subplots(2, 1, figsize=(5.2, 5.5))
axes[0].hist(raw.numpy(), bins=80, color="tab:red")
axes[0].set_title(f"q·k, variance {raw.var():.0f}")
axes[1].hist(scaled.numpy(), bins=80, color="tab:blue")
axes[1].set_title(f"q·k / √d_k, variance {scaled.var():.2f}")
for ax in axes:
    ax.set_xlabel("score")
axes[0].set_ylabel("count")
fig.tight_layout()
plt.show()

# %% [markdown]
# Why does the spread matter? Because the softmax is not scale-invariant. Multiply a row of scores by a
# large number and the softmax collapses onto its largest entry: the row's entropy falls to 0 (a one-hot
# row), and the softmax's Jacobian $\partial p / \partial s = \operatorname{diag}(p) - p p^\top$ vanishes,
# so almost no gradient reaches the queries and keys. Below, rows of 64 unit-variance scores are multiplied
# by a factor $c$, so the scores have standard deviation $c$. The scaled scores of real attention sit at
# $c = 1$; forgetting the scale puts them at $c = \sqrt{512} \approx 22.6$. The Jacobian's norm has a closed
# form, $\lVert J \rVert_F^2 = \sum_i p_i^2 - 2 \sum_i p_i^3 + \left(\sum_i p_i^2\right)^2$, checked against
# autograd first.

# %%
def softmax_jacobian_norm(p):
    """Frobenius norm of diag(p) - p pᵀ for each row p (..., n).

    How much gradient the softmax passes on.
    """
    s2 = (p**2).sum(-1)
    # clamp: rounding can dip below 0
    return (s2 - 2 * (p**3).sum(-1) + s2**2).clamp_min(0).sqrt()


# Check the closed form against autograd once.
s = torch.randn(10, generator=generator)
jacobian = torch.autograd.functional.jacobian(lambda s: torch.softmax(s, -1), s)
assert_close(softmax_jacobian_norm(torch.softmax(s, -1)), jacobian.norm())

z = torch.randn(2000, 64, generator=generator)  # 2000 rows of 64 unit-variance scores
factors = torch.logspace(-1, 2, 40)
entropies, grads = [], []
for c in factors:
    p = torch.softmax(c * z, dim=-1)
    entropies.append(-(p * p.clamp_min(1e-30).log()).sum(-1).mean().item())
    grads.append(softmax_jacobian_norm(p).mean().item())

# %% tags=["nbval-check-output"]
for c, label in [(1.0, "scaled, c = 1"), (math.sqrt(512), "unscaled, c = sqrt(512)")]:
    p = torch.softmax(c * z, dim=-1)
    entropy = -(p * p.clamp_min(1e-30).log()).sum(-1).mean()
    print(
        f"{label:24s} entropy {entropy:.3f} nats (uniform: ln 64 = {math.log(64):.3f}), "
        f"largest weight {p.max(-1).values.mean():.3f}, "
        f"softmax gradient norm {softmax_jacobian_norm(p).mean():.4f}, "
        f"rows with a weight > 0.99: {(p.max(-1).values > 0.99).float().mean():.1%}"
    )
print(f"the gradient norm peaks at c = {factors[int(np.argmax(grads))]:.2f}")

# %% mystnb={"figure": {"caption": "Softmax saturation. As the scores grow (c is their standard deviation), the attention rows lose entropy; beyond a moderate scale the softmax passes on less and less gradient. Scaled attention sits at c = 1; unscaled attention with d_k = 512 at about 22.6.", "name": "fig-attention-saturation"}, "image": {"alt": "Two curves against the score scale c on a log axis. Entropy falls from about 4.2 nats at small c to near 0 at large c. The gradient norm rises to a peak around c of 2 to 3 and then falls towards 0. Vertical lines mark c = 1 and c = 22.6."}}
fig, ax1 = plt.subplots(figsize=(5.2, 4))
ax1.semilogx(factors, entropies, color="tab:blue", label="entropy of a row (nats)")
ax1.set_xlabel("score scale c (standard deviation of the scores)")
ax1.set_ylabel("entropy (nats)", color="tab:blue")
ax2 = ax1.twinx()
ax2.semilogx(factors, grads, color="tab:red", label="softmax gradient norm")
ax2.set_ylabel("‖diag(p) − ppᵀ‖ (gradient size)", color="tab:red")
for c, name in [(1.0, "scaled"), (math.sqrt(512), "unscaled, d_k = 512")]:
    ax1.axvline(c, color="grey", linestyle="--")
    ax1.text(c * 1.1, 0.5, name, color="grey", rotation=90, va="center",
             transform=ax1.get_xaxis_transform())  # beside its line, clear of the ticks
ax1.set_title("Large scores saturate the softmax")
fig.tight_layout()
plt.show()

# %% [markdown]
# With the scale, a row of 64 scores keeps an entropy of 3.687 nats, close to the 4.159 of a uniform row: the
# weights are spread out and every key gets some gradient. Without it the entropy collapses to 0.188 nats and
# the largest weight averages 0.926; 57.7% of the rows (none with the scale) put more than 0.99 of their weight on one
# key. Such a row passes on almost no gradient, and the average gradient norm falls from 0.1834 to 0.0955,
# still falling as the scale grows. The gradient is largest at a moderate scale ($c = 2.89$ here); dividing by
# $\sqrt{d_k}$ keeps the scores near that range whatever the head width, which is why the Transformer paper
# introduced it {cite}`vaswani2017attention`.
#
# ### A slip to avoid: the softmax over the wrong axis
#
# A first example often computes the weights of *one* query as `softmax(scores, dim=0)` on a
# 1-D vector of its scores, where `dim=0` is the only axis and is right. Carried over unchanged to a 2-D
# $(T, T)$ score matrix (or `dim=-2` on a batched one), the same call normalizes the *columns*: each
# key's weights over the queries sum to 1, instead of each query's weights over the keys. With a causal mask the future entries
# are still exactly 0, so the bug hides. Compare both on the same masked scores:

# %% tags=["nbval-check-output"]
T_demo = 6
x_demo = torch.randn(T_demo, 16, generator=generator)  # (T, D)
w_q, w_k, w_v = (torch.randn(16, 16, generator=generator) / 4 for _ in range(3))
demo_mask = causal_mask(T_demo)


def attention_weights(x, dim):
    scores = (x @ w_q) @ (x @ w_k).T / math.sqrt(16)  # (T, T)
    return torch.softmax(scores.masked_fill(~demo_mask, float("-inf")), dim=dim)


right, wrong = attention_weights(x_demo, dim=-1), attention_weights(x_demo, dim=0)
indent = "\n" + " " * 29
print("softmax over keys (dim=-1):  row sums", right.sum(1).round(decimals=3),
      indent + "column sums", right.sum(0).round(decimals=3))
print("softmax over queries (dim=0): row sums", wrong.sum(1).round(decimals=3),
      indent + "column sums", wrong.sum(0).round(decimals=3))

# %% [markdown]
# With the wrong axis, query 0's weights add up to 0.160 (its output shrinks) and the last query's to 2.816
# (its output grows). Worse, the future leaks. Key $s$'s column is normalized
# over all the queries $t \ge s$, so the weight query $t$ gives to key $s$ depends on the *later* queries
# $t+1, t+2, \dots$ through the denominator. A gradient measures it: how much does the output at position
# $t$ change when we nudge the input at a later position?

# %% tags=["nbval-check-output"]
def future_leak(dim):
    """For each output position t: the largest |d output_t / d x_s| over later s > t."""
    xs = x_demo.clone().requires_grad_(True)
    out = attention_weights(xs, dim) @ (xs @ w_v)  # (T, D)
    leaks = []
    for t in range(T_demo):
        (grad,) = torch.autograd.grad(out[t].sum(), xs, retain_graph=True)
        leaks.append(grad[t + 1 :].abs().max().item() if t + 1 < T_demo else 0.0)
    return leaks


print("softmax over keys    (dim=-1):", " ".join(f"{v:.4f}" for v in future_leak(-1)))
print("softmax over queries (dim=0) :", " ".join(f"{v:.4f}" for v in future_leak(0)))

# %% mystnb={"figure": {"caption": "The same masked scores normalized over the keys (top, correct: each row sums to 1) and over the queries (bottom, the slip: each column sums to 1).", "name": "fig-attention-wrong-axis-heatmaps"}, "image": {"alt": "Two lower-triangular heatmaps. At the top the first row is a single bright cell of weight 1. At the bottom the last column holds a single bright cell of weight 1 and the first row is dim."}}
fig, axes = plt.subplots(2, 1, figsize=(5, 8.3), layout="constrained")
labels = [f"t={t}" for t in range(T_demo)]
attention_heatmap(right, labels, ax=axes[0], title="softmax(dim=-1): rows sum to 1",
                  vmin=0, vmax=1, colorbar=False)
attention_heatmap(wrong, labels, ax=axes[1], title="softmax(dim=0): columns sum to 1",
                  vmin=0, vmax=1, colorbar=False)
fig.colorbar(axes[0].images[0], ax=axes, shrink=0.8, label="attention weight")
plt.show()

# %% [markdown]
# The correct softmax leaks nothing: every derivative of an output with respect to a later input is exactly
# 0.0000. With the softmax over the queries, every position except the last (which has no future) depends on
# later inputs, by up to 0.1173 here. A model trained like that learns to read the answer from the future
# during training and then fails at generation time, when the future does not exist yet. The package's
# tests check the correct version for every position: the gradient of the output at $t$ with respect to any
# input after $t$ is exactly zero.
#
# ## 4.6 The causal mask on a real batch
#
# Now real text. Take a batch of Tiny Shakespeare, tokenize it with GPT-2's tokenizer ({ref}`ch-tokens`),
# embed the tokens and run one head of attention on them. The embedding table and the query, key and value
# maps are **randomly initialised**: nothing here is trained, so the *pattern* of the weights is noise.
# What we look at is the structure every causal attention layer has, trained or not.

# %%
enc = gpt2_encoding()
tokens = torch.tensor(enc.encode_ordinary(load_tiny_shakespeare()))  # the corpus, (N,)
T = 12
xb, _ = get_batch(tokens, batch_size=2, block_size=T, generator=generator)  # (B, T) ids
for row in xb:
    print(repr(enc.decode(row.tolist())))

D, d_k = 64, 64
embedding = nn.Embedding(enc.n_vocab, D)  # random N(0, 1) vectors, (V, D)
W_q, W_k, W_v = (torch.randn(D, d_k, generator=generator) / math.sqrt(D) for _ in range(3))
with torch.no_grad():
    h = embedding(xb)  # (B, T, D)
    q, k, v = h @ W_q, h @ W_k, h @ W_v  # (B, T, d_k) each
    mask = causal_mask(T)  # (T, T)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # (B, T, T)
    scores = scores.masked_fill(~mask, float("-inf"))
    out, weights = scaled_dot_product_attention(q, k, v, mask)  # (B, T, d_k), (B, T, T)
labels = token_labels(xb[0], enc)

# %% mystnb={"figure": {"caption": "One head of causal attention on a Tiny Shakespeare sequence (random, untrained weights). Top: the scaled scores, with the future masked to minus infinity (grey: the mask's False entries). Bottom: the softmax of each row. Spaces are shown as ␣ and newlines as ↵.", "name": "fig-attention-causal-heatmaps"}, "image": {"alt": "Two 12 by 12 heatmaps with the decoded GPT-2 tokens of the sequence on both axes, each with a colour bar. The scores are finite on and below the diagonal and grey above, where the mask forbids attending. The weights are zero above the diagonal; the first row puts all its weight on the first token and later rows spread their weight over more tokens."}}
fig, axes = plt.subplots(2, 1, figsize=(4.8, 9), layout="constrained")
attention_heatmap(scores[0], labels, ax=axes[0], title="scores q·k/√d_k, future = −∞",
                  colorbar_label="score")
attention_heatmap(weights[0], labels, ax=axes[1], title="weights = softmax(scores)",
                  vmin=0, vmax=1, colorbar_label="attention weight")
axes[1].set_ylabel("")
plt.show()

# %% tags=["nbval-check-output"]
nonzero = (weights[0] > 0).sum(dim=-1)
print("non-zero weights per query position:", nonzero.tolist())
print(f"first query attends only to itself: weight {weights[0, 0, 0]:.4f}")
print(f"last query ({labels[-1]!r}) spreads over all {T} tokens; its largest weight is "
      f"{weights[0, -1].max():.4f} on {labels[weights[0, -1].argmax()]!r}")
print("every row sums to 1:", torch.allclose(weights.sum(-1), torch.ones(2, T)))
print("upper triangle exactly 0:", bool((weights.triu(diagonal=1) == 0).all()))

# %% [markdown]
# Query $t$ has exactly $t + 1$ non-zero weights: the first token can only attend to itself (weight 1.0000),
# while the last one, `␣mine`, sees the whole context of 12 tokens and spreads its weight over them (here the
# most, 0.1821, goes to `INGS`, but with random weights that choice means nothing). Every row still sums to 1
# and the upper triangle is exactly 0, for each sequence of the batch: the same mask serves every sequence.
# This is what makes training efficient: one pass over a block of $T$ tokens yields $T$ predictions, each
# made from its own past only.
#
# ## 4.7 Many heads in parallel
#
# One head computes one kind of weighted average. A model wants several at once: one head may track the
# previous token, another the speaker's name, another the opening quote. Multi-head attention runs $H$
# heads side by side, each in its own $d_k = D/H$-dimensional slice of the $D$ features, then concatenates
# their outputs and mixes them with one more linear map, the output projection.
#
# GPT-2 computes all the queries, keys and values of all the heads with **one** linear layer, `c_attn`,
# of shape $D \to 3D$ (its outputs are $q$, $k$, $v$ side by side), then reshapes:
#
# | step | shape |
# |---|---|
# | input `x` | $(B, T, D)$ |
# | `c_attn(x)`, split in three | $3 \times (B, T, D)$ |
# | `view(B, T, H, d_k)` | $(B, T, H, d_k)$ |
# | `transpose(1, 2)`: heads become a batch dimension | $(B, H, T, d_k)$ |
# | attention in every head at once | $(B, H, T, d_k)$, weights $(B, H, T, T)$ |
# | `transpose(1, 2)` then `view(B, T, D)`: concatenate the heads | $(B, T, D)$ |
# | `c_proj` | $(B, T, D)$ |
#
# Here it is inline, with the same submodule names as the package's `MultiHeadAttention` (and as GPT-2's
# checkpoints, which {ref}`ch-gpt2-weights` loads):

# %%
class CausalSelfAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        assert d_model % n_heads == 0, "n_heads must divide d_model"
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.c_attn = nn.Linear(d_model, 3 * d_model)  # q, k, v of every head at once
        self.c_proj = nn.Linear(d_model, d_model)  # mixes the concatenated heads

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.c_attn(x).split(D, dim=2)  # 3 x (B, T, D)
        # (B, T, D) -> (B, T, H, d_k) -> (B, H, T, d_k)
        H, d_k = self.n_heads, self.d_head
        q, k, v = (t.view(B, T, H, d_k).transpose(1, 2) for t in (q, k, v))
        # y: (B, H, T, d_k), weights: (B, H, T, T)
        y, weights = attention(q, k, v, causal_mask(T, device=x.device))
        # (B, H, T, d_k) -> (B, T, H, d_k) -> (B, T, D): the heads side by side
        y = y.transpose(1, 2).contiguous().view(B, T, D)
        return self.c_proj(y), weights


# %% [markdown]
# The package's `MultiHeadAttention` adds GPT-2's two dropouts (on the weights and on the output), a KV
# cache (section 7.7) and a `fast` switch to PyTorch's fused kernel. With the same weights it computes the
# same function:

# %%
from gpt_from_scratch.attention import MultiHeadAttention

torch.manual_seed(0)
mha = MultiHeadAttention(d_model=64, n_heads=4).eval()
ours = CausalSelfAttention(64, 4)
ours.load_state_dict(mha.state_dict())  # same names, same shapes
print(mha)

x = torch.randn(2, T, 64, generator=generator)  # (B, T, D)
y_ours, w_ours = ours(x)
y_package, w_package = mha(x, return_weights=True)
assert_close(y_ours, y_package)
assert_close(w_ours, w_package)
print("x", tuple(x.shape), "-> heads", tuple(mha.split_heads(x).shape),
      "-> y", tuple(y_package.shape), "| weights", tuple(w_package.shape))

# %% [markdown]
# "Parallel subspaces" is literal. Head $h$ reads only rows $h d_k \ldots (h+1) d_k - 1$ of the query, key and
# value maps, so it is an ordinary single-head attention with smaller matrices, and `c_proj` sees the $H$ outputs
# side by side. Head 2 computed on its own matches head 2 of the layer:

# %%
h_idx, d_head = 2, mha.d_head
rows = slice(h_idx * d_head, (h_idx + 1) * d_head)
W_qkv, b_qkv = mha.c_attn.weight, mha.c_attn.bias  # (3D, D), (3D,)
# (B, T, d_k) each:
q2, k2, v2 = (x @ W_qkv[i * 64 :][rows].T + b_qkv[i * 64 :][rows] for i in range(3))
y2, w2 = scaled_dot_product_attention(q2, k2, v2, causal_mask(T))
assert_close(w2, w_package[:, h_idx])
print("head 2 on its own == head 2 inside the layer:",
      torch.allclose(w2, w_package[:, h_idx], atol=1e-6))

# %% [markdown]
# The batch dimension is different from the head dimension in one way: heads are mixed by `c_proj`,
# but **batch elements never communicate**. Every matrix product acts on each sequence of the batch on
# its own, so changing one sequence leaves the outputs of all the others untouched, to the last bit:

# %% tags=["nbval-check-output"]
x_batch = torch.randn(3, T, 64, generator=generator)  # (B, T, D)
x_changed = x_batch.clone()
x_changed[1] = torch.randn(T, 64, generator=generator)  # replace sequence 1 only
with torch.no_grad():
    y_batch, y_changed = mha(x_batch), mha(x_changed)  # (B, T, D) each
for b in range(3):
    print(f"sequence {b}: max |change in output| = "
          f"{(y_batch[b] - y_changed[b]).abs().max():.4f}")

# %% [markdown]
# Each head computes its own weights. Below, the 4 heads of a freshly initialised layer on the first
# sequence of the Tiny Shakespeare batch (embedded by the random table above); the printout after the
# figure measures both sequences. Training will give these patterns
# meaning; {ref}`ch-gpt2-weights` shows what GPT-2's trained heads do.

# %% mystnb={"figure": {"caption": "The attention weights of the 4 heads of a randomly initialised MultiHeadAttention on the first sequence of a Tiny Shakespeare batch, on one colour scale from 0 (dark) to 1 (yellow). Every map is lower-triangular; at initialisation each row is close to a plain average of the visible tokens.", "name": "fig-attention-heads-grid"}, "image": {"alt": "A 2 by 2 grid of heatmaps, one per head, each labelled with the sequence's GPT-2 tokens, and one colour bar from 0 to 1. All are zero above the diagonal; the first row of each is one bright cell and the later rows fade into nearly even, dark shades."}}
torch.manual_seed(1)
layer = MultiHeadAttention(d_model=D, n_heads=4).eval()
with torch.no_grad():
    _, head_weights = layer(embedding(xb), return_weights=True)  # (B, H, T, T)
fig, axes = plt.subplots(2, 2, figsize=(4.8, 5.4), layout="constrained")
for hh, ax in enumerate(axes.flat):
    attention_heatmap(head_weights[0, hh], labels, ax=ax, title=f"head {hh}",
                      vmin=0, vmax=1, colorbar=False)
    if hh % 2:
        ax.set_ylabel("")
    if hh < 2:
        ax.set_xlabel("")
fig.colorbar(axes[0, 0].images[0], ax=axes, shrink=0.6, label="attention weight")
plt.show()

# %% [markdown]
# In the HTML edition and in a notebook, the same four maps are interactive: hover over a
# cell to read its query token, its key token and the weight between them; the buttons
# switch heads. The figure works in the page itself, without a running kernel.

# %%
from gpt_from_scratch.book.interactive import Interactive, attention_figure

Interactive(attention_figure(head_weights[0], labels, [f"head {hh}" for hh in range(4)],
                             title="Hover over a cell: query, key and weight"),
            "(The interactive version of this figure is in the HTML edition.)")

# %% tags=["nbval-check-output"]
last = head_weights[:, :, -1]  # (B, H, T): the last query of each sequence, in each head
entropy = -(last * last.log()).sum(-1)  # (B, H)
print(f"entropy of the last query's weights (nats), "
      f"uniform over {T} tokens = ln {T} = {math.log(T):.3f}:")
for b in range(2):
    heads = " ".join(f"head {hh} {entropy[b, hh]:.3f}" for hh in range(4))
    print(f"  sequence {b}:", heads)

# %% [markdown]
# At initialisation the rows are close to plain averages: the last query's entropies, 2.439 to 2.475 nats,
# are all near the 2.485 nats of a uniform row. `nn.Linear`'s default initialisation makes queries
# and keys small, so the scores are small and the softmax is nearly flat: the layer starts as the bag of words of section 4.1 and
# training sharpens it.

# ### Two heads, two relations
#
# Why several heads rather than one wide one? Because one softmax row is *one* weighted average: a
# query that must find two different things has to split its weight between them. A small example,
# with the weights set by hand so that we know what each head looks for. The sequence is
# `a b c a b d a c`; each token's vector is a one-hot of its position next to a one-hot of its letter
# ($D = 8 + 4$). Head "previous" asks, from position $t$, for the key of position $t - 1$; head "same
# letter" asks for keys with its own letter. The queries are scaled by $c = 20$ so the softmax is sharp:

# %% tags=["nbval-check-output"]
letters = "a b c a b d a c".split()
alphabet = sorted(set(letters))  # ['a', 'b', 'c', 'd']
n_pos, n_letters = len(letters), len(alphabet)
x_toy = torch.cat([torch.eye(n_pos),  # position one-hot
                   torch.eye(n_letters)[[alphabet.index(c) for c in letters]]], dim=1)
position_part, letter_part = slice(0, n_pos), slice(n_pos, n_pos + n_letters)


def projection(rows, cols, matrix):
    """A (D, D) weight that maps the features `rows` of a token to the features `cols`."""
    w = torch.zeros(n_pos + n_letters, n_pos + n_letters)
    w[rows, cols] = matrix
    return w


c = 20.0
one_back = c * torch.diag(torch.ones(n_pos - 1), diagonal=-1)  # position t asks for t - 1
heads = {
    "previous": (projection(position_part, position_part, one_back),  # w_q
                 projection(position_part, position_part, torch.eye(n_pos))),  # w_k
    "same letter": (projection(letter_part, letter_part, c * torch.eye(n_letters)),
                    projection(letter_part, letter_part, torch.eye(n_letters))),
}
toy_mask = causal_mask(n_pos)
for name, (w_q, w_k) in heads.items():
    _, w_toy = scaled_dot_product_attention(x_toy @ w_q, x_toy @ w_k, x_toy, toy_mask)
    picks = [" ".join(str(s) for s in range(t + 1) if w_toy[t, s] > 0.2)
             for t in range(n_pos)]
    print(f"{name:12s} keys read by each query t = 0..7:", " | ".join(picks))
w_q_sum = sum(w_q for w_q, _ in heads.values())
w_k_sum = sum(w_k for _, w_k in heads.values())
_, w_one = scaled_dot_product_attention(x_toy @ w_q_sum, x_toy @ w_k_sum, x_toy, toy_mask)
print("one head asked for both: weight on t - 1 =",
      " ".join(f"{w_one[t, t - 1]:.2f}" for t in range(1, n_pos)))

# %% [markdown]
# Each query is "what am I looking for" (position $t - 1$; my own letter), each key "what do I contain"
# (my position; my letter), and the value is what is handed over: with `x_toy` as values, head
# "previous" hands position $t$ the vector of token $t - 1$, so its letter, and head "same letter" the
# average of the one-hot positions where this letter occurred so far. The two relations come out clean in separate heads
# (query 6, an `a`, reads 0, 3 and 6 in one head and 5 in the other). One head asked for both splits its
# weight: the previous token gets between a quarter and a half of it, and the output blends the two
# answers. $H$ heads of width $D / H$ cost the same as one head of width $D$ and
# can ask $H$ such questions at once.

# %% [markdown]
# ### The written-out path and the fused kernel
#
# `MultiHeadAttention.fast` (on by default, what training uses) calls
# `torch.nn.functional.scaled_dot_product_attention` with `is_causal=True`. It never stores the
# $(B, H, T, T)$ weights, which is why `return_weights=True` always takes the written-out path. The two
# paths agree to float32 rounding:

# %%
x = torch.randn(4, 32, 64, generator=generator)  # (B, T, D)
mha.fast = True
y_fast = mha(x)
mha.fast = False
y_written = mha(x)
mha.fast = True
assert_close(y_fast, y_written, atol=1e-6, rtol=1e-6)
print(f"max |fast - written out| = {(y_fast - y_written).abs().max():.2e}")

# %% [markdown]
# ## 4.8 Attention does not know the order
#
# Remove the mask and attention is *permutation-equivariant*: shuffle the input tokens and the outputs are
# shuffled the same way, nothing else changes. Each output is a weighted average whose weights depend only
# on the *contents* of the query and keys, never on where they sit.

# %%
x = torch.randn(1, 8, 64, generator=generator)  # (B, T, D)
perm = torch.randperm(8, generator=generator)
# x -> 3 x (B, H, T, d_k)
project = lambda x: [mha.split_heads(t) for t in mha.c_attn(x).split(64, dim=2)]
out, _ = scaled_dot_product_attention(*project(x))  # no mask
out_perm, _ = scaled_dot_product_attention(*project(x[:, perm]))
assert_close(out_perm, out[:, :, perm])
print("permute inputs -> outputs permuted the same way:",
      torch.allclose(out_perm, out[:, :, perm], atol=1e-6))

# %% [markdown]
# The causal mask breaks the symmetry only partly: position $t$ sees the *set* of tokens $0..t$, but not
# their order. Take two sentences with the same words in a different order. The last token sees the same
# bag of tokens in both, so without positions its output is identical, and a language model could not tell
# who bit whom:

# %% tags=["nbval-check-output"]
from gpt_from_scratch.embeddings import sinusoidal_positional_encoding

a = torch.tensor(enc.encode(" The dog bit the man."))
b_ = torch.tensor(enc.encode(" The man bit the dog."))
print(token_labels(a, enc), token_labels(b_, enc))
# Same tokens, same last token:
assert sorted(a.tolist()) == sorted(b_.tolist()) and a[-1] == b_[-1]

pe = sinusoidal_positional_encoding(len(a), D)  # (T, D)
with torch.no_grad():
    for name, add in [("without positions", 0), ("with positions   ", pe)]:
        ya = layer((embedding(a) + add)[None])  # (1, T, D)
        yb = layer((embedding(b_) + add)[None])  # (1, T, D)
        gap = (ya[0, -1] - yb[0, -1]).abs().max()
        print(f"{name}: |last output, sentence 1 - sentence 2| = {gap:.4f}")

# %% [markdown]
# Without positions the two last outputs agree (0.0000, up to float rounding); adding the sinusoidal position
# vectors of {ref}`ch-embeddings` to the embeddings makes them differ (0.0656). This is why a GPT adds a
# position vector to every token before the first layer ({ref}`ch-gpt`; GPT-2 learns its position vectors).
# A causal model is not entirely blind to position, since position $t$ sees $t + 1$ tokens, but it cannot
# tell the order of the tokens it sees.
#
# ## 4.9 What attention costs
#
# Every query meets every key: $T^2$ scores per head. For $T$ tokens of width $D$, the four projections
# ($q$, $k$, $v$ and the output) cost $4TD^2$ multiply-adds and the scores and weighted sums, over all
# heads, $2T^2D$, so the $T^2$ term dominates once $T$ exceeds $2D$. Memory is worse for the written-out
# path: it stores the $(B, H, T, T)$ weights for the backward pass. Below we time a forward pass and measure
# the bytes autograd saves for the backward pass, for the written-out path and for PyTorch's fused kernel,
# with $H = 4$ heads of $d_k = 16$ on one CPU thread. Timings depend on your machine (they are not checked);
# the memory is exact.

# %%
def saved_for_backward(fn, *inputs):
    """Bytes of the distinct tensors autograd keeps for the backward pass of fn(*inputs)."""
    storages = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    inputs = [t.detach().requires_grad_(True) for t in inputs]
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*inputs)
    return sum(storages.values())


def best_time(fn, repeats=5):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


Ts = [64, 128, 256, 512, 1024, 2048]
written = lambda q, k, v: scaled_dot_product_attention(q, k, v, causal_mask(q.size(-2)))
fused = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)
cost = {"written out": {"time": [], "memory": []}, "fused": {"time": [], "memory": []}}
threads = torch.get_num_threads()
torch.set_num_threads(1)  # one thread: steadier timings on a shared machine
for T_ in Ts:
    # (B, H, T, d_k) each:
    qkv = [torch.randn(1, 4, T_, 16, generator=generator) for _ in range(3)]
    for name, fn in [("written out", written), ("fused", fused)]:
        cost[name]["memory"].append(saved_for_backward(fn, *qkv))
        with torch.no_grad():
            repeats = 5 if T_ < 1024 else 2
            cost[name]["time"].append(best_time(lambda: fn(*qkv), repeats=repeats))
torch.set_num_threads(threads)
for name in cost:
    print(f"{name:12s} time (ms):", " ".join(f"{t * 1e3:.2f}" for t in cost[name]["time"]))

# %% tags=["nbval-check-output"]
for name in cost:
    mib = " ".join(f"{m / 2**20:.2f}" for m in cost[name]["memory"])
    print(f"{name:12s} saved for backward (MiB):", mib)
memory = cost["written out"]["memory"]
growth = [memory[i + 1] / memory[i] for i in range(len(Ts) - 1)]
print("written-out memory ratio per doubling of T:", " ".join(f"{g:.2f}" for g in growth))
weight_mib = 4 * 2048 * 2048 * 4 / 2**20
print(f"one (B=1, H=4, T=2048, T=2048) float32 weight tensor: {weight_mib:.0f} MiB")

# %% mystnb={"figure": {"caption": "Cost of one attention call against sequence length T on log-log axes (B = 1, H = 4, d_k = 16, CPU). Dashed lines show slopes 1 and 2. The written-out path's memory grows as T squared; the fused kernel keeps only O(T).", "name": "fig-attention-cost"}, "image": {"alt": "Two log-log plots against T from 64 to 2048. Top, time: the written-out path rises steeply at large T, the fused kernel stays lower. Bottom, memory saved for backward: the written-out path follows the slope-2 guide line, the fused kernel runs parallel to the slope-1 line, far below it."}}
fig, axes = plt.subplots(2, 1, figsize=(5.2, 7))
Ts_arr = np.array(Ts, dtype=float)
panels = [(axes[0], "time", "ms", 1e3), (axes[1], "memory", "MiB", 1 / 2**20)]
for ax, key, unit, scale in panels:
    for name, marker in [("written out", "o"), ("fused", "s")]:
        ax.loglog(Ts, np.array(cost[name][key]) * scale, marker=marker, label=name)
    ref = np.array(cost["written out"][key]) * scale
    ax.loglog(Ts, ref[-1] * (Ts_arr / Ts_arr[-1]) ** 2, "k--", lw=0.8, label="∝ T²")
    ax.loglog(Ts, ref[-1] * (Ts_arr / Ts_arr[-1]), "k:", lw=0.8, label="∝ T")
    ax.set_xlabel("sequence length T")
    ax.set_ylabel(f"{key} ({unit})")
    ax.legend()
axes[0].set_title("forward time")
axes[1].set_title("memory saved for backward")
fig.tight_layout()
plt.show()

# %% [markdown]
# The written-out path keeps 69.50 MiB for the backward pass at $T = 2048$: the 64 MiB of weights, $H T^2$
# floats, plus the mask, the queries, keys and values. Each doubling of $T$ multiplies it by a ratio that
# approaches 4 (3.92 at the last step): the $T^2$ term. The fused kernel keeps 2.03 MiB, doubling with $T$.
# It computes the same numbers without ever storing the weights: it walks through the keys block by block,
# keeping a running maximum and sum for the softmax, the idea behind FlashAttention
# {cite}`dao2022flashattention`. Its time still grows like $T^2$ at large $T$, since every query still meets
# every key. The timings above depend on the machine; the memory does not.
#
# ### Attention, recurrence, convolution
#
# Before Transformers, sequence models mixed positions with recurrent layers (an RNN carries a state
# $h_t = f(h_{t-1}, x_t)$ from token to token) or convolutions (each layer mixes a window of $k$
# neighbours). Vaswani et al. compared the three by the cost of one layer, the number of operations
# that must run one after another, and the longest path a signal travels between two positions
# {cite}`vaswani2017attention`:
#
# | layer | complexity per layer | sequential operations | maximum path length |
# |---|---|---|---|
# | self-attention | $O(T^2 D)$ | $O(1)$ | $O(1)$ |
# | recurrent | $O(T D^2)$ | $O(T)$ | $O(T)$ |
# | convolutional (kernel $k$) | $O(k T D^2)$ | $O(1)$ | $O(\log_k T)$ |
#
# Attention links any two positions in one step and has no step-by-step dependency: all $T$ positions
# are computed at once, by a few large matrix products. An RNN cannot compute $h_t$ before $h_{t-1}$, so
# it takes $T$ steps whatever the hardware. We time a forward pass of one layer of width $D = 64$ on one
# CPU thread: `nn.RNN` (its loop over time runs in C++), the same recurrence as a Python loop of
# `nn.RNNCell`, one step per token, and `MultiHeadAttention` with its four projections. Timings depend on
# the machine (and were taken on a shared one); they are not checked.

# %%
D_seq = 64
torch.manual_seed(0)
rnn, rnn_cell = nn.RNN(D_seq, D_seq, batch_first=True), nn.RNNCell(D_seq, D_seq)
self_attention = MultiHeadAttention(D_seq, n_heads=4).eval()


def rnn_cell_loop(x):
    """The recurrence written out: T dependent steps, each waiting for the previous one."""
    h = torch.zeros(x.size(0), D_seq)  # (B, D)
    for t in range(x.size(1)):
        h = rnn_cell(x[:, t], h)  # (B, D): needs h from step t - 1
    return h


threads = torch.get_num_threads()
torch.set_num_threads(1)
print(f"{'T':>5} {'nn.RNN':>9} {'RNNCell loop':>13} {'attention':>10}",
      f"{'RNN / attention':>16}")
with torch.no_grad():
    for T_ in [64, 256, 1024]:
        x_seq = torch.randn(1, T_, D_seq, generator=generator)  # (B, T, D)
        t_rnn = best_time(lambda: rnn(x_seq))
        t_loop = best_time(lambda: rnn_cell_loop(x_seq), repeats=2)
        t_att = best_time(lambda: self_attention(x_seq))
        print(f"{T_:5d} {t_rnn * 1e3:7.2f}ms {t_loop * 1e3:11.2f}ms {t_att * 1e3:8.2f}ms "
              f"{t_rnn / t_att:15.1f}x")
torch.set_num_threads(threads)

# %% [markdown]
# The last column compares the two layers on the machine that ran this page. What does not depend on the
# machine: attention spends its work in a few large matrix products, which a CPU (and far more a GPU)
# runs efficiently in parallel, while the recurrence is a chain of $T$ small products, each waiting for
# the one before, and the Python loop adds the overhead of $T$ separate calls. But attention's *work*
# grows as $T^2$, the RNN's as $T$. Per layer, attention's scores and weighted sums cost $2T^2 D$
# multiply-adds and its four projections (queries, keys, values, output) $4TD^2$; the recurrence's two
# matrices cost $2TD^2$. The cell compares the mixing terms alone, $T^2 D$ against $TD^2$ (attention's
# is larger as soon as $T > D$), and then the whole layers, $(4TD^2 + 2T^2D) / 2TD^2 = 2 + T/D$:

# %% tags=["nbval-check-output"]
for T_, D_ in [(64, 64), (1024, 64), (1024, 768), (8192, 768)]:
    mixing = (T_ * T_ * D_) / (T_ * D_ * D_)
    whole = (4 * T_ * D_ * D_ + 2 * T_ * T_ * D_) / (2 * T_ * D_ * D_)
    print(f"T = {T_:5d}, D = {D_:3d}: mixing T²D / TD² = {mixing:6.2f}, "
          f"whole layers {whole:6.2f} x the RNN's work")

# %% [markdown]
# On the mixing terms GPT-2 small ($T = 1{,}024$, $D = 768$) sits just above the break-even point;
# counted whole, an attention layer does at least twice an RNN layer's arithmetic at any length, for
# its four projections. Long contexts (the last line) are where attention's quadratic cost bites, and where the memory-saving kernels above, sparse
# attention (section 5.7 mentions GPT-3's) and recurrent-style alternatives come back into play. On
# parallel hardware, what attention buys is its constant number of sequential steps: all $T$ positions
# of a training sequence are computed at once, where an RNN must take $T$ steps in a row.
#
# ### Looking ahead: reusing the past
#
# When a model generates text, it runs once per new token, and the keys and values of the earlier tokens
# do not change. Section 7.7 ({ref}`ch-generation`) keeps them in a **KV cache** and feeds the model only
# the newest token. Attention needs one thing for that, and it belongs here: a mask for new queries
# that come after $P$ cached positions. New query $i$ is position $P + i$ and may see keys
# $0 \ldots P + i$, the last rows of the full causal mask:

# %%
# 2 new queries after 3 cached positions: the last 2 rows of causal_mask(5)
print(causal_mask(2, n_past=3).int())
assert torch.equal(causal_mask(2, n_past=3), causal_mask(5)[3:])

# %% [markdown]
# ## 4.10 Attention as message passing
#
# Another way to see attention: the tokens are the nodes of a directed graph, and an edge $s \to t$ means
# "token $t$ may read token $s$". In one attention layer every node sends a message (its value $v_s$) along
# each of its edges; every receiving node weighs the messages by how well the sender's key matches its own
# query, and sums them. The mask *is* the graph: a causal mask is the graph in which every token links to
# itself and to all later tokens, $T(T+1)/2$ edges.
#
# **Encoder (self-)attention** uses no mask: the graph is complete, every token reads every other one in
# both directions. It suits tasks that see the whole input at once: the encoder of the original Transformer
# {cite}`vaswani2017attention`, or BERT-style models that classify or fill in text.
#
# **Decoder (causal self-)attention** is this chapter's: every token reads itself and its past, so the model
# can be trained to predict every next token of a sequence in one pass and can generate text one token at a
# time. GPT-2 {cite}`radford2019language` is a stack of decoder layers only.
#
# **Cross-attention** takes its queries from one sequence and its keys and values from another: in the
# original Transformer, each token of the translation being written queries the encoded source sentence.
# The graph is bipartite, the weight matrix is $T_q \times T_k$ and need not be square, which is why
# `scaled_dot_product_attention` allows $T_q \ne T_k$:

# %%
decoder_states = torch.randn(1, 3, 16, generator=generator)  # 3 targets, (B, T_q, d_k)
encoder_states = torch.randn(1, 7, 16, generator=generator)  # 7 sources, (B, T_k, d_k)
out, w = scaled_dot_product_attention(decoder_states, encoder_states, encoder_states)
print("cross-attention: output", tuple(out.shape), "weights", tuple(w.shape))

# %% [markdown]
# ## Summary
#
# - Attention replaces each token's vector with a weighted average of value vectors; the weights are a
#   softmax over **keys** (the last dimension), so every query's row sums to 1.
# - The scores are $q_t \cdot k_s / \sqrt{d_k}$. Without the $\sqrt{d_k}$, scores of width-512 heads have
#   variance about 512 and the softmax saturates: in section 4.5 most rows put more than 0.99 of their
#   weight on one key, and the mean gradient norm halves (0.1834 to 0.0955), falling further as the
#   scale grows.
# - The causal mask sets future scores to $-\infty$ so their weights are exactly 0: no information flows
#   backwards in time. A softmax over the wrong axis keeps the zeros but leaks the future anyway.
# - Multi-head attention runs $H$ heads of width $d_k = D/H$ in parallel: one fused `c_attn`, a reshape to
#   $(B, H, T, d_k)$, attention, a reshape back, and `c_proj`.
# - Attention ignores order; positions ({ref}`ch-embeddings`) must be added to the tokens.
# - It costs $O(T^2)$ time, and $O(T^2)$ memory when written out; fused kernels avoid storing the weights,
#   and a KV cache avoids recomputing the past during generation.
#
# Next, {ref}`ch-gpt` stacks this layer with LayerNorm ({ref}`ch-layernorm`) and a feed-forward network into
# GPT-2.
#
# ## Exercises
#
# ### Exercise 1. A causal mask without tril (implement)
#
# Write `causal_mask_arange(T)` returning the $(T, T)$ boolean mask (True = may attend) from
# two `torch.arange(T)` vectors and a comparison, using broadcasting: query $i$ may attend
# to key $j$ exactly when $j \le i$. Calling `tril`, `triu` or the package's `causal_mask`
# fails the check.

# %% tags=["solution", "hide-input"] mystnb={"code_prompt_show": "Show the solution", "code_prompt_hide": "Hide the solution"}
def causal_mask_arange(T):
    query = torch.arange(T)[:, None]  # (T, 1)
    key = torch.arange(T)[None, :]  # (1, T)
    return key <= query  # (T, T), broadcast


# %%
from gpt_from_scratch.exercises import check_causal_mask

check_causal_mask(causal_mask_arange);

# %% [markdown]
# ### Exercise 2. Attention with einsum (implement)
#
# Write `einsum_attention(q, k, v, mask=None)` returning `(output, weights)` like
# `scaled_dot_product_attention`, but compute both matrix products with `torch.einsum` (the
# scores are `"...qd,...kd->...qk"`); `@`, `matmul` and library attentions fail the check.
# It must work for $(B, T, d)$ and $(B, H, T, d)$ inputs and for fewer queries than keys.

# %% tags=["solution", "hide-input"] mystnb={"code_prompt_show": "Show the solution", "code_prompt_hide": "Hide the solution"}
def einsum_attention(q, k, v, mask=None):
    scores = torch.einsum("...qd,...kd->...qk", q, k) / math.sqrt(q.size(-1))
    # scores: (..., T_q, T_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)  # over the keys
    output = torch.einsum("...qk,...kd->...qd", weights, v)  # (..., T_q, d_v)
    return output, weights


# %%
from gpt_from_scratch.exercises import check_scaled_dot_product_attention

check_scaled_dot_product_attention(einsum_attention);

# %% [markdown]
# ### Exercise 3. Multi-head attention as a loop over heads (implement)
#
# Write a module class `LoopedMultiHeadAttention(d_model, n_heads)` with GPT-2's `c_attn =
# nn.Linear(D, 3D)` and `c_proj = nn.Linear(D, D)`, whose `forward(x)` runs the $H$ heads
# **one at a time**, in a Python loop: head $h$ takes features $h d_k \ldots (h+1) d_k - 1$
# of $q$, $k$ and $v$, runs causal attention on them, and the $H$ outputs are concatenated
# along the features before `c_proj`. No `view` or `transpose` needed: this is the "parallel
# subspaces" picture made literal. The package's `MultiHeadAttention` is not allowed inside.

# %% tags=["solution", "hide-input"] mystnb={"code_prompt_show": "Show the solution", "code_prompt_hide": "Hide the solution"}
class LoopedMultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.c_attn = nn.Linear(d_model, 3 * d_model)
        self.c_proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.c_attn(x).split(D, dim=2)  # 3 x (B, T, D)
        mask = causal_mask(T, device=x.device)  # (T, T)
        heads = []
        for h in range(self.n_heads):
            cols = slice(h * self.d_head, (h + 1) * self.d_head)
            q_h, k_h, v_h = q[..., cols], k[..., cols], v[..., cols]  # (B, T, d_k) each
            out, _ = scaled_dot_product_attention(q_h, k_h, v_h, mask)  # (B, T, d_k)
            heads.append(out)
        return self.c_proj(torch.cat(heads, dim=-1))  # (B, T, D)


# %%
from gpt_from_scratch.exercises import check_multi_head_attention

check_multi_head_attention(LoopedMultiHeadAttention);

# %% [markdown]
# ### Exercise 4. Word order without positions (predict, then run)
#
# In section 4.8 the two sentences " The dog bit the man." and " The man bit the dog." gave
# the same last output without positions. Without positions, which of the six output
# positions are equal between the two sentences, and which differ? Write down your
# prediction, then run the cell after the answer.

# %% [markdown] tags=["answer"]
# ```{admonition} Answer
# :class: dropdown
# Without positions, the output at position $t$ depends on its own token (the query) and on
# the *set* of the first $t + 1$ tokens (the keys and values), not on their order. Position
# 0 (" The" alone) is equal. Positions 1 to 3 see different sets (" dog" in one, " man" in
# the other) and differ. Position 4 sees the same set, but its own token is " man" in one
# sentence and " dog" in the other: it differs. Position 5, ".", has the same token and the
# same set: equal. The printed differences show which are zero.
# ```

# %%
with torch.no_grad():
    ya, yb = layer(embedding(a)[None]), layer(embedding(b_)[None])  # no positions
for t, (ta, tb) in enumerate(zip(token_labels(a, enc), token_labels(b_, enc))):
    gap = (ya[0, t] - yb[0, t]).abs().max()
    print(f"position {t}: {ta:>5s} vs {tb:>5s}   max difference {gap:.4f}")

# %% [markdown]
# ### Exercise 5. Caches and masks (explain)
#
# (a) Why does a KV cache store the keys and values of past tokens, but not their queries?
# (b) Why could an encoder (attention without a mask) not reuse its cache this way when a
# new token arrives? (c) The package's attention returns weights of 0 for a query whose mask
# row is all False, where the formula gives NaN. Can a causal mask alone produce such a row?
# Now batch sequences of different lengths by padding the short ones and masking the padding
# as keys: with the padding at the end of each short sequence, and with it at the start,
# which queries, if any, end up with an empty row?

# %% [markdown] tags=["answer"]
# ```{admonition} Answer
# :class: dropdown
# (a) A past query was only needed to compute its own token's output, which is already done;
# a new token's output needs its own query and everyone's keys and values. (b) Without a
# mask, every old token attends to the new one too, so every old output changes and must be
# recomputed: nothing can be reused. (c) Never from a causal mask alone: query $t$ always
# sees key $t$, itself, on the diagonal. Padding at the end is harmless too: a padding query
# there still sees the real tokens before it. Padding at the start (left padding, common
# when generating for a batch, so that every sequence ends in the same column) gives every
# padding query an empty row: under the causal mask it may only see the keys up to itself,
# which are all padding. Their outputs are thrown away, but a NaN there would not stay put:
# in the next layer it sits in the values, and $0 \times \text{NaN}$ is NaN.
# ```

# %% [markdown] tags=["quiz"]
# ## Check yourself
#
# A few questions on this chapter, each answer with its explanation. The numbers in them
# are the ones this chapter printed.

# %% tags=["quiz", "remove-input"]
from gpt_from_scratch.book.quiz import Choice, MultipleChoice, Numeric, show_quiz

show_quiz([
    Numeric("In section 4.6's causal attention, how many non-zero weights does the "
            "query at position 5 (counting from 0) have?", int(nonzero[5]), 0.5,
            "Query t sees keys 0 to t: t + 1 of them."),
    Numeric("What is the entropy, in nats, of an attention row spread evenly over "
            f"T = {len(nonzero)} tokens? (Three decimals.)", math.log(len(nonzero)), 0.0006,
            "ln T: the largest entropy a row of T weights can have."),
    MultipleChoice("Why are the scores divided by the square root of d_k?", [
        Choice("Dot products of unit-variance vectors of width d_k have variance d_k; the "
               "division brings it back to 1 so the softmax does not saturate", True,
               "Yes: section 4.3 measured both the spread and the lost gradient."),
        Choice("So that each row of weights sums to 1", False,
               "No: the softmax does that, whatever the scale."),
        Choice("To make the product faster", False, "No: it costs one extra division."),
    ]),
])
