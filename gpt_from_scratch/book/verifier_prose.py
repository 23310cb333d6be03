"""Chapter 14 — the chapter's lessons and sentences, judged and written from the measured numbers.

Each ``judge_*`` function takes one value per seed (shares from 0 to 1, as ``sampled_scores``
returns them) and returns the ``lessons.Lesson`` it judged: a paired difference over the seeds,
its margin in points beyond two standard errors, so that the claim survives another CPU's
arithmetic.
"""

from __future__ import annotations

import math
import numbers

from .lessons import SE_BAR, Lesson, lesson, paired_difference


def _pts(x: float) -> str:
    return f"{100 * x:.1f}"


def _shares(judge: str, seeds, **runs) -> int:
    """The number of seeds, after checking that there are at least two and that each list of
    ``runs`` holds one share (a number from 0 to 1) per seed."""
    seeds = list(seeds)
    if len(seeds) < 2:
        raise ValueError(f"{judge}: seeds={seeds!r}, but a lesson is judged over at least two "
                         "seeds (a standard error needs two runs): pass the chapter's SEEDS")
    for name, values in runs.items():
        if len(values) != len(seeds):
            raise ValueError(f"{judge}: {name} holds {len(values)} value(s) for the "
                             f"{len(seeds)} seeds {seeds}: pass one value per seed, in order")
        for i, v in enumerate(values):
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not 0 <= v <= 1:
                raise ValueError(f"{judge}: {name}[{i}] = {v!r} must be a share from 0 to 1 "
                                 "(not a percent, not NaN): pass sampled_scores' rates")
    return len(seeds)


def _beyond(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """Mean and standard error of ``a - b`` over the seeds, and how far the mean is above
    ``SE_BAR`` standard errors (negative when it is not)."""
    mean, se = paired_difference(a, b)
    return mean, se, mean - SE_BAR * se


def _each(values: list[float]) -> str:
    return ", ".join(_pts(v) for v in values)


def judge_gain(before: list[float], after: list[float], pass_k: tuple[list, list], k: int,
               seeds, task: str) -> Lesson:
    """The trained task's pass@1 rises; ``pass_k`` (before, after) says what pass@k did."""
    n = _shares("judge_gain", seeds, before=before, after=after, pass_k_before=pass_k[0],
                pass_k_after=pass_k[1])
    mean, se, margin = _beyond(after, before)
    k_mean, k_se = paired_difference(pass_k[1], pass_k[0])
    told = (f"pass@{k} moved by {_pts(k_mean)} ± {_pts(k_se)} points "
            f"({_pts(sum(pass_k[0]) / n)}% → {_pts(sum(pass_k[1]) / n)}%)")
    return lesson(
        f"GRPO raises pass@1 on '{task}'", 100 * margin, "points",
        holds=f"On held-out **{task}** prompts, pass@1 rose from {_pts(sum(before) / n)}% to "
              f"{_pts(sum(after) / n)}% (seeds after: {_each(after)}), a rise of {_pts(mean)} ± "
              f"{_pts(se)} points over {n} seeds, while {told}: the model now picks more often "
              "what it could already sample.",
        fails=f"On held-out **{task}** prompts, pass@1 moved by {_pts(mean)} ± {_pts(se)} "
              f"points only (seeds after: {_each(after)}), not {SE_BAR:g} standard errors clear "
              f"of zero on this machine, and {told}: a short run's gain is of the size of the "
              "evaluation's noise.")


def judge_collapse(before: list[float], after: list[float], seeds, lr: float,
                   task: str) -> Lesson:
    """The warning: at learning rate ``lr``, the trained task's pass@1 falls."""
    n = _shares("judge_collapse", seeds, before=before, after=after)
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real) or not 0 < lr < math.inf:
        raise ValueError(f"judge_collapse: lr = {lr!r} must be the positive learning rate of the "
                         "run that pushed too hard (the chapter's COLLAPSE_LR)")
    mean, se, margin = _beyond(before, after)
    return lesson(
        "at a large learning rate GRPO collapses the policy", 100 * margin, "points",
        holds=f"At a learning rate of {lr:g}, the same runs lowered **{task}**'s pass@1 from "
              f"{_pts(sum(before) / n)}% to {_pts(sum(after) / n)}% (seeds after: "
              f"{_each(after)}): a fall of {_pts(mean)} ± {_pts(se)} points over {n} seeds, on "
              "the very task the reward pays for.",
        fails=f"At a learning rate of {lr:g}, **{task}**'s pass@1 moved by {_pts(-mean)} ± "
              f"{_pts(se)} points only, not {SE_BAR:g} standard errors of a fall on this "
              "machine: the collapse comes at a step that moves with the arithmetic.")


