"""Chapter 14 — the chapter's lessons and sentences, judged and written from the numbers.

Each ``judge_*`` function takes one value per seed (shares from 0 to 1, as
``sampled_scores`` returns them) and returns the ``lessons.Lesson`` it judged: a paired
difference over the seeds, its margin how far it clears zero at the one-sided 95% level of
Student's t (2.92 standard errors with three seeds, 2.02 with six); the gain must also clear
zero in a bootstrap over the prompts. A positive margin does not make a claim safe from
another CPU's arithmetic or another seed: where it is small beside the effect, the sentence
says so. The opening's lesson is ``verifier_opening``'s, the chapter's other sentences
``verifier_text``'s; both use the helpers here.
"""

from __future__ import annotations

import math
import numbers

from .lessons import (
    T_LEVEL, Lesson, beyond_t, check_share, lesson, paired_bootstrap,
    points, seed_count,
)


def checked_shares(judge: str, seeds, **runs) -> int:
    """The number of seeds, after checking that each list of ``runs`` holds one share per
    seed."""
    n = seed_count(judge, seeds, **runs)
    for name, values in runs.items():
        for i, v in enumerate(values):
            check_share(judge, f"{name}[{i}]", v)
    return n


def each_points(values: list[float]) -> str:
    """Chapter 14: shares as points, comma-separated, one per seed ("12.5, -3.0")."""
    return ", ".join(points(v) for v in values)


def _clear(t: float, n: int) -> str:
    """What "clear of zero" means here, in words."""
    return (f"at the one-sided {T_LEVEL:.0%} level of Student's t over {n} paired seeds "
            f"({t:.2f} standard errors)")


THIN = 0.25  # a margin under this share of the effect is called thin in the sentence
TWO_SIDED = 0.975  # a difference that may fall on either side: a two-sided 95% level


def _thin(margin: float, mean: float, what: str) -> str:
    """How far the effect clears the bar, said plainly when that is a small part of it."""
    if margin > 0 and margin < THIN * abs(mean):
        return (f" The margin is thin: the {what} clears the bar by {points(margin)} "
                f"points only, under {THIN:.0%} of it; one seed more, or another CPU's "
                "arithmetic, could tip the verdict.")
    return ""


def check_k(judge: str, k) -> int:
    """Chapter 14: ``k`` of pass@k as an ``int``, or a ``ValueError`` naming ``judge``."""
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
        raise ValueError(f"{judge}: k={k!r} must be a whole number >= 1, the k of pass@k")
    return int(k)


def check_pair(judge: str, name: str, value) -> tuple:
    """``value`` as a tuple (before, after) of two lists, else a ValueError naming
    ``judge``."""
    if (not isinstance(value, (tuple, list)) or len(value) != 2
            or any(isinstance(v, (str, bytes)) or not hasattr(v, "__len__")
                   for v in value)):
        raise ValueError(f"{judge}: {name} = {value!r} must be a pair (before, after) of "
                         "lists, one value per seed in each")
    return tuple(value)


def _by_prompt(judge: str, means: list[float], rows: list, side: str) -> list[list[float]]:
    """``rows``, one list of per-prompt pass@1 per seed, checked to be shares, as many
    prompts in every seed, and to average to ``means`` (the same answers on both counts)."""
    if any(len(r) != len(rows[0]) or len(r) < 2 for r in rows):
        raise ValueError(f"{judge}: by_prompt's {side} holds {[len(r) for r in rows]} "
                         "prompts per seed: pass every seed's pass@1 on the same prompts, "
                         "at least two")
    for s, (mean, r) in enumerate(zip(means, rows)):
        for j, v in enumerate(r):
            check_share(judge, f"by_prompt {side}[{s}][{j}]", v)
        if abs(sum(r) / len(r) - mean) > 1e-9:
            raise ValueError(f"{judge}: seed {s}'s per-prompt pass@1 {side} averages "
                             f"{sum(r) / len(r):.6f}, its pass@1 is {mean:.6f}: pass "
                             "sampled_answers of the same items, n and seed as "
                             "sampled_scores, so that both count the same answers")
    return rows


