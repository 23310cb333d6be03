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
# (ch-inside)=
# # 13. Looking inside the assistant
#
# {ref}`ch-gpt2-weights` showed *where* heads look: attention maps, previous-token heads, an
# induction head trained to be seen, and one ablation in its Exercise 4. This chapter asks
# what
# the heads *do* with what they see, on the assistant of {ref}`ch-assistant`, which learned
# to
# repeat a line of the play after "Repeat:". Five tools, each a few lines on top of
# PyTorch's
# forward hooks, checked against the field's references where the tests can
# (`tests/test_interp_parity.py`). The activations, the logit lens and the denoising shares
# equal those of TransformerLens's `TransformerBridge` {cite}`nanda2022transformerlens` on
# the
# same weights. The heads' direct attributions equal TransformerLens's own,
# `stack_head_results` read through `logit_attrs`, with the final LayerNorm's γ folded into
# the unembedding. Mean and resample ablation equal TransformerLens hooks that write the
# same
# replacement into its `hook_z`, each role's mean taken from its own cache: a check of the
# hook plumbing, since both sides average the same way. Noising, heads patched together and
# the attribution's bias term are not compared with TransformerLens. nnsight
# {cite}`fiottokaufman2025nnsight`, wrapped around the book's own `GPT`, reads and patches
# the same values to the bit: a check of the hooks, on the same module. Zero ablation is
# checked against its definition (`tests/test_patching.py`: zeroing a head is zeroing its
# columns of `c_proj`, as Chapter 8 did).
#
# 1. **hooks** that read and overwrite six activations of every block;
# 2. **the logit lens**: the residual stream read out after each block;
# 3. **direct logit attribution**: what each head adds to the answer's logit;
# 4. **ablation**: a head removed three ways, and why zeroing it misleads;
# 5. **activation patching**: one head's output moved from a clean run into a corrupted one
#    (denoising: is it enough?) or back (noising: is it needed?).
#
# The models are Chapter 12's three fine-tuned runs, cached when first trained; on Colab,
# the
# last section looks at GPT-2 small.

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
import random
import time

import matplotlib.pyplot as plt
import torch
from IPython.display import Markdown, display

from gpt_from_scratch import ablation, interp, patching
from gpt_from_scratch.data import load_tiny_shakespeare
from gpt_from_scratch.book import inside, inside_figure, inside_prose, patching_prose
from gpt_from_scratch.book import lessons
from gpt_from_scratch.book.assistant import task_items
from gpt_from_scratch.book.assistant_runs import SFTRecipe, sft_run
from gpt_from_scratch.book.figure_text import book_figures

book_figures()  # sharp on high-density screens, each PNG records its smallest text
torch.set_printoptions(precision=3, sci_mode=False)

FULL_RUN = False
clock = time.process_time  # CPU seconds: other programs on the machine do not inflate them
SEEDS = (0, 1, 2)  # Chapter 12's fine-tuning runs
N_PAIRS = 60  # clean/corrupted pairs of held-out "Repeat:" lines

# %% [markdown]
# ## 13.1 Hooks: reading and overwriting activations
#
# PyTorch calls a *forward hook* with a module's input and output, and uses what the hook
# returns instead. `interp.run_with_hooks` places such hooks on the book's `GPT` for the
# activations it is asked for, named as TransformerLens names them: `blocks.{l}.resid_pre`
# and `resid_post` (the residual stream entering and leaving block $l$), `attn.pattern`
# $(B, H, T, T)$, `attn.z` $(B, T, H, d_k)$ (each head's output before `c_proj`: the place
# Chapter 8's Exercise 4 zeroed a head), `attn_out` and `mlp_out`. It returns the logits and
# what it read; each `edit` is a function from an activation to what the model uses instead.

# %% tags=["nbval-check-output"]
# Chapter 12's runs, trained once and then cached:
runs = {seed: sft_run(SFTRecipe(seed=seed)) for seed in SEEDS}
models = {seed: run.model for seed, run in runs.items()}
tok = runs[SEEDS[0]].tokenizer
model = models[SEEDS[0]]
held_out = task_items(load_tiny_shakespeare())["held_out"]
random.Random(0).shuffle(held_out)
pairs = inside.repeat_pairs(held_out, tok, N_PAIRS)
logits, cache = interp.run_with_hooks(
    model, pairs.clean, read=["blocks.1.attn.z", "blocks.1.attn.pattern"])
