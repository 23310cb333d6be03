"""Chapter 16's lessons and statistics (book.fast_prose): each lesson holds on a right
run and fails, with a sentence of its own, on the run it is there to catch; Pearson's
p-value, chi-square's quantile and the test's power against a wrong law match scipy's
where it is installed."""

from __future__ import annotations

import math

import pytest
import torch

from gpt_from_scratch.book import fast_prose as prose
from gpt_from_scratch.book import pearson


def scipy_stats():
    return pytest.importorskip("scipy.stats", reason="the reference laws: pip install "
                               "scipy")


# ------------------------------------------------------------------ the lessons' branches

def test_tiled_lesson_fails_when_the_bar_does_not_separate_rounding_from_a_slip():
    assert prose.tiled_lesson(2e-16, 3e-7, 0.4).holds
    failed = prose.tiled_lesson(2e-16, 3e-7, 1e-13)
    assert not failed.holds and "the bar does not separate" in failed.text.lower()


# (T, naive peak, tiled peak, tiled beyond output), bytes: the chapter's real tiling, and
# a loop tiled over the queries only, whose 64 x T scores grow with T
TILED = [(256, 788_000, 182_528, 115_968), (2048, 50_400_000, 648_448, 115_968)]
QUERY_ONLY = [(256, 788_000, 262_000, 196_620), (2048, 50_400_000, 2_100_000, 1_572_876)]


def test_memory_lesson_judges_the_growth_beyond_the_output_not_one_ratio():
    assert prose.memory_lesson(TILED).holds
    failed = prose.memory_lesson(QUERY_ONLY)
    # the old judgement, scores over the tiled peak at the largest T, passes it (24 > 10)
    assert QUERY_ONLY[-1][1] / QUERY_ONLY[-1][2] > 10
    assert not failed.holds and "grew with T" in failed.text
    assert "8.00-fold" in failed.text


def test_greedy_lesson_fails_on_one_token():
    assert prose.greedy_lesson(0, 1_090).holds
    failed = prose.greedy_lesson(1, 1_090)
    assert not failed.holds and "within rounding" in failed.text


SAMPLED = {"the step's first token": (0.41, 6000, 0), "token 2 after 'A'": (0.2, 500, 0)}
POWER = {"from q after a rejection": 1.0, "from p after a rejection": 0.9999}


@pytest.mark.parametrize("tests, power, says", [
    ({**SAMPLED, "token 1": (0.3, 1200, 2)}, POWER, "came out, which the target never"),
    ({**SAMPLED, "token 1": (0.002, 1200, 0)}, POWER, "A p-value is under 0.00333333"),
    (SAMPLED, {**POWER, "from p after a rejection": 0.9}, "power against a slip is under"),
])
def test_sampled_lesson_fails_each_way_with_its_own_sentence(tests, power, says):
    assert prose.sampled_lesson(SAMPLED, POWER, top_k=5).holds
    failed = prose.sampled_lesson(tests, power, top_k=5)
    assert not failed.holds and says in failed.text


def test_a_small_p_value_is_printed_as_it_is_and_not_called_a_pass():
    """The first version printed p = 0.004 as "0.00, -0.4 decades above the level"."""
    failed = prose.sampled_lesson({**SAMPLED, "token 1": (0.002, 1200, 0)}, POWER, top_k=5)
    assert "token 1 (1,200 draws) 0.002" in failed.text
    assert "passes" not in failed.text and "decades above" not in failed.text


def test_the_power_is_stated_no_closer_to_1_than_the_approximation_allows():
    assert prose.power_text(1 - 2e-27) == "> 0.999"
    assert prose.power_text(0.95) == "0.950"


def test_tokens_lesson_fails_under_the_bar():
    assert prose.tokens_lesson({1: (0.67, 1.67), 2: (0.59, 2.1)}).holds
    failed = prose.tokens_lesson({1: (0.2, 1.2), 2: (0.1, 1.2)})
    assert not failed.holds and "under the 1.5" in failed.text


def test_leviathans_formula_by_hand():
    kept, tokens = prose.leviathan(0.5, 2)
    assert math.isclose(kept, 0.5 * 0.75 / (2 * 0.5)) and math.isclose(tokens, 1.75)


