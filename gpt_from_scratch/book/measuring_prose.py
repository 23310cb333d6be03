"""Chapter 11 — the chapter's run-dependent sentences and lessons, from the measured numbers.

Each function takes what a cell measured and returns Markdown (or a judged ``Lesson``), so that
every number in the prose is an output of this run; tests/test_measuring_prose.py checks them.
"""

from __future__ import annotations

import math

from .lessons import Lesson, lesson, paired_difference, points, standard_errors

RULES = ("acc", "acc_norm", "acc_token")


def mean_se(values) -> tuple[float, float]:
    """Mean and standard error of per-draw accuracies (at least two draws)."""
    values = [float(v) for v in values]
    if len(values) < 2:
        raise ValueError(f"{len(values)} draw(s): a standard error needs at least two draws")
    mean = sum(values) / len(values)
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return mean, math.sqrt(var / len(values))


def bpb_text(rows: dict[str, dict]) -> tuple[str, Lesson]:
    """``rows``: "character model" and "BPE model" -> ``{"per_token": nats, "bpb": bits per
    byte}``. The sentences, and the lesson "the character model predicts this text better"."""
    char, bpe = rows["character model"], rows["BPE model"]
    ratio = bpe["per_token"] / char["per_token"]
    margin = bpe["bpb"] - char["bpb"]
    head = (f"Per token the two losses are {ratio:.1f} times apart ({char['per_token']:.2f} "
            f"against {bpe['per_token']:.2f} nats), because a GPT-2 token spells several "
            f"characters. Per byte of the same text they are {char['bpb']:.2f} and "
            f"{bpe['bpb']:.2f} bits: ")
    found = lesson("the character model has fewer bits per byte than the BPE model", margin,
                   "bits per byte",
                   head + f"the character model predicts this text better, by {margin:.2f} "
                   f"bits per byte; per token the losses looked {ratio:.1f} times apart, mostly a "
                   "difference of units, not of skill. (The BPE model "
                   "trained for few steps: its 50,257-way output layer makes each step costly.)",
                   head + "here the BPE model predicts the text at least as well: per token, the "
                   "character model only seemed better.")
    return found.text, found


def offline_bpb_text(rows: dict[str, dict], steps: dict[str, int], corpus_vocab: int) -> str:
    """Where Chapter 8's offline model stands per byte (a reading, not a lesson): ``rows`` as for
    ``bpb_text`` with an "offline model" row too, ``steps`` each model's training steps and
    ``corpus_vocab`` the tokens the offline model's output layer learns (those of the training
    text and ``<|endoftext|>``)."""
    off, bpe, char = (rows[k]["bpb"] for k in ("offline model", "BPE model", "character model"))
    gap = abs(off - char)
    if round(gap, 2) == 0:
        versus = f"the character model ({char:.2f}) predicts this text as well"
    elif off < char:
        versus = f"it predicts this text better than the character model ({char:.2f}) too"
    else:
        versus = f"the character model ({char:.2f}) still predicts this text better"
    versus += "" if round(gap, 2) == 0 else f", by {gap:.2f} bits per byte"
    return (f"Chapter 8's offline model reads the same GPT-2 tokens as the BPE model, but its "
            f"output layer learns only the {corpus_vocab - 1:,} tokens of the training text and "
            f"`<|endoftext|>`, which "
            f"made {steps['offline model']:,} training steps affordable on a CPU where the BPE "
            f"model took {steps['BPE model']:,}. It scores {off:.2f} bits per byte, "
            f"{'below' if off < bpe else 'above'} the BPE model's {bpe:.2f}; {versus}.")


def beats(name: str, a: dict, b: dict, rule: str, what: str, task: str) -> Lesson:
    """Judge "``name`` beats ``what`` on ``task``": the paired difference of per-draw accuracies
    ``a[rule]`` - ``b[rule]`` is more than two standard errors above 0."""
    mean, se = paired_difference(a[rule], b[rule])
    z = standard_errors(mean, se)
    margin = z - 2.0
    n = len(a[rule])
    holds = (f"On *{task}*, {name} beats {what} by {points(mean)} ± {points(se)} points "
             f"({rule}, {n} draws, {z:.1f} standard errors): a difference no draw of the set "
             "explains.")
    fails = (f"On *{task}*, {name} is {points(mean)} ± {points(se)} points from {what} "
             f"({rule}, {n} draws): within two standard errors here, so this run cannot tell "
             "them apart; another draw of the items, or another machine's arithmetic, moves "
             "numbers this close.")
    return lesson(f"{name} beats {what} on {task} ({rule})", margin, "standard errors",
                  holds, fails)


