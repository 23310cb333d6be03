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
# (ch-finetuning)=
# # 9. Fine-tuning
#
# A pretrained GPT predicts the next token. To make it do something else, start from its
# weights and train a little more, on the new task: *fine-tuning*. This chapter adapts the
# offline model of {ref}`ch-gpt2-weights` (and GPT-2 itself, where its weights can be
# loaded) in two ways:
#
# 1. a task from the data we have: who is speaking, from the words of a speech alone;
# 2. a classifier head on the model's hidden states (the last token's, or their mean),
#    trained three ways: the head only, the last block and the head, everything;
# 3. LoRA {cite}`hu2022lora`, written from scratch: a frozen weight plus a trainable
#    low-rank update, merged into the weight for free inference; Hugging Face `peft`
#    computes the same numbers on the same weights (a test, `tests/test_lora.py`);
# 4. LoRA at a few ranks against full fine-tuning: accuracy against trainable parameters;
# 5. style fine-tuning: a LoRA adapter that makes the language model sound like one
#    character.
#
# Everything runs on 2 CPU cores in a few minutes, with small models and few steps. Set
# `FULL_RUN = True` in the imports cell on a GPU for longer runs.

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
import copy
import math
import time

import matplotlib.pyplot as plt
import numpy as np
import torch
from IPython.display import Markdown, display
from torch import nn
from torch.testing import assert_close

from gpt_from_scratch.data import get_batch, load_tiny_shakespeare
from gpt_from_scratch.finetune import (
    GPTClassifier, accuracy, bag_of_tokens, fit_linear, hidden_states, majority_accuracy,
    pooled_features, set_trainable, speaker_dataset, train_classifier,
)
from gpt_from_scratch.generate import generate
from gpt_from_scratch.hf_weights import WeightsUnavailableError, from_pretrained
from gpt_from_scratch.lora import (
    LoRALinear, apply_lora, count_trainable, lora_layers, merge_lora, unmerge_lora,
)
from gpt_from_scratch.model import GPT
from gpt_from_scratch.tokenizer import gpt2_encoding
from gpt_from_scratch.train import estimate_loss
from gpt_from_scratch.utils import default_device, seed_everything
from gpt_from_scratch.book import finetune_prose as prose
from gpt_from_scratch.book.corpus_vocab import compact_ids
from gpt_from_scratch.book.figure_text import book_figures
from gpt_from_scratch.book.finetune_runs import learning_curve
from gpt_from_scratch.book.lessons import verdicts
from gpt_from_scratch.book.offline_model import DocumentStart, EOT, offline_model
from gpt_from_scratch.book.recipes import RECIPES, book_model, bpe_level_data
from gpt_from_scratch.book.reference import ReferenceUnavailable, reference_run
from gpt_from_scratch.book.reference_prose import found_text

book_figures()  # sharp on high-density screens, each PNG records its smallest text
generator = seed_everything(1337)
torch.set_printoptions(precision=3, sci_mode=False)

# FULL_RUN = False: every run is sized for 2 CPU cores. FULL_RUN = True (on a GPU): Chapter
# 8's larger offline model, 4 times the steps, and GPT-2 trained all three ways.
FULL_RUN = False
DEVICE = default_device() if FULL_RUN else "cpu"
clock = time.perf_counter if FULL_RUN else time.process_time  # on a CPU: CPU seconds
STEPS = 1200 if FULL_RUN else 300  # optimizer steps of each fine-tuning run
HEAD_STEPS = 1000  # full passes of the head-only runs, on features computed once
STYLE_STEPS, STYLE_LR = (600 if FULL_RUN else 150), 1e-2  # the style adapter of 9.6

# %% [markdown]
# ## 9.1 A model worth adapting
#
# Fine-tuning starts from what pretraining learned, so the backbone matters. The Chapter 6
# BPE model trained for few steps: its 50,257-way output layer makes every step expensive
# on a CPU. Chapter 8's offline model reads the same GPT-2 tokens but learns only those
# that Tiny Shakespeare uses ({ref}`ch-gpt2-weights`), which lets a CPU afford many steps
# (the cell prints both models' step counts). Both scored on the same validation windows,
# every window opened by `<|endoftext|>` for the offline model as in its training:

# %% tags=["nbval-check-output"] tolerance={"abs": 0.1, "why": "measured on two CPUs, each model trained under the arithmetic: on the one that ran this output (scripts/arithmetic_spread.py), PyTorch's AVX-512, AVX2 and portable kernels with 1, 2 and 4 threads moved it by at most 0.031; on a second (AVX-512 with AMX), the cell's losses recomputed under its AVX-512 (1 and 4 threads), AVX2 (1, 2 and 4) and portable (1 and 2) kernels by at most 0.054 (AVX2, every thread count)"}
backbone, info = offline_model(full=FULL_RUN, progress=False)  # Chapter 8's offline model
ch6_model, _ = book_model("shakespeare-bpe", progress=False)  # Chapter 6's BPE model
_, val_ids, _ = bpe_level_data()
windows = dict(batch_size=8, block_size=63, eval_iters=20, seed=1337)
models = {"Chapter 6 BPE model": (ch6_model, ch6_model),
          "Chapter 8 offline model": (backbone, DocumentStart(backbone))}  # EOT first
