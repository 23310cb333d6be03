"""Chapter 16: speculative decoding keeps the target's tokens (greedy) and its distribution
(sampled): checked in closed form, by chi-square tests that wrong rules fail, end to end."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from gpt_from_scratch.generate import generate, top_k_filter
from gpt_from_scratch.model import GPT, GPTConfig
from gpt_from_scratch.speculative import (
    SpeculativeStats,
    accept_greedy,
    accept_or_resample,
    residual_distribution,
    sampling_probabilities,
    speculative_generate,
)

F64 = torch.float64


def _gpt(seed: int, vocab_size: int = 16, n_layers: int = 3, d_model: int = 32) -> GPT:
    """A tiny GPT with large random weights (far from uniform logits), left in training mode
    with dropout on: the functions under test must switch it off themselves."""
    torch.manual_seed(seed)
    model = GPT(GPTConfig(vocab_size=vocab_size, context_length=32, d_model=d_model,
                          n_layers=n_layers, n_heads=2, dropout=0.1))
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                seeded = torch.Generator().manual_seed(seed + p.numel())
                p.normal_(0.0, 0.3, generator=seeded)
    return model


def _early_exit(target: GPT) -> GPT:
    """A draft that is the target's first block only (embeddings, ln_f and head shared): it
    agrees with the target often, so rounds keep several guesses."""
    config = GPTConfig(**{**vars(target.config), "n_layers": 1})
    draft = GPT(config)
    kept = {k: v for k, v in target.state_dict().items()
            if not k.startswith("blocks.") or k.startswith("blocks.0.")}
    draft.load_state_dict(kept)
    return draft


# -------------------------------------------------------------- the step, in closed form

def _first_token_law(p: Tensor, q: Tensor, accept, resample) -> Tensor:
    """The exact distribution (V,) of a step's first output token: drafted y is kept with
    probability accept(y), else the token comes from resample; so
    q(y) accept(y) + P(reject) resample(y)."""
    kept = q * accept  # (V,)
    return kept + (1.0 - kept.sum()) * resample


def _rule_parts(p: Tensor, q: Tensor) -> dict[str, tuple[Tensor, Tensor]]:
    """(acceptance probabilities, rejection distribution) of the right rule and three
    wrong ones, for one position's rows p and q (V,)."""
    ratio = torch.where(q > 0, p / q, 0.0).clamp(max=1.0)  # min(1, p/q); 0: never drafted
    return {
        "right": (ratio, residual_distribution(p, q)),
        "resample from q": (ratio, q),
        "resample from p": (ratio, p),
        "accept with p(x), not p(x)/q(x)": (p, residual_distribution(p, q)),
    }


P1 = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=F64)  # γ = 1: p_1, q_1
Q1 = torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=F64)
P2 = torch.tensor([[0.05, 0.15, 0.2, 0.25, 0.35],  # γ = 2: p_1, p_2, p_3
                   [0.3, 0.1, 0.1, 0.2, 0.3],
                   [0.2, 0.2, 0.2, 0.2, 0.2]], dtype=F64)
Q2 = torch.tensor([[0.3, 0.3, 0.2, 0.1, 0.1],  # q_1, q_2
                   [0.1, 0.3, 0.2, 0.3, 0.1]], dtype=F64)
STEP_CASES = {1: (torch.stack([P1, P1.flip(0)]), Q1[None]), 2: (P2, Q2)}


@pytest.mark.parametrize("gamma", [1, 2])
def test_the_rule_in_closed_form_gives_p_and_the_wrong_rules_do_not(gamma):
    p, q = STEP_CASES[gamma]
    for name, (accept, resample) in _rule_parts(p[0], q[0]).items():
        law = _first_token_law(p[0], q[0], accept, resample)
        assert math.isclose(law.sum().item(), 1.0, abs_tol=1e-12)
        if name == "right":
            torch.testing.assert_close(law, p[0], rtol=0.0, atol=1e-12)
        else:
            assert (law - p[0]).abs().max() > 0.02, name


# ---------------------------------------------------------------- the step, by sampling

# Power of the chi-square test with N = N_DRAWS. The weakest wrong rule, "resample from p",
# puts out the first token with a law w whose non-centrality λ = N Σ (w - p)^2 / p is 196.7
# (γ = 1, V = 4, 3 degrees of freedom) and 217.1 (γ = 2, V = 5, 4 dof); the other two rules
# give 996.7 / 1180.8 ("from q") and 566.7 / 768.8 ("p(x), not p(x)/q(x)"). The
# non-central chi-square law, an approximation for alternatives near p, puts the power at
# α = 0.01 above 0.999 for each: its further digits are beyond what the approximation can
# give. test_the_chi_square_test_has_the_power_stated computes the numbers.
N_DRAWS = 2_000  # per rule and per γ