def above_chance(name: str, values, chance: float, rule: str, task: str) -> Lesson:
    """Judge "``name`` scores above chance on ``task``": mean - chance > 2 standard errors."""
    mean, se = mean_se(values)
    z = (mean - chance) / se if se else math.copysign(math.inf, mean - chance)
    holds = (f"{name[:1].upper() + name[1:]} answers {points(mean)}% ± {points(se)} of *{task}* "
             f"right ({rule}); a guess scores {points(chance)}%, and this run is {z:.1f} "
             "standard errors clear of it.")
    fails = (f"{name[:1].upper() + name[1:]} answers {points(mean)}% ± {points(se)} of *{task}* "
             f"right ({rule}): not two "
             f"standard errors above the {points(chance)}% of a guess on this run.")
    return lesson(f"{name} above chance on {task} ({rule})", z - 2.0, "standard errors",
                  holds, fails)


def context_free_text(scores: dict[str, dict], chance: float, rule: str = "acc_norm",
                      baseline: str = "most frequent word") -> str:
    """Where the rules that read no context stand on "which word ends this line?" (a reading):
    ``scores`` maps a reader to its per-draw accuracies by rule, ``baseline`` among them."""
    def at(name: str) -> str:
        mean, se = mean_se(scores[name][rule])
        return f"{points(mean)}% ± {points(se)} ({(mean - chance) / se if se else 0.0:+.1f} " \
               "standard errors from a guess)"
    near = [n for n in (baseline, "bigram table")
            if abs(mean_se(scores[n][rule])[0] - chance) <= 2 * mean_se(scores[n][rule])[1]]
    verdict = ("Both stay within two standard errors of a guess: the test rewards no "
               "preference for common words." if len(near) == 2 else
               "Not both stay within two standard errors of a guess: the test still rewards "
               "something a rule without context can find.")
    behind = [n for n in scores if n not in (baseline, "bigram table")
              and paired_difference(scores[n][rule], scores[baseline][rule])[0]
              <= 2 * paired_difference(scores[n][rule], scores[baseline][rule])[1]]
    lag = (f" Of the language models, {' and '.join('the ' + n for n in behind)} "
           f"{'does' if len(behind) == 1 else 'do'} not beat the {baseline} by two standard "
           "errors: {it} reads {its} context too little to use it.".format(
               it="it" if len(behind) == 1 else "they", its="its" if len(behind) == 1 else "their")
           if behind else "")
    return (f"On *which word ends this line* ({rule}), the {baseline} scores {at(baseline)} "
            f"and the bigram table {at('bigram table')}; on this test the table reads a space "
            f"before each word, so it too ranks words by how common they are. {verdict}{lag}")


def next_line_text(scores: dict[str, dict], chance: float, bytes_per_token: float,
                   rule: str = "acc_norm") -> str:
    """Where each model stands on "which line continues this speech?" (no lesson: a reading);
    ``bytes_per_token``: how many characters a GPT-2 token spells on this text."""
    parts = []
    for name, s in scores.items():
        mean, se = mean_se(s[rule])
        z = (mean - chance) / se if se else 0.0
        parts.append(f"{name} {points(mean)}% ± {points(se)} ({z:+.1f} standard errors from "
                     f"chance)")
    clear = [n for n, s in scores.items() if (mean_se(s[rule])[0] - chance)
             > 2 * mean_se(s[rule])[1]]
    near = [n for n in ("BPE model", "offline model") if n in scores and n not in clear]
    verdict = (f"Clear of a guess by two standard errors: {', '.join(clear)}." if clear else
               "None stands clear of a guess by two standard errors.")
    return (f"On *which line continues this speech?* ({rule}): {'; '.join(parts)}. {verdict} "
            "A line that follows another shares its speaker, its subject and often its sentence, "
            "but a model must *read* the previous lines to use that. The character model reads "
            "64 characters, a line of verse or so; a model on GPT-2's tokens "
            f"reads 64 tokens, about {64 * bytes_per_token:.0f} characters here, several lines"
            + (f": for {' and '.join('the ' + n for n in near)}, near a guess, the context is long enough, and what "
               "it says goes unused." if near else "."))


