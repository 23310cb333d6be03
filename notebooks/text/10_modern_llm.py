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
# (ch-modern)=
# # 10. From GPT-2 to a modern LLM
#
# GPT-2 dates from 2019. The open models people run today, Llama {cite}`touvron2023llama` and the many
# that copy its design (Mistral, Qwen, Gemma), are still decoder-only Transformers with the shape of
# the one built in {ref}`ch-gpt`: embeddings, a stack of pre-normalized blocks of attention and
# feed-forward network, a final normalization and an output head. They change four pieces:
#
# 1. **RMSNorm** for LayerNorm: no mean, no shift;
# 2. a **SwiGLU** feed-forward network for the GELU one: a gated MLP with three matrices;
# 3. **rotary position embeddings** (RoPE) for the learned position table: positions rotate the
#    queries and keys inside attention;
# 4. **grouped-query attention** (GQA): fewer key/value heads than query heads, a smaller KV cache.
#
# They also drop every bias and untie the output head from the token embeddings. This chapter makes
# each change on its own, measures it against the GPT-2 version, and checks it against a reference:
# PyTorch's `nn.RMSNorm` and transformers' Llama code. Then it assembles a Llama-style model whose logits
# equal Hugging Face's `LlamaForCausalLM` for the same weights, runs it with the book's `generate` and
# KV cache, and asks whether the changes matter for a model of our size trained on Tiny Shakespeare.

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
import math
import statistics
import time

import matplotlib.pyplot as plt
from IPython.display import Markdown, display
import torch
import torch.nn.functional as F
from torch import nn
from torch.testing import assert_close
from transformers import LlamaConfig as HFLlamaConfig
from transformers import LlamaForCausalLM
from transformers.models.llama import modeling_llama

from gpt_from_scratch.attention import KVCache, MultiHeadAttention
from gpt_from_scratch.generate import generate
from gpt_from_scratch.gqa import GroupedQueryAttention, kv_cache_bytes_per_token, repeat_kv
from gpt_from_scratch.layernorm import LayerNorm, RMSNorm
from gpt_from_scratch.model import FeedForward, GPT, GPTConfig
from gpt_from_scratch.modern import Llama, LlamaConfig, SwiGLU, llama_hidden_size
from gpt_from_scratch.rope import apply_rope, rope_cos_sin
from gpt_from_scratch.train import estimate_loss, train
from gpt_from_scratch.train_config import TrainConfig
from gpt_from_scratch.utils import default_device, seed_everything
from gpt_from_scratch.book.figure_text import book_figures
from gpt_from_scratch.book.modern_prose import comparison_text
from gpt_from_scratch.book.plotting import LABEL_PT
from gpt_from_scratch.book.recipes import char_level_data

book_figures()  # sharp on high-density screens, each PNG records its smallest text
_ = seed_everything(1337)

# FULL_RUN = False: the training comparison of section 10.6 is sized for 2 CPU cores (about
# a minute and a half). FULL_RUN = True (on a GPU): wider models, 10 times the steps,
# 5 seeds.
FULL_RUN = False
DEVICE = default_device() if FULL_RUN else "cpu"


def best_time(fn, repeats=20):
    """The fastest of `repeats` calls of fn(), in seconds (the least disturbed one)."""
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


# %% [markdown]
# ## 10.1 RMSNorm: LayerNorm without the mean
#
# LayerNorm ({ref}`ch-layernorm`) centres each token's vector and divides by its standard deviation, then
# scales by $\gamma$ and shifts by $\beta$. RMSNorm {cite}`zhang2019rmsnorm` keeps only the division, by
# the root mean square, and only the scale:
#
# $$
# y = \gamma \odot \frac{x}{\sqrt{\tfrac{1}{D}\sum_{j} x_j^2 + \epsilon}} .
# $$
#
# For a vector of mean 0 the two agree: the mean square is then the variance. Zhang and Sennrich's
# argument is that LayerNorm's success comes from the rescaling, not the re-centring, so the mean (one
# reduction over $D$) and $\beta$ can go. By hand, against PyTorch's `nn.RMSNorm` and the package's
# `RMSNorm`:

# %% tags=["nbval-check-output"]
def rms_norm_by_hand(x, weight, eps=1e-5):
    ms = x.pow(2).mean(dim=-1, keepdim=True)  # (..., 1): the mean square of each token
    return x / torch.sqrt(ms + eps) * weight  # (..., D)


B, T, D = 2, 5, 16
g = torch.Generator().manual_seed(0)
x = 2.0 + 3.0 * torch.randn(B, T, D, generator=g)  # (B, T, D), deliberately not centred
reference = nn.RMSNorm(D, eps=1e-5)
with torch.no_grad():
    reference.weight.copy_(1 + 0.5 * torch.randn(D, generator=g))  # a trained-looking γ
ours = RMSNorm(D, eps=1e-5)
ours.load_state_dict(reference.state_dict())  # one parameter, `weight`, as in nn.RMSNorm
written_out = RMSNorm(D, eps=1e-5, fast=False)
written_out.load_state_dict(reference.state_dict())
for y in (rms_norm_by_hand(x, reference.weight), ours(x), written_out(x)):
    assert_close(y, reference(x))
print("by hand, RMSNorm (fused and written out) and nn.RMSNorm agree")
print("parameters:", {name: tuple(p.shape) for name, p in ours.named_parameters()})
centred = x - x.mean(-1, keepdim=True)
ln = nn.LayerNorm(D, elementwise_affine=False)
print(f"on centred rows, RMSNorm vs LayerNorm: max |difference| "
      f"{(rms_norm_by_hand(centred, 1.0) - ln(centred)).abs().max():.1e}")
