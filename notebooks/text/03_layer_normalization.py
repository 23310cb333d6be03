# %% [markdown]
# (ch-layernorm)=
# # 3. Layer normalization
#
# INTRO

# %% tags=["colab-setup"]
# Set-up: on Colab, or wherever the package is missing, install it (your own torch is kept).
try:
    import gpt_from_scratch
except ImportError:
    %pip install --quiet "gpt-from-scratch-book @ git+https://github.com/gpt-from-scratch/gpt-from-scratch"

# %%
import math

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn

from gpt_from_scratch.utils import seed_everything

seed_everything(1337)

# %% [markdown]
# ## Mean and variance of each token

# %%
# NBVAL_CHECK_OUTPUT
B, T, D = 2, 3, 8
g = torch.Generator().manual_seed(0)
offset = torch.tensor([[0.0, 5.0, -3.0], [10.0, 0.5, 1.0]])[..., None]  # (B, T, 1): one offset per token
scale = torch.tensor([[1.0, 0.1, 4.0], [2.0, 30.0, 1.0]])[..., None]  # (B, T, 1): one spread per token
x = offset + scale * torch.randn(B, T, D, generator=g)  # (B, T, D)

mean = x.mean(dim=-1, keepdim=True)  # (B, T, 1): one mean per token, over its D features
var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)  # (B, T, 1): biased variance, divides by D
print("mean per token:\n", mean.squeeze(-1).numpy().round(3))
print("variance per token:\n", var.squeeze(-1).numpy().round(3))

# %%
# NBVAL_CHECK_OUTPUT
biased = x.var(dim=-1, unbiased=False, keepdim=True)  # divide by D
unbiased = x.var(dim=-1, keepdim=True)  # torch's default: divide by D - 1
torch.testing.assert_close(biased, var)
print(f"unbiased / biased = {(unbiased / biased).mean():.6f}; D / (D - 1) = {D / (D - 1):.6f}")

# %%
# NBVAL_CHECK_OUTPUT
eps = 1e-5


def layer_norm_by_hand(x, eps=1e-5):
    """(x - mean) / sqrt(var + eps), over the last dimension, with the biased variance."""
    mean = x.mean(dim=-1, keepdim=True)  # (..., 1)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)  # (..., 1)
    return (x - mean) / torch.sqrt(var + eps)  # (..., D)


x_hat = layer_norm_by_hand(x)
print("every normalized token has mean 0 (to 1e-6):", x_hat.mean(dim=-1).abs().max().item() < 1e-6)
print("biased variance of each normalized token:\n", x_hat.var(dim=-1, unbiased=False).numpy().round(4))

reference = nn.LayerNorm(D)  # γ = 1, β = 0 at initialization
torch.testing.assert_close(layer_norm_by_hand(x), reference(x))
with_unbiased = (x - mean) / torch.sqrt(unbiased + eps)
print(f"max |difference| to nn.LayerNorm: biased {(layer_norm_by_hand(x) - reference(x)).abs().max():.0e}, "
      f"unbiased {(with_unbiased - reference(x)).abs().max():.3f}")

# %% [markdown]
# ## Learnable scale and shift

# %%
# NBVAL_CHECK_OUTPUT
from gpt_from_scratch.layernorm import LayerNorm

ln = LayerNorm(D)
print(ln)
print({name: tuple(p.shape) for name, p in ln.named_parameters()})
print("same state dict keys as nn.LayerNorm:", list(ln.state_dict()) == list(nn.LayerNorm(D).state_dict()))

# %%
# NBVAL_CHECK_OUTPUT
reference = nn.LayerNorm(D)
with torch.no_grad():
    reference.weight.copy_(1 + 0.5 * torch.randn(D, generator=g))  # a trained-looking γ
    reference.bias.copy_(0.5 * torch.randn(D, generator=g))  # and β
ln.load_state_dict(reference.state_dict())

x_check = torch.randn(B, T, D, generator=g)  # (B, T, D)
x1, x2 = x_check.clone().requires_grad_(), x_check.clone().requires_grad_()
y1, y2 = ln(x1), reference(x2)
upstream = torch.randn(B, T, D, generator=g)
(y1 * upstream).sum().backward()
(y2 * upstream).sum().backward()
torch.testing.assert_close(y1, y2)
torch.testing.assert_close(x1.grad, x2.grad)
torch.testing.assert_close(ln.weight.grad, reference.weight.grad)
torch.testing.assert_close(ln.bias.grad, reference.bias.grad)
print("outputs and all three gradients match nn.LayerNorm")

