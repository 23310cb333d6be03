"""Chapter 14 — the chapter's lessons and sentences, judged and written from the numbers.

Each ``judge_*`` function takes one value per seed (shares from 0 to 1, as
``sampled_scores`` returns them) and returns the ``lessons.Lesson`` it judged: a paired
difference over the seeds, its margin how far it clears zero at the one-sided 95% level of
Student's t (2.92 standard errors with three seeds, 2.02 with six); the gain must also clear
zero in a bootstrap over the prompts. A positive margin does not make a claim safe from
another CPU's arithmetic or another seed: where it is small beside the effect, the sentence
says so. The opening's drift is judged seed by seed against a control whose weights changed
as much, by a bootstrap over the prompts; ``drift_text`` says which way it went and whether
the premise of the chapter's reading, right answers as frequent after either opening, was
measured to hold. ``summary_text`` writes the Summary's point from the verdicts.
"""

from __future__ import annotations

import math
import numbers

from .lessons import (
    T_LEVEL, Lesson, beyond_t, check_share, lesson, paired_bootstrap, paired_difference,
    points, seed_count,
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
    k = _check_k("judge_gain", k)
    pass_k = _pair("judge_gain", "pass_k", pass_k)
    by_prompt = _pair("judge_gain", "by_prompt", by_prompt)
    n = _shares("judge_gain", seeds, before=before, after=after, pass_k_before=pass_k[0],
                pass_k_after=pass_k[1])
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
    k_mean, k_se = paired_difference(pass_k[1], pass_k[0])
    told = (f"pass@{k} moved by {points(k_mean)} ± {points(k_se)} points "
            f"({points(sum(pass_k[0]) / n)}% → {points(sum(pass_k[1]) / n)}%)")
    seen = (f"On held-out **{task}** prompts, pass@1 went from {points(sum(before) / n)}% "
            f"to {points(sum(after) / n)}% (seeds after: {_each(after)}), a change of "
            f"{points(mean)} ± {points(se)} points over {n} seeds")
    bounds = (f"Its lower one-sided {T_LEVEL:.0%} bound is {points(margin)} points over "
              f"the seeds (Student's t: {t:.2f} standard errors, {n} paired seeds), and "
              f"{points(bound)} points over the prompts (a bootstrap over the {prompts} "
              "prompts, each resample the same prompts for every seed)")
    return lesson(
        f"GRPO raises pass@1 on '{task}'", 100 * min(margin, bound), "points",
        holds=f"{seen}. {bounds}: clear of zero both ways, while {told}. The model now "
              "picks more often what it could already sample."
              + _thin(min(margin, bound), mean, "rise"),
        fails=f"{seen}. {bounds}: not both above zero on this machine, while {told}: a "
              "short run's gain is of the size of the evaluation's noise.")


def judge_collapse(before: list[float], after: list[float], seeds, lr: float,
                   task: str) -> Lesson:
    """The warning: at learning rate ``lr``, the trained task's pass@1 falls (a fall in
    pass@1 only: the answers' diversity is not measured here)."""
    n = _shares("judge_collapse", seeds, before=before, after=after)
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real) or not 0 < lr < math.inf:
        raise ValueError(f"judge_collapse: lr = {lr!r} must be the positive learning rate "
                         "of the run that pushed too hard (the chapter's COLLAPSE_LR)")
    mean, se, t, margin = beyond_t(before, after)
    return lesson(
        "a large step lowers pass@1 on the rewarded task", 100 * margin, "points",
        holds=f"At a learning rate of {lr:g}, the same runs lowered **{task}**'s pass@1 "
              f"from {points(sum(before) / n)}% to {points(sum(after) / n)}% (seeds after: "
              f"{_each(after)}): a fall of {points(mean)} ± {points(se)} points over {n} "
              f"seeds, clear of zero {_clear(t, n)}, on the very task the reward pays for."
              + _thin(margin, mean, "fall"),
        fails=f"At a learning rate of {lr:g}, **{task}**'s pass@1 moved by {points(-mean)} "
              f"± {points(se)} points only, not a fall clear of zero {_clear(t, n)} on "
              "this machine: the step at which pass@1 falls moves with the arithmetic.")


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
    pass1 = _pair("judge_forgetting", "pass1", pass1)
    _shares("judge_forgetting", seeds, pass1_before=pass1[0], pass1_after=pass1[1])
    mean, se, t, margin = beyond_t(before, after)
    falls = sum(b > a for b, a in zip(before, after))
    told = (f"Its sampled pass@1 went from {points(sum(pass1[0]) / n)}% to "
            f"{points(sum(pass1[1]) / n)}% (seeds after: {_each(pass1[1])}).")
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
              f"machine: a short run drifts little from where it started. {told}")