print("clean and corrupted pairs (B, T):", tuple(pairs.clean.shape))
print("blocks.1.attn.z (B, T, H, d_k):", tuple(cache["blocks.1.attn.z"].shape))
print("blocks.1.attn.pattern (B, H, T, T):")
print(" ", tuple(cache["blocks.1.attn.pattern"].shape))
print("reading changes nothing:", torch.equal(logits, model(pairs.clean)[0]))
for run in (pairs.clean, pairs.corrupted):  # one conversation, its turns on two lines
    turns = tok.decode(run[0].tolist()).replace("<|pad|>", "")
    print(turns.replace("<|assistant|>", "\n<|assistant|>"))
every_length = inside.repeat_lengths(held_out, tok)  # of every held-out Repeat line
display(Markdown(inside_prose.lengths_text(  # pairs.copy.sum(1): each pair's line length
    pairs.copy.sum(1).tolist(), every_length, N_PAIRS, "characters")))

# %% [markdown]
# Each pair holds two held-out lines of the same length. The *clean* conversation asks to
# repeat line A and answers it courteously; the *corrupted* one asks for line B and carries
# the
# same answer A. Read with the model's own next-token probabilities (teacher forcing), the
# answer's characters are likely in the clean run, where A is in the prompt to copy, and
# unlikely in the corrupted one. The metric is the mean log-probability of A's characters in
# the answer, in nats: a log-probability first, because greedy exact match flips on
# near-ties.

# %%
metric = inside.copy_logprob(pairs)
gaps = {}
print("nats a character, clean and corrupted:")
for seed, m in models.items():
    with torch.no_grad():
        gaps[seed] = tuple(float(metric(m(x)[0])) for x in (pairs.clean, pairs.corrupted))
    print(f"seed {seed}: {gaps[seed][0]:.3f}, {gaps[seed][1]:.3f}")

# %% [markdown]
# ## 13.2 The logit lens
#
# The residual stream carries one vector per position from block to block, and only the last
# is
# read out, through `ln_f` and the output layer. The *logit lens*
# {cite}`nostalgebraist2020lens`
# reads each block's residual stream the same way, as if the model stopped there.
# `interp.logit_lens` returns $(L, B, T, V)$; its last layer is the model's own logits. The
# share of A's characters in the answer that each read-out ranks first, on the clean
# conversations and, as a control, on the corrupted ones, whose prompt holds line B. The
# last block predicts better than the first almost by construction; the control asks
# whether the rise needs the line in the prompt. It is not a neutral control: there the
# model copies line B, so A's characters may lose ground with depth rather than merely not
# gain it. The lens reads early blocks through a read-out trained for the last; the *tuned
# lens* {cite}`belrose2023tuned` trains one per block, and finds the plain lens's
# early read-outs biased: what the first blocks hold may be more than their shares show.
#
# In the HTML edition, the panel below runs Chapter 6's character model (the base of these
# assistants) on a text of yours, in your browser: each head's attention pattern (queries
# down, keys across; pick the layer, the head and the position), and the logit lens at that
# position, each block's top three read-outs of the next character.
#
# <div class="live-model" data-model="shakespeare-char" data-mode="inside"></div>

# %%
lens = {seed: inside.lens_top1(m, pairs) for seed, m in models.items()}
control = {seed: inside.lens_top1(m, pairs, "corrupted") for seed, m in models.items()}
print("share of A's characters ranked first,")
print("after blocks 1 to 4:")
for seed in SEEDS:
    for run, share in (("clean", lens[seed]), ("corrupted", control[seed])):
        print(f"seed {seed}, {run:<9}: " + " ".join(f"{s:4.0%}" for s in share))
lens_found = inside_prose.lens_lesson(
    [(float(lens[s][0]), float(lens[s][-1])) for s in SEEDS],
    [(float(control[s][0]), float(control[s][-1])) for s in SEEDS])
display(Markdown(lens_found.text))

