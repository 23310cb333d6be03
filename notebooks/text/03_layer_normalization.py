# %% [markdown]
# (ch-layernorm)=
# # 3. Layer normalization
#
# A GPT is a deep stack: GPT-2 small has 12 blocks, GPT-2 XL 48, and every block adds its output to a
# running sum of vectors, the *residual stream*. Nothing in that design keeps the numbers at a sensible
# size. Layer normalization {cite}`ba2016layer` does: it rescales each token's vector to zero mean and
# unit variance, then lets the network choose a scale and shift of its own.
#
# This chapter builds LayerNorm by hand and checks it against PyTorch's, fixes a common slip in how
# $\epsilon$ is added, contrasts it with BatchNorm, and then measures what normalization does in a deep
# residual stack: how the activations and the gradients behave with the normalization after the
# residual addition (the original Transformer) or before it (GPT-2).

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

from gpt_from_scratch.utils import seed_everything
from gpt_from_scratch.book.figure_text import book_figures

book_figures()  # sharp on high-density screens, each PNG records its smallest text
_ = seed_everything(1337)

# %% [markdown]
# ## 3.1 Mean and variance of each token
#
# LayerNorm works on one token at a time. For the vector $x \in \mathbb{R}^D$ of one token it computes
#
# $$
# \mu = \frac{1}{D}\sum_{j=1}^{D} x_j, \qquad
# \sigma^2 = \frac{1}{D}\sum_{j=1}^{D} (x_j - \mu)^2, \qquad
# \hat{x} = \frac{x - \mu}{\sqrt{\sigma^2 + \epsilon}}.
# $$
#
# On a batch of shape $(B, T, D)$ that is one mean and one variance per token: a reduction over the
# last dimension with `keepdim=True`, giving shape $(B, T, 1)$ so that it broadcasts back. To see it
# work, build six tokens with very different offsets and spreads:

# %% tags=["nbval-check-output"]
B, T, D = 2, 3, 8
g = torch.Generator().manual_seed(0)
# (B, T, 1) each: one offset and one spread per token
offset = torch.tensor([[0.0, 5.0, -3.0], [10.0, 0.5, 1.0]])[..., None]
scale = torch.tensor([[1.0, 0.1, 4.0], [2.0, 30.0, 1.0]])[..., None]
x = offset + scale * torch.randn(B, T, D, generator=g)  # (B, T, D)

mean = x.mean(dim=-1, keepdim=True)  # (B, T, 1): one mean per token, over its D features
var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)  # (B, T, 1): biased, divides by D
print("mean per token:\n", mean.squeeze(-1).numpy().round(3))
print("variance per token:\n", var.squeeze(-1).numpy().round(3))

# %% [markdown]
# The variance above divides by $D$: the *biased* (population) variance. Statistics courses often
# divide by $D - 1$ instead (the *unbiased* estimate of a population's variance from a sample), and
# that is what `torch.var` does by default. The two differ by the factor $D/(D-1)$, which matters for
# small $D$:

# %% tags=["nbval-check-output"]
biased = x.var(dim=-1, unbiased=False, keepdim=True)  # divide by D
unbiased = x.var(dim=-1, keepdim=True)  # torch's default: divide by D - 1
torch.testing.assert_close(biased, var)
print(f"unbiased / biased = {(unbiased / biased).mean():.6f}; "
      f"D / (D - 1) = {D / (D - 1):.6f}")

# %% [markdown]
# LayerNorm uses the biased variance: it is not estimating anything, just measuring the spread of these
# $D$ numbers. Now the normalization itself, by hand, compared with `nn.LayerNorm` (whose learned
# scale and shift start at 1 and 0, so at first it only normalizes):

# %% tags=["nbval-check-output"]
eps = 1e-5


def layer_norm_by_hand(x, eps=1e-5):
    """(x - mean) / sqrt(var + eps), over the last dimension, with the biased variance."""
    mean = x.mean(dim=-1, keepdim=True)  # (..., 1)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)  # (..., 1)
    return (x - mean) / torch.sqrt(var + eps)  # (..., D)


x_hat = layer_norm_by_hand(x)
print("every normalized token has mean 0 (up to float32 rounding):",
      x_hat.mean(dim=-1).abs().max().item() < 1e-4)
print("biased variance of each normalized token:\n",
      x_hat.var(dim=-1, unbiased=False).numpy().round(4))

reference = nn.LayerNorm(D)  # γ = 1, β = 0 at initialization
torch.testing.assert_close(layer_norm_by_hand(x), reference(x))
with_unbiased = (x - mean) / torch.sqrt(unbiased + eps)
difference = (with_unbiased - reference(x)).abs().max()
print(f"with the unbiased variance instead: max |difference| {difference:.3f}")

