"""Every chapter — the lessons a run must show, judged where the reader runs it.

A lesson is a claim about what training produced ("LayerNorm lowers the loss at ten times the
learning rate", "the best validation loss is at most 1.80"), with the margin by which this run
keeps it. The numbers differ from machine to machine (PyTorch's CPU kernels, MKL, the thread
count and a GPU each sum in their own order), so a chapter never raises on a lesson: ``text``
is the sentence the reader sees, and it says so, and why, when the lesson does not hold here.

``verdicts()`` prints one line per lesson, without numbers, in a hidden cell that nbval compares
with the committed run: the tests fail when a lesson stops holding, and no reader meets a
traceback. With ``GPT_FROM_SCRATCH_LESSONS=file.jsonl`` every lesson is also appended to that
file with its margin, so that ``scripts/arithmetic_spread.py`` can measure the margins under
other arithmetic.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import random
import statistics
from dataclasses import asdict, dataclass

SE_BAR = 2.0  # a paired difference "shows" when it is more than two standard errors from 0


@dataclass
class Lesson:
    name: str       # what is claimed, short and stable: it is the compared verdict line
    margin: float   # how far inside its bar this run is, in ``unit`` (<= 0: it does not hold)
    unit: str       # "nats", "points", "standard errors", ...
    holds_text: str  # the sentence when it holds
    fails_text: str  # the sentence when it does not: what was seen, and why that can happen

    @property
    def holds(self) -> bool:
        return self.margin > 0

    @property
    def text(self) -> str:
        return self.holds_text if self.holds else self.fails_text


_LESSONS: dict[str, Lesson] = {}  # this kernel's lessons, in the order the chapter judged them


def lesson(name: str, margin: float, unit: str, holds: str, fails: str) -> Lesson:
    """Judge one lesson: keep it for ``verdicts()`` and return it (its ``text`` for the prose).

    ``margin`` is how far the run is inside the bar (bar minus value for an upper bar, value minus
    bar for a lower one), positive when the lesson holds.
    """
    if not isinstance(margin, numbers.Real) or math.isnan(margin):
        what = "NaN" if isinstance(margin, numbers.Real) else f"a {type(margin).__name__}"
        raise ValueError(f"lesson {name!r}: margin {margin!r} must be a number, not {what}"
                         "; compute it as the distance from the bar, positive when it "
                         "holds (a tensor's: margin.item())")
    found = Lesson(name, float(margin), unit, holds, fails)
    _LESSONS[name] = found
    path = os.environ.get("GPT_FROM_SCRATCH_LESSONS")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(dict(asdict(found), holds=found.holds)) + "\n")
    return found


def verdicts() -> str:
    """One line per lesson judged in this kernel, with no number in it: what nbval compares."""
    if not _LESSONS:
        return "no lesson judged in this run"
    return "\n".join(f"{'holds' if x.holds else 'DOES NOT HOLD'}: {x.name}"
                     for x in _LESSONS.values())


def paired_difference(a, b) -> tuple[float, float]:
    """Mean and standard error of ``a[i] - b[i]`` over paired runs (the same seed on both sides).

    Pairing removes what the two runs share (the batches, the initial weights of shared parts),
    so a small effect shows with few seeds where unpaired ranges overlap.
    """
    a, b = _values("paired runs", "a", a), _values("paired runs", "b", b)
    if len(a) != len(b) or len(a) < 2:
        raise ValueError(f"paired runs need two lists of equal length >= 2, got {len(a)} and "
                         f"{len(b)}; pass one value per seed on each side")
    if not all(map(math.isfinite, a + b)):
        raise ValueError(f"paired runs must be finite numbers, got {a} and {b}: a run that "
                         "diverged has no loss to compare; leave its seed out on both "
                         "sides")
    diffs = [x - y for x, y in zip(a, b)]
    return statistics.fmean(diffs), statistics.stdev(diffs) / math.sqrt(len(diffs))


def _values(judge: str, name: str, values) -> list[float]:
    """``values`` as a list of floats, refusing a string (whose characters would be read as
    digits) and anything that is not a sequence of real numbers."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise ValueError(f"{judge}: {name} = {values!r} must be a list of numbers, one per "
                         "run (not a string, not one number)")
    out = []
    for i, v in enumerate(values):
        try:
            if isinstance(v, (str, bytes)):
                raise TypeError
            out.append(float(v))
        except (TypeError, ValueError):
            raise ValueError(f"{judge}: {name}[{i}] = {v!r} must be a number") from None
    return out