def judge_forgetting(before: list[float], after: list[float], seeds, trained: str,
                     other: str) -> Lesson:
    """The task not rewarded (``other``) gets worse while ``trained`` is trained."""
    n = _shares("judge_forgetting", seeds, before=before, after=after)
    mean, se, margin = _beyond(before, after)
    return lesson(
        "the task not rewarded gets worse", 100 * margin, "points",
        holds=f"Nothing rewarded **{other}**, and its pass@1 fell from {_pts(sum(before) / n)}% "
              f"to {_pts(sum(after) / n)}% (seeds after: {_each(after)}; a fall of "
              f"{_pts(mean)} ± {_pts(se)} points) while **{trained}** was trained.",
        fails=f"**{other}**, not rewarded, moved by {_pts(-mean)} ± {_pts(se)} points only "
              f"(seeds after: {_each(after)}), not {SE_BAR:g} standard errors of a fall on "
              "this machine: a short run drifts little from where it started.")


def judge_opening(before: list[float], after: list[float], seeds) -> Lesson:
    """The unrewarded courteous/rude opening moves toward one side: its distance from 50/50,
    ``|share - 0.5|``, grows; ``before``/``after``: the courteous share of sampled answers."""
    n = _shares("judge_opening", seeds, before=before, after=after)
    mean, se, margin = _beyond([abs(s - 0.5) for s in after], [abs(s - 0.5) for s in before])
    return lesson(
        "the unrewarded opening collapses to one side", 100 * margin, "points",
        holds=f"No reward mentions the opening, yet the courteous share of the sampled answers "
              f"went from {_each(before)}% to {_each(after)}% (seeds in order): each run moved "
              f"{_pts(mean)} ± {_pts(se)} points further from 50/50. That is entropy collapse: "
              "the policy sharpens wherever the reward is indifferent.",
        fails=f"The courteous share went from {_each(before)}% to {_each(after)}%: "
              f"{_pts(mean)} ± {_pts(se)} points further from 50/50, not {SE_BAR:g} standard "
              "errors clear of zero on this machine, in a run this short.")


def mixed_text(mixed: dict[int, list[float]], reward: dict[int, list[float]],
               block: int) -> str:
    """The reward and the share of groups that carried a gradient, first and last ``block``
    steps of each run (``mixed``, ``reward``: seed -> one value per step)."""
    if block < 1 or any(len(v) < 2 * block for v in mixed.values()):
        raise ValueError(f"mixed_text: block={block} must be >= 1 and at most half of each "
                         "run's steps: pass a smaller block")

    def ends(values: list[float]) -> str:
        return f"{_pts(sum(values[:block]) / block)}% → {_pts(sum(values[-block:]) / block)}%"

    runs = "; ".join(f"seed {s}: reward {ends(reward[s])}, mixed groups {ends(mixed[s])}"
                     for s in mixed)
    return (f"Over the first and the last {block} steps of each run: {runs}. A group whose "
            "eight answers are all right, or all wrong, has advantages 0 and adds nothing to "
            "the gradient: as the reward rises, fewer groups teach.")


def brake_text(lr: float, beta: float, plain: dict, braked: dict, task: str) -> str:
    """What a KL penalty ``beta`` did at learning rate ``lr``, on one seed: ``plain`` and
    ``braked`` hold ``pass@1`` on ``task`` and the last steps' mean ``kl`` (nats a token)."""
    text = (f"At a learning rate of {lr:g}, one seed: without a penalty, **{task}**'s pass@1 "
            f"ended at {_pts(plain['pass@1'])}%; with β = {beta:g}, at "
            f"{_pts(braked['pass@1'])}%, its KL to the SFT model {braked['kl']:.3f} nats a token "
            "over the last steps. ")
    if braked["pass@1"] > plain["pass@1"]:
        return text + ("The penalty slowed the collapse; it did not remove the cause, the step "
                       "that is too large.")
    return text + "Here the penalty did not slow the collapse."


def sampling_text(greedy: dict, pass1: dict, pass_k: dict, k: int) -> str:
    """Greedy exact match, pass@1 and pass@k of each task (task -> one share per seed), and
    what their order says."""
    def mean(values: list[float]) -> float:
        return sum(values) / len(values)

    parts, above = [], []
    for task in greedy:
        g, one, many = mean(greedy[task]), mean(pass1[task]), mean(pass_k[task])
        parts.append(f"**{task}**: greedy {_pts(g)}%, pass@1 {_pts(one)}%, pass@{k} "
                     f"{_pts(many)}%")
        above.append(g > one)
    text = "Averaged over the seeds, " + "; ".join(parts) + ". "
    if all(above):
        text += ("Greedy decoding beats one sample: at temperature 1 a sample sometimes takes a "
                 "character the model thought less likely, and one wrong character fails the "
                 "answer. ")
    return text + (f"pass@{k} is the share of prompts the model *can* answer within {k} tries; "
                   f"where it is above pass@1, right answers are there to be sampled and "
                   "rewarded.")
