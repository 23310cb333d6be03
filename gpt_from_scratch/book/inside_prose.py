"""Chapter 13 — the chapter's lessons and sentences, judged and written from the measured numbers:
the logit lens against its control, the three ablations, patching in both directions, shares
patched together, and the time it all took."""

from __future__ import annotations

import torch
from torch import Tensor

from .inside import two
from .lessons import SE_BAR, Lesson, beyond_t, lesson

RANK_BAR = 0.5  # "the rankings agree": Spearman's rho over the heads above 0.5 in every seed
OPENING_BAR = 0.1  # nats a character: an ablation that costs the opening more has damaged the model
PREVIOUS_BAR = 0.5  # a head that gives more than half its attention to the previous position


_SE = {2.0: "two", 3.0: "three"}.get(SE_BAR, f"{SE_BAR:g}")  # the bar, spelled out


def _name(i: int, H: int) -> str:
    return f"L{i // H}H{i % H}"


def _each(values) -> str:
    return ", ".join(two(v) for v in values)


def _pm(values, errors, digits: int = 2) -> str:
    """``"0.39 ± 0.02, ..."``: each value with its standard error."""
    return ", ".join(f"{v:.{digits}f} ± {e:.{digits}f}".replace("-0.00 ", "0.00 ")
                     for v, e in zip(values, errors))


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


def _ladder(copy: dict[str, Tensor], opening: dict[str, Tensor],
            other_means: dict[str, float]) -> tuple[str, list[float]]:
    """Zeroing's worst head for the copy, and what it costs the opening: zeroed, under
    the two coarser means (coarsest first) and mean-ablated by role."""
    worst = int(copy["zero"].flatten().argmax())
    return _name(worst, copy["zero"].shape[1]), [
        float(opening["zero"].flatten()[worst]), *other_means.values(),
        float(opening["mean"].flatten()[worst])]


def ablation_lesson(copy: dict[int, dict[str, Tensor]],
                    opening: dict[int, dict[str, Tensor]],
                    other_means: dict[int, dict[str, float]],
                    apart: tuple[float, float]) -> Lesson:
    """Per seed: what each ablation (``"zero"``, ``"mean"`` by role, ``"resample"``: (L, H)
    tensors of nats a character lost) costs the copied line and the opening, which no line
    changes; ``other_means``, what zeroing's worst head costs the opening under the two
    coarser means (``{"over all positions": ..., "at each position": ...}``); ``apart`` (the
    first seed), how far that head's output lies from its role's mean, as a share of its
    norm, on the opening and on the line. The lesson, in every seed: zeroing damages the
    opening; the mean over all positions, which do not line up, spares less than half of
    that; the mean at each position costs less; a role mean nothing (below the bar, for
    every head)."""
    if not (set(copy) == set(opening) == set(other_means) and copy):
        raise ValueError(f"ablation_lesson: seeds {sorted(copy)}, {sorted(opening)} and "
                         f"{sorted(other_means)} differ: pass one dict per seed to each")
    seeds = list(copy)
    first = seeds[0]
    head, ladders = {}, {}
    for seed in seeds:
        head[seed], ladders[seed] = _ladder(copy[seed], opening[seed], other_means[seed])
    zero, coarsest, each, role = zip(*ladders.values())  # each a tuple over seeds
    role_worst = max(float(opening[s]["mean"].max()) for s in seeds)
    resample_worst = max(float(opening[s]["resample"].max()) for s in seeds)
    margin = min(min(zero) - OPENING_BAR, OPENING_BAR - role_worst,
                 *(a - z / 2 for a, z in zip(coarsest, zero)),
                 *(a - b for a, b in zip(coarsest, each)),
                 *(b - r for b, r in zip(each, role)))
    heads = sorted(set(head.values()))
    who = (f"{heads[0]} in every seed" if len(heads) == 1 else
           ", ".join(f"{head[s]} in seed {s}" for s in seeds))
    worst = int(copy[first]["zero"].argmax())
    ways = "; ".join(f"{how} ablation {two(c.flatten()[worst])} and "
                     f"{two(opening[first][how].flatten()[worst])}"
                     for how, c in copy[first].items())
    over, at = other_means[first]
    said = (f"The head whose zeroing costs the copy most is {who}. In seed {first}'s "
            f"model, in nats a character on the copied line and on the opening: {ways}. "
            f"On the opening, which is the same text in every row, {head[first]}'s output "
            f"lies {two(apart[0])} of its norm from its role's mean; on the copied line, "
            f"{two(apart[1])}. ")
    above = [str(s) for s, a, z in zip(seeds, coarsest, zero) if a > z]
    beyond = (f"; it exceeds zeroing's cost in seed{'s' * (len(above) > 1)} "
              f"{', '.join(above)}" if above else "")
    why = (f"Zeroing removes what the head writes on every input, the opening included, "
           f"and the opening, which reads it, pays for it: {_each(zero)} in the "
           f"{len(seeds)} seeds. A mean keeps what the inputs it averages have in "
           "common, so it spares the opening only as far as its positions line up with "
           f"the opening's. The mean {over}, which do not line up, spares less "
           f"than half of it: it costs {_each(coarsest)}{beyond}. The mean {at} costs "
           f"less, {_each(each)}; the mean over each role, {_each(role)}. So mean ablation "
           f"by role spares the opening nearly by construction (at most {two(role_worst)} "
           "for any head of any seed, a check of the roles rather than a finding): what "
           "it costs the line is what the head says about this row beyond its role's "
           "average. ")
    resample = (f"Resampling from the corrupted conversation holds the same opening at the "
                f"same positions and shows almost no damage there (at most "
                f"{max(resample_worst, 0):.1g} nats for any head of any seed): the heads' "
                "outputs at the opening differ only through what they read of the line "
                "before it. ")
    worse = _worse_than_removal(copy[first])
    resample += ("It does not remove information, though: it writes the other line's. On "
                 f"seed {first}'s copied line, " + "; ".join(
                     f"{n} costs {two(r)} resampled, {two(m)} mean-ablated, {two(z)} zeroed"
                     for n, r, m, z in worse) + ": the corrupted output points the copy "
                 "to line B, a wrong signal that costs more than none." if worse else
                 f"On seed {first}'s copied line it costs no head clearly more than "
                 "zeroing or the mean.")
    return lesson(
        "zeroing damages the opening; a mean spares it as far as its positions line up",
        margin, "nats", said + why + resample,
        said + "Here the ablations do not order as the chapter describes in every seed: "
        f"on the opening, zeroing costs {_each(zero)}, the mean {over} "
        f"{_each(coarsest)}, {at} {_each(each)}, by role {_each(role)}, and mean "
        f"ablation by role costs up to {two(role_worst)} for one head (the bar: "
        f"{OPENING_BAR}). " + resample)