def _check_level(judge: str, level) -> None:
    if isinstance(level, bool) or not isinstance(level, numbers.Real) or not 0.5 < level < 1:
        raise ValueError(f"{judge}: level={level!r} must be a probability between 0.5 and 1 "
                         "(one-sided), e.g. 0.95")


def t_quantile(level: float, df: int) -> float:
    """The ``level`` quantile of Student's t with ``df`` degrees of freedom (``level`` in
    (0.5, 1)), e.g. 2.920 for 0.95 and 2: found by bisection on t's distribution function,
    which for a whole ``df`` is a finite sum (Abramowitz and Stegun, 26.7.3 and 26.7.4)."""
    if isinstance(df, bool) or not isinstance(df, numbers.Integral) or df < 1:
        raise ValueError(f"t_quantile: df={df!r} must be a whole number >= 1, the number of "
                         "paired runs less one")
    _check_level("t_quantile", level)

    def below(t: float) -> float:  # P(T <= t) for t >= 0
        theta = math.atan(t / math.sqrt(df))
        c2, term = math.cos(theta) ** 2, 1.0
        if df % 2:  # odd: 2/pi (theta + sin cos (1 + 2/3 cos^2 + ...)), df - 3 terms past 1
            total = 1.0 if df > 1 else 0.0
            for k in range(3, df, 2):
                term *= (k - 1) / k * c2
                total += term
            inside = 2 / math.pi * (theta + math.sin(theta) * math.cos(theta) * total)
        else:  # even: sin (1 + 1/2 cos^2 + 1 3/(2 4) cos^4 + ...)
            total = 1.0
            for k in range(2, df, 2):
                term *= (k - 1) / k * c2
                total += term
            inside = math.sin(theta) * total
        return (1 + inside) / 2

    low, high = 0.0, 1.0
    while below(high) < level:
        high *= 2
    for _ in range(200):
        mid = (low + high) / 2
        low, high = (mid, high) if below(mid) < level else (low, mid)
    return (low + high) / 2


T_LEVEL = 0.95  # one-sided: a paired difference "shows" when its t quantile clears zero


def beyond_t(a, b, level: float = T_LEVEL) -> tuple[float, float, float, float]:
    """Mean and standard error of ``a - b`` over paired seeds, the one-sided ``level`` quantile
    ``t`` of Student's t with one degree of freedom less than the seeds, and the margin
    ``mean - t se``: positive when the difference clears zero at that level."""
    a, b = _values("beyond_t", "a", a), _values("beyond_t", "b", b)
    mean, se = paired_difference(a, b)
    t = t_quantile(level, len(a) - 1)
    return mean, se, t, mean - t * se


SHARED_DF = 100  # beyond_t_shared's most degrees of freedom (95% quantile 1.66, not 1.64)


def beyond_t_shared(a, b, shared_se: float, level: float = T_LEVEL
                    ) -> tuple[float, float, float, int, float, float]:
    """``beyond_t`` with an error that every seed shares: ``shared_se``, the standard error
    of the mean of ``a - b`` over the prompts that every seed was measured on (bootstrapped
    over the prompts, the same resamples for every seed), which the spread over the seeds
    cannot show. The two errors add in quadrature, ``se = sqrt(se_seeds² + shared_se²)``
    (conservative: the seeds' spread holds part of the prompts' error already), with the
    degrees of freedom of Welch and Satterthwaite's rule, the shared part's taken as
    infinite, rounded down: ``df = se⁴ / (se_seeds⁴ / (k - 1))`` for ``k`` seeds, at
    least ``k - 1`` and at most ``SHARED_DF``. Returns the mean, ``se_seeds``, ``se``,
    ``df``, the one-sided ``level`` quantile ``t`` of Student's t with ``df`` degrees of
    freedom and the margin ``mean - t se``."""
    if (isinstance(shared_se, bool) or not isinstance(shared_se, numbers.Real)
            or not math.isfinite(shared_se) or shared_se < 0):
        raise ValueError(f"beyond_t_shared: shared_se={shared_se!r} must be a finite "
                         "number >= 0, the standard error the seeds share (0 if none): "
                         "pass the bootstrap's standard deviation of the seeds' mean")
    a, b = _values("beyond_t_shared", "a", a), _values("beyond_t_shared", "b", b)
    mean, se_seeds = paired_difference(a, b)
    se = math.sqrt(se_seeds ** 2 + shared_se ** 2)
    k = len(a)
    df = SHARED_DF if se_seeds == 0 else min(
        SHARED_DF, max(k - 1, math.floor(se ** 4 / (se_seeds ** 4 / (k - 1)))))
    t = t_quantile(level, df)
    return mean, se_seeds, se, df, t, mean - t * se