# %% [markdown]
# Every token now has mean 0 and variance 1, except one whose variance came out as 0.9981. That token
# (the second of the first sequence) has variance 0.005, and $\epsilon = 10^{-5}$ is no longer
# negligible next to it: $0.005 / (0.005 + 0.00001) \approx 0.998$. Keep that in mind; it is the
# subject of the next section but one. The version with the unbiased variance is off by up to 0.132.
#
# ## 3.2 Learnable scale and shift
#
# Forcing every token to mean 0 and variance 1 throws information away, and a layer may need some
# features large and others small. So LayerNorm ends with a learned elementwise scale $\gamma$ and
# shift $\beta$, both of shape $(D,)$:
#
# $$
# y = \gamma \odot \frac{x - \mu}{\sqrt{\sigma^2 + \epsilon}} + \beta .
# $$
#
# They start at $\gamma = 1$, $\beta = 0$. Note that $\gamma$ and $\beta$ are shared by all tokens: they do
# not give back each token's own mean and spread (that is gone, on purpose), they give each *feature*
# a learned scale and offset. The size of the activations thus becomes a parameter the optimizer
# controls directly, instead of a side effect of every weight that came before.
#
# The package's `LayerNorm` is this formula, with the parameters named `weight` ($\gamma$) and
# `bias` ($\beta$) as in `nn.LayerNorm`, so that state dicts, including GPT-2's, load unchanged. Like the
# attention layer of Chapter 4, it has a `fast` switch. Off, it runs the lines written out above. On (the
# default, which the models of the later chapters train with), it calls PyTorch's fused kernel
# `F.layer_norm`: the same formula, computed in one pass over each row instead of a chain of tensor
# operations that each read and write the whole tensor. Both paths are checked here:

# %% tags=["nbval-check-output"]
from gpt_from_scratch.layernorm import LayerNorm

written_out = LayerNorm(D, elementwise_affine=False, fast=False)
fused = LayerNorm(D, elementwise_affine=False)  # fast=True, the default: PyTorch's kernel
torch.testing.assert_close(written_out(x), layer_norm_by_hand(x))
torch.testing.assert_close(fused(x), layer_norm_by_hand(x))
ln = LayerNorm(D)
print(ln)
print({name: tuple(p.shape) for name, p in ln.named_parameters()})
print("same state dict keys as nn.LayerNorm:",
      list(ln.state_dict()) == list(nn.LayerNorm(D).state_dict()))

# %% tags=["nbval-check-output"]
reference = nn.LayerNorm(D)
with torch.no_grad():
    reference.weight.copy_(1 + 0.5 * torch.randn(D, generator=g))  # a trained-looking γ
    reference.bias.copy_(0.5 * torch.randn(D, generator=g))  # and β
ln.load_state_dict(reference.state_dict())

x_check = torch.randn(B, T, D, generator=g)  # (B, T, D)
upstream = torch.randn(B, T, D, generator=g)
for fast in (False, True):
    ln.fast = fast
    ln.zero_grad()
    reference.zero_grad()
    x1, x2 = x_check.clone().requires_grad_(), x_check.clone().requires_grad_()
    y1, y2 = ln(x1), reference(x2)
    (y1 * upstream).sum().backward()
    (y2 * upstream).sum().backward()
    torch.testing.assert_close(y1, y2)
    torch.testing.assert_close(x1.grad, x2.grad)
    torch.testing.assert_close(ln.weight.grad, reference.weight.grad)
    torch.testing.assert_close(ln.bias.grad, reference.bias.grad)
print("written out and fused: outputs and all three gradients match nn.LayerNorm")

# %% [markdown]
# From here on the book uses `gpt_from_scratch.layernorm.LayerNorm`. (The package's tests also check
# both paths against `nn.LayerNorm` for tuple shapes, without the affine part, and on rows of tiny
# variance, the rows the next section is about.)

# %% [markdown]
# ## 3.3 A common slip: dividing by std + eps
#
# Many tutorials write the normalization as $(x - \mu) / (\sigma + \epsilon)$, as the Annotated
# Transformer's `LayerNorm` does {cite}`rush2018annotated`: $\epsilon$ added to the standard
# deviation instead of to the variance under the square root. It looks harmless. How far is it from the real LayerNorm? Take rows of
# $D = 768$ random numbers, scale them to standard deviations from $10^{-4}$ to $10^{2}$, and measure the
# largest difference between the two outputs (in float64, so that only the formula differs):

# %%
def layer_norm_std_plus_eps(x, eps=1e-5):
    """The slip: eps added to the standard deviation, outside the square root."""
    mean = x.mean(dim=-1, keepdim=True)
    std = x.std(dim=-1, unbiased=False, keepdim=True)
    return (x - mean) / (std + eps)


