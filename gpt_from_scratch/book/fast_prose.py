"""Chapter 16 — the lessons and sentences, written from what the chapter measured.

Seven lessons, each with its margin. Exact ones, as distances from a bar in decades: tiled
attention equals PyTorch's attention; greedy speculative decoding gives the target's
tokens; sampled, its tokens pass Pearson's chi-square test against the target's law, with
the power to catch the usual slips; the paged cache gives Chapter 7's tokens. Measured
ones, as counts that no busy machine can flip: tiled attention's working memory beyond its
output does not grow with T; the draft saves target forward passes; int8 weights' mean KL
from float32's next-character law is under a bar, and half or less of int4's and of an
int8 that truncates. Seconds are reported, never judged. The
chi-square test and its power are in ``pearson``.
"""

from __future__ import annotations

import math

from .lessons import Lesson, lesson

F64_BAR = 1e-12  # tiled against SDPA in float64
GROWTH_BAR = 2.0  # the tiled working set beyond its output, largest T over smallest
ALPHA = 0.01  # the chance a right rule fails the sampled lesson, its tests together
POWER_BAR = 0.99  # the least power the test must have against each slip
TOKENS_BAR = 1.5  # tokens per target forward at the best γ (plain decoding: 1)
KL_BAR = 1e-3  # nats a character: int8's mean KL from float32's next-character law, at most
# (1.4e-3 bits); no bar between int8 and the slips (truncation stays under it): the ratio is
SLIP_RATIO = 2.0  # truncation's and int4's KL over int8's, at the least. Truncating is a
# shrink of every weight toward zero by exactly half a step plus an independent error
# distributed like rounding's (uniform over +-s/2): to second order its KL is the shrink's
# plus about rounding's, 4 times rounding's were every error to act alone (mean squares
# s^2/3 against s^2/12), more or less as the shrink's direction is stiffer or softer than
# the average one (12 times on the chapter's model); the bar is half of 4
KL_RESOLUTION = 1e-11  # nats: thirty times float32's forward's KL from float64's (3e-13)
FLOOR = 1e-18  # a difference of exactly zero, read as this to take its logarithm


def _decades(bar: float, value: float) -> float:
    return math.log10(bar / max(value, FLOOR))


def tiled_lesson(f64: float, f32: float, mistake: float) -> Lesson:
    """``f64``, ``f32``: the largest difference of tiled attention from SDPA in each dtype;
    ``mistake``: the same for the update that forgets to rescale ``acc``."""
    below, above = _decades(F64_BAR, f64), -_decades(F64_BAR, mistake)
    said = (f"In float64 tiled attention differs from `F.scaled_dot_product_attention` "
            f"by at most {f64:.1e}, in float32 by {f32:.1e}; an update that forgets to "
            f"rescale `acc` when the maximum grows is off by {mistake:.1e}. The float64 "
            f"bar, {F64_BAR:g}, leaves {below:.1f} decades between the rounding and itself "
            f"and {above:.1f} between itself and the mistake. ")
    why = ("The blocks change the order of the sums, not the function: the same softmax, "
           "computed one block of keys at a time.")
    return lesson("tiled attention equals PyTorch's attention", min(below, above),
                  "decades", said + why,
                  said + "The bar does not separate rounding from a mistake here: the "
                  "update, or the masking of the blocks that cross the diagonal, is wrong.")


def memory_lesson(rows: list[tuple[int, int, int, int]]) -> Lesson:
    """``rows``: (T, naive peak, tiled peak, tiled peak less its output and lse), in
    bytes, T increasing."""
    (T0, naive0, _, beyond0), (T1, naive1, tiled1, beyond1) = rows[0], rows[-1]
    growth = beyond1 / beyond0
    said = (f"From T = {T0:,} to T = {T1:,}, {T1 // T0} times longer, the written-out "
            f"attention's peak grew {naive1 / naive0:.0f}-fold, to {naive1 / 2**20:.1f} "
            f"MiB; the tiled one's working set beyond its output and log-sum-exp grew "
            f"{growth:.2f}-fold ({beyond1 / 2**10:.0f} KiB at T = {T1:,}), against a bar "
            f"of {GROWTH_BAR:g}-fold. At T = {T1:,} the written-out attention's whole "
            f"peak is {naive1 / tiled1:.0f} times the tiled one's. ")
    why = ("The first holds T² scores and their softmax; the second one block of scores, "
           "whatever T is, beside its output of T rows.")
    return lesson("tiled attention's working set does not grow with T",
                  math.log10(GROWTH_BAR / growth), "decades", said + why,
                  said + "The tiled working set grew with T: it holds something whose "
                  "size depends on T, such as a block of queries against all T keys "
                  "(tiling the queries only), or a check of the whole input at once. "
                  + why)