val_losses = {}
print(f"{'model':<25}{'parameters':>11}{'val loss':>10}")
for name, (model, reader) in models.items():
    loss = val_losses[name] = estimate_loss(reader, {"val": val_ids}, **windows)["val"]
    print(f"{name:<25}{model.num_parameters():>11,}{loss:>10.3f}")
steps = (RECIPES["shakespeare-bpe"].train["max_iters"],
         info["settings"]["train"]["max_iters"])
text_tokens = int((backbone.vocab != EOT).sum())  # the corpus vocabulary, EOT aside
print(f"training steps: {steps[0]:,} (Chapter 6), {steps[1]:,} (Chapter 8, learning "
      f"{text_tokens:,} tokens of the training text and <|endoftext|>)")
encoding = gpt2_encoding()

# %% tags=["remove-input"]
recipes = {"Chapter 6 BPE model": (RECIPES["shakespeare-bpe"].train, ch6_model.config),
           "Chapter 8 offline model": (info["settings"]["train"], backbone.config)}
seen = {name: train["max_iters"] * train["batch_size"] * config.context_length
        for name, (train, config) in recipes.items()}  # tokens read in training
display(Markdown(prose.backbones_text(
    {name: (m.num_parameters(), val_losses[name], seen[name])
     for name, (m, _) in models.items()},
    ch6_model.wte.weight.numel() / ch6_model.num_parameters(), "Chapter 8 offline model")))

# %% [markdown]
# ## 9.2 A task from the play: who is speaking?
#
# Tiny Shakespeare is a play script: every speech starts with a line `NAME:`. That gives a
# labelled task for free: read a speech, say who speaks it. `speaker_dataset` keeps the 4
# characters with the most speeches (characters of different plays) and makes the task
# honest:
#
# - the speaker line is removed, or the answer would be the first token;
# - names inside the speeches are masked. Juliet says "O Romeo, Romeo!", Romeo says
#   "Juliet": a classifier could learn who is *addressed* and answer from that. Each word
#   of a speaker's name that the play writes capitalised more often than in lower case
#   ("Romeo", "Hastings", not "King" or "First") becomes `NAME`;
# - speeches of fewer than 8 tokens ("Ay, my lord.") are dropped: nothing can tell their
#   speaker, and they would only add noise to every score.
#
# Each speaker's speeches are shuffled and cut into 70% training, 10% validation and 20%
# test, so that every split keeps the class proportions and no speech is in two splits.
# A speech keeps its first 63 GPT-2 tokens: with `<|endoftext|>` in front, they fill the
# model's context of 64. (The language model itself was pretrained on the play's text,
# speaker lines included, as GPT-2 was pretrained on web pages that may contain a task's
# sentences: pretraining saw the words, never this classification.)

# %%
data = speaker_dataset(load_tiny_shakespeare(), encoding, n_speakers=4, max_tokens=63,
                       min_tokens=8)
C = len(data.classes)

# %% tags=["nbval-check-output"]
counts = data.counts()
print(f"{'speaker':<18}{'train':>7}{'val':>6}{'test':>6}")
for c, name in enumerate(data.classes):
    print(f"{name:<18}{counts['train'][c]:>7}{counts['val'][c]:>6}{counts['test'][c]:>6}")
print(f"{'total':<18}{sum(counts['train']):>7}{sum(counts['val']):>6}"
      f"{sum(counts['test']):>6}")
print(f"{len(data.masked_names)} name words masked, e.g. "
      f"{', '.join(sorted(data.masked_names)[:6])}")

# %% [markdown]
# One training speech, as the classifier sees it:

# %%
print(data.train.texts[0])
print(f"-> {data.classes[data.train.labels[0]]}")

# %% [markdown]
# Two baselines say what a result is worth. The *majority* baseline always answers the most
# frequent speaker of the training set. The *bag of tokens* counts each token of a speech,
# ignores their order, and learns one weight per token and speaker: multinomial logistic
# regression, a single `nn.Linear` trained with cross-entropy on the counts (`fit_linear`:
# AdamW on the whole training set at each step). With so few test speeches, one standard
# error of an accuracy $p$ is $\sqrt{p(1-p)/N}$, printed too: differences of a point or
# two are noise.

# %%
vocab = torch.unique(data.train.ids[data.train.real()])  # the tokens seen in training
X = {s: bag_of_tokens(getattr(data, s), vocab)  # (N, |V|) counts
     for s in ("train", "val", "test")}
torch.manual_seed(0)
bag_model = nn.Linear(len(vocab), C)
fit_linear(bag_model, X["train"], data.train.labels, steps=300)
with torch.no_grad():
    bag = {s: (bag_model(X[s]).argmax(-1) == getattr(data, s).labels).float().mean().item()
           for s in ("val", "test")}
majority = majority_accuracy(data)
N_TEST = len(data.test)

