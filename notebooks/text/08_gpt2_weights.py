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
# TODO intro

# %% tags=["colab-setup"]
# Set-up: on Colab, or wherever the package is missing, install it (your own torch is kept).
try:
    import gpt_from_scratch
except ImportError:
    %pip install --quiet "gpt-from-scratch-book @ git+https://github.com/gpt-from-scratch/gpt-from-scratch"

# %%
import math
import os
import re
import socket
import sys
from unittest import mock

import matplotlib.pyplot as plt
import numpy as np
import torch
from torch.testing import assert_close

from gpt_from_scratch.data import prepare_tokens, read_tokens
from gpt_from_scratch.generate import generate
from gpt_from_scratch.model import GPT, GPTConfig, WeightsUnavailableError
from gpt_from_scratch.plotting import attention_grid, attention_lines, compare_attention, token_labels
from gpt_from_scratch.tokenizer import gpt2_encoding
from gpt_from_scratch.train import book_model
from gpt_from_scratch.utils import seed_everything

generator = seed_everything(1337)
torch.set_printoptions(precision=3, sci_mode=False)
enc = gpt2_encoding()

# %% [markdown]
# ## 8.1 What we are about to load: GPT-2's parameters, counted by hand

# %%
# NBVAL_CHECK_OUTPUT
def count_gpt_parameters(V: int, T_max: int, D: int, L: int, d_ff: int | None = None, tied: bool = True) -> dict:
    """GPT-2's parameters by part, from the shapes of its matrices and vectors (weights and biases)."""
    d_ff = 4 * D if d_ff is None else d_ff
    parts = {
        "token embeddings wte (V x D)": V * D,
        "position embeddings wpe (T_max x D)": T_max * D,
    }
    attention = (D * 3 * D + 3 * D) + (D * D + D)  # c_attn: D -> 3D (q, k, v); c_proj: D -> D
    mlp = (D * d_ff + d_ff) + (d_ff * D + D)  # c_fc: D -> d_ff; c_proj: d_ff -> D
    layer_norms = 2 * 2 * D  # ln_1 and ln_2, each a gain and a shift of D numbers
    parts[f"{L} blocks x (attention {attention:,} + MLP {mlp:,} + LayerNorms {layer_norms:,})"] = L * (
        attention + mlp + layer_norms
    )
    parts["final LayerNorm ln_f (2 x D)"] = 2 * D
    parts["lm_head (D x V)"] = 0 if tied else V * D  # tied: it *is* wte, counted once
    return parts


c = GPTConfig.from_preset("gpt2")
parts = count_gpt_parameters(c.vocab_size, c.context_length, c.d_model, c.n_layers)
for name, n in parts.items():
    print(f"{name:<66} {n:>13,}")
total = sum(parts.values())
untied = sum(count_gpt_parameters(c.vocab_size, c.context_length, c.d_model, c.n_layers, tied=False).values())
print(f"{'total, head tied to wte (GPT-2)':<66} {total:>13,}")
print(f"{'total with an untied head':<66} {untied:>13,}")
print(f"in float32: {total * 4 / 1e6:.1f} MB")

# %%
# NBVAL_CHECK_OUTPUT
# The check: build each model on the "meta" device (shapes only, no memory) and count what PyTorch holds.
for preset in ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl"):
    for tied in (True, False):
        config = GPTConfig.from_preset(preset, tie_weights=tied)
        with torch.device("meta"):
            shapes_only = GPT(config)
        by_formula = sum(count_gpt_parameters(config.vocab_size, config.context_length, config.d_model,
                                              config.n_layers, config.d_ff, tied=tied).values())
        assert shapes_only.num_parameters() == by_formula, (preset, tied)
        print(f"{preset:<12} {'tied' if tied else 'untied':<7} {by_formula:>14,}")

# %% [markdown]
# ## 8.2 From OpenAI's checkpoint to our `GPT`

# %%
from transformers import GPT2Config, GPT2LMHeadModel

