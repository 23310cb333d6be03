"""Chapter 9 — the chapter's run-dependent sentences, written from the measured numbers.

Each function takes what a cell measured and returns Markdown, so that every number in the prose is
an output of this run (see CONTRIBUTING.md); tests/test_finetune.py checks them.
"""

from __future__ import annotations

import math
from statistics import fmean

from .lessons import SE_BAR, lesson, paired_difference, standard_errors


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _check(name: str, value: float) -> float:
    if not math.isfinite(value):
        raise ValueError(f"{name}={value} is not finite: the measurement failed, re-run the cell that made it")
    return value


def standard_error(p: float, n: int) -> float:
    """One standard error of an accuracy ``p`` measured on ``n`` examples, sqrt(p (1 - p) / n) (Chapter 9)."""
    if n < 1:
        raise ValueError(f"n={n}: an accuracy needs at least one test example")
    return math.sqrt(p * (1 - p) / n)


def backbones_text(models: dict[str, tuple[int, float, int]], embedding_share: float,
                   chosen: str) -> str:
    """Section 9.1: the two candidate backbones, each ``(parameters, validation loss, tokens read in
    training)``; ``embedding_share`` is the token embedding's share of the first one's parameters,
    and ``chosen`` the one the chapter builds on."""
    (a, (p_a, loss_a, seen_a)), (b, (p_b, loss_b, seen_b)) = models.items()
    for name, loss in ((a, loss_a), (b, loss_b)):
        _check(f"validation loss ({name})", loss)
    better, worse = ((b, loss_b), (a, loss_a)) if loss_b < loss_a else ((a, loss_a), (b, loss_b))
    return (f"The {better[0]} predicts the validation text better, {better[1]:.3f} nats per token "
            f"against {worse[1]:.3f}. The {a} has {p_a:,} parameters ({embedding_share:.0%} of them "
            f"its token embedding) and read {seen_a:,} tokens in training; the {b} has {p_b:,} and "
            f"read {seen_b:,}. This chapter builds on the {chosen}.")


def pooling_text(last: float, mean: float, n_test: int) -> str:
    """Sentences comparing Chapter 9's two head-only classifiers: test accuracy reading the last
    token's hidden state (``last``) and the mean of all the tokens' (``mean``), on ``n_test``
    speeches; a gap within two standard errors is said to be one."""
    _check("last-token accuracy", last)
    _check("mean-pooling accuracy", mean)
    se = math.hypot(standard_error(last, n_test), standard_error(mean, n_test))
    gap = (f"{100 * abs(mean - last):.1f} points apart, one standard error of the difference "
           f"{100 * se:.1f} points on {n_test} test speeches")
    if abs(mean - last) <= 2 * se:
        return (f"On the frozen model, the mean of the hidden states scores {_pct(mean)} and the last "
                f"token's {_pct(last)}: {gap}, so this test set cannot tell the two apart. The runs "
                f"below use the mean, which gathers what every position says about the speech.")
    if mean > last:
        return (f"On the frozen model, the mean of the hidden states ({_pct(mean)}) beats the last token's "
                f"({_pct(last)}), {gap}. The last token has seen the whole speech, but a model this small, "
                f"trained to predict the next token, keeps in its last position mostly what the next token "
                f"needs; the mean gathers what every position says about the speech. The runs below use "
                f"the mean.")
    return (f"On the frozen model, the last token's hidden state ({_pct(last)}) beats the mean of all of "
            f"them ({_pct(mean)}), {gap}: the only position that has read the whole speech carries "
            f"what the head needs. The runs below use the mean, for comparison with the table.")


def classification_text(rows: dict[str, dict], majority: float, bag: float, n_test: int) -> str:
    """Sentences on the accuracy table of Chapter 9: ``rows`` maps a method to a dict with ``accuracy``
    and ``trainable``; ``majority`` and ``bag`` are the two baselines' test accuracies, measured on
    ``n_test`` test examples."""
    if not rows:
        raise ValueError("no fine-tuning result to describe: train at least one classifier first")
    for name, row in rows.items():
        _check(f"{name} accuracy", row["accuracy"])
    best_name, best = max(rows.items(), key=lambda item: item[1]["accuracy"])
    worst_name, worst = min(rows.items(), key=lambda item: item[1]["accuracy"])
    se = standard_error(best["accuracy"], n_test)
    clear = [n for n, r in rows.items() if r["accuracy"] - majority > 2 * standard_error(majority, n_test)]
    beat = [n for n, r in rows.items() if r["accuracy"] > bag]
    text = (f"The best fine-tuned classifier here is **{best_name}**, at {_pct(best['accuracy'])} on the "
            f"{n_test} test speeches (one standard error: {100 * se:.1f} points) with {best['trainable']:,} "
            f"trainable parameters; the weakest is {worst_name}, at {_pct(worst['accuracy'])}. Always "
            f"answering the most frequent speaker scores {_pct(majority)}, the bag of tokens {_pct(bag)}. ")
    if len(clear) == len(rows):
        text += "Every fine-tuned classifier beats the majority baseline by more than two standard errors. "
    elif clear:
        text += (f"{len(clear)} of the {len(rows)} beat the majority baseline by more than two standard errors "
                 f"({'; '.join(clear)}). ")
    else:
        text += ("None beats the majority baseline by more than two standard errors: these features do not "
                 "separate the speakers. ")
    if beat:
        text += f"{len(beat)} of the {len(rows)} beat the bag of tokens ({'; '.join(beat)})."
    else:
        text += ("None beats the bag of tokens: the features this small model learned in pretraining say less "
                 "about who speaks than which words occur, and a few hundred speeches are little to adapt them with.")
    return text