# %% [markdown]
# ## 13.3 Direct logit attribution
#
# `ln_f` divides each position by its standard deviation σ and scales by γ; with σ frozen at
# its
# value in the run, the read-out is linear in the residual stream, which is a sum: the
# embeddings, each head's output $z_h W_O^h$, each MLP's output and the biases
# {cite}`elhage2021mathematical`. Each part's *direct* contribution to the logit of the next
# character is its centred vector over σ, times γ, times that character's row of the output
# layer. The parts add up to the logit:

# %%
dla = interp.direct_logit_attribution(model, pairs.clean, pairs.target)
with torch.no_grad():
    logit = model(pairs.clean)[0].gather(-1, pairs.target[..., None])[..., 0]  # (B, T)
print(f"parts minus logit: at most {float((dla.total() - logit).abs().max()):.1e}")
heads_dla = dla.heads[:, :, pairs.copy].mean(-1)  # (L, H): mean over the copied characters
print("each head's direct contribution to the")
print("copied characters' logits (layer x head):")
print(heads_dla)
display(Markdown(inside_prose.attribution_text(heads_dla)))

# %% [markdown]
# Direct attribution sees only the last step: a head of layer 0 can move the line's
# characters where a later head finds them, and so act through that head, which attribution
# credits, not on the logit itself. Intervening on the heads, in the next section, answers
# the causal question: which head the copy needs.
#
# The logit lens and attribution read the final LayerNorm differently. The lens applies
# `ln_f` in full to each block's residual stream, centred and divided by *that* stream's own
# σ, as if it were the last. Attribution divides every part by the σ of the last stream, the
# one the model used, frozen: that is what makes the read-out linear and the parts add up.
# The logit attributed is the raw one, not centred over the vocabulary: a part that raises
# every character's logit alike counts here, though it leaves the probabilities as they are.
#
# ## 13.4 Ablation: zero, mean, resample
#
# To *ablate* a head is to replace its output and watch what breaks
# {cite}`zhang2024patching`. Zeroing it (Chapter 8's Exercise 4) hands the next layers a
# vector they never saw in training. *Mean ablation*
# replaces it by its average over many inputs; but an average of what? The lines differ in
# length and the conversations are padded at the right to the longest, so one position holds
# a character of the answer in one row, the opening's comma in another and padding in a
# third:
# the mean over the rows at each position mixes places that play different parts. Wang et
# al.
# {cite}`wang2023ioi` ablate a head by its mean over a reference set of sentences, and
# ARENA's
# exercises {cite}`mcdougall2024arenaioi` take that mean separately for each template, whose
# positions line up (`compute_means_by_template`). Here `pairs.roles` numbers each position
# by what it is: the prompt's
# $k$-th character, the line's $k$-th, the turn markers and the opening, the answer's
# $k$-th,
# the end, and −1 for padding, which no mean includes and mean ablation leaves as it is.
# Mean ablation (`ablation.ablate_heads(..., "mean", roles=pairs.roles)`) puts at each
# position the head's mean over the *other* positions of the same role, so that a row's own
# output is no part of what replaces it. *Resample ablation* {cite}`chan2022scrubbing`
# takes
# the head's output from another input instead, here the corrupted conversation, whose turns
# sit at the same positions. Each ablation is measured twice: on the copied line, and on the
# courteous
# opening, which no line changes, so that a cost there is not the head's part in copying; in
# each of the three runs, of which the tables show seed 0's.

# %%
opening = inside.copy_logprob(pairs, "opening")  # the courteous opening: no line changes it
how_to = {"zero": {}, "mean": {"roles": pairs.roles},
          "resample": {"reference": pairs.corrupted}}
T = pairs.clean.shape[1]  # coarser means, for zeroing's worst head:
coarse = {"over all positions": torch.where(pairs.roles >= 0, 0, -1),
          "at each position": torch.where(pairs.roles >= 0, torch.arange(T), -1)}
