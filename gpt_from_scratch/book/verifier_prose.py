"""Chapter 14 — the chapter's lessons and sentences, judged and written from the measured numbers.

Each ``judge_*`` function takes one value per seed (shares from 0 to 1, as ``sampled_scores``
returns them) and returns the ``lessons.Lesson`` it judged: a paired difference over the seeds,
its margin how far it clears zero at the one-sided 95% level of Student's t (with three seeds,
2.92 standard errors). A positive margin does not make a claim safe from another CPU's
arithmetic or another seed: where it is small beside the effect, the sentence says so. The
opening's drift is judged seed by seed against a control whose weights changed as much, by a
bootstrap over the prompts.
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


THIN = 0.25  # a margin under this share of the effect is called thin in the sentence


def _thin(margin: float, mean: float, what: str) -> str:
    """How far the effect clears the bar, said plainly when that is a small part of it."""
    if margin > 0 and margin < THIN * abs(mean):
        return (f" The margin is thin: the {what} clears the bar by {points(margin)} "
                f"points only, under {THIN:.0%} of it; one seed more, or another CPU's "
                "arithmetic, could tip the verdict.")
    return ""


def _check_k(judge: str, k) -> int:
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
        raise ValueError(f"{judge}: k={k!r} must be a whole number >= 1, the k of pass@k")
    return int(k)


def _pair(judge: str, name: str, value) -> tuple:
    if (not isinstance(value, (tuple, list)) or len(value) != 2
            or any(isinstance(v, (str, bytes)) or not hasattr(v, "__len__")
                   for v in value)):
        raise ValueError(f"{judge}: {name} = {value!r} must be a pair (before, after) of "
                         "lists, one value per seed in each")
    return tuple(value)


def judge_gain(before: list[float], after: list[float], pass_k: tuple[list, list], k: int,
               seeds, task: str) -> Lesson:
    """The trained task's pass@1 rises; ``pass_k`` (before, after) says what pass@k did."""
    k = _check_k("judge_gain", k)
    pass_k = _pair("judge_gain", "pass_k", pass_k)
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
              "the model now picks more often what it could already sample."
              + _thin(margin, mean, "rise"),
        fails=f"On held-out **{task}** prompts, pass@1 moved by {points(mean)} ± {points(se)} "
              f"points only (seeds after: {_each(after)}), not clear of zero {_clear(t, n)} on "
              f"this machine, and {told}: a short run's gain is of the size of the "
              "evaluation's noise.")


def judge_collapse(before: list[float], after: list[float], seeds, lr: float,
                   task: str) -> Lesson:
    """The warning: at learning rate ``lr``, the trained task's pass@1 falls (a fall in
    pass@1 only: the answers' diversity is not measured here)."""
    n = _shares("judge_collapse", seeds, before=before, after=after)
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real) or not 0 < lr < math.inf:
        raise ValueError(f"judge_collapse: lr = {lr!r} must be the positive learning rate of the "
                         "run that pushed too hard (the chapter's COLLAPSE_LR)")
    mean, se, t, margin = beyond_t(before, after)
    return lesson(
        "a large step lowers pass@1 on the rewarded task", 100 * margin, "points",
        holds=f"At a learning rate of {lr:g}, the same runs lowered **{task}**'s pass@1 from "
              f"{points(sum(before) / n)}% to {points(sum(after) / n)}% (seeds after: "
              f"{_each(after)}): a fall of {points(mean)} ± {points(se)} points over {n} seeds, "
              f"clear of zero {_clear(t, n)}, on the very task the reward pays for."
              + _thin(margin, mean, "fall"),
        fails=f"At a learning rate of {lr:g}, **{task}**'s pass@1 moved by {points(-mean)} ± "
              f"{points(se)} points only, not a fall clear of zero {_clear(t, n)} on this "
              "machine: the step at which pass@1 falls moves with the arithmetic.")


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
    pass1 = _pair("judge_forgetting", "pass1", pass1)
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
              f"{_clear(t, n)}: the right answer became e^{mean:.2f} ≈ "
              f"{math.exp(mean):.1f} times less likely) "
              f"while **{trained}** was trained. {told}",
        fails=f"**{other}**, not rewarded: the log-probability of its reference answers moved by "
              f"{-mean:.2f} ± {se:.2f} nats only ({sum(before) / n:.2f} → "
              f"{sum(after) / n:.2f}), not a fall clear of zero {_clear(t, n)} on this "
              f"machine: a short run drifts little from where it started. {told}")