def paired_bootstrap(diffs, resamples: int = 2000, level: float = T_LEVEL,
                     seed: int = 0) -> float:
    """The lower one-sided ``level`` bound of the mean of ``diffs`` (one difference per prompt,
    both sides measured on that prompt) by the percentile bootstrap: the prompts resampled with
    replacement ``resamples`` times by a seeded ``random.Random``, the same bound on every
    machine for the same differences."""
    _check_level("paired_bootstrap", level)
    least = max(100, math.ceil(1 / (1 - level) - 1e-9))  # one resample at least below it
    if (isinstance(resamples, bool) or not isinstance(resamples, numbers.Integral)
            or resamples < least):
        raise ValueError(f"paired_bootstrap: resamples={resamples!r} must be a whole number >= "
                         f"{least} (100, and 1 / (1 - level) at level={level}), so that "
                         "the bound's quantile falls between resamples; e.g. 2000")
    values = _values("paired_bootstrap", "diffs", diffs)
    if len(values) < 2 or not all(map(math.isfinite, values)):
        raise ValueError(f"paired_bootstrap: {len(values)} differences, "
                         f"{sum(not math.isfinite(v) for v in values)} not finite: pass one "
                         "finite difference per prompt, at least two")
    rng, n = random.Random(seed), len(values)
    means = sorted(sum(rng.choices(values, k=n)) / n for _ in range(resamples))
    return means[int((1 - level) * resamples)]


def standard_errors(mean: float, se: float) -> float:
    """How many standard errors ``mean`` is from 0 (infinite when every pair moved alike)."""
    if se == 0:
        return math.copysign(math.inf, mean) if mean else 0.0
    return mean / se


def beyond_bar(a, b) -> tuple[float, float, float]:
    """Mean and standard error of ``a - b`` over paired seeds, and the margin: how far the mean
    is above ``SE_BAR`` standard errors (negative when it is not)."""
    mean, se = paired_difference(a, b)
    return mean, se, mean - SE_BAR * se


def points(share: float) -> str:
    """A share as percentage points, one decimal: 0.1234 -> "12.3"."""
    return f"{100 * share:.1f}"


def seed_count(judge: str, seeds, **runs) -> int:
    """The number of seeds, after checking that there are at least two and that each list of
    ``runs`` holds one value per seed."""
    seeds = list(seeds)
    if len(seeds) < 2:
        raise ValueError(f"{judge}: seeds={seeds!r}, but a lesson is judged over at least two "
                         "seeds (a standard error needs two runs): pass the chapter's SEEDS and "
                         "one value per seed")
    for name, values in runs.items():
        if len(values) != len(seeds):
            raise ValueError(f"{judge}: {name} holds {len(values)} value(s) for the "
                             f"{len(seeds)} seeds {seeds}: pass one value per seed, in the "
                             "order of seeds")
    return len(seeds)


def check_share(judge: str, name: str, value) -> float:
    """``value``, checked to be a share: a real number from 0 to 1."""
    if (isinstance(value, bool) or not isinstance(value, numbers.Real)
            or not 0 <= value <= 1):
        raise ValueError(f"{judge}: {name} = {value!r} must be a share from 0 to 1 (a fraction "
                         "of the prompts, not a percent, and not NaN): pass the rate as "
                         "measured")
    return float(value)