stds = torch.logspace(-4, 2, 61, dtype=torch.float64)
# 64 tokens, D = 768:
z = torch.randn(64, 768, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
errors = torch.stack([
    (layer_norm_std_plus_eps(s * z) - layer_norm_by_hand(s * z)).abs().max() for s in stds
])

# %% mystnb={"figure": {"caption": "Largest difference between (x − μ)/(σ + ε) and the correct (x − μ)/√(σ² + ε), for rows of D = 768 numbers with standard deviation σ, ε = 10⁻⁵. At σ = 1 they agree to about 2·10⁻⁵; at and below √ε (dashed) they disagree by about 1 or more. The dip at σ = 0.5 is where the two small corrections, ε/σ and ε/(2σ²), happen to cancel.", "name": "fig-std-plus-eps"}, "image": {"alt": "Log-log plot of max absolute error against input standard deviation from 1e-4 to 1e2. The error is about 4 at the left, falls steeply past the dashed line at sigma about 0.003, dips sharply near sigma 0.5, and then declines slowly from about 2e-5 at sigma 1 to 4e-7 at sigma 100."}}
fig, ax = plt.subplots(figsize=(5.2, 3.8))
ax.loglog(stds, errors, marker=".", label="max |(x−μ)/(σ+ε) − (x−μ)/√(σ²+ε)|")
ax.axvline(math.sqrt(eps), color="gray", linestyle="--", label="σ = √ε")
ax.set_xlabel("standard deviation σ of the input row")
ax.set_ylabel("max abs error")
ax.set_title("std + eps versus sqrt(var + eps), eps = 1e-5, D = 768")
ax.legend()
plt.show()

# %% tags=["nbval-check-output"]
for s in (1e-4, 1e-3, math.sqrt(eps), 1e-2, 0.1, 1.0, 100.0):
    i = int(torch.argmin((stds - s).abs()))  # the nearest σ of the sweep
    print(f"σ = {stds[i].item():.3g}: max abs error {errors[i]:.1e}")

# %% [markdown]
# For the scales activations usually have ($\sigma \approx 1$) the slip costs about $2 \times 10^{-5}$:
# invisible. The damage is on rows whose spread is comparable to $\sqrt{\epsilon} \approx 0.003$ or
# smaller: there the two formulas disagree by order 1. Such rows do occur, for example a token whose
# activations are almost constant. The correct LayerNorm treats a spread below $\sqrt{\epsilon}$ as noise
# and shrinks it; the slipped version blows the noise up to unit size:

# %% tags=["nbval-check-output"]
noise = torch.randn(1, 768, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
row = 3.0 + 1e-4 * noise
print(f"near-constant row: mean {row.mean():.4f}, std {row.std(unbiased=False):.1e}")
print(f"std of the output: correct {layer_norm_by_hand(row).std(unbiased=False):.4f}, "
      f"std + eps {layer_norm_std_plus_eps(row).std(unbiased=False):.4f}")
sigma = row.std(unbiased=False)
print(f"1 / (σ + ε) = {1 / (sigma + eps):,.0f};  "
      f"1 / √(σ² + ε) = {1 / math.sqrt(sigma**2 + eps):,.0f};  "
      f"1 / √ε = {1 / math.sqrt(eps):,.0f}")

# %% [markdown]
# The same goes for the gradients, which scale like $1/(\sigma + \epsilon)$ in one case and
# $1/\sqrt{\sigma^2 + \epsilon}$ in the other: for this row 9,140 against 316, and the correct formula never
# exceeds $1/\sqrt{\epsilon} \approx 316$ whatever the row. And a pretrained model is tied to the formula it
# was trained with: GPT-2 puts $\epsilon$ inside the square root, so loading its weights into the slipped
# version changes its outputs exactly on such rows.
#
# ## 3.4 LayerNorm versus BatchNorm
#
# BatchNorm {cite}`ioffe2015batch`, the normalization of convolutional networks, uses the same formula
# along the other axis: one mean and variance **per feature**, computed over all the tokens of the
# batch, where LayerNorm computes one mean and variance **per token**, over its features. The picture
# below uses twelve tokens with different spreads and sixteen features with different offsets.

# %%
n_tokens, n_features = 12, 16
g = torch.Generator().manual_seed(3)
# Each token has its own scale, (tokens, 1); each feature its own offset, (1, features).
token_spread = torch.linspace(0.5, 4.0, n_tokens)[:, None]
feature_offset = torch.linspace(-3.0, 3.0, n_features)[None, :]
noise = torch.randn(n_tokens, n_features, generator=g)
acts = feature_offset + token_spread * noise  # (tokens, features)

# Statistics per row (token), and per column (feature) over the batch:
after_ln = LayerNorm(n_features, elementwise_affine=False)(acts)
after_bn = nn.BatchNorm1d(n_features, affine=False)(acts)

# %% mystnb={"figure": {"caption": "The same activations (12 tokens × 16 features) before normalization, after LayerNorm (each row, one token, rescaled on its own) and after BatchNorm (each column, one feature, rescaled across the tokens). LayerNorm keeps the feature offsets visible as a left-to-right gradient; BatchNorm removes them but keeps the tokens' different spreads.", "name": "fig-layernorm-vs-batchnorm"}, "image": {"alt": "Three heatmaps, one above the other, tokens on the vertical axis and features on the horizontal axis. The input runs from blue on the left to red on the right, with the lower rows much more contrasted. After LayerNorm every row has similar contrast and the blue-to-red trend remains. After BatchNorm the trend is gone, and the lower rows still have stronger colours than the upper ones."}}
fig, axes = plt.subplots(3, 1, figsize=(5.2, 9), sharex=True)
panels = [("input", acts), ("LayerNorm: each row", after_ln),
          ("BatchNorm: each column", after_bn)]
for ax, (title, values) in zip(axes, panels):
    im = ax.imshow(values.detach(), cmap="RdBu_r", vmin=-4, vmax=4)
    ax.set_title(title)
    ax.set_ylabel("token")
    ax.set_yticks(range(0, n_tokens, 2))  # whole tokens, not 2.5
axes[-1].set_xlabel("feature")
fig.colorbar(im, ax=axes, shrink=0.8, label="value")
plt.show()

# %% [markdown]
# The statistics make the difference exact: after LayerNorm every **row** has mean 0 and standard
# deviation 1, after BatchNorm every **column** does.

# %% tags=["nbval-check-output"]
def describe(name, values):
    """Print the ranges of the row (token) and column (feature) means and std deviations."""

    def span(t):
        # + 0.0 turns -0.0 into 0.0: no "-0.00"
        low, high = (round(v.item(), 2) + 0.0 for v in (t.min(), t.max()))
        return f"[{low:.2f}, {high:.2f}]"

    print(f"{name:<10} row means    {span(values.mean(dim=1))}, "
          f"row stds    {span(values.std(dim=1, unbiased=False))}")
    print(f"{'':<10} column means {span(values.mean(dim=0))}, "
          f"column stds {span(values.std(dim=0, unbiased=False))}")


with torch.no_grad():
    for name, values in [("input", acts), ("LayerNorm", after_ln), ("BatchNorm", after_bn)]:
        describe(name, values)

# %% [markdown]
# For a language model the decisive difference is that BatchNorm's output for one token depends on the
# *other* tokens in the batch. During training it averages over whatever the batch holds; when
# generating text, one sequence and one new token at a time, there is no batch to average over, so
# BatchNorm must switch to running averages stored during training, and behaves differently in
# training and use. LayerNorm needs nothing but the token itself:

# %% tags=["nbval-check-output"]
with torch.no_grad():
    ln_alone = LayerNorm(n_features, elementwise_affine=False)(acts[:1])
    # BatchNorm needs 2+ rows in training mode:
    bn_alone = nn.BatchNorm1d(n_features, affine=False)(acts[:2])[:1]
print("LayerNorm: token 0 normalized alone equals token 0 in the batch:",
      torch.allclose(ln_alone, after_ln[:1], atol=1e-6))
print(f"BatchNorm: token 0 with one neighbour vs in the full batch, "
      f"max difference {(bn_alone - after_bn[:1]).abs().max():.2f}")

# %% [markdown]
# ## 3.5 Where the normalization goes: post-LN and pre-LN
#
# A transformer block has two *branches*, attention (Chapter 4) and a feed-forward network
# (Chapter 5), and adds the output of each to the residual stream. The normalization can sit in two
# places:
#
# - **post-LN**, the original Transformer {cite}`vaswani2017attention`: add the branch, then normalize the
#   sum, `x = ln(x + f(x))`;
# - **pre-LN**, GPT-2: normalize the *input* of the branch and leave the stream alone,
#   `x = x + f(ln(x))`, with one last LayerNorm `ln_f` after the final block. In Radford et al.'s words
#   {cite}`radford2019language`, "layer normalization was moved to the input of each sub-block ... and an
#   additional layer normalization was added after the final self-attention block".
#
# Some tutorials show a post-LN block, the original Transformer's, and call it GPT-2's.
# It is not. Where the normalization goes does not depend on what a branch computes, so this chapter
# studies a simpler residual stack: each block has one branch, a small feed-forward network
# (a linear map to $4D$ features, GELU, a linear map back to $D$), added to the stream with or without
# a LayerNorm.

# %%
def feed_forward(D):
    """One residual branch: Linear(D, 4D) -> GELU -> Linear(4D, D)."""
    return nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))