SHOWN = 0.05  # the sampled share must move this much further from 50/50 to "show it too"
SLOWED = 0.02  # the brake's pass@1 must differ by this much to say which way it went


def judge_opening(before: list[list[float]], after: list[list[float]],
                  control: list[list[float]], seeds, sampled: tuple[list, list]) -> Lesson:
    """The unrewarded courteous/rude opening moves away from an even share in every run,
    further than a change of the same size in the weights moves it: each prompt's courteous
    share (``assistant.courteous_odds``; ``before``, ``after``, ``control``: one list of the
    held-out prompts' per seed, the SFT model, the GRPO run and
    ``verifier_control.same_size_change``) is measured by its distance from 50/50, and the
    lesson asks whether the run increased the mean distance more than the control did; the
    margin is the smallest seed's lower bound of a bootstrap over the prompts, in points.
    ``sampled`` (before, after): the courteous share of the sampled answers, per seed.

    What the control rules out is narrow: a random change of the same size in the weights,
    which moves the model's outputs far less than the run. It does not rule out that any
    GRPO run of this length would move the opening whatever its reward (rewards shuffled
    within each group would test that; not run here). The mechanism, sampling noise with no
    pull back to 50/50, is the chapter's reading, not a measurement."""
    sampled = _pair("judge_opening", "sampled", sampled)
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
            f"{shares(after)}% (seeds in order), and each prompt's distance from 50/50 "
            f"grew by {_each(drift)} points on average. The control, the SFT model with "
            "each weight given the run's step under a random sign (a change of the same "
            "size in every weight, in no chosen direction), changed that distance by "
            f"{_each(moved)} points")
    bound = (f"by at least {_each(bounds)} points (the lower {T_LEVEL:.0%} bound of a "
             "bootstrap over the prompts)")
    further = [abs(a - 0.5) - abs(b - 0.5) for b, a in zip(*sampled)]
    verb = ("show it too: their" if all(f >= SHOWN for f in further)
            else "do not all show it: their")
    told = (f"The sampled answers {verb} courteous share went from "
            f"{_each(sampled[0])}% to {_each(sampled[1])}%.")
    limits = ("What this control rules out is narrow: a random change of the same size in "
              "the weights, which moves the model's next-token distributions far less than "
              "the run does (tens of times less in KL from the SFT model, by an outside "
              "measurement this chapter does not print). It does not rule out that any "
              "GRPO run this long would move the opening, "
              "whatever its reward: a run whose rewards are shuffled within each group "
              "would test that, and none is run here.")
    return lesson(
        "the unrewarded opening moves further from 50/50 than a same-size random change "
        "moves it", 100 * min(bounds), "points",
        holds=f"No reward mentions the opening, yet in each of the {n} runs it moved "
              f"away from an even share: {seen}. In every seed the run moved it further "
              f"than its control, {bound}. {told} {limits} The chapter's reading, not "
              "measured here: the reward never reads the opening, so if right answers come "
              "as often after either opening, sampling noise with no pull back to 50/50 "
              "would move its share like this, each seed its own way.",
        fails=f"Not every run moved the opening further from 50/50 than its control here: "
              f"{seen}; the run's excess over the control, {bound}, is not above zero in "
              f"every seed on this machine, in a run this short. {told}")


