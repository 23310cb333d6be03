"""Chapter 14 — the courteous or rude opening, which no reward mentions: its lesson and
which way it went.

``judge_opening`` asks whether the GRPO runs moved each prompt's courteous share further
from 50/50 than a control whose weights changed as much, in no chosen direction
(``verifier_control.same_size_change``). ``accuracy_gap`` tests the premise of the
chapter's reading, that right answers come as often after either opening (the gap within
each prompt, ``verifier_control.opening_gap``), at the two-sided 95% level over the seeds;
``drift_text`` says it, and which way each run moved the share.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

from .lessons import (
    T_LEVEL, Lesson, beyond_t, lesson, paired_bootstrap, points, seed_count,
)
from .verifier_prose import TWO_SIDED, check_pair, checked_shares, each_points

FAR = 10  # the control's KL must be this many times below the run's to be "far less"


def judge_opening(before: list[list[float]], after: list[list[float]],
                  control: list[list[float]], seeds, sampled: tuple[list, list],
                  sampled_odds: tuple[list, list], kl: tuple[list, list]) -> Lesson:
    """The unrewarded courteous/rude opening moves away from an even share, further than a
    change of the same size in the weights moves it: each prompt's courteous
    share (``assistant.courteous_odds``; ``before``, ``after``, ``control``: one list of the
    held-out prompts' per seed, the SFT model, the GRPO run and
    ``verifier_control.same_size_change``) is measured by its distance from 50/50, and the
    lesson asks whether the run increased the mean distance more than the control did, on
    average over the seeds beyond Student's t (``lessons.beyond_t``, one-sided 95%): the
    margin, in points. Each seed's lower bound of a bootstrap over the prompts is printed.
    ``sampled`` (before, after): the courteous share of the sampled answers, per seed;
    ``sampled_odds`` (before, after): per seed, ``courteous_odds`` on the prompts whose
    answers were sampled, so that the two are read on the same prompts.
    ``kl`` (run, control): each one's ``verifier_control.next_token_kl`` from the SFT model,
    per seed, which says how much less the control changed the model's predictions.

    What the control rules out is narrow: a random change of the same size in the weights.
    It does not rule out that any GRPO run of this length would move the opening whatever
    its reward. Rewards shuffled within each group would move it too, by an amount that
    differs from seed to seed, so one such run per seed could not tell the two apart: that
    takes the spread of the drift over many seeds of each kind (not run here)."""
    sampled = check_pair("judge_opening", "sampled", sampled)
    sampled_odds = check_pair("judge_opening", "sampled_odds", sampled_odds)
    kl = check_pair("judge_opening", "kl", kl)
    n = checked_shares("judge_opening", seeds, sampled_before=sampled[0],
                       sampled_after=sampled[1])
    seed_count("judge_opening", seeds, before=before, after=after, control=control,
               kl_run=kl[0], kl_control=kl[1], sampled_odds_before=sampled_odds[0],
               sampled_odds_after=sampled_odds[1])
    m = len(sampled_odds[0][0])
    for side, runs in zip(("before", "after"), sampled_odds):
        for s, odds in enumerate(runs):
            if len(odds) != m or not m:
                raise ValueError(f"judge_opening: sampled_odds {side}[{s}] holds "
                                 f"{len(odds)} shares, before[0] {m}: pass courteous_odds "
                                 "on the prompts whose answers were sampled, the same "
                                 "prompts for every seed (at least one)")
            checked_shares("judge_opening", range(m), **{f"sampled_odds {side}[{s}]": odds})
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
        checked_shares("judge_opening", range(len(b)),
                       **{f"before[{s}]": b, f"after[{s}]": a, f"control[{s}]": c})
        far = [[abs(p - 0.5) for p in side] for side in (b, a, c)]
        drift.append(sum(far[1]) / len(b) - sum(far[0]) / len(b))
        moved.append(sum(far[2]) / len(b) - sum(far[0]) / len(b))
        bounds.append(paired_bootstrap([x - y for x, y in zip(far[1], far[2])], seed=s))

    def shares(runs: list[list[float]]) -> str:
        return ", ".join(points(sum(r) / len(r)) for r in runs)
    seen = (f"the courteous share at the answer's first character, averaged over the "
            f"{len(before[0])} held-out prompts, went from {shares(before)}% to "
            f"{shares(after)}% (seeds in order), and each prompt's distance from 50/50 "
            f"grew by {each_points(drift)} points on average. The control, the SFT model "
            "with each weight given the run's step under a random sign (a change of the "
            "same size in every weight, in no chosen direction), changed that distance by "
            f"{each_points(moved)} points")
    mean, se, t, margin = beyond_t(drift, moved)
    bound = (f"by {points(mean)} ± {points(se)} points on average over the seeds, at "
             f"least {points(margin)} at Student's t = {t:.2f} (one-sided {T_LEVEL:.0%}); "
             f"seed by seed, by at least {each_points(bounds)} points (the lower "
             f"{T_LEVEL:.0%} bound of a bootstrap over the prompts)")
    told = (f"On the {m} held-out prompts whose answers were sampled, the courteous share "
            f"of the sampled answers went from {each_points(sampled[0])}% to "
            f"{each_points(sampled[1])}%, and the averaged probability on those same "
            f"prompts from {shares(sampled_odds[0])}% to {shares(sampled_odds[1])}%: two "
            "counts of the same prompts, to be read side by side, not beside each prompt's "
            "distance from 50/50, since an average can stay near 50/50 while every prompt "
            "moves away from it.")
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
        "moves it", 100 * margin, "points",
        holds=f"No reward mentions the opening, yet over the {n} runs it moved away from "
              f"an even share: {seen}. The runs moved it further than their controls, "
              f"{bound}. {told} {limits}",
        fails=f"The runs did not clearly move the opening further from 50/50 than their "
              f"controls here: {seen}; the runs' excess over the controls, {bound}, does "
              f"not clear zero on this machine. {told} {limits}")


@dataclass(frozen=True)
class Gap:
    """The accuracy gap between the openings over the seeds: the mean of each seed's gap
    (right after the courteous opening minus after the rude one, a share), its standard
    error and Student's t at the two-sided level ``TWO_SIDED``, over ``n`` seeds."""

    mean: float
    se: float
    t: float
    n: int

    @property
    def clear(self) -> bool:
        """Whether the gap clears zero, on either side."""
        return abs(self.mean) - self.t * self.se > 0

    @property
    def favoured(self) -> str:
        """The opening right answers came more often after, on average."""
        return "courteous" if self.mean > 0 else "rude"


