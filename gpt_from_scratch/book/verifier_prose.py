"""Chapter 14 — the chapter's lessons and sentences, judged and written from the measured numbers.

Each ``judge_*`` function takes one value per seed (shares from 0 to 1, as ``sampled_scores``
returns them) and returns the ``lessons.Lesson`` it judged: a paired difference over the seeds,
its margin how far it clears zero at the one-sided 95% level of Student's t (with three seeds,
2.92 standard errors), so that the claim survives another CPU's arithmetic. The opening's drift
is judged seed by seed against a control changed as much, by a bootstrap over the prompts.
"""

from __future__ import annotations

import math
import numbers

from .lessons import (
    T_LEVEL, Lesson, beyond_t, check_share, lesson, paired_bootstrap, paired_difference, points,
    seed_count,
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


def _clear(t: float, n: int) -> str:
    """What "clear of zero" means here, in words."""
    return (f"at the one-sided {T_LEVEL:.0%} level of Student's t over {n} paired seeds "
            f"({t:.2f} standard errors)")


def judge_gain(before: list[float], after: list[float], pass_k: tuple[list, list], k: int,
               seeds, task: str) -> Lesson:
    """The trained task's pass@1 rises; ``pass_k`` (before, after) says what pass@k did."""
    n = _shares("judge_gain", seeds, before=before, after=after, pass_k_before=pass_k[0],
                pass_k_after=pass_k[1])
    mean, se, t, margin = beyond_t(after, before)
    k_mean, k_se = paired_difference(pass_k[1], pass_k[0])
    told = (f"pass@{k} moved by {points(k_mean)} ± {points(k_se)} points "
            f"({points(sum(pass_k[0]) / n)}% → {points(sum(pass_k[1]) / n)}%)")
    return lesson(
        f"GRPO raises pass@1 on '{task}'", 100 * margin, "points",
        holds=f"On held-out **{task}** prompts, pass@1 rose from {points(sum(before) / n)}% to "
              f"{points(sum(after) / n)}% (seeds after: {_each(after)}), a rise of {points(mean)} ± "
              f"{points(se)} points over {n} seeds, clear of zero {_clear(t, n)}, while {told}: "
              "the model now picks more often what it could already sample.",
        fails=f"On held-out **{task}** prompts, pass@1 moved by {points(mean)} ± {points(se)} "
              f"points only (seeds after: {_each(after)}), not clear of zero {_clear(t, n)} on "
              f"this machine, and {told}: a short run's gain is of the size of the "
              "evaluation's noise.")


def judge_collapse(before: list[float], after: list[float], seeds, lr: float,
                   task: str) -> Lesson:
    """The warning: at learning rate ``lr``, the trained task's pass@1 falls."""
    n = _shares("judge_collapse", seeds, before=before, after=after)
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real) or not 0 < lr < math.inf:
        raise ValueError(f"judge_collapse: lr = {lr!r} must be the positive learning rate of the "
                         "run that pushed too hard (the chapter's COLLAPSE_LR)")
    mean, se, t, margin = beyond_t(before, after)
    return lesson(
        "at a large learning rate GRPO collapses the policy", 100 * margin, "points",
        holds=f"At a learning rate of {lr:g}, the same runs lowered **{task}**'s pass@1 from "
              f"{points(sum(before) / n)}% to {points(sum(after) / n)}% (seeds after: "
              f"{_each(after)}): a fall of {points(mean)} ± {points(se)} points over {n} seeds, "
              f"clear of zero {_clear(t, n)}, on the very task the reward pays for.",
        fails=f"At a learning rate of {lr:g}, **{task}**'s pass@1 moved by {points(-mean)} ± "
              f"{points(se)} points only, not a fall clear of zero {_clear(t, n)} on this "
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
    mean, se, t, margin = beyond_t(before, after)
    falls = sum(b > a for b, a in zip(before, after))
    told = (f"Its sampled pass@1 went from {points(sum(pass1[0]) / n)}% to "
            f"{points(sum(pass1[1]) / n)}% (seeds after: {_each(pass1[1])}).")
    return lesson(
        "the task not rewarded gets worse", margin, "nats",
        holds=f"Nothing rewarded **{other}**, and the log-probability of its reference answers "
              f"fell from {sum(before) / n:.2f} to {sum(after) / n:.2f} nats on average, in "
              f"{falls} of {n} seeds (a fall of {mean:.2f} ± {se:.2f} nats, clear of zero "
              f"{_clear(t, n)}: the right answer became {math.exp(mean):.0f} times less likely) "
              f"while **{trained}** was trained. {told}",
        fails=f"**{other}**, not rewarded: the log-probability of its reference answers moved by "
              f"{-mean:.2f} ± {se:.2f} nats only ({sum(before) / n:.2f} → "
              f"{sum(after) / n:.2f}), not a fall clear of zero {_clear(t, n)} on this "
              f"machine: a short run drifts little from where it started. {told}")


def judge_opening(before: list[list[float]], after: list[list[float]],
                  control: list[list[float]], seeds, sampled: tuple[list, list]) -> Lesson:
    """The unrewarded courteous/rude opening drifts to one side in every run, further than an
    equally large change moves it: each prompt's courteous share (``assistant.courteous_odds``;
    ``before``, ``after``, ``control``: one list of the held-out prompts' per seed, the SFT
    model, the GRPO run and ``verifier_control.same_size_change``) moves further from 50/50
    after the run than in the control; the margin is the smallest seed's lower bound of a
    bootstrap over the prompts, in points. ``sampled`` (before, after): the courteous share of
    the sampled answers, per seed."""
    n = _shares("judge_opening", seeds, sampled_before=sampled[0], sampled_after=sampled[1])
    seed_count("judge_opening", seeds, before=before, after=after, control=control)
    drift, moved, bounds = [], [], []
    for s, (b, a, c) in enumerate(zip(before, after, control)):
        if not len(b) == len(a) == len(c) >= 2:
            raise ValueError(f"judge_opening: before[{s}], after[{s}] and control[{s}] hold "
                             f"{len(b)}, {len(a)} and {len(c)} shares: pass one per held-out "
                             "prompt, the same prompts on every side (at least two)")
        _shares("judge_opening", range(len(b)), **{f"before[{s}]": b, f"after[{s}]": a,
                                                    f"control[{s}]": c})
        far = [[abs(p - 0.5) for p in side] for side in (b, a, c)]
        drift.append(sum(far[1]) / len(b) - sum(far[0]) / len(b))
        moved.append(sum(far[2]) / len(b) - sum(far[0]) / len(b))
        bounds.append(paired_bootstrap([x - y for x, y in zip(far[1], far[2])], seed=s))

    def shares(runs: list[list[float]]) -> str:
        return ", ".join(points(sum(r) / len(r)) for r in runs)
    seen = (f"the courteous share at the answer's first character, averaged over the "
            f"{len(before[0])} held-out prompts, went from {shares(before)}% to "
            f"{shares(after)}% (seeds in order), each prompt's share {_each(drift)} points "
            f"further from 50/50 on average. The control, the same change with each weight's "
            f"step given a random sign (as large in every weight, in no chosen direction), "
            f"moved it {_each(moved)} points")
    bound = (f"by at least {_each(bounds)} points (the lower {T_LEVEL:.0%} bound of a "
             "bootstrap over the prompts)")
    told = (f"The sampled answers show it too: their courteous share went from "
            f"{_each(sampled[0])}% to {_each(sampled[1])}%.")
    return lesson(
        "the unrewarded opening drifts further than an equal random change moves it",
        100 * min(bounds), "points",
        holds=f"No reward mentions the opening, yet it drifted to one side in each of the {n} "
              f"runs: {seen}. In every seed the run drifted further than its control, {bound}. "
              f"{told} Nothing pulls it back: the reward never reads the opening, so sampling "
              "noise moves its share like a random walk, each seed its own way.",
        fails=f"Not every run drifted further than its control here: {seen}; the run's excess "
              f"over the control, {bound}, is not above zero in every seed on this machine, "
              f"in a run this short. {told}")


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


def collapse_text(seed: int, shown: dict[str, tuple[list[str], list[float]]]) -> str:
    """What one prompt's sampled answers show of a collapse: ``shown`` maps each model's name
    (the first one before, the last one after) to its answers' texts and rewards."""
    if len(shown) < 2 or any(len(texts) != len(rewards) or not texts
                             for texts, rewards in shown.values()):
        raise ValueError(f"collapse_text: shown holds {len(shown)} model(s): pass at least two, "
                         "each with one reward per answer text")
    (first, (texts, rewards)), (last, (texts_after, rewards_after)) = (
        list(shown.items())[0], list(shown.items())[-1])
    text = (f"Seed {seed}'s {len(texts)} answers to one held-out prompt: the {first} model wrote "
            f"{len(set(texts))} different answers, {sum(r > 0 for r in rewards):.0f} of them "
            f"right; the {last} model {len(set(texts_after))}, "
            f"{sum(r > 0 for r in rewards_after):.0f} right.")
    if len(set(texts_after)) < len(set(texts)):
        text += (" The policy has narrowed onto fewer answers; a group of identical answers "
                 "earns identical rewards, so the collapsed model has little left to learn from.")
    return text