# %% tags=["nbval-check-output"]
print(f"majority class ({data.classes[torch.bincount(data.train.labels).argmax()]}): "
      f"{majority:.1%} of the test speeches")
print(f"bag of tokens ({len(vocab):,} tokens x {C} speakers): {bag['test']:.1%}")
print(f"one standard error at 50% on {N_TEST} test speeches: "
      f"{math.sqrt(0.25 / N_TEST):.1%}")

# %% [markdown]
# ## 9.3 A classifier head on the hidden states
#
# A GPT reads left to right: with causal attention, only the last token of a speech has
# seen all of it. One classifier therefore runs the model, takes the final LayerNorm's
# output at the last *real* token (the hidden state `lm_head` would read), and applies a
# new `nn.Linear(D, C)`: $C$ logits instead of $V$. Another averages the hidden states of
# all the speech's tokens instead (*mean pooling*). Speeches of different lengths are
# padded at the end; padding comes after the real tokens, so causal attention keeps it from
# changing them, and the mean leaves it out. `GPTClassifier(model, C, pool, start_token)`
# does both, with `<|endoftext|>` in front of every speech as the offline model was
# trained. By hand, on two speeches:

# %%
torch.manual_seed(0)
clf = GPTClassifier(copy.deepcopy(backbone), C, pool="mean", start_token=EOT)
idx, lengths = data.train.ids[:2], data.train.lengths[:2]  # (B, T), (B,)
with torch.no_grad():
    ids = torch.cat([torch.full((2, 1), EOT), idx], dim=1)  # (B, 1 + T)
    x = backbone.wte(ids) + backbone.wpe(ids.shape[1])  # (B, 1 + T, D)
    for block in backbone.blocks:
        x = block(x)
    h = backbone.ln_f(x)[:, 1:]  # (B, T, D): the speech's positions
    last = h[torch.arange(2), lengths - 1]  # (B, D): each speech's last real token
    real = (torch.arange(h.shape[1]) < lengths[:, None]).float()  # (B, T)
    mean = (h * real[..., None]).sum(1) / lengths[:, None]  # (B, D): mean of real tokens
    logits = clf.head(mean)  # (B, C)
    assert_close(hidden_states(backbone, ids)[:, 1:], h)
    assert_close(clf(idx, lengths), logits)
print(f"hidden states {tuple(h.shape)} -> last token or mean {tuple(mean.shape)} "
      f"-> logits {tuple(logits.shape)}")

# %% [markdown]
# What trains is a choice, made with `requires_grad`. `set_trainable` offers three:
# `"head"` (the $D \times C + C$ numbers of the new layer; the model is a frozen feature
# extractor), `"last"` (the last block, the final LayerNorm and the head) and `"all"`
# (every weight, embeddings included).
#
# A frozen model gives each speech the same features at every step, so the head-only runs
# compute them once (`pooled_features`) and then train the head alone on them for many
# passes (`fit_linear`), nearly for free. The other runs must run the model at every step:
# `STEPS` steps of 16 speeches, from the same pretrained weights, with the same batches.
# Times are CPU seconds, so other programs on the machine do not inflate them.

# %%
def fine_tune(model: GPT, mode: str, r: int | None = None, lr: float = 1e-3,
              pool: str = "mean") -> dict:
    """Train a fresh classifier on a copy of ``model``: ``mode`` or LoRA of rank ``r``."""
    torch.manual_seed(0)
    clf = GPTClassifier(copy.deepcopy(model), C, pool=pool, start_token=EOT).to(DEVICE)
    if r is None:
        set_trainable(clf, mode)
    else:
        apply_lora(clf.model, r=r, alpha=2 * r)  # the model frozen, its LoRA matrices and
    n = count_trainable(clf)  # the head (a separate module) trainable
    start = clock()
    if mode == "head":  # the features once, then the head on them
        features = pooled_features(clf, data.train).to(DEVICE)  # (N, D)
        fit_linear(clf.head, features, data.train.labels.to(DEVICE), HEAD_STEPS, lr=lr)
    else:
        train_classifier(clf, data.train, STEPS, lr=lr, batch_size=16,
                         generator=torch.Generator().manual_seed(0))
    seconds = clock() - start
    return dict(trainable=n, seconds=seconds,
                val=accuracy(clf, data.val), accuracy=accuracy(clf, data.test))


def show(results: dict) -> None:
    """The runs as a table, the test accuracy first: the column the text quotes stays
    in view on a narrow screen."""
    print(f"{'method':<23}{'test':>7}{'val':>7}{'trainable':>10}  CPU time")
    print(f"{'majority class':<23}{majority:>7.1%}")
    print(f"{'bag of tokens':<23}{bag['test']:>7.1%}{bag['val']:>7.1%}"
          f"{len(vocab) * C + C:>10,}")
    for name, r in results.items():  # the time last: its width varies from run to run
        print(f"{name:<23}{r['accuracy']:>7.1%}{r['val']:>7.1%}{r['trainable']:>10,}"
              f"  {r['seconds']:.1f} s")


