# %% [markdown]
# (ch-embeddings)=
# # 2. Embeddings and positional encoding
#
# Chapter 1 ({ref}`ch-tokens`) turned text into token ids, a tensor of shape $(B, T)$. A transformer
# computes with vectors, so the first layer of GPT-2 swaps every id for a vector of $D$ numbers,
# and then adds a second vector that says *where* in the sequence the token sits. The result, shape
# $(B, T, D)$, is what enters the first transformer block.
#
# This chapter builds both halves:
#
# - **token embeddings**: a lookup table with one row per token of the vocabulary;
# - **positional encodings**: why a transformer needs them at all, what makes a good one, the
#   sinusoidal code of the original Transformer {cite}`vaswani2017attention` and the learned table of
#   GPT-2 {cite}`radford2019language`;
# - and the question of **scale**: how large these vectors are, and why the original Transformer
#   multiplies its embeddings by $\sqrt{D}$ while GPT-2 does not.

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

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn

from gpt_from_scratch.data import load_tiny_shakespeare
from gpt_from_scratch.tokenizer import gpt2_encoding
from gpt_from_scratch.utils import seed_everything
from gpt_from_scratch.book.figure_text import book_figures

book_figures()  # sharp on high-density screens, each PNG records its smallest text
seed_everything(1337)
text = load_tiny_shakespeare()
enc = gpt2_encoding()
V = enc.n_vocab  # GPT-2's vocabulary size
print(f"V = {V:,}")

# %% [markdown]
# ## 2.1 Token embeddings: a lookup table
#
# A token id is a name, not a quantity: token 8421 is not "more" than token 356. So we do not feed
# the ids themselves to the network. Instead we keep a table `wte` ("word token embedding", GPT-2's
# name) with one row of $D$ learnable numbers per token, and replace each id by its row.
# `nn.Embedding(V, D)` is exactly that table. Training will move the rows so that tokens used alike
# end up with similar vectors; for now they are random.
#
# We take a small width, $D = 64$, so that the pictures stay readable (GPT-2 small uses $D = 768$),
# and embed the second line of Tiny Shakespeare.

# %% tags=["nbval-check-output"]
D = 64  # a small width for this chapter's pictures; GPT-2 small uses D = 768
g = torch.Generator().manual_seed(0)
wte = nn.Embedding(V, D)  # the token embedding table, weight of shape (V, D)
with torch.no_grad():
    # nn.Embedding's default init, N(0, 1), made reproducible:
    wte.weight.copy_(torch.randn(V, D, generator=g))

line = text.splitlines()[1]
idx = torch.tensor(enc.encode(line))  # (T,)
x = wte(idx)  # (T, D)
print(repr(line))
print("token ids:", idx.tolist())
print("idx", tuple(idx.shape), "->", "x", tuple(x.shape))

# %% [markdown]
# A lookup is a matrix product in disguise. Write token $t$ as a *one-hot* row vector: $V$ zeros
# with a single 1 at position $t$. Multiplying it by the $(V, D)$ weight matrix picks out row $t$.
# The two are equal bit for bit (every other term is an exact $0 \times w$), which is why
# `assert_close` passes with both tolerances at zero:

# %% tags=["nbval-check-output"]
one_hot = F.one_hot(idx, num_classes=V).float()  # (T, V): a single 1 per row
via_matmul = one_hot @ wte.weight  # (T, V) @ (V, D) -> (T, D)
torch.testing.assert_close(via_matmul, x, atol=0, rtol=0)  # bit for bit
print("one-hot @ weight equals the lookup exactly:", torch.equal(via_matmul, x))
print(f"multiply-adds: lookup 0, one-hot matmul {len(idx) * V * D:,}")

# %% [markdown]
# So an embedding layer *is* a linear layer applied to one-hot inputs, just computed the cheap way:
# the matrix product above spends 32 million multiply-adds to copy 640 numbers. The same view explains
# its gradient: only the rows that were looked up receive one.

# %% tags=["nbval-check-output"]
x.sum().backward()
rows_with_gradient = (wte.weight.grad.abs().sum(dim=1) > 0).nonzero().flatten()
print("rows that receive a gradient:", rows_with_gradient.tolist())
print("distinct token ids in the line:", sorted(set(idx.tolist())))
wte.weight.grad = None

# %% [markdown]
# ## 2.2 Why position matters
#
# Token embeddings alone say *what* each token is, not *where* it is. Anything that treats the tokens
# as a set cannot tell two sentences with the same words apart. The simplest such summary is the mean
# over the tokens: "the dog bit the man" and "the man bit the dog" contain the same five tokens, so
# they get the same mean vector.
#
# Self-attention, the heart of the transformer, has the same blindness. Below, `attend` is attention
# stripped to its bones (no learned weights; Chapter 4, {ref}`ch-attention`, builds the real thing):
# each token's output is a weighted average of all tokens, with weights from dot products. Shuffle
# the input tokens and the outputs are shuffled the same way, nothing more, so " dog" comes out
# identical whether it bit or was bitten.

