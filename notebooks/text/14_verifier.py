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
# (ch-verifier)=
# # 14. Learning from a verifier
#
# {ref}`ch-assistant` taught the character model to answer "Last word: <line>" and
# "Repeat: <line>" from examples, and graded its answers with a program, `verify`. A
# program that grades can also *teach*: let the model answer a prompt several times, score
# each answer, and make the better ones more likely. This is reinforcement learning with
# verifiable rewards (RLVR), as Tülu 3 named it {cite}`lambert2024tulu3`: a checker takes
# the place of the learned reward model, in a step after instruction tuning. DeepSeek-R1
# {cite}`deepseekai2025r1` trained with such rule-based rewards at scale, with GRPO, which
# DeepSeekMath introduced {cite}`shao2024deepseekmath`, where it trained against a learned
# reward model. This chapter writes it from scratch, on Chapter 12's assistant, in five
# steps:
#
# 1. **rewards a program computes**, and how to measure a model that samples: greedy
#    accuracy, pass@1 and pass@k {cite}`chen2021codex`;
# 2. **REINFORCE with a baseline** {cite}`williams1992reinforce`: push each answer up or
#    down by how much better it did than its group, and why a group with one reward
#    teaches nothing;
# 3. **GRPO**: group-normalised advantages, PPO's ratio and clip {cite}`schulman2017ppo`,
#    and its two normalisations; the book's loss agrees with TRL's `GRPOTrainer`
#    {cite}`vonwerra2020trl` to 1e-6 given the same inputs, loss and gradients, on- and
#    off-policy (`tests/test_grpo_parity.py`);
# 4. **training on "Last word"**, six paired seeds, and whether pass@1 rises by more than
#    the noise of its evaluation, with what the reward curve does not show;
# 5. **what can go wrong**: whether pass@1 falls at a large step, a KL penalty as a brake
#    (one seed: a sign, not a measurement), whether the task not rewarded is forgotten,
#    and whether a style that no reward mentions moves away from 50/50.
#
# On Colab with a GPU, the last section trains GPT-2 small with Chapter 9's LoRA on
# two-digit sums, with the book's trainer and with TRL's side by side.

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
import random
import time
from collections import Counter

import matplotlib.pyplot as plt
import torch
from IPython.display import Markdown, display

from gpt_from_scratch.data import load_tiny_shakespeare
# grpo.grpo_loss, grpo_advantages.pass_at_k, ...: the exercises write their own
from gpt_from_scratch import grpo, grpo_advantages
from gpt_from_scratch.grpo_advantages import expected_weight, mixed_groups
from gpt_from_scratch.grpo_sampling import completion_logps, sample_groups
from gpt_from_scratch.book import lessons
from gpt_from_scratch.book import verifier_opening as opening
from gpt_from_scratch.book import verifier_prose as prose
from gpt_from_scratch.book import verifier_text as sentences
from gpt_from_scratch.book.verifier_brake import brake_gap, brake_text
from gpt_from_scratch.book.verifier_control import (
    next_token_kl, opening_gap, right_by_opening, same_size_change, sampled_answers,
)
from gpt_from_scratch.book.assistant import TASKS, courteous_odds, evaluate, task_items
from gpt_from_scratch.book.figure_text import book_figures
from gpt_from_scratch.book.assistant_runs import SFTRecipe, sft_run
from gpt_from_scratch.book.verifier import (
    GRPORecipe, answer_logprob, grpo_model, prompts_and_reward, sampled_scores,
)

book_figures()  # sharp on high-density screens, each PNG records its smallest text
torch.set_printoptions(precision=3, sci_mode=False)

# FULL_RUN = False: every run is sized for 2 CPU cores. FULL_RUN = True (on a GPU): 100
# held-out prompts per task, and 200 steps for section 14.6's GPT-2.
FULL_RUN = False
clock = time.process_time  # CPU seconds: other programs on the machine do not inflate them
SEEDS = (0, 1, 2, 3, 4, 5)  # SFT runs (Chapter 12 trains the first three); each GRPO run
# starts from the one of its seed
COLLAPSE_SEEDS = SEEDS[:3]  # the step too large: three seeds; its KL brake, the first
TASK, OTHER = "Last word", "Repeat"  # the task rewarded, and the one that is not
STEPS, LR = 200, 2e-4  # GRPO steps of 8 prompts x 8 answers
COLLAPSE_STEPS, COLLAPSE_LR, BETA = 60, 1e-3, 0.1  # the step too large; the KL brake's beta
N_HELD_OUT = 100 if FULL_RUN else 40  # held-out prompts per task, as Chapter 12
N_SAMPLES, K = 8, 8  # samples per held-out prompt, and the k of pass@k
N_PREMISE, PREMISE_SAMPLES = 64, 16  # training prompts, answers each: the reading's premise
# Time, measured on one thread of a 2-core AVX-512 CPU: a 200-step GRPO run 90 CPU-s, a
# 60-step one at COLLAPSE_LR 20 (25 with the KL term), an assistant of seeds 3 to 5 55:
# thirteen runs, 13 CPU-minutes, trained once (`make test` trains them beside the unit
# tests) and read from the cache after that. Then the chapter is its evaluations: about
# three minutes. A fresh Colab CPU runtime (2 cores) has nothing cached: before its own
# runs it trains what it reads, Chapter 6's character model and Chapter 12's three
# assistants (those chapters take about 4 and 3 minutes on 2 cores, training included:
# *For instructors*), so its first run takes 20 to 25 minutes.

# %% [markdown]
# ## 14.1 Rewards a program computes
#
# Chapter 12's assistants are cached where Chapter 13 left them (trained once if not). The
# reward of an answer is the checker's verdict: 1 when the answer ends its turn with
# `<|end|>` and `verify` accepts what it says (after either opening), 0 otherwise. Requiring
# the end marker matters: a reward that ignored it would pay answers that never stop. Eight
# answers of Chapter 12's first assistant to one held-out prompt, sampled at temperature 1:

# %%
sft_runs = {seed: sft_run(SFTRecipe(seed=seed)) for seed in SEEDS}
sft = {seed: run.model for seed, run in sft_runs.items()}
tok = sft_runs[SEEDS[0]].tokenizer
items = task_items(load_tiny_shakespeare())
rng = random.Random(0)
held_out = [i for task in TASKS  # N_HELD_OUT lines per task, drawn as Chapter 12 draws them
            for i in rng.sample([x for x in items["held_out"] if x.task == task],
                                N_HELD_OUT)]