def style_text(speaker: str, before: dict[str, list[float]], after: dict[str, list[float]]) -> str:
    """Sentences on the style fine-tuning of Chapter 9: the held-out loss (nats per token) of each
    window before and after, the same windows on both sides, for ``speaker`` and for ``"others"``.

    Each change carries its standard error over the windows (paired); the adapter "helps most" on
    its speaker only when the two changes differ by more than two standard errors, and the sizes of
    a gain and a loss are compared as sizes. One training run: the seed's own spread is not in it.
    """
    change = {}
    for key in (speaker, "others"):
        for name, losses in (("before", before[key]), ("after", after[key])):
            for v in losses:
                _check(f"loss {name} ({key})", v)
        change[key] = paired_difference(after[key], before[key])
    (mine, se_mine), (others, se_others) = change[speaker], change["others"]
    n = len(before[speaker])
    mean = {k: (fmean(before[k]), fmean(after[k])) for k in change}
    text = (f"On {speaker}'s held-out speeches the loss {'fell' if mine < 0 else 'rose'} from "
            f"{mean[speaker][0]:.3f} to {mean[speaker][1]:.3f} nats per token ({mine:+.3f} ± "
            f"{se_mine:.3f}); on the other speakers' it went from {mean['others'][0]:.3f} to "
            f"{mean['others'][1]:.3f} ({others:+.3f} ± {se_others:.3f}). Each ± is one standard error "
            f"over the {n} windows, the same windows before and after; it leaves out the spread between "
            f"training runs, since this is one run from one seed. ")
    diff, se = mine - others, math.hypot(se_mine, se_others)
    if mine < 0 and diff < -2 * se:
        text += (f"The adapter helps most on the speaker it was trained on: its change there is "
                 f"{-diff:.3f} ± {se:.3f} nats below the others', more than two standard errors. ")
        if others < 0:
            text += f"It gained {-mine:.3f} nats there and {-others:.3f} elsewhere."
        elif others > -mine:
            text += (f"Yet it gained {-mine:.3f} nats there and lost {others:.3f} elsewhere: the loss "
                     "elsewhere is the larger, so what the adapter learned costs the other speakers "
                     "more than it gains on this one.")
        else:
            text += (f"It gained {-mine:.3f} nats there and lost {others:.3f} elsewhere: the gain is the "
                     "larger.")
    else:
        text += (f"This run's adapter did not single out the speaker it was trained on: the two changes "
                 f"differ by {diff:+.3f} ± {se:.3f} nats, "
                 + ("within two standard errors" if abs(diff) <= 2 * se else "the wrong way")
                 + " (train it longer: FULL_RUN).")
    return text


def mean_se(values) -> tuple[float, float]:
    """Mean and standard error of the mean (sample standard deviation / sqrt(n)) of ``values``."""
    values = [_check("accuracy", float(v)) for v in values]
    if len(values) < 2:
        raise ValueError(f"{len(values)} value(s): a standard error needs at least two seeds")
    mean = sum(values) / len(values)
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return mean, math.sqrt(var / len(values))


def pretraining_gaps(curve: dict) -> list[dict]:
    """For each size of ``learning_curve``'s result: the mean accuracies, and the pretrained-minus-random
    and pretrained-minus-bag differences (paired: the same speeches per seed) with their standard errors."""
    rows = []
    for i, n in enumerate(curve["sizes"]):
        pre, rnd, bag = (curve[k][i] for k in ("pretrained", "random", "bag"))
        rows.append(dict(n=n, pretrained=mean_se(pre), random=mean_se(rnd), bag=mean_se(bag),
                         vs_random=mean_se([p - r for p, r in zip(pre, rnd)]),
                         vs_bag=mean_se([p - b for p, b in zip(pre, bag)])))
    return rows


def _sizes(rows: list[dict]) -> str:
    names = [f"{r['n']}" for r in rows]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _backbone_gaps(curve: dict) -> list[tuple[float, float]]:
    """Each backbone's gap over the random network at the largest size: mean and standard
    error over the draws."""
    return [mean_se([p - r for p, r in zip(accs, curve["random"][-1])])
            for accs in curve["per_backbone"][-1]]