# %% tags=["nbval-check-output"]
a = torch.tensor(enc.encode("the dog bit the man"))
b = torch.tensor(enc.encode("the man bit the dog"))
print([enc.decode([i]) for i in a.tolist()], [enc.decode([i]) for i in b.tolist()])
with torch.no_grad():
    xa, xb = wte(a), wte(b)  # (T, D) each
    mean_a, mean_b = xa.mean(dim=0), xb.mean(dim=0)  # (D,) each: order-blind summaries
print("same bag-of-tokens vector:", torch.allclose(mean_a, mean_b, atol=1e-6, rtol=0))


def attend(x):
    """Self-attention with no learned weights and no positions: softmax(x xᵀ / √D) x."""
    weights = torch.softmax(x @ x.T / math.sqrt(x.shape[-1]), dim=-1)  # (T, T)
    return weights @ x  # (T, D)


with torch.no_grad():
    ya, yb = attend(xa), attend(xb)
dog_a, dog_b = 1, 4  # " dog" is token 1 of sentence a and token 4 of sentence b
print("' dog' gets the same output in both sentences:",
      torch.allclose(ya[dog_a], yb[dog_b], atol=1e-6, rtol=0))

# %% [markdown]
# A recurrent network, the sequence model before the transformer, has no such blindness and needs no
# positional code. It reads the tokens one at a time, and its state after token $t$ is computed from its
# state after token $t - 1$: the order is the computation itself, and a token's time step *is* its
# position. Attention gives that chain up in order to compute every position at once (section 4.9
# compares the two), so a transformer must be told where each token is.
#
# The fix is to give every position $p$ a vector $P[p]$ of the same width $D$ and add it to the token
# embedding: $x_p = \text{wte}[\text{token}_p] + P[p]$. Adding (rather than concatenating) keeps the
# width at $D$; the network learns to read both signals out of the sum.
#
# ## 2.3 What a positional code must do
#
# Two obvious candidates fail, and *how* they fail tells us what we need.
#
# **The raw index**, $P[p] = (p, p, \ldots, p)$. Its norm is $p\sqrt{D}$, so it grows without bound.
# Our token embeddings have norm about $\sqrt{D} = 8$:

# %% tags=["nbval-check-output"]
def raw_index(T):
    """P[p] = (p, p, ..., p): the position itself in every dimension. Shape (T, D)."""
    return torch.arange(T, dtype=torch.float32)[:, None].expand(T, D)


def index_over_length(T):
    """P[p] = p / (T - 1) in every dimension: squashed into [0, 1]. Shape (T, D)."""
    return raw_index(T) / max(T - 1, 1)


with torch.no_grad():
    token_norm = wte.weight.norm(dim=1).mean().item()
print(f"token embedding norm (mean over the vocabulary): {token_norm:.2f}")
for p in (1, 10, 100, 1000):
    print(f"raw index, position {p:>4}: norm {raw_index(p + 1)[p].norm():8.2f}")

# %% [markdown]
# By position 100 the position vector is a hundred times longer than the token vector, and the token
# is drowned. Measure it: two unrelated tokens, " dog" and " man", have nearly orthogonal random
# embeddings; put both at the same position and they become almost the same vector.

# %% tags=["nbval-check-output"]
dog = wte.weight[enc.encode(" dog")[0]].detach()
man = wte.weight[enc.encode(" man")[0]].detach()
cosine = F.cosine_similarity(dog, man, dim=0)
print(f"cosine(' dog', ' man') with no position:      {cosine:+.3f}")
for p in (10, 100, 1000):
    code = raw_index(p + 1)[p]
    cosine = F.cosine_similarity(dog + code, man + code, dim=0)
    print(f"cosine(' dog', ' man') both at position {p:>4}: {cosine:+.3f}")

# %% [markdown]
# **The index divided by the length**, $P[p] = p / (T-1)$, stays in $[0, 1]$, so it cannot drown
# anything. But now the code of a position depends on how long the sequence is:

# %% tags=["nbval-check-output"]
p = 5
print(f"position {p} in a sequence of T tokens")
print(f"{'T':>6}{'code':>10}{'gap to next':>14}")
for T in (10, 50, 1024):
    print(f"{T:>6}{index_over_length(T)[p, 0]:>10.4f}{1 / (T - 1):>14.4f}")

# %% [markdown]
# The same fifth position is 0.5556 in a 10-token text and 0.0049 in a 1,024-token one, and the step
# between neighbours shrinks from 0.1111 to 0.0010. A model generating text one token at a time would
# see every earlier position change its code at every step. So a good positional code needs two
# properties:
#
# 1. **bounded, on the scale of the token embeddings**, so that it does not drown the token signal;
# 2. **a function of the position only**, not of the sequence length, so that position 5 always
#    looks the same.
#
# A third is welcome: nearby positions should get similar codes, and the relation between
# positions $p$ and $p + k$ should look the same for every $p$.
# {numref}`fig-position-norms` puts the three schemes side by side, on the scale of the token
# embeddings.