# %% [markdown]
# ## A common slip: dividing by std + eps

# %%
def layer_norm_std_plus_eps(x, eps=1e-5):
    """The slip: eps added to the standard deviation, outside the square root."""
    mean = x.mean(dim=-1, keepdim=True)
    std = x.std(dim=-1, unbiased=False, keepdim=True)
    return (x - mean) / (std + eps)


stds = torch.logspace(-4, 2, 61, dtype=torch.float64)
z = torch.randn(64, 768, generator=torch.Generator().manual_seed(1), dtype=torch.float64)  # 64 tokens, D = 768
errors = torch.stack([(layer_norm_std_plus_eps(s * z) - layer_norm_by_hand(s * z)).abs().max() for s in stds])

# %% mystnb={"figure": {"caption": "CAPTION", "name": "fig-std-plus-eps"}, "image": {"alt": "ALT"}}
fig, ax = plt.subplots(figsize=(7, 4))
ax.loglog(stds, errors, marker=".", label="max |(x−μ)/(σ+ε) − (x−μ)/√(σ²+ε)|")
ax.axvline(math.sqrt(eps), color="gray", linestyle="--", label="σ = √ε")
ax.set_xlabel("standard deviation σ of the input row")
ax.set_ylabel("max abs error")
ax.set_title("std + eps versus sqrt(var + eps), eps = 1e-5, D = 768")
ax.legend()
plt.show()

# %%
# NBVAL_CHECK_OUTPUT
for s in (1e-4, 1e-3, 1e-2, 1.0, 100.0):
    i = int(torch.argmin((stds - s).abs()))
    print(f"σ = {s:g}: max abs error {errors[i]:.1e}")

# %%
# NBVAL_CHECK_OUTPUT
row = 3.0 + 1e-4 * torch.randn(1, 768, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
print(f"near-constant row: mean {row.mean():.4f}, std {row.std(unbiased=False):.1e}")
print(f"std of the output: correct {layer_norm_by_hand(row).std(unbiased=False):.4f}, "
      f"std + eps {layer_norm_std_plus_eps(row).std(unbiased=False):.4f}")

# %% [markdown]
# ## LayerNorm versus BatchNorm

# %%
n_tokens, n_features = 12, 16
g = torch.Generator().manual_seed(3)
token_spread = torch.linspace(0.5, 4.0, n_tokens)[:, None]  # (tokens, 1): each token has its own scale
feature_offset = torch.linspace(-3.0, 3.0, n_features)[None, :]  # (1, features): each feature its own offset
acts = feature_offset + token_spread * torch.randn(n_tokens, n_features, generator=g)  # (tokens, features)

after_ln = LayerNorm(n_features, elementwise_affine=False)(acts)  # statistics per row (token)
after_bn = nn.BatchNorm1d(n_features, affine=False)(acts)  # statistics per column (feature), over the batch

# %% mystnb={"figure": {"caption": "CAPTION", "name": "fig-layernorm-vs-batchnorm"}, "image": {"alt": "ALT"}}
fig, axes = plt.subplots(1, 3, figsize=(11, 3.8), sharey=True)
for ax, (title, values) in zip(axes, [("input", acts), ("LayerNorm: each row", after_ln), ("BatchNorm: each column", after_bn)]):
    im = ax.imshow(values.detach(), cmap="RdBu_r", vmin=-4, vmax=4)
    ax.set_title(title)
    ax.set_xlabel("feature")
axes[0].set_ylabel("token")
fig.colorbar(im, ax=axes, shrink=0.8, label="value")
plt.show()

# %%
# NBVAL_CHECK_OUTPUT
def describe(name, values):
    rows_std, cols_std = values.std(dim=1, unbiased=False), values.std(dim=0, unbiased=False)
    rows_mean, cols_mean = values.mean(dim=1), values.mean(dim=0)
    print(f"{name:<10} row means in [{rows_mean.min():+.2f}, {rows_mean.max():+.2f}], row stds in [{rows_std.min():.2f}, {rows_std.max():.2f}]; "
          f"column means in [{cols_mean.min():+.2f}, {cols_mean.max():+.2f}], column stds in [{cols_std.min():.2f}, {cols_std.max():.2f}]")


with torch.no_grad():
    for name, values in [("input", acts), ("LayerNorm", after_ln), ("BatchNorm", after_bn)]:
        describe(name, values)

# %%
# NBVAL_CHECK_OUTPUT
with torch.no_grad():
    ln_alone = LayerNorm(n_features, elementwise_affine=False)(acts[:1])
    bn_alone = nn.BatchNorm1d(n_features, affine=False)(acts[:2])[:1]  # BatchNorm needs 2+ rows in training mode
print("LayerNorm: token 0 normalized alone equals token 0 in the batch:", torch.allclose(ln_alone, after_ln[:1], atol=1e-6))
print(f"BatchNorm: token 0 with one neighbour vs in the full batch, max difference {(bn_alone - after_bn[:1]).abs().max():.2f}")

# %% [markdown]
# ## Variance through a deep stack

# %%
class MLP(nn.Module):
    """The feed-forward branch: Linear(D, 4D) -> GELU -> Linear(4D, D)."""

    def __init__(self, D):
        super().__init__()
        self.c_fc = nn.Linear(D, 4 * D)
        self.c_proj = nn.Linear(4 * D, D)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))