def _variant(accept, resample):
    """A step shaped like ``accept_or_resample`` with other parts: ``accept(p_i, q_i)``
    gives the acceptance probabilities (V,), ``resample(p_i, q_i)`` the distribution
    drawn from after a rejection."""
    def step(p, q, draft_tokens, generator):
        for i, x in enumerate(draft_tokens.tolist()):
            if torch.rand((), generator=generator) < accept(p[i], q[i])[x]:
                continue
            new = torch.multinomial(resample(p[i], q[i]), 1, generator=generator)
            return torch.cat([draft_tokens[:i], new]), i
        bonus = torch.multinomial(p[-1], 1, generator=generator)
        return torch.cat([draft_tokens, bonus]), len(draft_tokens)
    return step


WRONG_RULES = {
    "resample from q": _variant(lambda p, q: (p / q).clamp(max=1.0), lambda p, q: q),
    "resample from p": _variant(lambda p, q: (p / q).clamp(max=1.0), lambda p, q: p),
    "accept with p(x), not p(x)/q(x)": _variant(lambda p, q: p, residual_distribution),
}


def _outputs(rule, p: Tensor, q: Tensor, seed: int = 16) -> list[list[int]]:
    """N_DRAWS outputs of ``rule``: the drafts drawn from q's rows, then the step."""
    generator = torch.Generator().manual_seed(seed)
    outputs = []
    for _ in range(N_DRAWS):
        drafts = torch.multinomial(q, 1, generator=generator)[:, 0]  # (γ,)
        tokens, _ = rule(p, q, drafts, generator)
        outputs.append(tokens.tolist())
    return outputs


def chi_square_p_value(observed: Tensor, expected: Tensor) -> float:
    """Pearson's goodness-of-fit test (scipy.stats.chisquare): the chance of a statistic
    this large under the expected law, the chi-square survival function with k - 1 degrees
    of freedom, Q(df / 2, stat / 2)."""
    stat = ((observed - expected) ** 2 / expected).sum()
    df = torch.tensor(len(observed) - 1, dtype=torch.float64)
    return torch.special.gammaincc(df / 2, stat / 2).item()


def _p_value(tokens: list[int], p: Tensor) -> float:
    counts = torch.bincount(torch.tensor(tokens), minlength=len(p)).double()
    return chi_square_p_value(counts, len(tokens) * p.double())


@pytest.mark.parametrize("gamma", [1, 2])
def test_each_output_token_of_the_step_follows_p(gamma):
    """Token j of the output exists when the first j - 1 guesses were kept; then it is
    distributed as p_j (the rows here do not depend on the earlier tokens)."""
    p, q = STEP_CASES[gamma]
    outputs = _outputs(accept_or_resample, p, q)
    for j in range(gamma + 1):
        tokens = [out[j] for out in outputs if len(out) > j]
        assert len(tokens) > 500
        assert _p_value(tokens, p[j]) > 0.01, f"output token {j + 1}"


@pytest.mark.parametrize("gamma", [1, 2])
@pytest.mark.parametrize("wrong", list(WRONG_RULES))
def test_a_wrong_rule_fails_the_same_test(gamma, wrong):
    p, q = STEP_CASES[gamma]
    firsts = [out[0] for out in _outputs(WRONG_RULES[wrong], p, q)]
    assert _p_value(firsts, p[0]) < 1e-6


def test_the_chi_square_test_has_the_power_stated():
    stats = pytest.importorskip("scipy.stats", reason="the non-central chi-square law: "
                                "pip install scipy")
    counts = torch.tensor([30.0, 50, 20, 7], dtype=torch.float64)
    expected = torch.tensor([25.0, 50, 25, 7], dtype=torch.float64)
    assert math.isclose(chi_square_p_value(counts, expected),
                        stats.chisquare(counts.numpy(), expected.numpy()).pvalue,
                        rel_tol=1e-9)
    for gamma, lam_expected in ((1, 196.7), (2, 217.1)):
        p, q = (row[0] for row in STEP_CASES[gamma])
        ratio, _ = _rule_parts(p, q)["resample from p"]
        wrong = _first_token_law(p, q, ratio, p)
        lam = N_DRAWS * ((wrong - p) ** 2 / p).sum().item()
        df = len(p) - 1
        miss = stats.ncx2.cdf(stats.chi2.ppf(0.99, df), df, lam)
        assert math.isclose(lam, lam_expected, abs_tol=0.05)
        assert miss < 1e-3  # a power above 0.999