def shortest_text(share: dict[str, list[float]]) -> str:
    """Sentences on how often ``acc`` and ``acc_norm`` pick the shortest of unmatched choices:
    ``share`` maps "acc", "acc_norm" and "gold" (how often the right word is the shortest) to
    per-draw shares."""
    acc, norm, gold = (mean_se(share[k])[0] for k in ("acc", "acc_norm", "gold"))
    diff, se = paired_difference(share["acc_norm"], share["gold"])
    if abs(diff) <= 2 * se:
        normed = ("and here it picks the shortest choice about as often as the right word is "
                  f"the shortest ({points(diff)} ± {points(se)} points apart)")
    else:
        normed = (f"and here it {'under' if diff < 0 else 'over'}-picks the shortest choice by "
                  f"{points(abs(diff))} ± {points(se)} points: it does not remove length from the "
                  "pick either")
    return (f"With distractors of any length, `acc` picks the shortest choice "
            f"{points(acc)}% of the time and `acc_norm` {points(norm)}% (the right word is "
            f"the shortest in {points(gold)}% of the items). A sum of log-probabilities has one "
            "negative term per token: every extra character costs probability, so the plain sum "
            "prefers short answers whatever they say. Dividing by the length in characters "
            f"scores the answer's *average* plausibility instead, {normed}. The harness has two "
            "more rules: `acc_bytes` divides by the answer's bytes (the same as `acc_norm` on "
            "plain ASCII text like this one), and `acc_mutual_info` subtracts the answer's "
            "log-probability without the context, so that an answer gains only what the context "
            "adds to it.")


PUBLISHED = {("nanogpt", "acc_token"): 0.2955, ("harness", "acc_norm"): 0.3114}  # GPT-2 small
PUBLISHED_ACC = {"nanogpt": 0.2859, "harness": 0.2892}  # the same rule (acc), both readings


def hellaswag_text(why_not: str | None, scores: dict | None) -> str:
    """One sentence when the online run could not happen (``why_not``), else what it measured:
    ``scores`` maps a reading ("nanogpt", "harness") to its ``ChoiceScores``."""
    if why_not is not None:
        return (f"This section did not run here ({why_not}); online it scores GPT-2 small on "
                "HellaSwag's validation items under both readings and all three rules, where "
                f"the published numbers are {PUBLISHED[('nanogpt', 'acc_token')]} "
                f"(build-nanogpt) and {PUBLISHED[('harness', 'acc_norm')]} (the harness). "
                "build-nanogpt's script also quotes both readings under one rule, `acc`: "
                f"{PUBLISHED_ACC['nanogpt']} for its own and {PUBLISHED_ACC['harness']} for the "
                f"harness's, {points(PUBLISHED_ACC['harness'] - PUBLISHED_ACC['nanogpt'])} points "
                "apart: if the reading moves the normalised scores as little, most of the "
                f"{points(PUBLISHED[('harness', 'acc_norm')] - PUBLISHED[('nanogpt', 'acc_token')])}"
                " points between the two published numbers come with the rule.")
    got = {key: scores[key[0]].accuracy(key[1]) for key in PUBLISHED}
    n = len(scores["nanogpt"].gold)
    rule_only = scores["nanogpt"].accuracy("acc_norm") - got[("nanogpt", "acc_token")]
    text_only = scores["harness"].accuracy("acc_token") - got[("nanogpt", "acc_token")]
    return (f"On {n:,} items, build-nanogpt's reading gives {got[('nanogpt', 'acc_token')]:.4f} "
            f"(published {PUBLISHED[('nanogpt', 'acc_token')]}) and the harness's "
            f"{got[('harness', 'acc_norm')]:.4f} (published {PUBLISHED[('harness', 'acc_norm')]}). "
            f"Changing only the rule (per character instead of per token) moves the score by "
            f"{100 * rule_only:+.1f} points; changing only the text (cleaned, with the label) by "
            f"{100 * text_only:+.1f}.")