class NoNormBlock(nn.Module):
    """x + f(x): nothing is normalized."""

    def __init__(self, D):
        super().__init__()
        self.ff = feed_forward(D)

    def forward(self, x):
        return x + self.ff(x)


class PostLNBlock(NoNormBlock):
    """The original Transformer (2017): add the branch, then normalize the sum."""

    def __init__(self, D):
        super().__init__(D)
        self.ln = LayerNorm(D)

    def forward(self, x):
        return self.ln(x + self.ff(x))


class PreLNBlock(PostLNBlock):
    """GPT-2: normalize the branch's input; the stream x itself is never normalized."""

    def forward(self, x):
        return x + self.ff(self.ln(x))


# %%
def make_stack(block, L, D, generator):
    """L blocks, N(0, 1/fan_in) weights, zero biases (LayerNorms keep gamma=1, beta=0)."""
    blocks = nn.ModuleList([block(D) for _ in range(L)])
    with torch.no_grad():
        for name, p in blocks.named_parameters():
            if name.endswith("bias") and ".ln." not in name:
                p.zero_()
            elif ".ln." not in name:
                p.copy_(torch.randn(p.shape, generator=generator) / math.sqrt(p.shape[1]))
    return blocks


def run_stack(blocks, x):
    """The residual stream after each block: a list of L + 1 tensors (the input first)."""
    stream = [x]
    for block in blocks:
        stream.append(block(stream[-1]))
    return stream