def test_when_p_equals_q_every_guess_is_kept_and_the_residual_is_p():
    p = torch.softmax(torch.randn(4, 6, generator=torch.Generator().manual_seed(3)), -1)
    generator = torch.Generator().manual_seed(4)
    for _ in range(200):
        drafts = torch.multinomial(p[:3], 1, generator=generator)[:, 0]
        tokens, n_accepted = accept_or_resample(p, p[:3], drafts, generator)
        assert n_accepted == 3 and torch.equal(tokens[:3], drafts)
    assert torch.equal(residual_distribution(p[0], p[0]), p[0])
    # Floats that sum to 1 only up to rounding: p <= q everywhere, no positive mass left.
    p, q = torch.tensor([0.5, 0.5]), torch.tensor([0.5, 0.5000001])
    assert torch.equal(residual_distribution(p, q), p)


def test_gamma_zero_is_one_draw_from_p():
    p = torch.tensor([[0.0, 1.0, 0.0]])
    no_tokens = torch.empty(0, dtype=torch.long)
    tokens, n_accepted = accept_or_resample(p, torch.empty(0, 3), no_tokens)
    assert tokens.tolist() == [1] and n_accepted == 0


def test_greedy_is_the_step_with_one_hot_distributions():
    generator = torch.Generator().manual_seed(5)
    V, gamma = 3, 4
    for _ in range(50):
        choices = torch.randint(V, (gamma + 1,), generator=generator)  # target's arg-maxes
        drafts = torch.randint(V, (gamma,), generator=generator)
        p = torch.nn.functional.one_hot(choices, V).double()
        q = torch.nn.functional.one_hot(drafts, V).double()
        tokens, n_accepted = accept_greedy(choices, drafts)
        sampled, n_sampled = accept_or_resample(p, q, drafts, generator)
        assert torch.equal(tokens, sampled) and n_accepted == n_sampled


UNIFORM_P, UNIFORM_Q = torch.full((2, 4), 0.25), torch.full((1, 4), 0.25)


@pytest.mark.parametrize("p, q, drafts, match", [
    (UNIFORM_P[:1], UNIFORM_Q, torch.tensor([1]), r"p must be a \(2, V\) tensor"),
    (UNIFORM_P, torch.full((1, 4), math.nan), torch.tensor([1]), "each row of q must be"),
    (torch.full((2, 4), 0.3), UNIFORM_Q, torch.tensor([1]), "each row of p must be"),
    (UNIFORM_P, torch.full((1, 5), 0.2), torch.tensor([1]), "share one vocabulary"),
    (UNIFORM_P, UNIFORM_Q, torch.tensor([4]), r"must be ids in \[0, 4\)"),
    (UNIFORM_P, torch.tensor([[0.0, 1.0, 0.0, 0.0]]), torch.tensor([0]), r"q_i\(x_i\) = 0"),
    (UNIFORM_P, UNIFORM_Q, torch.tensor([0.0]), "must be a 1-D tensor"),
    (UNIFORM_P, UNIFORM_Q, torch.tensor([True]), "must be a 1-D tensor of the γ drafted"),
])
def test_the_step_names_what_is_wrong_with_its_arguments(p, q, drafts, match):
    with pytest.raises(ValueError, match=match):
        accept_or_resample(p, q, drafts)


@pytest.mark.parametrize("temperature, match", [
    (-1.0, r"temperature=-1\.0 must be in \(0, inf\)"),
    (0.0, r"temperature=0\.0 must be in \(0, inf\)"),
    (math.nan, r"temperature=nan must be in \(0, inf\), a finite number"),
])
def test_sampling_probabilities_refuses_a_temperature_that_is_not_positive(temperature,
                                                                            match):
    """-1 once became the arg-max silently, and NaN gave NaN probabilities."""
    with pytest.raises(ValueError, match=f"sampling_probabilities.{match}"):
        sampling_probabilities(torch.tensor([[1.0, 2.0, 3.0]]), temperature=temperature)