results = {
    "head only (last token)": fine_tune(backbone, "head", lr=1e-2, pool="last"),
    "head only (mean)": fine_tune(backbone, "head", lr=1e-2),
    "last block + head": fine_tune(backbone, "last", lr=3e-3),
    "everything": fine_tune(backbone, "all", lr=3e-4),
}

# %%
print(f"fine-tuning runs: {STEPS} steps of 16 speeches, "
      f"{STEPS * 16 / len(data.train):.1f} passes over the training set")
show(results)

# %% tags=["remove-input"]
display(Markdown(prose.pooling_text(results["head only (last token)"]["accuracy"],
                                    results["head only (mean)"]["accuracy"], N_TEST)))

# %% [markdown]
# The head is $D \times C + C$ numbers; "everything" trains the whole model, most of it the
# token embedding. Training more than the head lets the features themselves change for the
# task, at the price of a backward pass through the blocks at every step, and, with a few
# hundred speeches, of fitting the training set itself: a model that can change every
# weight can learn these particular speeches by heart.
#
# ## 9.4 LoRA from scratch
#
# Full fine-tuning writes a new copy of every weight. LoRA {cite}`hu2022lora` keeps the
# pretrained weight $W$ ($d_{out} \times d_{in}$) frozen and learns a low-rank update:
#
# $$y = W x + b + \frac{\alpha}{r} B A x, \qquad A \in \mathbb{R}^{r \times d_{in}},\;
# B \in \mathbb{R}^{d_{out} \times r},$$
#
# with a rank $r$ much smaller than $d_{in}$ and $d_{out}$: $r (d_{in} + d_{out})$
# trainable numbers instead of $d_{in} d_{out}$. $A$ starts random and $B$ at zero, so the
# update $BA$ is zero and the adapted model starts as the pretrained one. $\alpha / r$
# scales the update so that changing $r$ does not change the learning rate that works.
# Written out:

# %%
class MyLoRALinear(nn.Module):
    def __init__(self, base: nn.Linear, r: int, alpha: float = 1.0):
        super().__init__()
        self.base, self.scaling = base, alpha / r
        for p in base.parameters():
            p.requires_grad_(False)  # W and b stay as pretrained
        self.lora_A = nn.Parameter(torch.empty(r, base.in_features))  # (r, in)
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, r))  # (out, r): zero
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))  # as nn.Linear's weights

    def forward(self, x):  # (B, T, in) -> (B, T, out), through (B, T, r)
        return self.base(x) + (x @ self.lora_A.T @ self.lora_B.T) * self.scaling


torch.manual_seed(0)
linear = nn.Linear(64, 192)
x = torch.randn(2, 5, 64)  # (B, T, D)
mine = MyLoRALinear(linear, r=4, alpha=8)
theirs = LoRALinear(linear, r=4, alpha=8)
with torch.no_grad():
    theirs.lora_A.copy_(mine.lora_A)
    mine.lora_B.normal_()
    theirs.lora_B.copy_(mine.lora_B)
assert_close(mine(x), theirs(x))  # the same as the package's LoRALinear
print(f"trainable: {sum(p.numel() for p in theirs.parameters() if p.requires_grad):,} = "
      f"r (in + out) = 4 x (64 + 192); the frozen weight has {linear.weight.numel():,}")

# %% [markdown]
# `apply_lora(model, r, alpha)` freezes a model and wraps each projection of every block
# (attention's `c_attn` and `c_proj`, the MLP's `c_fc` and `c_proj`) in a `LoRALinear`, with
# the initialization and scaling of Hugging Face `peft` {cite}`mangrulkar2022peft`. The
# targets are a choice: `peft`'s default for GPT-2 is `c_attn` alone, and the book passes it
# all four under three names, `target_modules=["c_attn", "c_proj", "c_fc"]` (`c_proj` names
# both attention's output projection and the MLP's), as its parity test does. Because
# $B = 0$, the adapted model computes exactly what the pretrained one computed:

# %% tags=["nbval-check-output"]
lora_model = apply_lora(copy.deepcopy(backbone), r=4, alpha=8)
idx = data.val.ids[:4]  # (B, T)
with torch.no_grad():
    same = torch.equal(lora_model(idx)[0], backbone(idx)[0])
print(f"{len(lora_layers(lora_model))} LoRA layers; logits identical to the pretrained "
      f"model's: {same}")
print(f"trainable {count_trainable(lora_model):,} of {backbone.num_parameters():,}")

# %% [markdown]
# After training, the update can be folded into the weight, $W \leftarrow W +
# \frac{\alpha}{r} BA$ (`merge_lora`): the model is again one matrix per projection and
# costs nothing extra at inference. `unmerge_lora` subtracts it again, to switch adapters.
# With random $B$ standing in for a trained one:

# %%
torch.manual_seed(1)
for layer in lora_layers(lora_model).values():
    nn.init.normal_(layer.lora_B, std=0.05)
before = lora_model.blocks[0].attn.c_attn.base.weight.clone()
with torch.no_grad():
    adapted = lora_model(idx)[0]
    merged = merge_lora(lora_model)(idx)[0]
    unmerged = unmerge_lora(lora_model)(idx)[0]
