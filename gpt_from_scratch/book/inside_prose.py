"""Chapter 13 — the chapter's lessons and sentences, judged and written from the measured numbers:
the logit lens against its control, the three ablations, patching in both directions, shares
patched together, and the time it all took."""

from __future__ import annotations

import torch
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


def _power(runs: int, n_pairs: int) -> str:
    return (f"{runs} fine-tuning seeds of one base model and one fixed set of {n_pairs} pairs")


def rankings_lesson(rhos: list[float], n_pairs: int) -> Lesson:
    low = min(rhos)
    spread = _each(rhos)
    power = _power(len(rhos), n_pairs)
    return lesson("the patching and attention rankings agree", low - RANK_BAR, "rho",
                  f"The two rankings of the heads agree in every seed: Spearman's rank "
                  f"correlation is {spread} (above {RANK_BAR} in each), on {power}.",
                  f"Here the two rankings of the heads agree less than the bar asks: "
                  f"Spearman's rank correlation is {spread}, at least one at or below "
                  f"{RANK_BAR}, on {power}. On a few heads and one small batch of pairs the "
                  "ranks of the weak heads move with small changes.")


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


def _worse_than_removal(copy: dict[str, Tensor]) -> list[tuple[str, float, float, float]]:
    """The heads (at most two) whose resampling costs the line more than zeroing and the mean
    both: (name, resample, mean, zero), the largest excess first."""
    H = copy["zero"].shape[1]
    r, m, z = (copy[how].flatten() for how in ("resample", "mean", "zero"))
    excess = r - torch.maximum(m, z)
    order = [int(i) for i in excess.argsort(descending=True) if excess[i] > 0.05][:2]
    return [(_name(i, H), float(r[i]), float(m[i]), float(z[i])) for i in order]


def ablation_lesson(copy: dict[str, Tensor], opening: dict[str, Tensor],
                    other_means: dict[str, float], apart: tuple[float, float],
                    seed: int) -> Lesson:
    """One run (``seed``'s model): what each ablation (``"zero"``, ``"mean"`` by role, ``"resample"``: (L, H)
    tensors of nats a character lost) costs the copied line and the opening, which no line
    changes; ``other_means``, what zeroing's worst head costs the opening under coarser means
    (``{"over all positions": ..., "at each position": ...}``); ``apart``, how far that head's
    output lies from its role's mean, as a share of its norm, on the opening and on the line.
    The lesson: zeroing damages the opening, and the better a mean's positions line up with
    the opening's, the less it loses, down to a role mean's nothing."""
    H = copy["zero"].shape[1]
    worst = int(copy["zero"].flatten().argmax())
    head = _name(worst, H)
    cost = {how: (float(copy[how].flatten()[worst]), float(opening[how].flatten()[worst]))
            for how in copy}
    ways = "; ".join(f"{how} ablation {two(c)} and {two(o)}" for how, (c, o) in cost.items())
    ladder = [*other_means.values(), cost["mean"][1]]  # coarsest mean first
    mean_worst = float(opening["mean"].max())
    margin = min(cost["zero"][1] - OPENING_BAR, OPENING_BAR - mean_worst,
                 *(a - b for a, b in zip(ladder, ladder[1:])))
    means = ", ".join(f"the mean {where} {two(c)}" for where, c in other_means.items())
    said = (f"In this one run (seed {seed}'s model, {copy['zero'].numel()} heads), the head whose "
            f"zeroing costs the copy most is {head}: in nats a character on the copied line "
            f"and on the opening, {ways}. On the opening, which is the same text in every "
            f"row, {head}'s output lies {two(apart[0])} of its norm from its role's mean; on "
            f"the copied line, {two(apart[1])}. ")
    why = (f"Zeroing removes the part of the output that is the same across the data too, "
           f"and the opening, which uses that part, loses {two(cost['zero'][1])}. A mean keeps "
           f"as much of it as its positions line up with the opening's: {means}, the mean "
           f"over each role {two(cost['mean'][1])}. So mean ablation by role spares the "
           f"opening nearly by construction, as resampling does (at most {two(mean_worst)} "
           "for any head): what it costs the line is what the head says about this row "
           "beyond its role's average. ")
    worse = _worse_than_removal(copy)
    resample = ("Resampling from the corrupted conversation holds the same opening at the "
                "same positions, so it cannot show damage there either. ")
    resample += ("It does not remove information, though: it writes the other line's. On the "
                 "copied line, " + "; ".join(
                     f"{n} costs {two(r)} resampled, {two(m)} mean-ablated, {two(z)} zeroed"
                     for n, r, m, z in worse) + ": the corrupted output points the copy "
                 "to line B, a wrong signal that costs more than none." if worse else
                 "On the copied line it costs no head clearly more than zeroing or the mean.")
    return lesson(
        "zeroing damages the opening, a mean that keeps the head's constant part does not",
        margin, "nats", said + why + resample,
        said + f"Here the means do not order as the chapter describes: on the opening, "
        f"zeroing {head} costs {two(cost['zero'][1])}, {means}, by role "
        f"{two(cost['mean'][1])}, and mean ablation by role costs up to {two(mean_worst)} "
        f"for one head (the bar: {OPENING_BAR}). " + resample)