# %% [markdown]
# ## 3.6 Variance through a deep stack
#
# Stack $L = 48$ blocks of width $D = 128$ (as deep as GPT-2 XL), initialize every weight from
# $\mathcal{N}(0, 1/\text{fan-in})$ (a standard choice that keeps a single linear layer's output variance
# equal to its input's), feed in 64 tokens of unit variance, and record the mean and the standard
# deviation of the residual stream after every block.

# %%
D, L, N = 128, 48, 64
x0 = torch.randn(N, D, generator=torch.Generator().manual_seed(4))  # N tokens, variance 1
placements = [("no normalization", NoNormBlock), ("post-LN", PostLNBlock),
              ("pre-LN", PreLNBlock)]
stats = {}
with torch.no_grad():
    for name, block in placements:
        stream = run_stack(make_stack(block, L, D, torch.Generator().manual_seed(5)), x0)
        means = torch.stack([h.mean().abs() for h in stream])
        stats[name] = (means, torch.stack([h.std() for h in stream]))

# %% mystnb={"figure": {"caption": "Absolute mean (top) and standard deviation (bottom) of the residual stream after each of 48 random residual blocks (D = 128, weights N(0, 1/fan-in)). Without normalization the stream grows geometrically; post-LN pins it to mean 0 (up to float32 rounding; exact zeros sit on the bottom edge) and std 1 after every block; pre-LN lets it grow slowly, since each block adds a branch of bounded size.", "name": "fig-depth-variance"}, "image": {"alt": "Two log-scale line plots against layer 0 to 48. Without normalization both the absolute mean and the standard deviation climb steadily by many orders of magnitude. Post-LN stays at standard deviation 1 with a mean near float32 rounding. Pre-LN's standard deviation rises gently and its mean stays small."}}
fig, (ax0, ax1) = plt.subplots(2, 1, figsize=(5.2, 7), sharex=True)
for name, (means, stds_) in stats.items():
    ax0.plot(means.clamp_min(1e-10), label=name)  # exact zeros drawn at 1e-10, the bottom
    ax1.plot(stds_, label=name)
ax0.set_yscale("log")
ax1.set_yscale("log")
ax0.set_title("|mean| of the residual stream")
ax1.set_title("standard deviation of the residual stream")
ax1.set_xlabel("layer")
ax1.legend()  # one legend, where it covers no curve
plt.show()

# %% tags=["nbval-check-output"]
print(f"{'std after layer':<17}{1:>9}{12:>9}{48:>9}")
for name, (means, stds_) in stats.items():
    print(f"{name:<17}{stds_[1]:9.3g}{stds_[12]:9.3g}{stds_[48]:9.3g}")
no_norm_std = stats["no normalization"][1]
variance_factor = (no_norm_std[L] / no_norm_std[0]) ** (2 / L)
print(f"no normalization: the variance grows by a factor {variance_factor:.2f} per block")

# %% [markdown]
# Without normalization each block multiplies the variance of the stream by about 1.52, so after 48
# blocks the standard deviation reaches the size printed above. The branch returns a vector unrelated to its
# input, with about half its variance (the GELU discards most of the negative half of what it is
# given), and adding it to the stream adds that variance. Post-LN brings the stream back to 1 after
# every block. Pre-LN never normalizes the stream itself, but each branch sees a
# normalized input, so each adds a vector of bounded size: the variance grows by a roughly constant
# amount per block, and the standard deviation like $\sqrt{L}$, from 2.48 after 12 blocks to 4.72 after
# 48 (four times the depth, about twice the size).
#
# ## 3.7 Gradients at initialization
#
# The forward pass looks safe for both placements. Xiong et al. {cite}`xiong2020layer` looked at the
# backward pass and found the difference that matters for training: at initialization, the gradient of
# the last layer's weights in a post-LN Transformer does **not** shrink as the network gets deeper, while
# in a pre-LN Transformer it shrinks like $1/\sqrt{L}$. Large gradients near the output, with a normal
# learning rate, make the first updates large enough to derail training, which is why post-LN
# Transformers need a *learning-rate warm-up*. Pre-LN ones tolerate its absence far better: at the
# learning rates of the original Transformer, Xiong et al. trained them without warm-up. That does not
# make warm-up useless at any learning rate: Chapter 6's Exercise 3 trains a pre-LN model at a high
# learning rate, $10^{-2}$, where it still helps.
#
# We measure the gradient of each block's output weight (the second matrix of the feed-forward branch,
# `ff[-1]`, the weight in Xiong et al.'s analysis) for a fixed random linear function of the output.