def test_quantize_lesson_tells_int8_from_int4_and_from_truncation():
    """Int8's KL from float32 under the bar, and the slips' at least SLIP_RATIO times
    int8's (review 4, M2: a bar of 0.01 passed int4 in groups and a truncating int8). The
    KL, not the change of bits per byte: under AVX2 one machine's model had int8 lower the
    bits per byte by 0.00034, with truncation +0.0013 (a first-order effect)."""
    bpb = {"fp32": 2.0, "int8": 1.99966, "int4": 2.0085, "int8 truncated": 2.0013}
    kl = {"int8": 4e-5, "int4": 9e-3, "int8 truncated": 5.2e-4}
    held = prose.quantize_lesson(kl, bpb)
    assert held.holds and held.margin == pytest.approx(math.log10(13 / 2), rel=1e-3)
    assert "-0.00034," in held.text and "+0.0085" in held.text and "+0.0013" in held.text
    assert "int8 4e-05 nats a character" in held.text
    assert "Truncating's KL is 13.0 times rounding's and int4's 225 times" in held.text
    over = prose.quantize_lesson(kl | {"int8": 2e-3, "int4": 1.0, "int8 truncated": 1.0},
                                 bpb)
    assert not over.holds and "Int8's KL is over its bar" in over.text
    slips_pass = prose.quantize_lesson(kl | {"int8 truncated": 7e-5}, bpb)
    assert not slips_pass.holds and "rounding no longer tells itself" in slips_pass.text
    assert "Truncating's KL" not in slips_pass.text
    assert not prose.quantize_lesson(kl | {"int4": 7e-5}, bpb).holds
    assert not prose.quantize_lesson(kl | {"int8 truncated": 0.0}, bpb).holds
    tiny = prose.quantize_lesson(kl | {"int8": 0.0}, bpb)  # under the resolution
    assert tiny.holds and tiny.margin == pytest.approx(math.log10(5.2e-4 / 2e-11))
    assert "8.00 decades under its bar, 0.001 (at least: under the resolution)" in tiny.text
    assert "Truncating's KL is 52000000.0 times the resolution and" in tiny.text
    below = prose.quantize_lesson(kl | {"int8": 0.0, "int8 truncated": 1.5e-11}, bpb)
    assert not below.holds and "less than 2 times the resolution:" in below.text
    for bad in (-1e-6, math.nan, math.inf):
        with pytest.raises(ValueError, match=r"kl\['int8'\] = .*finite number >= 0"):
            prose.quantize_lesson(kl | {"int8": bad}, bpb)


def test_draws_for_power_is_the_fewest_thousands_that_reach_the_goal():
    p = torch.tensor([0.3, 0.3, 0.4], dtype=torch.float64)
    near = torch.tensor([0.32, 0.3, 0.38], dtype=torch.float64)
    far = torch.tensor([0.5, 0.2, 0.3], dtype=torch.float64)
    alpha = prose.level(4)
    n = pearson.draws_for_power(p, [near, far], alpha)
    assert n % 1_000 == 0 and n > 6_000
    assert pearson.chi_square_power(n, p, near, alpha) >= pearson.POWER_GOAL
    assert pearson.chi_square_power(n - 1_000, p, near, alpha) < pearson.POWER_GOAL
    assert pearson.draws_for_power(p, [far], alpha) == 6_000  # already enough at the least
    assert pearson.draws_for_power(p, [near], alpha, most=15_000) == 15_000  # short of it
    assert pearson.draws_for_power(p, [near], alpha, least=n, most=n) == n
    with pytest.raises(ValueError, match="wrong_laws is empty"):
        pearson.draws_for_power(p, [], alpha)
    with pytest.raises(ValueError, match="least=500"):
        pearson.draws_for_power(p, [far], alpha, least=500)
    with pytest.raises(ValueError, match="most=15500: need multiples of 1,000"):
        pearson.draws_for_power(p, [near], alpha, most=15_500)  # it looped for ever
    with pytest.raises(ValueError, match="alpha=0: a level in"):
        pearson.draws_for_power(p, [near], 0)
    with pytest.raises(ValueError, match="each > 0"):
        pearson.draws_for_power(torch.tensor([0.0, 0.5, 0.5]), [near], alpha)
    with pytest.raises(ValueError, match="two or more cells"):
        pearson.draws_for_power(torch.tensor([1.0]), [torch.tensor([1.0])], alpha)
    with pytest.raises(ValueError, match="no number of draws tells it from p"):
        pearson.draws_for_power(p, [p.clone()], alpha)


