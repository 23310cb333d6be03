"""Chapter 14 — the chapter's sentences, written from its numbers and its verdicts.

``summary_text`` writes the Summary's point from the verdicts (``verifier_prose``'s and
``verifier_opening``'s lessons, and ``verifier_brake``'s test of the KL penalty); the others
tell what a run's numbers show: sampling against greedy, the advantages of one draw against
the expected weights, the groups of one batch, mixed groups, the collapsed answers.
"""

from __future__ import annotations

import math
import numbers

from .lessons import Lesson, check_share, points
from .verifier_brake import Brake
from .verifier_prose import check_k


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
    if isinstance(group, bool) or not isinstance(group, numbers.Integral) or group < 2:
        raise ValueError(f"mixed_text: group={group!r} must be a whole number >= 2, the "
                         "answers to one prompt (one answer makes no group): pass the "
                         "runs' group_size")
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


def advantage_text(scaled: tuple[float, float], unscaled: tuple[float, float],
                   weights: dict[float, tuple[float, float]], group: int) -> str:
    """Section 14.2's example read against the expected weights. ``scaled``, ``unscaled``:
    the advantage of the lone right answer of a group answered right once, and of a right
    answer of a group answered right half the time, in one draw; ``weights``: p -> (w with
    the std's scaling, w with the mean only), ``grpo_advantages.expected_weight`` for groups
    of ``group``."""
    if isinstance(group, bool) or not isinstance(group, numbers.Integral) or group < 2:
        raise ValueError(f"advantage_text: group={group!r} must be a whole number >= 2, "
                         "the group size of the expected weights")
    drawn = {"scaled": scaled, "unscaled": unscaled}
    for name, pair in drawn.items():
        if (not isinstance(pair, tuple) or len(pair) != 2
                or any(isinstance(a, bool) or not isinstance(a, numbers.Real)
                       or not 0 < a < math.inf for a in pair)):
            raise ValueError(f"advantage_text: {name} = {pair!r:.60} must be a pair of "
                             "positive advantages (the lone right answer's, a right "
                             "answer's of the even group): pass float(...) of each")
    if not weights or any(
            not 0 < p < 1 or len(w) != 2 or not all(0 < x < math.inf for x in w)
            for p, w in weights.items()):
        raise ValueError(f"advantage_text: weights = {weights!r:.80} must map each p in "
                         "(0, 1) to (w scaled, w mean only), positive numbers: pass "
                         "expected_weight's")
    ratio = {name: a / b for name, (a, b) in drawn.items()}
    text = (f"In this one draw, unscaled, the second group's one right answer gets "
            f"{unscaled[0]:.2f}, {ratio['unscaled']:.1f} times each right answer of the "
            f"first group ({unscaled[1]:.2f}), whose prompt is answered right half the "
            f"time; scaled, {scaled[0]:.2f} against {scaled[1]:.3f}, "
            f"{ratio['scaled']:.1f} times.")
    mean_only = [w for _, w in weights.values()]
    if max(mean_only) - min(mean_only) <= 1e-9 * max(mean_only):
        text += (f" In expectation, with the mean only, every prompt weighs the same, "
                 f"w = {mean_only[0]:.1f} at each p above (G − 1 for G = {group}): the "
                 "baseline leaves the prompts' weights as they are, whatever one draw's "
                 "advantages look like.")
    else:
        text += (f" In expectation, with the mean only, w goes from "
                 f"{min(mean_only):.1f} to {max(mean_only):.1f} over the p above.")
    by_std = {p: w for p, (w, _) in weights.items()}
    low, high = min(by_std.values()), max(by_std.values())

    def where(w: float) -> str:
        return " and ".join(f"{p:g}" for p, x in by_std.items() if abs(x - w) <= 1e-9 * w)
    text += (f" Scaled by the std, w goes from {low:.1f} (p = {where(low)}) to {high:.1f} "
             f"(p = {where(high)}), {high / low:.1f} times: the difficulty bias Dr. GRPO "
             "names")
    if high / low < ratio["scaled"]:
        return text + (", milder in expectation than this one draw's "
                       f"{ratio['scaled']:.1f} times suggests.")
    return text + "."


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
        counts = per_group[starved[0]]
        text += (f" **{starved[0]}**, right in {sum(counts)} of its {group * len(counts)} "
                 "answers here, gives little signal: a group with no right answer has "
                 "nothing to reinforce, so GRPO can only make likelier the right answers "
                 "the model already samples.")
    return text


BRAKE_CLAUSES = {  # the Summary's word on the one braked seed, by Brake.way
    "higher": " (on one seed, a KL penalty kept pass@1 higher, beyond the evaluation's "
              "noise: a sign, not a measurement)",
    "lower": " (on one seed, pass@1 ended lower with a KL penalty, beyond the evaluation's "
             "noise: a sign, not a measurement)",
    "noise": " (on one seed, with a KL penalty it ended within the evaluation's noise of "
             "the run without)"}


def summary_text(gain: Lesson, collapse: Lesson, forgetting: Lesson, opening: Lesson,
                 brake: Brake, larger: float, seeds: int, collapse_seeds: int) -> str:
    """The Summary's point on the runs, each clause from its lesson's verdict: ``brake``
    the one braked seed's ``brake_gap``, ``larger`` how many times the large step's learning
    rate is the first runs', ``seeds`` and ``collapse_seeds`` their numbers."""
    for name, value in (("gain", gain), ("collapse", collapse), ("forgetting", forgetting),
                        ("opening", opening)):
        if not isinstance(value, Lesson):
            raise ValueError(f"summary_text: {name} = {value!r:.60} must be the Lesson its "
                             "judge_* function returned")
    if not isinstance(brake, Brake):
        raise ValueError(f"summary_text: brake = {brake!r:.60} must be brake_gap's Brake, "
                         "the braked seed's test: pass brake_gap(plain, braked)")
    if (isinstance(larger, bool) or not isinstance(larger, numbers.Real)
            or not 1 < larger < math.inf):
        raise ValueError(f"summary_text: larger = {larger!r} must be a finite number > 1, "
                         "how many times the large step's learning rate is the first "
                         "runs': pass COLLAPSE_LR / LR")
    for name, value in (("seeds", seeds), ("collapse_seeds", collapse_seeds)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 2:
            raise ValueError(f"summary_text: {name} = {value!r} must be a whole number "
                             ">= 2, how many seeds the lessons were judged over: pass "
                             f"len({name.upper()})")
    text = (f"On the assistant, over {seeds} paired seeds, GRPO "
            + ("raised pass@1, clear of zero over the seeds and over the prompts "
               "(section 14.4 says by how much, and what pass@k did)"
               if gain.holds else
               "did not raise pass@1 clear of its evaluation's noise on this machine "
               "(section 14.4 gives the numbers)")
            + f". At a learning rate {larger:g} times larger ({collapse_seeds} seeds), "
            + ("pass@1 fell instead" if collapse.holds else
               "pass@1 did not fall clear of zero here"))
    text += BRAKE_CLAUSES[brake.way] + "; the task not rewarded " + (
        "got worse" if forgetting.holds else "did not clearly get worse")
    if opening.holds:
        return text + ("; and the opening, which the reward ignores, moved away from half "
                       "and half, further on average over the seeds than a random change "
                       "of the same size in the weights moves it. That control shows that "
                       "training moved the opening, not that this reward did: telling "
                       "those apart would take many runs with shuffled rewards beside many "
                       "with the real ones.")
    return text + ("; and the opening, which the reward ignores, did not clearly move "
                   "further than its control here.")