drops, other_means, worst = {}, {}, {}
for seed, m in models.items():
    with torch.no_grad():
        before = {"copy": float(metric(m(pairs.clean)[0])),
                  "opening": float(opening(m(pairs.clean)[0]))}
    drops[seed] = {"copy": {}, "opening": {}}
    for how, given in how_to.items():
        ablated = [[ablation.ablate_heads(m, pairs.clean, [(l, h)], how, **given)
                    for h in range(m.config.n_heads)]
                   for l in range(m.config.n_layers)]  # one run per head, (L, H)
        for part, measure in (("copy", metric), ("opening", opening)):
            drops[seed][part][how] = torch.tensor(
                [[before[part] - float(measure(x)) for x in row] for row in ablated])
    worst[seed] = divmod(int(drops[seed]["copy"]["zero"].argmax()), m.config.n_heads)
    other_means[seed] = {
        where: before["opening"] - float(opening(ablation.ablate_heads(
            m, pairs.clean, [worst[seed]], "mean", roles=roles)))
        for where, roles in coarse.items()}

print(f"seed {SEEDS[0]}, nats lost a character on the line")
for how in how_to:
    print(f"{how} ablation (layer x head):")
    print(drops[SEEDS[0]]["copy"][how])
print("\nnats lost a character on the opening, by")
print("the head whose zeroing costs the copy most:")
print("seed head  zero   all  each  role")
for seed in SEEDS:
    on_opening = drops[seed]["opening"]
    costs = [on_opening["zero"][worst[seed]], *other_means[seed].values(),
             on_opening["mean"][worst[seed]]]
    name = "L{}H{}".format(*worst[seed])
    print(f"{seed:<4} {name} " + " ".join(f"{inside.two(c):>5}" for c in costs))
resampled = max(float(drops[s]["opening"]["resample"].max()) for s in SEEDS)
print(f"resampling's worst cost to the opening: {resampled:.1g}")

worst = worst[SEEDS[0]]  # seed 0's: how far its output lies from its role's mean
z = interp.run_with_hooks(model, pairs.clean, read=[f"blocks.{worst[0]}.attn.z"])[1]
z = z[f"blocks.{worst[0]}.attn.z"][:, :, worst[1]]  # (B, T, d_k)
off = (z - ablation.role_means(z, pairs.roles, exclude_self=True)).norm(dim=-1)
off = off / z.norm(dim=-1)  # (B, T): the share of its norm, as the ablation replaces it
apart = (float(off[pairs.opening].mean()), float(off[pairs.copy].mean()))
print(f"\nseed {SEEDS[0]}, L{worst[0]}H{worst[1]}'s distance from its role's")
print(f"mean, share of its norm: opening {apart[0]:.2f}, "
      f"line {apart[1]:.2f}")
excess = inside.resampling_excess(model, pairs)  # (1000, L, H): over resamples of the pairs
worse = inside_prose.worse_than_removal(drops[SEEDS[0]]["copy"], excess)
found_ablation = inside_prose.ablation_lesson(
    {s: drops[s]["copy"] for s in SEEDS}, {s: drops[s]["opening"] for s in SEEDS},
    other_means, apart, worse)
display(Markdown(found_ablation.text))

# %% [markdown]
# Mean ablation by role replaces what the head says about this row by what it says on
# average at that role. Resampling from the corrupted conversation does not remove what the
# other line changes: it puts the other line's information in its place, which the next
# layers read as they would the clean one. Resampling with the corrupted inputs as reference
# is one direction of the next section's experiment: patching the other way round.

# %% [markdown]
# ## 13.5 Activation patching: which heads copy?
#
# Patching asks the sharper question {cite}`vig2020causal,meng2022locating`: run the
# *corrupted* conversation, and replace one head's output by its value in the *clean* run.
# If the answer's characters become likely
# again, that head carries the information that makes the difference. The share of the
# clean–corrupted gap it restores is
#
# $$\text{share} = \frac{m(\text{patched}) - m(\text{corrupted})}{m(\text{clean}) - m(\text{corrupted})}.$$
#
# This direction is *denoising* {cite}`heimersheim2024patching`: a head scores high when its
# clean output is enough, by itself, to bring the answer back. The metric is a
# log-probability: not a probability, which Zhang and Nanda {cite}`zhang2024patching` show
# can hide a component's part, nor an accuracy, whose all-or-nothing steps Heimersheim and
# Nanda {cite}`heimersheim2024patching` warn against.
#
# Chapter 8's induction score, measured on the same pairs, is the attention from the
# answer's
# position before character $k$ of A to character $k$ of A in the prompt: where a copying
# head
# should look. Both for every head of every seed:

# %%
shares, scores = {}, {}
start = clock()
for seed, m in models.items():
    shares[seed] = patching.patching_shares(m, pairs.clean, pairs.corrupted, metric)
    scores[seed] = inside.induction_scores(m, pairs)
analysis_seconds = clock() - start
print("top heads by the share denoising restores,")
print("and by induction score:")
for seed in SEEDS:
    print(f"seed {seed}, denoising: {inside.top_heads(shares[seed])}")
    print(f"seed {seed}, induction: {inside.top_heads(scores[seed])}")
rhos = [inside.rank_correlation(shares[s], scores[s]) for s in SEEDS]
rho_boot = [inside.bootstrap_rankings(models[s], pairs) for s in SEEDS]  # over the pairs
sums = [float(shares[s].sum()) for s in SEEDS]
found = [patching_prose.rankings_lesson(rhos, rho_boot, N_PAIRS),
         patching_prose.shares_lesson(sums)]
display(Markdown(" ".join(f.text for f in found)))

# %% tags=["remove-input"] mystnb={"figure": {"caption": "Each head of each seed: its induction score on the Repeat pairs against the share of the clean–corrupted gap that patching it restores.", "name": "fig-patching"}, "image": {"alt": "Three scatter plots, one above the other, of 16 points each, rising from lower left to upper right."}}
fig = inside_figure.patching_figure(shares, scores)
plt.show()

# %% [markdown]
# Where the two rankings agree, where a head looks and what it does go together: the heads
# that attend to the character to copy are the heads whose clean output brings the answer
# back. Single shares need not add up to the whole. A head can act directly on the logits,
# as section 13.3's attribution measures, and through the heads after it; and the
# log-probability is not a sum of the heads' parts. So single shares can overlap, and their
# sum pass one: Exercise 4 works through how, and measures it.
#
# The other direction is *noising*: run the *clean* conversation with one head's output
# taken from the corrupted run, which is section 13.4's resample ablation, and measure the
# share of the gap it loses,
#
# $$\frac{m(\text{clean}) - m(\text{patched})}{m(\text{clean}) - m(\text{corrupted})}.$$
#
# A head scores high when the copy *needs* it. The two ask different
# questions, and a head can be needed without being enough: one of several inputs that must
# all be clean, as a previous-token head is for an induction head. The previous-token score
# (Chapter 8) measures how much of each head's attention goes to the position just before.

# %%
start = clock()
noised = {seed: patching.patching_shares(m, pairs.clean, pairs.corrupted, metric, "noise")
          for seed, m in models.items()}
previous = {seed: inside.previous_token_scores(m, pairs) for seed, m in models.items()}
analysis_seconds = (analysis_seconds + clock() - start) / len(SEEDS)
print("top heads by the share noising loses:")
for seed in SEEDS:
    print(f"seed {seed}, noising: {inside.top_heads(noised[seed])}")
print(f"\nseed {SEEDS[0]}, share of the gap (layer x head)")
print(f"{'denoising':<23}| noising")
print(patching_prose.narrow_tables(shares[SEEDS[0]], noised[SEEDS[0]]))
boot = {}  # noising's first head, both ways, on the same 1,000 resamples for every model
for seed, m in models.items():
    top = [divmod(int(noised[seed].argmax()), noised[seed].shape[1])]
    boot[seed] = tuple(patching.bootstrap_shares(
        m, pairs.clean, pairs.corrupted, pairs.target, pairs.copy, [top], way)[:, 0]
        for way in patching.DIRECTIONS)
found.append(patching_prose.directions_lesson(shares, noised, previous, boot, N_PAIRS))
display(Markdown(found[-1].text))

# %% [markdown]
# Denoising finds what suffices to carry the difference; noising finds what the copy cannot
# do without.

# %% tags=["remove-input"]
n_runs = 2 * shares[SEEDS[0]].numel()  # each head patched in both directions
display(Markdown(patching_prose.timing_text(analysis_seconds, len(SEEDS), n_runs)))