# %%
def branch_grad_norms(block, depth, ln_f=None, seed=5):
    """Gradient norm of every block's ff[-1].weight, for a fixed random readout."""
    blocks = make_stack(block, depth, D, torch.Generator().manual_seed(seed))
    out = run_stack(blocks, x0)[-1]
    if ln_f is not None:
        out = ln_f(out)  # GPT-2 normalizes the stream once more before the output layer
    loss = (out * readout).sum() / N
    loss.backward()
    return torch.stack([b.ff[-1].weight.grad.norm() for b in blocks])


readout = torch.randn(N, D, generator=torch.Generator().manual_seed(6))
grad_post = branch_grad_norms(PostLNBlock, L)
grad_pre = branch_grad_norms(PreLNBlock, L, ln_f=LayerNorm(D))

# %% mystnb={"figure": {"caption": "Norm of the gradient of each block's output weight (ff[-1]) at initialization, 48 residual blocks, D = 128. The post-LN gradients are larger than the pre-LN ones, and the gap is widest at the output end.", "name": "fig-gradients-per-layer"}, "image": {"alt": "Line plot of gradient norm against layer 1 to 48 for post-LN and for pre-LN with a final LayerNorm. At the output end the post-LN curve stays well above the pre-LN curve."}}
fig, ax = plt.subplots(figsize=(5.2, 3.8))
ax.plot(range(1, L + 1), grad_post, label="post-LN")
ax.plot(range(1, L + 1), grad_pre, label="pre-LN (with final ln_f)")
ax.set_xlabel("layer")
ax.set_ylabel("‖∂loss/∂W‖ of ff[-1]")
ax.set_title(f"Gradient norms at initialization, L = {L}, D = {D}")
ax.set_ylim(bottom=0)
ax.legend()
plt.show()

# %% tags=["nbval-check-output"]
print(f"post-LN: first layer {grad_post[0]:.2f}, last layer {grad_post[-1]:.2f}")
print(f"pre-LN:  first layer {grad_pre[0]:.2f}, last layer {grad_pre[-1]:.2f}")
last_layer = {}
for depth in (6, 12, 24):
    post = branch_grad_norms(PostLNBlock, depth)[-1]
    pre = branch_grad_norms(PreLNBlock, depth, ln_f=LayerNorm(D))[-1]
    last_layer[depth] = (post, pre)
last_layer[L] = (grad_post[-1], grad_pre[-1])  # already computed above
for depth, (post, pre) in last_layer.items():
    print(f"L = {depth:>2}: last-layer gradient post-LN {post:.2f}, pre-LN {pre:.2f}, "
          f"ratio {post / pre:.2f}")
shrink = last_layer[6][1] / last_layer[48][1]
print(f"pre-LN, from L = 6 to L = 48: the last-layer gradient shrinks by {shrink:.2f} "
      f"(√8 = {math.sqrt(8):.2f})")

