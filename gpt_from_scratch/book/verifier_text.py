"""Chapter 14 — the chapter's sentences, written from its numbers and its verdicts.

``drift_text`` says which way the opening went, seed by seed, and whether the premise of the
chapter's reading, right answers as frequent after either opening, was measured to hold;
``summary_text`` writes the Summary's point from the verdicts (``verifier_prose``'s
lessons); the others tell what a run's numbers show: mixed groups, the KL brake, sampling
against greedy, the collapsed answers, the groups of one batch.
"""

from __future__ import annotations

import math
import numbers

from .lessons import Lesson, beyond_t, check_share, points, seed_count
from .verifier_prose import SLOWED, TWO_SIDED, check_k, checked_shares, each_points


def drift_text(before: list[float], after: list[float], right: list[dict], seeds) -> str:
    """Which way the opening went, seed by seed, and what the measured premise of the
    chapter's reading says: ``before``, ``after``, the mean courteous share per seed (SFT
    model, GRPO run); ``right``, per seed, the SFT model's
    ``verifier_control.right_by_opening`` on the training prompts."""
    n = checked_shares("drift_text", seeds, before=before, after=after)
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
               f"{n} seeds (seeds: {each_points(gaps)}), ")
    favoured = "courteous" if mean > 0 else "rude"
    if side_margin > 0:
        premise += (f"clear of zero {level}: right answers came more often after the "
                    f"{favoured} opening, so the reward itself leaned toward it.")
    else:
        low, high = mean - t * se, mean + t * se
        premise += (f"not clear of zero {level}: the interval from {points(low)} to "
                    f"{points(high)} points holds no gap, the premise of the reading, but "
                    "does not rule out a gap of a few points either way, which would pull "
                    "the opening slowly toward one side.")
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
    k = check_k("sampling_text", k)
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
               "prompts (section 14.4 says by how much, and what pass@k did)"
               if gain.holds else
               "did not raise pass@1 clear of its evaluation's noise on this machine "
               "(section 14.4 gives the numbers)")
            + f". At a learning rate {larger:g} times larger ({collapse_seeds} seeds), "
            + ("pass@1 fell instead" if collapse.holds else
               "pass@1 did not fall clear of zero here"))
    if braked - plain >= SLOWED:
        text += " (on one seed, a KL penalty slowed the fall: a sign, not a measurement)"
    text += "; the task not rewarded " + ("got worse" if forgetting.holds else
                                          "did not clearly get worse")
    if opening.holds:
        return text + ("; and the opening, which the reward ignores, moved away from half "
                       "and half, further on average over the seeds than a random change "
                       "of the same size in the weights moves it. That control shows that "
                       "training moved the opening, not that this reward did: telling "
                       "those apart would take many runs with shuffled rewards beside many "
                       "with the real ones.")
    return text + ("; and the opening, which the reward ignores, did not clearly move "
                   "further than its control here.")
