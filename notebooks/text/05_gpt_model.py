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
# (ch-gpt)=
# # 5. The full GPT
#
# We now have every part: token and position embeddings ({ref}`ch-embeddings`), layer normalization
# ({ref}`ch-layernorm`) and causal multi-head attention ({ref}`ch-attention`). This chapter adds the last
# two, the feed-forward network and the residual connections, and assembles GPT-2 {cite}`radford2019language`.
# By the end, our model gives the same logits as Hugging Face's `GPT2LMHeadModel` for the same weights.
#
# 1. the position-wise feed-forward network, its GELU, and where a block's non-linearities are;
# 2. residual connections: the gradient highway, blocks that start as the identity, positions carried up;
# 3. the pre-LN block, built from Chapters 2–4, then the whole model and its diagram;
# 4. weight tying;
# 5. GPT-2's initialization and its residual scaling;
# 6. counting parameters three ways, and the GPT-2 family;
# 7. every difference from the original Transformer, and from GPT-1 to GPT-2 and GPT-3;
# 8. parity with Hugging Face;
# 9. the untrained model on a real batch: a loss of about $\ln 50257$.

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
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn
from torch.testing import assert_close

from gpt_from_scratch.attention import MultiHeadAttention
from gpt_from_scratch.data import get_batch, load_tiny_shakespeare
from gpt_from_scratch.layernorm import LayerNorm
from gpt_from_scratch.tokenizer import gpt2_encoding
from gpt_from_scratch.utils import seed_everything
from gpt_from_scratch.book.figure_text import book_figures

book_figures()  # sharp on high-density screens, each PNG records its smallest text
generator = seed_everything(1337)

# %% [markdown]
# ## 5.1 The position-wise feed-forward network
#
# Attention moves information *between* tokens. What each token then does with what it gathered happens in
# a small two-layer network applied to every token on its own, the **feed-forward network** or MLP:
# expand the token's $D$ numbers to $d_{ff} = 4D$, apply a nonlinearity, project back to $D$:
#
# $$\operatorname{FFN}(x) = \operatorname{GELU}(x W_1 + b_1)\, W_2 + b_2, \qquad
# W_1 \in \mathbb{R}^{D \times 4D},\; W_2 \in \mathbb{R}^{4D \times D}.$$
#
# GPT-2 names the two layers `c_fc` ("fully connected") and `c_proj` ("projection"); dropout follows.

# %%
class MLP(nn.Module):
    """GPT-2's feed-forward network, written out: D -> d_ff -> D, on each token alone."""

    def __init__(self, D, d_ff, dropout=0.0):
        super().__init__()
        self.c_fc = nn.Linear(D, d_ff)  # expand
        self.act = nn.GELU(approximate="tanh")  # GPT-2's GELU (section 5.1.2)
        self.c_proj = nn.Linear(d_ff, D)  # project back
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):  # (B, T, D)
        # (B, T, d_ff) in between; (B, T, D) out
        return self.dropout(self.c_proj(self.act(self.c_fc(x))))


# %% [markdown]
# "Position-wise" means exactly what the code says: `nn.Linear` acts on the last dimension only, so token
# $t$'s output depends on token $t$'s input alone. Two checks: running the tokens one at a time gives the
# same outputs, and shuffling the positions shuffles the outputs the same way.

# %% tags=["nbval-check-output"]
B, T, D = 2, 6, 16
mlp = MLP(D, 4 * D).eval()
x = torch.randn(B, T, D, generator=generator)  # (B, T, D)
y = mlp(x)  # (B, T, D)
one_at_a_time = torch.stack([mlp(x[:, t]) for t in range(T)], dim=1)  # T calls on (B, D)
assert_close(y, one_at_a_time)
perm = torch.randperm(T, generator=generator)
assert_close(mlp(x[:, perm]), y[:, perm])
print("token by token == all at once:", torch.allclose(y, one_at_a_time, atol=1e-6))
print("shuffle in -> same shuffle out:",
      torch.allclose(mlp(x[:, perm]), y[:, perm], atol=1e-6))

# %% [markdown]
# The package's `FeedForward` is this module, built from a `GPTConfig` (section 5.3 introduces it). Same
# weights, same outputs:

# %%
from gpt_from_scratch.model import FeedForward, GPTConfig

package_mlp = FeedForward(GPTConfig.from_preset("tiny", d_model=D, n_heads=2)).eval()
package_mlp.load_state_dict(mlp.state_dict())
assert_close(package_mlp(x), mlp(x))
print(package_mlp)

# %% [markdown]
# ### 5.1.1 Why $4\times$, and where the parameters are
#
# The factor 4 comes from the original Transformer ($D = 512$, $d_{ff} = 2048$) {cite}`vaswani2017attention`
# and has stayed in GPT-2 and GPT-3: it is a convention, not a law. What it decides is where a block's
# parameters live. Attention has four $D \times D$ matrices (query, key, value, output); the MLP has two
# $D \times 4D$ ones, twice as many numbers:

# %% tags=["nbval-check-output"]
D_small = 768  # GPT-2 small
# c_attn + c_proj, then c_fc + c_proj:
attention_params = (D_small * 3 * D_small + 3 * D_small) + (D_small * D_small + D_small)
mlp_params = (D_small * 4 * D_small + 4 * D_small) + (4 * D_small * D_small + D_small)
print(f"attention: {attention_params:,} parameters")
print(f"MLP:       {mlp_params:,} parameters")
share = mlp_params / (attention_params + mlp_params)
print(f"the MLP holds {share:.1%} of a block's weight matrices and biases")

# %% [markdown]
# Two thirds of every block is MLP. One useful picture {cite}`geva2021transformer`: each of the $4D$
# hidden units is a *key* that detects a pattern in the token's vector, and the matching row of `c_proj`
# is the *value* it writes back into the residual stream when the pattern fires. A wider hidden layer is
# more such memories, at a cost in parameters and compute that grows linearly with $d_{ff}$.
#
# ### 5.1.2 GELU: exact, tanh approximation, ReLU
#
# The original Transformer used ReLU, $\max(0, x)$. GPT-2 uses the GELU {cite}`hendrycks2016gelu`,
# $\operatorname{GELU}(x) = x\,\Phi(x)$ with $\Phi$ the standard normal CDF: the input, scaled by the
# probability that a standard Gaussian falls below it, so large inputs pass almost unchanged and very
# negative ones are nearly zeroed. Unlike ReLU it is smooth, and slightly negative for small negative
# inputs. GPT-2 computes it with a tanh approximation (cheaper than the `erf` inside $\Phi$),
#
# $$\operatorname{GELU}_{\tanh}(x) = \tfrac12 x \left(1 + \tanh\!\left(\sqrt{2/\pi}\,(x + 0.044715\,x^3)\right)\right),$$
#
# which PyTorch offers as `nn.GELU(approximate="tanh")` and Hugging Face calls `gelu_new`.

# %% tags=["nbval-check-output"]
grid = torch.linspace(-5, 5, 100_001, dtype=torch.float64)
gelu_exact = F.gelu(grid)
gelu_tanh = F.gelu(grid, approximate="tanh")
relu = F.relu(grid)
gap = (gelu_exact - gelu_tanh).abs()
print(f"largest |GELU - GELU_tanh| on [-5, 5]: {gap.max():.2e} "
      f"at x = {grid[gap.argmax()]:+.3f}")
print(f"GELU's minimum: {gelu_exact.min():.4f} at x = {grid[gelu_exact.argmin()]:+.4f}")