def greedy_lesson(mismatches: int, n_tokens: int) -> Lesson:
    """``mismatches`` of ``n_tokens`` generated tokens against the target's own."""
    said = (f"Greedy, the speculative tokens differ from the target's own in {mismatches} "
            f"of {n_tokens:,} generated tokens (each γ once: a greedy run is the same on "
            "every repeat). ")
    why = ("A guess is kept only while it is the target's arg-max, and the token after a "
           "rejection is the target's arg-max.")
    return lesson("greedy speculative decoding gives the target's tokens",
                  1.0 if mismatches == 0 else -float(mismatches), "tokens (1: none differ)",
                  said + why, said + "Two logits of the target were within rounding, and "
                  "the pass over several tokens ordered them otherwise than the "
                  "one-token pass; or the caches kept a rejected guess. " + why)


def power_text(power: float) -> str:
    """A power as the non-central approximation can state it: "> 0.999" near 1."""
    return "> 0.999" if power > 0.999 else f"{power:.3f}"


def level(n_tests: int) -> float:
    """Each of ``n_tests`` chi-square tests at ALPHA / n_tests (Bonferroni): a right rule
    fails one of them about ALPHA of the time at most, as far as Pearson's approximation
    holds, on any machine's draws (Chapter 16)."""
    return ALPHA / n_tests


def sampled_lesson(tests: dict[str, tuple[float, int, int]], power: dict[str, float],
                   top_k: int) -> Lesson:
    """``tests``: what was tested -> (chi-square p-value, draws, draws outside the target's
    top ``top_k``), each judged at ``level(len(tests))``; ``power``: a slip -> the chance
    the first test rejects it at that level."""
    each = level(len(tests))
    p_values = ", ".join(f"{name} ({draws:,} draws) {p:.2g}"
                         for name, (p, draws, _) in tests.items())
    outside = sum(o for _, _, o in tests.values())
    said = (f"Sampled, Pearson's chi-square test against the target's law gives p-values: "
            f"{p_values}; {outside} token(s) came from outside the target's top {top_k}. "
            "Had the step drawn " + " or ".join(f"{slip} (power {power_text(x)})"
                                        for slip, x in power.items())
            + f", the first test would reject it with that probability at the level "
            f"{each:g} that each of the {len(tests)} tests is judged at ({ALPHA:g} / "
            f"{len(tests)}: a right rule fails one of them about {ALPHA:.0%} of the time, "
            "at most). ")
    why = ("Accepting with probability min(1, p/q) and drawing from the residual after a "
           "rejection give each token with probability min(p, q) + max(0, p - q) = p.")
    p_margin = min(math.log10(max(p, FLOOR) / each) for p, _, _ in tests.values())
    power_margin = min(_decades(1 - POWER_BAR, 1 - x) for x in power.values())
    margin = -1.0 if outside else min(p_margin, power_margin)
    fails = []
    if outside:
        fails.append(f"A token outside the target's top {top_k} came out, which the "
                     "target never draws: the step or the filtering is wrong. ")
    if p_margin <= 0:
        fails.append(f"A p-value is under {each:g}, which a right rule gives in at most "
                     f"{ALPHA:.0%} of runs: rerun with another seed before suspecting the "
                     "rule. ")
    if power_margin <= 0:
        fails.append(f"The test's power against a slip is under {POWER_BAR}: passing it "
                     "shows little; draw more. ")
    return lesson("sampled speculative decoding follows the target's law",
                  margin, "decades", said + why, said + "".join(fails) + why)


def leviathan(alpha: float, gamma: int) -> tuple[float, float]:
    """Guesses kept independently with probability ``alpha`` (Leviathan et al. 2023): the
    expected share of the γ proposed that are kept, α (1 - α^γ) / (γ (1 - α)), and tokens
    per target pass, (1 - α^(γ + 1)) / (1 - α) (Chapter 16)."""
    return (alpha * (1 - alpha**gamma) / (gamma * (1 - alpha)),
            (1 - alpha ** (gamma + 1)) / (1 - alpha))


def tokens_lesson(rows: dict[int, tuple[float, float]]) -> Lesson:
    """``rows``: γ -> (acceptance rate, tokens per target forward), greedy."""
    best = max(rows, key=lambda g: rows[g][1])
    rate, tokens = rows[best]
    said = (f"With γ = {best} the draft's guesses were kept {rate:.0%} of the time and "
            f"each forward pass of the target gave {tokens:.2f} tokens, against 1 without "
            "a draft. ")
    why = ("These count forward passes, not seconds: whether they become seconds depends "
           "on what a pass costs.")
    return lesson("the draft saves forward passes of the target", tokens - TOKENS_BAR,
                  "tokens per target forward", said + why,
                  said + f"That is under the {TOKENS_BAR} the chapter expects: the draft "
                  "guesses the target's next characters less often than it did when the "
                  "chapter was written. " + why)


