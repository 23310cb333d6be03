"""Chapter 13, sections 13.1 to 13.4 — the lessons and sentences, judged and written from
the measured numbers: which lines the pairs hold, the logit lens against its control, what
direct attribution gives the first layer, and the three ablations (``patching_prose`` has
section 13.5's, Exercise 4's and the Summary's)."""

from __future__ import annotations

import torch
from torch import Tensor

from .inside import head_name, listed, two
from .lessons import SE_BAR, Lesson, lesson

OPENING_BAR = 0.1  # nats a character: an ablation that costs the opening more changes more
# than the copy (the opening is the same text in every row)
SE_WORDS = {2.0: "two", 3.0: "three"}.get(SE_BAR, f"{SE_BAR:g}")  # the bar, spelled out
SMALL_SHARE = 0.1  # layer 0 adds "almost nothing directly": under a tenth of the largest


def lengths_text(chosen: list[int], every: list[int], n_pairs: int, unit: str) -> str:
    """Which line lengths the pairs hold (``chosen``, one length per pair) against the
    lengths of every held-out line (``every``): a sentence that says what the chapter's
    measurements cover."""
    if not chosen or not every or not set(chosen) <= set(every):
        raise ValueError(f"lengths_text: {len(chosen)} chosen and {len(every)} held-out "
                         "lengths, the chosen not all among the held-out: pass each pair's "
                         "length (pairs.copy.sum(1)) and every held-out line's "
                         "(inside.repeat_lengths)")
    kept = sorted(set(chosen))
    named = (", ".join(map(str, kept[:-1])) + f" and {kept[-1]}" if len(kept) > 1
             else str(kept[0]))
    share = sum(length in kept for length in every) / len(every)
    return (f"The {n_pairs} pairs are the first pairs of equal length in the shuffled "
            f"held-out lines, taken length by length, so they hold {len(kept)} of the "
            f"lines' {len(set(every))} lengths: {named} {unit}. Lines of these lengths are "
            f"{share:.0%} of the {len(every)} held-out \"Repeat\" lines, which run from "
            f"{min(every)} to {max(every)} {unit}; what this chapter measures, it measures "
            "on these lengths.")


def lens_lesson(clean: list[tuple[float, float]], corrupted: list[tuple[float, float]]) -> Lesson:
    """The lens's top-1 share, (after the first block, after the last) per seed, rises more on
    the clean conversations than on the corrupted ones, the control. The control is not
    neutral: its prompt holds line B, which the model copies instead of A."""
    if len(clean) != len(corrupted) or not clean:
        raise ValueError(f"lens_lesson: {len(clean)} clean and {len(corrupted)} corrupted runs: "
                         "pass one (first, last) pair per seed on each side")
    margin = min((c1 - c0) - (k1 - k0) for (c0, c1), (k0, k1) in zip(clean, corrupted))

    def ends(runs) -> str:
        return ", ".join(f"{a:.0%} → {b:.0%}" for a, b in runs)
    told = (f"on the clean conversations {ends(clean)}; on the corrupted ones, the control, "
            f"whose prompt holds line B, {ends(corrupted)}")
    fell = "falls" if all(k1 < k0 for k0, k1 in corrupted) else "rises less"
    return lesson("the lens's rise with depth needs the line in the prompt", margin,
                  "share",
                  f"From the first block to the last, the lens's top-1 share on the line's "
                  f"characters rises more in every seed where the line is there to copy: "
                  f"{told}. The rise goes with the line in the prompt: it is the copy "
                  "taking shape block by block. The control is not neutral, though: with "
                  "line B in the prompt the model copies B, whose characters take the "
                  f"place of A's, so the control's share {fell} "
                  "and the difference counts the copy twice, once as A's rise and once as "
                  "B's pull. What depth adds with no line to copy at all is not measured "
                  "here.",
                  f"From the first block to the last, the lens's top-1 share does not rise more "
                  f"where the line is there to copy in every seed here: {told}.")


def attribution_text(heads: Tensor) -> str:
    """What layer 0's heads add directly, against the later layers' (``heads``: (L, H), each
    head's mean direct contribution to the copied characters' logits)."""
    if not isinstance(heads, Tensor) or heads.dim() != 2 or heads.shape[0] < 2:
        got = tuple(heads.shape) if isinstance(heads, Tensor) else type(heads).__name__
        raise ValueError(f"attribution_text: heads has shape {got}: pass the (L, H) direct "
                         "contributions of a model of two layers or more")
    first, later = float(heads[0].abs().max()), heads[1:].abs()
    top = int(later.flatten().argmax())
    layer, largest = 1 + top // heads.shape[1], float(later.max())
    if first < SMALL_SHARE * largest:
        return (f"The heads of layer 0, the table's first row, add almost nothing directly "
                f"(at most {first:.3f} in size, against {largest:.2f} for a head of layer "
                f"{layer}): the large contributions come from the later layers.")
    return (f"The heads of layer 0, the table's first row, add up to {first:.2f} directly, "
            f"against up to {largest:.2f} in the later layers (layer {layer}).")