# %% mystnb={"figure": {"caption": "Norm of the position vector at each position, for D = 64, against the mean norm of a token embedding (dashed). The raw index grows without bound; the index divided by the length (here T = 1,024) stays small but changes with T; the sinusoidal code has the same norm, √(D/2), everywhere.", "name": "fig-position-norms"}, "image": {"alt": "Log-scale line plot of position-vector norm against position from 1 to 1,023. The raw index rises linearly from 8 to about 8,000; the index over length rises from about 0.008 to 8; the sinusoidal code is flat at about 5.7; a dashed line at about 8 marks the token embedding norm."}}
from gpt_from_scratch.embeddings import sinusoidal_positional_encoding

positions = torch.arange(1, 1024)
fig, ax = plt.subplots(figsize=(5.2, 3.8))
ax.plot(positions, raw_index(1024)[1:].norm(dim=1), label="raw index p")
ax.plot(positions, index_over_length(1024)[1:].norm(dim=1), label="p / (T − 1), T = 1,024")
ax.plot(positions, sinusoidal_positional_encoding(1024, D)[1:].norm(dim=1),
        label="sinusoidal (next section)")
ax.axhline(token_norm, color="black", linestyle="--", label="token embedding norm")
ax.set_yscale("log")
ax.set_xlabel("position p")
ax.set_ylabel("‖P[p]‖")
ax.set_title(f"How large is the position vector? (D = {D})")
ax.legend()
plt.show()

# %% [markdown]
# ## 2.4 Sinusoidal encoding, by hand
#
# The original Transformer {cite}`vaswani2017attention` answers with sines and cosines. Pair up the
# dimensions, $(0, 1), (2, 3), \ldots$; pair $i$ gets the angular frequency
# $\omega_i = 1 / 10000^{2i/D}$, and position $p$ gets
#
# $$
# P[p, 2i] = \sin(p\,\omega_i), \qquad P[p, 2i+1] = \cos(p\,\omega_i).
# $$
#
# Every entry lies in $[-1, 1]$ and depends on $p$ alone: both properties hold by construction.
# For $D = 4$ there are two pairs, with $\omega_0 = 1$ and $\omega_1 = 1/10000^{2/4} = 1/100$, so
# $P[p] = (\sin p, \cos p, \sin\frac{p}{100}, \cos\frac{p}{100})$. At $p = 0$ every sine is 0 and every
# cosine is 1: the first row is $(0, 1, 0, 1)$. Here it is, one number at a time:

# %% tags=["nbval-check-output"]
def sinusoidal_by_hand(T, D, base=10000.0):
    """P[p, 2i] = sin(p / base^(2i/D)), P[p, 2i+1] = cos(p / base^(2i/D)), one at a time."""
    pe = torch.zeros(T, D, dtype=torch.float64)
    for p in range(T):
        for i in range(D // 2):
            angle = p / base ** (2 * i / D)
            pe[p, 2 * i] = math.sin(angle)
            pe[p, 2 * i + 1] = math.cos(angle)
    return pe


pe4 = sinusoidal_by_hand(6, 4)
print(pe4.numpy().round(4))

# %% [markdown]
# The first pair turns fast (one radian per position) and the second slowly (a hundredth of a radian).
# The package's `sinusoidal_positional_encoding` computes the same table with whole-tensor operations
# (angles in float64, rounded once to float32). It agrees with the loop, for $D = 4$ and for $D = 64$;
# from here on we use it.

# %% tags=["nbval-check-output"]
torch.testing.assert_close(sinusoidal_positional_encoding(6, 4), pe4.float())
torch.testing.assert_close(sinusoidal_positional_encoding(128, 64, dtype=torch.float64),
                           sinusoidal_by_hand(128, 64))
print("first row for D = 4:", sinusoidal_positional_encoding(6, 4)[0].tolist())
try:
    sinusoidal_positional_encoding(6, 5)
except ValueError as error:
    print("D = 5: ValueError:", error)

# %% [markdown]
# The package requires an even $D$, since every frequency owns one sine and one cosine; an odd width
# raises the error above. {numref}`fig-sinusoidal-heatmap` shows the whole table for 128
# positions.

# %%
T_plot = 128
pe = sinusoidal_positional_encoding(T_plot, D)  # (T, D)

# %% mystnb={"figure": {"caption": "The sinusoidal table P for 128 positions and D = 64. Low dimensions oscillate quickly along the positions; higher dimensions change ever more slowly, and the top rows are almost constant (sines near 0, cosines near 1).", "name": "fig-sinusoidal-heatmap"}, "image": {"alt": "Heatmap with position on the horizontal axis and dimension on the vertical axis, colours from -1 (blue) to 1 (red). The bottom rows show fine vertical stripes; stripes widen moving up; the top third is nearly uniform, alternating rows near 0 and near 1."}}
fig, ax = plt.subplots(figsize=(5.2, 3.8))
im = ax.imshow(pe.T, aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1, origin="lower")
ax.set_xlabel("position p")
ax.set_ylabel("dimension j")
ax.set_title(f"Sinusoidal positional encoding P, T = {T_plot}, D = {D}")
fig.colorbar(im, ax=ax, label="P[p, j]")
plt.show()

# %% [markdown]
# Reading one row of the heatmap at a time gives one sine wave per even dimension
# ({numref}`fig-sinusoidal-curves`). Together they work like the hands of a clock, or the digits of a
# number: the fast ones tell neighbouring positions apart, the slow ones tell far-apart positions
# apart, and no two positions within any practical length share the same combination.

# %% mystnb={"figure": {"caption": "Four even dimensions of the sinusoidal table (D = 64) along the positions. Each is a sine; every 8 dimensions (4 frequency pairs) the wavelength grows by 10000^(8/64) ≈ 3.16.", "name": "fig-sinusoidal-curves"}, "image": {"alt": "Four stacked line plots over positions 0 to 127. Dimension 0 oscillates with a period of about 6 positions, dimension 8 with about 20, dimension 16 completes about two periods of 63, and dimension 24 rises slowly to 1 near position 50 and falls to about -0.77 at position 127."}}
fig, axes = plt.subplots(4, 1, figsize=(5.2, 6.5), sharex=True, sharey=True)
for ax, j in zip(axes, (0, 8, 16, 24)):
    ax.plot(pe[:, j])
    ax.set_ylabel(f"P[p, {j}]")
    period = 2 * math.pi * 10000 ** (j / D)
    ax.set_title(f"dimension {j}: wavelength {period:.1f} positions")
axes[-1].set_xlabel("position p")
fig.suptitle("Even dimensions are sines of ever lower frequency")
fig.tight_layout()
plt.show()

# %% [markdown]
# The wavelengths $2\pi / \omega_i = 2\pi \cdot 10000^{2i/D}$ form a geometric progression, from
# $2\pi$ for the first pair towards $2\pi \cdot 10000$ (the last pair, $i = D/2 - 1$, stops one step
# short). We can read the frequencies back out of the table itself: the angle of pair $i$ at
# position 1 is $\omega_i$.

# %% tags=["nbval-check-output"]
pe64 = sinusoidal_positional_encoding(2, D, dtype=torch.float64)
# The angle at position 1 is the frequency w_i:
omega = torch.atan2(pe64[1, 0::2], pe64[1, 1::2])
wavelength = 2 * math.pi / omega  # (D/2,)
ratios = wavelength[1:] / wavelength[:-1]
print(f"shortest wavelength {wavelength[0]:.4f} (2π = {2 * math.pi:.4f})")
longest = 2 * math.pi * 10000 ** ((D - 2) / D)
print(f"longest wavelength  {wavelength[-1]:,.1f} (2π·10000^((D-2)/D) = {longest:,.1f}, "
      f"2π·10000 = {2 * math.pi * 10000:,.1f})")
print(f"ratio between neighbours: {ratios.min():.6f} to {ratios.max():.6f}; "
      f"10000^(2/D) = {10000 ** (2 / D):.6f}")

# %% [markdown]
# ### Interleaved or concatenated
#
# The paper's formula interleaves: dimension $2i$ is the sine of frequency $\omega_i$, dimension $2i + 1$
# its cosine. Many implementations (the Transformer's own reference code, Tensor2Tensor, among them)
# concatenate instead: all $D/2$ sines first, then all $D/2$ cosines. The two tables hold the same
# numbers in a different order of dimensions, so one is a column permutation of the other. In GPT the
# position vector is added to the token embedding and the sum is normalized before any matrix reads it,
# so the permutation is undone by permuting the whole residual stream's basis the same way: the
# token embedding's columns, every LayerNorm's gain and shift, the rows of every matrix that reads the
# stream and the columns of every matrix that writes to it. Such a permuted model computes exactly what
# the original does, so training can reach the same functions with either layout: the choice does not
# matter. (Tensor2Tensor also spaces its frequencies a little differently, $\omega_i =
# 10000^{-i/(D/2 - 1)}$, so that the last pair reaches exactly $1/10000$; the cell uses the paper's
# frequencies in both layouts.) The cell builds the concatenated table, then the permutation that
# interleaves it, and checks that they are equal:

# %% tags=["nbval-check-output"]
def sinusoidal_concatenated(T, D, base=10000.0):
    """Per position: the D/2 sines sin(p w_i), then the D/2 cosines cos(p w_i)."""
    omega = base ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)  # (D/2,)
    angles = torch.arange(T, dtype=torch.float64)[:, None] * omega  # (T, D/2)
    return torch.cat([angles.sin(), angles.cos()], dim=1)  # (T, D)