@pytest.mark.parametrize("shape", [(1, 0), (0,), ()])
def test_sampling_probabilities_refuses_logits_without_a_vocabulary(shape):
    """V = 0 once raised a raw IndexError from amax."""
    with pytest.raises(ValueError, match=r"sampling_probabilities: logits of shape .* no "
                                         r"vocabulary \(V = 0\)"):
        sampling_probabilities(torch.zeros(shape))


def test_the_residual_of_two_vocabularies_is_refused():
    with pytest.raises(ValueError, match=r"p \(2,\) and q \(3,\) must be laws over one"):
        residual_distribution(torch.tensor([0.5, 0.5]), torch.tensor([0.2, 0.3, 0.5]))


# -------------------------------------------------------------------- the loop: greedy

PROMPTS = [[0], [3, 1, 4], [2, 7, 1, 8, 2, 8]]


@pytest.mark.parametrize("gamma", [1, 2, 4])
@pytest.mark.parametrize("draft_kind", ["early exit", "independent"])
def test_greedy_gives_the_targets_own_greedy_tokens(gamma, draft_kind):
    target = _gpt(0)
    if draft_kind == "early exit":
        draft = _early_exit(target)
    else:
        draft = _gpt(1, n_layers=1, d_model=16)
    proposed = accepted = 0
    for prompt in PROMPTS:
        idx = torch.tensor([prompt])
        expected = generate(target, idx, 24, greedy=True)
        out, stats_ = speculative_generate(target, draft, idx, 24, gamma, greedy=True)
        assert torch.equal(out, expected), prompt
        assert stats_.new_tokens == 24 and stats_.draft_forwards == stats_.proposed
        assert stats_.target_forwards == 24 - stats_.accepted  # a round adds n_accepted + 1
        proposed, accepted = proposed + stats_.proposed, accepted + stats_.accepted
    assert 0 < accepted < proposed  # guesses kept and rejected: the caches were cropped
    assert target.training and draft.training  # their modes are back


# ----------------------------------------------------------------- the loop: sampled

# Power: the target's p and the draft's q here (temperature 0.7, top-k 5, vocabulary 8)
# make the rule "resample from p" put out the first token with λ = 94.2 (4 dof) for
# N = E2E_DRAWS; the chance to miss it at α = 0.01: ncx2.cdf(chi2.ppf(0.99, 4), 4, 94.2)
# = 1.4e-10.
E2E_DRAWS = 1_000


def _first_sampled_tokens() -> tuple[list[int], Tensor, float]:
    """E2E_DRAWS first new tokens of speculative_generate (γ = 1, 2 new tokens, seeded),
    the target's own law p (V,) for that token (temperature 0.7, top-k 5), and the share
    of guesses kept."""
    target = _gpt(2, vocab_size=8, n_layers=1, d_model=16).eval()
    draft = _gpt(3, vocab_size=8, n_layers=1, d_model=16).eval()
    idx = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        logits = target(idx)[0][0, -1].double()  # (V,)
    p = torch.softmax(top_k_filter(logits, 5) / 0.7, dim=-1)  # (V,)
    generator = torch.Generator().manual_seed(6)
    firsts, proposed, accepted = [], 0, 0
    for _ in range(E2E_DRAWS):
        out, stats_ = speculative_generate(target, draft, idx, 2, gamma=1, temperature=0.7,
                                           top_k=5, generator=generator)
        firsts.append(out[0, 3].item())
        proposed, accepted = proposed + stats_.proposed, accepted + stats_.accepted
    return firsts, p, accepted / proposed


def _support_and_p_value(tokens: list[int], p: Tensor) -> tuple[float, float]:
    """The share of tokens outside p's support, and the chi-square p-value on it."""
    support = p > 0
    counts = torch.bincount(torch.tensor(tokens), minlength=len(p)).double()
    outside = counts[~support].sum().item() / len(tokens)
    expected = len(tokens) * p[support]
    return outside, chi_square_p_value(counts[support], expected.double())


def test_the_first_sampled_token_follows_the_targets_softmax():
    """Draft, score, keep or resample, end to end, against the target's own law."""
    firsts, p, acceptance = _first_sampled_tokens()
    assert 0.1 < acceptance < 0.9  # both branches of the rule ran
    outside, p_value = _support_and_p_value(firsts, p)
    assert outside == 0.0  # top-k's removed tokens never come out
    assert p_value > 0.01


