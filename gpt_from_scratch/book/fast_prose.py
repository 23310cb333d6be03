"""Chapter 16 — the lessons and sentences, written from what the chapter measured.

Six lessons, each with its margin. Exact ones, as distances from a bar in decades: tiled
attention equals PyTorch's attention; speculative sampling keeps the target's distribution
(greedy: its tokens; sampled: Pearson's chi-square test); the paged cache gives Chapter 7's
tokens. Measured ones, as counts that no busy machine can flip: tiled attention's working
memory does not grow with T; the draft saves target forward passes; int8 weights cost little
in bits per byte. Seconds are reported, never judged. The chi-square helpers (p-value,
quantile and power against a named wrong law) use ``torch.special`` only.
"""

from __future__ import annotations

import math

import torch

from .lessons import Lesson, lesson

F64_BAR = 1e-12  # tiled against SDPA in float64
MEMORY_BAR = 10  # the T x T scores' peak over the tiled peak, at the largest T
ALPHA = 0.01  # the chi-square test's level
TOKENS_BAR = 1.5  # tokens per target forward at the best γ (plain decoding: 1)
INT8_BAR = 0.01  # bits per byte int8 may add to float32's
FLOOR = 1e-18  # a difference of exactly zero, read as this to take its logarithm


def _f64(x: float) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.float64)


def chi_square(observed: torch.Tensor, expected: torch.Tensor) -> tuple[float, int, float]:
    """Pearson's goodness-of-fit test (Chapter 16): the statistic Σ (O - E)^2 / E, its
    degrees of freedom k - 1 and the p-value, chi-square's survival function
    Q(df / 2, stat / 2), as ``scipy.stats.chisquare`` computes it."""
    observed, expected = observed.double(), expected.double()
    stat = ((observed - expected) ** 2 / expected).sum()
    df = len(observed) - 1
    p = torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64), stat / 2)
    return stat.item(), df, p.item()


def chi2_quantile(level: float, df: int) -> float:
    """The ``level`` quantile of chi-square with ``df`` degrees of freedom, by bisection on
    its distribution function P(df / 2, x / 2) (Chapter 16)."""
    half = torch.tensor(df / 2, dtype=torch.float64)
    low, high = 0.0, float(df)
    while torch.special.gammainc(half, _f64(high / 2)).item() < level:
        high *= 2
    for _ in range(200):
        mid = (low + high) / 2
        below = torch.special.gammainc(half, _f64(mid / 2)).item() < level
        low, high = (mid, high) if below else (low, mid)
    return (low + high) / 2


def chi_square_power(n: int, p: torch.Tensor, wrong: torch.Tensor, alpha: float) -> float:
    """The chance that Pearson's test of ``n`` draws at level ``alpha`` rejects p when the
    draws follow ``wrong`` (Chapter 16): one minus the non-central chi-square's distribution
    function at the critical value, with non-centrality λ = n Σ (wrong - p)^2 / p, summed as
    its Poisson mixture of central laws, Σ_j e^(-λ/2) (λ/2)^j / j! P(df/2 + j, x/2)."""
    p, wrong = p.double(), wrong.double()
    lam = n * ((wrong - p) ** 2 / p).sum().item()
    df = len(p) - 1
    x = chi2_quantile(1 - alpha, df)
    j = torch.arange(0, int(lam + 40 * math.sqrt(lam + 1) + 200), dtype=torch.float64)
    log_weights = -lam / 2 + j * math.log(lam / 2) - torch.lgamma(j + 1) if lam > 0 else \
        torch.where(j == 0, 0.0, -math.inf)
    central = torch.special.gammainc(df / 2 + j, _f64(x / 2))  # P(df/2 + j, x/2)
    miss = (log_weights.exp() * central).sum()
    return 1 - miss.item()


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


def memory_lesson(rows: list[tuple[int, int, int]]) -> Lesson:
    """``rows``: (T, naive peak bytes, tiled peak bytes), T increasing."""
    (T0, naive0, tiled0), (T1, naive1, tiled1) = rows[0], rows[-1]
    ratio = naive1 / tiled1
    said = (f"From T = {T0:,} to T = {T1:,}, {T1 // T0} times longer, the written-out "
            f"attention's peak grew {naive1 / naive0:.0f}-fold, to {naive1 / 2**20:.1f} "
            f"MiB, and the tiled one's {tiled1 / tiled0:.2f}-fold, to "
            f"{tiled1 / 2**10:.0f} KiB: at T = {T1:,} the scores need {ratio:.0f} times "
            "the tiled working set. ")
    why = ("The first holds T² scores and their softmax; the second one block of scores, "
           "whatever T is, beside its output of T rows. The count is the allocator's, the "
           "same on every CPU.")
    return lesson("tiled attention keeps no T × T scores",
                  math.log10(ratio / MEMORY_BAR), "decades", said + why,
                  said + f"That is less than the factor of {MEMORY_BAR} the chapter "
                  "expects: the tiled peak holds something of size T², or the profiler "
                  "missed the scores. " + why)