def mixed_text(mixed: dict[int, list[float]], reward: dict[int, list[float]],
               block: int, group: int = 8) -> str:
    """The reward and the share of groups that carried a gradient, first and last ``block``
    steps of each run (``mixed``, ``reward``: seed -> one value per step; ``group`` answers
    a prompt)."""
    if (isinstance(block, bool) or not isinstance(block, numbers.Integral) or block < 1
            or any(len(v) < 2 * block for v in (*mixed.values(), *reward.values()))):
        raise ValueError(f"mixed_text: block={block!r} must be a whole number >= 1 and at "
                         "most half of each run's steps: pass a smaller block")
    if not mixed or mixed.keys() != reward.keys():
        raise ValueError(f"mixed_text: mixed holds seeds {sorted(mixed)} and reward "
                         f"{sorted(reward)}: pass the same seeds, at least one")
    for name, runs in (("mixed", mixed), ("reward", reward)):
        for seed, values in runs.items():
            for i, v in enumerate(values):
                check_share("mixed_text", f"{name}[{seed}][{i}]", v)

    def mean(values: list[float]) -> float:
        return sum(values) / len(values)

    def ends(values: list[float]) -> str:
        return f"{points(mean(values[:block]))}% → {points(mean(values[-block:]))}%"

    runs = "; ".join(f"seed {s}: reward {ends(reward[s])}, mixed groups {ends(mixed[s])}"
                     for s in mixed)
    text = (f"Over the first and the last {block} steps of each run: {runs}. A group whose "
            f"{group} answers are all right, or all wrong, has advantages 0 and adds "
            "nothing to the gradient")
    rose = all(mean(reward[s][-block:]) > mean(reward[s][:block]) for s in mixed)
    fewer = all(mean(mixed[s][-block:]) < mean(mixed[s][:block]) for s in mixed)
    if rose and fewer:
        return text + ": as the reward rose in every run, fewer groups taught."
    return text + "."


def brake_text(lr: float, beta: float, plain: dict, braked: dict, task: str) -> str:
    """What a KL penalty ``beta`` did at learning rate ``lr``, on one seed: ``plain`` and
    ``braked`` hold ``pass@1`` on ``task`` (shares) and ``braked`` the last steps' mean
    ``kl`` (nats a token, >= 0)."""
    for name, v in (("lr", lr), ("beta", beta)):
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not 0 < v < math.inf:
            raise ValueError(f"brake_text: {name} = {v!r} must be a positive number")
    one = check_share("brake_text", "plain['pass@1']", plain["pass@1"])
    other = check_share("brake_text", "braked['pass@1']", braked["pass@1"])
    kl = braked["kl"]
    if isinstance(kl, bool) or not isinstance(kl, numbers.Real) or not 0 <= kl < math.inf:
        raise ValueError(f"brake_text: braked['kl'] = {kl!r} must be a KL, a finite number "
                         ">= 0 (nats a token)")
    text = (f"At a learning rate of {lr:g}, one seed: without a penalty, **{task}**'s pass@1 "
            f"ended at {points(one)}%; with β = {beta:g}, at {points(other)}%, its KL to "
            f"the SFT model {kl:.3f} nats a token over the last steps. ")
    if other - one >= SLOWED:
        return text + ("On this seed the penalty slowed the fall (one run: a sign, not a "
                       "measurement); it cannot remove the cause, the step that is too large.")
    if one - other >= SLOWED:
        return text + ("On this seed pass@1 fell further with the penalty (one run: a "
                       "sign, not a measurement).")
    return text + (f"On this seed the two ended within {points(SLOWED)} points: the "
                   "penalty did not slow the fall that one can see (one run: a sign, not a "
                   "measurement).")