print(f"on these rows (mean about 2): max |difference| "
      f"{(rms_norm_by_hand(x, 1.0) - ln(x)).abs().max():.2f}")

# %% [markdown]
# On rows far from mean 0 the two are different functions, so a model trained with one cannot switch to the
# other; trained from scratch, a model learns with either. What RMSNorm saves is one reduction and one
# subtraction per token. How much time is that? Both fused kernels (`F.layer_norm`, `F.rms_norm`) and both
# written-out versions, on GPT-2 small's width, timed in this process (timings are shown, not checked):

# %%
x_big = torch.randn(8, 256, 768)  # (B, T, D)
pairs = {"fused": (LayerNorm(768), RMSNorm(768)),
         "written out": (LayerNorm(768, fast=False), RMSNorm(768, fast=False))}
with torch.no_grad():
    for name, (layer_norm, rms_norm) in pairs.items():
        t_ln = best_time(lambda: layer_norm(x_big))
        t_rms = best_time(lambda: rms_norm(x_big))
        print(f"{name:>11}: LayerNorm {t_ln * 1e3:.2f} ms, RMSNorm {t_rms * 1e3:.2f} ms, "
              f"RMSNorm / LayerNorm = {t_rms / t_ln:.2f}")

# %% [markdown]
# Written out, RMSNorm does less work than LayerNorm: one reduction and one subtraction fewer per token.
# The fused line depends on your PyTorch build and device, not on the formula. Where `F.rms_norm` takes
# about as long as the written-out RMSNorm (as in the committed run, on a CPU), PyTorch has no fused
# RMSNorm kernel for that device and runs the same separate operations, while `F.layer_norm` has a
# hand-tuned kernel; on GPUs recent PyTorch versions fuse both. Either way normalization is a small part
# of a Transformer's time next to the matrix products. LLaMA {cite}`touvron2023llama` adopts RMSNorm by
# citing Zhang and Sennrich {cite}`zhang2019rmsnorm`, whose argument it is: re-centring adds little, and
# dropping it saves computation.
#
# ## 10.2 SwiGLU: a gated feed-forward network
#
# GPT-2's MLP is $\operatorname{GELU}(x W_1) W_2$ with $W_1 \in \mathbb{R}^{D \times 4D}$ (biases aside).
# A *gated linear unit* {cite}`shazeer2020glu` computes two projections of the token and multiplies them
# feature by feature, one of them passed through a nonlinearity that acts as a gate:
#
# $$
# \operatorname{SwiGLU}(x) = \big(\operatorname{SiLU}(x W_{\text{gate}}) \odot x W_{\text{up}}\big)
# W_{\text{down}}, \qquad \operatorname{SiLU}(z) = z\,\sigma(z).
# $$
#
# That is three matrices instead of two. To keep the parameter count of GPT-2's MLP, $8D^2$, the hidden
# width shrinks from $4D$ to $\tfrac{2}{3} \cdot 4D$: $3 \cdot D \cdot \tfrac{8D}{3} = 8D^2$. Llama rounds
# it up to a multiple of 256 (`llama_hidden_size`). For GPT-2 small's $D = 768$, $\tfrac{8}{3} \cdot 768 =
# 2048$ exactly, so the counts are equal to the last parameter:

# %% tags=["nbval-check-output"]
def swiglu_by_hand(x, w_gate, w_up, w_down):
    hidden = F.silu(x @ w_gate.T) * (x @ w_up.T)  # (B, T, d_ff)
    return hidden @ w_down.T  # (B, T, D)


for d in (768, 4096):
    print(f"D = {d}: 8D/3 = {8 * d / 3:,.1f}, "
          f"Llama's hidden width {llama_hidden_size(d):,}")
gelu_mlp = FeedForward(GPTConfig(d_model=768, bias=False, dropout=0.0))  # c_fc, c_proj
swiglu = SwiGLU(768, llama_hidden_size(768))  # gate_proj, up_proj, c_proj
for name, module in (("GELU MLP (GPT-2, no biases)", gelu_mlp), ("SwiGLU", swiglu)):
    shapes = {n: tuple(p.shape) for n, p in module.named_parameters()}
    print(f"{name}: {sum(p.numel() for p in module.parameters()):,} parameters {shapes}")

x = torch.randn(2, 5, 768, generator=g)  # (B, T, D)
hf_mlp = modeling_llama.LlamaMLP(HFLlamaConfig(hidden_size=768, intermediate_size=2048))
with torch.no_grad():
    for ours_name, hf_name in (("gate_proj", "gate_proj"), ("up_proj", "up_proj"),
                               ("c_proj", "down_proj")):
        getattr(swiglu, ours_name).weight.copy_(getattr(hf_mlp, hf_name).weight)
    assert_close(swiglu(x), hf_mlp(x))
    weights = swiglu.gate_proj.weight, swiglu.up_proj.weight, swiglu.c_proj.weight
    assert_close(swiglu(x), swiglu_by_hand(x, *weights))
print("SwiGLU equals transformers' LlamaMLP and the formula")