change = (adapted - backbone(idx)[0]).abs().max()
print(f"largest logit change from the update: {change:.3f}")

# %% tags=["nbval-check-output"]
print(f"merged vs adapted, largest difference below 1e-4: "
      f"{(merged - adapted).abs().max().item() < 1e-4}")
restored = lora_model.blocks[0].attn.c_attn.base.weight
print(f"after unmerge, W back to within 1e-6: "
      f"{(restored - before).abs().max().item() < 1e-6}")

# %% [markdown]
# Merging is exact up to float32 rounding. The parity with `peft` is a test: it applies
# `peft`'s LoRA to a transformers `GPT2LMHeadModel`, ours to a `GPT` holding the same
# weights (`from_hf`, {ref}`ch-gpt`), copies the random $A$ and $B$ across, and checks
# that both have the same number of trainable parameters and the same logits.
#
# ## 9.5 LoRA against full fine-tuning
#
# The same classifier (mean pooling), with LoRA of rank 1, 4 and 16 in every block plus the
# head, next to the runs of section 9.3. LoRA's update starts at zero ($B = 0$; $A$ starts
# random) and its matrices are small, so they take a larger learning rate than full
# fine-tuning.

# %%
for r in (1, 4, 16):
    results[f"LoRA r={r} + head"] = fine_tune(backbone, "lora", r=r, lr=3e-3)

# %% [markdown]
# Where GPT-2's weights can be loaded, the cell below fine-tunes it too, the head alone and
# with LoRA (rank 8): on a CPU this takes minutes, on a GPU seconds.

# %%
try:
    gpt2 = from_pretrained("gpt2")
    REAL_GPT2 = True
except WeightsUnavailableError:  # not in the cache, and no network to download them
    gpt2, REAL_GPT2 = None, False
    print("Offline: GPT-2's weights cannot be downloaded on this machine, so "
          "GPT-2 itself is not fine-tuned in this run.")
if REAL_GPT2:
    results["GPT-2, head only"] = fine_tune(gpt2, "head", lr=1e-2)
    results["GPT-2, LoRA r=8 + head"] = fine_tune(gpt2, "lora", r=8, lr=1e-3)
    if FULL_RUN:
        results["GPT-2, everything"] = fine_tune(gpt2, "all", lr=1e-4)

# %%
show(results)

# %% tags=["remove-input"]
display(Markdown(prose.classification_text(results, majority, bag["test"], N_TEST)))

# %% mystnb={"figure": {"caption": "Test accuracy of every fine-tuning run of this chapter, one row per run, ordered by its number of trainable parameters (in brackets), fewest at the top; the dashed lines are the two baselines.", "name": "fig-finetune-accuracy"}, "image": {"alt": "A dot plot: one row per fine-tuning method, labelled with its number of trainable parameters and ordered by it, a dot at the method's test accuracy, and two dashed vertical lines for the majority and bag-of-tokens baselines."}}
fig, ax = plt.subplots(figsize=(4.8, 3.8), layout="constrained")
by_size = sorted(results, key=lambda name: results[name]["trainable"])
rows = list(range(len(by_size)))[::-1]  # one row per run, the fewest parameters at the top
for row, name in zip(rows, by_size):
    ax.plot(results[name]["accuracy"], row, "o", color="C3" if "LoRA" in name else "C0")
ax.set_yticks(rows, [f"{name} ({results[name]['trainable']:,})" for name in by_size])
ax.axvline(majority, ls="--", color="grey", label="majority class")
ax.axvline(bag["test"], ls="--", color="C2", label="bag of tokens")
ax.set(xlabel="test accuracy", title="Speaker classification")
ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
plt.show()

# %% [markdown]
# What limits these numbers is the backbone: a model of 2 blocks of width 64, trained on
# one megabyte of text, has features that say something about who speaks, but
# less than the words themselves do. On a GPU, `FULL_RUN = True` uses Chapter 8's larger
# offline model, trains four times longer and adds GPT-2 trained all three ways, whose
# features were learned from 8 million web pages {cite}`radford2019language`.

# %% [markdown]
# ### What pretraining buys
#
# Losing to the bag of tokens does not say whether pretraining did anything. The fair test
# trains the same classifier on the same network *without* pretraining: the offline model's
# architecture from a random initialization, its head alone on its mean-pooled states, on the
# same labelled speeches. And labels are what pretraining should save, so the test is a
# *learning curve*: 8, 32 and 128 speeches per speaker (128 is nearly all of them), each
# drawn 20 times, with the bag of tokens on every draw too. The random network takes one of
# five initializations in turn. One pretraining run is not enough to judge by: the same
# recipe from another seed, or on a CPU that sums in another order, trains another backbone.
# So the pretrained side is three backbones, the offline model and the same recipe from
# seeds 0 and 1, each draw's accuracy averaged over them. Head-only classifiers on
# features computed once make all these runs take seconds (`learning_curve`):