def quantize_lesson(kl: dict[str, float], bpb: dict[str, float]) -> Lesson:
    """``kl``: name -> mean KL(float32 || copy) per predicted character on the validation
    text (``evaluate.text_kl``, nats) for "int8", "int4" (in groups) and "int8 truncated"
    (round replaced by trunc: Exercise 3's slip); ``bpb``: name -> bits per byte, "fp32"
    too, said for the reader. The margin, in decades: int8's KL under ``KL_BAR``, and each
    slip's at least ``SLIP_RATIO`` times int8's (or ``KL_RESOLUTION``, if larger). The KL is
    judged, not the change of bits per byte: that change has a first-order part (the
    weights' errors against the loss's gradient) of either sign, which on one machine's
    model made int8 lower the bits per byte, by 0.00034; the KL has none and is never
    negative."""
    names = ("int8", "int4", "int8 truncated")
    for name in names:
        if not math.isfinite(kl[name]) or kl[name] < 0:
            raise ValueError(f"quantize_lesson: kl[{name!r}] = {kl[name]!r}: a KL "
                             "divergence is a finite number >= 0; pass evaluate.text_kl's")
    cost = {name: bpb[name] - bpb["fp32"] for name in names}
    slips = ("int8 truncated", "int4")
    resolved = kl["int8"] > KL_RESOLUTION
    int8 = kl["int8"] if resolved else KL_RESOLUTION
    against = "rounding's" if resolved else "the resolution"
    decades = {"int8": _decades(KL_BAR, int8)} | {
        name: math.log10(max(kl[name], FLOOR) / (SLIP_RATIO * int8)) for name in slips}
    slips_margin = min(decades[name] for name in slips)
    said = (f"On the validation text the float32 model scores {bpb['fp32']:.4f} bits per "
            f"byte; int8 changes it by {cost['int8']:+.2g}, int4 in groups by "
            f"{cost['int4']:+.2g} and an int8 that truncates instead of rounding by "
            f"{cost['int8 truncated']:+.2g}. A change of the loss can go either way, so "
            "the lesson judges how far each copy's next-character law lies from float32's: "
            f"the mean KL divergence over the same text, int8 {kl['int8']:.2g} nats a "
            f"character, int4 {kl['int4']:.2g} and truncating {kl['int8 truncated']:.2g}. ")
    if decades["int8"] > 0:
        floor = "" if resolved else " (at least: under the resolution)"
        said += (f"Int8's KL is {decades['int8']:.2f} decades under its bar, {KL_BAR:g}"
                 f"{floor}. ")
    if slips_margin > 0:
        times = {name: kl[name] / int8 for name in slips}
        said += (f"Truncating's KL is {times['int8 truncated']:.1f} times {against} and "
                 f"int4's {times['int4']:.0f} times, where the lesson asks for "
                 f"{SLIP_RATIO:g} times (margins of {decades['int8 truncated']:.2f} and "
                 f"{decades['int4']:.2f} decades). ")
    why = ("Rounding to int8 moves each weight by at most half a step, max|row| / 254; "
           "int4 by up to max|group| / 14. Truncating moves a weight by up to a whole "
           "step, always toward zero: a shrink of every weight by exactly half a step, "
           "plus an error distributed like rounding's (uniform over plus or minus half a "
           "step) and independent of the shrink. The KL grows as the square of a small "
           "change of the weights (half its squared Fisher norm), so truncating's is the "
           "shrink's plus about rounding's: four times rounding's were every error to act "
           "alone (mean squares s²/3 against s²/12), more or less as the shrink's "
           "direction is stiffer or softer than the average one.")
    fails = []
    if decades["int8"] <= 0:
        fails.append(f"Int8's KL is over its bar, {KL_BAR:g} nats: for some "
                     "layer a step of max|row| / 127 is too coarse; give it a scale per "
                     "group of the row (group_size), or leave it in float32. ")
    if slips_margin <= 0:
        fails.append(f"Int4's or the truncating int8's KL is less than {SLIP_RATIO:g} "
                     f"times {against}: rounding no longer tells itself from the slips, "
                     "and passing the bar shows little. ")
    return lesson("int8's KL from float32 is under its bar and half or less of "
                  "truncation's and int4's", min(decades.values()), "decades", said + why,
                  said + "".join(fails) + why)