def directions_lesson(denoised: dict[int, Tensor], noised: dict[int, Tensor],
                      previous: dict[int, Tensor], boot: dict[int, tuple[Tensor, Tensor]],
                      n_pairs: int) -> Lesson:
    """Per seed, the head that noising ranks first, what denoising it restores and its
    previous-token score (each an (L, H) tensor per seed); ``boot``, per seed, that head's
    denoising and noising shares on the same bootstrap resamples of the pairs ((n,) each,
    ``patching.bootstrap_shares``). The lesson: that head restores less than half, denoised,
    of what it loses, noised: the gap's mean over the seeds clears zero at Student's t
    (``lessons.beyond_t``, one-sided 95%); each seed's gap is printed with its bootstrapped
    standard error over the pairs. Where it is a previous-token head in every seed, the text
    tells how that fits both numbers."""
    if not (set(denoised) == set(noised) == set(previous) == set(boot) and denoised):
        raise ValueError(f"directions_lesson: seeds {sorted(denoised)}, {sorted(noised)}, "
                         f"{sorted(previous)} and {sorted(boot)} differ: pass one entry "
                         "per seed to each")
    seeds = list(denoised)
    H = denoised[seeds[0]].shape[1]
    top = {s: int(noised[s].flatten().argmax()) for s in seeds}
    lost = [float(noised[s].flatten()[top[s]]) for s in seeds]
    restored = [float(denoised[s].flatten()[top[s]]) for s in seeds]
    prev = [float(previous[s].flatten()[top[s]]) for s in seeds]
    spread = {s: (float(d.std()), float(n.std()), float((n / 2 - d).std()))
              for s, (d, n) in boot.items()}  # standard errors: restored, lost, margin
    gaps = [n / 2 - d for n, d in zip(lost, restored)]
    mean, se, t, margin = beyond_t([n / 2 for n in lost], restored)
    heads = sorted({_name(top[s], H) for s in seeds})
    named = (f"{heads[0]} first in every seed" if len(heads) == 1 else
             "first " + ", ".join(f"{_name(top[s], H)} in seed {s}" for s in seeds))
    said = (f"Over {_power(len(seeds), n_pairs)}, noising ranks {named}: its corrupted "
            f"output loses {_pm(lost, [spread[s][1] for s in seeds])} of the gap (seeds "
            f"in order; ± one standard error over the {n_pairs} pairs, bootstrapped). "
            f"Denoised alone, the same head restores "
            f"{_pm(restored, [spread[s][0] for s in seeds])}")
    told = (f" (half of what it loses minus what it restores: "
            f"{_pm(gaps, [spread[s][2] for s in seeds], 3)}; their mean {mean:.3f} ± "
            f"{se:.3f} over the seeds, against Student's t = {t:.2f})")
    kind = (f" It is a previous-token head: {_each(prev)} of its attention goes to the "
            "position just before." if min(prev) > PREVIOUS_BAR else
            f" Its previous-token scores are {_each(prev)}: not a previous-token head in "
            f"every seed (the bar: {PREVIOUS_BAR}).")
    fits = (" A previous-token head fits both numbers, in a story this chapter does not "
            "test (patching the head into the copying heads' keys alone would). At each "
            "character of the prompt's "
            "line it writes which character came before, and the copying heads find the "
            "character to copy by that (Chapter 8's induction mechanism). Noised, in the "
            "clean run, it tells them the other line's characters: they lose their place, "
            "and much of the copy goes. Denoised alone, in the corrupted run, it gives them "
            "the clean line's places while the characters they read there are still the "
            "other line's: they look in the right places and find the wrong characters.")
    return lesson(
        "the head the copy needs most is not enough alone", margin, "share",
        said + f", less than half as much, beyond Student's t over the seeds at one-sided "
        f"95%{told}: the copy needs it, but its clean output does not carry the line by "
        "itself." + kind + (fits if min(prev) > PREVIOUS_BAR else ""),
        said + f": not less than half as much beyond Student's t over the seeds "
        f"here{told}, so on this machine the two directions do not clearly single out a "
        "head that is needed but not enough." + kind)