def speculative_lesson(mismatches: int, n_tokens: int, p_value: float, draws: int,
                       power: float, wrong: str) -> Lesson:
    """Greedy: ``mismatches`` of ``n_tokens`` against the target's own; sampled: the
    chi-square ``p_value`` of ``draws`` first tokens, with ``power`` against ``wrong``."""
    said = (f"Greedy, the speculative tokens differ from the target's own in {mismatches} "
            f"of {n_tokens:,}. Sampled, the first token of {draws:,} accept/reject steps "
            f"passes Pearson's chi-square test against the target's distribution with a "
            f"p-value of {p_value:.2f}, {_decades(p_value, ALPHA):.1f} decades above "
            f"the level {ALPHA:g}; had the step drawn {wrong}, the test would have "
            f"rejected it with probability {power:.6f}. ")
    why = ("Accepting with probability min(1, p/q) and drawing from the residual after a "
           "rejection give each token with probability min(p, q) + max(0, p - q) = p.")
    margin = _decades(p_value, ALPHA) if mismatches == 0 else -1.0
    fails = ("A greedy token differs: two logits of the target were within rounding, and "
             "the verification pass of several tokens ordered them otherwise than the "
             "single-token pass. " if mismatches else
             f"The p-value is under {ALPHA:g}, which a right rule gives one time in "
             f"{1 / ALPHA:.0f}: rerun with another seed before suspecting the rule. ")
    return lesson("speculative decoding keeps the target's output", margin, "decades",
                  said + why, said + fails + why)


def tokens_lesson(rows: dict[int, tuple[float, float]]) -> Lesson:
    """``rows``: γ -> (acceptance rate, tokens per target forward), greedy."""
    best = max(rows, key=lambda g: rows[g][1])
    rate, tokens = rows[best]
    said = (f"With γ = {best} the draft's guesses were kept {rate:.0%} of the time and "
            f"each forward pass of the target gave {tokens:.2f} tokens, against 1 without "
            "a draft. ")
    why = ("These are counts, the same on every machine: whether they become seconds "
           "depends on what a forward pass costs, below.")
    return lesson("the draft saves forward passes of the target", tokens - TOKENS_BAR,
                  "tokens per target forward", said + why,
                  said + f"That is under the {TOKENS_BAR} the chapter expects: the draft "
                  "guesses the target's next characters less often than it did when the "
                  "chapter was written. " + why)


def quantize_lesson(bpb: dict[str, float]) -> Lesson:
    """``bpb``: name -> bits per byte on the validation text ("fp32", "int8" among
    them)."""
    cost = bpb["int8"] - bpb["fp32"]
    said = (f"On the validation text the float32 model scores {bpb['fp32']:.4f} bits per "
            f"byte and the int8 one {bpb['int8']:.4f}: {cost:+.4f}. ")
    if "int4" in bpb:
        said += (f"Int4 in groups costs {bpb['int4'] - bpb['fp32']:+.4f} "
                 f"({bpb['int4']:.4f}). ")
    why = (f"The bar is {INT8_BAR} bits per byte. Rounding to int8 moves each weight by at "
           "most half a step, max|row| / 254, and the errors of a row's products largely "
           "cancel.")
    return lesson("int8 weights cost almost nothing in bits per byte", INT8_BAR - cost,
                  "bits per byte", said + why,
                  said + "Int8 rounding changes each weight by at most half a step of "
                  "max|row| / 127; a cost this large means a row with an outlier, whose "
                  "step is large for every other weight of the row. " + why)


def paged_lesson(mismatches: int, n_tokens: int, waste: dict[str, int], needed: int
                 ) -> Lesson:
    """``mismatches`` of ``n_tokens`` against ``generate``; ``waste``: layout -> slots."""
    said = (f"The paged cache's tokens differ from those of Chapter 7's cache, prompt by "
            f"prompt, in {mismatches} of {n_tokens:,}. For {needed:,} positions held, "
            f"the padded batch wastes {waste['padded']:,} slots, the static cache "
            f"{waste['static']:,}, the pages {waste['paged']:,}. ")
    why = ("The model reads the same keys and values, gathered through a block table "
           "instead of sliced from one tensor.")
    return lesson("a paged cache gives the contiguous cache's tokens",
                  1.0 if mismatches == 0 else -float(mismatches), "tokens (1: none differ)",
                  said + why, said + "A token differs: gathering must return the keys in "
                  "order, and a block must never be handed to two sequences. " + why)


def speedup_text(c_draft: float, verify: dict[int, float], rows: dict[int, tuple],
                 seconds: dict[int, list[float]], size: float) -> str:
    """``c_draft``: a draft forward's time over a target forward's (one token); ``verify``:
    γ -> the target's forward of γ + 1 tokens over one of 1; ``rows``: γ -> (acceptance,
    tokens per target forward); ``seconds``: γ -> the repeats' times (γ = 0: plain);
    ``size``: the draft's parameters over the target's."""
    base = sorted(seconds[0])[len(seconds[0]) // 2]
    parts, short = [], 0
    for gamma in sorted(g for g in rows if g):
        times = sorted(seconds[gamma])
        median = times[len(times) // 2]
        model = rows[gamma][1] / (gamma * c_draft + verify[gamma])
        short += base / median < model
        parts.append(f"γ = {gamma}: {base / median:.2f} measured "
                     f"({base / times[-1]:.2f} to {base / times[0]:.2f}), {model:.2f} "
                     "by the model")
    return ("Speed-up over plain decoding, the median of the repeats (the range of "
            "them) beside the cost model's tokens per round over a round's cost: "
            + "; ".join(parts) + ". "
            + (f"At {short} of the {len(parts)} γ the measured speed-up falls short of the "
               "model, which leaves out what a round costs besides the two models' passes "
               "(the accept step, cropping the caches, Python). " if short else "")
            + f"Here a draft forward costs {c_draft:.2f} of the target's one-token pass, "
            f"and the target's pass over γ + 1 tokens {min(verify.values()):.2f} to "
            f"{max(verify.values()):.2f} of it. On a CPU a forward pass of these small "
            f"models is largely fixed cost (Python and each operation's overhead): a draft "
            f"with {size:.0%} of the target's parameters takes {c_draft:.0%} of its time. "
            "Speculation pays when the tokens a round gains exceed what the round costs, "
            "γ c + v in units of one target pass (c the draft's pass, v the check's): for "
            "a large target on a GPU, whose passes are slow for their memory traffic, v is "
            "near 1 and c small.")