torch.manual_seed(0)
hf_small = GPT2LMHeadModel(GPT2Config(
    vocab_size=enc.n_vocab, n_positions=64, n_embd=64, n_layer=2, n_head=4, attn_implementation="eager",
)).eval()
ours_small = GPT(GPTConfig(vocab_size=enc.n_vocab, context_length=64, d_model=64, n_layers=2, n_heads=4))
hf_state, our_state = hf_small.state_dict(), ours_small.state_dict()
for hf_name in [k for k in hf_state if ".h.0." in k]:
    print(f"{hf_name:<38} {str(tuple(hf_state[hf_name].shape)):<11}")
print([k for k in our_state if k.startswith("blocks.0.")])

# %%
CONV1D = re.compile(r"blocks\.\d+\.(attn\.c_attn|attn\.c_proj|mlp\.c_fc|mlp\.c_proj)\.weight")


def convert_hf_state_dict(hf_state: dict) -> dict:
    """Hugging Face GPT-2 names and layouts -> ours: drop "transformer.", h.N -> blocks.N, transpose Conv1D."""
    converted = {}
    for key, tensor in hf_state.items():
        name = re.sub(r"^h\.", "blocks.", key.removeprefix("transformer."))
        converted[name] = tensor.t() if CONV1D.fullmatch(name) else tensor  # Conv1D (in, out) -> Linear (out, in)
    return converted


ours_small.load_state_dict(convert_hf_state_dict(hf_state))  # strict: every name must match
ours_small.eval()

# %%
# NBVAL_CHECK_OUTPUT
idx = torch.tensor([enc.encode("To be, or not to be, that is the question:")])  # (1, T)
with torch.no_grad():
    hf_out = hf_small(idx, output_attentions=True)
logits, _ = ours_small(idx)
assert_close(logits, hf_out.logits, rtol=1e-4, atol=1e-4)
for ours, theirs in zip(ours_small.attention_maps(idx), hf_out.attentions):
    assert_close(ours, theirs)
assert_close(GPT.from_hf(hf_small).state_dict(), ours_small.state_dict())
print("same logits and attention maps as transformers' GPT2LMHeadModel:", tuple(logits.shape))
print("the package's GPT.from_hf does the same conversion: identical state dicts")

# %% [markdown]
# ## 8.3 Loading GPT-2, or what to do without a network

# %%
def hub_reachable(host: str = "huggingface.co", port: int = 443, timeout: float = 3.0) -> bool:
    """Can this machine open a connection to the Hugging Face hub? (Answers in at most ``timeout`` seconds.)"""
    try:
        socket.create_connection((host, port), timeout=timeout).close()
        return True
    except OSError:
        return False


# Without a network, offline mode makes from_pretrained look in the local cache only, instead of
# retrying the download for a minute and a half.
offline = {} if hub_reachable() else {"HF_HUB_OFFLINE": "1"}
try:
    with mock.patch.dict(os.environ, offline):
        gpt2 = GPT.from_pretrained("gpt2")
    REAL_GPT2 = True
except WeightsUnavailableError as err:
    gpt2, REAL_GPT2 = None, False
    print(f"The real GPT-2 weights are unavailable on this machine.\n  ({err})\n"
          "Every analysis below runs on the model you trained in Chapter 6 instead.")

mine, _ = book_model("shakespeare-bpe", progress=False)  # Chapter 6's BPE-level model (trains once, then cached)
model = gpt2 if REAL_GPT2 else mine
MODEL_NAME = "GPT-2 small" if REAL_GPT2 else "the Chapter 6 model"
cfg = model.config
print(f"REAL_GPT2 = {REAL_GPT2}: analysing {MODEL_NAME}, {cfg.n_layers} layers x {cfg.n_heads} heads, "
      f"D = {cfg.d_model}, context {cfg.context_length}, {model.num_parameters():,} parameters")

# %% [markdown]
# ## 8.4 Validation loss and a few generations

# %%
val = read_tokens(prepare_tokens(enc)["val"])
T_EVAL, N_WINDOWS = 64, 64  # the same 64 windows of 64 tokens for every model
starts = np.linspace(0, len(val) - T_EVAL - 1, N_WINDOWS).astype(int)
windows = torch.from_numpy(np.stack([val[s: s + T_EVAL + 1] for s in starts]).astype(np.int64))  # (64, 65)
x_val, y_val = windows[:, :-1], windows[:, 1:]  # (B, T) each