def paged_lesson(mismatches: int, n_tokens: int, waste: dict[str, int], needed: int
                 ) -> Lesson:
    """``mismatches`` of ``n_tokens`` against ``generate``; ``waste``: layout -> slots."""
    said = (f"The paged cache's generated tokens differ from those of Chapter 7's cache, "
            f"prompt by prompt, in {mismatches} of {n_tokens:,}. For {needed:,} positions "
            f"held, the padded batch wastes {waste['padded']:,} slots, the static cache "
            f"{waste['static']:,}, the pages {waste['paged']:,}. ")
    why = ("The model reads the same keys and values, gathered through a block table "
           "instead of sliced from one tensor.")
    return lesson("a paged cache gives the contiguous cache's tokens",
                  1.0 if mismatches == 0 else -float(mismatches), "tokens (1: none differ)",
                  said + why, said + "A token differs: gathering must return the keys in "
                  "order, and a block must never be handed to two sequences. " + why)


def speedup_text(c_draft: float, verify: dict[int, float], rows: dict[int, tuple],
                 seconds: dict[int, list[float]], size: float, overhead: float) -> str:
    """``c_draft``: a draft forward's time over a target forward's (one token); ``verify``:
    γ -> the target's forward of γ + 1 tokens over one of 1; ``rows``: γ -> (acceptance,
    tokens per target forward); ``seconds``: γ -> the repeats' times (γ = 0: plain);
    ``size``: the draft's parameters over the target's; ``overhead``: o, what plain decoding
    spends per token beyond the target's one-token pass, in units of that pass (Ch. 16)."""
    base = sorted(seconds[0])[len(seconds[0]) // 2]
    gammas = sorted(g for g in rows if g)
    parts, ranges, gaps = [], [], []
    for gamma in gammas:
        times = sorted(seconds[gamma])
        measured = base / times[len(times) // 2]
        passes_only = rows[gamma][1] / (gamma * c_draft + verify[gamma])
        model = rows[gamma][1] * (1 + overhead) / (gamma * c_draft + verify[gamma]
                                                   + overhead)
        ranges.append((base / times[-1], base / times[0]))
        gaps.append(measured / model - 1)
        parts.append(f"γ = {gamma}: {measured:.2f} measured ({ranges[-1][0]:.2f} to "
                     f"{ranges[-1][1]:.2f}), {passes_only:.2f} by passes alone, "
                     f"{model:.2f} with o")
    over = sum(gap > 0 for gap in gaps)
    overlaps = sum(a[1] >= b[0] and b[1] >= a[0] for a, b in zip(ranges, ranges[1:]))
    return ("Speed-up over plain decoding, the median of the repeats (their range), beside "
            "a cost model: tokens per round over a round's cost, γ c + v in units of one "
            "target pass (c the draft's pass, v the check's). Counting passes alone leaves "
            "out what a round spends outside them (the accept step, cropping the caches, "
            "Python), and that pushes the model's speed-up down, not up: plain decoding "
            "pays those costs once a token, speculation once a round. Here plain decoding "
            f"spends o = {overhead:.2f} target passes a token beyond its pass; a round "
            "that pays o once gives tokens (1 + o) / (γ c + v + o): " + "; ".join(parts)
            + f". The measured speed-up exceeds the model with o at {over} of the "
            f"{len(gammas)} γ and falls short of it at {len(gammas) - over}; the two "
            f"differ by up to {max(abs(g) for g in gaps):.0%}: c and v are timed after one "
            "short context, and a round's own costs are not one plain step's. "
            + (f"The ranges of {overlaps} of the {len(gammas) - 1} pairs of neighbouring γ "
               "overlap: these repeats do not order those γ. " if overlaps else
               "No two neighbouring γ have overlapping ranges. ")
            + f"Here a draft forward costs {c_draft:.2f} of the target's one-token pass, "
            f"and the target's pass over γ + 1 tokens {min(verify.values()):.2f} to "
            f"{max(verify.values()):.2f} of it. On a CPU a forward pass of these small "
            f"models is largely fixed cost (Python and each operation's overhead): a draft "
            f"with {size:.0%} of the target's parameters takes {c_draft:.0%} of its time. "
            "Speculation pays when the tokens a round gains exceed what the round costs; "
            "with FULL_RUN on a GPU, section 16.5 prints c, v and the speed-up measured "
            "there.")


def sampled_speed_text(sampled: float, greedy: float) -> str:
    """The shares of guesses kept, sampled and greedy, and what each measures (Ch. 16)."""
    return (f"Sampled, the target kept {sampled:.0%} of the guesses; greedy, {greedy:.0%}. "
            "The two measure different things: sampled, a guess x is kept with "
            "probability min(1, p(x)/q(x)), on average the overlap Σ min(p, q) of the two "
            "laws; greedy, exactly when the two models' arg-maxes agree. Neither bounds "
            "the other.")