# %% mystnb={"figure": {"caption": "Top: ReLU, exact GELU and GPT-2's tanh approximation; the two GELUs overlap at this scale. Bottom: their difference, below 5e-4 everywhere.", "name": "fig-gpt-gelu"}, "image": {"alt": "Top, three activation curves between x = -4 and 4: ReLU is a hinge at zero, both GELU curves dip slightly below zero for negative x and then follow the line y = x. Bottom, the difference between exact and tanh GELU wiggles between about -0.0005 (near x = plus or minus 2.7) and +0.00025, and vanishes at 0 and far from it."}}
fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(5.2, 6))
inside = grid.abs() <= 4
ax1.plot(grid[inside], relu[inside], label="ReLU", color="grey", linestyle=":")
ax1.plot(grid[inside], gelu_exact[inside], label="GELU (exact)")
ax1.plot(grid[inside], gelu_tanh[inside], label="GELU (tanh, GPT-2)", linestyle="--")
ax1.set(xlabel="x", ylabel="activation", title="Activations")
ax1.legend()
ax2.plot(grid, gelu_exact - gelu_tanh)
ax2.set(xlabel="x", ylabel="GELU - GELU_tanh", title="Exact minus approximation")
ax2.ticklabel_format(axis="y", style="sci", scilimits=(0, 0))
fig.tight_layout()
plt.show()

# %% [markdown]
# The GELU dips to $-0.17$ at $x \approx -0.75$ and is otherwise close to ReLU away from 0. The two GELUs differ
# by at most $4.7 \times 10^{-4}$: tiny, but not zero: weights trained with one GELU should be run with
# the same one, which is why the package keeps GPT-2's choice (`activation="gelu_tanh"`) as the default
# and offers `"gelu"` and `"relu"` for experiments.
#
# GELU and ReLU act on each number alone. The **Softmax Linear Unit** (SoLU) {cite}`elhage2022solu`,
# proposed to make a network's neurons easier to interpret, acts on a token's whole hidden vector at
# once: $\operatorname{SoLU}(x) = x \odot \operatorname{softmax}(x)$, followed in the paper by a
# LayerNorm. The softmax makes the features compete: the largest entries keep most of their value and
# the rest are pushed towards zero, so each token's output is carried by a few neurons. The cell applies
# both to one hidden vector of random pre-activations:

# %% tags=["nbval-check-output"]
def solu(x):
    """Softmax Linear Unit: x * softmax(x) over the last dimension (the hidden features)."""
    return x * torch.softmax(x, dim=-1)


def top_share(y):
    """Share of y's squared norm held by its largest entry (in absolute value)."""
    squares = y.square()
    return (squares.max() / squares.sum()).item()


h = 2 * torch.randn(64, generator=torch.Generator().manual_seed(0))  # a hidden layer
print(f"the largest of {h.numel()} features holds {top_share(F.gelu(h)):.1%} of GELU's "
      f"output and {top_share(solu(h)):.1%} of SoLU's (squared norm)")

# %% mystnb={"figure": {"caption": "One hidden vector of 64 random pre-activations, sorted, after GELU (top) and after SoLU, x times softmax(x) (bottom): SoLU keeps the few largest features and pushes the rest towards zero.", "name": "fig-gpt-solu"}, "image": {"alt": "Two bar charts over 64 features sorted by their input. Top, GELU: about half the bars near zero, the rest rising steadily to about 7. Bottom, SoLU: every bar near zero except the last one, at about 5."}}
order = h.argsort()
fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(5.2, 5), sharex=True)
ax1.bar(range(h.numel()), F.gelu(h)[order])
ax1.set(ylabel="output", title="GELU: each number alone")
ax2.bar(range(h.numel()), solu(h)[order], color="C1")
ax2.set(xlabel="feature (sorted by input)", ylabel="output", title="SoLU: x * softmax(x)")
fig.tight_layout()
plt.show()

# %% [markdown]
# ### 5.1.3 Where is the non-linearity?
#
# Everything in a block is a matrix product except three things: the softmax that turns attention
# scores into weights (Chapter 4), the FFN's GELU, and the LayerNorms. Take the first two away and
# see what is left. The toy stack below has $L = 3$ residual blocks of one attention head and an FFN,
# no LayerNorm and no biases; the switches replace the softmax by the fixed running average of section
# 4.2 and the GELU by the identity. A function $f$ is linear when $f(2a - 3b) = 2f(a) - 3f(b)$; the cell
# prints how far each variant is from that, relative to the size of its outputs (in float64):

# %% tags=["nbval-check-output"]
T_toy, D_toy, L_toy = 5, 8, 3
g64 = torch.Generator().manual_seed(0)
toy_layers = [  # w_q, w_k, w_v (D, D), w_1 (D, 4D), w_2 (4D, D) per block
    [torch.randn(n_in, n_out, generator=g64, dtype=torch.float64) / math.sqrt(n_in)
     for n_in, n_out in [(D_toy, D_toy)] * 3 + [(D_toy, 4 * D_toy), (4 * D_toy, D_toy)]]
    for _ in range(L_toy)
]
causal = torch.ones(T_toy, T_toy, dtype=torch.bool).tril()


def toy_stack(x, softmax=True, gelu=True):
    """L_toy residual blocks (one head, an FFN), no LayerNorm: (T, D) -> (T, D)."""
    for w_q, w_k, w_v, w_1, w_2 in toy_layers:
        if softmax:
            scores = (x @ w_q) @ (x @ w_k).T / math.sqrt(D_toy)  # (T, T)
            weights = scores.masked_fill(~causal, float("-inf")).softmax(-1)
        else:  # fixed weights, whatever x is: the running average of section 4.2
            weights = (causal / causal.sum(-1, keepdim=True)).to(x.dtype)  # (T, T)
        x = x + weights @ (x @ w_v)  # (T, D)
        hidden = x @ w_1  # (T, 4D)
        x = x + (F.gelu(hidden) if gelu else hidden) @ w_2  # (T, D)
    return x


a, b = (torch.randn(T_toy, D_toy, generator=g64, dtype=torch.float64) for _ in range(2))
print("|f(2a - 3b) - (2f(a) - 3f(b))|, a share of the outputs' size:")
for softmax, gelu in [(True, True), (True, False), (False, True), (False, False)]:
    f = lambda x: toy_stack(x, softmax, gelu)
    gap = (f(2 * a - 3 * b) - (2 * f(a) - 3 * f(b))).abs().max() / f(a).abs().max()
    size = f"{gap:.0e}" if gap > 1e-12 else "below 1e-12"
    print(f"softmax {str(softmax):5s} GELU {str(gelu):5s}: {size}")

# %% [markdown]
# With either non-linearity the stack is far from linear. Without both it is linear to float64
# rounding, and a linear map of a $(T, D)$ input is one $TD \times TD$ matrix: three blocks, or three
# hundred, collapse into a single matrix $M$, no more expressive than one linear layer over the whole
# sequence. We read $M$ off as the Jacobian and check that it *is* the stack:

# %% tags=["nbval-check-output"]
flat_stack = lambda v: toy_stack(v.view(T_toy, D_toy), softmax=False, gelu=False).flatten()
origin = torch.zeros(T_toy * D_toy, dtype=torch.float64)
M = torch.autograd.functional.jacobian(flat_stack, origin)  # (T D, T D)
x_new = torch.randn(T_toy * D_toy, generator=g64, dtype=torch.float64)
print("M:", tuple(M.shape), "| max |M x - stack(x)| below 1e-12:",
      bool((M @ x_new - flat_stack(x_new)).abs().max() < 1e-12))

# %% [markdown]
# (Dropping the softmax but keeping data-dependent weights, the raw scores $q k^\top$, would not give a
# linear map either: the output would be a cubic polynomial of $x$. The softmax is what makes the weights
# a normalized average.)
#
# ## 5.2 Residual connections: a gradient highway
#
# A block does not replace its input; it *adds* to it: $x \leftarrow x + f(x)$. The running sum is the
# **residual stream**, and each sublayer (attention, MLP) reads from it and writes a correction back. The
# backward pass explains why this matters. The derivative of $x + f(x)$ is $I + \partial f / \partial x$:
# whatever $f$ does, the gradient also flows straight through the identity. Without the $x +$, the gradient
# reaching layer 1 is a product of 48 Jacobians, and a product of many matrices tends to shrink (or blow up)
# geometrically.
#
# The measurement: 48 GPT-2 blocks (the package's `Block`, introduced in section 5.3; $D = 64$) on a
# batch of random tokens, run once as GPT-2 does and once with the same weights but without the residual
# additions, $x \leftarrow \operatorname{attn}(\operatorname{LN}(x))$ then $x \leftarrow
# \operatorname{mlp}(\operatorname{LN}(x))$. We record the gradient of the loss at the input of every block.