# %% [markdown]
# ## 13.6 On Colab: induction heads and name movers in GPT-2 small
#
# Induction heads {cite}`olsson2022induction` attend from a token to the one that followed
# its earlier occurrence, and copy it. With GPT-2's weights, the same functions look for
# them
# in GPT-2 small on repeated random tokens: each head's induction score, and its patching
# share with the sequence corrupted in its first half, each of the 144 heads patched in
# turn.
# Olsson et al. name no heads of GPT-2 small. The ones commonly reported, L5H1, L5H5, L6H9,
# L7H2 and L7H10, come from ARENA's exercises {cite}`mcdougall2024arena`, which score every
# head by its induction score on repeated random tokens, as this cell does; online, the cell
# prints the heads it finds, to compare with them.

# %%
from gpt_from_scratch.book.inside_online import name_mover_run, online_run  # noqa: E402

online = online_run(n=50 if FULL_RUN else 20)
display(Markdown(online))

# %% [markdown]
# The same patching takes apart a behaviour of the whole sentence. In "When Mary and John
# went
# to the store, John gave a drink to", GPT-2 small expects Mary next: the name that was not
# repeated, the *indirect object*. Wang et al. traced this to a circuit of heads
# {cite}`wang2023ioi`. The corrupted run names Mary again where John stood, "Mary gave a
# drink
# to", which turns the preference around, and the metric is the difference of the two names'
# logits at the last position. Each head is patched alone, as in section 13.5; a
# negative share marks a head that pushes against the answer.
#
# Two choices differ from Wang et al.'s, one from other readings of their task. The
# sentences
# start at "When", with no `<|endoftext|>` token before it, as Wang et al.'s own dataset
# builds them by default; TransformerLens's `to_tokens` and ARENA's exercises prepend one.
# And where the clean sentence names Mary, John, John (ABB),
# the corrupted one names Mary, John, Mary (ABA), which points to the other name; Wang et
# al.'s
# reference sentences use three unrelated names (ABC), which point to neither. Here the gap
# is
# a flipped preference, and a head's share is how much of the flip it undoes.
#
# The metric differs from section 13.5's too, and the two meet. The copy has one right
# character at each of many positions and no single rival, so its metric is the right
# character's log-probability, averaged over the line. Here one position has two candidates,
# so the metric compares them. Their logit difference *is* a difference of
# log-probabilities,
# $\log p(\text{Mary}) - \log p(\text{John})$, since the softmax divides both by the same
# sum; the rest of the vocabulary drops out, and, like direct attribution, it is linear in
# the last residual stream once `ln_f`'s σ is fixed.

# %%
names = name_mover_run(n=100 if FULL_RUN else 40)
display(Markdown(names))

# %% [markdown]
# ## Summary
#
# - A forward hook reads or replaces six activations of each block of the book's `GPT`,
#   named as TransformerLens names them; TransformerLens, given the same weights, reads the
#   same values, and nnsight around the module itself gives the same numbers to the bit.

# %% tags=["remove-input"]
display(Markdown(patching_prose.summary_text(
    lens_found, found_ablation, bool(worse), *found, len(SEEDS))))

# %% tags=["remove-cell", "nbval-check-output"]
print(lessons.verdicts())

# %% [markdown]
# ## Exercises
#
# ### Exercise 1. The logit lens (implement)
#
# Write `logit_lens(resid, weight, bias, W_U, eps)`: `resid` holds the residual stream after
# each block, $(L, B, T, D)$; read each one out as the model reads its last: through the
# final
# LayerNorm (γ `weight`, β `bias`, `eps`) and the output layer `W_U` $(V, D)$. Return the
# logits $(L, B, T, V)$.

# %% tags=["solution", "hide-input"] mystnb={"code_prompt_show": "Show the solution", "code_prompt_hide": "Hide the solution"}
def logit_lens(resid, weight, bias, W_U, eps):
    normed = torch.nn.functional.layer_norm(resid, resid.shape[-1:], weight, bias, eps)
    return normed @ W_U.T  # (L, B, T, D) @ (D, V) -> (L, B, T, V)


# %%
from gpt_from_scratch.exercises import check_logit_lens
check_logit_lens(logit_lens);

