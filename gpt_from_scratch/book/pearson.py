"""Chapter 16 — Pearson's chi-square test: its p-value, its power against a named wrong law,
and the fewest draws that give a power (``torch.special`` only; ``tests/test_fast_prose.py``
compares each with SciPy's).

The sampled speculative lesson tests the tokens drawn against the target's law; the number
of draws is chosen before drawing, from the two laws alone, so that the test rejects each
slip with probability ``POWER_GOAL`` (``draws_for_power``): choosing n from p and the slips'
laws does not change the test's level.
"""

from __future__ import annotations

import math

import torch

POWER_GOAL = 0.999  # the power the chapter draws enough for (draws_for_power)


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


def draws_for_power(p: torch.Tensor, wrong_laws: list[torch.Tensor], alpha: float,
                    least: int = 6_000, most: int = 400_000) -> int:
    """The fewest draws, a multiple of 1,000 from ``least`` to ``most`` (both multiples of
    1,000), at which Pearson's test at level ``alpha`` rejects each of ``wrong_laws`` with
    probability ``POWER_GOAL`` (``chi_square_power``, which grows with the draws); ``most``
    where none up to it does, and the lesson then says that the power is short (Chapter
    16). The goal, above ``fast_prose.POWER_BAR``, leaves room for the approximation's
    error."""
    if not wrong_laws:
        raise ValueError("draws_for_power: wrong_laws is empty: pass the slips' laws, each "
                         "a tensor over p's support")
    if least % 1_000 or most % 1_000 or not 1_000 <= least <= most:
        raise ValueError(f"draws_for_power: least={least}, most={most}: need multiples of "
                         "1,000 with 1,000 <= least <= most")
    if not 0 < alpha < 1:
        raise ValueError(f"draws_for_power: alpha={alpha}: a level in (0, 1), such as "
                         "level(n_tests)")
    if p.dim() != 1 or len(p) < 2 or not bool((p > 0).all()):
        least_p = p.min().item() if p.numel() else None
        raise ValueError(f"draws_for_power: p of shape {tuple(p.shape)} with min "
                         f"{least_p}: a law over its support, two or more cells, each > 0 "
                         "(pass p[support])")
    for w in wrong_laws:
        if w.shape != p.shape or torch.equal(w.double(), p.double()):
            raise ValueError(f"draws_for_power: a slip's law of shape {tuple(w.shape)} "
                             "equal to p or of another shape: no number of draws tells it "
                             "from p; pass each slip's law over p's support")

    def enough(thousands: int) -> bool:
        return all(chi_square_power(1_000 * thousands, p, w, alpha) >= POWER_GOAL
                   for w in wrong_laws)

    low, high = least // 1_000, most // 1_000
    if not enough(high):
        return most
    if enough(low):
        return least
    while high - low > 1:  # enough(high), not enough(low)
        mid = (low + high) // 2
        low, high = (low, mid) if enough(mid) else (mid, high)
    return 1_000 * high