# %%
backbones = [backbone] + [offline_model(full=FULL_RUN, seed=s)[0] for s in (0, 1)]
curve = learning_curve(backbones, data, sizes=(8, 32, 128), seeds=20)
gaps = prose.pretraining_gaps(curve)
print(f"{'n':>4}{'pretrained':>13}{'random init':>13}{'bag':>12}{'pre - random':>14}")
for g in gaps:
    cells = [f"{100 * g[k][0]:.1f} ± {100 * g[k][1]:.1f}"
             for k in ("pretrained", "random", "bag", "vs_random")]
    print(f"{g['n']:>4}{cells[0]:>13}{cells[1]:>13}{cells[2]:>12}{cells[3]:>14}")
print("(n: speeches per speaker; accuracy in %, mean ± one standard error over the draws)")

# %% tags=["remove-input"]
display(Markdown(prose.pretraining_text(curve)))


# %% mystnb={"figure": {"caption": "Test accuracy against the number of labelled speeches per speaker: head-only classifiers on the features of three pretrained backbones (averaged) and on the same network randomly initialised, and the bag of tokens; mean and one standard error over 20 draws of the speeches.", "name": "fig-finetune-curve"}, "image": {"alt": "Three lines of test accuracy rising with the number of labelled speeches per speaker on a logarithmic axis, with error bars, one line for each kind of input, and a dashed horizontal line for the majority baseline."}}
fig, ax = plt.subplots(figsize=(5.2, 4))
lines = {"bag": "bag of tokens", "pretrained": "pretrained backbones, head only",
         "random": "random initialization, head only"}
for key, label in lines.items():
    ax.errorbar(curve["sizes"], [100 * g[key][0] for g in gaps],
                yerr=[100 * g[key][1] for g in gaps], marker="o", capsize=3, label=label)
ax.axhline(100 * majority, ls="--", color="grey", label="majority class")
ax.set(xscale="log", xticks=curve["sizes"], xticklabels=[str(n) for n in curve["sizes"]],
       xlabel="labelled speeches per speaker", ylabel="test accuracy (%)",
       title="What pretraining buys")
ax.legend()
plt.show()

# %% [markdown]
# ### The reference run
#
# `make reference-runs` computes the same table on that larger backbone on a GPU (the same
# speeches and splits, 1,200 steps a run) and stores it in its manifest. Where `reference_run`
# finds it (on this machine, or a published copy):

# %%
try:
    ref_run = reference_run("finetune")
except ReferenceUnavailable as err:
    ref_run = None
    print(err)
ref_table = ref_run.info["tables"] if ref_run is not None else None

# %% tags=["remove-input"]
display(Markdown(found_text({"finetune": ref_run}, "its table, beside this chapter's")))

# %%
if ref_table is not None:
    rows = dict(ref_table["finetune"])
    ref_majority, ref_bag = rows.pop("majority class"), rows.pop("bag of tokens")
    print(f"{'method':<28}{'trainable':>10}{'val':>8}{'test':>8}")
    print(f"{'majority class':<28}{'':>10}{'':>8}{ref_majority['accuracy']:>8.1%}")
    for name, r in ({"bag of tokens": ref_bag} | rows).items():
        print(f"{name:<28}{r['trainable']:>10,}{r['val']:>8.1%}{r['accuracy']:>8.1%}")
    display(Markdown(prose.classification_text(rows, ref_majority["accuracy"],
                                               ref_bag["accuracy"], ref_table["n_test"])))

# %% [markdown]
# ## 9.6 Style fine-tuning with LoRA
#
# LoRA adapts the language model itself too. Train an adapter of rank 8 on the training
# speeches of one character with the ordinary next-token loss, and measure the loss on held-
# out speeches: that character's test speeches, and those of the three others. An adapter
# that learned the character's style should help most on the character's own lines.
#
# The adapter trains, and is scored, as Chapter 8 trained the offline model: on rows of its
# corpus vocabulary (a token outside it counts as `<unk>`). `style.compact()` is the same
# network (the same modules, LoRA layers included) with its output layer over the corpus
# vocabulary, without the expansion to GPT-2's 50,257 tokens.

# %%
speaker = data.classes[0]
table = compact_ids(backbone.vocab)  # (50,257,): GPT-2 id -> row of the corpus vocabulary


def stream(split, keep) -> np.ndarray:
    """The speeches of ``split`` whose label ``keep`` accepts, as one sequence of rows."""
    texts = [t for t, y in zip(split.texts, split.labels.tolist()) if keep(y)]
    return table.numpy()[encoding.encode_ordinary("\n\n".join(texts))]


style_train = stream(data.train, lambda y: y == 0)
held_out = {speaker: stream(data.test, lambda y: y == 0),
            "others": stream(data.test, lambda y: y != 0)}
T_LM = 63  # with <|endoftext|> in front: the context of 64
style = apply_lora(copy.deepcopy(backbone), r=8, alpha=16).to(DEVICE)
trainer = DocumentStart(style.compact(), start_token=int(table[EOT]))  # style's modules