@torch.no_grad()
def validation_loss(model: GPT) -> float:
    """Mean cross-entropy (nats per token) over the fixed validation windows, in batches of 16."""
    losses = [model(x, y)[1] for x, y in zip(x_val.split(16), y_val.split(16))]
    return torch.stack(losses).mean().item()


models = {"Chapter 6 model": mine} | ({"GPT-2 small": gpt2} if REAL_GPT2 else {})

# %%
# NBVAL_CHECK_OUTPUT
print(f"{N_WINDOWS} windows x {T_EVAL} tokens = {x_val.numel():,} validation tokens scored")
print(f"uniform guess over {enc.n_vocab:,} tokens: ln V = {math.log(enc.n_vocab):.2f} nats")
for name, m in models.items():
    loss = validation_loss(m)
    print(f"{name:<16} validation loss {loss:.2f} nats/token (perplexity {math.exp(loss):.0f})")

# %%
prompts = ["ROMEO:\nI", "The girl and the boy walked home."]
for name, m in models.items():
    for prompt in prompts:
        idx = torch.tensor([enc.encode(prompt)])
        out = generate(m, idx, max_new_tokens=30, top_k=50, generator=torch.Generator().manual_seed(1337))
        print(f"--- {name}, prompt {prompt!r}\n{enc.decode(out[0].tolist())}\n")

# %% [markdown]
# ## 8.5 Attention maps, read out of the weights

# %%
def encode(text: str) -> torch.Tensor:
    return torch.tensor([enc.encode(text)])  # (1, T)


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
    future = torch.ones(T, T, dtype=torch.bool).triu(diagonal=1)  # (T, T): True above the diagonal
    A0 = scores.masked_fill(future, float("-inf")).softmax(dim=-1)  # (B, H, T, T)
assert_close(A0, maps[0])

# %%
# NBVAL_CHECK_OUTPUT
print(f"{len(maps)} maps of shape {tuple(maps[0].shape)} (B, H, T, T); layer 0 by hand matches")
print("every row sums to 1:", all(torch.allclose(A.sum(-1), torch.ones(B, H, T)) for A in maps))
print("largest weight on a future token:", max(A[..., future].max().item() for A in maps))

# %% mystnb={"figure": {"caption": "TODO", "name": "fig-attention-grid"}, "image": {"alt": "TODO"}}
fig = attention_grid(maps, tokens, title=f"{MODEL_NAME}: every head on {enc.decode(idx[0].tolist())!r}")
plt.show()

# %% [markdown]
# ## 8.6 She and He

# %%
she, he = encode("The girl and the boy walked home. She"), encode("The girl and the boy walked home. He")
maps_she, maps_he = model.attention_maps(she), model.attention_maps(he)
last_she = torch.stack([A[0, :, -1] for A in maps_she])  # (L, H, T): where the pronoun looks, per head
last_he = torch.stack([A[0, :, -1] for A in maps_he])  # (L, H, T)
change = 0.5 * (last_she - last_he).abs().sum(-1)  # (L, H): total variation distance, 0 .. 1
if REAL_GPT2:
    layer, head = 5, 10
    why = "the head popularised by bertviz demos"
else:
    layer, head = divmod(int(change.argmax()), cfg.n_heads)
    why = "the head whose last row changes most between She and He"
rank = int((change > change[layer, head]).sum()) + 1

# %%
print(f"layer {layer}, head {head}: {why}")
print(f"total variation between the two last rows: {change[layer, head]:.3f} (rank {rank} of {change.numel()} heads)")
labels = token_labels(she[0], enc)[:-1] + ["She/He"]
print(f"{'':>8}" + "".join(f"{t:>8}" for t in labels))
print(f"{'She ->':>8}" + "".join(f"{w:>8.3f}" for w in last_she[layer, head].tolist()))
print(f"{'He ->':>8}" + "".join(f"{w:>8.3f}" for w in last_he[layer, head].tolist()))

