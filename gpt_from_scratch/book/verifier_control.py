"""Chapter 14 — the measurements beside a run: a control changed exactly as much as the run,
in no chosen direction, how far each moved the model's next-token law, and each sampled
answer.

Almost any change to a model moves a 50/50 choice away from one half, so a drift is a
finding only against a control changed as much. ``same_size_change`` gives each weight the
run's step with its sign drawn at random: every weight moves by the amount the run moved it,
but the moves no longer add up to what the run's gradients chose. ``next_token_kl`` says how
much each of them changed what the model predicts. ``sampled_answers`` keeps what
``verifier.sampled_scores`` averages away, each answer's reward and opening: per-prompt
pass@1 for a bootstrap over the prompts, and how often answers are right after each opening
(``right_by_opening`` pooled over the prompts, ``opening_gap`` within each prompt).
"""

from __future__ import annotations

import copy
import numbers

import torch
from torch import nn

from ..grpo_sampling import sample_groups
from ..sft import IGNORE, collate, shift
from ..utils import check_int, eval_mode
from .assistant import STYLES, Item, split_style
from .verifier import prompts_and_reward


def same_size_change(before: nn.Module, after: nn.Module, seed: int = 0) -> nn.Module:
    """A copy of ``before`` whose every weight is ``before + s * (after - before)``, ``s`` a
    random sign per entry (a seeded generator: the same control on every run), in eval
    mode."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise ValueError(f"same_size_change: seed={seed!r} must be a whole number (the "
                         "run's seed, so that each run has its own control)")
    ours, theirs = dict(before.named_parameters()), dict(after.named_parameters())
    if ours.keys() != theirs.keys() or any(ours[k].shape != theirs[k].shape for k in ours):
        differ = sorted(k for k in ours.keys() | theirs.keys()
                        if k not in ours or k not in theirs
                        or ours[k].shape != theirs[k].shape)
        raise ValueError(f"same_size_change: before and after differ in their weights "
                         f"({', '.join(differ[:3])}): pass the model a run started from "
                         "and the model it ended with, of one architecture")
    g = torch.Generator().manual_seed(int(seed))
    control = copy.deepcopy(before).eval()
    with torch.no_grad():
        for name, p in control.named_parameters():
            step = theirs[name].detach().cpu() - ours[name].detach().cpu()
            sign = torch.randint(0, 2, step.shape, generator=g).to(step.dtype) * 2 - 1
            p.copy_((ours[name].detach().cpu() + sign * step).to(p.device))
    return control


def _conversations(function: str, tok, items: list[Item], context_length: int):
    """``(idx, targets)``, (2 * N, T): each item's conversation in either opening, the
    targets ``IGNORE`` outside the answers (Chapter 12's SFT rows)."""
    if not items:
        raise ValueError(f"{function}: items is empty: pass the held-out items to measure")
    rows = [shift(*tok.render(i.messages(style))) for i in items for style in STYLES]
    longest = max(len(inputs) for inputs, _ in rows)
    if longest > context_length:
        raise ValueError(f"{function}: an item needs {longest} tokens and the model reads "
                         f"{context_length}: pass items whose conversations fit (shorter "
                         "lines)")
    return collate(rows, tok.pad_id, context_length)


@torch.no_grad()
def next_token_kl(model: nn.Module, reference: nn.Module, tok, items: list[Item]) -> float:
    """KL(model ‖ reference) of the next token, in nats, averaged over the answer positions
    of ``items``' conversations in both openings (the positions Chapter 12's SFT loss
    reads): how far ``model`` has moved what it predicts, where the answers are written."""
    if model.config.vocab_size != reference.config.vocab_size:
        raise ValueError(f"next_token_kl: the model has {model.config.vocab_size} tokens "
                         f"and the reference {reference.config.vocab_size}: compare a "
                         "model with the one it was trained from")
    idx, targets = _conversations("next_token_kl", tok, items, model.config.context_length)
    answer = targets != IGNORE  # (2N, T)
    with eval_mode(model), eval_mode(reference):
        logp = torch.log_softmax(model(idx)[0].double(), dim=-1)[answer]  # (A, V)
        logq = torch.log_softmax(reference(idx)[0].double(), dim=-1)[answer]  # (A, V)
    return (logp.exp() * (logp - logq)).sum(-1).mean().item()


@torch.no_grad()
def sampled_answers(model: nn.Module, tok, items: list[Item], n: int,
                    seed: int = 0) -> list[list[tuple[float, str | None]]]:
    """For each of ``items``, its ``n`` answers sampled at temperature 1 as
    ``verifier.sampled_scores`` samples them (one generator seeded with ``seed``, the
    prompts of one length together, the lengths in increasing order): each answer's reward
    and its opening (``"courteous"``, ``"rude"`` or None). On the same items, ``n`` and
    ``seed`` they are ``sampled_scores``' own answers: a task's mean over its items of the
    rewards' sum over ``n`` is its pass@1."""
    n = check_int("sampled_answers", "n", n, minimum=1)
    seed = check_int("sampled_answers", "seed", seed)
    if not items:
        raise ValueError("sampled_answers: items is empty: pass the items to answer")
    prompts, reward = prompts_and_reward(items, tok)
    T = model.config.context_length
    if max(len(p) for p in prompts) + 1 > T:
        raise ValueError(f"sampled_answers: an item needs {max(map(len, prompts)) + 1} "
                         f"tokens and the model reads {T}: pass items whose conversations "
                         "fit (shorter lines)")
    g = torch.Generator().manual_seed(seed)
    answers: list = [None] * len(items)
    for length in sorted({len(p) for p in prompts}):
        chosen = [j for j, p in enumerate(prompts) if len(p) == length]
        idx = torch.tensor([prompts[j] for j in chosen])  # (B, P)
        completions, mask = sample_groups(model, idx, n, T - length, tok.end_id,
                                          generator=g)  # (B * n, C) each
        for b, j in enumerate(chosen):
            answers[j] = []
            for c, m in zip(completions[b * n:(b + 1) * n], mask[b * n:(b + 1) * n]):
                ids = c[m.bool()].tolist()  # up to and including <|end|>, if it came
                text = tok.decode([t for t in ids if t < tok.base_vocab_size])
                answers[j].append((reward(j, ids), split_style(text)[0]))
    return answers


def right_by_opening(answers: list[list[tuple[float, str | None]]]) -> dict[str, tuple]:
    """``{opening: (right answers, answers)}`` over every prompt's ``sampled_answers``, for
    each opening of ``assistant.STYLES``: how often an answer was right after it, pooled
    over the prompts (``opening_gap`` compares the openings within each prompt)."""
    counts = {style: [0, 0] for style in STYLES}
    for rows in answers:
        for r, style in rows:
            if style in counts:
                counts[style][0] += int(r > 0)
                counts[style][1] += 1
    return {style: tuple(c) for style, c in counts.items()}


def opening_gap(answers: list[list[tuple[float, str | None]]]) -> tuple[float, int]:
    """``(gap, prompts)``: over the prompts of ``sampled_answers`` answered in both
    openings, the mean of each one's share of right answers after the courteous opening
    minus its share after the rude one, and how many such prompts there are. The expected
    push of a group's rewards on the opening comes from the accuracy gap within its prompt;
    pooling every answer instead could make a gap where easy prompts happened to open one
    way more often, or hide one."""
    gaps = []
    for rows in answers:
        rates = {style: [float(r > 0) for r, s in rows if s == style] for style in STYLES}
        if all(rates.values()):
            gaps.append(sum(rates["courteous"]) / len(rates["courteous"])
                        - sum(rates["rude"]) / len(rates["rude"]))
    if not gaps:
        raise ValueError(f"opening_gap: none of the {len(answers)} prompts was answered in "
                         "both openings, so no gap can be read within a prompt: sample "
                         "more answers per prompt (sampled_answers' n) or more prompts")
    return sum(gaps) / len(gaps), len(gaps)
