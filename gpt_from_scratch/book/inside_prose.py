"""Chapter 13 — the chapter's lessons and sentences, judged and written from the measured numbers:
the logit lens against its control, the three ablations, patching in both directions, shares
patched together, and the time it all took."""

from __future__ import annotations

import math

from torch import Tensor

from .inside import two
from .lessons import Lesson, lesson

RANK_BAR = 0.5  # "the rankings agree": Spearman's rho over the heads above 0.5 in every seed
OPENING_BAR = 0.1  # nats a character: an ablation that costs the opening more has damaged the model
PREVIOUS_BAR = 0.5  # a head that gives more than half its attention to the previous position


def _name(i: int, H: int) -> str:
    return f"L{i // H}H{i % H}"


def _each(values) -> str:
    return ", ".join(two(v) for v in values)


def rankings_lesson(rhos: list[float]) -> Lesson:
    low = min(rhos)
    spread = _each(rhos)
    return lesson("the patching and attention rankings agree", low - RANK_BAR, "rho",
                  f"The two rankings of the heads agree in every seed: Spearman's rank correlation "
                  f"is {spread} (above {RANK_BAR} in each).",
                  f"Here the two rankings of the heads agree less than the bar asks: Spearman's rank "
                  f"correlation is {spread}, at least one at or below {RANK_BAR}. On a few heads and "
                  f"one small batch of pairs the ranks of the weak heads move with small changes.")


def shares_lesson(sums: list[float]) -> Lesson:
    spread = _each(sums)
    return lesson("the single-head shares sum above one", min(sums) - 1.0, "share",
                  f"The single-head shares add up to {spread}: more than the whole gap in every seed.",
                  f"The single-head shares add up to {spread}: not above one in every seed here.")


def lens_lesson(clean: list[tuple[float, float]], corrupted: list[tuple[float, float]]) -> Lesson:
    """The lens's top-1 share, (after the first block, after the last) per seed, rises more on
    the clean conversations than on the corrupted ones, the control."""
    if len(clean) != len(corrupted) or not clean:
        raise ValueError(f"lens_lesson: {len(clean)} clean and {len(corrupted)} corrupted runs: "
                         "pass one (first, last) pair per seed on each side")
    margin = min((c1 - c0) - (k1 - k0) for (c0, c1), (k0, k1) in zip(clean, corrupted))

    def ends(runs) -> str:
        return ", ".join(f"{a:.0%} → {b:.0%}" for a, b in runs)
    told = (f"on the clean conversations {ends(clean)}; on the corrupted ones, the control, "
            f"whose prompt holds another line, {ends(corrupted)}")
    return lesson("the lens's rise with depth is the copy's", margin, "share",
                  f"From the first block to the last, the lens's top-1 share on the line's "
                  f"characters rises more in every seed where the line is there to copy: {told}. "
                  "Depth alone does not make the answer: the rise is the copy taking shape.",
                  f"From the first block to the last, the lens's top-1 share does not rise more "
                  f"where the line is there to copy in every seed here: {told}.")


def ablation_lesson(copy: dict[str, Tensor], opening: dict[str, Tensor]) -> Lesson:
    """What each ablation (``"zero"``, ``"mean"``, ``"resample"``: (L, H) tensors of nats a
    character lost) of zeroing's worst head costs the copied line and the opening, which no line
    changes; the lesson: zeroing that head damages the opening, mean ablation by role costs it at
    most ``OPENING_BAR`` for any head."""
    H = copy["zero"].shape[1]
    worst = int(copy["zero"].flatten().argmax())
    head = _name(worst, H)
    cost = {how: (float(copy[how].flatten()[worst]), float(opening[how].flatten()[worst]))
            for how in copy}
    ways = "; ".join(f"{how} ablation {two(c)} and {two(o)}" for how, (c, o) in cost.items())
    mean_worst = float(opening["mean"].max())
    margin = min(cost["zero"][1] - OPENING_BAR, OPENING_BAR - mean_worst)
    said = (f"The head whose zeroing costs the copy most is {head}: in nats a character on the "
            f"copied line and on the opening, {ways}. ")
    resample = (f"Resampling from the corrupted conversation cannot show damage at the opening: "
                "the corrupted conversation holds the same opening at the same positions, so the "
                "head's output there is nearly its own (it differs only through what the head "
                "reads of the other line); resampling measures what depends on the line, and "
                "nothing else.")
    return lesson(
        "zeroing damages the opening, mean ablation by role does not", margin, "nats",
        said + f"Zeroing {head} costs the opening, which depends on no line, more than "
        f"{OPENING_BAR} nats a character: damage from an output the next layers never see at "
        f"that place, not the head's part in the copy. Mean ablation, each position averaged "
        f"over the positions that play the same role, costs the opening at most "
        f"{two(mean_worst)} nats a character for any of the {copy['mean'].numel()} heads: what "
        f"it costs the line is what the head tells about this row. " + resample,
        said + f"Here the two ablations do not separate damage from function as the chapter "
        f"describes: zeroing {head} costs the opening {two(cost['zero'][1])} nats a character, "
        f"and mean ablation by role up to {two(mean_worst)} for one head (the bar: "
        f"{OPENING_BAR}). " + resample)