def _backbones_text(curve: dict) -> str:
    """Each backbone's gap over the random network at the largest size, and the lesson that
    runs of one recipe differ: the two furthest apart, paired over the same draws."""
    n, each, gaps = curve["sizes"][-1], curve["per_backbone"][-1], _backbone_gaps(curve)
    pairs = [paired_difference(each[a], each[b])
             for a in range(len(each)) for b in range(a + 1, len(each))]
    diff, se = max(pairs, key=lambda d: abs(d[0]))
    z = abs(standard_errors(diff, se))
    text = (f"Backbone by backbone, with {n} speeches per speaker the pretrained features are "
            + ", ".join(f"{100 * m:+.1f} ± {100 * s:.1f}" for m, s in gaps)
            + " points from the random network. The two furthest apart differ by "
            f"{100 * abs(diff):.1f} ± {100 * se:.1f} points on the same draws, {z:.1f} "
            "standard errors: ")
    return lesson(
        "one pretraining run is not enough to judge pretraining by", z - SE_BAR,
        "standard errors",
        text + f"more than {SE_BAR:g}, so what one pretraining run gives a "
        "classifier depends on the run, which is why each draw above averages "
        f"{len(each)} of them. ",
        text + f"within {SE_BAR:g}, so runs of this recipe agree. ").text


def _runs_text(curve: dict) -> str:
    """The average gap at the largest size, with a standard error over the backbones: what
    the draws' standard errors leave out when pretraining runs land apart."""
    n, k = curve["sizes"][-1], len(curve["per_backbone"][-1])
    m, se = mean_se([gap for gap, _ in _backbone_gaps(curve)])
    text = ("Those standard errors count the draws only. Counting the runs too (the spread "
            f"of the {k} backbones' gaps at {n}), the average is {100 * m:+.1f} ± "
            f"{100 * se:.1f} points, {standard_errors(m, se):.1f} standard errors: ")
    if m > SE_BAR * se:
        return text + f"more than {SE_BAR:g}, so this recipe's pretraining pays. "
    return text + (f"within {SE_BAR:g}, so {k} runs cannot tell whether this recipe's "
                   "pretraining helps this task at all. ")


def pretraining_text(curve: dict) -> str:
    """Sentences on Chapter 9's learning curve: how far apart pretraining runs land (a lesson),
    where their average beats the same network randomly initialised by more than ``SE_BAR``
    standard errors (of the draws, then of the runs), and how it compares with the bag of
    tokens."""
    rows = pretraining_gaps(curve)
    seeds = len(curve["pretrained"][0])
    won = [r for r in rows if r["vs_random"][0] > SE_BAR * r["vs_random"][1]]
    lost = [r for r in rows if r not in won]
    def gap(r, key):
        m, se = r[key]
        return f"{100 * m:+.1f} ± {100 * se:.1f} points at {r['n']}"
    each = curve.get("per_backbone")
    k = len(each[-1]) if each else 1  # backbones
    several = k > 1
    text = _backbones_text(curve) if several else ""
    over = f"Averaged over the {k} backbones, the" if several else "The"
    if won:
        text += (f"{over} pretrained features beat the same network from a random "
                 f"initialization by more than {SE_BAR:g} standard errors with "
                 f"{_sizes(won)} speeches per speaker "
                 f"({'; '.join(gap(r, 'vs_random') for r in won)}, {seeds} draws of the "
                 "speeches each). ")
    else:
        text += (f"{over} pretrained features never beat the same network from a random "
                 f"initialization by more than {SE_BAR:g} standard errors. ")
    few = [r for r in lost if won and r["n"] < min(w["n"] for w in won)]
    if few:
        text += (f"With {_sizes(few)} the difference ({'; '.join(gap(r, 'vs_random') for r in few)}) "
                 "is within the noise: so few speeches teach the head too little about either kind of "
                 "feature. ")
    if rest := [r for r in lost if r not in few]:
        text += (f"With {_sizes(rest)} the difference ({'; '.join(gap(r, 'vs_random') for r in rest)}) "
                 "is within the noise. ")
    if several:
        text += _runs_text(curve)
    text += ("A random network is no empty baseline: its mean-pooled states are a random projection of "
             "the speech's tokens, a squeezed bag of tokens, and what pretraining adds is which tokens "
             "it places near each other. ")
    beat = [r for r in rows if r["vs_bag"][0] > 2 * r["vs_bag"][1]]
    behind = [r for r in rows if r["vs_bag"][0] < -2 * r["vs_bag"][1]]
    even = [r for r in rows if r not in beat and r not in behind]
    against = []
    if beat:
        against.append(f"ahead with {_sizes(beat)} ({'; '.join(gap(r, 'vs_bag') for r in beat)})")
    if even:
        against.append(f"within the noise with {_sizes(even)}")
    if behind:
        against.append(f"behind with {_sizes(behind)} ({'; '.join(gap(r, 'vs_bag') for r in behind)})")
    text += f"Against the bag of tokens the pretrained features are {', '.join(against)}."
    if behind:
        text += (" The bag reads every token of a speech through a weight of its own; the head reads "
                 "the backbone's few dimensions, and this backbone is small.")
    return text