# %%
from gpt_from_scratch.model import GPT


def gradient_at_each_block(residual, n_layers=48):
    """Norm of d(loss)/d(input of block l) for l = 0 .. n_layers - 1, at initialization."""
    torch.manual_seed(0)
    config = GPTConfig.from_preset("tiny", vocab_size=256, d_model=64, n_heads=4,
                                   n_layers=n_layers)
    model = GPT(config)
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, 256, (4, config.context_length), generator=g)
    x = model.wte(idx) + model.wpe(idx.size(1))  # (B, T, D): the embeddings
    inputs = []
    for block in model.blocks:
        x.retain_grad()
        inputs.append(x)
        if residual:
            x = block(x)
        else:  # the same sublayers, no "x +"
            x = block.attn(block.ln_1(x))
            x = block.mlp(block.ln_2(x))
    logits = model.lm_head(model.ln_f(x))  # (B, T, V)
    F.cross_entropy(logits.flatten(0, 1), idx.roll(-1, dims=1).flatten()).backward()
    return torch.tensor([x.grad.norm().item() for x in inputs])


with_residual = gradient_at_each_block(residual=True)
without_residual = gradient_at_each_block(residual=False)

# %% tags=["nbval-check-output"]
print(f"with residuals:    gradient norm at the embeddings {with_residual[0]:.2f}, "
      f"at the last block {with_residual[-1]:.2f}")
print(f"without residuals: gradient norm at the last block {without_residual[-1]:.2f}")
print(f"without residuals: at the embeddings it is below 1e-6: "
      f"{bool(without_residual[0] < 1e-6)}")

# %%
n_steps = len(without_residual) - 1
per_block = (without_residual[-1] / without_residual[0]) ** (1 / n_steps)
print(f"without residuals, at the embeddings: {without_residual[0]:.1e}, "
      f"{with_residual[0] / without_residual[0]:.1e} times less than with them")
print(f"without residuals, the gradient shrinks by a factor {per_block:.2f} per block "
      "on average")

# %% mystnb={"figure": {"caption": "Gradient norm at the input of each of 48 GPT-2 blocks at initialization, with the residual connections (GPT-2) and with the same weights but no residual additions. Log scale.", "name": "fig-gpt-residual-gradients"}, "image": {"alt": "Two lines against the block index from 0 to 47 on a logarithmic y axis. With residuals the line is nearly flat, between about 0.57 and 0.71. Without residuals it rises steadily from about 5e-10 at block 0 to about 2 at block 47."}}
fig, ax = plt.subplots(figsize=(5.2, 3.6))
ax.semilogy(with_residual, label="x + f(x)  (GPT-2)")
ax.semilogy(without_residual, label="f(x)  (no residual)")
ax.set(xlabel="block (0 = next to the embeddings)",
       ylabel="gradient norm at the block's input",
       title="The residual stream carries the gradient down")
ax.legend()
plt.show()

# %% [markdown]
# With residual connections the gradient is almost the same at every depth (0.71 at the embeddings, 0.57
# at the last block). Without them it is larger at the top (1.98) but shrinks by a factor of about 1.6 per
# block on the way down, and reaches the embeddings at $4.6 \times 10^{-10}$, 1.5 billion times less: the lower
# layers would not learn. (Attention without residuals has a second problem: stacked averages make all
# tokens alike, the "rank collapse" of {cite}`dong2021attention`.)
#
# ### A block can start as the identity
#
# The $x +$ has a second gift, in the forward pass. Each branch writes into the stream through one last
# linear layer, `c_proj`; set those to zero and the block computes $x + 0 = x$, whatever its other
# weights are:

# %% tags=["nbval-check-output"]
identity_model = GPT(GPTConfig.from_preset("tiny", vocab_size=256, d_model=64, n_heads=4))
identity_block = identity_model.blocks[0]
with torch.no_grad():
    for branch in (identity_block.attn, identity_block.mlp):
        branch.c_proj.weight.zero_()
        branch.c_proj.bias.zero_()
    x_in = torch.randn(2, 16, 64, generator=generator)  # (B, T, D)
    print("block(x) == x:", torch.equal(identity_block(x_in), x_in))

# %% [markdown]
# So a network of $L + 1$ residual blocks can compute everything a network of $L$ blocks can: give the
# extra block zero output projections. In the language of Dive into Deep Learning
# {cite}`zhang2023dive` (its section 8.6.1, on He et al.'s ResNets {cite}`he2016deep`), the function
# classes are **nested**: adding a block enlarges the set of functions the network can represent instead
# of replacing it by a different set, so the best fit available can only improve, and the extra block
# only has to learn a *correction* to the identity, which is easy to start from. Without the $x +$, a
# block that does nothing has to pass its input through a LayerNorm, which discards each vector's mean
# and scale, so it cannot even represent the identity exactly. GPT-2's initialization (section 5.5) starts the output
# projections small, close to this identity.
#
# ### Residuals carry the positions forward
#
# The position embeddings enter once, at the bottom. Does the position survive to the upper blocks?
# We ask a **linear probe**: a least-squares map from a hidden vector to a one-hot guess of its
# position $t$, fitted on the hidden states of 64 random-token sequences of $T = 32$ and scored on 64
# others. The model is untrained (random blocks, 8 of them), run with and without the residual
# additions; a probe that guesses at random scores $1/32 = 3.1\%$.

# %% tags=["nbval-check-output"]
torch.manual_seed(0)
probe_model = GPT(GPTConfig.from_preset(
    "tiny", vocab_size=256, d_model=64, n_heads=4, n_layers=8, context_length=32)).eval()


def hidden_states(idx, residual):
    """The stream after the embeddings and after each block: n_layers + 1 of (B, T, D)."""
    x = probe_model.wte(idx) + probe_model.wpe(idx.size(1))  # (B, T, D)
    states = [x]
    for block in probe_model.blocks:
        if residual:
            x = block(x)
        else:  # the same sublayers, no "x +"
            x = block.mlp(block.ln_2(block.attn(block.ln_1(x))))
        states.append(x)
    return states


def position_probe_accuracy(train, test):
    """Fit a least-squares one-hot probe of position on train (B, T, D); score on test."""
    T = train.size(1)

    def features(h):  # (B * T, D + 1): the hidden vector and a constant
        h = h.double().flatten(0, 1)  # float64 for a steadier fit
        return torch.cat([h, torch.ones(len(h), 1, dtype=h.dtype)], dim=1)

    # (B * T, T): row b * T + t is the one-hot of position t
    one_hot = torch.eye(T, dtype=torch.float64).repeat(train.size(0), 1)
    probe = torch.linalg.lstsq(features(train), one_hot).solution  # (D + 1, T)
    guess = (features(test) @ probe).argmax(dim=1)
    return (guess == torch.arange(T).repeat(test.size(0))).float().mean().item()


g_probe = torch.Generator().manual_seed(1)
fit_idx, test_idx = (torch.randint(0, 256, (64, 32), generator=g_probe) for _ in range(2))
with torch.no_grad():
    for residual in (True, False):
        scores = [position_probe_accuracy(h_fit, h_test) for h_fit, h_test in
                  zip(hidden_states(fit_idx, residual), hidden_states(test_idx, residual))]
        name = "with residuals   " if residual else "without residuals"
        print(f"{name} position found after 0..8 blocks:",
              " ".join(f"{s:.0%}" for s in scores))

# %% [markdown]
# With residuals the probe reads the position off every layer almost perfectly: each block only *adds*
# to the stream, so the position vector added at the bottom is still there at the top. Without them,
# each block's output is a fresh function of its input, and the position fades within a couple of blocks
# to nearly the 3% of guessing: whatever a later block needs to know about order, it must be told again.
#
# ## 5.3 The pre-LN block, then the whole model
#
# A GPT-2 block is two residual updates, each with a LayerNorm in front of its sublayer (**pre-LN**):
#
# $$x \leftarrow x + \operatorname{attn}(\operatorname{LN}_1(x)), \qquad x \leftarrow x + \operatorname{mlp}(\operatorname{LN}_2(x)).$$
#
# Built from the chapters so far: the LayerNorm of Chapter 3, the attention of Chapter 4 and the MLP above.
# The submodule names (`ln_1`, `attn`, `ln_2`, `mlp`) are GPT-2's.