def accuracy_gap(gaps: list[tuple[float, int]], seeds) -> Gap:
    """The premise of the chapter's reading, tested: ``gaps`` holds, per seed,
    ``verifier_control.opening_gap``'s ``(gap, prompts)`` of the SFT model."""
    n = seed_count("accuracy_gap", seeds, gaps=gaps)
    for s, found in enumerate(gaps):
        if (not isinstance(found, tuple) or len(found) != 2
                or isinstance(found[0], bool) or not isinstance(found[0], numbers.Real)
                or not -1 <= found[0] <= 1 or isinstance(found[1], bool)
                or not isinstance(found[1], numbers.Integral) or found[1] < 1):
            raise ValueError(f"accuracy_gap: gaps[{s}] = {found!r} must be opening_gap's "
                             "(gap, prompts): a difference of shares from -1 to 1 and the "
                             "number of prompts it averages, at least one")
    mean, se, t, _ = beyond_t([g for g, _ in gaps], [0.0] * n, level=TWO_SIDED)
    return Gap(mean, se, t, n)


def drift_text(before: list[float], after: list[float], gaps: list[tuple[float, int]],
               seeds) -> str:
    """Which way the opening went, seed by seed, and what the measured premise of the
    chapter's reading says: ``before``, ``after``, the mean courteous share per seed (SFT
    model, GRPO run); ``gaps``, per seed, the SFT model's ``verifier_control.opening_gap``
    on the training prompts (``accuracy_gap`` judges them)."""
    n = checked_shares("drift_text", seeds, before=before, after=after)
    gap = accuracy_gap(gaps, seeds)
    level = (f"at the two-sided {2 * TWO_SIDED - 1:.0%} level of Student's t over {n} "
             f"seeds ({gap.t:.2f} standard errors)")
    counted = sorted({m for _, m in gaps})
    each = f"{counted[0]}" if len(counted) == 1 else f"{counted[0]} to {counted[-1]}"
    premise = (f"On the prompts GRPO trains on, within each prompt the SFT models answered "
               f"in both openings ({each} prompts a seed), the "
               "share of right answers after the courteous opening minus the share after "
               f"the rude one averaged {points(gap.mean)} ± {points(gap.se)} points over "
               f"the {n} seeds (seeds: {each_points([g for g, _ in gaps])}), ")
    if gap.clear:
        premise += (f"clear of zero {level}: right answers came more often after the "
                    f"{gap.favoured} opening, so the reward itself leaned toward it.")
    else:
        low, high = gap.mean - gap.t * gap.se, gap.mean + gap.t * gap.se
        premise += (f"not clear of zero {level}: the interval from {points(low)} to "
                    f"{points(high)} points includes 0, no gap, the premise of the "
                    f"reading, but does not rule out a gap of up to "
                    f"{points(max(-low, high))} points, which would pull the opening "
                    "toward one side.")
    up = sum(a > b for b, a in zip(before, after))
    down = sum(a < b for b, a in zip(before, after))
    if (up == n or down == n) and n > 1:
        side = "courteous" if up == n else "rude"
        way = (f"All {n} runs moved the share the same way, toward the {side} opening. "
               "Were each seed's direction a fair coin, as a walk with no pull would make "
               f"it, {n} alike would come by chance {2 ** (1 - n):.1%} of the time: the "
               "reading alone does not account for it")
        if gap.clear:
            way += (", and the gap in accuracy points " +
                    ("the same way." if gap.favoured == side else "the other way."))
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