def directions_lesson(denoised: dict[int, Tensor], noised: dict[int, Tensor],
                      previous: dict[int, Tensor]) -> Lesson:
    """Per seed, the head that noising ranks first, what denoising it restores and its
    previous-token score (each an (L, H) tensor per seed); the lesson: that head restores less
    than half, denoised, of what it loses, noised."""
    if not (set(denoised) == set(noised) == set(previous) and denoised):
        raise ValueError(f"directions_lesson: seeds {sorted(denoised)}, {sorted(noised)} and "
                         f"{sorted(previous)} differ: pass one (L, H) tensor per seed to each")
    seeds = list(denoised)
    H = denoised[seeds[0]].shape[1]
    top = {s: int(noised[s].flatten().argmax()) for s in seeds}
    lost = [float(noised[s].flatten()[top[s]]) for s in seeds]
    restored = [float(denoised[s].flatten()[top[s]]) for s in seeds]
    prev = [float(previous[s].flatten()[top[s]]) for s in seeds]
    margin = min(n / 2 - d for n, d in zip(lost, restored))
    heads = sorted({_name(top[s], H) for s in seeds})
    named = (f"{heads[0]} first in every seed" if len(heads) == 1 else
             "first " + ", ".join(f"{_name(top[s], H)} in seed {s}" for s in seeds))
    said = (f"Noising ranks {named}: its corrupted output loses {_each(lost)} of the gap "
            f"(seeds in order). Denoised alone, the same head restores {_each(restored)}")
    kind = (f" It is a previous-token head: {_each(prev)} of its attention goes to the position "
            "just before." if min(prev) > PREVIOUS_BAR else "")
    return lesson(
        "the head the copy needs most is not enough alone", margin, "share",
        said + ", less than half as much: the copy needs it, but its clean output does not "
        "carry the line by itself." + kind,
        said + ": not less than half as much in every seed here, so on this machine the two "
        "directions do not single out a head that is needed but not enough." + kind)


def joint_text(single: Tensor, pair: list[tuple[int, int]], pair_share: float,
               first_layer: float, later: float, every: float) -> str:
    """Shares patched together (denoising, one seed): the two heads of ``pair`` against the sum of
    their single shares (``single``, (L, H)), then layer 0's heads, the later layers' and all."""
    a, b = (float(single[head]) for head in pair)
    names = " and ".join(f"L{l}H{h} ({two(single[l, h])})" for l, h in pair)
    text = (f"Patched alone, {names} restore {two(a + b)} of the gap between them; patched "
            f"together, {two(pair_share)}")
    text += (": they overlap, each restoring part of what the other does. " if pair_share < a + b
             else ": together they restore more than the sum of their parts. ")
    L = single.shape[0]
    text += (f"Layer 0's heads, patched together, restore {two(first_layer)}; the heads of "
             f"layers 1 to {L - 1} without them, {two(later)}; all {single.numel()} heads, "
             f"{two(every)}.")
    if later >= 0.95 and first_layer > 0.05 and math.isclose(every, 1.0, abs_tol=0.05):
        text += (" Whatever layer 0 restores reaches the answer through the later heads, so it is "
                 "counted again in their shares: heads in series.")
    return text


def timing_text(seconds: float, n_models: int, n_runs: int) -> str:
    return (f"The patching in both directions and the attention scores took "
            f"{seconds:.1f} s of CPU time for each of the {n_models} models ({n_runs} patched "
            "runs each).")