# %%
class PreLNBlock(nn.Module):
    """One GPT-2 block: x + attn(ln_1(x)), then x + mlp(ln_2(x))."""

    def __init__(self, D, n_heads, dropout=0.0):
        super().__init__()
        self.ln_1 = LayerNorm(D)  # Chapter 3
        self.attn = MultiHeadAttention(D, n_heads, dropout=dropout)  # Chapter 4
        self.ln_2 = LayerNorm(D)
        self.mlp = MLP(D, 4 * D, dropout=dropout)  # section 5.1

    def forward(self, x):  # (B, T, D)
        x = x + self.attn(self.ln_1(x))  # tokens talk to each other
        x = x + self.mlp(self.ln_2(x))  # each token thinks on its own
        return x  # (B, T, D)


# %% [markdown]
# A `GPTConfig` checks its fields when it is made, so a wrong size fails at once with the reason and
# the fix, not deep inside a matrix product. Five heads cannot share 64 features:

# %% tags=["nbval-check-output"]
try:
    GPTConfig.from_preset("tiny", d_model=64, n_heads=5)
except ValueError as err:
    print(f"ValueError: {err}")

# %% [markdown]
# The package's `Block` takes a `GPTConfig`, the one object holding every size of the model. With the same
# weights, the two blocks agree. To make the test strict, all weights are random, including the biases and
# the LayerNorms' $\gamma, \beta$ (which start at 0 and 1 in a fresh model and could hide a swap):

# %% tags=["nbval-check-output"]
from gpt_from_scratch.model import Block

config = GPTConfig.from_preset("tiny")
print(config)
block = Block(config).eval()
with torch.no_grad():
    for p in block.parameters():
        p.copy_(0.3 * torch.randn(p.shape, generator=generator))
inline_block = PreLNBlock(config.d_model, config.n_heads).eval()
inline_block.load_state_dict(block.state_dict())

x = torch.randn(2, config.context_length, config.d_model, generator=generator)  # (B, T, D)
assert_close(inline_block(x), block(x))
print("inline PreLNBlock == package Block:",
      torch.allclose(inline_block(x), block(x), atol=1e-6))

# %% [markdown]
# ### The post-LN slip
#
# The original Transformer normalized *after* each residual addition, $x \leftarrow \operatorname{LN}(x +
# f(x))$ (**post-LN**). Some write-ups draw that block and call it GPT-2's; it is not. The two arrangements
# compute different functions of the same weights, so GPT-2's weights loaded into a post-LN block give
# wrong outputs:

# %% tags=["nbval-check-output"]
def post_ln_block(block, x):
    """The original Transformer's order, with GPT-2's modules: normalize after adding."""
    x = block.ln_1(x + block.attn(x))
    return block.ln_2(x + block.mlp(x))


with torch.no_grad():
    pre, post = block(x), post_ln_block(block, x)
gap, size = (pre - post).abs().max().item(), pre.abs().mean().item()
print(f"max |pre-LN - post-LN| = {gap:.2f}, {gap / size:.1f} times the outputs' "
      f"typical size {size:.2f}")

# %% [markdown]
# The largest difference is several times the outputs' typical size (both printed above). Note also where the
# normalization ends up: a post-LN block's output is always a LayerNorm's output, while a pre-LN block
# leaves the residual stream alone and only normalizes the *copies* it feeds to its sublayers. The stream is a clean sum of every sublayer's
# contribution, which keeps the identity path of section 5.2 intact. It is why pre-LN models tolerate
# the absence of the learning-rate warm-up post-LN needs: Xiong et al. trained them without it at the
# original Transformer's learning rates {cite}`xiong2020layer`. At a high learning rate warm-up still
# helps: Chapter 6's Exercise 3 trains a pre-LN model at $10^{-2}$ with and without it. The price:
# nothing normalizes the stream
# at the end, so GPT-2 adds one final LayerNorm, `ln_f`, before the output layer.
#
# ### The whole model
#
# `GPT` stacks the pieces: token embeddings `wte` plus learned position embeddings `wpe` (Chapter 2),
# dropout, $L$ blocks, `ln_f`, and the output layer `lm_head`, which turns each final vector into $V$
# logits, one score per possible next token.

# %%
torch.manual_seed(0)
model = GPT(GPTConfig.from_preset("tiny")).eval()
print(model)

# %% [markdown]
# The same tree as a picture. `draw_gpt` reads every box from a model's modules (their names and sizes,
# and whether `lm_head` shares `wte`'s weight), so the figure cannot drift from the code; given a
# `GPTConfig`, it builds the model on PyTorch's `meta` device, which allocates no memory. Here it draws
# GPT-2 small. (Tools like `torchview` draw the traced graph of every operation, but need Graphviz's
# `dot` program installed besides Python; the module tree is all we need here.)

# %% mystnb={"figure": {"caption": "GPT-2 small drawn from its modules: token and position embeddings are added, then 12 pre-LN blocks each read a LayerNorm'd copy of the residual stream into attention and into the MLP and add the result back; a final LayerNorm and the head tied to the token embeddings give the logits.", "name": "fig-gpt-architecture"}, "image": {"alt": "A vertical flow chart. Token ids feed two boxes, wte (Embedding 50,257 by 768) and wpe (positions 1,024 by 768), whose outputs meet at a plus sign, then dropout. A dashed frame marked 'times 12 blocks' contains a thick vertical residual stream on the left; from it, one branch goes through ln_1 and attention (12 causal heads of 64, c_attn 768 to 2,304, c_proj 768 to 768) and is added back at a plus sign, a second through ln_2 and the MLP (c_fc 768 to 3,072, GELU tanh, c_proj 3,072 to 768) and is added back. Below the frame: ln_f, then lm_head 768 to 50,257, tied to wte, then the logits."}}
from gpt_from_scratch.book.diagram import draw_gpt

draw_gpt(GPTConfig.from_preset("gpt2"))
plt.show()

# %% [markdown]
# The forward pass, step by step with the model's own modules, equals `model(idx)`:

# %% tags=["nbval-check-output"]
idx = torch.randint(0, 50_257, (2, 8), generator=generator)  # (B, T) token ids
with torch.no_grad():
    h = model.wte(idx) + model.wpe(idx.size(1))  # (B, T, D) + (T, D): tokens plus positions
    h = model.drop(h)
    for blk in model.blocks:
        h = blk(h)  # (B, T, D)
    logits_by_hand = model.lm_head(model.ln_f(h))  # (B, T, V)
    logits, loss = model(idx)
assert_close(logits_by_hand, logits)
print("idx:", tuple(idx.shape), "-> hidden:", tuple(h.shape),
      "-> logits:", tuple(logits.shape))
print("by hand == model(idx):", torch.allclose(logits_by_hand, logits),
      "| loss without targets:", loss)

# %% [markdown]
# With `targets` (the next tokens, shape $(B, T)$), `forward` also returns the mean cross-entropy, which
# training will minimize (section 5.9 and {ref}`ch-training`).
#
# ## 5.4 Weight tying
#
# The model touches the vocabulary twice: `wte` maps a token id to a $D$-vector, and `lm_head` maps a
# $D$-vector to $V$ scores. Both are $V \times D$ matrices, and GPT-2 uses **the same matrix** for both
# {cite}`press2017tying`: the logit of token $v$ is the dot product of the final hidden state with $v$'s
# own embedding, $\text{logit}_v = h \cdot e_v$. "Predict $v$" and "read $v$" share one representation, and
# tokens with similar embeddings get similar scores.

# %% tags=["nbval-check-output"]
print("lm_head.weight is wte.weight:", model.lm_head.weight is model.wte.weight)
with torch.device("meta"):  # shapes only, no memory: section 5.6 explains
    gpt2_small = GPT(GPTConfig.from_preset("gpt2"))
    gpt2_small_untied = GPT(GPTConfig.from_preset("gpt2", tie_weights=False))
