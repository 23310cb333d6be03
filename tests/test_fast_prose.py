"""Chapter 16's statistics without scipy (book.fast_prose): Pearson's p-value,
chi-square's quantile and the test's power against a wrong law, each checked against
scipy where it is."""

from __future__ import annotations

import math

import pytest
import torch

from gpt_from_scratch.book import fast_prose as prose

stats = pytest.importorskip("scipy.stats", reason="the reference laws: pip install scipy")


def test_pearsons_p_value_is_scipys():
    observed = torch.tensor([30.0, 50, 20, 7], dtype=torch.float64)
    expected = torch.tensor([25.0, 50, 25, 7], dtype=torch.float64)
    stat, df, p = prose.chi_square(observed, expected)
    reference = stats.chisquare(observed.numpy(), expected.numpy())
    assert df == 3
    assert math.isclose(stat, reference.statistic, rel_tol=1e-9)
    assert math.isclose(p, reference.pvalue, rel_tol=1e-9)


@pytest.mark.parametrize("level, df", [(0.99, 4), (0.95, 1), (0.999, 10)])
def test_the_quantile_is_scipys(level, df):
    assert math.isclose(prose.chi2_quantile(level, df), stats.chi2.ppf(level, df),
                        rel_tol=1e-9)


@pytest.mark.parametrize("n", [50, 200, 2000])
def test_the_power_is_one_minus_the_non_central_laws_miss(n):
    p = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    wrong = torch.tensor([0.15, 0.2, 0.25, 0.4], dtype=torch.float64)
    lam = n * ((wrong - p) ** 2 / p).sum().item()
    miss = stats.ncx2.cdf(stats.chi2.ppf(0.99, 3), 3, lam)
    assert math.isclose(prose.chi_square_power(n, p, wrong, 0.01), 1 - miss, abs_tol=1e-9)


def test_a_right_law_has_the_power_of_the_level():
    p = torch.tensor([0.25, 0.25, 0.5], dtype=torch.float64)
    assert math.isclose(prose.chi_square_power(1000, p, p, 0.01), 0.01, abs_tol=1e-9)