# %% [markdown]
# For Llama 7B's $D = 4096$ the rounding gives 11,008, the width of its MLP. Shazeer compared several
# gates at equal parameter count and found the gated versions slightly better in perplexity; he offered no
# explanation ("we attribute their success ... to divine benevolence"). Section 10.6 measures whether our
# small models notice.
#
# ## 10.3 Rotary position embeddings
#
# GPT-2 adds a learned vector per position to each token ({ref}`ch-embeddings`): a table of
# `context_length` rows, which says nothing about position 1,025. RoPE {cite}`su2024roformer` adds nothing
# to the tokens. Inside attention, it *rotates* each query and each key by an angle proportional to its
# position. Split the $d_{\text{head}}$ features into $d_{\text{head}}/2$ pairs; pair $i$ of the vector at
# position $m$ turns by the angle $m\,\theta_i$, with frequencies $\theta_i = 10000^{-2i/d_{\text{head}}}$
# that go from one radian per position down to about $10^{-4}$, the frequencies of the sinusoidal table of
# {ref}`ch-embeddings`.
#
# Why rotations? The dot product of two vectors depends only on their lengths and the angle between them.
# Turn a query at position $m$ by $m\theta$ and a key at position $n$ by $n\theta$: the angle between them
# changes by $(m - n)\theta$, so the score depends on the positions only through the offset $m - n$. That
# is relative position, for free, without a table.
#
# Which features form a pair is a convention. The RoPE paper and Meta's Llama code pair neighbours,
# $(x_{2i}, x_{2i+1})$ (*interleaved*). Hugging Face's Llama pairs feature $i$ with feature
# $i + d_{\text{head}}/2$ (*half-split*), so that the rotation is two whole-tensor operations:
# $x \cos + \operatorname{rotate\_half}(x) \sin$ with $\operatorname{rotate\_half}(x_1, x_2) = (-x_2, x_1)$.
# The two layouts are the same rotation up to a fixed reordering of each head's features, which
# transformers' conversion script applies to Meta's `q_proj` and `k_proj` weights. The package follows
# Hugging Face, so that its weights load unchanged; exercise 2 writes the interleaved layout. By hand:

# %% tags=["nbval-check-output"]
def rope_by_hand(x, positions, theta=10000.0):
    """Rotate x (..., T, d): pair i = features (i, i + d/2), by positions * theta_i."""
    d = x.size(-1)
    freqs = theta ** (-torch.arange(0, d, 2).float() / d)  # (d/2,): theta_i
    angles = positions.float()[:, None] * freqs  # (T, d/2)
    cos, sin = angles.cos(), angles.sin()
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]  # the two halves: pair i is (x1[i], x2[i])
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)  # 2-D rotations


H, d_head = 4, 16
q = torch.randn(B, H, T, d_head, generator=g)  # (B, H, T, d_head)
k = torch.randn(B, H, T, d_head, generator=g)
positions = torch.arange(T)
cos, sin = rope_cos_sin(positions, d_head)  # (T, d_head) each: the package
hf_config = HFLlamaConfig(hidden_size=H * d_head, num_attention_heads=H, rope_theta=10000.0)
rotary = modeling_llama.LlamaRotaryEmbedding(config=hf_config)
hf_cos, hf_sin = rotary(q, positions[None])  # (1, T, d_head) each
hf_q, hf_k = modeling_llama.apply_rotary_pos_emb(q, k, hf_cos, hf_sin)
assert_close(cos, hf_cos[0])
assert_close(apply_rope(q, cos, sin), hf_q)
assert_close(apply_rope(k, cos, sin), hf_k)
assert_close(rope_by_hand(q, positions), hf_q)
print("by hand, the package and transformers' LlamaRotaryEmbedding + "
      "apply_rotary_pos_emb agree")
print(f"lengths kept: max |‖rotated q‖ - ‖q‖| = "
      f"{(apply_rope(q, cos, sin).norm(dim=-1) - q.norm(dim=-1)).abs().max():.1e}")

# %% [markdown]
# Now the property that matters. Take one query vector and one key vector, put the query at every position
# $m$ and the key at every position $n$ from 0 to 31, and compute all the scores $q_m \cdot k_n$:

# %% tags=["nbval-check-output"]
n_pos = 32
q1 = torch.randn(d_head, generator=g).expand(n_pos, d_head)  # one query at every position
k1 = torch.randn(d_head, generator=g).expand(n_pos, d_head)  # one key at every position
cos32, sin32 = rope_cos_sin(torch.arange(n_pos), d_head)
scores = apply_rope(q1, cos32, sin32) @ apply_rope(k1, cos32, sin32).T  # (m, n)
m, n = torch.meshgrid(torch.arange(n_pos), torch.arange(n_pos), indexing="ij")
# the score of the same offset with one of the two at position 0: (m - n, 0) or (0, n - m)
same_offset = torch.where(m >= n, scores[(m - n).clamp(min=0), 0],
                          scores[0, (n - m).clamp(min=0)])
spread = (scores - same_offset).abs().max()
print(f"scores for {n_pos} x {n_pos} position pairs; largest difference from the score "
      f"with the "
      f"same offset m - n: {spread:.1e}")
print(f"without rotation every score is q·k = {(q1[0] @ k1[0]):.3f}; with it, from "
      f"{scores.min():.3f} to {scores.max():.3f}")

# %% mystnb={"figure": {"caption": "The score of one fixed query and one fixed key, rotated by RoPE to every query position m and key position n (d_head = 16). Every diagonal (constant m − n) has one colour: the score depends only on the offset.", "name": "fig-rope-offset-heatmap"}, "image": {"alt": "Square heatmap, query position m on the vertical axis and key position n on the horizontal axis, 0 to 31. The colours form stripes parallel to the main diagonal, each stripe a single colour, varying irregularly from one stripe to the next."}}
fig, ax = plt.subplots(figsize=(5.2, 4.3))
im = ax.imshow(scores, cmap="RdBu_r", origin="lower")
ax.set_xlabel("key position n", fontsize=LABEL_PT)
ax.set_ylabel("query position m", fontsize=LABEL_PT)
ax.set_title("RoPE: score of one q and one k at every (m, n)", fontsize=LABEL_PT)
ax.tick_params(labelsize=LABEL_PT)
fig.colorbar(im, ax=ax, label="q_m · k_n")
plt.show()