saved = gpt2_small_untied.num_parameters() - gpt2_small.num_parameters()
tied, untied_count = gpt2_small.num_parameters(), gpt2_small_untied.num_parameters()
print(f"GPT-2 small: {tied:,} parameters tied, {untied_count:,} untied")
print(f"tying saves V x D = 50,257 x 768 = {saved:,} parameters: "
      f"{saved / untied_count:.1%} of the untied model, {saved / tied:.1%} of the tied one")

# %% [markdown]
# In training, the shared matrix receives gradient from both places it is used, summed. Check it: an untied
# copy with both matrices set equal to the tied one gets two gradients, and their sum is the tied
# gradient:

# %% tags=["nbval-check-output"]
untied = GPT(GPTConfig.from_preset("tiny", tie_weights=False)).eval()
untied.load_state_dict(model.state_dict())  # lm_head.weight gets wte.weight's values
targets = torch.randint(0, 50_257, (2, 8), generator=generator)
model.zero_grad()
model(idx, targets)[1].backward()
untied(idx, targets)[1].backward()
assert_close(model.wte.weight.grad, untied.wte.weight.grad + untied.lm_head.weight.grad)
print("tied gradient == embedding gradient + head gradient:", True)
print(f"parameters: tied {model.num_parameters():,}, untied {untied.num_parameters():,}")

# %% [markdown]
# The embedding's own gradient is sparse: only the rows of tokens present in the batch get one. The head's
# gradient touches every row, since every token's logit enters the softmax. Tying lets rare tokens learn
# their embedding from the output side too.
#
# ## 5.5 Initialization and the residual scaling
#
# Chapter 3 ({ref}`ch-layernorm`) showed the weak spot of pre-LN: nothing ever scales the residual
# stream down, so it grows with depth. GPT-2 counters it at initialization.
#
# GPT-2 draws every weight matrix and both embedding tables from $\mathcal{N}(0, 0.02^2)$, sets biases to 0
# and LayerNorms to $\gamma = 1, \beta = 0$. One twist: the two output projections that write into the
# residual stream, `attn.c_proj` and `mlp.c_proj`, start with standard deviation $0.02 / \sqrt{2L}$. Why?
# Each of the $2L$ sublayers *adds* a roughly independent random vector to the stream, so the stream's
# variance grows with every addition, linearly in depth. Shrinking each addition's variance by $2L$ keeps
# the total the same, however deep the model is.

# %% tags=["nbval-check-output"]
fresh_config = GPTConfig.from_preset("tiny", d_model=256, n_heads=4, n_layers=12,
                                    vocab_size=1000)
fresh = GPT(fresh_config)
block0 = fresh.blocks[0]
print(f"c_fc.weight std:   {block0.mlp.c_fc.weight.std():.4f}  (0.02)")
print(f"c_proj.weight std: {block0.mlp.c_proj.weight.std():.4f}  "
      f"(0.02 / sqrt(2 * 12) = {0.02 / math.sqrt(24):.4f})")
print(f"wte.weight std:    {fresh.wte.weight.std():.4f}  (0.02)")
print(f"ln_1: gamma all 1: {bool((block0.ln_1.weight == 1).all())}, "
      f"beta all 0: {bool((block0.ln_1.bias == 0).all())}")

# %% [markdown]
# The measurement: the standard deviation of the residual stream after each block of a 48-block model at
# initialization, with GPT-2's scaling and with every `c_proj` at plain 0.02.

# %%
def stream_std(scaled, n_layers=48):
    torch.manual_seed(0)
    config = GPTConfig.from_preset(
        "tiny", vocab_size=512, d_model=128, n_heads=4, n_layers=n_layers,
        context_length=32)
    model = GPT(config).eval()
    if not scaled:
        for name, param in model.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(param, mean=0.0, std=0.02)
    idx = torch.randint(0, 512, (4, 32), generator=torch.Generator().manual_seed(1))
    stds = []
    with torch.no_grad():
        x = model.wte(idx) + model.wpe(32)  # (B, T, D)
        stds.append(x.std().item())
        for block in model.blocks:
            x = block(x)
            stds.append(x.std().item())
    return stds


std_scaled, std_plain = stream_std(scaled=True), stream_std(scaled=False)

# %% tags=["nbval-check-output"]
print(f"embeddings:                        std {std_scaled[0]:.3f}")
print(f"after 48 blocks, GPT-2's scaling:  std {std_scaled[-1]:.3f}")
print(f"after 48 blocks, c_proj at 0.02:   std {std_plain[-1]:.3f}")

# %% mystnb={"figure": {"caption": "Standard deviation of the residual stream after each of 48 blocks at initialization (D = 128), with GPT-2's 0.02 / sqrt(2L) scaling of the output projections and with plain 0.02.", "name": "fig-gpt-residual-scaling"}, "image": {"alt": "Two rising curves against the number of blocks from 0 to 48. Without the scaling the standard deviation climbs steeply, to about 0.5 after 48 blocks. With the scaling it rises slowly from 0.03 to about 0.05."}}
fig, ax = plt.subplots(figsize=(5.2, 3.6))
ax.plot(std_plain, label="c_proj std 0.02")
ax.plot(std_scaled, label="c_proj std 0.02 / sqrt(2L)  (GPT-2)")
ax.set(xlabel="blocks applied", ylabel="std of the residual stream",
       title="Residual scaling keeps the stream small")
ax.legend()
plt.show()

# %% [markdown]
# Without the scaling, the stream grows from 0.028 to 0.484, ten times wider than the 0.049 it reaches with
# it, and the deeper the model, the worse. With the scaling, the stream stays within twice the size of the
# embeddings it started from, so the token's identity is not drowned out before training starts.
#
# ## 5.6 Counting parameters three ways
#
# Per block: two LayerNorms ($2 \times 2D$), `c_attn` ($D \cdot 3D + 3D$), `attn.c_proj` ($D^2 + D$),
# `c_fc` ($D \cdot 4D + 4D$) and `mlp.c_proj` ($4D \cdot D + D$). Around the blocks: `wte` ($VD$), `wpe`
# ($T_{\max} D$) and `ln_f` ($2D$). The tied head adds nothing.

# %% tags=["nbval-check-output"]
def count_by_hand(V, T_max, D, L, d_ff=None, tied=True):
    d_ff = d_ff or 4 * D
    layer_norms, attention = 2 * 2 * D, (D * 3 * D + 3 * D) + (D * D + D)
    per_block = layer_norms + attention + (D * d_ff + d_ff) + (d_ff * D + D)
    return V * D + T_max * D + L * per_block + 2 * D + (0 if tied else V * D)


by_hand = count_by_hand(V=50_257, T_max=1_024, D=768, L=12)
print(f"by hand:          {by_hand:,}")
print(f"num_parameters(): {gpt2_small.num_parameters():,}  (section 5.4's model)")

# %% [markdown]
# The third way is `torchinfo`'s summary, which lists every module (on the meta device it needs no memory
# either):

# %% tags=["nbval-check-output"]
from torchinfo import summary

stats = summary(gpt2_small, depth=1, verbose=0)
print(stats)
shared = gpt2_small.lm_head.weight.numel()
print(f"torchinfo total - the tied matrix counted a second time: "
      f"{stats.total_params - shared:,}")
assert by_hand == gpt2_small.num_parameters() == stats.total_params - shared

# %% [markdown]
# `torchinfo` reports 163,037,184 because it sums module by module, and the tied matrix appears twice, as
# `Embedding` and as `Linear`. That is the size of an *untied* GPT-2 small; the real one has 124,439,808
# parameters, and all three counts agree on it. `num_parameters()` counts each tensor once, so a shared
# matrix is counted once.
#
# The whole GPT-2 family, each built on the meta device in an instant. "Non-embedding" leaves out `wte` and
# `wpe`: it is the count that predicts how a model's loss scales {cite}`kaplan2020scaling`.

