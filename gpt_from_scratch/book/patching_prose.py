"""Chapter 13, section 13.5, Exercise 4 and the Summary — the lessons and sentences of
activation patching, judged and written from the measured numbers: the two rankings of the
heads, the single shares' sum, patching in both directions, shares patched together, the
time it took, and the Summary's points from the chapter's verdicts."""

from __future__ import annotations

import math
import numbers

from torch import Tensor

from .inside import head_name, listed, two
from .inside_prose import SE_WORDS
from .lessons import SE_BAR, T_LEVEL, Lesson, beyond_t_shared, lesson, t_quantile

RANK_BAR = 0.5  # "the rankings agree": rho's lower bound over the pairs above 0.5
RANK_LEVEL = 0.95  # that bound: the one-sided 95% percentile of the bootstrap
PREVIOUS_BAR = 0.5  # a head giving more than half its attention to the previous position
NEEDED_BAR = 0.2  # "the copy needs it": noised, it loses more than a fifth of the gap
NO_SPREAD = 1e-6  # a bootstrap's standard error of a share this small: rounding only


def _pm(values, errors, digits: int = 2) -> str:
    """``"0.39 ± 0.02, ..."``: each value with its standard error."""
    return ", ".join(f"{v:.{digits}f} ± {e:.{digits}f}".replace("-0.00 ", "0.00 ")
                     for v, e in zip(values, errors))


def _power(runs: int, n_pairs: int) -> str:
    return (f"{runs} fine-tuning seeds of one base model and one fixed set of {n_pairs} "
            "pairs")


def _resamples(judge: str, name: str, boot) -> Tensor:
    """``boot``, checked to be (n,) bootstrap resamples, n >= 2, all finite."""
    if not isinstance(boot, Tensor) or boot.dim() != 1 or len(boot) < 2 or \
            not boot.isfinite().all():
        got = tuple(boot.shape) if isinstance(boot, Tensor) else type(boot).__name__
        raise ValueError(f"{judge}: {name} has shape {got} or is not finite: pass (n,) "
                         "finite bootstrap resamples, n >= 2 (a standard error needs two)")
    return boot


def rankings_lesson(rhos: list[float], boot: list[Tensor], n_pairs: int) -> Lesson:
    """Spearman's rho between the denoising and induction rankings, one per seed, and its
    bootstrap over the pairs (``inside.bootstrap_rankings``): they agree where rho's
    one-sided ``RANK_LEVEL`` lower bound (the bootstrap's percentile) clears ``RANK_BAR``
    in every seed."""
    if not rhos or len(rhos) != len(boot):
        raise ValueError(f"rankings_lesson: {len(rhos)} correlations and {len(boot)} "
                         "bootstraps: pass one of each per seed, at least one seed")
    lows = [float(_resamples("rankings_lesson", f"boot[{i}]", b).quantile(1 - RANK_LEVEL))
            for i, b in enumerate(boot)]
    power = _power(len(rhos), n_pairs)
    told = (f"Spearman's rank correlation is {listed(rhos)}, and its one-sided "
            f"{RANK_LEVEL:.0%} lower bound over the choice of pairs (a percentile of "
            f"{len(boot[0]):,} bootstrap resamples) {listed(lows)}")
    return lesson("the patching and attention rankings agree", min(lows) - RANK_BAR, "rho",
                  f"The two rankings of the heads agree in every seed: {told}, above "
                  f"{RANK_BAR} in each, on {power}.",
                  f"Here the two rankings of the heads agree less than the bar asks: "
                  f"{told}, at least one at or below {RANK_BAR}, on {power}. On a few "
                  "heads and one small batch of pairs the ranks of the weak heads move "
                  "with small changes.")