SHOWN = 0.05  # the sampled share must move this much further from 50/50 to "show it too"
SLOWED = 0.02  # the brake's pass@1 must differ by this much to say which way it went
FAR = 10  # the control's KL must be this many times below the run's to be "far less"
TWO_SIDED = 0.975  # the accuracy gap may fall on either side: a two-sided 95% level


def judge_opening(before: list[list[float]], after: list[list[float]],
                  control: list[list[float]], seeds, sampled: tuple[list, list],
                  kl: tuple[list, list]) -> Lesson:
    """The unrewarded courteous/rude opening moves away from an even share in every run,
    further than a change of the same size in the weights moves it: each prompt's courteous
    share (``assistant.courteous_odds``; ``before``, ``after``, ``control``: one list of the
    held-out prompts' per seed, the SFT model, the GRPO run and
    ``verifier_control.same_size_change``) is measured by its distance from 50/50, and the
    lesson asks whether the run increased the mean distance more than the control did; the
    margin is the smallest seed's lower bound of a bootstrap over the prompts, in points.
    ``sampled`` (before, after): the courteous share of the sampled answers, per seed.
    ``kl`` (run, control): each one's ``verifier_control.next_token_kl`` from the SFT model,
    per seed, which says how much less the control changed the model's predictions.

    What the control rules out is narrow: a random change of the same size in the weights.
    It does not rule out that any GRPO run of this length would move the opening whatever
    its reward. Rewards shuffled within each group would move it too, by an amount that
    differs from seed to seed, so one such run per seed could not tell the two apart: that
    takes the spread of the drift over many seeds of each kind (not run here)."""
    sampled = _pair("judge_opening", "sampled", sampled)
    kl = _pair("judge_opening", "kl", kl)
    n = _shares("judge_opening", seeds, sampled_before=sampled[0], sampled_after=sampled[1])
    seed_count("judge_opening", seeds, before=before, after=after, control=control,
               kl_run=kl[0], kl_control=kl[1])
    for name, values in (("kl run", kl[0]), ("kl control", kl[1])):
        for i, v in enumerate(values):
            if (isinstance(v, bool) or not isinstance(v, numbers.Real)
                    or not 0 <= v < math.inf):
                raise ValueError(f"judge_opening: {name}[{i}] = {v!r} must be a KL, a "
                                 "finite number >= 0 (next_token_kl's nats)")
    drift, moved, bounds = [], [], []
    for s, (b, a, c) in enumerate(zip(before, after, control)):
        if not len(b) == len(a) == len(c) >= 2:
            raise ValueError(f"judge_opening: before[{s}], after[{s}] and control[{s}] "
                             f"hold {len(b)}, {len(a)} and {len(c)} shares: pass one per "
                             "held-out prompt, the same prompts on every side (at least "
                             "two)")
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
    ratio = min(r / c if c > 0 else math.inf for r, c in zip(*kl))
    less = ("far less" if ratio >= FAR else "less" if ratio > 1 else "no less")
    limits = ("What this control rules out is narrow. It moves the model's next-token "
              f"predictions {less} than the run does: their KL from the SFT model over the "
              f"answers' positions is {', '.join(f'{v:.4f}' for v in kl[1])} nats against "
              f"the runs' {', '.join(f'{v:.4f}' for v in kl[0])}"
              + (f", {ratio:.0f} times less at the least" if ratio > 1 else "")
              + ". It does not rule out that any GRPO run this long would move the "
              "opening, whatever its reward. A run whose rewards are shuffled within each "
              "group would move it too, by an amount that differs from seed to seed (the "
              f"runs here moved it by {points(min(drift))} to {points(max(drift))} "
              "points), so one such run per seed could not tell the two apart: that would "
              "take the spread of the drift over many seeds of each kind, and none is run "
              "here.")
    return lesson(
        "the unrewarded opening moves further from 50/50 than a same-size random change "
        "moves it", 100 * min(bounds), "points",
        holds=f"No reward mentions the opening, yet in each of the {n} runs it moved "
              f"away from an even share: {seen}. In every seed the run moved it further "
              f"than its control, {bound}. {told} {limits}",
        fails=f"Not every run moved the opening further from 50/50 than its control here: "
              f"{seen}; the run's excess over the control, {bound}, is not above zero in "
              f"every seed on this machine, in a run this short. {told} {limits}")