@torch.no_grad()
def lm_losses(ids: np.ndarray, n_windows: int = 48) -> list[float]:
    """The adapted model's mean next-token loss on each of ``n_windows`` windows."""
    starts = np.linspace(0, len(ids) - T_LM - 1, n_windows).astype(int)
    w = torch.from_numpy(np.stack([ids[s: s + T_LM + 1] for s in starts])).to(DEVICE)
    trainer.eval()
    logits = trainer(w[:, :-1])[0]  # (N, T + 1, V): T + 1 with <|endoftext|> in front
    targets = torch.cat([w[:, :1], w[:, 1:]], dim=1)  # (N, T + 1): as DocumentStart scores
    losses = nn.functional.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
    return losses.mean(dim=1).tolist()


style_before = {k: lm_losses(v) for k, v in held_out.items()}
opt = torch.optim.AdamW([p for p in style.parameters() if p.requires_grad], lr=STYLE_LR)
g = torch.Generator().manual_seed(0)
trainer.train()
start = clock()
for step in range(STYLE_STEPS):
    xb, yb = get_batch(style_train, 8, T_LM, generator=g)  # (B, T) each
    loss = trainer(xb.to(DEVICE), yb.to(DEVICE))[1]
    opt.zero_grad()
    loss.backward()
    opt.step()
style_seconds = clock() - start
style_after = {k: lm_losses(v) for k, v in held_out.items()}
style = style.cpu().eval()  # for the samples below

# %%
print(f"{len(style_train):,} training tokens of {speaker}; adapter of "
      f"{count_trainable(style):,} parameters, {STYLE_STEPS} steps of 8 windows "
      f"in {style_seconds:.1f} s of CPU time")
for k in held_out:
    ahead, behind = np.mean(style_before[k]), np.mean(style_after[k])
    print(f"held-out loss, {k:<11} {ahead:.3f} -> {behind:.3f} ({behind - ahead:+.3f})")

# %% tags=["remove-input"]
display(Markdown(prose.style_text(speaker, style_before, style_after)))

# %% [markdown]
# Samples from the same prompt and seed, from the offline model and from the adapted one,
# merged first (`merge_lora`): generation then runs on plain weights.

# %%
prompt = torch.tensor([[EOT] + encoding.encode_ordinary("My lord,")])  # (1, T)
merge_lora(style)
for name, m in (("before (offline model)", backbone), ("after (LoRA, merged)", style)):
    out = generate(m, prompt, max_new_tokens=40, top_k=50,
                   generator=torch.Generator().manual_seed(1337))
    print(f"--- {name}\n{encoding.decode(out[0, 1:].tolist())}\n")

# %% [markdown]
# ## Summary
#
# - A labelled task can hide in unlabelled text: the play's speaker lines label every
#   speech. Remove the label from the input and mask what gives it away (names), and split
#   by speech before comparing anything with two baselines and the test set's noise.
# - Fine-tuning is worth what the pretrained features are worth: start from the strongest
#   model you can afford. The fair test of pretraining is the same network from a random
#   initialization on the same labels, over a learning curve with enough draws to see the
#   noise, and over more than one pretraining run, since runs of one recipe land apart;
#   section 9.5 ran it and said what this run's pretraining bought.
# - A classifier on a GPT reads one vector per input: the last real token's hidden state,
#   the only position that has seen the whole input, or the mean of all of them.
# - What trains is a choice made with `requires_grad`: the head, the last blocks, or
#   everything. A frozen model's features can be computed once, which makes the head
#   nearly free; training more adapts the features, at a cost and with a risk of
#   memorizing a small training set.
# - LoRA freezes $W$ and learns $\frac{\alpha}{r} BA$ with $B = 0$ at first: the adapted
#   model starts as the pretrained one, trains a small fraction of its parameters, and
#   merges into $W$ exactly for inference. Ours equals `peft`'s on the same weights.
# - An adapter trained on one character's speeches is judged by how its held-out loss moves
#   on that character's lines against the others', each change with its standard error:
#   section 9.6 says what this run shows.

# %% tags=["remove-cell", "nbval-check-output"]
print(verdicts())

# %% [markdown]
# ## Exercises
#
# ### Exercise 1. The LoRA forward pass (implement)
#
# Write `lora_forward(x, weight, bias, A, B, scaling)`: the output of a `LoRALinear` whose
# frozen layer has `weight` $(d_{out}, d_{in})$ and `bias` $(d_{out},)$, for an input `x` of
# shape $(\dots, d_{in})$, with $A$ $(r, d_{in})$, $B$ $(d_{out}, r)$ and `scaling`
# $= \alpha / r$. Compute the update through the $r$-dimensional bottleneck, without
# forming the $d_{out} \times d_{in}$ matrix $BA$ (that is what `merge` does, once).

# %% tags=["solution", "hide-input"] mystnb={"code_prompt_show": "Show the solution", "code_prompt_hide": "Hide the solution"}
def lora_forward(x, weight, bias, A, B, scaling):
    return x @ weight.T + bias + (x @ A.T @ B.T) * scaling  # (..., r) in between


