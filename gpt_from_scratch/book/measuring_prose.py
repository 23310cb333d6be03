"""Chapter 11 — the chapter's run-dependent sentences and lessons, written from the measured numbers.

Each function takes what a cell measured and returns Markdown (or a judged ``Lesson``), so that every
number in the prose is an output of this run; tests/test_measuring_prose.py checks them.
"""

from __future__ import annotations

import math

from .lessons import Lesson, lesson, paired_difference, standard_errors

RULES = ("acc", "acc_norm", "acc_token")


def _pts(x: float) -> str:
    return f"{100 * x:.1f}"


def mean_se(values) -> tuple[float, float]:
    """Mean and standard error of per-draw accuracies (at least two draws)."""
    values = [float(v) for v in values]
    if len(values) < 2:
        raise ValueError(f"{len(values)} draw(s): a standard error needs at least two draws")
    mean = sum(values) / len(values)
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return mean, math.sqrt(var / len(values))


def bpb_text(rows: dict[str, dict]) -> str:
    """``rows``: model name -> ``{"per_token": nats per token, "bpb": bits per byte}``."""
    best = min(rows, key=lambda k: rows[k]["bpb"])
    by_token = min(rows, key=lambda k: rows[k]["per_token"])
    text = (f"Per token, **{by_token}** has the lowest loss ({rows[by_token]['per_token']:.2f} nats), "
            f"but its tokens are not the others' tokens. Per byte of the same text, **{best}** "
            f"predicts best: {rows[best]['bpb']:.2f} bits per byte.")
    if best != by_token:
        text += (" The per-token ranking was an artefact of the tokenizers: a BPE token carries "
                 "several characters, so its loss is several characters' worth.")
    return text


def beats(name: str, a: dict, b: dict, rule: str, what: str, task: str) -> Lesson:
    """Judge "``name`` beats ``what`` on ``task``": the paired difference of per-draw accuracies
    ``a[rule]`` - ``b[rule]`` is more than two standard errors above 0."""
    mean, se = paired_difference(a[rule], b[rule])
    z = standard_errors(mean, se)
    margin = z - 2.0
    n = len(a[rule])
    holds = (f"On *{task}*, {name} beats {what} by {_pts(mean)} ± {_pts(se)} points "
             f"({rule}, {n} draws, {z:.1f} standard errors): a difference no draw of the set "
             "explains.")
    fails = (f"On *{task}*, {name} is {_pts(mean)} ± {_pts(se)} points from {what} "
             f"({rule}, {n} draws): within two standard errors here, so this run cannot tell "
             "them apart; another draw of the items, or another machine's arithmetic, moves "
             "numbers this close.")
    return lesson(f"{name} beats {what} on {task} ({rule})", margin, "standard errors",
                  holds, fails)


def above_chance(name: str, values, chance: float, rule: str, task: str) -> Lesson:
    """Judge "``name`` scores above chance on ``task``": mean - chance > 2 standard errors."""
    mean, se = mean_se(values)
    z = (mean - chance) / se if se else math.copysign(math.inf, mean - chance)
    holds = (f"{name} answers {_pts(mean)}% ± {_pts(se)} of *{task}* right ({rule}), "
             f"{z:.1f} standard errors above the {_pts(chance)}% of a guess.")
    fails = (f"{name} answers {_pts(mean)}% ± {_pts(se)} of *{task}* right ({rule}): not two "
             f"standard errors above the {_pts(chance)}% of a guess on this run.")
    return lesson(f"{name} above chance on {task} ({rule})", z - 2.0, "standard errors",
                  holds, fails)


def next_line_text(scores: dict[str, dict], chance: float, rule: str = "acc_norm") -> str:
    """Where each model stands on "which line continues this speech?" (no lesson: a reading)."""
    parts = []
    for name, s in scores.items():
        mean, se = mean_se(s[rule])
        z = (mean - chance) / se if se else 0.0
        parts.append(f"{name} {_pts(mean)}% ± {_pts(se)} ({z:+.1f} standard errors from "
                     f"chance)")
    clear = [n for n, s in scores.items() if (mean_se(s[rule])[0] - chance)
             > 2 * mean_se(s[rule])[1]]
    verdict = (f"Only {', '.join(clear)} stands clear of a guess." if clear else
               "None stands clear of a guess.")
    return (f"On *which line continues this speech?* ({rule}): {'; '.join(parts)}. {verdict} "
            "A line that follows another shares its speaker, its subject and often its sentence, "
            "but a model must *read* the previous lines to use that, and these models read 64 "
            "characters or 64 tokens: the character model sees little more than the end of one "
            "line.")


def shortest_text(acc_share: float, norm_share: float, chance: float) -> str:
    """Sentences on how often ``acc`` and ``acc_norm`` pick the shortest of unmatched choices."""
    return (f"With distractors of any length, `acc` picks the shortest choice "
            f"{_pts(acc_share)}% of the time and `acc_norm` {_pts(norm_share)}% (the right word is "
            f"the shortest in {_pts(chance)}% of the items). A sum of log-probabilities has one "
            "negative term per token: every extra character costs probability, so the plain sum "
            "prefers short answers whatever they say. Dividing by the length in characters "
            "scores the answer's *average* plausibility instead.")