def worse_than_removal(copy: dict[str, Tensor], excess: Tensor
                       ) -> list[tuple[str, float, float, float, float, float]]:
    """The heads (at most two) whose resampling costs the line more than zeroing and the mean
    both, by more than ``SE_BAR`` standard errors over the pairs: (name, resample, mean,
    zero, excess, its standard error), the largest excess first. ``copy``: one seed's
    (L, H) costs per ablation; ``excess``: its (n, L, H) bootstrap
    (``inside.resampling_excess``)."""
    H = copy["zero"].shape[1]
    if not isinstance(excess, Tensor) or excess.dim() != 3 or len(excess) < 2 or \
            excess.shape[1:] != copy["zero"].shape:
        got = tuple(excess.shape) if isinstance(excess, Tensor) else type(excess).__name__
        raise ValueError(f"worse_than_removal: excess has shape {got}: pass the (n, L, H) "
                         f"bootstrap of inside.resampling_excess, n >= 2, (L, H) = "
                         f"{tuple(copy['zero'].shape)}")
    r, m, z = (copy[how].flatten() for how in ("resample", "mean", "zero"))
    point, se = r - torch.maximum(m, z), excess.flatten(1).std(0)
    order = [int(i) for i in point.argsort(descending=True)
             if point[i] > SE_BAR * se[i]][:2]
    return [(head_name(i, H), float(r[i]), float(m[i]), float(z[i]), float(point[i]),
             float(se[i])) for i in order]


def _ladder(copy: dict[str, Tensor], opening: dict[str, Tensor],
            other_means: dict[str, float]) -> tuple[str, list[float]]:
    """Zeroing's worst head for the copy, and what it costs the opening: zeroed, under
    the two coarser means (coarsest first) and mean-ablated by role."""
    worst = int(copy["zero"].flatten().argmax())
    return head_name(worst, copy["zero"].shape[1]), [
        float(opening["zero"].flatten()[worst]), *other_means.values(),
        float(opening["mean"].flatten()[worst])]


def _worse_text(first, worse) -> str:
    if not worse:
        return (f"On seed {first}'s copied line it costs no head more than zeroing or the "
                f"mean by over {SE_WORDS} standard errors over the pairs.")
    return ("It does not remove information, though: it writes the other line's. On "
            f"seed {first}'s copied line, " + "; ".join(
                f"{n} costs {two(r)} resampled, {two(m)} mean-ablated, {two(z)} zeroed, "
                f"so {e:.3f} ± {s:.3f} beyond the larger of the two"
                for n, r, m, z, e, s in worse)
            + f" (± one standard error over the pairs, bootstrapped): more than either "
            f"removal, by over {SE_WORDS} standard errors. That fits a corrupted output "
            "that points the copy to line B, a wrong signal that costs more than none; "
            "this chapter does not test that reading.")


def ablation_lesson(copy: dict[int, dict[str, Tensor]],
                    opening: dict[int, dict[str, Tensor]],
                    other_means: dict[int, dict[str, float]],
                    apart: tuple[float, float],
                    worse: list[tuple[str, float, float, float, float, float]]) -> Lesson:
    """Per seed: what each ablation (``"zero"``, ``"mean"`` by role, ``"resample"``: (L, H)
    tensors of nats a character lost) costs the copied line and the opening, which no line
    changes; ``other_means``, what zeroing's worst head costs the opening under the two
    coarser means (``{"over all positions": ..., "at each position": ...}``); ``apart`` (the
    first seed), how far that head's output lies from its role's mean, as a share of its
    norm, on the opening and on the line; ``worse``, the first seed's heads that resampling
    costs more than removal (``worse_than_removal``). The lesson, in every seed: zeroing
    costs the opening; the mean over all positions, which do not line up, spares less than
    half of that; the mean at each position costs less; a role mean and resampling nothing
    (below the bar, for every head)."""
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
                 OPENING_BAR - resample_worst,
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
    beyond = ""  # where the coarsest mean costs as much as zeroing, or more, as printed
    for verb, keep in (("exceeds", lambda a, z: a > z), ("equals", lambda a, z: a == z)):
        at_seeds = [str(s) for s, a, z in zip(seeds, coarsest, zero)
                    if keep(round(a, 2), round(z, 2))]
        if at_seeds:
            beyond += (f"; it {verb} zeroing's cost in seed{'s' * (len(at_seeds) > 1)} "
                       f"{', '.join(at_seeds)}")
    why = (f"Zeroing removes what the head writes on every input, the opening included, "
           f"and the opening, which reads it, pays for it: {listed(zero)} in the "
           f"{len(seeds)} seeds. A mean keeps what the inputs it averages have in "
           "common, so it spares the opening only as far as its positions line up with "
           f"the opening's. The mean {over}, which do not line up, spares less "
           f"than half of it: it costs {listed(coarsest)}{beyond}. The mean {at} costs "
           f"less, {listed(each)}; the mean over each role, {listed(role)}. So mean "
           f"ablation by role spares the opening nearly by construction (at most "
           f"{two(role_worst)} for any head of any seed, a check of the roles rather than "
           "a finding): what it costs the line is what the head says about this row "
           "beyond its role's average. ")
    shown = f"{max(resample_worst, 0):.1g}"
    resample = ("Resampling from the corrupted conversation holds the same opening at the "
                + (f"same positions and shows almost no damage there (at most {shown} nats "
                   f"for any head of any seed, under the bar of {OPENING_BAR}): the heads' "
                   "outputs at the opening differ only through what they read of the line "
                   "before it. " if resample_worst < OPENING_BAR else
                   f"same positions, yet costs it up to {shown} nats for one head, over "
                   f"the bar of {OPENING_BAR}. ")
                + _worse_text(first, worse))
    return lesson(
        "zeroing costs the opening; a mean spares it as far as its positions line up, and "
        "resampling spares it", margin, "nats", said + why + resample,
        said + "Here the ablations do not order as the chapter describes in every seed: "
        f"on the opening, zeroing costs {listed(zero)}, the mean {over} "
        f"{listed(coarsest)}, {at} {listed(each)}, by role {listed(role)}, and mean "
        f"ablation by role costs up to {two(role_worst)} for one head (the bar: "
        f"{OPENING_BAR}). " + resample)