# %% tags=["nbval-check-output"]
rows = []
for name in ["gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl"]:
    c = GPTConfig.from_preset(name)
    with torch.device("meta"):
        m = GPT(c)
    counted = count_by_hand(c.vocab_size, c.context_length, c.d_model, c.n_layers)
    assert m.num_parameters() == counted
    rows.append({"preset": name, "L": c.n_layers, "D": c.d_model, "H": c.n_heads,
                 "d_k": c.d_head,
                 "d_ff": c.d_ff, "parameters": f"{m.num_parameters():,}",
                 "non-embedding": f"{m.num_parameters(exclude_embeddings=True):,}",
                 "wte share": f"{m.wte.weight.numel() / m.num_parameters():.1%}"})
family = pd.DataFrame(rows).set_index("preset")
family

# %% [markdown]
# Every size keeps $d_k = 64$ and $d_{ff} = 4D$; depth and width grow together. The GPT-2 paper's table
# {cite}`radford2019language` lists 117M, 345M, 762M and 1,542M parameters; the released checkpoints have the counts above (124M, 355M,
# 774M, 1,558M), which is why the models are usually called by the larger numbers. In GPT-2 small, the
# token embedding alone is 31.0% of the model; in GPT-2 XL only 5.2%: as models grow, the vocabulary's share
# shrinks.
#
# ## 5.7 Every difference from the original Transformer
#
# GPT-2 is a Transformer {cite}`vaswani2017attention`, but not the one in the paper's figure. PyTorch ships
# that original decoder layer as `nn.TransformerDecoderLayer`; its submodules against a GPT-2 block's:

# %% tags=["nbval-check-output"]
original = nn.TransformerDecoderLayer(d_model=64, nhead=4, dim_feedforward=256)
gpt2_block = Block(GPTConfig.from_preset("tiny", d_model=64, n_heads=4))
print("original decoder layer:", [name for name, _ in original.named_children()])
print("  norm_first:", original.norm_first, "| activation:", original.activation.__name__)
print("GPT-2 block:           ", [name for name, _ in gpt2_block.named_children()])
print("  activation:", gpt2_block.mlp.act)

# %% [markdown]
# Item by item:
#
# - **No encoder, no cross-attention.** The original decoder layer has a second attention,
#   `multihead_attn`, reading the encoder's output (for translation, the source sentence). GPT-2 has no
#   encoder, hence only causal self-attention: a "decoder-only" model.
# - **Pre-LN, plus a final LayerNorm.** `norm_first=False` is the post-LN order of section 5.3
#   (`norm1`..`norm3` after each addition); GPT-2 normalizes before each sublayer and adds `ln_f` at the end.
# - **GELU instead of ReLU** (section 5.1.2).
# - **Learned positions** instead of the fixed sinusoids of Chapter 2 (so no position beyond
#   `context_length` exists), and **no $\sqrt{D}$ scaling of the embeddings**, shown next.
# - **Where dropout sits** (shown below). The paper drops the summed embeddings and each sublayer's output
#   before its residual addition; GPT-2 does the same and also drops attention weights, as PyTorch's layer
#   does inside its attentions. PyTorch's layer has one more, `dropout`, on the FFN's hidden activations;
#   GPT-2 has none there.

# %% tags=["nbval-check-output"]
from gpt_from_scratch.embeddings import sinusoidal_positional_encoding

D_small = 768
# 64 token embeddings (1, T, D) and GPT-2's learned positions (T, D), at GPT-2's init:
e = 0.02 * torch.randn(1, 64, D_small, generator=generator)
wpe = 0.02 * torch.randn(64, D_small, generator=generator)
P = sinusoidal_positional_encoding(64, D_small)  # (T, D): the original's fixed positions
rms = lambda t: t.pow(2).mean().sqrt().item()  # the typical size of an entry
print("original Transformer: x = wte(idx) * sqrt(D) + P")
print("  P: fixed sinusoids")
print(f"  rms of wte * sqrt(D): {rms(e * math.sqrt(D_small)):.3f}, rms of P: {rms(P):.3f}")
print("GPT-2:                x = wte(idx) + wpe[:T]")
print("  wpe: learned, a Parameter")
print(f"  rms of wte: {rms(e):.3f}, rms of wpe: {rms(wpe):.3f}")

# %% [markdown]
# The original paper multiplies the embeddings by $\sqrt{D}$ in one sentence and gives no reason
# {cite}`vaswani2017attention`. What the cell shows is its effect on sizes: the sinusoids' entries have a
# root-mean-square size of $1/\sqrt{2} \approx 0.707$ (half sines, half cosines), and token embeddings at
# GPT-2's initialization scaled by $\sqrt{D}$ would be 0.556, of the same order, where unscaled they would
# be 0.02. GPT-2's positions are learned and initialized like the token embeddings, both at 0.02, so the
# two are already the same size, and GPT-2 does not scale.
#
# Where the dropout sits in our model, module by module:

# %% tags=["nbval-check-output"]
dropout_model = GPT(GPTConfig.from_preset("tiny", n_layers=1, dropout=0.1))
for name, module in dropout_model.named_modules():
    if isinstance(module, nn.Dropout):
        print(f"{name:22s} p={module.p}")

# %% [markdown]
# `drop` acts on the embeddings; `attn.attn_dropout` on the attention weights; `attn.resid_dropout` and
# `mlp.dropout` on each sublayer's output just before the residual addition. All are active only in
# training mode. The GPT-2 presets keep `dropout=0.1`, the value in GPT-2's published configuration; the
# small CPU presets use 0.
#
# ### From GPT-1 to GPT-2, and GPT-3
#
# GPT-2 itself changed little from GPT-1 {cite}`radford2018improving`; its paper lists the changes in
# one paragraph {cite}`radford2019language`. The table puts them side by side, with the values of our
# `GPTConfig()` where the config holds them:

# %% tags=["nbval-check-output"]
gpt2_config = GPTConfig()  # GPT-2 small
n_residual = 2 * gpt2_config.n_layers  # two residual branches per block
gpt_changes = pd.DataFrame(
    [
        ("context length", "512", "1,024", f"{gpt2_config.context_length:,}"),
        ("vocabulary", "40,478", "50,257", f"{gpt2_config.vocab_size:,}"),
        ("tokens", "BPE", "byte-level BPE", ""),
        ("batch (sequences)", "64", "512", "in training"),
        ("LayerNorm", "post-LN", "pre-LN", "pre-LN"),
        ("final LayerNorm", "none", "added", "ln_f"),
        ("c_proj init", "std 0.02", "× 1/√N", f"× 1/√{n_residual}"),
    ],
    columns=["change", "GPT-1", "GPT-2", "ours"],
).set_index("change").rename_axis(None)  # no line for the index's name
print(gpt_changes.to_string())

# %% [markdown]
# $N$ is the number of residual layers: GPT-2's paper writes $1/\sqrt{N}$, and its code, like ours,
# counts two per block (attention and MLP), as section 5.5 showed. GPT-3 {cite}`brown2020language`
# keeps GPT-2's architecture, initialization and pre-normalization, with one change: its layers
# alternate dense attention with *locally banded sparse* attention, in which a token attends only to a
# band of nearby positions, as in the Sparse Transformer {cite}`child2019sparse`. The rest is scale:
# 96 layers, $D = 12{,}288$, a context of 2,048 tokens and 175 billion parameters for the largest
# {cite}`brown2020language`.
#
# ## 5.8 Parity with Hugging Face
#
# The strongest test of all this is another implementation. We build a random GPT-2 with Hugging Face's
# `transformers` (no download needed), randomize *every* parameter, load it into our `GPT` with
# `from_hf`, and compare. `from_hf` maps the names (`transformer.h.0...` to `blocks.0...`) and
# transposes four weights per block: GPT-2 stores them as `Conv1D` layers, shape (in, out), the transpose
# of `nn.Linear`'s (out, in).

# %%
import transformers
from transformers import GPT2Config, GPT2LMHeadModel

from gpt_from_scratch.hf_weights import from_hf, to_hf_config, to_hf_state_dict

transformers.logging.set_verbosity_error()
torch.manual_seed(0)
hf_config = GPT2Config(n_layer=4, n_embd=128, n_head=4, n_positions=64,
                       attn_implementation="eager")