# %% mystnb={"figure": {"caption": "TODO", "name": "fig-she-he"}, "image": {"alt": "TODO"}}
fig = compare_attention(
    [maps_she[layer][0, head], maps_he[layer][0, head]],
    [f"... She (layer {layer}, head {head})", f"... He (layer {layer}, head {head})"],
    [token_labels(she[0], enc), token_labels(he[0], enc)],
)
plt.show()

# %% [markdown]
# ## 8.7 The doctor and the nurse: attention and learned bias

# %%
print("attention of the pronoun (layer {}, head {}):".format(layer, head))
for pronoun in ("She", "He"):
    ids = encode(f"The doctor asked the nurse a question. {pronoun}")
    row = model.attention_maps(ids)[layer][0, head, -1]  # (T,)
    labels = token_labels(ids[0], enc)
    print(f"  {pronoun:>3} -> doctor {row[labels.index('␣doctor')]:.3f}   nurse {row[labels.index('␣nurse')]:.3f}")


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
print(f"{MODEL_NAME}:")
print(f"{'prompt':<48} {'P( he)':>8} {'P( she)':>8} {'he/she':>7}")
for prompt in prompts:
    p_he, p_she = next_token_probs(model, prompt, [" he", " she"])
    print(f"{prompt:<48} {p_he:>8.4f} {p_she:>8.4f} {p_he / p_she:>7.1f}")

train_ids = read_tokens(prepare_tokens(enc)["train"])
n_he, n_she = (int((train_ids == enc.encode(w)[0]).sum()) for w in (" he", " she"))
print(f"\nTiny Shakespeare's training split: ' he' {n_he:,} times, ' she' {n_she:,} times "
      f"(ratio {n_he / n_she:.1f})")

# %% [markdown]
# ## 8.8 Attention sinks: the first token

# %%
x_batch = x_val[:16]  # (16, 64): windows that start mid-text, so position 0 is an ordinary token
batch_maps = torch.stack(model.attention_maps(x_batch))  # (L, B, H, T, T)
T = x_batch.shape[1]
first_share = batch_maps[..., 1:, 0].mean(dim=(1, 3))  # (L, H): mean weight on position 0, queries 1 .. T-1
uniform_share = (1.0 / torch.arange(2, T + 1)).mean().item()  # what a head spreading evenly would give


def plot_head_scores(scores: torch.Tensor, title: str, label: str):
    """A layers x heads heatmap of one number per head, each cell annotated."""
    L, H = scores.shape
    fig, ax = plt.subplots(figsize=(min(0.55 * H + 2.5, 9), 0.45 * L + 1.5))
    image = ax.imshow(scores, cmap="magma", vmin=0.0, vmax=1.0)
    for (l, h), value in np.ndenumerate(scores.numpy()):
        ax.text(h, l, f"{value:.2f}", ha="center", va="center", fontsize=7,
                color="black" if value > 0.6 else "white")
    ax.set_xticks(range(H))
    ax.set_yticks(range(L))
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_title(title, fontsize=10)
    fig.colorbar(image, ax=ax, label=label)
    return fig


# %%
print(f"uniform attention would put {uniform_share:.3f} on position 0 (mean of 1/(t+1), t = 1 .. {T - 1})")
for l in range(cfg.n_layers):
    print(f"layer {l:>2}: mean share on position 0 = {first_share[l].mean():.3f}, "
          f"largest head {first_share[l].max():.3f} (head {first_share[l].argmax()})")

# %% mystnb={"figure": {"caption": "TODO", "name": "fig-sinks"}, "image": {"alt": "TODO"}}
fig = plot_head_scores(first_share, f"{MODEL_NAME}: share of attention on the first token", "mean weight on position 0")
plt.show()

# %% [markdown]
# ## 8.9 Previous-token heads

# %%
prev_score = batch_maps.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=(1, 3))  # (L, H): mean A[t, t-1]
top = prev_score.flatten().topk(3).indices
top_heads = [divmod(int(i), cfg.n_heads) for i in top]
print(f"uniform attention would put {uniform_share:.3f} on position t-1 as well")
for l, h in top_heads:
    print(f"layer {l}, head {h}: mean weight on the previous token {prev_score[l, h]:.3f}")