def judge_gain(before: list[float], after: list[float], pass_k: tuple[list, list], k: int,
               seeds, task: str, by_prompt: tuple[list, list]) -> Lesson:
    """The trained task's pass@1 rises, clear of zero two ways: Student's t over the paired
    seeds (these prompts, other seeds), and a bootstrap over the prompts paired by seed
    (every seed resampled on the same prompts: these seeds, other prompts); the margin is
    the smaller of the two lower bounds, in points. ``by_prompt`` (before, after): per seed,
    each prompt's pass@1, which average to ``before`` and ``after``; ``pass_k`` (before,
    after) says what pass@k did."""
    k = check_k("judge_gain", k)
    pass_k = check_pair("judge_gain", "pass_k", pass_k)
    by_prompt = check_pair("judge_gain", "by_prompt", by_prompt)
    n = checked_shares("judge_gain", seeds, before=before, after=after,
                       pass_k_before=pass_k[0], pass_k_after=pass_k[1])
    seed_count("judge_gain", seeds, by_prompt_before=by_prompt[0],
               by_prompt_after=by_prompt[1])
    rows = [_by_prompt("judge_gain", m, r, side)
            for m, r, side in ((before, by_prompt[0], "before"),
                               (after, by_prompt[1], "after"))]
    if len(rows[0][0]) != len(rows[1][0]):
        raise ValueError(f"judge_gain: by_prompt holds {len(rows[0][0])} prompts before "
                         f"and {len(rows[1][0])} after: pass the same prompts on both "
                         "sides")
    prompts = len(rows[0][0])
    rise = [sum(a[j] - b[j] for b, a in zip(*rows)) / n for j in range(prompts)]
    mean, se, t, margin = beyond_t(after, before)
    bound = paired_bootstrap(rise)
    k_mean, k_se, k_t, _ = beyond_t(pass_k[1], pass_k[0])
    k_upper = k_mean + k_t * k_se  # pass@k's upper one-sided bound over the seeds
    told = (f"pass@{k} moved by {points(k_mean)} ± {points(k_se)} points "
            f"({points(sum(pass_k[0]) / n)}% → {points(sum(pass_k[1]) / n)}%)")
    if k_upper < min(margin, bound):
        sharper = (f" pass@{k} rose by at most {points(k_upper)} points (its upper bound "
                   f"over the seeds), less than {points(margin)} and {points(bound)} "
                   "points, the least pass@1's rise can be over the seeds and over the "
                   "prompts: the model picks more often what it could already sample, as "
                   f"far as pass@{k} from {k} samples a prompt, near its ceiling, can "
                   "tell.")
    else:
        sharper = (f" Whether it also found answers it could not sample before, pass@{k} "
                   f"cannot tell here: its upper bound over the seeds, {points(k_upper)} "
                   f"points, reaches {points(min(margin, bound))}, the least pass@1's "
                   "rise can be.")
    seen = (f"On held-out **{task}** prompts, pass@1 went from {points(sum(before) / n)}% "
            f"to {points(sum(after) / n)}% (seeds after: {each_points(after)}), a change "
            f"of {points(mean)} ± {points(se)} points over {n} seeds")
    bounds = (f"Its lower one-sided {T_LEVEL:.0%} bound is {points(margin)} points over "
              f"the seeds (Student's t: {t:.2f} standard errors, {n} paired seeds), and "
              f"{points(bound)} points over the prompts (a bootstrap over the {prompts} "
              "prompts, each resample the same prompts for every seed); each bound holds "
              "one source of noise, other seeds or other prompts, not both at once")
    return lesson(
        f"GRPO raises pass@1 on '{task}'", 100 * min(margin, bound), "points",
        holds=f"{seen}. {bounds}: clear of zero both ways, while {told}.{sharper}"
              + _thin(min(margin, bound), mean, "rise"),
        fails=f"{seen}. {bounds}: not both above zero on this machine, while {told}.")