def drift_text(before: list[float], after: list[float], right: list[dict], seeds) -> str:
    """Which way the opening went, seed by seed, and what the measured premise of the
    chapter's reading says: ``before``, ``after``, the mean courteous share per seed (SFT
    model, GRPO run); ``right``, per seed, the SFT model's
    ``verifier_control.right_by_opening`` on the training prompts."""
    n = _shares("drift_text", seeds, before=before, after=after)
    seed_count("drift_text", seeds, right=right)
    gaps, rates = [], []
    for s, counts in enumerate(right):
        if (not isinstance(counts, dict) or set(counts) != {"courteous", "rude"}
                or any(c[1] < 1 or not 0 <= c[0] <= c[1] for c in counts.values())):
            raise ValueError(f"drift_text: right[{s}] = {counts!r} must be "
                             "right_by_opening's {opening: (right, answers)}, both "
                             "openings answered at least once")
        rate = {style: r / total for style, (r, total) in counts.items()}
        rates.append(rate)
        gaps.append(rate["courteous"] - rate["rude"])
    mean, se, t, _ = beyond_t(gaps, [0.0] * n, level=TWO_SIDED)
    side_margin = abs(mean) - t * se
    level = (f"at the two-sided {2 * TWO_SIDED - 1:.0%} level of Student's t over {n} "
             f"seeds ({t:.2f} standard errors)")
    premise = (f"On the prompts GRPO trains on, the SFT models' sampled answers were right "
               f"{points(sum(r['courteous'] for r in rates) / n)}% of the time after the "
               f"courteous opening and {points(sum(r['rude'] for r in rates) / n)}% after "
               f"the rude one: a gap of {points(mean)} ± {points(se)} points over the "
               f"{n} seeds (seeds: {_each(gaps)}), ")
    favoured = "courteous" if mean > 0 else "rude"
    if side_margin > 0:
        premise += (f"clear of zero {level}: right answers came more often after the "
                    f"{favoured} opening, so the reward itself leaned toward it.")
    else:
        premise += (f"not clear of zero {level}: within what these samples "
                    "can tell, right answers came as often after either opening, the "
                    "premise of the reading.")
    up = sum(a > b for b, a in zip(before, after))
    down = sum(a < b for b, a in zip(before, after))
    if (up == n or down == n) and n > 1:
        side = "courteous" if up == n else "rude"
        way = (f"All {n} runs moved the share the same way, toward the {side} opening. "
               "Were each seed's direction a fair coin, as a walk with no pull would make "
               f"it, {n} alike would come by chance {2 ** (1 - n):.1%} of the time: the "
               "reading alone does not account for it")
        if side_margin > 0:
            way += (", and the gap in accuracy points " +
                    ("the same way." if favoured == side else "the other way."))
        else:
            way += ("; were it seen on more seeds, something this chapter does not "
                    f"measure would favour the {side} opening.")
    elif up and down:
        way = (f"The runs moved the share each seed its own way: {up} toward the courteous "
               f"opening, {down} toward the rude one, as a walk with no pull would.")
    else:
        way = (f"The runs moved the share toward the courteous opening in {up} seeds, "
               f"toward the rude one in {down}, and not at all in {n - up - down}.")
    return premise + " " + way


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
    text = (f"At a learning rate of {lr:g}, one seed: without a penalty, **{task}**'s "
            f"pass@1 ended at {points(one)}%; with β = {beta:g}, at {points(other)}%, its "
            f"KL to the SFT model {kl:.3f} nats a token over the last steps. ")
    if other - one >= SLOWED:
        return text + ("On this seed the penalty slowed the fall (one run: a sign, not a "
                       "measurement); it cannot remove the cause, the step that is too "
                       "large.")
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
        text += ("Greedy decoding beats one sample: at temperature 1 a sample sometimes "
                 "takes a character the model thought less likely, and one wrong character "
                 "fails the answer. ")
    return text + (f"pass@{k} is the share of prompts the model *can* answer within {k} "
                   "tries; where it is above pass@1, right answers are there to be sampled "
                   "and rewarded.")