def shares_lesson(sums: list[float]) -> Lesson:
    if not sums:
        raise ValueError("shares_lesson: sums is empty: pass each seed's sum of its "
                         "single-head shares, at least one")
    spread = listed(sums)
    return lesson("the single-head shares sum above one", min(sums) - 1.0, "share",
                  f"The single-head shares add up to {spread}: more than the whole gap in "
                  "every seed.",
                  f"The single-head shares add up to {spread}: not above one in every seed "
                  "here.")


def directions_lesson(denoised: dict[int, Tensor], noised: dict[int, Tensor],
                      previous: dict[int, Tensor], boot: dict[int, tuple[Tensor, Tensor]],
                      n_pairs: int) -> Lesson:
    """Per seed, the head that noising ranks first, what denoising it restores and its
    previous-token score (each an (L, H) tensor per seed); ``boot``, per seed, that head's
    denoising and noising shares on the same bootstrap resamples of the pairs, the same
    rows for every seed ((n,) each, ``patching.bootstrap_shares`` with one ``seed``). The
    lesson, two parts: the copy needs that head (noised, it loses more than
    ``NEEDED_BAR`` of the gap by over ``SE_BAR`` standard errors, in every seed), and it is
    not enough alone (it restores less than half of what it loses: the mean gap over the
    seeds clears zero at Student's t, one-sided 95%, with the pairs' error, which every
    seed shares, added to the seeds' spread: ``lessons.beyond_t_shared``). Where it is a
    previous-token head in every seed, the text tells how that fits both numbers."""
    if not (set(denoised) == set(noised) == set(previous) == set(boot)
            and len(denoised) > 1):
        raise ValueError(f"directions_lesson: seeds {sorted(denoised)}, {sorted(noised)}, "
                         f"{sorted(previous)} and {sorted(boot)} differ or are fewer than "
                         "two: pass one entry per seed to each")
    seeds = list(denoised)
    for s in seeds:
        for way, b in zip(("denoised", "noised"), boot[s]):
            _resamples("directions_lesson", f"boot[{s}] {way}", b)
    if len({len(b) for s in seeds for b in boot[s]}) > 1:
        raise ValueError("directions_lesson: the bootstraps differ in length: draw them "
                         "with one n and one seed for every model, so that they resample "
                         "the same rows")
    H = denoised[seeds[0]].shape[1]
    top = {s: int(noised[s].flatten().argmax()) for s in seeds}
    lost = [float(noised[s].flatten()[top[s]]) for s in seeds]
    restored = [float(denoised[s].flatten()[top[s]]) for s in seeds]
    prev = [float(previous[s].flatten()[top[s]]) for s in seeds]
    se_d, se_n = ([float(boot[s][k].std()) for s in seeds] for k in (0, 1))
    gap_boot = [n / 2 - d for d, n in (boot[s] for s in seeds)]  # (n,) each, same rows
    se_gap = [float(g.std()) for g in gap_boot]
    shared = float(sum(gap_boot).div(len(seeds)).std())  # the seeds' mean, resampled
    gaps = [n / 2 - d for n, d in zip(lost, restored)]
    mean, se_seeds, se, df, t, short = beyond_t_shared([n / 2 for n in lost], restored,
                                                       shared)
    needed = min(n - SE_BAR * e for n, e in zip(lost, se_n)) - NEEDED_BAR
    heads = sorted({head_name(top[s], H) for s in seeds})
    named = (f"{heads[0]} first in every seed" if len(heads) == 1 else
             "first " + ", ".join(f"{head_name(top[s], H)} in seed {s}" for s in seeds))
    k = len(seeds) - 1
    said = (f"Over {_power(len(seeds), n_pairs)}, noising ranks {named}: its corrupted "
            f"output loses {_pm(lost, se_n)} of the gap (seeds in order; ± one standard "
            f"error over the {n_pairs} pairs, bootstrapped), "
            + (f"more than {NEEDED_BAR} in every seed by over {SE_WORDS} standard errors. "
               if needed > 0 else
               f"not more than {NEEDED_BAR} by {SE_WORDS} standard errors in every seed. ")
            + f"Denoised alone, the same head restores {_pm(restored, se_d)}. Half of "
            f"what it loses minus what it restores: {_pm(gaps, se_gap, 3)}; their mean "
            f"{mean:.3f} ± {se_seeds:.3f} over the seeds, t = {_t(mean, se_seeds)} "
            f"against the one-sided {T_LEVEL:.0%} quantile {t_quantile(T_LEVEL, k):.2f} of "
            f"Student's t with {k} degrees of freedom. The seeds share the {n_pairs} "
            "pairs, so the pairs' error is common to them and their spread does not show "
            f"it; the bootstrap gives it, ± {shared:.3f} for the mean. With both errors "
            f"(± {se:.3f}, {df} degrees of freedom by Welch and Satterthwaite's rule), "
            f"t = {_t(mean, se)} against {t:.2f}")
    kind = (f" It is a previous-token head: {listed(prev)} of its attention goes to the "
            "position just before." if min(prev) > PREVIOUS_BAR else
            f" Its previous-token scores are {listed(prev)}: not a previous-token head in "
            f"every seed (the bar: {PREVIOUS_BAR}).")
    fits = (" A previous-token head fits both numbers, in a story this chapter does not "
            "test (patching the head into the copying heads' keys alone would). At each "
            "character of the prompt's line it writes which character came before, and "
            "the copying heads find the character to copy by that (Chapter 8's induction "
            "mechanism). Noised, in the clean run, it tells them the other line's "
            "characters: they lose their place, and much of the copy goes. Denoised "
            "alone, in the corrupted run, it gives them the clean line's places while the "
            "characters they read there are still the other line's: they look in the "
            "right places and find the wrong characters.")
    found = ("the copy needs it" if needed > 0 else "it is not clearly needed")
    found += (", and its clean output, restoring less than half as much, does not carry "
              "the line by itself" if short > 0 else
              ", and it does not restore clearly less than half of what it loses")
    return lesson(
        "the head the copy needs most is not enough alone", min(needed, short), "share",
        said + f": {found}." + kind + (fits if min(prev) > PREVIOUS_BAR else ""),
        said + f": {found}, so on this machine the two directions do not clearly single "
        "out a head that is needed but not enough." + kind)