def test_the_end_to_end_test_fails_a_wrong_rule(monkeypatch):
    monkeypatch.setattr("gpt_from_scratch.speculative.accept_or_resample",
                        WRONG_RULES["resample from p"])
    firsts, p, _ = _first_sampled_tokens()
    assert _support_and_p_value(firsts, p)[1] < 1e-6


# -------------------------------------------------------------------- odd inputs

def test_gamma_zero_is_the_targets_own_decoding_draw_for_draw():
    target, draft = _gpt(0), _gpt(1, n_layers=1, d_model=16)
    idx = torch.tensor([[3, 1, 4]])
    out, stats_ = speculative_generate(target, draft, idx, 10, gamma=0, greedy=True)
    assert torch.equal(out, generate(target, idx, 10, greedy=True))
    assert (stats_.proposed, stats_.target_forwards, stats_.draft_forwards) == (0, 10, 0)
    assert math.isnan(stats_.acceptance_rate) and stats_.tokens_per_target_forward == 1.0
    sampled, _ = speculative_generate(target, draft, idx, 10, gamma=0, temperature=0.8,
                                      generator=torch.Generator().manual_seed(7))
    reference = generate(target, idx, 10, temperature=0.8,
                         generator=torch.Generator().manual_seed(7))
    assert torch.equal(sampled, reference)


def test_gamma_beyond_what_remains_is_clipped():
    target, draft = _gpt(0), _early_exit(_gpt(0))
    idx = torch.tensor([[3, 1, 4]])
    out, stats_ = speculative_generate(target, draft, idx, 3, gamma=10, greedy=True)
    assert torch.equal(out, generate(target, idx, 3, greedy=True))
    assert stats_.proposed <= 2 + 1  # 2 in the first round, at most 1 after
    # The longest request that fits: 32 positions read, the last token never fed back.
    out, _ = speculative_generate(target, draft, idx, 30, gamma=10, greedy=True)
    assert torch.equal(out, generate(target, idx, 30, greedy=True))


def test_no_new_tokens_returns_the_prompt():
    target, draft = _gpt(0), _gpt(1, n_layers=1, d_model=16)
    idx = torch.tensor([[3, 1, 4]])
    out, stats_ = speculative_generate(target, draft, idx, 0, gamma=4)
    assert torch.equal(out, idx) and stats_ == SpeculativeStats()


@pytest.mark.parametrize("broken", ["target", "draft"])
def test_nan_logits_are_named(broken):
    target, draft = _gpt(0), _gpt(1, n_layers=1, d_model=16)
    with torch.no_grad():
        (target if broken == "target" else draft).ln_f.weight.fill_(math.nan)
    with pytest.raises(ValueError, match=f"the {broken}'s logits are not finite"):
        speculative_generate(target, draft, torch.tensor([[3, 1, 4]]), 5, gamma=2)


@pytest.mark.parametrize("kwargs, match", [
    (dict(idx=torch.empty(1, 0, dtype=torch.long)), r"no tokens \(T = 0\)"),
    (dict(idx=torch.tensor([[1, 2], [3, 4]])), "batch size B=2"),
    (dict(idx=torch.tensor([[1.0, 2.0]])), r"\(1, T\) tensor of token ids"),
    (dict(idx=torch.tensor([[1, 16]])), r"token ids must be in \[0, 16\)"),
    (dict(max_new_tokens=31), "need 33 positions, but the target's context_length=32"),
    (dict(gamma=-1), "gamma=-1 must be an int >= 0"),
    (dict(gamma=2.0), "pass gamma=2"),
    (dict(max_new_tokens=-1), "max_new_tokens=-1 must be an int >= 0"),
    (dict(temperature=0.0), "temperature=0.0 must be in"),
    (dict(top_k=0), "top_k=0 must be a positive int"),
])
def test_bad_arguments_are_named(kwargs, match):
    arguments = dict(idx=torch.tensor([[3, 1, 4]]), max_new_tokens=5, gamma=2) | kwargs
    with pytest.raises(ValueError, match=match):
        speculative_generate(_gpt(0), _gpt(1, n_layers=1, d_model=16), **arguments)


def test_a_draft_with_another_vocabulary_is_refused_naming_both_sizes():
    draft = _gpt(1, vocab_size=20, n_layers=1, d_model=16)
    with pytest.raises(ValueError, match="vocab_size=16, the draft vocab_size=20"):
        speculative_generate(_gpt(0), draft, torch.tensor([[3, 1, 4]]), 5, gamma=2)