def collapse_text(seed: int, shown: dict[str, tuple[list[str], list[float]]]) -> str:
    """What one prompt's sampled answers show after a step too large: ``shown`` maps each
    model's name (the first one before, the last one after) to its answers' texts and
    rewards. It says "narrowed" only where the later model wrote at most half as many
    different answers and its commonest answer fills more samples, and "nothing left to
    gradient" only where the later model's rewards are all equal (as one group)."""
    if len(shown) < 2 or any(len(texts) != len(rewards) or not texts
                             for texts, rewards in shown.values()):
        raise ValueError(f"collapse_text: shown holds {len(shown)} model(s): pass at least "
                         "two, each with one reward per answer text")
    (first, (texts, rewards)), (last, (texts_after, rewards_after)) = (
        list(shown.items())[0], list(shown.items())[-1])

    def commonest(answers: list[str]) -> int:
        return max(answers.count(a) for a in answers)

    text = (f"Seed {seed}'s {len(texts)} answers to one held-out prompt: the {first} model "
            f"wrote {len(set(texts))} different answers, {sum(r > 0 for r in rewards):.0f} "
            f"of them right, its commonest {commonest(texts)} times; the {last} model "
            f"{len(set(texts_after))}, {sum(r > 0 for r in rewards_after):.0f} right, its "
            f"commonest {commonest(texts_after)} times.")
    if (2 * len(set(texts_after)) <= len(set(texts))
            and commonest(texts_after) > commonest(texts)):
        text += " On this prompt the policy has narrowed onto fewer answers."
    if len(set(rewards_after)) == 1:
        text += (f" Its {len(texts_after)} rewards are all {rewards_after[0]:g}: as one "
                 f"group, this draw of {len(texts_after)} would carry no gradient.")
    return text


def groups_text(per_group: dict[str, list[int]], group: int) -> str:
    """What one batch's groups say, task by task: ``per_group`` maps each task to its
    groups' numbers of right answers (out of ``group``)."""
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
    text = ("In this batch, " + "; ".join(parts) + ". A unanimous group's samples are "
            "spent for nothing: its advantages are 0.")
    starved = [t for t, counts in per_group.items() if sum(counts) <= len(counts)]
    if starved:
        text += (f" **{starved[0]}**, which the model almost never solves, gives almost no "
                 "signal: reinforcement learning sharpens what the model can already do; "
                 "it does not teach from zero.")
    return text


def summary_text(gain: Lesson, collapse: Lesson, forgetting: Lesson, opening: Lesson,
                 brake: tuple[float, float], larger: float, seeds: int,
                 collapse_seeds: int) -> str:
    """The Summary's point on the runs, each clause from its lesson's verdict: ``brake`` the
    pass@1 (plain, braked) of the one braked seed, ``larger`` how many times the large
    step's learning rate is the first runs', ``seeds`` and ``collapse_seeds`` their
    numbers."""
    for name, value in (("gain", gain), ("collapse", collapse), ("forgetting", forgetting),
                        ("opening", opening)):
        if not isinstance(value, Lesson):
            raise ValueError(f"summary_text: {name} = {value!r:.60} must be the Lesson its "
                             "judge_* function returned")
    plain, braked = (check_share("summary_text", f"brake[{i}]", v)
                     for i, v in enumerate(brake))
    text = (f"On the assistant, over {seeds} paired seeds, GRPO "
            + ("raised pass@1 toward pass@k, clear of zero over the seeds and over the "
               "prompts: it makes the model choose more often what it could already "
               "sample (section 14.4 says by how much)" if gain.holds else
               "did not raise pass@1 clear of its evaluation's noise on this machine "
               "(section 14.4 gives the numbers)")
            + f". At a learning rate {larger:g} times larger ({collapse_seeds} seeds), "
            + ("pass@1 fell instead" if collapse.holds else
               "pass@1 did not fall clear of zero here"))
    if braked - plain >= SLOWED:
        text += " (on one seed, a KL penalty slowed the fall)"
    text += "; the task not rewarded " + ("got worse" if forgetting.holds else
                                          "did not clearly get worse")
    if opening.holds:
        return text + ("; and the opening, which the reward ignores, moved away from half "
                       "and half in every run, further than a random change of the same "
                       "size in the weights moves it. That control shows that training "
                       "moved the opening, not that this reward did: telling those apart "
                       "would take many runs with shuffled rewards beside many with the "
                       "real ones.")
    return text + ("; and the opening, which the reward ignores, did not move further than "
                   "its control in every run here.")
