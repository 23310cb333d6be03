"""Chapter 6 — the ladder's table and sentences, written from the measured losses.

A result is a dict with the rung's ``name``, its ``steps``, the lecture's ``published`` validation loss
(or None) and ``published_steps``, and ``val``, the final validation loss of each seed. The chapter
shows the Markdown with ``IPython.display.Markdown`` in a ``remove-input`` cell, so the sentences stay
true whatever the run measured (2 CPU cores or a GPU, fewer or all of the lecture's steps).
"""

from __future__ import annotations

import math
import statistics

import torch
from torch import Tensor

from gpt_from_scratch.book.lessons import (
    SE_BAR, Lesson, lesson, paired_difference, standard_errors,
)

UNIGRAM_TOLERANCE = 0.02  # nats: a loss this close to the unigram loss "equals" it (2 decimals)


def mean_std(values) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value) of finite numbers."""
    values = [float(v) for v in values]
    if not values or not all(math.isfinite(v) for v in values):
        raise ValueError(f"losses {values} must be a non-empty list of finite numbers")
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def ladder_frame(results: list[dict]):
    """The side-by-side table as a pandas DataFrame (pandas comes with the ``notebooks`` extra): the
    lecture's number, ours (mean ± std over seeds) and every seed."""
    import pandas as pd

    rows = {}
    for r in results:
        mean, std = mean_std(r["val"])
        published = r["published"]
        rows[r["name"]] = {
            "steps (lecture)": f"{r['steps']:,} ({r['published_steps']:,})",
            "Karpathy": "—" if published is None else f"{published:.2f}",
            "ours": f"{mean:.2f} ± {std:.2f}" if len(r["val"]) > 1 else f"{mean:.2f}",
            "seeds": ", ".join(f"{v:.2f}" for v in r["val"]),
        }
    return pd.DataFrame.from_dict(rows, orient="index")


def _separate(a: list[float], b: list[float]) -> bool:
    """True when every seed of one run is below every seed of the other: the seeds' ranges do not overlap."""
    return max(a) < min(b) or max(b) < min(a)


def ladder_text(results: list[dict], unigram: float, bigram_table: tuple[float, float],
                spread: dict[str, float] | None = None) -> str:
    """What the ladder shows, rung by rung: which rungs lowered the loss, which went the other way and why
    (as measured), and how each compares with the lecture's number.

    ``bigram_table`` is the counted table's (train, val) loss; ``spread`` maps a rung's name to how much
    its predictions vary with the input (``prediction_spread``), where measured. Two rungs whose means
    round to the same two decimals leave the loss "where it was"; a change is called uncertain when
    the seeds' ranges overlap.
    """
    spread = spread or {}
    lines = []
    for before, after in zip(results, results[1:]):
        m0, m1 = mean_std(before["val"])[0], mean_std(after["val"])[0]
        name = f"**{after['name']}**"
        change = f"{m0:.2f} → {m1:.2f}"
        apart = _separate(before["val"], after["val"])
        if abs(m1 - unigram) <= UNIGRAM_TOLERANCE:
            why = (f"{m1:.2f} is the unigram loss ({unigram:.2f}): the loss of predicting the "
                   "characters' frequencies whatever the input")
            if after["name"] in spread:
                why += (f"; its predictions indeed barely depend on what it reads (they differ from their "
                        f"own average by {spread[after['name']]:.3f} nats, KL)")
            lines.append(f"- {name} goes the other way ({change}): {why}.")
        elif round(m1, 2) > round(m0, 2):
            line = f"- {name} goes the other way ({change})"
            if not apart:
                line += ", but the seeds' ranges overlap, so this run cannot tell the two rungs apart"
            else:
                line += (f", below the unigram loss ({unigram:.2f}), so it does use its input" if m1 < unigram
                         else f", above even the unigram loss ({unigram:.2f})")
                if after["name"] in spread and before["name"] in spread:
                    s1, s0 = spread[after["name"]], spread[before["name"]]
                    line += (f"{', but less' if s1 < s0 else ''}: its predictions differ from their own "
                             f"average by {s1:.2f} nats (KL), against {s0:.2f} for the rung before")
            lines.append(line + ".")
        elif round(m1, 2) == round(m0, 2):
            lines.append(f"- {name} leaves the loss where it was ({change}).")
        else:
            sure = "" if apart else " (the seeds' ranges overlap)"
            lines.append(f"- {name} lowers the loss ({change}){sure}.")
    above, below = [], []
    for r in results:
        if r["published"] is None:
            continue
        gap = mean_std(r["val"])[0] - r["published"]
        (above if gap > 0 else below).append(f"{r['name']} ({gap:+.2f})")
    steps = {(r["steps"], r["published_steps"]) for r in results}
    shorter = any(ours < theirs for ours, theirs in steps)
    compare = "Against the lecture's numbers, ours are "
    if above and below:
        compare += f"higher for {', '.join(above)} and lower or equal for {', '.join(below)}"
    else:
        compare += f"{'higher' if above else 'lower or equal'} for every rung it reports: "
        compare += ", ".join(above or below)
    compare += (": these runs took fewer steps than the lecture's (the table's first column)." if shorter
                and above else ".")
    train_table, val_table = bigram_table
    best = min(results, key=lambda r: mean_std(r["val"])[0])
    best_val = mean_std(best["val"])[0]
    bigram = (f"The counted bigram table of section 6.2 scores {train_table:.2f} on the training text, "
              f"where nothing that sees only the previous character can do better, and {val_table:.2f} "
              "on validation text. ")
    bigram += (f"On validation text a model with context can beat it, and **{best['name']}** does "
               f"({best_val:.2f})." if best_val < val_table else
               f"No rung beats it on validation text in this run (the best is {best['name']}, "
               f"{best_val:.2f}).")
    return "\n".join(lines) + "\n\n" + compare + "\n\n" + bigram