class MixStandIn(nn.Module):
    """A stand-in for attention's value and output projections (Chapter 4 adds the mixing over tokens)."""

    def __init__(self, D):
        super().__init__()
        self.c_attn = nn.Linear(D, D)
        self.c_proj = nn.Linear(D, D)

    def forward(self, x):
        return self.c_proj(self.c_attn(x))


class NoNormBlock(nn.Module):
    def __init__(self, D):
        super().__init__()
        self.attn, self.mlp = MixStandIn(D), MLP(D)

    def forward(self, x):
        x = x + self.attn(x)
        x = x + self.mlp(x)
        return x


class PostLNBlock(NoNormBlock):
    """The original Transformer (2017): add the branch, then normalize the sum."""

    def __init__(self, D):
        super().__init__(D)
        self.ln_1, self.ln_2 = LayerNorm(D), LayerNorm(D)

    def forward(self, x):
        x = self.ln_1(x + self.attn(x))
        x = self.ln_2(x + self.mlp(x))
        return x


class PreLNBlock(PostLNBlock):
    """GPT-2: normalize the branch's input; the residual stream x itself is never normalized."""

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


# %%
def make_stack(block, L, D, generator, std=None, proj_std=None):
    """L blocks with N(0, std²) weights (default std = 1/√fan_in), zero biases; c_proj weights get proj_std if given."""
    blocks = nn.ModuleList([block(D) for _ in range(L)])
    with torch.no_grad():
        for name, p in blocks.named_parameters():
            if name.endswith("bias") and "ln" not in name:
                p.zero_()
            elif "ln" not in name:
                sigma = (proj_std if proj_std is not None and "c_proj" in name else std) or 1 / math.sqrt(p.shape[1])
                p.copy_(sigma * torch.randn(p.shape, generator=generator))
    return blocks


def run_stack(blocks, x):
    """The residual stream after each block: a list of L + 1 tensors (the input first)."""
    stream = [x]
    for block in blocks:
        stream.append(block(stream[-1]))
    return stream


D, L, N = 128, 48, 64
x0 = torch.randn(N, D, generator=torch.Generator().manual_seed(4))  # N tokens of unit variance
stats = {}
with torch.no_grad():
    for name, block in [("no normalization", NoNormBlock), ("post-LN", PostLNBlock), ("pre-LN", PreLNBlock)]:
        stream = run_stack(make_stack(block, L, D, torch.Generator().manual_seed(5)), x0)
        stats[name] = (torch.stack([h.mean() for h in stream]), torch.stack([h.std() for h in stream]))

# %% mystnb={"figure": {"caption": "CAPTION", "name": "fig-depth-variance"}, "image": {"alt": "ALT"}}
fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 4))
for name, (means, stds_) in stats.items():
    ax0.plot(means, label=name)
    ax1.plot(stds_, label=name)
ax0.set_yscale("symlog")
ax1.set_yscale("log")
ax0.set_title("mean of the residual stream")
ax1.set_title("standard deviation of the residual stream")
for ax in (ax0, ax1):
    ax.set_xlabel("layer")
    ax.legend()
plt.show()

# %%
# NBVAL_CHECK_OUTPUT
for name, (means, stds_) in stats.items():
    print(f"{name:<17} std after layer 1: {stds_[1]:9.3g}, layer 12: {stds_[12]:9.3g}, layer 48: {stds_[48]:9.3g}")

# %% [markdown]
# ## Gradients at initialization