def directions_lesson(denoised: dict[int, Tensor], noised: dict[int, Tensor],
                      previous: dict[int, Tensor], n_pairs: int) -> Lesson:
    """Per seed, the head that noising ranks first, what denoising it restores and its
    previous-token score (each an (L, H) tensor per seed); the lesson: that head restores less
    than half, denoised, of what it loses, noised. Where it is a previous-token head in every
    seed, the text tells how that fits both numbers."""
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
    said = (f"Over {_power(len(seeds), n_pairs)}, noising ranks {named}: its corrupted "
            f"output loses {_each(lost)} of the gap (seeds in order). Denoised alone, the "
            f"same head restores {_each(restored)}")
    kind = (f" It is a previous-token head: {_each(prev)} of its attention goes to the "
            "position just before." if min(prev) > PREVIOUS_BAR else
            f" Its previous-token scores are {_each(prev)}: not a previous-token head in "
            f"every seed (the bar: {PREVIOUS_BAR}).")
    fits = (" A previous-token head fits both numbers. At each character of the prompt's "
            "line it writes which character came before, and the copying heads find the "
            "character to copy by that (Chapter 8's induction mechanism). Noised, in the "
            "clean run, it tells them the other line's characters: they lose their place, "
            "and much of the copy goes. Denoised alone, in the corrupted run, it gives them "
            "the clean line's places while the characters they read there are still the "
            "other line's: they look in the right places and find the wrong characters.")
    return lesson(
        "the head the copy needs most is not enough alone", margin, "share",
        said + ", less than half as much: the copy needs it, but its clean output does not "
        "carry the line by itself." + kind + (fits if min(prev) > PREVIOUS_BAR else ""),
        said + ": not less than half as much in every seed here, so on this machine the two "
        "directions do not single out a head that is needed but not enough." + kind)


JOINT_NOISE = 0.05  # shares of the gap: a joint share this close to the sum is near-additive


def joint_text(single: Tensor, pair: list[tuple[int, int]], pair_share: float,
               first_layer: float, later: float, every: float) -> str:
    """Shares patched together (denoising, one seed): the two heads of ``pair`` against the sum of
    their single shares (``single``, (L, H)), then layer 0's heads, the later layers' and all."""
    a, b = (round(float(single[head]), 2) for head in pair)
    names = " and ".join(f"L{l}H{h} ({two(single[l, h])})" for l, h in pair)
    text = (f"Patched alone, {names} restore {two(a + b)} of the gap between them; patched "
            f"together, {two(pair_share)}")
    if abs(pair_share - (a + b)) <= JOINT_NOISE:
        text += (f": within {JOINT_NOISE} of the sum, nearly additive. This chapter does not "
                 "measure the noise in a share (one set of pairs), so a difference this "
                 "small tells neither overlap nor need. ")
    elif pair_share < a + b:
        text += ": less than the sum, so they overlap, each restoring part of what the other does. "
    else:
        text += ": more than the sum of their parts, so each needs the other. "
    L = single.shape[0]
    text += (f"Layer 0's heads, patched together, restore {two(first_layer)}; the heads of "
             f"layers 1 to {L - 1} without them, {two(later)}")
    if later >= 0.95 and first_layer < later / 2:
        text += (f". Layer 0 acts through the later heads, so patching them carries its part "
                 f"too, and the two add up to {two(first_layer + later)}. Not as heads in "
                 "series in Exercise 4's sense: there, patching the earlier heads alone would "
                 "make the later ones compute their clean outputs and restore as much. Layer 0 "
                 f"alone restores {two(first_layer)}, because the later heads need the clean "
                 "line's characters as well as its clean output: an AND.")
    else:
        text += "."
    text += f" All {single.numel()} heads restore {two(every)}"
    text += (", as they must: the answer's characters are the same in both runs, so with "
             "every head's output clean the answer's positions are computed exactly as in the "
             "clean run. That share tests the code, not the model." if abs(every - 1) < 1e-3
             else ".")
    return text


def timing_text(seconds: float, n_models: int, n_runs: int) -> str:
    return (f"The patching in both directions and the attention scores took "
            f"{seconds:.1f} s of CPU time for each of the {n_models} models ({n_runs} patched "
            "runs each).")