example = held_out[0]
prompts, reward = prompts_and_reward([example], tok)
g = torch.Generator().manual_seed(0)
T = sft[0].config.context_length
answers, mask = sample_groups(sft[0], torch.tensor(prompts), 8, T - len(prompts[0]),
                              tok.end_id, generator=g)  # (8, C) each
print(example.prompt, "->", repr(example.answer))
for c, m in zip(answers, mask):
    ids = c[m.bool()].tolist()  # up to and including <|end|>, if it came
    text = tok.decode([t for t in ids if t < tok.base_vocab_size])
    print(f"reward {reward(0, ids):.0f}  {text!r}")

# %% [markdown]
# A model that samples has two accuracies. *Greedy* accuracy (Chapter 12's exact match) asks
# once, taking the likeliest character each time. *Sampled* accuracy asks at temperature 1,
# the way GRPO will draw its answers: pass@1 is the chance that one sample is right, and
# pass@k the chance that at least one of k samples is. From $n$ samples of a prompt of which
# $c$ are right, pass@1 is $c/n$; for pass@k the unbiased estimate is the chance that $k$ of
# the $n$, drawn without replacement, hold a right one {cite}`chen2021codex`:
#
# $$\widehat{\text{pass@}k} = 1 - \binom{n-c}{k} \Big/ \binom{n}{k}.$$
#
# Why not plug $c/n$ into $1 - (1 - p)^k$? Because that curve bends: averaged over draws of
# the $n$ samples, it falls short of the true pass@k. A prompt whose true rate is 0.3, drawn
# many times:

# %% tags=["nbval-check-output"]
torch.manual_seed(0)
rate, n, k = 0.3, 8, 4  # the prompt's true rate, samples per draw, the k of pass@k
true_pass = 1 - (1 - rate) ** k
draws = torch.distributions.Binomial(n, torch.tensor(rate)).sample((20_000,)).int()
plug_in = sum(1 - (1 - int(c) / n) ** k for c in draws) / len(draws)
unbiased = sum(grpo_advantages.pass_at_k(n, int(c), k) for c in draws) / len(draws)
print(f"true pass@{k} {true_pass:.3f}\nmean over draws of {n} samples:\n"
      f"  unbiased {unbiased:.3f}, plug-in {plug_in:.3f}")

# %% [markdown]
# Each assistant's greedy exact match and sampled pass@1 and pass@8, on the held-out
# prompts, `N_SAMPLES` samples each (`sampled_scores`, which also counts the courteous
# openings among the sampled answers):

# %%
start = clock()
before = {seed: sampled_scores(sft[seed], tok, held_out, N_SAMPLES, K, seed=seed)
          for seed in SEEDS}
greedy_before = {seed: evaluate(sft[seed], tok, held_out) for seed in SEEDS}
eval_seconds = (clock() - start) / len(SEEDS)
print(f"{'':<17}{'greedy':>8}{'pass@1':>8}{f'pass@{K}':>8}")
for seed in SEEDS:
    for task in TASKS:
        s = before[seed][task]
        print(f"{f'seed {seed}, {task}':<17}{greedy_before[seed][task]['exact']:>8.1%}"
              f"{s['pass@1']:>8.1%}{s[f'pass@{K}']:>8.1%}")

# %% tags=["remove-input"]
display(Markdown(sentences.sampling_text(
    {t: [greedy_before[s][t]["exact"] for s in SEEDS] for t in TASKS},
    {t: [before[s][t]["pass@1"] for s in SEEDS] for t in TASKS},
    {t: [before[s][t][f"pass@{K}"] for s in SEEDS] for t in TASKS}, K)))

# %% [markdown]
# The gap between pass@1 and pass@k is what reinforcement learning works with: it can only
# reward an answer the model samples.
#
# ## 14.2 REINFORCE with a baseline
#
# The policy gradient {cite}`williams1992reinforce` makes a sampled answer $y$ to a prompt
# $x$ more likely in proportion to its reward: the gradient of $R(y)\,\log \pi(y \mid x)$,
# where $\log \pi(y \mid x)$ is the sum of the answer's token log-probabilities. Subtracting
# a *baseline* $b$ that does not depend on $y$ leaves the expected gradient unchanged and
# can shrink its variance. GRPO makes two choices at once, and they are better taken apart:
#
# $$A_i = \frac{r_i - \operatorname{mean}(r_{1..G})}
# {\operatorname{std}(r_{1..G}) + 10^{-4}}.$$
#
# (DeepSeekMath writes the plain ratio; the $10^{-4}$, which keeps a group of equal rewards
# from dividing by zero, is TRL's, as the book's code follows it.)
#
# **The baseline** is the mean reward of the $G$ answers to the same prompt, its *group*.
# That mean includes the answer's own reward, so it does depend on $y_i$; but only through a
# fixed share:
#
# $$r_i - \operatorname{mean}(r_{1..G})
# = \frac{G-1}{G}\Big(r_i - \frac{1}{G-1}\sum_{j \ne i}
# r_j\Big),$$
#
# $\frac{G-1}{G}$ times the leave-one-out advantage of RLOO
# {cite}`kool2019buy,ahmadian2024rloo`, whose baseline, the other answers' mean, does not
# depend on $y_i$. So the numerator alone, summed with a constant weight (Dr. GRPO's
# normaliser, `loss_type="dr_grpo"`), estimates $\frac{G-1}{G}$ of the policy gradient
# without bias: the same direction, the step a little shorter; `"dapo"`'s division by the
# batch's token count, which the samples decide, adds a small bias of its own. **The
# scaling**, dividing by the group's standard deviation, is not a baseline and changes the
# expected gradient: it multiplies each prompt's advantages by $1/\operatorname{std}$, so a
# prompt whose rewards hardly vary, one the model nearly always gets right or nearly always
# gets wrong, weighs more than a prompt it gets right half the time. Dr. GRPO
# {cite}`liu2025drgrpo` calls this a difficulty bias and drops the division
# (`group_advantages(..., scale=None)`; TRL's `scale_rewards="none"`).
#
# Either way, an answer better than its siblings is pushed up, a worse one down, and a group
# whose answers all got the same reward has $A_i = 0$ for every answer: all right or all
# wrong, it carries no gradient at all. `mixed_groups` measures the share of groups that do
# carry one. Three groups of four, with and without the scaling, one group a line:

# %% tags=["nbval-check-output"]
rewards = torch.tensor([1.0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 1, 1])  # three groups of four
scaled = grpo_advantages.group_advantages(rewards, 4).view(3, 4)
unscaled = grpo_advantages.group_advantages(rewards, 4, scale=None).view(3, 4)
for name, adv in (("advantages", scaled), ("scale=None", unscaled)):
    print(f"{name}:")
    for i, group in enumerate(adv):
        print(f"  group {i}: " + " ".join(f"{a:+.3f}" for a in group.tolist()))
print(f"mixed groups: {mixed_groups(rewards, 4):.2f}")

# %% [markdown]
# One group is one draw, and what steers training is the expected gradient. With rewards 0
# or 1, a prompt the model answers right with probability $p$ adds to it, on average over
# its group of $G$ answers, $w(p)\,\nabla p$: $\nabla p$ is the gradient of its chance of a
# right answer, and the weight $w(p)$ is what the advantage makes of it. `expected_weight`
# computes $w(p)$ exactly, a sum over how many of the $G$ answers are right, for groups of
# 8 as the runs below use:

# %%
weights = {p: (expected_weight(p, 8), expected_weight(p, 8, scale=None))
           for p in (0.02, 0.1, 0.5, 0.9, 0.98)}
print(f"{'p':>5}{'w scaled':>10}{'w mean only':>13}")
for p, (w, w_mean) in weights.items():
    print(f"{p:>5g}{w:>10.1f}{w_mean:>13.1f}")

# %% tags=["remove-input"]
lone_and_even = [(float(adv[1, 0]), float(adv[0, 0])) for adv in (scaled, unscaled)]
display(Markdown(sentences.advantage_text(*lone_and_even, weights, 8)))


# %% [markdown]
# On the assistant, a batch of 8 training prompts of each task, 8 answers each: how many
# groups would teach?

# %%
def training_batch(task, model, seed, B=8, G=8):
    """B training prompts of one length of ``task``, G sampled answers each, scored."""
    train = [i for i in items["train"] if i.task == task]
    prompts, reward = prompts_and_reward(train, tok)
    length = Counter(len(p) for p in prompts).most_common(1)[0][0]  # the commonest length
    rows = random.Random(seed).sample([j for j, p in enumerate(prompts)
                                       if len(p) == length], B)
    idx = torch.tensor([prompts[j] for j in rows])  # (B, P)
    g = torch.Generator().manual_seed(seed)
    completions, mask = sample_groups(model, idx, G, T - length, tok.end_id,
                                      generator=g)  # (B * G, C) each
    owners = [j for j in rows for _ in range(G)]
    rewards = torch.tensor([reward(j, c[m.bool()].tolist())
                            for j, c, m in zip(owners, completions, mask)])  # (B * G,)
    return idx.repeat_interleave(G, dim=0), completions, mask, rewards


batches = {task: training_batch(task, sft[0], seed=0) for task in TASKS}
for task, (_, _, _, r) in batches.items():
    print(f"{task:<9}: mean reward {r.mean():.2f}, mixed groups {mixed_groups(r, 8):.2f}\n"
          f"  right answers per group {r.view(8, 8).sum(1).int().tolist()}")

# %% tags=["remove-input"]
right_per_group = {task: r.view(8, 8).sum(1).int().tolist()
                   for task, (_, _, _, r) in batches.items()}
display(Markdown(sentences.groups_text(right_per_group, 8)))

# %% [markdown]

# ## 14.3 GRPO: the ratio and the clip
#
# GRPO {cite}`shao2024deepseekmath` writes the policy gradient as PPO does
# {cite}`schulman2017ppo`: each completion token $t$ of answer $i$ gets the *ratio*
# $\rho_{i,t} = \pi_\theta(y_{i,t}) / \pi_{\text{old}}(y_{i,t})$ between the policy being
# trained and the one that sampled the answers, and the loss
#
# $$\ell_{i,t} = -\min\big(\rho_{i,t} A_i,\ \operatorname{clip}(\rho_{i,t}, 1-\epsilon,
# 1+\epsilon)\, A_i\big),$$
#
# with $\epsilon = 0.2$, TRL's default (the book's code follows TRL's settings). Once a
# token's probability has moved far enough in the direction its advantage asks, the
# clipped term is the smaller one and the token's gradient is zero. TRL's default
# (`num_iterations=1`) takes one update per batch of answers: the policy being trained *is*
# the policy that sampled them, and $\pi_{\text{old}}$ is the trainer's own
# log-probabilities, detached (`logps.detach()`), so $\rho = 1$ exactly, the clip never
# binds, and only the ratio's gradient, $\nabla \rho = \nabla \log \pi$, acts. The loss is
# then REINFORCE weighted by GRPO's advantage, token by token. $\rho$ is exactly 1 because
# both of its sides come from the trainer's pass; the answers were drawn by the same model
# in nearly the same arithmetic (the sampler's KV-cache pass and the trainer's full pass
# round differently in their last bits). Where a separate engine draws them (a serving
# library, often in lower precision), the distribution sampled moves further from the one
# trained, and $\rho$, computed from the trainer's numbers alone, does not see the gap. TRL
# corrects for it with a separate importance weight between the sampler's and the trainer's
# probabilities (`vllm_importance_sampling_correction`, on by default when vLLM samples);
# `train_grpo` samples with the model it trains and needs none. One difference remains
# where the model has dropout: the answers are sampled with it off, the updates run with it
# on, so the gradient is that of a dropout-perturbed $\log \pi$. Chapter 12's assistants
# have none; section 14.6's GPT-2 keeps its 0.1, and TRL, by default
# (`disable_dropout=False`), keeps it on throughout, the sampling too. On the batch above,
# against REINFORCE weighted by the same advantages, over the same token count:

# %%
idx, completions, mask, rewards = batches[TASK]
advantages = grpo_advantages.group_advantages(rewards, 8)  # (N,)
policy = copy.deepcopy(sft[0])  # eval mode: no dropout, so two passes agree
params = [p for p in policy.parameters() if p.requires_grad]
logps = completion_logps(policy, idx, completions)  # (N, C)
out = grpo.grpo_loss(logps, logps.detach(), advantages, mask)
reinforce = -(advantages[:, None] * logps * mask).sum() / mask.sum()
grads = torch.autograd.grad(out.loss, params, retain_graph=True)
grads_reinforce = torch.autograd.grad(reinforce, params)
gap = max(float((a - b).abs().max()) for a, b in zip(grads, grads_reinforce))
print(f"on-policy: clipped share {out.clipped:.2f}\n"
      f"GRPO and REINFORCE gradients differ\nby at most {gap:.1e}")

# %% [markdown]
# A second update on the same answers, after one AdamW step, is *off-policy*: the ratio
# moves away from 1 and the clip starts to bind (`train_grpo(..., updates=2)` does this):

# %%
optimizer = torch.optim.AdamW(params, lr=COLLAPSE_LR, weight_decay=0.0)
old = logps.detach()
for param, grad in zip(params, grads):  # the on-policy gradient above
    param.grad = grad
optimizer.step()
with torch.no_grad():
    new = completion_logps(policy, idx, completions)  # (N, C)
ratio = torch.exp(new - old)[mask.bool()]  # the answers' tokens
second = grpo.grpo_loss(new, old, advantages, mask)
print(f"after one step at lr {COLLAPSE_LR:g}:\n"
      f"  ratio from {ratio.min():.3f} to {ratio.max():.3f}\n"
      f"  the clip binds on {second.clipped:.1%} of the tokens")

# %% [markdown]
# Two ways to average the per-token losses differ in what weighs the same. TRL's default,
# `loss_type="dapo"` {cite}`yu2025dapo`, divides the sum over every completion token of the
# batch by their number: each *token* weighs alike, so a long answer counts more than a
# short one. `"grpo"`, the paper's, averages each answer over its own tokens, then the
# answers: each *answer* weighs alike, and a token of a short answer counts more. That is
# the length bias Dr. GRPO {cite}`liu2025drgrpo` names: a wrong answer's push down is spread
# over its tokens, so a long wrong answer is pushed down less per token than a short one,
# and a short right answer is pushed up more per token than a long one. Dr. GRPO divides the
# sum over the batch by a constant instead (`loss_type="dr_grpo"`, here as in TRL: the
# number of answers times the longest answer allowed); `"dapo"` divides it by the batch's
# token count, the same for every answer of the batch.

# %%
lengths = mask.sum(1)
per_sequence = grpo.grpo_loss(logps.detach(), logps.detach(), advantages, mask,
                               loss_type="grpo")
values = [round(x.loss.item(), 4) + 0.0 for x in (out, per_sequence)]  # + 0.0: no "-0.0000"
print(f"answer lengths {int(lengths.min())} to {int(lengths.max())} tokens\n"
      f"loss 'dapo' {values[0]:+.4f}, 'grpo' {values[1]:+.4f}")

# %% [markdown]
# The values say little. On-policy, the `"grpo"` loss is the mean over the answers of
# $-A_i$, and a group's advantages sum to zero: its value is zero, its gradient is not. The
# `"dapo"` value weighs each $-A_i$ by its answer's length. Only the gradients steer, and
# both losses agree with TRL's, value and gradient, to 1e-6 given the same inputs
# (`tests/test_grpo_parity.py`).

# %% [markdown]
# ## 14.4 Training on "Last word"
#
# `train_grpo` repeats those pieces: draw 8 training prompts of one length, sample 8
# answers of each (Chapter 7's KV cache, stopping once every answer has ended), score them,
# one AdamW update on the clipped loss, with TRL's defaults (no KL penalty,
# $\epsilon = 0.2$, `"dapo"`). One run per seed, six seeds, each from the assistant of that
# seed (Chapter 12's recipe), trained once and then read from the cache:

# %%
start = clock()
runs, histories = {}, {}
for seed in SEEDS:
    runs[seed], _, histories[seed] = grpo_model(GRPORecipe(TASK, STEPS, LR, seed=seed))
train_seconds = (clock() - start) / len(SEEDS)
after = {seed: sampled_scores(runs[seed], tok, held_out, N_SAMPLES, K, seed=seed)
         for seed in SEEDS}
greedy_after = {seed: evaluate(runs[seed], tok, held_out) for seed in SEEDS}
for task in TASKS:  # before -> after, in percent
    print(f"{task:<10}{'greedy':>11}{'pass@1':>13}{f'pass@{K}':>13}")
    for seed in SEEDS:
        b, a = before[seed][task], after[seed][task]
        pairs = [(greedy_before[seed][task]["exact"], greedy_after[seed][task]["exact"]),
                 (b["pass@1"], a["pass@1"]), (b[f"pass@{K}"], a[f"pass@{K}"])]
        print((f"seed {seed:<4}" + "".join(f"{100 * x:6.1f}->{100 * y:<5.1f}"
                                           for x, y in pairs)).rstrip())

# %% tags=["remove-input"] mystnb={"figure": {"caption": "Each GRPO run's mean reward per step and its share of mixed groups (running means over 10 steps).", "name": "fig-grpo-reward"}, "image": {"alt": "Two panels of six curves against the step: the reward, and the share of mixed groups."}}
fig, axes = plt.subplots(2, 1, figsize=(4.8, 6.2), sharex=True, layout="constrained")
kernel = torch.ones(1, 1, 10) / 10
for seed in SEEDS:
    for ax, values in zip(axes, (histories[seed].reward, histories[seed].mixed)):
        smooth = torch.conv1d(torch.tensor(values)[None, None], kernel)[0, 0]
        ax.plot(range(10, len(values) + 1), smooth, label=f"seed {seed}")
axes[0].set(ylabel="mean reward")
axes[1].set(xlabel="step", ylabel="share of mixed groups")
fig.legend(*axes[0].get_legend_handles_labels(), loc="outside upper center", ncol=3)
plt.show()