# %% mystnb={"figure": {"caption": "TODO", "name": "fig-prev-token"}, "image": {"alt": "TODO"}}
fig = plot_head_scores(prev_score, f"{MODEL_NAME}: mean weight on the previous token", "mean A[t, t-1]")
plt.show()

# %% mystnb={"figure": {"caption": "TODO", "name": "fig-prev-token-maps"}, "image": {"alt": "TODO"}}
idx = encode("First Citizen:\nBefore we proceed any further, hear me speak.")
top_maps = model.attention_maps(idx)
fig = compare_attention([top_maps[l][0, h] for l, h in top_heads], [f"layer {l}, head {h}" for l, h in top_heads],
                        token_labels(idx[0], enc), vmax=1.0, annotate=False)
plt.show()

# %% [markdown]
# ## 8.10 Interactive views with bertviz

# %%
from bertviz import head_view, model_view

SHOW_BERTVIZ = "google.colab" in sys.modules  # set True in Jupyter to see the interactive views

ids = encode("The doctor asked the nurse a question. She")
labels = token_labels(ids[0], enc)
attention = tuple(model.attention_maps(ids))  # bertviz's format: one (1, H, T, T) tensor per layer
head_html = head_view(attention, labels, layer=layer, heads=[head], html_action="return")
model_html = model_view(attention, labels, html_action="return")
print(f"head_view: {len(head_html.data):,} characters of HTML and JavaScript; model_view: {len(model_html.data):,}")
if SHOW_BERTVIZ:
    display(head_html)
    display(model_html)

# %% mystnb={"figure": {"caption": "TODO", "name": "fig-head-view"}, "image": {"alt": "TODO"}}
fig = attention_lines(attention[layer][0], labels, title=f"{MODEL_NAME}, layer {layer}")
plt.show()

# %% [markdown]
# ## Summary
#
# TODO
#
# ## Exercises
#
# **1. Implement: a previous-token score.** Write `previous_token_scores(maps)`: given the output of
# `model.attention_maps(x)` (a list of $L$ tensors of shape $(B, H, T, T)$), return an $(L, H)$ tensor whose
# entry `[l, h]` is the mean of $A[t, t-1]$ over the batch and over the queries $t = 1, \dots, T-1$.

# %% tags=["solution"]
def previous_token_scores_solution(maps: list[torch.Tensor]) -> torch.Tensor:
    A = torch.stack(maps)  # (L, B, H, T, T)
    return A.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=(1, 3))  # A[..., t, t-1] for t = 1 .. T-1


# %%
def check_previous_token_scores(candidate) -> bool:
    """Two maps with a known answer, then the model's maps against section 8.9's scores."""
    T = 6
    previous = torch.zeros(T, T)  # all weight on t-1 (row 0, with no past, on itself)
    previous[0, 0] = 1.0
    previous[torch.arange(1, T), torch.arange(T - 1)] = 1.0
    uniform = torch.ones(T, T).tril() / torch.arange(1, T + 1)[:, None]  # row t: 1/(t+1) on each key
    maps = [previous.expand(2, 3, T, T), uniform.expand(2, 3, T, T)]  # L = 2, B = 2, H = 3
    expected = torch.stack([torch.ones(3), torch.full((3,), (1 / torch.arange(2, T + 1)).mean().item())])
    assert_close(candidate(maps), expected)
    assert_close(candidate(list(batch_maps)), prev_score)
    print("✅ previous_token_scores is right")
    return True


check_previous_token_scores(previous_token_scores_solution)

# %% [markdown]
# **2. Predict, then run: is the sink a token or a position?** Drop the first token of every window
# (`x_batch[:, 1:]`) so that the token that used to be second now comes first. Before running the cell:
# will the large share of attention stay with the token that used to be first (now gone), or move to
# whatever token sits at position 0?

# %% tags=["solution"]
shifted_maps = torch.stack(model.attention_maps(x_batch[:, 1:]))  # (L, B, H, T-1, T-1)
shifted_share = shifted_maps[..., 1:, 0].mean(dim=(1, 3))  # (L, H)
for l in range(cfg.n_layers):
    print(f"layer {l}: share on position 0 {first_share[l].mean():.3f} -> {shifted_share[l].mean():.3f} "
          f"after the shift")