hf_model = GPT2LMHeadModel(hf_config).eval()
with torch.no_grad():
    for name, p in hf_model.named_parameters():
        noise = torch.randn(p.shape, generator=generator)
        is_gamma = "ln_" in name and name.endswith("weight")
        p.copy_(1 + 0.2 * noise if is_gamma else 0.1 * noise)
ours = from_hf(hf_model)
print(ours.config)

# %% [markdown]
# Logits and loss on a real Tiny Shakespeare batch. One detail: Hugging Face's `labels` are the inputs
# themselves, shifted inside the model; our `targets` are already the next tokens, with -100 marking the
# last position, whose next token is not in the window.

# %%
enc = gpt2_encoding()
text = load_tiny_shakespeare()
data = torch.tensor(enc.encode_ordinary(text), dtype=torch.long)
g = torch.Generator().manual_seed(1337)
xb, yb = get_batch(data, batch_size=4, block_size=64, generator=g)
print(f"{len(data):,} GPT-2 tokens; batch {tuple(xb.shape)}")

with torch.no_grad():
    hf_out = hf_model(xb, labels=xb)
    # The next token; -100 (ignored) where there is none:
    shifted = torch.cat([xb[:, 1:], torch.full_like(xb[:, :1], -100)], dim=1)
    our_logits, our_loss = ours(xb, shifted)
max_diff = (our_logits - hf_out.logits).abs().max().item()
print(f"max |logits - HF logits| = {max_diff:.1e}")

# %% tags=["nbval-check-output"]
assert_close(our_logits, hf_out.logits, atol=1e-5, rtol=0)
print(f"logits equal to within 1e-5: {max_diff <= 1e-5}")
print(f"loss: ours {our_loss:.4f}, Hugging Face {hf_out.loss:.4f}")

# %% [markdown]
# The logits agree to within $10^{-5}$ (the largest difference is printed above: float32 rounding), and
# so do the losses. Generation then has to agree too: 30 greedy tokens (always the most
# likely next token) from each model, with the simplest possible loop.

# %% tags=["nbval-check-output"]
def greedy(next_logits, idx, n_tokens):
    for _ in range(n_tokens):
        logits = next_logits(idx[:, -64:])  # (B, T, V); keep at most the context length
        idx = torch.cat([idx, logits[:, -1].argmax(dim=-1, keepdim=True)], dim=1)
    return idx


prompt = torch.tensor([enc.encode_ordinary("ROMEO:")])
with torch.no_grad():
    ours_tokens = greedy(lambda i: ours(i)[0], prompt, 30)
    hf_tokens = greedy(lambda i: hf_model(i).logits, prompt, 30)
print("30 greedy tokens identical:", torch.equal(ours_tokens, hf_tokens))

# %%
print(repr(enc.decode(ours_tokens[0].tolist())))

# %% [markdown]
# Random weights write random tokens, but the same ones. The way back works as well: `to_hf_state_dict()`
# exports our weights under GPT-2's names and layouts, and `to_hf_config()` the matching `GPT2Config`.

# %% tags=["nbval-check-output"]
exported = GPT2LMHeadModel(to_hf_config(ours))
exported.load_state_dict(to_hf_state_dict(ours))  # strict: every key and shape must match
with torch.no_grad():
    assert_close(exported.eval()(xb).logits, our_logits, atol=1e-5, rtol=0)
print("exported model == our model: True")

# %% [markdown]
# `from_pretrained("gpt2")` uses the same `from_hf` on OpenAI's released weights: it needs a network
# connection once (afterwards they are cached) or a folder written by `save_pretrained`. Chapter 8 does
# that; until then our models are trained from scratch.
#
# ## 5.9 The untrained model on a real batch
#
# What loss should an untrained GPT-2 have? If it knew nothing, it would spread its bets evenly over the
# $V = 50{,}257$ tokens, and the cross-entropy of a uniform guess is $\ln V \approx 10.82$ nats. GPT-2's
# initialization gets close to that: the last LayerNorm gives each position a vector $h$ with unit variance
# per entry, and each logit is $h \cdot e_v$ with $e_v$ drawn from $\mathcal{N}(0, 0.02^2)$, so the logits
# have a standard deviation of only $0.02\sqrt{D}$: all nearly equal, a nearly uniform softmax.

# %% tags=["nbval-check-output"]
print(f"ln(V) = ln(50257) = {math.log(50_257):.4f}")
torch.manual_seed(0)
# GPT-2's vocabulary, D = 32:
tiny = GPT(GPTConfig.from_preset("tiny", context_length=64)).eval()
with torch.no_grad():
    logits, loss = tiny(xb, yb)
print(f"tiny model (D = 32): loss {loss:.4f}, logits std {logits.std():.3f} "
      f"(0.02 * sqrt(32) = {0.02 * math.sqrt(32):.3f})")

# %% [markdown]
# The untrained loss is 10.8232, within 0.002 of $\ln V = 10.8249$, and the logits' spread is the predicted
# 0.11. A wider model has wider logits: for a random
# spread $\sigma$ of the logits, the loss is about $\ln V + \sigma^2/2$ (the log of an average of
# $e^{\text{logit}}$ over many tokens). At GPT-2 small's width, $D = 768$, $\sigma = 0.02\sqrt{768} \approx
# 0.55$. Two blocks of that width are enough to see it (the spread does not depend on depth, thanks to
# `ln_f`):

# %% tags=["nbval-check-output"]
torch.manual_seed(0)
# D = 768, 2 blocks:
wide = GPT(GPTConfig.from_preset("gpt2", n_layers=2, dropout=0.0)).eval()
with torch.no_grad():
    logits, loss = wide(xb, yb)
sigma = 0.02 * math.sqrt(768)
expected = math.log(50_257) + sigma**2 / 2
print(f"D = 768: loss {loss:.2f}, logits std {logits.std():.2f}; "
      f"ln V + sigma^2 / 2 = {expected:.2f}")
del wide

# %% [markdown]
# 10.91 measured, 10.98 by the rule of thumb (which treats the logits as independent Gaussians; they are
# not quite): 0.09 and 0.16 above $\ln V = 10.82$, so a GPT-2 small trained from scratch should start a
# little above $\ln V$, not at it. Either way, the model starts knowing nothing, and a loss far above $\ln V$ at step 0 would mean
# a bug (or a bad initialization): confidently wrong predictions cost more than no prediction at all.
#
# ## Summary
#
# - The **feed-forward network** is a per-token two-layer MLP, $D \to 4D \to D$ with GPT-2's tanh-GELU; it
#   holds two thirds of each block's parameters.
# - **Residual connections** add each sublayer's output to a running stream; the identity path carries the
#   gradient to every layer (nearly flat across 48 blocks, against a 1.5-billion-fold decay without it).
# - GPT-2's block is **pre-LN**: $x + \operatorname{attn}(\operatorname{LN}(x))$, $x +
#   \operatorname{mlp}(\operatorname{LN}(x))$, with a final `ln_f`; post-LN is a different function.
# - **Weight tying** shares `wte` with `lm_head`: 38,597,376 parameters fewer in GPT-2 small, which has
#   124,439,808.
# - **Initialization**: $\mathcal{N}(0, 0.02^2)$ everywhere, $0.02/\sqrt{2L}$ for the residual projections,
#   which keeps the stream from growing with depth; the untrained loss is close to $\ln V \approx 10.82$.
# - Our `GPT` equals Hugging Face's `GPT2LMHeadModel` to within $10^{-5}$ and generates the same tokens;
#   `from_hf`, `to_hf_state_dict` and `from_pretrained` move weights both ways.
#
# {ref}`ch-training` trains this model on Tiny Shakespeare.
#
# ## Exercises
#
# ### Exercise 1. Count by hand (predict, then run)
#
# Using the formula of section 5.6, how many parameters does GPT-2 medium ($L = 24$, $D =
# 1024$) have with an *untied* output layer? And what share of that untied model sits in its
# two $V \times D$ matrices, `wte` and `lm_head`, against the 14.5% that `wte` takes in the
# tied model? Write your numbers down, then run the cell after the answer.