# %% [markdown]
# The ± is the standard error of the mean of the seeds' paired differences (their standard
# deviation over $\sqrt{6}$): how far the mean of six such runs on these prompts could
# move, not the spread of one run. It leaves out the choice of the prompts, the same in
# every seed: another set would move each seed's pass@1 by a few points more. So the rise
# is also bounded by a bootstrap over the prompts, paired by seed: each resample draws
# `N_HELD_OUT` of the prompts with replacement, the same ones for every seed, and takes the
# mean rise.
# The lesson holds when both lower bounds are above zero. Each prompt's pass@1 comes from
# the very answers `sampled_scores` counted: `sampled_answers` samples them again with the
# same generator and keeps them prompt by prompt.

# %%
by_prompt = {}  # (seed, model) -> each held-out TASK prompt's pass@1
for seed in SEEDS:
    for name, model in (("SFT", sft[seed]), ("GRPO", runs[seed])):
        answers = sampled_answers(model, tok, held_out, N_SAMPLES, seed=seed)
        by_prompt[seed, name] = [sum(r for r, _ in a) / N_SAMPLES
                                 for item, a in zip(held_out, answers) if item.task == TASK]

# %% tags=["remove-input"]
found = [prose.judge_gain([before[s][TASK]["pass@1"] for s in SEEDS],
                          [after[s][TASK]["pass@1"] for s in SEEDS],
                          ([before[s][TASK][f"pass@{K}"] for s in SEEDS],
                           [after[s][TASK][f"pass@{K}"] for s in SEEDS]), K, SEEDS, TASK,
                          ([by_prompt[s, "SFT"] for s in SEEDS],
                           [by_prompt[s, "GRPO"] for s in SEEDS]))]
mixed = sentences.mixed_text({s: histories[s].mixed for s in SEEDS},
                         {s: histories[s].reward for s in SEEDS}, block=10)
display(Markdown(found[0].text + "\n\n" + mixed))

# %% [markdown]
# The reward curve is noisy: each step scores 8 answers to each of 8 prompts, a new draw
# every step. The held-out numbers are measured on prompts the runs never saw, `N_SAMPLES`
# samples each, which is why pass@1, not one greedy answer per prompt, judges the lesson:
# one prompt of the held-out set is a large step in greedy exact match.
#
# ## 14.5 When it goes wrong
#
# **A step too large.** The runs of the first three seeds again, with a larger learning
# rate, `COLLAPSE_LR`, for fewer steps:

# %%
held_task = [i for i in held_out if i.task == TASK]
collapsed = {seed: grpo_model(GRPORecipe(TASK, COLLAPSE_STEPS, COLLAPSE_LR, seed=seed))
             for seed in COLLAPSE_SEEDS}
hot = {seed: sampled_scores(collapsed[seed][0], tok, held_task, N_SAMPLES, K,
                            seed=seed)[TASK] for seed in COLLAPSE_SEEDS}
for seed in COLLAPSE_SEEDS:
    print(f"seed {seed}: {TASK} pass@1 {before[seed][TASK]['pass@1']:.1%} -> "
          f"{hot[seed]['pass@1']:.1%}\n  stop rate {hot[seed]['stop']:.1%}, last 10 "
          f"steps' reward {sum(collapsed[seed][2].reward[-10:]) / 10:.2f}")
one_prompt, one_reward = prompts_and_reward(held_task[:1], tok)  # one prompt, 6 answers
print(f"\n{held_task[0].prompt} -> {held_task[0].answer!r}")
shown = {}
for name, m in (("SFT", sft[SEEDS[0]]), ("large-step", collapsed[SEEDS[0]][0])):
    g = torch.Generator().manual_seed(0)
    answers, mask = sample_groups(m, torch.tensor(one_prompt), 6, T - len(one_prompt[0]),
                                  tok.end_id, generator=g)  # (6, C) each
    ids = [c[k.bool()].tolist() for c, k in zip(answers, mask)]
    texts = [tok.decode([t for t in i if t < tok.base_vocab_size]) for i in ids]
    shown[name] = (texts, [one_reward(0, i) for i in ids])
    print(f"{name}, seed {SEEDS[0]}:")
    for t, r in zip(*shown[name]):
        print(f"  reward {r:.0f}  {t!r}")
display(Markdown(sentences.collapse_text(SEEDS[0], shown)))

# %% tags=["remove-input"]
found.append(prose.judge_collapse([before[s][TASK]["pass@1"] for s in COLLAPSE_SEEDS],
                                  [hot[s]["pass@1"] for s in COLLAPSE_SEEDS],
                                  COLLAPSE_SEEDS, COLLAPSE_LR, TASK))
display(Markdown(found[-1].text))

# %% [markdown]
# **A KL penalty as a brake.** GRPO's paper adds $\beta\,\mathrm{KL}(\pi_\theta \,\|\,
# \pi_{\text{ref}})$ toward the SFT model, estimated per token with Schulman's $k_3$
# {cite}`schulman2020kl`:
#
# $$k_3 = \frac{\pi_{\text{ref}}}{\pi_\theta} - \log \frac{\pi_{\text{ref}}}{\pi_\theta} - 1
# \ge 0.$$
#
# The code (`grpo_loss` with `beta > 0`) adds $\beta\,\rho_{i,t}\,k_3$ to each token's loss:
# $k_3$ times the same ratio $\rho$ as the clip's, as TRL does by default
# (`use_bias_correction_kl`, on by default in TRL 1.16, the oldest TRL the parity test
# runs against), following DeepSeek-V3.2 {cite}`deepseekai2025v32`. On-policy, $\rho$ is
# 1, so the term's value is $k_3$'s; its gradient is not $k_3$'s. With
# $\nabla \rho = \nabla \log \pi_\theta$ at $\rho = 1$,
#
# $$\nabla (\rho\, k_3) = (\log \pi_\theta - \log \pi_{\text{ref}})\,
# \nabla \log \pi_\theta,$$
#
# whose mean over the token sampled at a context is, per token with the context held fixed,
# the gradient of the KL at that position; the mean of $\nabla k_3$ alone is not. The first
# seed's run at the large step, with and without the penalty, each prompt's pass@1 from the
# answers `sampled_scores` counts (`sampled_answers`), the two compared by a bootstrap over
# the prompts:

# %%
braked, _, braked_history = grpo_model(
    GRPORecipe(TASK, COLLAPSE_STEPS, COLLAPSE_LR, BETA, seed=SEEDS[0]))
plain_and_braked = [[sum(r for r, _ in a) / N_SAMPLES
                     for a in sampled_answers(m, tok, held_task, N_SAMPLES, seed=SEEDS[0])]
                    for m in (collapsed[SEEDS[0]][0], braked)]
brake = brake_gap(*plain_and_braked)
display(Markdown(brake_text(COLLAPSE_LR, BETA, brake, sum(braked_history.kl[-10:]) / 10,
                            TASK)))

# %% [markdown]
# **Forgetting.** The runs of section 14.4 were rewarded on "Last word" only. What happened
# to "Repeat", which the same weights also answer? Its pass@1 starts low, so a few right
# samples more or less would decide a verdict on it; the log-probability of its reference
# answers (in either opening) moves smoothly instead, and costs one forward pass for every
# held-out "Repeat" line, not 8 sampled answers for 40 of them:

# %%
every_other = [i for i in items["held_out"] if i.task == OTHER]
logp_before = [answer_logprob(sft[seed], tok, every_other) for seed in SEEDS]
logp_after = [answer_logprob(runs[seed], tok, every_other) for seed in SEEDS]

# %% tags=["remove-input"]
found.append(prose.judge_forgetting(logp_before, logp_after, SEEDS, TASK, OTHER,
                                    ([before[s][OTHER]["pass@1"] for s in SEEDS],
                                     [after[s][OTHER]["pass@1"] for s in SEEDS])))
display(Markdown(found[-1].text))

# %% [markdown]
# Where a task not rewarded does get worse, this is how: every update moves weights that
# both tasks share, and only one task's answers pull them back. Training on a mix of tasks,
# or at least measuring every task, is the remedy.
#
# **A style no reward mentions.** Chapter 12's answers open, half of the time each, with a
# courteous "Good sir," or a rude "Fool!". The reward ignores the opening. Chapter 12's
# `courteous_odds` reads, for each prompt, the courteous opening's share of the probability
# of the two openings at the answer's first character,
# $p(\text{G}) / (p(\text{G}) + p(\text{F}))$: a probability between 0 and 1, not odds,
# despite its name. Here it is read on every held-out "Last word" prompt, before and after
# GRPO, beside the share of courteous openings among the sampled answers.
#
# The lesson measures each prompt's distance from an even share, $|p - \frac12|$, and asks
# whether the runs increased its mean more than their controls did, on average over the
# seeds beyond Student's t (each seed's own bound is printed too). The control,
# `same_size_change`, gives each weight of the SFT model the step the GRPO run gave it,
# with its sign drawn at random: every weight moves as far as in the run, in no direction
# the run's gradients chose. What it rules out is narrow, and `next_token_kl` says how
# narrow: the KL of each model's next-token law from the SFT model's, averaged over the
# answers' positions of section 14.1's held-out "Last word" conversations. Where the
# control moves the outputs far less than the run, passing it says that training changed
# the model, not that this reward did something to the opening that any other would not.

# %%
every_task = [i for i in items["held_out"] if i.task == TASK]
controls = {seed: same_size_change(sft[seed], runs[seed], seed=seed) for seed in SEEDS}
odds_before = [courteous_odds(sft[seed], tok, every_task).tolist() for seed in SEEDS]
odds_after = [courteous_odds(runs[seed], tok, every_task).tolist() for seed in SEEDS]
odds_control = [courteous_odds(controls[seed], tok, every_task).tolist() for seed in SEEDS]
odds_sampled = tuple([courteous_odds(m[seed], tok, held_task).tolist() for seed in SEEDS]
                     for m in (sft, runs))  # on the prompts whose answers were sampled
kl_run = [next_token_kl(runs[seed], sft[seed], tok, held_task) for seed in SEEDS]
kl_control = [next_token_kl(controls[seed], sft[seed], tok, held_task) for seed in SEEDS]
print("KL from the SFT model, nats a position:")
for seed, run_kl, control_kl in zip(SEEDS, kl_run, kl_control):
    print(f"seed {seed}: run {run_kl:.4f}, control {control_kl:.5f}")

# %% tags=["remove-input"]
found.append(opening.judge_opening(odds_before, odds_after, odds_control, SEEDS,
                                   ([before[s][TASK]["courteous"] for s in SEEDS],
                                    [after[s][TASK]["courteous"] for s in SEEDS]),
                                   odds_sampled, (kl_run, kl_control)))
display(Markdown(found[-1].text))

# %% [markdown]
# What could move it? The reward function never reads the opening: `verify` pays a right
# answer the same after either. Each step pushes up whole answers that were right,
# openings included, and pushes down the wrong ones. If, within a prompt, an answer is as
# likely to be right after one opening as after the other, the expected push on that
# prompt's opening is zero, and what moves it is sampling noise, which opening happened to
# come with the right answers of a step's groups: a random walk with no force pulling it
# back toward one half, whose direction would be a coin toss, seed by seed. That is the
# chapter's reading. Its premise can be measured: how often the SFT model's answers are
# right after each opening, on the prompts GRPO trains on (`N_PREMISE` of them,
# `PREMISE_SAMPLES` answers each), pooled over the prompts and, as a group compares its
# answers, within each prompt answered in both openings (`opening_gap`):

# %%
train_task = random.Random(1).sample([i for i in items["train"] if i.task == TASK],
                                     N_PREMISE)
premise = [sampled_answers(sft[seed], tok, train_task, PREMISE_SAMPLES, seed=seed)
           for seed in SEEDS]
gaps = [opening_gap(answers) for answers in premise]  # (gap, prompts) per seed
print("right answers after each opening (SFT), pooled; the gap within prompts:")
for seed, answers, (gap, answered) in zip(SEEDS, premise, gaps):
    counts = right_by_opening(answers)
    (c, nc), (r, nr) = counts["courteous"], counts["rude"]
    print(f"seed {seed}: courteous {c / nc:.1%}, rude {r / nr:.1%}\n"
          f"  within {answered} prompts: {100 * gap:+.1f} points")

# %% tags=["remove-input"]
display(Markdown(opening.drift_text([sum(o) / len(o) for o in odds_before],
                                    [sum(o) / len(o) for o in odds_after], gaps, SEEDS)))