# %% [markdown]
# ### Exercise 2. Patch one head (implement)
#
# Write `patch_head(z_corrupted, z_clean, head, W_O, b_O)`: `z_corrupted` and `z_clean` are
# the
# heads' outputs $(B, T, H, d_k)$ of one layer in the corrupted and the clean run. Return
# the
# layer's attention output $(B, T, D)$ in the corrupted run with head `head`'s output taken
# from
# the clean run: the heads merged, then `c_proj` (weight `W_O` $(D, D)$, bias `b_O`). Leave
# the
# inputs unchanged.

# %% tags=["solution", "hide-input"] mystnb={"code_prompt_show": "Show the solution", "code_prompt_hide": "Hide the solution"}
def patch_head(z_corrupted, z_clean, head, W_O, b_O):
    z = z_corrupted.clone()
    z[:, :, head] = z_clean[:, :, head]  # (B, T, d_k)
    return z.flatten(2) @ W_O.T + b_O  # (B, T, H * d_k) -> (B, T, D)


# %%
from gpt_from_scratch.exercises import check_patch_head
check_patch_head(patch_head);

# %% [markdown]
# ### Exercise 3. Which head restores most? (predict, then run)
#
# Chapter 14 also fine-tunes the assistants of seeds 3 to 5 by Chapter 12's recipe, which
# this chapter has not looked inside. Before running the next cell, predict
# from the three runs above: which head of seed 3's model, patched alone, restores the
# largest share of its gap, and roughly how large is that share? Write your prediction in
# the answer cell, then run the cell after it.

# %% [markdown] tags=["answer"]
# ```{admonition} Answer
# :class: dropdown
# A head that attends from the answer to the character to copy (one with a high induction
# score in section 13.5) is the likely winner: every run starts from one base model and
# learns the copy on top of the heads it already had, so the runs tend to share their
# copying heads. Its share is well below one, since several heads share the copy. The cell
# prints the answer for seed 3, with that head's rank by induction score, and the top heads
# of every seed, to compare.
# ```

# %%
seed_3 = sft_run(SFTRecipe(seed=3)).model  # trained once (Chapter 14), then cached
shares_3 = patching.patching_shares(seed_3, pairs.clean, pairs.corrupted, metric)  # (L, H)
scores_3 = inside.induction_scores(seed_3, pairs).flatten()
best = int(shares_3.flatten().argmax())
rank = 1 + int((scores_3 > scores_3[best]).sum())  # 1: the highest induction score
name = inside.head_name(best, shares_3.shape[1])
print(f"seed 3: {name} restores {float(shares_3.flatten()[best]):.2f} of the gap;")
print(f"its induction score, {float(scores_3[best]):.2f}, ranks {rank} of {len(scores_3)}")
print("top heads by the share denoising restores:")
for seed, by_head in {**shares, 3: shares_3}.items():
    print(f"seed {seed}: {inside.top_heads(by_head)}")

# %% [markdown]
# ### Exercise 4. Shares that add up to more than the whole (explain)
#
# Section 13.5 found single-head shares that sum to more than one. Patching is a fraction of
# one gap; how can the parts add up to more than it? Explain, and say what experiment would
# measure what two heads do together.

# %% [markdown] tags=["answer"]
# ```{admonition} Answer
# :class: dropdown
# A share measures one head patched *alone*, with every other head still corrupted, and the
# model is not a sum of heads. Two ways of working together make the single shares overlap.
# Heads in series: if head B reads head A's output and moves the answer, patching A alone
# makes B compute its clean output too, and patching B alone gives that output directly;
# each
# restores what the chain carries, and the sum counts it twice. Heads in parallel that write
# the same thing: the log-probability saturates, so one head patched alone lifts the
# character
# to copy a lot, and all of them together lift it no further than the clean run does. The
# opposite, heads that restore little alone and much together, is an AND: inputs that must
# all be clean, like the previous-token head of section 13.5 and the characters its places
# point to. Heimersheim and Nanda {cite}`heimersheim2024patching` work through these cases.
# To measure what heads do together, patch them at once (`patching.group_share`) and compare
# with the sum of their single shares; the cell below does, for seed 0's two largest shares
# and for whole layers.
# ```