def test_the_smaller_context_of_the_two_models_is_the_limit():
    draft = GPT(GPTConfig(vocab_size=16, context_length=8, d_model=16, n_layers=1,
                          n_heads=2))
    with pytest.raises(ValueError, match="the draft's context_length=8"):
        speculative_generate(_gpt(0), draft, torch.tensor([[3, 1, 4]]), 7, gamma=2)


THREE_DRAWS = 2_000


def _three_sampled_tokens(seed: int = 8) -> tuple[list[list[int]], GPT]:
    """THREE_DRAWS runs of speculative_generate making 3 tokens with γ = 2 (temperature
    0.7, top-k 5): a first round that keeps both guesses draws token 3 as the bonus."""
    target = _gpt(2, vocab_size=8, n_layers=1, d_model=16).eval()
    draft = _gpt(3, vocab_size=8, n_layers=1, d_model=16).eval()
    generator = torch.Generator().manual_seed(seed)
    outputs = [speculative_generate(target, draft, torch.tensor([[1, 2, 3]]), 3, gamma=2,
                                    temperature=0.7, top_k=5, generator=generator)[0]
               for _ in range(THREE_DRAWS)]
    return [out[0, 3:].tolist() for out in outputs], target


def _conditional_p_values(outputs: list[list[int]], target: GPT) -> list[float]:
    """Token j's p-value among the runs whose first j tokens are the commonest prefix,
    against the target's own law after it (the bonus path shows in token 3); 0 where a
    token falls outside the target's top 5, which its law never draws."""
    p_values, prefix = [], []
    for j in range(3):
        runs = [out for out in outputs if out[:j] == prefix]
        with torch.no_grad():
            logits = target(torch.tensor([[1, 2, 3] + prefix]))[0][0, -1].double()
        p = torch.softmax(top_k_filter(logits, 5) / 0.7, dim=-1)
        outside, p_value = _support_and_p_value([out[j] for out in runs], p)
        assert len(runs) > 150, (j, len(runs))
        p_values.append(0.0 if outside else p_value)
        prefix = prefix + [int(torch.bincount(torch.tensor([o[j] for o in runs])).argmax())]
    return p_values


def test_tokens_2_and_3_of_speculative_generate_follow_the_target_given_the_first():
    outputs, target = _three_sampled_tokens()
    assert min(_conditional_p_values(outputs, target)) > 0.01


def test_a_bonus_drawn_from_the_first_row_fails_at_token_3(monkeypatch):
    def bonus_from_first_row(p, q, draft_tokens, generator=None):
        tokens, n = accept_or_resample(p, q, draft_tokens, generator)
        if n == len(draft_tokens) and n:  # all kept: replace the bonus
            tokens[-1] = torch.multinomial(p[0], 1, generator=generator)[0]
        return tokens, n
    monkeypatch.setattr("gpt_from_scratch.speculative.accept_or_resample",
                        bonus_from_first_row)
    outputs, target = _three_sampled_tokens()
    assert _conditional_p_values(outputs, target)[2] < 1e-6


def test_the_second_readings_odd_inputs_are_named():
    """accept_greedy's shapes, crop's n, a row of logits with no finite value, a residual
    of things that are not laws."""
    from gpt_from_scratch.speculative import (RollbackKVCache, accept_greedy,
                                              residual_distribution, sampling_probabilities)
    with pytest.raises(ValueError, match=r"target_choices \(1,\) must be \(γ \+ 1,\)"):
        accept_greedy(torch.tensor([1]), torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match=r"must be \(γ \+ 1,\)"):
        accept_greedy(torch.tensor([[1, 2]]), torch.tensor([1]))
    with pytest.raises(ValueError, match=r"RollbackKVCache.crop.n=-1"):
        RollbackKVCache(8).crop(-1)
    with pytest.raises(ValueError, match="holds NaN, or no finite value"):
        sampling_probabilities(torch.full((1, 4), float("-inf")))
    with pytest.raises(ValueError, match="holds NaN, or no finite value"):
        sampling_probabilities(torch.tensor([[0.0, float("nan")]]))
    with pytest.raises(ValueError, match="p must be a law"):
        residual_distribution(torch.tensor([5.0, -1.0]), torch.tensor([0.5, 0.5]))
    with pytest.raises(ValueError, match="must be laws over one vocabulary"):
        residual_distribution(torch.full((2, 2), 0.25), torch.full((2, 2), 0.25))