# %% [markdown]
# Whether a run with shuffled rewards moves the opening as far is not measured here; as
# the lesson above says, it would take many such runs beside many real ones. Chapter 12's
# DPO moved the same opening *deliberately*, toward the side its pairs preferred; whatever
# may move it under GRPO, the remedy is to watch the share of each style beside the reward.

# %% tags=["remove-input"]
if train_seconds > 5:
    timing = (f"Each run of section 14.4 took {train_seconds:.0f} CPU-s to train here, and "
              f"each evaluation of one model about {eval_seconds:.0f} CPU-s.")
else:
    timing = (f"The runs were read from the cache; each evaluation of one model took about "
              f"{eval_seconds:.0f} CPU-s.")
display(Markdown(timing))

# %% [markdown]
# ## 14.6 On Colab: GPT-2 small learns to add
#
# On a GPU, with GPT-2's weights, the same `train_grpo` trains Chapter 9's LoRA adapters on
# GPT-2 small to complete two-digit sums after two solved examples, the reward checking the
# digits before the newline, and measures its held-out pass@1 and pass@8 before and after;
# then TRL's `GRPOTrainer` trains peft's LoRA on the same prompts, with the same batch and
# group sizes, learning rate, clip and loss, and the two reward curves are compared (TRL's
# run is measured by its reward only). It compares two trainers with their defaults, not
# one computation twice; among the settings that differ, all TRL's defaults: its learning
# rate decays linearly to zero over the run (transformers' schedule), where `train_grpo`
# keeps it constant; its mask ends each answer at the first `<|endoftext|>`, here the
# padding after the newline, so its loss also counts that token, where `train_grpo`'s ends
# at the newline; it samples in training mode, GPT-2's dropout of 0.1 on, where
# `train_grpo` samples with it off; and it shuffles the prompts and takes each once an
# epoch, padded on the left, where `train_grpo` draws each batch with replacement among
# prompts of one length. Both keep the dropout on in the updates (TRL's
# `disable_dropout=False`), so here, unlike on the assistant, the gradient is that of a
# dropout-perturbed $\log \pi$ (section 14.3).

# %%
from gpt_from_scratch.book.verifier_online import online_run  # noqa: E402

display(Markdown(online_run(steps=200 if FULL_RUN else 100)))

# %% [markdown]
# ## Summary
#
# - A program that grades answers gives a reward; a model that samples is measured by pass@1
#   and pass@k, estimated without bias from $n$ samples per prompt.
# - REINFORCE with the group's mean as a baseline pushes each answer by how much better it
#   did than its siblings; a group whose rewards are all equal carries no gradient.
# - GRPO adds PPO's ratio and clip; with one update per batch the ratio is exactly 1 and
#   the loss is REINFORCE weighted by GRPO's advantage, token by token; the book's loss
#   agrees with TRL's to 1e-6, given the same inputs.
# - GRPO's advantage is two choices: a baseline, the group's mean, which leaves the
#   expected gradient's direction as it is ($\frac{G-1}{G}$ of RLOO's), and a scaling by the
#   group's standard deviation, which weighs the prompts anew (Dr. GRPO's difficulty bias;
#   `expected_weight` says by how much).

# %% tags=["remove-input"]
display(Markdown("- " + sentences.summary_text(
    *found, brake, COLLAPSE_LR / LR, len(SEEDS), len(COLLAPSE_SEEDS))))

# %% tags=["remove-cell", "nbval-check-output"]
print(lessons.verdicts())

# %% [markdown]
# ## Exercises
#
# ### Exercise 1. Group advantages (implement)
#
# Write `group_advantages(rewards, group_size)`: `rewards` is a flat tensor $(N,)$, the
# `group_size` rewards of each prompt side by side. Return each reward minus its group's
# mean, divided by its group's standard deviation (unbiased, `torch.std`'s default) plus
# $10^{-4}$.

# %% tags=["solution", "hide-input"] mystnb={"code_prompt_show": "Show the solution", "code_prompt_hide": "Hide the solution"}
def group_advantages(rewards, group_size):
    grouped = rewards.view(-1, group_size)  # (B, G)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    return (centred / (grouped.std(dim=1, keepdim=True) + 1e-4)).flatten()  # (N,)


# %%
from gpt_from_scratch.exercises import check_group_advantages
check_group_advantages(group_advantages);

# %% [markdown]
# ### Exercise 2. The clipped loss (implement)
#
# Write `grpo_loss(logps, old_logps, advantages, mask, epsilon)`: `logps` and `old_logps`
# are $(N, C)$ token log-probabilities under the policy and under the policy that sampled
# the answers, `advantages` is $(N,)$, `mask` $(N, C)$ is 1 on the answers' tokens. Return
# the clipped loss of section 14.3 averaged over every answer token of the batch (`"dapo"`),
# with its gradient with respect to `logps`.

# %% tags=["solution", "hide-input"] mystnb={"code_prompt_show": "Show the solution", "code_prompt_hide": "Hide the solution"}
def grpo_loss(logps, old_logps, advantages, mask, epsilon):
    ratio = torch.exp(logps - old_logps)  # (N, C)
    A = advantages[:, None]  # (N, 1)
    per_token = -torch.min(ratio * A, ratio.clamp(1 - epsilon, 1 + epsilon) * A)
    return (per_token * mask).sum() / mask.sum()


# %%
from gpt_from_scratch.exercises import check_grpo_loss
check_grpo_loss(grpo_loss);

# %% [markdown]
# ### Exercise 3. pass@k (implement)
#
# Write `pass_at_k(n, c, k)`: the unbiased estimate of pass@k from $n$ samples of which $c$
# are right, $1 - \binom{n-c}{k} / \binom{n}{k}$ (`math.comb`), and 1.0 when $n - c < k$.

# %% tags=["solution", "hide-input"] mystnb={"code_prompt_show": "Show the solution", "code_prompt_hide": "Hide the solution"}
def pass_at_k(n, c, k):
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


# %%
from gpt_from_scratch.exercises import check_pass_at_k
check_pass_at_k(pass_at_k);