# %%
from gpt_from_scratch.exercises import check_lora_forward

check_lora_forward(lora_forward);

# %% [markdown]
# ### Exercise 2. Counting LoRA's parameters (predict, then run)
#
# The offline model has $L = 2$ blocks of width $D = 64$ and $d_{ff} = 4D$. Predict how
# many parameters `apply_lora(model, r=8)` leaves trainable (each wrapped layer adds
# $r(d_{in} + d_{out})$), and what fraction of the model that is. Then run the cell after
# the answer.

# %% [markdown] tags=["answer"]
# ```{admonition} Answer
# :class: dropdown
# Per block: `c_attn` $8(D + 3D) = 2{,}048$, attention's `c_proj` $8(D + D) = 1{,}024$,
# `c_fc` $8(D + 4D) = 2{,}560$ and the MLP's `c_proj` $8(4D + D) = 2{,}560$: $8{,}192$.
# Two blocks: $16{,}384$, about 2% of the model's parameters, most of which sit in the
# token embedding (11,236 rows of 64) that LoRA leaves frozen.
# ```

# %%
counted = apply_lora(copy.deepcopy(backbone), r=8)
n_lora, n_all = count_trainable(counted), backbone.num_parameters()
print(f"trainable with r = 8: {n_lora:,} of {n_all:,} ({n_lora / n_all:.2%})")

# %% [markdown]
# ### Exercise 3. B = 0 at the start (predict, then run)
#
# At initialization $B = 0$, so the update $BA$ is zero. Predict: after one backward pass
# through a fresh `LoRALinear`, which of `lora_A.grad` and `lora_B.grad` is zero, and why
# does training still get going? Then run the cell.

# %% [markdown] tags=["answer"]
# ```{admonition} Answer
# :class: dropdown
# The update is $\frac{\alpha}{r} B (A x)$. Its gradient with respect to $A$ goes through
# $B$: $\frac{\partial L}{\partial A} = \frac{\alpha}{r} B^\top g\, x^\top$ for the output
# gradient $g$, which is zero while $B = 0$. The gradient with respect to $B$ is
# $\frac{\alpha}{r} g\, (A x)^\top$, not zero, because $A$ is random. So the first step
# moves $B$ only; from then on $B \neq 0$ and $A$ learns too. Had both started at zero,
# neither would ever move.
# ```

# %%
torch.manual_seed(0)
fresh = LoRALinear(nn.Linear(16, 8), r=2, alpha=4)
fresh(torch.randn(3, 16)).pow(2).sum().backward()
print(f"|grad A| = {fresh.lora_A.grad.abs().max():.4f}, "
      f"|grad B| = {fresh.lora_B.grad.abs().max():.4f}")

# %% [markdown]
# ### Exercise 4. What the others' loss does (explain)
#
# In section 9.6 the adapter trained on one character's speeches only. Explain why the loss
# on the *other* speakers' held-out speeches can move at all, why it can go down as well as
# up, and what you would expect of both losses with many more training steps.

# %% [markdown] tags=["answer"]
# ```{admonition} Answer
# :class: dropdown
# The adapter changes the shared weights of the blocks, so it changes every prediction, not
# only those on the character's lines. Two things pull in opposite directions. Much of what
# one character's speeches teach is shared by every speech of the play (the verse, the
# archaic words, the punctuation, the masked names): that lowers the others' loss too. And
# the adapter shifts probability towards this character's words and subjects, away from what
# the others say: that raises it. The sum is small either way, while on the character's own
# lines both pull the same way. With many more steps the adapter keeps fitting what is
# particular to the one character, then to its training speeches themselves: the others'
# loss rises, and eventually the loss on the character's own held-out lines turns back up
# too, as in the overfitting experiment of {ref}`ch-training`.
# ```

# %% [markdown] tags=["quiz"]
# ## Check yourself
#
# A few questions on this chapter, each answer with its explanation. The numbers in them
# are the ones this chapter printed.

# %% tags=["quiz", "remove-input"]
from gpt_from_scratch.book.quiz import Choice, MultipleChoice, Numeric, show_quiz

show_quiz([
    Numeric("What share of the test speeches does the majority class get right? (Percent, "
            "one decimal.)", 100 * majority, 0.06,
            "The baseline every classifier must beat."),
    Numeric("What share does the bag-of-tokens baseline get right? (Percent, one decimal.)",
            100 * bag["test"], 0.06, "A linear model on token counts, no transformer."),
    Numeric("With 128 speeches per speaker, what is the pretrained features' accuracy "
            "minus that of the same network randomly initialised? (Points, one decimal.)",
            100 * gaps[-1]["vs_random"][0], 0.06,
            "The mean of the paired differences over the 20 draws of section 9.5's "
            "learning curve."),
    MultipleChoice("After a LoRA update is merged into W:", [
        Choice("the model computes the adapted outputs at no extra cost per token", True,
               "Yes: W + BA is one matrix again."),
        Choice("the pretrained weights are lost for good", False,
               "No: unmerging subtracts BA and gives W back."),
    ]),
])