def _t(mean: float, se: float) -> str:
    return "∞" if se == 0 else f"{mean / se:.1f}"


def joint_text(single: Tensor, pair: list[tuple[int, int]], joint: dict[str, float],
               boot: Tensor) -> str:
    """Shares patched together (denoising, one seed): the two heads of ``pair`` against the
    sum of their single shares (``single``, (L, H)), then layer 0's heads, the later layers'
    and all (``joint``: ``"pair"``, ``"layer 0"``, ``"later"``, ``"all"``). ``boot`` (n, 5):
    the bootstrap resamples of the pair's two heads, the pair, layer 0 and the later layers
    (``patching.bootstrap_shares``); a difference within two standard errors is not told,
    nor one whose resamples do not vary (a standard error under ``NO_SPREAD``: no error
    estimate)."""
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
    if not diff_se > NO_SPREAD:
        text += (": the resamples do not vary, so there is no error estimate and these "
                 "pairs tell neither overlap nor need. ")
    elif abs(diff) <= SE_BAR * diff_se:
        text += (f": within {SE_WORDS} standard errors of it, so these pairs tell neither "
                 "overlap nor need. ")
    elif diff < 0:
        text += (f": over {SE_WORDS} standard errors, so they overlap, each restoring "
                 "part of what the other does. ")
    else:
        text += f": over {SE_WORDS} standard errors, so each needs the other. "
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
                 f"much. That layer 0 alone restores only {two(first_layer)} is consistent "
                 "with the later heads also reading the prompt's own tokens, the other "
                 "line's in the corrupted run, which no head's output brings back: an AND "
                 "between layer 0's output and the clean line's characters rather than "
                 "between the two groups of heads. This chapter does not test that "
                 "reading.")
    else:
        text += "."
    text += f" All {single.numel()} heads restore {two(every)}"
    text += (", as they must: the answer's characters are the same in both runs, so with "
             "every head's output clean the answer's positions are computed exactly as in "
             "the clean run. That share tests the code, not the model."
             if abs(every - 1) < 1e-3 else ".")
    return text


