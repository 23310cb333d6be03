"""Chapter 9 — the chapter's run-dependent sentences, written from the measured numbers.

Each function takes what a cell measured and returns Markdown, so that every number in the prose is
an output of this run (see CONTRIBUTING.md); tests/test_finetune.py checks them.
"""

from __future__ import annotations

import math


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _check(name: str, value: float) -> float:
    if not math.isfinite(value):
        raise ValueError(f"{name}={value} is not finite: the measurement failed, re-run the cell that made it")
    return value


def classification_text(rows: dict[str, dict], majority: float, bag: float) -> str:
    """Sentences on the accuracy table of Chapter 9: ``rows`` maps a method to a dict with ``accuracy``
    and ``trainable``; ``majority`` and ``bag`` are the two baselines' test accuracies."""
    if not rows:
        raise ValueError("no fine-tuning result to describe: train at least one classifier first")
    for name, row in rows.items():
        _check(f"{name} accuracy", row["accuracy"])
    best_name, best = max(rows.items(), key=lambda item: item[1]["accuracy"])
    beat = [n for n, r in rows.items() if r["accuracy"] > bag]
    below = [n for n, r in rows.items() if r["accuracy"] <= majority]
    text = (f"The best fine-tuned classifier here is **{best_name}**, at {_pct(best['accuracy'])} on the test "
            f"speeches with {best['trainable']:,} trainable parameters; always answering the most frequent "
            f"speaker scores {_pct(majority)}, and the bag-of-tokens model {_pct(bag)}. ")
    if beat:
        text += f"{len(beat)} of the {len(rows)} fine-tuned classifiers beat the bag of tokens ({', '.join(beat)}). "
    else:
        text += ("None of the fine-tuned classifiers beats the bag of tokens: the features these models learned "
                 "in pretraining say less about who speaks than which words occur. ")
    if len(below) == len(rows):
        text += ("None got past the majority baseline either: a head reading features that do not separate "
                 "the speakers has nothing to learn from, and a few steps cannot make such features.")
    elif below:
        text += f"Not past the majority baseline: {', '.join(below)}."
    return text


def style_text(speaker: str, before: dict[str, float], after: dict[str, float]) -> str:
    """Sentences on the style fine-tuning of Chapter 9: held-out losses (nats per token) before and after,
    for ``speaker`` and for ``"others"``."""
    for key in (speaker, "others"):
        _check(f"loss before ({key})", before[key])
        _check(f"loss after ({key})", after[key])
    mine, others = after[speaker] - before[speaker], after["others"] - before["others"]
    verb = "fell" if mine < 0 else "rose"
    text = (f"On {speaker}'s held-out speeches the loss {verb} from {before[speaker]:.3f} to {after[speaker]:.3f} "
            f"nats per token ({mine:+.3f}); on the other speakers' it went from {before['others']:.3f} to "
            f"{after['others']:.3f} ({others:+.3f}). ")
    if mine < 0 and mine < others:
        text += (f"The adapter helps most on the speaker it was trained on: the {-mine:.3f} nats it gained "
                 f"there are more than it gained (or lost) elsewhere.")
    else:
        text += "This run's adapter did not single out the speaker it was trained on: train it longer (FULL_RUN)."
    return text