def joint_text(single: Tensor, pair: list[tuple[int, int]], joint: dict[str, float],
               boot: Tensor) -> str:
    """Shares patched together (denoising, one seed): the two heads of ``pair`` against the
    sum of their single shares (``single``, (L, H)), then layer 0's heads, the later layers'
    and all (``joint``: ``"pair"``, ``"layer 0"``, ``"later"``, ``"all"``). ``boot`` (n, 5):
    the bootstrap resamples of the pair's two heads, the pair, layer 0 and the later layers
    (``patching.bootstrap_shares``); a difference within two standard errors is not told."""
    se = [float(e) for e in boot.std(0)]  # standard errors of the five shares
    a, b = (float(single[head]) for head in pair)
    diff = joint["pair"] - (a + b)
    diff_se = float((boot[:, 2] - boot[:, 0] - boot[:, 1]).std())
    names = " and ".join(f"L{l}H{h} ({two(v)} ± {two(e)})"
                         for (l, h), v, e in zip(pair, (a, b), se))
    shown = round(a, 2) + round(b, 2)  # the sum of the shares as printed
    text = (f"Patched alone, {names} restore {two(shown)} of the gap between them; "
            f"patched together, {two(joint['pair'])} ± {two(se[2])}: "
            f"{'short of' if diff < 0 else 'beyond'} the sum by {abs(diff):.3f} ± "
            f"{diff_se:.3f} (± one standard error over the pairs, bootstrapped)")
    if abs(diff) <= SE_BAR * diff_se:
        text += (f": within {_SE} standard errors of it, so these pairs tell neither "
                 "overlap nor need. ")
    elif diff < 0:
        text += (f": over {_SE} standard errors, so they overlap, each restoring "
                 "part of what the other does. ")
    else:
        text += (f": over {_SE} standard errors, so each needs the other. ")
    first_layer, later, every = joint["layer 0"], joint["later"], joint["all"]
    L = single.shape[0]
    text += (f"Layer 0's heads, patched together, restore {two(first_layer)} ± "
             f"{two(se[3])}; the heads of layers 1 to {L - 1} without them, {two(later)} "
             f"± {two(se[4])}")
    if later >= 0.95 and first_layer < later / 2:
        text += (". Layer 0 acts through the later heads, so patching those carries its "
                 f"part too: the two come to {two(first_layer + later)}, against "
                 f"{two(every)} for every head at once, an overlap. Not heads in series in "
                 "Exercise 4's sense, though: there, patching the earlier heads alone "
                 "would make the later ones compute their clean outputs and restore as "
                 "much. "
                 f"Layer 0 alone restores only {two(first_layer)} because the later heads "
                 "also read the prompt's own tokens, the other line's in the corrupted "
                 "run, which no head's output brings back: the AND is between layer 0's "
                 "output and the clean line's characters, not between the two groups of "
                 "heads.")
    else:
        text += "."
    text += f" All {single.numel()} heads restore {two(every)}"
    text += (", as they must: the answer's characters are the same in both runs, so with "
             "every head's output clean the answer's positions are computed exactly as in "
             "the clean run. That share tests the code, not the model."
             if abs(every - 1) < 1e-3 else ".")
    return text


def timing_text(seconds: float, n_models: int, n_runs: int) -> str:
    return (f"The patching in both directions and the attention scores took "
            f"{seconds:.1f} s of CPU time for each of the {n_models} models ({n_runs} patched "
            "runs each).")


def narrow_tables(left: Tensor, right: Tensor) -> str:
    """Two (L, H) tables as text, one line per layer, ``left | right``, each value in four
    characters (``.04``, ``-.01``, ``1.00``): 44 characters wide for 4 heads."""
    if not (isinstance(left, Tensor) and isinstance(right, Tensor) and left.dim() == 2
            and left.shape == right.shape):
        raise ValueError(f"narrow_tables: left and right must be (L, H) tensors of one "
                         f"shape, got {getattr(left, 'shape', type(left).__name__)} and "
                         f"{getattr(right, 'shape', type(right).__name__)}")

    def cell(v: float) -> str:
        text = two(v)
        return f"{text[:-4] + text[-3:] if abs(float(text)) < 1 else text:>4}"

    def row(values: Tensor) -> str:
        return " ".join(cell(v) for v in values.tolist())
    return "\n".join(f"L{l} {row(a)} | {row(b)}"
                     for l, (a, b) in enumerate(zip(left, right)))