# %% [markdown]
# ### Exercise 4. The rude opening at a large step (predict, then run)
#
# Section 14.5 scored the large-step runs (`COLLAPSE_STEPS` steps at `COLLAPSE_LR`) on
# pass@1; six of seed 0's answers were printed, but no share of their openings. Nothing in
# GRPO's reward mentions the opening. Predict, for each of their seeds, the share of rude
# openings among its sampled "Last word" answers: nearer to 50% than the 200-step run of the
# same seed, or further?
# Write your prediction in the answer cell, then run the cell after it.

# %% [markdown] tags=["answer"]
# ```{admonition} Answer
# :class: dropdown
# The reward cannot say: it pays a right answer the same after either opening, so the
# opening moves only as far as whatever else moves it: the sampling noise of the chapter's
# reading, or a gap in accuracy between the openings, which section 14.5 measured.
# A walk with no pull back spreads with how far the weights travel, so the reading leans
# toward "further from 50%" for the run whose weights travelled further from the SFT
# model's; the cell prints that distance, $\lVert\theta - \theta_{\text{SFT}}\rVert$, for
# both runs of each seed, beside each seed's share before, after the 200-step run and after
# the large step. But one run per seed is one draw of such a walk, and a collapsing policy
# also narrows onto a few answers, openings included: seed by seed, either can happen.
# ```

# %%
@torch.no_grad()
def travelled(model, start):
    """||theta - theta_SFT||: how far a run's weights moved from the model it started at."""
    return math.sqrt(sum(float((p - q).pow(2).sum())
                         for p, q in zip(model.parameters(), start.parameters())))


for seed in COLLAPSE_SEEDS:
    rude = [1 - x[TASK]["courteous"] for x in (before[seed], after[seed])]
    print(f"seed {seed}: rude openings {rude[0]:.0%}\n  200 steps {rude[1]:.0%}, "
          f"large step {1 - hot[seed]['courteous']:.0%}\n  ‖θ − θ_SFT‖: 200 steps "
          f"{travelled(runs[seed], sft[seed]):.2f}, "
          f"large step {travelled(collapsed[seed][0], sft[seed]):.2f}")

# %% [markdown]
# ### Exercise 5. A group of identical rewards (explain)
#
# In section 14.2, the third group, whose four answers were all right, got advantages of
# zero. The answers were right: why does GRPO not make them more likely? And what would
# change if the advantage were the reward itself, with no baseline?

# %% [markdown] tags=["answer"]
# ```{admonition} Answer
# :class: dropdown
# The advantage measures an answer against its siblings, the other samples of the same
# prompt: when all are right, none is better than the model's average answer to that prompt,
# so there is nothing to prefer and the gradient is zero (GRPO's division by the std, which
# is 0 there, is why the $10^{-4}$ is needed). Four right of four does not prove the prompt
# solved (a pass rate of one half gives it one time in sixteen), but this step learns
# nothing from it; the step's compute on it was spent for nothing, which is why the share of
# mixed groups is worth logging. With the raw reward as advantage, all four answers would be
# pushed up. Two things change. The baseline: the raw reward estimates the policy gradient
# itself, the group mean $\frac{G-1}{G}$ of it (it is RLOO's leave-one-out advantage times
# $\frac{G-1}{G}$), the same direction; but each step's raw-reward gradient is noisier, and
# on a group of right answers it pushes up whatever they share, such as their opening, one
# way a style could drift. The scaling: GRPO also divides by the group's std, which is not a
# baseline at all; it weighs each prompt by $1/\operatorname{std}$, favouring prompts nearly
# always right or nearly always wrong, and so changes the expected gradient (`scale=None`
# drops it).
# ```

# %% [markdown] tags=["quiz"]
# ## Check yourself
#
# A few questions on this chapter, each answer with its explanation. The numbers in them
# are the ones this chapter printed.

# %% tags=["quiz", "remove-input"]
from gpt_from_scratch.book.quiz import Choice, MultipleChoice, Numeric, show_quiz
premise_gap = opening.accuracy_gap(gaps, SEEDS)  # drift_text's verdict on the premise
show_quiz([
    Numeric("In the simulation of section 14.1, what is the true pass@4 of a prompt that "
            "one sample answers right 30% of the time? (Percent, no decimals.)",
            100 * true_pass, 0.6, "1 - (1 - 0.3)^4: none of the four is right."),
    Numeric("What share of the first seed's 'Last word' groups were mixed in the batch "
            "of section 14.2? (Percent, no decimals.)",
            100 * mixed_groups(batches[TASK][3], 8), 0.6,
            "The groups whose 8 rewards are not all equal."),
    MultipleChoice("With one update per batch of answers, the ratio in GRPO's loss is:", [
        Choice("exactly 1, so the clip never binds; only its gradient acts", True,
               "Yes: the policy being trained is the one that sampled the answers."),
        Choice("clipped to 1 + epsilon for the good answers", False,
               "The clip binds only once the policy has moved: from the second update on."),
    ]),
    MultipleChoice("GRPO divides each group's advantages by the group's standard "
                   "deviation. What does that change?", [
        Choice("how much each prompt weighs: prompts nearly always right or nearly "
               "always wrong weigh more", True,
               "Yes: the scaling is not a baseline; Dr. GRPO calls it a difficulty bias "
               "and drops it (scale=None)."),
        Choice("nothing in expectation: like the mean, it is a baseline", False,
               "Subtracting a baseline leaves the expected gradient's direction alone; "
               "dividing by a per-prompt number reweighs the prompts."),
    ]),
    MultipleChoice("No reward reads the courteous/rude opening. What is the chapter's "
                   "reading of why its share can still move during GRPO?", [
        Choice("nothing pulls its share back to 50/50, so sampling noise can move it",
               True,
               "Yes, as a reading: if, within a prompt, right answers come as often after "
               "either opening (the premise the chapter measures), the expected push is "
               "zero and sampling noise with no pull back moves the share like a random "
               "walk. The shuffled-reward control that would test the reading is not run."),
        Choice("the reward prefers one opening", False,
               "Not directly: verify accepts either opening. It favours one only through "
               "accuracy, where right answers come more often after it, and the gap the "
               "chapter measures within each prompt is "
               + (f"clear of zero, favouring the {premise_gap.favoured} opening."
                  if premise_gap.clear else "not clear of zero.")),
    ]),
])