# %%
def c_proj_grad_norms(block, L, ln_f=None, seed=5):
    """Gradient norm of every layer's mlp.c_proj weight for a fixed random readout of the stack's output."""
    blocks = make_stack(block, L, D, torch.Generator().manual_seed(seed))
    out = run_stack(blocks, x0)[-1]
    if ln_f is not None:
        out = ln_f(out)  # GPT-2 normalizes the stream once more before the output layer
    loss = (out * readout).sum() / N
    loss.backward()
    return torch.stack([b.mlp.c_proj.weight.grad.norm() for b in blocks])


readout = torch.randn(N, D, generator=torch.Generator().manual_seed(6))
grad_post = c_proj_grad_norms(PostLNBlock, L)
grad_pre = c_proj_grad_norms(PreLNBlock, L, ln_f=LayerNorm(D))

# %% mystnb={"figure": {"caption": "CAPTION", "name": "fig-gradients-per-layer"}, "image": {"alt": "ALT"}}
fig, ax = plt.subplots(figsize=(7, 4))
ax.plot(range(1, L + 1), grad_post, label="post-LN")
ax.plot(range(1, L + 1), grad_pre, label="pre-LN (with final ln_f)")
ax.set_xlabel("layer")
ax.set_ylabel("‖∂loss/∂W‖ of mlp.c_proj")
ax.set_title(f"Gradient norms at initialization, L = {L}, D = {D}")
ax.set_ylim(bottom=0)
ax.legend()
plt.show()

# %%
# NBVAL_CHECK_OUTPUT
print(f"post-LN: first layer {grad_post[0]:.2f}, last layer {grad_post[-1]:.2f}")
print(f"pre-LN:  first layer {grad_pre[0]:.2f}, last layer {grad_pre[-1]:.2f}")
for depth in (6, 12, 24, 48):
    post = c_proj_grad_norms(PostLNBlock, depth)[-1]
    pre = c_proj_grad_norms(PreLNBlock, depth, ln_f=LayerNorm(D))[-1]
    print(f"L = {depth:>2}: last-layer gradient post-LN {post:.2f}, pre-LN {pre:.2f}, ratio {post / pre:.2f}")

# %% [markdown]
# ## GPT-2's scaled residual projections

# %%
def residual_std(L, scaled):
    """Std of the residual stream after each layer of a pre-LN stack with GPT-2's initialization."""
    proj_std = 0.02 / math.sqrt(2 * L) if scaled else 0.02
    blocks = make_stack(PreLNBlock, L, D, torch.Generator().manual_seed(7), std=0.02, proj_std=proj_std)
    g = torch.Generator().manual_seed(8)
    x = 0.02 * torch.randn(N, D, generator=g) + 0.02 * torch.randn(N, D, generator=g)  # wte + wpe at GPT-2's init
    return torch.stack([h.std() for h in run_stack(blocks, x)])


with torch.no_grad():
    growth = {(depth, scaled): residual_std(depth, scaled) for depth in (6, 12, 24, 48) for scaled in (False, True)}

# %% mystnb={"figure": {"caption": "CAPTION", "name": "fig-residual-scaling"}, "image": {"alt": "ALT"}}
fig, ax = plt.subplots(figsize=(7, 4))
ax.plot(growth[(48, False)], label="c_proj ~ N(0, 0.02²)")
ax.plot(growth[(48, True)], label="c_proj ~ N(0, (0.02/√(2L))²)")
ax.set_xlabel("layer")
ax.set_ylabel("std of the residual stream")
ax.set_title("Pre-LN stack, GPT-2 initialization, L = 48")
ax.legend()
plt.show()

# %%
# NBVAL_CHECK_OUTPUT
for depth in (6, 12, 24, 48):
    plain, scaled = growth[(depth, False)], growth[(depth, True)]
    print(f"L = {depth:>2}: output std / input std: plain {plain[-1] / plain[0]:5.2f}, scaled {scaled[-1] / scaled[0]:5.2f}")

# %% [markdown]
# ## Summary
#
# ## Exercises

# %% tags=["solution"]
def layer_norm_solution(x, weight, bias, eps):
    mean = x.mean(dim=-1, keepdim=True)  # (..., 1)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)  # (..., 1), biased
    return (x - mean) / torch.sqrt(var + eps) * weight + bias  # (..., D)


# %%
from gpt_from_scratch.exercises import check_layer_norm

check_layer_norm(layer_norm_solution)