# %% [markdown]
# **3. Implement: induction heads.** {cite}`olsson2022induction` found heads that complete repeated patterns:
# after "... A B ... A", they attend from the second "A" to the "B" that followed the first one, and copy it.
# Feed a batch of random token sequences of length $n$, each repeated twice (length $2n$). A head's
# *induction score* is its mean weight from each position $t$ of the second copy ($t \geq n$) to key
# $t - n + 1$. Write `induction_scores(model, n, B, generator)` returning an $(L, H)$ tensor, and find the
# model's best induction heads. Do they sit in a later layer than the best previous-token heads?

# %% tags=["solution"]
def induction_scores_solution(model: GPT, n: int = 24, B: int = 8, generator=None) -> torch.Tensor:
    half = torch.randint(0, model.config.vocab_size, (B, n), generator=generator)  # (B, n)
    idx = torch.cat([half, half], dim=1)  # (B, 2n)
    A = torch.stack(model.attention_maps(idx))  # (L, B, H, 2n, 2n)
    return A.diagonal(offset=-(n - 1), dim1=-2, dim2=-1)[..., 1:].mean(dim=(1, 3))  # A[t, t-n+1], t = n .. 2n-1


induction = induction_scores_solution(model, generator=torch.Generator().manual_seed(0))
for i in induction.flatten().topk(3).indices:
    l, h = divmod(int(i), cfg.n_heads)
    print(f"layer {l}, head {h}: induction score {induction[l, h]:.3f}, previous-token score {prev_score[l, h]:.3f}")

# %% [markdown]
# **4. Implement, then explain: does the pronoun head matter?** A large weight from "She" to "nurse" says
# where a head *looks*, not what the model *does* with it: attention weights alone are not an explanation
# {cite}`jain2019attention`. Test it: silence head (`layer`, `head`) by zeroing its $d_k$ columns of the
# merged heads just before `c_proj` (a forward pre-hook), and compare $P(\text{" he"})$ and
# $P(\text{" she"})$ after each prompt of section 8.7 with and without it. What does a small change tell
# you? {cite}`vig2020causal` turn this idea into a careful causal analysis of gender bias in GPT-2.

# %% tags=["solution"]
def without_head(layer: int, head: int):
    """A context manager: inside it, head `head` of block `layer` contributes nothing."""
    d_k = cfg.d_head

    def zero_head(module, args):
        (merged,) = args  # (B, T, D): the heads side by side, head h in columns h*d_k .. (h+1)*d_k
        merged = merged.clone()
        merged[..., head * d_k:(head + 1) * d_k] = 0.0
        return (merged,)

    class Ablation:
        def __enter__(self):
            self.handle = model.blocks[layer].attn.c_proj.register_forward_pre_hook(zero_head)

        def __exit__(self, *exc):
            self.handle.remove()

    return Ablation()


for prompt in prompts:
    p_he, p_she = next_token_probs(model, prompt, [" he", " she"])
    with without_head(layer, head):
        q_he, q_she = next_token_probs(model, prompt, [" he", " she"])
    print(f"{prompt:<48} he/she {p_he / p_she:5.2f} -> {q_he / q_she:5.2f} without layer {layer}, head {head}")

# %% [markdown]
# **5. Explain: where the parameters are.** Use `count_gpt_parameters` to find what share of GPT-2 small's
# parameters sits in the token embeddings, and how that share changes from GPT-2 small to GPT-2 XL. Then
# explain why the Chapter 6 model, with $D = 128$, keeps an even larger share there, and what that means for
# what its short training can teach it.

# %% tags=["solution"]
for preset in ("gpt2", "gpt2-xl", "shakespeare-char"):
    c = GPTConfig.from_preset(preset, vocab_size=50_257)  # the Chapter 6 model: shakespeare-char on GPT-2 tokens
    parts = count_gpt_parameters(c.vocab_size, c.context_length, c.d_model, c.n_layers, c.d_ff)
    print(f"{preset:<17} D = {c.d_model:>4}: wte holds {parts['token embeddings wte (V x D)'] / sum(parts.values()):.1%} "
          f"of {sum(parts.values()):,} parameters")