# %% [markdown]
# The last-layer gradient of the post-LN stack stays near 17 to 18 whatever the depth, while
# pre-LN's falls from 11.51 at 6 layers to 4.44 at 48, a factor 2.59 for 8 times the depth
# ($\sqrt{8} \approx 2.83$): the $1/\sqrt{L}$ of Xiong et al.'s analysis. The reason is visible in the
# forward pass: pre-LN's final `ln_f` divides by the standard deviation of the stream, which grows like
# $\sqrt{L}$.
#
# One honest caveat. Xiong et al.'s experiments on real Transformers also show post-LN gradients
# *growing* from the input layers to the output layers. In this toy stack they do the opposite (21.83 at
# the first layer, 16.99 at the last): the layer-by-layer shape depends on the initialization and on
# what the branches compute. The comparison that carries over is the one at the output end.
#
# Pre-LN has its own weak spot, which the variance plot already showed: the stream grows, because every
# branch adds to it and nothing ever scales it down. GPT-2 counters it at initialization by shrinking the
# weights that write into the stream; section 5.5 ({ref}`ch-gpt`) measures that on the real model.
#
# ## Summary
#
# - LayerNorm normalizes each token over its $D$ features: $y = \gamma \odot (x - \mu)/\sqrt{\sigma^2 +
#   \epsilon} + \beta$, with the **biased** variance and $\epsilon$ **inside** the square root. The package's
#   `LayerNorm` matches `nn.LayerNorm`, outputs and gradients, with the same parameter names; its `fast`
#   switch (on by default) hands the same formula to PyTorch's fused `F.layer_norm`.
# - Dividing by $\sigma + \epsilon$ instead is harmless at ordinary scales and wrong by order 1 on rows
#   whose spread is near or below $\sqrt{\epsilon}$, where the correct formula suppresses noise and the
#   slip amplifies it.
# - BatchNorm normalizes each feature across the batch; LayerNorm each token on its own, so it behaves
#   the same in training and in generation, with any batch size.
# - In a deep residual stack, no normalization lets activations explode; post-LN pins every layer to unit
#   variance but keeps the output-side gradients large (hence warm-up, which pre-LN needs far less of,
#   though it still helps at high learning rates); pre-LN, GPT-2's choice, lets the
#   stream grow like $\sqrt{L}$ and gives gradients that shrink like $1/\sqrt{L}$ at the output end.
# - Pre-LN's stream grows with depth; Chapter 5 (section 5.5) shows GPT-2's remedy, a scaled
#   initialization of the weights that write into the stream.
#
# With embeddings (Chapter 2) and normalization in hand, Chapter 4 ({ref}`ch-attention`) builds the
# branch that lets tokens look at each other.
#
# ## Exercises
#
# ### Exercise 1. LayerNorm as a module (implement)
#
# Write LayerNorm as a module class `LayerNormModule(D, eps=1e-5)`, like `nn.LayerNorm`:
# parameters `weight` ($\gamma$, starting at ones) and `bias` ($\beta$, starting at zeros)
# of shape $(D,)$, and a `forward(x)` that normalizes over the last dimension with the
# biased variance and applies them. Write the normalization yourself: calling `F.layer_norm`
# or `nn.LayerNorm` fails the check, which also recognizes the usual mistakes and names
# them.

# %% tags=["solution", "hide-input"] mystnb={"code_prompt_show": "Show the solution", "code_prompt_hide": "Hide the solution"}
class LayerNormModule(nn.Module):
    def __init__(self, D, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(D))  # γ
        self.bias = nn.Parameter(torch.zeros(D))  # β

    def forward(self, x):  # (..., D)
        mean = x.mean(dim=-1, keepdim=True)  # (..., 1)
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)  # (..., 1), biased
        # (..., D)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


# %%
from gpt_from_scratch.exercises import check_layer_norm

check_layer_norm(LayerNormModule);

# %% [markdown]
# ### Exercise 2. What LayerNorm forgets (predict, then run)
#
# Without the affine part, how does `LayerNorm(D)` map $3x + 7$ compared with $x$? And $-x$?
# And $10^{-4} x$, for a row $x$ of standard deviation 1: is its output still a multiple of
# the output of $x$, and if so by what factor? (Section 3.3 took a near-constant row; here
# the whole row is scaled down.) Write your three answers down, then run the cell after the
# answer.

# %% [markdown] tags=["answer"]
# ```{admonition} Answer
# :class: dropdown
# $3x + 7$ gives the same output as $x$ (up to float32 rounding): the mean removes the shift
# and the division by the standard deviation removes the positive scale. $-x$ gives exactly
# minus the output of $x$: the sign survives. $10^{-4} x$ is centred to $10^{-4}(x - \mu)$
# and divided by $\sqrt{10^{-8}\sigma^2 + \epsilon}$, one number for the whole row, so its
# output is still a multiple of the output of $x$; but the variance $10^{-8}$ is far below
# $\epsilon = 10^{-5}$, so the factor is about $10^{-4} / \sqrt{10^{-5}} \approx 0.03$, not
# 1: the output std the cell prints, 0.0332. Below $\sqrt{\epsilon}$ LayerNorm is no longer
# scale-invariant; it shrinks the row instead of normalizing it.
# ```

# %%
ln = nn.LayerNorm(64, elementwise_affine=False)
row = torch.randn(1, 64, generator=torch.Generator().manual_seed(0))
with torch.no_grad():
    y = ln(row)
    print("3x + 7 vs x:  max difference", f"{(ln(3 * row + 7) - y).abs().max():.2e}")
    print("-x vs -(x):   max difference", f"{(ln(-row) + y).abs().max():.2e}")
    print("1e-4 x:       output std", f"{ln(1e-4 * row).std():.4f}", "(normalized: std 1)")

# %% [markdown]
# ### Exercise 3. Four times deeper (predict, then run)
#
# After 48 blocks, the stream of the stack without normalization had a standard deviation of
# $2.48 \times 10^4$, and already 10.5 after 12 blocks; the pre-LN stack's was 4.72 after
# 48. How deep must the pre-LN stack be before its stream is as large as the unnormalized
# one after 12 blocks? Predict, then run the cell after the answer, which goes to 192
# blocks.

