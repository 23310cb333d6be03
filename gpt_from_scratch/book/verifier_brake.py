"""Chapter 14 — the KL penalty as a brake, on one seed: did the run with the penalty end
with a pass@1 other than the run without, beyond the evaluation's noise?

``brake_gap`` takes each held-out prompt's pass@1 under both runs and bounds the difference
by a paired bootstrap over the prompts (two-sided 95%), as ``verifier_prose.judge_gain``
bounds the gain; ``brake_text`` says what it found, ``verifier_text.summary_text`` uses the
same verdict. One run of each is a sign, not a measurement: the bootstrap holds the noise of
the evaluation, not that of training another seed.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

from .lessons import check_share, paired_bootstrap, points
from .verifier_prose import TWO_SIDED


@dataclass(frozen=True)
class Brake:
    """One seed's runs at the large step without and with the KL penalty, on the same
    held-out prompts: each one's pass@1 and the two-sided ``TWO_SIDED`` bootstrap interval,
    over the prompts, of the braked run's minus the plain one's, in shares."""

    plain: float
    braked: float
    low: float
    high: float
    prompts: int

    @property
    def way(self) -> str:
        """The braked run's pass@1 against the plain one's: "higher" or "lower" where the
        interval clears 0, "noise" where it holds 0 (within the evaluation's noise)."""
        return "higher" if self.low > 0 else "lower" if self.high < 0 else "noise"


def brake_gap(plain: list[float], braked: list[float]) -> Brake:
    """``Brake`` from each held-out prompt's pass@1 under the two runs (``plain``,
    ``braked``: the same prompts in the same order, e.g. ``sampled_answers``' rewards
    averaged per prompt): a paired bootstrap over the prompts, the noise of sampling and of
    the prompts' choice, as ``verifier_prose.judge_gain``'s."""
    for name, values in (("plain", plain), ("braked", braked)):
        if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
            raise ValueError(f"brake_gap: {name} = {values!r:.60} must be a list of "
                             "per-prompt pass@1, one share per held-out prompt")
        for j, v in enumerate(values):
            check_share("brake_gap", f"{name}[{j}]", v)
    if len(plain) != len(braked) or len(plain) < 2:
        raise ValueError(f"brake_gap: plain holds {len(plain)} prompts and braked "
                         f"{len(braked)}: pass both runs' pass@1 on the same held-out "
                         "prompts, at least two, in the same order")
    diffs = [b - a for a, b in zip(plain, braked)]
    low = paired_bootstrap(diffs, level=TWO_SIDED)
    high = -paired_bootstrap([-d for d in diffs], level=TWO_SIDED)  # the same resamples
    return Brake(sum(plain) / len(plain), sum(braked) / len(braked), low, high, len(diffs))


def brake_text(lr: float, beta: float, brake: Brake, kl: float, task: str) -> str:
    """What a KL penalty ``beta`` did at learning rate ``lr``, on one seed: ``brake`` is
    ``brake_gap``'s; ``kl`` the braked run's mean KL to the SFT model over its last steps
    (nats a token, >= 0)."""
    for name, v in (("lr", lr), ("beta", beta)):
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not 0 < v < math.inf:
            raise ValueError(f"brake_text: {name} = {v!r} must be a positive number")
    if not isinstance(brake, Brake):
        raise ValueError(f"brake_text: brake = {brake!r:.60} must be brake_gap's Brake: "
                         "pass brake_gap(plain, braked) of the per-prompt pass@1")
    if isinstance(kl, bool) or not isinstance(kl, numbers.Real) or not 0 <= kl < math.inf:
        raise ValueError(f"brake_text: kl = {kl!r} must be a KL, a finite number >= 0 "
                         "(nats a token)")
    text = (f"At a learning rate of {lr:g}, one seed: without a penalty, **{task}**'s "
            f"pass@1 ended at {points(brake.plain)}%; with β = {beta:g}, at "
            f"{points(brake.braked)}%, its KL to the SFT model {kl:.3f} nats a token over "
            f"the last steps. The difference, {points(brake.braked - brake.plain)} points, "
            f"has a two-sided {2 * TWO_SIDED - 1:.0%} interval from {points(brake.low)} to "
            f"{points(brake.high)} points in a bootstrap over the {brake.prompts} held-out "
            "prompts, ")
    one_run = ("One run of each is a sign, not a measurement: the bootstrap holds the "
               "evaluation's noise, not how far other seeds' runs would differ.")
    if brake.way == "higher":
        return text + ("clear of 0, beyond the evaluation's noise: on this seed the "
                       f"penalty kept pass@1 higher. {one_run}")
    if brake.way == "lower":
        return text + ("clear of 0, beyond the evaluation's noise: on this seed pass@1 "
                       f"ended lower with the penalty. {one_run}")
    return text + ("which includes 0: on this seed the two runs ended within the "
                   f"evaluation's noise. {one_run}")