# %%
L, H = shares[SEEDS[0]].shape
order = shares[SEEDS[0]].flatten().argsort(descending=True)  # largest share first
top_two = [divmod(int(i), H) for i in order[:2]]
groups = {"pair": top_two, "layer 0": [(0, h) for h in range(H)],
          "later": [(l, h) for l in range(1, L) for h in range(H)],
          "all": [(l, h) for l in range(L) for h in range(H)]}
joint = {name: patching.group_share(model, pairs.clean, pairs.corrupted, metric, heads)
         for name, heads in groups.items()}
resampled = patching.bootstrap_shares(  # 1,000 resamples of the pairs, (1000, 5)
    model, pairs.clean, pairs.corrupted, pairs.target, pairs.copy,
    [top_two[:1], top_two[1:], top_two, groups["layer 0"], groups["later"]])
display(Markdown(patching_prose.joint_text(shares[SEEDS[0]], top_two, joint, resampled)))

# %% [markdown] tags=["quiz"]
# ## Check yourself
#
# A few questions on this chapter, each answer with its explanation. The numbers in them
# are the ones this chapter printed.

# %% tags=["quiz", "remove-input"]
from gpt_from_scratch.book.quiz import Choice, MultipleChoice, Numeric, show_quiz
on_opening = drops[SEEDS[0]]["opening"]  # seed 0's, section 13.4
broken = float(on_opening["zero"][worst])  # zeroing's worst head
role_cost = float(on_opening["mean"][worst])
kept = float(on_opening["mean"].max())
top = divmod(int(noised[SEEDS[0]].argmax()), noised[SEEDS[0]].shape[1])  # noising's first
needed = float(noised[SEEDS[0]][top]) > 2 * float(shares[SEEDS[0]][top])
show_quiz([
    Numeric("How many heads does each model have in all (layers times heads)?",
            shares[SEEDS[0]].numel(), 0.5, "4 blocks of 4 heads."),
    Numeric("What share of A's characters does the logit lens rank first after the last "
            "block, for seed 0? (Percent, no decimals.)",
            100 * float(lens[SEEDS[0]][-1]), 0.6,
            "From section 13.2; the last read-out is the model's own prediction."),
    MultipleChoice("Zeroing the head that costs the copy most also costs the opening, the "
                   "same text in every row; mean ablation by role does not. Why?", [
        Choice("zeroing removes what the head writes at the opening too, which the "
               "opening reads; the role's mean, over rows whose opening is the same text, "
               "keeps nearly all of it", True,
               f"Yes: in seed {SEEDS[0]}, zeroing cost the opening {broken:.2f} nats a "
               "character, the mean over all positions, which do not line up, "
               f"{other_means[SEEDS[0]]['over all positions']:.2f}, at each position "
               f"{other_means[SEEDS[0]]['at each position']:.2f}, by role "
               f"{inside.two(role_cost)}: a mean keeps what the head writes there as "
               "far as its positions line up with the opening's."),
        Choice("the mean ablation by role leaves the head's output at the opening "
               "untouched", False,
               f"No: it replaces it there too, by the role's mean; that mean lies close to "
               f"the output (within {apart[0]:.2f} of its norm) because the opening is the "
               f"same text in every row. Mean ablation by role cost any head's opening at "
               f"most {inside.two(kept)}."),
    ]),
    MultipleChoice("Denoising patches the clean output into the corrupted run. What does a "
                   "high share say about the head?", [
        Choice("its clean output is enough, by itself, to bring much of the answer back",
               True, "Yes: denoising tests sufficiency."),
        Choice("the answer needs it", False,
               "That is noising's question (corrupted output into the clean run): a head "
               "can be needed and not enough, or enough and not needed."),
    ]),
    Numeric("Noising ranks one head of seed 0 first. What share of the gap does noising "
            "it lose? (Percent, no decimals.)",
            100 * float(noised[SEEDS[0]][top]), 0.6,
            f"L{top[0]}H{top[1]}: denoising it restores "
            f"{float(shares[SEEDS[0]][top]):.0%}. "
            + ("Far more is lost than restored: the copy needs the head, but its clean "
               "output alone does not carry the line." if needed else
               "Not twice as much lost as restored, in this run.")),
])