pe_cat = sinusoidal_concatenated(128, D)  # (T, D)
pe_interleaved = sinusoidal_positional_encoding(128, D, dtype=torch.float64)  # (T, D)
half = torch.arange(D // 2)
perm = torch.stack([half, half + D // 2], dim=1).flatten()  # [0, D/2, 1, D/2 + 1, ...]
print("perm[:8]:", perm[:8].tolist())
torch.testing.assert_close(pe_cat[:, perm], pe_interleaved)
print("concatenated[:, perm] == interleaved:",
      torch.allclose(pe_cat[:, perm], pe_interleaved, atol=1e-12))
print("same dot products P·Pᵀ:",
      torch.allclose(pe_cat @ pe_cat.T, pe_interleaved @ pe_interleaved.T, atol=1e-9))
print("but not the same table:", not torch.allclose(pe_cat, pe_interleaved))

# %% [markdown]
# Everything that follows, distances and rotations included, holds for both layouts, since permuting
# dimensions changes no dot product.
#
# ## 2.5 Deeper: distance and rotation
#
# Two facts make the sinusoidal code more than a list of distinct labels. First, the dot product of
# two codes depends only on how far apart the positions are. Each pair contributes
# $\sin(p\omega)\sin(q\omega) + \cos(p\omega)\cos(q\omega) = \cos((p - q)\omega)$, so
#
# $$
# P[p] \cdot P[q] = \sum_{i} \cos\big((p - q)\,\omega_i\big),
# $$
#
# a function of $p - q$ alone. {numref}`fig-sinusoidal-similarity` shows the matrix $P P^\top$: it is
# constant along every diagonal.

# %%
similarity = pe @ pe.T  # (T, T): P[p] · P[q]

# %% mystnb={"figure": {"caption": "Top: the dot products P·Pᵀ of all pairs of positions (D = 64): every diagonal is constant, so the similarity depends only on the distance p − q. Bottom: the similarity of position 0 to each position q, and of position 64 to the positions after it (shifted): the curves coincide.", "name": "fig-sinusoidal-similarity"}, "image": {"alt": "Top, a square heatmap bright along the main diagonal and darker away from it, with faint bands parallel to the diagonal. Bottom, two coinciding curves that start at 32 at distance 0, fall to about 21 within 10 positions, then drift down between about 11 and 20 with ripples."}}
fig, (ax0, ax1) = plt.subplots(2, 1, figsize=(5.2, 8))
im = ax0.imshow(similarity, cmap="viridis", origin="lower")
ax0.set_xlabel("position q")
ax0.set_ylabel("position p")
ax0.set_title("P · Pᵀ")
fig.colorbar(im, ax=ax0)
ax1.plot(similarity[0], label="P[0] · P[q]")
ax1.plot(torch.arange(T_plot - 64), similarity[64, 64:], "--", label="P[64] · P[64 + q]")
ax1.set_xlabel("distance q")
ax1.set_ylabel("dot product")
ax1.set_title("Similarity depends on the distance only")
ax1.legend()
plt.show()

# %% [markdown]
# Measured in float64, the largest difference between two entries on the same diagonal is below
# $10^{-12}$, rounding level. The similarity also falls off with distance, though not monotonically
# (the ripples in the lower panel, at large distances):

# %% tags=["nbval-check-output"]
pe_exact = sinusoidal_positional_encoding(T_plot, D, dtype=torch.float64)  # (T, D)
S = pe_exact @ pe_exact.T  # (T, T)
spread = max(
    (torch.diagonal(S, k).max() - torch.diagonal(S, k).min()).item()
    for k in range(-T_plot + 1, T_plot)
)
print(f"P[p]·P[p] = {S[0, 0]:.4f} = D/2 for every p")
print("largest spread along any diagonal of P·Pᵀ is below 1e-12:", spread < 1e-12)
print(f"P[p]·P[p+1] = {S[0, 1]:.4f}, P[p]·P[p+10] = {S[0, 10]:.4f}, "
      f"P[p]·P[p+100] = {S[0, 100]:.4f}")

# %% [markdown]
# Second, moving $k$ positions forward is one fixed linear map. From the angle-addition formulas,
#
# $$
# \begin{pmatrix} \sin((p+k)\omega) \\ \cos((p+k)\omega) \end{pmatrix}
# = \begin{pmatrix} \cos k\omega & \sin k\omega \\ -\sin k\omega & \cos k\omega \end{pmatrix}
#   \begin{pmatrix} \sin p\omega \\ \cos p\omega \end{pmatrix},
# $$
#
# a rotation of each frequency pair by the angle $k\omega_i$. Stack these $2 \times 2$ blocks on the
# diagonal and you get a $D \times D$ matrix $R_k$ with $P[p + k] = R_k P[p]$ for **every** $p$; it
# depends on the offset $k$ but not on $p$. Vaswani et al. chose sinusoids hoping this would let the
# model attend by relative position easily. Let us verify it numerically, in float64, for every
# position at once:

# %% tags=["nbval-check-output"]
def rotation(k, D, base=10000.0):
    """R_k: a 2×2 rotation by k·w_i per frequency pair: P[p + k] = R_k P[p] for every p."""
    R = torch.zeros(D, D, dtype=torch.float64)
    for i in range(D // 2):
        angle = k / base ** (2 * i / D)
        c, s = math.cos(angle), math.sin(angle)
        pair = slice(2 * i, 2 * i + 2)
        R[pair, pair] = torch.tensor([[c, s], [-s, c]], dtype=torch.float64)
    return R


for k in (1, 5, 37):
    R = rotation(k, D)  # (D, D)
    # Row p: R_k P[p] against P[p + k]
    error = (pe_exact[: T_plot - k] @ R.T - pe_exact[k:]).abs().max().item()
    print(f"k = {k:>2}: max |R_k P[p] - P[p+k]| over all p is below 1e-12: {error < 1e-12}")

# %% [markdown]
# Rotary position embeddings (RoPE) {cite}`su2024roformer`, used by many recent models, take this idea
# further: instead of adding $P$ to the input once, they rotate the queries and keys of every attention
# layer by these same angles.
#
# ## 2.6 Learned position embeddings (GPT-2)
#
# GPT-2 does not use the sinusoids. Like its token table, its position table `wpe` is an ordinary
# learned parameter: one trainable vector per position, 1,024 positions of 768 numbers for GPT-2 small,
# started at small random values and shaped by training. The package's `LearnedPositionalEmbedding`
# is that table; its parameter is called `weight`, like `nn.Embedding`'s, so GPT-2's trained `wpe.weight`
# loads into it unchanged (Chapter 8, {ref}`ch-gpt2-weights`).
#
# Both modules return the position vectors, shape $(T, D)$, for the caller to add. The sinusoidal one
# keeps its table in a **non-persistent buffer**: a buffer follows the module to a GPU or to half
# precision like a parameter, but unlike a parameter it is not trained, and *non-persistent* means it is
# also left out of `state_dict()`. The table is derived from $(T_{\max}, D)$ and rebuilt exactly on
# construction, so saving it would only add dead weight to every checkpoint (and stop a checkpoint
# loading into a model with a different context length).

# %% tags=["nbval-check-output"]
from gpt_from_scratch.embeddings import (
    LearnedPositionalEmbedding, SinusoidalPositionalEncoding,
)

torch.manual_seed(0)
wpe = LearnedPositionalEmbedding(context_length=1024, D=768)  # GPT-2 small's table
sinusoidal = SinusoidalPositionalEncoding(context_length=1024, D=768)
print("wpe.weight:", tuple(wpe.weight.shape),
      f"{wpe.weight.numel():,} parameters, std {wpe.weight.std():.4f}")
print("state dict keys: learned", list(wpe.state_dict()),
      "| sinusoidal", list(sinusoidal.state_dict()))
print("sinusoidal buffers:",
      [(name, tuple(buffer.shape)) for name, buffer in sinusoidal.named_buffers()])

# %% [markdown]
# In the model, the token vectors $(B, T, D)$ and the position vectors $(T, D)$ are simply added;
# broadcasting repeats the positions for every sequence of the batch. A learned table has exactly
# $T_{\max}$ rows, so a longer input is an error, and the message says what to do:

# %% tags=["nbval-check-output"]
tokens = torch.randint(0, V, (2, 10), generator=torch.Generator().manual_seed(1))  # (B, T)
wte_gpt2 = nn.Embedding(V, 768)
x = wte_gpt2(tokens) + wpe(tokens.shape[1])  # (B, T, D) + (T, D) -> (B, T, D)
print("x:", tuple(x.shape))
try:
    wpe(1025)
except ValueError as error:
    print("ValueError:", error)

# %% [markdown]
# Which is better? Vaswani et al. report that learned and sinusoidal positions performed nearly
# identically in their experiments, and kept the sinusoids in the hope that they extrapolate to longer
# sequences. GPT-2 has a fixed context of 1,024 tokens, so extrapolation is moot, and a learned table
# is the simplest thing that works.
#
# ## 2.7 Embedding scale
#
# The sum $\text{wte}[t] + P[p]$ is only a good sum if neither term dwarfs the other. The original
# Transformer multiplies its token embeddings by $\sqrt{D}$ before adding the sinusoids; GPT-2 does no
# such thing. Both choices follow from the norms, measured here at GPT-2 small's width $D = 768$:

# %% tags=["nbval-check-output"]
D_gpt2 = 768
g = torch.Generator().manual_seed(2)
tables = {
    "nn.Embedding default, N(0, 1)": torch.randn(4096, D_gpt2, generator=g),
    "GPT-2 init, N(0, 0.02²)": 0.02 * torch.randn(4096, D_gpt2, generator=g),
    "N(0, 1/D)": torch.randn(4096, D_gpt2, generator=g) / math.sqrt(D_gpt2),
    "N(0, 1/D), times √D": (
        torch.randn(4096, D_gpt2, generator=g) / math.sqrt(D_gpt2) * math.sqrt(D_gpt2)
    ),
    "sinusoidal code, 1,024 positions": sinusoidal_positional_encoding(1024, D_gpt2),
}
for name, table in tables.items():
    print(f"{name:<34} mean row norm {table.norm(dim=1).mean():7.3f}")
norms = {name: table.norm(dim=1).mean() for name, table in tables.items()}
ratio = norms["nn.Embedding default, N(0, 1)"] / norms["GPT-2 init, N(0, 0.02²)"]
print(f"nn.Embedding default / GPT-2 init: {ratio:.1f} times")

# %% [markdown]
# A row of $D$ independent $\mathcal{N}(0, \sigma^2)$ numbers has norm close to $\sigma\sqrt{D}$, and the
# sinusoidal code has norm exactly $\sqrt{D/2}$ (each pair contributes $\sin^2 + \cos^2 = 1$), here
# 19.596.
#
# - **The Transformer** shares one matrix between the token embedding and the output layer that turns
#   vectors back into logits. A common initialization for that matrix is $\mathcal{N}(0, 1/D)$ (the one
#   in its reference implementation), which gives rows of norm 0.999: next to a sinusoidal code of norm
#   19.6 the token would be drowned, the failure we measured above. Multiplying by $\sqrt{D}$ lifts the
#   token rows to 27.7, the same order as the code.
# - **GPT-2** {cite}`radford2019language` learns both tables; nanoGPT {cite}`karpathy2023nanogpt` and
#   Hugging Face's implementation initialize both from $\mathcal{N}(0, 0.02^2)$, so the two terms start
#   at the same norm, 0.554, and neither can drown the other. The first thing each block does is a
#   LayerNorm (Chapter 3, {ref}`ch-layernorm`), which rescales whatever it is given, so the small
#   absolute size does no harm.
#
# The default `nn.Embedding` (norm 27.7) is the odd one out: fine on its own, but 50.0 times larger than
# GPT-2's learned positions would be if you mixed the two.
#
# ## Summary
#
# - An embedding layer is a $(V, D)$ table; looking up row $t$ equals multiplying a one-hot vector by
#   the table, exactly, and only looked-up rows receive gradients.
# - Mean-pooling and attention are blind to order: without positions, "the dog bit the man" and "the man
#   bit the dog" are the same input.
# - A positional code must stay on the scale of the token embeddings and depend on the position only;
#   the raw index fails the first test and the index over the length fails the second.
# - The sinusoidal code $P[p, 2i] = \sin(p\omega_i)$, $P[p, 2i+1] = \cos(p\omega_i)$, with wavelengths in a
#   geometric progression from $2\pi$ towards $2\pi \cdot 10000$, passes both; its dot products depend
#   only on the distance, and a shift by $k$ positions is a fixed rotation $R_k$.
# - GPT-2 learns its positions instead (`wpe`, shape $(1024, 768)$), and keeps tokens and positions on
#   the same small scale rather than multiplying by $\sqrt{D}$.
#
# Next, Chapter 3 ({ref}`ch-layernorm`) builds the normalization that every GPT-2 block starts with.
#
# ## Exercises
#
# ### Exercise 1. The sinusoidal table in one go (implement)
#
# Write `sinusoidal_table(T, D)` returning the sinusoidal $(T, D)$ table in float32,
# computed with whole-tensor operations (no Python loop over positions, unlike
# `sinusoidal_by_hand`). Then run the check.

# %% tags=["solution", "hide-input"] mystnb={"code_prompt_show": "Show the solution", "code_prompt_hide": "Hide the solution"}
def sinusoidal_table(T, D):
    position = torch.arange(T, dtype=torch.float64)[:, None]  # (T, 1)
    frequency = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)  # (D/2,)
    pe = torch.zeros(T, D, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(position * frequency)  # (T, D/2)
    pe[:, 1::2] = torch.cos(position * frequency)
    return pe.float()  # (T, D)


# %%
from gpt_from_scratch.exercises import check_sinusoidal_positional_encoding

check_sinusoidal_positional_encoding(sinusoidal_table);

# %% [markdown]
# ### Exercise 2. Distances between positions (predict, then run)
#
# Section 2.5 measured dot products of positions. Think of the codes as points instead: for
# $D = 64$, predict the squared distances $\lVert P[100] - P[101] \rVert^2$ and $\lVert
# P[100] - P[110] \rVert^2$, and say whether $\lVert P[0] - P[10] \rVert^2$ is the same as
# the second, using only what the chapter showed about norms and offsets. Write your answers
# down, then run the cell after the answer: it prints dot products; turn them into
# distances.

# %% [markdown] tags=["answer"]
# ```{admonition} Answer
# :class: dropdown
# Expand the square: $\lVert P[p] - P[q] \rVert^2 = \lVert P[p] \rVert^2 + \lVert P[q]
# \rVert^2 - 2\,P[p] \cdot P[q]$. Every code has the same squared norm, $D/2 = 32$ (the cell
# prints $P[100] \cdot P[100] = 32.0000$), and the dot product depends only on $p - q$, so
# the distance does too: $\lVert P[0] - P[10] \rVert^2 = \lVert P[100] - P[110] \rVert^2$
# exactly. With the printed products, the offset of 1 gives $2\,(32 - 30.9168) \approx 2.17$
# and the offset of 10 gives $2\,(32 - 21.0516) \approx 21.90$: all codes lie on one sphere,
# and neighbouring positions are close points on it, distant positions far ones.
# ```

# %%
P = sinusoidal_positional_encoding(128, 64, dtype=torch.float64)
for p, q in [(100, 101), (100, 110), (100, 100), (0, 10)]:
    print(f"P[{p}] . P[{q}] = {float(P[p] @ P[q]):.4f}")

# %% [markdown]
# ### Exercise 3. A bounded code (predict, then run)
#
# The raw-index code drowned the tokens. Predict the cosine similarity of " dog" and " man"
# when both carry the *sinusoidal* code of position 1,000 (with the $D = 64$ table `wte` of
# this chapter): closer to the value without positions, or to the raw index's? Then run the
# cell after the answer.

# %% [markdown] tags=["answer"]
# ```{admonition} Answer
# :class: dropdown
# Closer to the value without positions. Both vectors gain the same code, which pulls them
# together, but a sinusoidal code has norm $\sqrt{D/2}$ at every position ($\sin^2 + \cos^2
# = 1$ per pair), about the size of a token embedding, instead of a norm that grows with the
# position: the tokens stay visible.
# ```

# %%
code = sinusoidal_positional_encoding(1001, D)[1000]  # (D,)
print(f"norm of the sinusoidal code: {code.norm():.2f}; of ' dog': {dog.norm():.2f}")
alone = F.cosine_similarity(dog, man, dim=0)
both = F.cosine_similarity(dog + code, man + code, dim=0)
print(f"cosine(' dog', ' man'): no position {alone:+.3f}; both at 1000 {both:+.3f}")

# %% [markdown]
# ### Exercise 4. Longer than trained (explain)
#
# A learned table `wpe` has no row for position 1,024, while
# `sinusoidal_positional_encoding(2048, D)` happily returns one. Does that mean a model
# trained with sinusoids on 1,024-token texts will work on 2,048-token texts? What has it
# never seen?

# %% [markdown] tags=["answer"]
# ```{admonition} Answer
# :class: dropdown
# No. The table has rows for every position, but the model never saw them: it never saw
# codes of positions beyond 1,023, never attended over offsets longer than 1,023, and never
# averaged over more than 1,024 keys. Its weights were fitted to those conditions only, so
# quality usually drops past the training length: a formula for the codes does not make the
# network extrapolate.
# ```

# %% [markdown]
# ### Exercise 5. A code that stands still (explain)
#
# Section 2.3 showed why $P[p] = p / (T - 1)$ fails when $T$ grows during generation. A
# colleague fixes it: always divide by the context length, $P[p] = p / 1023$, whatever the
# length of the text. Codes no longer move. What is still wrong with this code, measured
# against the two requirements of section 2.3 and against the sinusoids?

# %% [markdown] tags=["answer"]
# ```{admonition} Answer
# :class: dropdown
# Requirement 2 is now met, and formally so is the third: moving $k$ positions adds the same
# vector $\frac{k}{1023}(1, \ldots, 1)$. What remains wrong is scale and shape. Neighbours
# are 0.0010 apart in every dimension (the printed gap for a 1,024-token text), so the codes
# of positions 5 (0.0049) and 6 differ by a vector of norm $0.0010 \sqrt{64} \approx 0.008$,
# next to token embeddings of norm 7.97: the model must read position from a tiny change
# along one single direction, $(1, \ldots, 1)$, where the sinusoids spread it over $D/2 =
# 32$ frequencies, the fast ones separating nearby positions clearly. And 1023 hard-codes
# the context length: a model with a longer context gets a different code at every position.
# ```

# %% [markdown] tags=["quiz"]
# ## Check yourself
#
# A few questions on this chapter, each answer with its explanation. The numbers in them
# are the ones this chapter printed.

# %% tags=["quiz", "remove-input"]
from gpt_from_scratch.book.quiz import Choice, MultipleChoice, Numeric, show_quiz

show_quiz([
    MultipleChoice("Looking up row t of an embedding table gives the same result as:", [
        Choice("multiplying the one-hot vector of t by the table", True,
               "Yes, exactly: the lookup skips the multiplications by zero."),
        Choice("the dot products of t's vector with every row", False,
               "No: that would score every token, not pick one row."),
        Choice("averaging the rows of the tokens before t", False,
               "No: that is a bag of words, not an embedding lookup."),
    ]),
    MultipleChoice("Without positions, what does attention make of \"the dog bit the "
                   "man\" and \"the man bit the dog\"?", [
        Choice("The same input: it is blind to order", True,
               "Yes: the same tokens, in any order, give the same set of vectors."),
        Choice("Different inputs, since each token sits in another row", False,
               "No: the row order does not enter the computation."),
    ]),
    Numeric(f"For the sinusoidal code of width D = {pe_exact.shape[1]}, what is "
            "P[p]·P[p] (the same for every p)?", S[0, 0].item(), 0.01,
            "Each pair of dimensions adds sin² + cos² = 1: D/2 in all."),
])