def judge_collapse(before: list[float], after: list[float], seeds, lr: float,
                   task: str) -> Lesson:
    """The warning: at learning rate ``lr``, the trained task's pass@1 falls (a fall in
    pass@1 only: the answers' diversity is not measured here)."""
    n = checked_shares("judge_collapse", seeds, before=before, after=after)
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real) or not 0 < lr < math.inf:
        raise ValueError(f"judge_collapse: lr = {lr!r} must be the positive learning rate "
                         "of the run that pushed too hard (the chapter's COLLAPSE_LR)")
    mean, se, t, margin = beyond_t(before, after)
    return lesson(
        "a large step lowers pass@1 on the rewarded task", 100 * margin, "points",
        holds=f"At a learning rate of {lr:g}, runs of the same seeds lowered **{task}**'s "
              f"pass@1 from {points(sum(before) / n)}% to {points(sum(after) / n)}% (seeds "
              f"after: {each_points(after)}): a fall of {points(mean)} ± {points(se)} "
              f"points over {n} seeds, clear of zero {_clear(t, n)}, on the very task the "
              "reward pays for."
              + _thin(margin, mean, "fall"),
        fails=f"At a learning rate of {lr:g}, **{task}**'s pass@1 moved by {points(-mean)} "
              f"± {points(se)} points only, not a fall clear of zero {_clear(t, n)} on "
              "this machine.")


def _logps(judge: str, seeds, **runs) -> int:
    """The number of seeds, after checking that each list of ``runs`` holds one
    log-probability (a finite number <= 0) per seed."""
    n = seed_count(judge, seeds, **runs)
    for name, values in runs.items():
        for i, v in enumerate(values):
            if (isinstance(v, bool) or not isinstance(v, numbers.Real)
                    or not -math.inf < v <= 0):
                raise ValueError(f"{judge}: {name}[{i}] = {v!r} must be a log-probability, "
                                 "a finite number <= 0: pass answer_logprob's values")
    return n


def judge_forgetting(before: list[float], after: list[float], seeds, trained: str,
                     other: str, pass1: tuple[list, list]) -> Lesson:
    """The task not rewarded (``other``) gets worse while ``trained`` is trained: the mean
    log-probability of its reference answers (``before``, ``after``: ``answer_logprob`` per
    seed) falls; ``pass1`` (before, after) says what its sampled pass@1 did."""
    n = _logps("judge_forgetting", seeds, before=before, after=after)
    pass1 = check_pair("judge_forgetting", "pass1", pass1)
    checked_shares("judge_forgetting", seeds, pass1_before=pass1[0], pass1_after=pass1[1])
    mean, se, t, margin = beyond_t(before, after)
    falls = sum(b > a for b, a in zip(before, after))
    told = (f"Its sampled pass@1 went from {points(sum(pass1[0]) / n)}% to "
            f"{points(sum(pass1[1]) / n)}% (seeds after: {each_points(pass1[1])}).")
    return lesson(
        "the task not rewarded gets worse", margin, "nats",
        holds=f"Nothing rewarded **{other}**, and the log-probability of its reference "
              f"answers fell from {sum(before) / n:.2f} to {sum(after) / n:.2f} nats on "
              f"average, in {falls} of {n} seeds (a fall of {mean:.2f} ± {se:.2f} nats, "
              f"clear of zero {_clear(t, n)}: the reference answers became e^{mean:.2f} ≈ "
              f"{math.exp(mean):.1f} times less likely, a geometric mean over them) "
              f"while **{trained}** was trained. {told}",
        fails=f"**{other}**, not rewarded: the log-probability of its reference answers "
              f"moved by {-mean:.2f} ± {se:.2f} nats only ({sum(before) / n:.2f} → "
              f"{sum(after) / n:.2f}), not a fall clear of zero {_clear(t, n)} on this "
              f"machine. {told}")