def test_paged_lesson_fails_on_one_token():
    waste = {"padded": 80, "static": 200, "paged": 30}
    assert prose.paged_lesson(0, 100, waste, 197).holds
    failed = prose.paged_lesson(1, 100, waste, 197)
    assert not failed.holds and "A token differs" in failed.text


def test_speedup_text_says_where_the_measurement_is_above_and_below_the_model():
    seconds = {0: [1.0, 1.1, 0.9], 1: [0.5, 0.6, 0.55], 2: [0.9, 0.8, 1.0]}
    rows, verify = {1: (0.7, 1.7), 2: (0.6, 2.2)}, {1: 1.0, 2: 1.1}
    text = prose.speedup_text(0.5, verify, rows, seconds, 0.1, 0.0)
    # o = 0: γ = 1: 1.0 / 0.55 = 1.82 measured, 1.7 / 1.5 = 1.13 by the model; γ = 2: 1.11,
    # 2.2 / 2.1 = 1.05
    assert "exceeds the model with o at 2 of the 2 γ and falls short of it at 0" in text
    assert "1.13 by passes alone, 1.13 with o" in text
    assert "No two neighbouring γ have overlapping ranges" in text
    text = prose.speedup_text(0.5, verify, rows, seconds, 0.1, 1.0)
    # o = 1: γ = 1: 1.7 * 2 / 2.5 = 1.36; γ = 2: 2.2 * 2 / 3.1 = 1.42, above 1.11 measured
    assert "1.13 by passes alone, 1.36 with o" in text
    assert "1.05 by passes alone, 1.42 with o" in text
    assert "exceeds the model with o at 1 of the 2 γ and falls short of it at 1" in text
    assert "pushes the model's speed-up down, not up" in text and "o = 1.00" in text


# ------------------------------------------------------------------ the statistics

def test_pearsons_p_value_is_scipys():
    observed = torch.tensor([30.0, 50, 20, 7], dtype=torch.float64)
    expected = torch.tensor([25.0, 50, 25, 7], dtype=torch.float64)
    stat, df, p = pearson.chi_square(observed, expected)
    stats = scipy_stats()
    reference = stats.chisquare(observed.numpy(), expected.numpy())
    assert df == 3
    assert math.isclose(stat, reference.statistic, rel_tol=1e-9)
    assert math.isclose(p, reference.pvalue, rel_tol=1e-9)


@pytest.mark.parametrize("level, df", [(0.99, 4), (0.95, 1), (0.999, 10)])
def test_the_quantile_is_scipys(level, df):
    stats = scipy_stats()
    assert math.isclose(pearson.chi2_quantile(level, df), stats.chi2.ppf(level, df),
                        rel_tol=1e-9)


@pytest.mark.parametrize("n", [50, 200, 2000])
def test_the_power_is_one_minus_the_non_central_laws_miss(n):
    p = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    wrong = torch.tensor([0.15, 0.2, 0.25, 0.4], dtype=torch.float64)
    stats = scipy_stats()
    lam = n * ((wrong - p) ** 2 / p).sum().item()
    miss = stats.ncx2.cdf(stats.chi2.ppf(0.99, 3), 3, lam)
    assert math.isclose(pearson.chi_square_power(n, p, wrong, 0.01), 1 - miss, abs_tol=1e-9)


def test_a_right_law_has_the_power_of_the_level():
    p = torch.tensor([0.25, 0.25, 0.5], dtype=torch.float64)
    assert math.isclose(pearson.chi_square_power(1000, p, p, 0.01), 0.01, abs_tol=1e-9)


def test_the_sampled_tests_are_judged_together_at_one_percent():
    """Four tests at 0.0025 each: a p-value of 0.004 passes (it would fail at 0.01 alone
    one time in a hundred per test, four times as often for the four)."""
    four = {**SAMPLED, "token 1": (0.004, 1200, 0), "token 3": (0.3, 700, 0)}
    found = prose.sampled_lesson(four, POWER, top_k=5)
    assert found.holds and "the level 0.0025 that each of the 4 tests" in found.text


def test_the_sampled_speed_text_states_both_shares_and_draws_no_cause():
    text = prose.sampled_speed_text(0.38, 0.44)
    assert text.startswith("Sampled, the target kept 38% of the guesses; greedy, 44%.")
    assert text.replace("38", "50") == prose.sampled_speed_text(0.50, 0.44)