def sampling_text(greedy: dict, pass1: dict, pass_k: dict, k: int) -> str:
    """Greedy exact match, pass@1 and pass@k of each task (task -> one share per seed), and
    what their order says."""
    k = _check_k("sampling_text", k)
    if not greedy or greedy.keys() != pass1.keys() or greedy.keys() != pass_k.keys():
        raise ValueError(f"sampling_text: greedy, pass1 and pass_k hold the tasks "
                         f"{list(greedy)}, {list(pass1)} and {list(pass_k)}: pass the same "
                         "tasks, at least one")
    for name, runs in (("greedy", greedy), ("pass1", pass1), ("pass_k", pass_k)):
        for task, values in runs.items():
            if (isinstance(values, (str, bytes)) or not hasattr(values, "__len__")
                    or not values):
                raise ValueError(f"sampling_text: {name}[{task!r}] = {values!r} must be a "
                                 "list of shares, one per seed")
            for i, v in enumerate(values):
                check_share("sampling_text", f"{name}[{task!r}][{i}]", v)

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
    """What one prompt's sampled answers show after a step too large: ``shown`` maps each
    model's name (the first one before, the last one after) to its answers' texts and
    rewards. It says "narrowed" only where the later model wrote at most half as many
    different answers and its commonest answer fills more samples, and "nothing left to
    learn" only where the later model's rewards are all equal (as one group: no
    gradient)."""
    if len(shown) < 2 or any(len(texts) != len(rewards) or not texts
                             for texts, rewards in shown.values()):
        raise ValueError(f"collapse_text: shown holds {len(shown)} model(s): pass at least two, "
                         "each with one reward per answer text")
    (first, (texts, rewards)), (last, (texts_after, rewards_after)) = (
        list(shown.items())[0], list(shown.items())[-1])

    def commonest(answers: list[str]) -> int:
        return max(answers.count(a) for a in answers)

    text = (f"Seed {seed}'s {len(texts)} answers to one held-out prompt: the {first} model wrote "
            f"{len(set(texts))} different answers, {sum(r > 0 for r in rewards):.0f} of them "
            f"right, its commonest {commonest(texts)} times; the {last} model "
            f"{len(set(texts_after))}, {sum(r > 0 for r in rewards_after):.0f} right, its "
            f"commonest {commonest(texts_after)} times.")
    if (2 * len(set(texts_after)) <= len(set(texts))
            and commonest(texts_after) > commonest(texts)):
        text += " On this prompt the policy has narrowed onto fewer answers."
    if len(set(rewards_after)) == 1:
        text += (f" Its {len(texts_after)} rewards are all {rewards_after[0]:g}: as one "
                 "group they would carry no gradient, so this prompt has nothing left to "
                 f"teach the {last} model.")
    return text


def groups_text(per_group: dict[str, list[int]], group: int) -> str:
    """What one batch's groups say, task by task: ``per_group`` maps each task to its groups'
    numbers of right answers (out of ``group``)."""
    if (isinstance(group, bool) or not isinstance(group, numbers.Integral) or group < 2
            or not per_group or any(not counts for counts in per_group.values())):
        raise ValueError(f"groups_text: group={group!r} must be a whole number >= 2 and "
                         "per_group one list of right answers per group for each task, "
                         "none empty")
    parts, unanimous = [], {}
    for task, counts in per_group.items():
        if any(isinstance(c, bool) or not isinstance(c, numbers.Integral)
               or not 0 <= c <= group for c in counts):
            raise ValueError(f"groups_text: per_group[{task!r}] = {counts!r} must count "
                             f"the right answers of each group, from 0 to {group}")
        right, wrong = counts.count(group), counts.count(0)
        unanimous[task] = (right + wrong) / len(counts)
        parts.append(f"**{task}** (mean reward {sum(counts) / (group * len(counts)):.2f}): "
                     f"{right + wrong} of its {len(counts)} groups unanimous, {right} all "
                     f"right and {wrong} all wrong")
    text = ("In this batch, " + "; ".join(parts) + ". A unanimous group's samples are spent "
            "for nothing: its advantages are 0.")
    starved = [t for t, counts in per_group.items() if sum(counts) <= len(counts)]
    if starved:
        text += (f" **{starved[0]}**, which the model almost never solves, gives almost no "
                 "signal: reinforcement learning sharpens what the model can already do; it "
                 "does not teach from zero.")
    return text