@torch.no_grad()
def prediction_spread(model, x: Tensor) -> float:
    """How much the next-token distributions depend on the input: the mean KL divergence (nats) of the
    prediction at each position of ``x`` (B, T) from the average prediction. 0: the same output always."""
    model.eval()
    log_p = torch.log_softmax(model(x)[0].flatten(0, 1).float(), dim=-1)  # (B*T, V)
    log_mean = torch.log(log_p.exp().mean(dim=0, keepdim=True))  # (1, V)
    return float((log_p.exp() * (log_p - log_mean)).sum(dim=-1).mean())


def layernorm_lesson(lecture: tuple[dict, dict], faster: tuple[dict, dict], lr: float,
                     faster_lr: float) -> Lesson:
    """Whether LayerNorm lowers the loss, at the lecture's learning rate ``lr`` and at ``faster_lr``.

    Each pair is (the rung without LayerNorm, the rung with it), as results of the ladder (``val``:
    one validation loss per seed, the same seeds on both sides). The lesson: at ``faster_lr`` the
    paired difference (without - with) is more than ``SE_BAR`` standard errors above 0.
    """
    rates = []
    for (without, with_ln), rate in ((lecture, lr), (faster, faster_lr)):
        mean, se = paired_difference(without["val"], with_ln["val"])
        rates.append(dict(rate=rate, mean=mean, se=se, n=len(with_ln["val"]),
                          k=standard_errors(mean, se)))
    slow, fast = rates

    def change(r, what):
        size = (f"{abs(r['mean']):.3f} ± {r['se']:.3f} nats, {abs(r['k']):.1f} standard "
                f"errors from no change over {r['n']} seeds")
        if round(r["mean"], 3) == 0:
            return f"leaves {what} where it was (a change of {size})"
        return f"{'lowers' if r['mean'] > 0 else 'raises'} {what} by {size}"

    slow_verdict = ("a gain already beyond the seeds' noise" if slow["k"] > SE_BAR else
                    "a worse loss, beyond the noise" if slow["k"] < -SE_BAR else
                    "within the seeds' noise")
    start = (f"At the lecture's learning rate ({slow['rate']:g}) LayerNorm "
             f"{change(slow, 'the loss')}: {slow_verdict}. At {fast['rate']:g}, "
             f"{fast['rate'] / slow['rate']:g} times higher, it {change(fast, 'it')}.")
    holds = (start + " Each seed trains both rungs on the same batches, so the paired difference "
             "removes what the seeds share, and a gain this many standard errors from zero is not "
             "the luck of a few seeds. LayerNorm rescales every block's input to one size, "
             "whatever the updates did to the residual stream; that would matter most when the "
             "updates are large, which fits where the gain appears, though this experiment shows "
             "where the gain is, not why.")
    fails = (start + f" That is not the clear gain (more than {SE_BAR:g} standard errors) this "
             "section expects. At a high learning rate training is chaotic: a seed lands "
             "elsewhere when the CPU sums in another order, so on this machine these seeds "
             "cannot tell the two rungs apart.")
    return lesson("LayerNorm lowers the loss at the raised learning rate",
                  fast["k"] - SE_BAR, "standard errors", holds, fails)