# %% [markdown]
# Up to float32 rounding, all pairs with the same offset share one score. In a causal model only the lower
# triangle ($n \le m$) is used, and there the score of a token for a key $n$ steps back is the same wherever
# the pair sits in the sequence. Two consequences:
#
# - **No position parameters**: the model has no table to outgrow. It still meets, past its training
#   context, offsets it never saw during training; section 10.6 measures what that costs.
# - **The KV cache stores rotated keys**: a key is rotated once, by its own position, when it enters the
#   cache, and never again, since later queries only add their own rotation.
#
# ## 10.4 Grouped-query attention
#
# Chapter 7 showed that the KV cache, not the weights, fills a server's memory: every layer keeps a key and
# a value of $D$ numbers for every past token. Multi-query attention keeps one key/value head shared by all
# query heads; grouped-query attention {cite}`ainslie2023gqa` keeps $H_{kv}$ of them, each shared by a group
# of $H / H_{kv}$ query heads. The cache shrinks by $H / H_{kv}$; the query heads stay. In code the only new
# step is to copy each key/value head to its group before the scores, `repeat_kv`: key/value head $g$ serves
# query heads $g \cdot r$ to $g \cdot r + r - 1$, with $r = H / H_{kv}$.

# %% tags=["nbval-check-output"]
B, T, D, H, H_kv = 2, 6, 64, 8, 2
kv = torch.randn(B, H_kv, T, D // H, generator=g)  # (B, H_kv, T, d_head)
repeated = repeat_kv(kv, H // H_kv)  # (B, H, T, d_head)
print("repeat_kv:", tuple(kv.shape), "->", tuple(repeated.shape))
assert_close(repeated, kv.repeat_interleave(H // H_kv, dim=1))  # by hand: r times in a row
assert_close(repeated, modeling_llama.repeat_kv(kv, H // H_kv))  # transformers'
print("query heads 0-3 see key/value head 0:",
      all(torch.equal(repeated[:, h], kv[:, 0]) for h in range(4)))

# %% [markdown]
# With $H_{kv} = H$ nothing is shared, and `GroupedQueryAttention` must be the multi-head attention of
# {ref}`ch-attention`. Load the book's `MultiHeadAttention` weights into it (GPT-2's one `c_attn` matrix is the
# three projections stacked) and compare, with and without a KV cache:

# %% tags=["nbval-check-output"]
mha = MultiHeadAttention(D, H, bias=False).eval()
gqa = GroupedQueryAttention(D, H, n_kv_heads=H)
with torch.no_grad():
    w_q, w_k, w_v = mha.c_attn.weight.split(D, dim=0)  # 3 x (D, D)
    for proj, w in ((gqa.q_proj, w_q), (gqa.k_proj, w_k), (gqa.v_proj, w_v),
                    (gqa.c_proj, mha.c_proj.weight)):
        proj.weight.copy_(w)
    x = torch.randn(B, T, D, generator=g)  # (B, T, D)
    assert_close(gqa(x), mha(x))  # cos=None: no rotation, as in GPT-2's attention
    cache_mha, cache_gqa = KVCache(), KVCache()
    mha(x[:, :4], kv_cache=cache_mha), gqa(x[:, :4], kv_cache=cache_gqa)  # prefill 4 tokens
    assert_close(gqa(x[:, 4:], kv_cache=cache_gqa), mha(x[:, 4:], kv_cache=cache_mha))
    print("H_kv = H: GroupedQueryAttention equals MultiHeadAttention, with and without "
          "a cache")
    gqa_2 = GroupedQueryAttention(D, H, n_kv_heads=2)
    print(gqa_2)
    print({name: tuple(p.shape) for name, p in gqa_2.named_parameters()})

# %% [markdown]
# The keys and values shrink to $H_{kv}\,d_{\text{head}}$ features; the queries keep $H\,d_{\text{head}}$.
# Now the memory. Below, models with GPT-2 small's shape (12 layers, $D = 768$, 12 query heads of 64
# features) and $H_{kv}$ = 12 (multi-head), 4 (grouped) and 1 (multi-query) each prefill a prompt, and the
# bytes their caches hold are counted and divided by the number of tokens; GPT-2 small itself is measured the
# same way. The last rows, computed with `kv_cache_bytes_per_token`, give the shapes of Llama 2 7B
# (32 layers, 32 heads of 128, no grouping) and Llama 3 8B (the same, with 8 key/value heads).

# %% tags=["nbval-check-output"]
def measured_bytes_per_token(model, T=16):
    cache = model.new_kv_cache()
    with torch.no_grad():
        model(torch.zeros(1, T, dtype=torch.long), kv_cache=cache)
    return sum(c.keys.nbytes + c.values.nbytes for c in cache) / T


small = dict(vocab_size=256, context_length=64)  # a tiny vocabulary: the cache ignores it
rows = [("GPT-2 small, multi-head", 12,
         measured_bytes_per_token(GPT(GPTConfig(**small)).eval()))]
for label, h_kv in (("GPT-2 small shape, GQA", 4), ("GPT-2 small shape, MQA", 1)):
    model = Llama(LlamaConfig(**small, n_kv_heads=h_kv))
    rows.append((label, h_kv, measured_bytes_per_token(model)))
del model
print("KiB per token: float32 and float16 measured, the formula in float16;")
print("the last column: MiB for one sequence of 8,192 tokens in float16")
print(f"{'model':<24}{'H_kv':>5}{'fp32':>6}{'fp16':>6}{'formula':>9}{'8,192':>7}")
for label, h_kv, measured in rows:
    formula = kv_cache_bytes_per_token(12, h_kv, 64, bytes_per_number=2)
    print(f"{label:<24}{h_kv:>5}{measured / 1024:>6.0f}{measured / 2048:>6.0f}"
          f"{formula / 1024:>9.0f}{formula * 8192 / 2**20:>7,.0f}")
for label, layers, h_kv in (("Llama 2 7B, multi-head", 32, 32), ("Llama 3 8B, GQA", 32, 8)):
    formula = kv_cache_bytes_per_token(layers, h_kv, 128, bytes_per_number=2)
    print(f"{label:<24}{h_kv:>5}{'':>12}{formula / 1024:>9.0f}"
          f"{formula * 8192 / 2**20:>7,.0f}")

# %% [markdown]
# Per token, GPT-2 small's cache holds 72 KiB in float32, 36 KiB in float16 (the measurement and the formula
# $2 \cdot L \cdot H_{kv} \cdot d_{\text{head}} \cdot \text{bytes}$ agree). Four key/value heads cut it by 3,
# one by 12. Llama 3 8B needs 128 KiB per token in float16 where Llama 2 7B needed 512 KiB: for one
# sequence of 8,192 tokens, 1,024 MiB instead of 4,096. The compute hardly changes (the queries and the
# scores are the same size), which is why GQA mostly matters for serving; Ainslie et al. report quality
# close to multi-head attention at 8 groups.
#
# ## 10.5 The whole model, exact to Hugging Face's Llama
#
# `LlamaConfig` and `Llama` (in `gpt_from_scratch.modern`) put the four pieces into the book's GPT, keeping
# its names where the role is the same (`wte`, `blocks`, `ln_1`, `attn`, `ln_2`, `mlp`, `c_proj`, `ln_f`,
# `lm_head`): pre-RMSNorm blocks, SwiGLU, RoPE applied to queries and keys inside `GroupedQueryAttention`, no
# biases, no position table, and an untied head. The differences from `GPT`, in one place:

# %% tags=["nbval-check-output"]
gpt_config = GPTConfig.from_preset("tiny", vocab_size=101, context_length=32)
llama_config = LlamaConfig(vocab_size=101, context_length=32, d_model=32, n_layers=2,
                           n_heads=4, n_kv_heads=2, multiple_of=16)
gpt_names = {n for n, _ in GPT(gpt_config).named_parameters()}
llama_names = {n for n, _ in Llama(llama_config).named_parameters()}
print("only in GPT:  ", sorted(n for n in gpt_names - llama_names if "blocks.1" not in n))
print("only in Llama:", sorted(n for n in llama_names - gpt_names if "blocks.1" not in n))
print(llama_config)

# %% [markdown]
# `Llama.from_hf` loads the weights of a transformers `LlamaForCausalLM`, renaming its keys
# (`model.layers.0.self_attn.o_proj` becomes `blocks.0.attn.c_proj`, and so on). The test: random weights
# (not the small initial ones: every weight drawn from $\mathcal{N}(0, 0.1^2)$, so that the differences are
# not hidden by near-zero outputs), three shapes, including multi-query, plain multi-head and tied
# embeddings, and a batch of full-context sequences. The logits must agree to $10^{-5}$ in float32, and
# greedy decoding, with and without the KV cache, must give Hugging Face's tokens.

# %% tags=["nbval-check-output"]
parity_shapes = [
    dict(vocab_size=101, context_length=48, d_model=64, n_layers=3, n_heads=8, n_kv_heads=2,
         d_ff=160),
    dict(vocab_size=77, context_length=32, d_model=48, n_layers=2, n_heads=6, n_kv_heads=1,
         d_ff=128, rope_theta=500000.0, rms_norm_eps=1e-6),
    dict(vocab_size=64, context_length=40, d_model=32, n_layers=2, n_heads=2, n_kv_heads=2,
         d_ff=96, tie_weights=True),
]
for i, shape in enumerate(parity_shapes):
    config = LlamaConfig(**shape)
    torch.manual_seed(i)
    hf = LlamaForCausalLM(Llama(config).to_hf_config()).eval()
    hf.generation_config.eos_token_id = None  # no end-of-text token: n_new tokens each
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0.0, 0.1)
    ours = Llama.from_hf(hf)
    idx = torch.randint(config.vocab_size, (3, config.context_length),
                        generator=torch.Generator().manual_seed(i))
    with torch.no_grad():
        diff = (ours(idx)[0] - hf(idx).logits).abs().max().item()
    prompt, n_new = idx[:, :8], config.context_length - 8
    hf_tokens = hf.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                            max_new_tokens=n_new, pad_token_id=0)
    cached = generate(ours, prompt, n_new, greedy=True)
    uncached = generate(ours, prompt, n_new, greedy=True, use_cache=False)
    assert diff <= 1e-5
    print(f"H = {config.n_heads}, H_kv = {config.n_kv_heads}, tied = {config.tie_weights}: "
          f"max |logit difference| {diff:.1e}; greedy tokens = HF's: "
          f"{torch.equal(cached, hf_tokens)}; "
          f"cache = no cache: {torch.equal(cached, uncached)}")

# %% [markdown]
# The logits are equal, to float32 rounding or exactly: the two implementations perform the same operations
# in the same order. With the KV cache the book's `generate` needed no change: `Llama.forward` reads the
# number of cached positions from the cache, as `GPT.forward` does, and uses it to rotate the new queries
# and keys by their true positions instead of adding a row of the position table.
#
# ## 10.6 Does it matter at our scale?
#
# Modern LLMs adopted these changes at billions of parameters. Our models have thousands. So the honest
# question: train a GPT-2-style model and a Llama-style model of (almost) the same parameter count on Tiny
# Shakespeare's characters, with the same data, steps, optimizer and learning-rate schedule, over several
# seeds, and compare the validation losses and the time per step. The Llama-style model has 2 key/value heads
# for 4 query heads, and the hidden width of its SwiGLU is chosen (a multiple of 8) to match the GPT's
# parameter count as closely as possible. Both models are initialized the same way.

# %% tags=["nbval-check-output"]
train_ids, val_ids, tokenizer = char_level_data()
V = tokenizer.vocab_size
D_CMP, L_CMP, H_CMP = (192, 4, 6) if FULL_RUN else (64, 2, 4)
CONTEXT = 64
STEPS = 5000 if FULL_RUN else 500
SEEDS = range(5) if FULL_RUN else range(3)
gpt_cmp = GPTConfig(vocab_size=V, context_length=CONTEXT, d_model=D_CMP, n_layers=L_CMP,
                    n_heads=H_CMP, dropout=0.0)
target = GPT(gpt_cmp).num_parameters()


def llama_cmp(d_ff):
    return LlamaConfig(vocab_size=V, context_length=CONTEXT, d_model=D_CMP, n_layers=L_CMP,
                       n_heads=H_CMP, n_kv_heads=H_CMP // 2, d_ff=d_ff)


def count(config):  # parameters of a Llama, without building it
    D, L, kv = config.d_model, config.n_layers, config.n_kv_heads * config.d_head
    per_block = 2 * D + 2 * D * D + 2 * D * kv + 3 * D * config.d_ff  # norms, attn, MLP
    return 2 * config.vocab_size * D + D + L * per_block  # + wte, lm_head, ln_f


d_ff = min(range(8, 8 * D_CMP, 8), key=lambda h: abs(count(llama_cmp(h)) - target))
llama_cfg = llama_cmp(d_ff)
print(f"GPT-2-style: {target:,} parameters; Llama-style (d_ff = {llama_cfg.d_ff}): "
      f"{Llama(llama_cfg).num_parameters():,}")
cmp_train = TrainConfig(max_iters=STEPS, batch_size=16, learning_rate=3e-3, min_lr=3e-4,
                        warmup_iters=STEPS // 10, eval_interval=STEPS, eval_iters=20,
                        device=DEVICE, progress=False)

# %%
results = {"GPT-2-style": [], "Llama-style": []}
seconds = {"GPT-2-style": 0.0, "Llama-style": 0.0}
trained = {}
for seed in SEEDS:
    for name, build in (("GPT-2-style", lambda: GPT(gpt_cmp)),
                        ("Llama-style", lambda: Llama(llama_cfg))):
        torch.manual_seed(seed)  # the initial weights
        model = build()
        start = time.perf_counter()
        run = dataclasses.replace(cmp_train, seed=seed)
        history = train(model, train_ids, val_ids, run)
        seconds[name] += time.perf_counter() - start
        results[name].append(history.val_loss[-1])
        trained[name] = model  # the last seed's model, for the next cells

# %% tags=["nbval-check-output"]
for name, losses in results.items():
    # two decimals: the third can move with the number of threads (float summation order)
    print(f"{name}: validation loss per seed {[round(v, 2) for v in losses]}, mean "
          f"{statistics.fmean(losses):.2f} ± {statistics.stdev(losses):.2f}")

# %% tags=["remove-input"]
steps_run = STEPS * len(SEEDS)
display(Markdown(comparison_text(results["GPT-2-style"], results["Llama-style"],
                                 seconds["GPT-2-style"] / steps_run,
                                 seconds["Llama-style"] / steps_run, STEPS)))

# %% [markdown]
# What this can and cannot say. The step times include the loss estimates and share the machine with
# whatever else runs on it; the ratio, taken in one process, is the number to read. Both models use one
# learning rate, tuned for neither, and the runs are short: this compares how fast two small models learn
# in their first minute, not where they would end after a long training. Nor does it say which of the
# four changes does the work: a learned position table, for instance, starts as noise and must be learned from the data,
# while RoPE gives every layer relative positions from the first step. Swapping one piece at a time
# (`GPTConfig` and `LlamaConfig` make each easy to change) would tell them apart.
#
# **Past the training context.** Both models were trained on windows of 64 characters. The GPT cannot even
# be asked about position 64: its position table has 64 rows. The Llama-style model has no table, so the
# same weights load into a model with a longer context. Its loss, position by position, on 256-character
# windows of the validation text:

# %% tags=["nbval-check-output"]
try:
    trained["GPT-2-style"](torch.zeros(1, 4 * CONTEXT, dtype=torch.long))
except ValueError as error:
    print("GPT-2-style:", error)

long_model = Llama(dataclasses.replace(llama_cfg, context_length=4 * CONTEXT)).to(DEVICE)
long_model.load_state_dict(trained["Llama-style"].state_dict())  # the same weights
windows = torch.stack([torch.from_numpy(val_ids[i : i + 4 * CONTEXT + 1].astype("int64"))
                       for i in range(0, 64 * 1000, 1000)]).to(DEVICE)  # (64, 257)
with torch.no_grad():
    logits, _ = long_model.eval()(windows[:, :-1])  # (64, 256, V)
    per_position = F.cross_entropy(logits.transpose(1, 2), windows[:, 1:], reduction="none")
per_position = per_position.mean(0).cpu()  # (256,): mean loss at each position
for lo, hi in ((0, CONTEXT), (CONTEXT, 2 * CONTEXT), (2 * CONTEXT, 4 * CONTEXT)):
    print(f"positions {lo:>3}-{hi - 1:<3}: mean loss {per_position[lo:hi].mean():.2f}")

# %% mystnb={"figure": {"caption": "Validation loss of the Llama-style model at each position of 256-character windows (mean over 64 windows), trained on windows of 64 (dashed line). Past the training context the loss rises: the model meets offsets between query and key that it never saw in training.", "name": "fig-rope-extrapolation"}, "image": {"alt": "Line plot of loss against position 0 to 255. The loss falls over the first few positions, stays low up to the dashed line at 64, then rises and stays higher for the rest of the window."}}
fig, ax = plt.subplots(figsize=(5.2, 3.8))
ax.plot(per_position, lw=1)
ax.axvline(CONTEXT, color="gray", linestyle="--", label="training context")
ax.set_xlabel("position in the window")
ax.set_ylabel("validation loss (nats)")
ax.set_title("Llama-style model trained on 64 characters, run on 256")
ax.legend()
plt.show()

# %% [markdown]
# No table does not mean no limit. Within the training context, each position's loss is as low as the
# context allows; past it, the queries meet keys at offsets never seen in training, and the loss climbs.
# That is why long-context models extend RoPE deliberately, by rescaling its frequencies (position
# interpolation, NTK scaling, YaRN, Llama 3's `rope_type="llama3"`) and training a little at the new
# length, rather than just running past the end.
#
# And the text itself? Samples from the last seed's two models, same prompt, same random draws
# (temperature 0.8):

# %% tags=["nbval-check-output"]
prompt = torch.tensor([tokenizer.encode("ROMEO:\nWhat ")], device=DEVICE)
for name, model in trained.items():
    draws = torch.Generator(device=DEVICE).manual_seed(0)
    tokens = generate(model, prompt, 160, temperature=0.8, generator=draws)
    print(f"--- {name} ---\n{tokenizer.decode(tokens[0].tolist())}\n")

# %% [markdown]
# ## Summary
#
# - **RMSNorm** divides each token by its root mean square and scales it: LayerNorm without the mean and
#   without $\beta$. The package's `RMSNorm` equals `nn.RMSNorm`; it saves a reduction, a small part of a
#   Transformer's time.
# - **SwiGLU** multiplies a SiLU-gated projection by a second projection, with three matrices; a hidden width
#   of $\tfrac{2}{3} \cdot 4D$ keeps GPT-2's parameter count ($8D^2$; exactly equal at $D = 768$). It equals
#   transformers' `LlamaMLP`.
# - **RoPE** rotates queries and keys by position-dependent angles, so a score depends on the positions only
#   through their offset; no position table. It equals transformers' rotary implementation (half-split
#   layout); past the training context the loss rises all the same.
# - **Grouped-query attention** shares each key/value head among $H / H_{kv}$ query heads (`repeat_kv`); the
#   KV cache shrinks by that factor (GPT-2 small's shape: 36 KiB per token in float16, 12 KiB with 4
#   key/value heads, 3 KiB with 1). With $H_{kv} = H$ it is Chapter 4's multi-head attention.
# - Assembled, `Llama` gives the logits of transformers' `LlamaForCausalLM` for the same weights and its
#   greedy tokens, with and without the book's KV cache.
# - At our scale, section 10.6 compares the two designs at equal parameter count over several seeds, with
#   the verdict written from the measured losses; past its training context the Llama-style model runs,
#   having no position table, but its loss rises.
#
# ## Exercises
#
# ### Exercise 1. RMSNorm as a module (implement)
#
# Write `RMSNormModule(D, eps=1e-5)`, like `nn.RMSNorm`: one parameter `weight` ($\gamma$, starting at ones)
# of shape $(D,)$, and a `forward(x)` that divides each token (last dimension) by
# $\sqrt{\operatorname{mean}(x^2) + \epsilon}$ and multiplies by `weight`. Write the formula yourself:
# calling `F.rms_norm` or `nn.RMSNorm` fails the check.

# %% tags=["solution", "hide-input"] mystnb={"code_prompt_show": "Show the solution", "code_prompt_hide": "Hide the solution"}
class RMSNormModule(nn.Module):
    def __init__(self, D, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(D))  # γ

    def forward(self, x):  # (..., D)
        ms = x.pow(2).mean(dim=-1, keepdim=True)  # (..., 1)
        return x * torch.rsqrt(ms + self.eps) * self.weight  # (..., D)


# %%
from gpt_from_scratch.exercises import check_rms_norm

check_rms_norm(RMSNormModule);

# %% [markdown]
# ### Exercise 2. RoPE, interleaved (implement)
#
# Write `rope_interleaved(x, positions, theta)`, the layout of the RoPE paper and Meta's Llama code: for
# `x` of shape $(\ldots, T, d)$ and `positions` of shape $(T,)$, pair $i$ is the neighbours
# `(x[..., 2i], x[..., 2i + 1])`, and at position `positions[t]` it turns by the angle
# `positions[t] * theta ** (-2i / d)`:
# $(a, b) \mapsto (a\cos\phi - b\sin\phi,\; a\sin\phi + b\cos\phi)$. Return a tensor of `x`'s shape with
# the rotated pairs in the same places.

# %% tags=["solution", "hide-input"] mystnb={"code_prompt_show": "Show the solution", "code_prompt_hide": "Hide the solution"}
def rope_interleaved(x, positions, theta=10000.0):
    d = x.size(-1)
    freqs = theta ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)  # (d/2,)
    angles = positions.float()[:, None] * freqs  # (T, d/2)
    cos, sin = angles.cos(), angles.sin()
    a, b = x[..., 0::2], x[..., 1::2]  # (..., T, d/2) each: the pairs
    rotated = torch.stack([a * cos - b * sin, a * sin + b * cos], -1)  # (..., T, d/2, 2)
    return rotated.flatten(-2)  # (..., T, d): pair i back at features 2i, 2i + 1


# %%
from gpt_from_scratch.exercises import check_rope_interleaved

check_rope_interleaved(rope_interleaved);

# %% [markdown]
# ### Exercise 3. repeat_kv without repeat_interleave (implement)
#
# Write `repeat_kv_heads(x, n_rep)`: for keys or values `x` of shape $(B, H_{kv}, T, d)$, return
# $(B, H_{kv} \cdot n_{rep}, T, d)$ where key/value head $g$ appears $n_{rep}$ times in a row (heads
# $g \cdot n_{rep}$ to $g \cdot n_{rep} + n_{rep} - 1$), as `repeat_kv` does. Without
# `repeat_interleave`: use indexing, or `expand` and `reshape`.

# %% tags=["solution", "hide-input"] mystnb={"code_prompt_show": "Show the solution", "code_prompt_hide": "Hide the solution"}
def repeat_kv_heads(x, n_rep):
    B, H_kv, T, d = x.shape
    # (B, H_kv, 1, T, d) -> (B, H_kv, n_rep, T, d): a view, no copy yet
    expanded = x[:, :, None].expand(B, H_kv, n_rep, T, d)
    return expanded.reshape(B, H_kv * n_rep, T, d)  # head g * n_rep + j is head g


# %%
from gpt_from_scratch.exercises import check_repeat_kv

check_repeat_kv(repeat_kv_heads);

# %% [markdown]
# ### Exercise 4. The KV cache of a 70B model (predict, then run)
#
# Llama 2 70B and Llama 3 70B both have 80 layers and 64 query heads of 128 features, and 8 key/value
# heads. How many bytes per token does their KV cache take in bfloat16? How much for one sequence of 4,096
# tokens, and how much would it be with 64 key/value heads (no grouping)? Predict, then run the cell after
# the answer.

# %% [markdown] tags=["answer"]
# ```{admonition} Answer
# :class: dropdown
# $2 \cdot 80 \cdot 8 \cdot 128 \cdot 2 = 327{,}680$ bytes, 320 KiB per token; 1.25 GiB for 4,096 tokens.
# Without grouping it would be 8 times more, 10 GiB per sequence: grouping is what lets such a model
# serve many long sequences at once.
# ```

# %%
per_token = kv_cache_bytes_per_token(80, 8, 128, bytes_per_number=2)
print(f"{per_token:,} bytes per token; "
      f"{per_token * 4096 / 2**30:.2f} GiB per 4,096 tokens; "
      f"{kv_cache_bytes_per_token(80, 64, 128, 2) * 4096 / 2**30:.0f} GiB without grouping")

# %% [markdown]
# ### Exercise 5. Rotating the keys once (explain)
#
# The KV cache stores keys already rotated by their own position, and a new query is rotated by its own.
# Explain why this gives the same scores as rotating every key again at each step, and why GPT-2's cache
# has no such question. What would go wrong if the cache stored the keys *before* rotation and the code
# rotated them by the new token's position?

# %% [markdown] tags=["answer"]
# ```{admonition} Answer
# :class: dropdown
# A key's rotation depends only on its own position $n$, which never changes once the token is in the
# sequence, so rotating it once when it enters the cache gives the same vector as rotating it at every step;
# the score with a query at $m$ then depends on $m - n$ as it should. GPT-2 adds the position vector to the
# token's embedding before the first layer, so its keys carry their positions from the start. Rotating
# unrotated keys by the *query's* position $m$ would give every key the same angle: all offsets would look
# like 0, and the model would lose track of order. The cell checks the first claim on a model: a step with
# the cache gives the logits of the full sequence without it.
# ```

# %%
model = trained["Llama-style"].eval()
sequence = prompt[:, :8]
cache = model.new_kv_cache()
with torch.no_grad():
    model(sequence[:, :-1], kv_cache=cache)  # keys of positions 0..6, rotated, cached
    step_logits, _ = model(sequence[:, -1:], kv_cache=cache)  # position 7 only
    full_logits, _ = model(sequence)
print(f"cached step vs full sequence, last position: max |difference| "
      f"{(step_logits[0, -1] - full_logits[0, -1]).abs().max():.1e}")

# %% [markdown] tags=["quiz"]
# ## Check yourself
#
# A few questions on this chapter, each answer with its explanation. The numbers in them
# are the ones this chapter printed.

# %% tags=["quiz", "remove-input"]
from gpt_from_scratch.book.quiz import Choice, MultipleChoice, Numeric, show_quiz

show_quiz([
    MultipleChoice("RMSNorm differs from LayerNorm in that it:", [
        Choice("does not subtract the mean (and has no bias)", True,
               "Yes: on centred rows the two agree."),
        Choice("normalizes over the batch", False,
               "No: it works on each row, as LayerNorm does."),
    ]),
    MultipleChoice("Grouped-query attention (GQA) saves memory because:", [
        Choice("several query heads share one key and value head, so the KV cache "
               "shrinks by H / H_kv", True, "Yes: the queries keep all their heads."),
        Choice("it drops the values and keeps only the keys", False,
               "No: both are kept, for fewer heads."),
    ]),
    Numeric("In float16, how many KiB per token does the KV cache of the GPT-2 small shape "
            "take with H_kv = 4?", kv_cache_bytes_per_token(12, 4, 64, bytes_per_number=2)
            / 1024, 0.5, "2 (k and v) × 12 layers × 4 heads × 64 × 2 bytes."),
])