def timing_text(seconds: float, n_models: int, n_runs: int) -> str:
    """How long the patching and the attention scores took for each model."""
    if isinstance(seconds, bool) or not isinstance(seconds, numbers.Real) or \
            not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"timing_text: seconds={seconds!r} must be a finite number >= 0: "
                         "pass the CPU seconds measured (clock() - start)")
    for name, count in (("n_models", n_models), ("n_runs", n_runs)):
        if isinstance(count, bool) or not isinstance(count, numbers.Integral) or count < 1:
            raise ValueError(f"timing_text: {name}={count!r} must be a whole number >= 1: "
                             "pass how many models, and how many patched runs each")
    return (f"The patching in both directions and the attention scores took "
            f"{seconds:.1f} s of CPU time for each of the {n_models} models ({n_runs} "
            "patched runs each).")


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


def summary_text(lens: Lesson, ablation: Lesson, worse: bool, rankings: Lesson,
                 shares: Lesson, directions: Lesson, n_seeds: int) -> str:
    """The Summary's points on the measurements, each clause from its lesson's verdict
    (``worse``: whether resampling cost a head of the first seed more than removing it)."""
    for name, value in (("lens", lens), ("ablation", ablation), ("rankings", rankings),
                        ("shares", shares), ("directions", directions)):
        if not isinstance(value, Lesson):
            raise ValueError(f"summary_text: {name} = {value!r:.60} must be the Lesson its "
                             "*_lesson function returned")
    points = [
        "The logit lens reads out each block's residual stream: "
        + ("the share of the line's characters it ranks first rose with depth where the "
           "line was in the prompt to copy, and not where the other line was (a control "
           "in which the model copies that line instead). " if lens.holds else
           "here its rise with depth was not larger with the line to copy than with the "
           "other line in every seed. ")
        + "Direct logit attribution splits a logit into what each head and MLP adds, once "
        "the final LayerNorm's scale is frozen.",
        ("Zeroing a head removes what it writes on every input, the opening too, and the "
         "opening, the same text in every row, paid for it in every run. A mean keeps what "
         "the inputs it averages have in common, so it spares the opening only as far as "
         "its positions line up with the opening's: the mean over all positions spared "
         "less than half of it, a mean by role spares it nearly by construction, and "
         "resampling from the corrupted run hardly touched it." if ablation.holds else
         "Zeroing a head removes what it writes on every input; here the three ablations "
         "did not cost the opening in the order section 13.4 describes in every seed.")
        + (" Resampling writes the other line's information rather than none, and cost "
           "some heads more on the line than zeroing or the mean, beyond the pairs' error."
           if worse else
           " Resampling writes the other line's information rather than none; here it "
           "cost no head clearly more on the line than removing it."),
        "Activation patching runs both ways. Denoising (clean into corrupted) finds what "
        "suffices to carry the difference, noising (corrupted into clean, resample "
        "ablation) what the answer needs; "
        + (f"in the {n_seeds} runs, the head noising ranks first is needed by the copy and "
           "not enough alone, with the pairs' error counted." if directions.holds else
           "here the two directions did not clearly single out a head that the copy needs "
           "but that is not enough alone."),
        "In the assistant, the rankings of the heads by denoising and by induction score "
        + ("agree, beyond the error over the pairs" if rankings.holds else
           "agree less than the bar asks in at least one seed")
        + ("; the copy is shared by several heads across layers, whose single shares "
           "overlap." if shares.holds else
           "; the single shares did not add up to more than the whole in every seed."),
    ]
    return "\n".join(f"- {point}" for point in points)
