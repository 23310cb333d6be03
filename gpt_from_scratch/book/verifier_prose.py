"""Chapter 14 — the chapter's lessons and sentences, judged and written from the measured numbers.

Each ``judge_*`` function takes one value per seed (shares from 0 to 1, as ``sampled_scores``
returns them) and returns the ``lessons.Lesson`` it judged: a paired difference over the seeds,
its margin in points beyond two standard errors, so that the claim survives another CPU's
arithmetic.
"""

from __future__ import annotations

import math
import numbers

from .lessons import (
    SE_BAR, Lesson, beyond_bar, check_share, lesson, paired_difference, points, seed_count,
)


def _shares(judge: str, seeds, **runs) -> int:
    """The number of seeds, after checking that each list of ``runs`` holds one share per
    seed."""
    n = seed_count(judge, seeds, **runs)
    for name, values in runs.items():
        for i, v in enumerate(values):
            check_share(judge, f"{name}[{i}]", v)
    return n


def _each(values: list[float]) -> str:
    return ", ".join(points(v) for v in values)


def judge_gain(before: list[float], after: list[float], pass_k: tuple[list, list], k: int,
               seeds, task: str) -> Lesson:
    """The trained task's pass@1 rises; ``pass_k`` (before, after) says what pass@k did."""
    n = _shares("judge_gain", seeds, before=before, after=after, pass_k_before=pass_k[0],
                pass_k_after=pass_k[1])
    mean, se, margin = beyond_bar(after, before)
    k_mean, k_se = paired_difference(pass_k[1], pass_k[0])
    told = (f"pass@{k} moved by {points(k_mean)} ± {points(k_se)} points "
            f"({points(sum(pass_k[0]) / n)}% → {points(sum(pass_k[1]) / n)}%)")
    return lesson(
        f"GRPO raises pass@1 on '{task}'", 100 * margin, "points",
        holds=f"On held-out **{task}** prompts, pass@1 rose from {points(sum(before) / n)}% to "
              f"{points(sum(after) / n)}% (seeds after: {_each(after)}), a rise of {points(mean)} ± "
              f"{points(se)} points over {n} seeds, while {told}: the model now picks more often "
              "what it could already sample.",
        fails=f"On held-out **{task}** prompts, pass@1 moved by {points(mean)} ± {points(se)} "
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
    mean, se, margin = beyond_bar(before, after)
    return lesson(
        "at a large learning rate GRPO collapses the policy", 100 * margin, "points",
        holds=f"At a learning rate of {lr:g}, the same runs lowered **{task}**'s pass@1 from "
              f"{points(sum(before) / n)}% to {points(sum(after) / n)}% (seeds after: "
              f"{_each(after)}): a fall of {points(mean)} ± {points(se)} points over {n} seeds, on "
              "the very task the reward pays for.",
        fails=f"At a learning rate of {lr:g}, **{task}**'s pass@1 moved by {points(-mean)} ± "
              f"{points(se)} points only, not {SE_BAR:g} standard errors of a fall on this "
              "machine: the collapse comes at a step that moves with the arithmetic.")


def _logps(judge: str, seeds, **runs) -> int:
    """The number of seeds, after checking that each list of ``runs`` holds one
    log-probability (a finite number <= 0) per seed."""
    n = seed_count(judge, seeds, **runs)
    for name, values in runs.items():
        for i, v in enumerate(values):
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not -math.inf < v <= 0:
                raise ValueError(f"{judge}: {name}[{i}] = {v!r} must be a log-probability, a "
                                 "finite number <= 0: pass answer_logprob's values")
    return n


def judge_forgetting(before: list[float], after: list[float], seeds, trained: str,
                     other: str, pass1: tuple[list, list]) -> Lesson:
    """The task not rewarded (``other``) gets worse while ``trained`` is trained: the mean
    log-probability of its reference answers (``before``, ``after``: ``answer_logprob`` per seed)
    falls; ``pass1`` (before, after) says what its sampled pass@1 did."""
    n = _logps("judge_forgetting", seeds, before=before, after=after)
    _shares("judge_forgetting", seeds, pass1_before=pass1[0], pass1_after=pass1[1])
    mean, se, margin = beyond_bar(before, after)
    falls = sum(b > a for b, a in zip(before, after))
    told = (f"Its sampled pass@1 went from {points(sum(pass1[0]) / n)}% to "
            f"{points(sum(pass1[1]) / n)}% (seeds after: {_each(pass1[1])}).")
    return lesson(
        "the task not rewarded gets worse", margin, "nats",
        holds=f"Nothing rewarded **{other}**, and the log-probability of its reference answers "
              f"fell from {sum(before) / n:.2f} to {sum(after) / n:.2f} nats on average, in "
              f"{falls} of {n} seeds (a fall of {mean:.2f} ± {se:.2f} nats: the right answer "
              f"became {math.exp(mean):.0f} times less likely) while **{trained}** was "
              f"trained. {told}",
        fails=f"**{other}**, not rewarded: the log-probability of its reference answers moved by "
              f"{-mean:.2f} ± {se:.2f} nats only ({sum(before) / n:.2f} → "
              f"{sum(after) / n:.2f}), not {SE_BAR:g} standard errors of a fall on this "
              f"machine: a short run drifts little from where it started. {told}")


def judge_opening(before: list[list[float]], after: list[list[float]], seeds,
                  sampled: tuple[list, list]) -> Lesson:
    """The unrewarded courteous/rude opening drifts to one side in every run: each prompt's
    courteous odds (``assistant.courteous_odds``; ``before``, ``after``: one list of the
    held-out prompts' per seed) move further from 50/50, ``|p - 0.5|`` paired over the prompts;
    the margin is the smallest run's, beyond 2 standard errors. ``sampled`` (before, after): the
    courteous share of the sampled answers, per seed."""
    n = _shares("judge_opening", seeds, sampled_before=sampled[0], sampled_after=sampled[1])
    seed_count("judge_opening", seeds, before=before, after=after)
    moves = []  # (mean, se) of each run's move away from 50/50, over the prompts
    for s, (b, a) in enumerate(zip(before, after)):
        if len(b) != len(a) or len(b) < 2:
            raise ValueError(f"judge_opening: before[{s}] and after[{s}] hold {len(b)} and "
                             f"{len(a)} odds: pass one per held-out prompt, the same prompts "
                             "on both sides (at least two)")
        _shares("judge_opening", range(len(b)), **{f"before[{s}]": b, f"after[{s}]": a})
        moves.append(paired_difference([abs(p - 0.5) for p in a], [abs(p - 0.5) for p in b]))
    margin = min(mean - SE_BAR * se for mean, se in moves)

    def odds(runs: list[list[float]]) -> str:
        return ", ".join(points(sum(r) / len(r)) for r in runs)
    each = ", ".join(f"{points(mean)} ± {points(se)}" for mean, se in moves)
    seen = (f"the courteous odds at the answer's first character, averaged over the "
            f"{len(before[0])} held-out prompts, went from {odds(before)}% to {odds(after)}% "
            f"(seeds in order)")
    told = (f"The sampled answers show it too: their courteous share went from "
            f"{_each(sampled[0])}% to {_each(sampled[1])}%.")
    return lesson(
        "the unrewarded opening drifts to one side", 100 * margin, "points",
        holds=f"No reward mentions the opening, yet it drifted to one side in each of the {n} "
              f"runs: {seen}, each prompt's odds {each} points further from 50/50 on average. "
              f"{told} Nothing pulls it back: the reward never reads the opening, so sampling "
              "noise moves its share like a random walk, each seed its own way.",
        fails=f"Not every run drifted to one side: {seen}, each prompt's odds {each} points "
              f"further from 50/50 on average, not all {SE_BAR:g} standard errors clear of zero "
              f"on this machine, in a run this short. {told}")


def mixed_text(mixed: dict[int, list[float]], reward: dict[int, list[float]],
               block: int) -> str:
    """The reward and the share of groups that carried a gradient, first and last ``block``
    steps of each run (``mixed``, ``reward``: seed -> one value per step)."""
    if block < 1 or any(len(v) < 2 * block for v in mixed.values()):
        raise ValueError(f"mixed_text: block={block} must be >= 1 and at most half of each "
                         "run's steps: pass a smaller block")

    def ends(values: list[float]) -> str:
        return f"{points(sum(values[:block]) / block)}% → {points(sum(values[-block:]) / block)}%"

    runs = "; ".join(f"seed {s}: reward {ends(reward[s])}, mixed groups {ends(mixed[s])}"
                     for s in mixed)
    return (f"Over the first and the last {block} steps of each run: {runs}. A group whose "
            "eight answers are all right, or all wrong, has advantages 0 and adds nothing to "
            "the gradient: as the reward rises, fewer groups teach.")


def brake_text(lr: float, beta: float, plain: dict, braked: dict, task: str) -> str:
    """What a KL penalty ``beta`` did at learning rate ``lr``, on one seed: ``plain`` and
    ``braked`` hold ``pass@1`` on ``task`` and the last steps' mean ``kl`` (nats a token)."""
    text = (f"At a learning rate of {lr:g}, one seed: without a penalty, **{task}**'s pass@1 "
            f"ended at {points(plain['pass@1'])}%; with β = {beta:g}, at "
            f"{points(braked['pass@1'])}%, its KL to the SFT model {braked['kl']:.3f} nats a token "
            "over the last steps. ")
    if braked["pass@1"] > plain["pass@1"]:
        return text + ("On this seed the penalty slowed the collapse (one run: a sign, not a "
                       "measurement); it cannot remove the cause, the step that is too large.")
    return text + ("On this seed the penalty did not slow the collapse (one run: a sign, not a "
                   "measurement).")


def sampling_text(greedy: dict, pass1: dict, pass_k: dict, k: int) -> str:
    """Greedy exact match, pass@1 and pass@k of each task (task -> one share per seed), and
    what their order says."""
    def mean(values: list[float]) -> float:
        return sum(values) / len(values)

    parts, above = [], []
    for task in greedy:
        g, one, many = mean(greedy[task]), mean(pass1[task]), mean(pass_k[task])
        parts.append(f"**{task}**: greedy {points(g)}%, pass@1 {points(one)}%, pass@{k} "
                     f"{points(many)}%")
        above.append(g > one)
    text = "Averaged over the seeds, " + "; ".join(parts) + ". "
    if all(above):
        text += ("Greedy decoding beats one sample: at temperature 1 a sample sometimes takes a "
                 "character the model thought less likely, and one wrong character fails the "
                 "answer. ")
    return text + (f"pass@{k} is the share of prompts the model *can* answer within {k} tries; "
                   f"where it is above pass@1, right answers are there to be sampled and "
                   "rewarded.")