# %% [markdown] tags=["answer"]
# ```{admonition} Answer
# :class: dropdown
# The tied model's count, 354,823,168, plus one more $V \times D$ matrix for the separate
# output layer: $50{,}257 \times 1{,}024 = 51{,}463{,}168$ extra parameters, 406,286,336 in
# all, the number the cell prints (it builds the model on the meta device, using no memory).
# The two vocabulary matrices then hold $2 \times 51{,}463{,}168$ of them, about 25%:
# untying nearly doubles what the vocabulary costs, and the smaller the model, the larger
# that share.
# ```

# %%
with torch.device("meta"):
    medium_untied = GPT(GPTConfig.from_preset("gpt2-medium", tie_weights=False))
print(f"{medium_untied.num_parameters():,}")

# %% [markdown]
# ### Exercise 2. A parallel block (implement)
#
# GPT-J and PaLM run attention and the MLP *side by side* on the same normalized input,
# which saves one LayerNorm and lets the two branches be computed at once. Write
# `ParallelBlock(config)`, an `nn.Module` with GPT-2's submodule names `ln_1`, `attn` and
# `mlp` (no `ln_2`), whose `forward(x)` returns $x +
# \operatorname{attn}(\operatorname{LN}_1(x)) + \operatorname{mlp}(\operatorname{LN}_1(x))$.
# Use the package's `LayerNorm`, `MultiHeadAttention` and `FeedForward` as building blocks
# (not `Block`).

# %% tags=["solution", "hide-input"] mystnb={"code_prompt_show": "Show the solution", "code_prompt_hide": "Hide the solution"}
class ParallelBlock(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = LayerNorm(config.d_model)
        self.attn = MultiHeadAttention(config.d_model, config.n_heads)
        self.mlp = FeedForward(config)

    def forward(self, x):  # (B, T, D)
        h = self.ln_1(x)  # one normalization feeds both branches
        return x + self.attn(h) + self.mlp(h)


# %%
from gpt_from_scratch.exercises import check_parallel_block

check_parallel_block(ParallelBlock);

# %% [markdown]
# ### Exercise 3. Untie (predict, then run)
#
# Build `GPTConfig.from_preset("tiny", context_length=64, tie_weights=False)` with the same
# seed as section 5.9, where the tied model's untrained loss was 10.8232. Will the untied
# loss change much, and will it move towards $\ln V$ or away from it? Section 5.4 counted
# what untying adds (3,242,432 parameters untied against 1,634,208 tied): what share of the
# untied tiny model is vocabulary, and what does that say about tiny models? Write your
# answers down, then run the cell after the answer.

# %% [markdown] tags=["answer"]
# ```{admonition} Answer
# :class: dropdown
# The loss barely moves, 10.8242 against 10.8232, both within 0.002 of $\ln V = 10.8249$: an
# untrained output layer, tied or not, holds small random vectors of the same scale, so the
# logits are as uninformative as before, and which side of $\ln V$ they land on is chance.
# The model grows by one $V \times D$ matrix, $50{,}257 \times 32 = 1{,}608{,}224$
# parameters, as the cell prints. Untied, the two vocabulary matrices hold $2 \times
# 1{,}608{,}224$ of the 3,242,432 parameters, over 99%: at $D = 32$ the "model" is almost
# all lookup table, and the blocks that should learn the language are a rounding error.
# ```

# %%
torch.manual_seed(0)
untied_config = GPTConfig.from_preset("tiny", context_length=64, tie_weights=False)
tiny_untied = GPT(untied_config).eval()
with torch.no_grad():
    untied_loss = tiny_untied(xb, yb)[1]
extra = tiny_untied.num_parameters() - tiny.num_parameters()
print(f"loss {untied_loss:.4f}; extra parameters {extra:,}")

# %% [markdown]
# ### Exercise 4. The untrained loss of GPT-2 XL (predict, then run)
#
# GPT-2 XL has $D = 1600$. Use $\ln V + \sigma^2/2$ with $\sigma = 0.02\sqrt{D}$ to predict
# its loss at initialization, then run the cell after the answer: it checks your prediction
# on one block of that width (with its $50{,}257 \times 1{,}600$ embedding table, over 100 M
# parameters: it takes a few seconds).

# %% [markdown] tags=["answer"]
# ```{admonition} Answer
# :class: dropdown
# $\sigma = 0.02 \times 40 = 0.8$, so the prediction is
#
# $$\ln 50{,}257 + 0.8^2 / 2 \approx 10.82 + 0.32 = 11.14,$$
#
# above $\ln V$, because the tied logits of a wide model are spread out. Compare with the
# measured value.
# ```

# %%
torch.manual_seed(0)
xl_wide = GPT(GPTConfig.from_preset("gpt2-xl", n_layers=1, dropout=0.0)).eval()
with torch.no_grad():
    xl_loss = xl_wide(xb[:1], yb[:1])[1]
print(f"measured: {xl_loss:.2f} ({xl_wide.num_parameters():,} parameters)")
del xl_wide

# %% [markdown]
# ### Exercise 5. Scales and ties (explain)
#
# (a) GPT-2 scales `c_proj` by $1/\sqrt{2L}$. In a model of $L$ parallel blocks (exercise
# 2), one LayerNorm and one residual addition per block, should the factor become
# $1/\sqrt{L}$? (b) Section 5.7 balanced $\sqrt{D}$-scaled token embeddings (0.556 at $D =
# 768$) against sinusoids of size 0.707. Keep GPT-2's initialization, $\mathcal{N}(0,
# 0.02^2)$, and that recipe: does the balance hold at GPT-2 XL's width, $D = 1600$, and at
# $D = 64$? What would make it hold at every width? (c) With tied weights, the logit of
# token $v$ is $h \cdot e_v$. What does that suggest about the logit an untrained model
# gives to the *current* input token?

# %% [markdown] tags=["answer"]
# ```{admonition} Answer
# :class: dropdown
# (a) No. What counts is how many random vectors are added to the stream, not how many
# additions are written: a parallel block adds attention's output and the MLP's, two vectors
# per block, $2L$ in all, so the factor stays $1/\sqrt{2L}$. (b) The scaled embeddings have
# size $0.02\sqrt{D}$, which grows with the width while the sinusoids stay at 0.707: $0.02
# \times 40 = 0.8$ at $D = 1600$, now above them, and $0.02 \times 8 = 0.16$ at $D = 64$,
# where the positions dominate by more than four to one. It holds at every width only if the
# embeddings are initialized with standard deviation $1/\sqrt{D}$, as in the original
# Transformer's reference code (Tensor2Tensor), so that $\sqrt{D}$ brings them to size 1; GPT-2 avoids the question by
# learning its positions at 0.02 too. (c) The stream still contains the token's own
# embedding $e_v$, so $h$ points partly along $e_v$ and $h \cdot e_v$ tends to be larger
# than the other logits: an untrained tied model leans towards repeating its input, more so
# when the blocks' additions are small compared with the embeddings.
# ```

# %% [markdown] tags=["quiz"]
# ## Check yourself
#
# A few questions on this chapter, each answer with its explanation. The numbers in them
# are the ones this chapter printed.

# %% tags=["quiz", "remove-input"]
from gpt_from_scratch.book.quiz import Choice, MultipleChoice, Numeric, show_quiz

show_quiz([
    Numeric("What share of a block's weight matrices and biases does the MLP hold? "
            "(Percent, one decimal.)", 100 * share, 0.06, "About two thirds: d_ff = 4D."),
    Numeric("How many parameters does tying the output layer to the token embedding "
            "save in GPT-2 small?", saved, 0.5, "V × D: one 50,257 × 768 matrix."),
    MultipleChoice("Without residual connections, the gradient at the embeddings of a deep "
                   "stack:", [
        Choice("shrinks by a roughly constant factor per block and all but vanishes", True,
               "Yes: section 5.3 measured it below 1e-6."),
        Choice("stays about the same as at the last block", False,
               "That is what the residual stream achieves, not what happens without it."),
        Choice("grows without bound", False, "No: here it shrinks."),
    ]),
])