# %% [markdown] tags=["answer"]
# ```{admonition} Answer
# :class: dropdown
# In a pre-LN stack every block adds a branch computed from a normalized input, so the
# variances add up and the standard deviation grows like $\sqrt{L}$. Reaching 10.5 from 4.72
# at 48 blocks takes $(10.5 / 4.72)^2 \approx 4.9$ times the depth, about 240 blocks. The
# cell agrees: 192 blocks, four times 48, give 9.80, a little more than twice 4.72 but still
# short of 10.5. Without normalization the variance is multiplied by 1.52 at every block,
# so the same 10.5 came after 12 blocks: a geometric growth against a square root. GPT-2
# scales down the last layer of every branch by $1/\sqrt{2L}$ (section 5.5, {ref}`ch-gpt`),
# so that the sum stays of the same size at every depth.
# ```

# %%
with torch.no_grad():
    deep = run_stack(make_stack(PreLNBlock, 192, D, torch.Generator().manual_seed(5)), x0)
print(f"std after 48 blocks: {deep[48].std():.2f}; after 192 blocks: {deep[192].std():.2f}")

# %% [markdown]
# ### Exercise 4. BatchNorm at generation time (explain)
#
# A model is trained with BatchNorm in place of LayerNorm, on batches of $B$ sequences of
# $T$ tokens, normalizing each feature over all $B \times T$ tokens. Section 3.4 showed that
# a token's output then depends on the other tokens of the batch. Which of them matter to a
# model trained to predict the *next* token, and why is that a problem already in training,
# before any generation? What would training mode compute on a batch of one token?

# %% [markdown] tags=["answer"]
# ```{admonition} Answer
# :class: dropdown
# The batch statistics include the later positions of the token's own sequence, so the
# output at position $t$ depends, through the mean and variance of each feature, on tokens
# after $t$: a channel from the future that a language model must not have. Training can
# learn to use it, and the training loss then promises what the model cannot deliver when it
# generates, where those tokens do not exist yet. On a batch of one token each feature has
# mean the token itself and variance 0, so every feature becomes $(x - x) / \sqrt{0 +
# \epsilon} = 0$ and the output is $\beta$, whatever the token. `model.eval()` switches to
# running averages, which removes both problems but computes a different function from the
# one trained.
# ```

# %% [markdown]
# ### Exercise 5. RMSNorm (explain)
#
# RMSNorm, used by many recent models, skips the mean: $y = \gamma \odot x /
# \sqrt{\tfrac{1}{D}\sum_j x_j^2 + \epsilon}$. For which inputs does it give the same output
# as LayerNorm (with $\beta = 0$)? Which of the invariances of exercise 2 does it lose? The
# cell after the answer tests it.

# %% [markdown] tags=["answer"]
# ```{admonition} Answer
# :class: dropdown
# For rows whose mean is 0: then $\frac{1}{D}\sum_j x_j^2$ is the biased variance and both
# formulas agree. RMSNorm keeps the invariance to a positive scale and the sign flip, but
# loses the invariance to a shift: $x + 7$ no longer gives the output of $x$.
# ```

# %%
def rms_norm(x, eps=1e-5):
    return x / torch.sqrt((x**2).mean(dim=-1, keepdim=True) + eps)


centred = row - row.mean()
with torch.no_grad():
    gap = (rms_norm(centred) - ln(centred)).abs().max()
    print("mean-0 row, RMSNorm vs LayerNorm:", f"{gap:.2e}")
    print("RMSNorm, 3x vs x:    ", f"{(rms_norm(3 * row) - rms_norm(row)).abs().max():.2e}")
    print("RMSNorm, x + 7 vs x: ", f"{(rms_norm(row + 7) - rms_norm(row)).abs().max():.2e}")

# %% [markdown] tags=["quiz"]
# ## Check yourself
#
# A few questions on this chapter, each answer with its explanation. The numbers in them
# are the ones this chapter printed.

# %% tags=["quiz", "remove-input"]
from gpt_from_scratch.book.quiz import Choice, MultipleChoice, Numeric, show_quiz

show_quiz([
    MultipleChoice("LayerNorm computes its mean and variance over:", [
        Choice("the features of each token on its own", True,
               "Yes: one row at a time, so no token depends on the others in the batch."),
        Choice("each feature across the batch", False,
               "No: that is BatchNorm, which mixes the tokens of a batch."),
        Choice("the whole tensor at once", False,
               "No: every row gets its own mean and variance."),
    ]),
    MultipleChoice("Which variance does LayerNorm divide by?", [
        Choice("The biased one: divide by D", True,
               "Yes: PyTorch's LayerNorm uses the population variance."),
        Choice("The unbiased one: divide by D - 1", False,
               "No: the chapter measured the difference this makes."),
    ]),
    Numeric("Without normalization, by what factor did the variance grow per block in this "
            "chapter's stack? (Two decimals.)", float(variance_factor), 0.006,
            "A factor above 1 compounds: after 48 blocks it is huge."),
])
