"""Chapter 14's GRPO pieces: advantages, the clipped loss, pass@k, sampling groups, the loop.
The loss's parity with TRL is in test_grpo_parity.py."""

from __future__ import annotations

import copy
import itertools
import math
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
import torch

from gpt_from_scratch import grpo_train
from gpt_from_scratch.generate import generate
from gpt_from_scratch.grpo import grpo_loss
from gpt_from_scratch.grpo_advantages import (check_reward, expected_weight,
                                              group_advantages, mixed_groups, pass_at_k)
from gpt_from_scratch.grpo_sampling import completion_logps, sample_groups
from gpt_from_scratch.grpo_train import train_grpo
from gpt_from_scratch.model import GPT, GPTConfig


def tiny_gpt(seed: int = 0, vocab: int = 12, context_length: int = 16,
             dropout: float = 0.0) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=vocab, context_length=context_length, d_model=16,
                         n_layers=1, n_heads=2, dropout=dropout))


# ------------------------------------------------------------------------------ advantages
def test_group_advantages_by_hand_and_a_group_of_equal_rewards_teaches_nothing():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    adv = group_advantages(rewards, 4)
    std = math.sqrt(sum((r - 0.5) ** 2 for r in (1, 0, 0, 1)) / 3)  # unbiased, n - 1
    expected = [(r - 0.5) / (std + 1e-4) for r in (1, 0, 0, 1)] + [0.0] * 4
    torch.testing.assert_close(adv, torch.tensor(expected))
    torch.testing.assert_close(group_advantages(rewards, 4, scale=None),
                               torch.tensor([0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0]))
    assert mixed_groups(rewards, 4) == 0.5 and mixed_groups(rewards[:6], 3) == 0.5 and mixed_groups(rewards, 2) == 0.5


@pytest.mark.parametrize("G", [2, 4, 5])
@pytest.mark.parametrize("p", [0.1, 0.5, 0.83])
def test_expected_weight_is_a_group_s_expected_gradient_over_grad_p(G, p):
    """A policy right with probability p = sigmoid(theta): each of the 2^G reward patterns,
    its chance and its gradient sum_i A_i d/dtheta log pi(y_i), summed exactly, over
    dp/dtheta = p (1 - p), is w(p). The mean alone weighs every prompt alike, G - 1."""
    for scale in ("group", None):
        total = 0.0
        for pattern in itertools.product((0.0, 1.0), repeat=G):
            chance = math.prod(p if r else 1 - p for r in pattern)
            A = group_advantages(torch.tensor(pattern, dtype=torch.float64), G, scale)
            score = [1 - p if r else -p for r in pattern]  # d/dtheta log pi(y_i)
            total += chance * sum(a * d for a, d in zip(A.tolist(), score))
        w = expected_weight(p, G, scale)
        assert w == pytest.approx(total / (p * (1 - p)), rel=1e-9)
    assert expected_weight(p, G, None) == pytest.approx(G - 1, rel=1e-12)
    assert expected_weight(p, G) == pytest.approx(expected_weight(1 - p, G), rel=1e-9)
    assert expected_weight(p, G) >= expected_weight(0.5, G) > G - 1  # the std's bias


# ------------------------------------------------------------------------------ the loss
def batch(seed: int = 0, N: int = 6, C: int = 5):
    g = torch.Generator().manual_seed(seed)
    logps = (-torch.rand(N, C, generator=g) * 3).requires_grad_()
    mask = torch.ones(N, C)
    mask[0, 3:] = 0
    mask[4, 1:] = 0
    advantages = torch.randn(N, generator=g)
    return logps, mask, advantages


def test_on_policy_the_ratio_is_1_and_the_gradient_is_reinforce_weighted_by_a():
    for loss_type in ("dapo", "grpo", "dr_grpo"):
        logps, mask, A = batch()
        longest = 8 if loss_type == "dr_grpo" else None  # the cap, wider than C = 5
        out = grpo_loss(logps, logps.detach(), A, mask, loss_type=loss_type,
                        max_completion_length=longest)
        assert out.clipped == 0 and out.kl is None and abs(out.loss.item()) < 1.0
        out.loss.backward()
        ours = logps.grad.clone()
        logps.grad = None
        weight = {"dapo": mask / mask.sum(), "grpo": mask / mask.sum(-1, keepdim=True) / 6,
                  "dr_grpo": mask / (6 * 8)}[loss_type]  # N = 6 completions
        (-(A[:, None] * logps * weight).sum()).backward()  # REINFORCE: -A * grad log p
        torch.testing.assert_close(ours, logps.grad)


def test_off_policy_the_clip_binds_and_stops_the_gradient_there():
    logps, mask, A = batch()
    old = logps.detach() - 0.5  # every ratio e^0.5 > 1 + eps: clipped where A > 0 only
    out = grpo_loss(logps, old, A, mask)
    out.loss.backward()
    clipped_rows = A > 0
    assert out.clipped == pytest.approx((mask[clipped_rows]).sum().item() / mask.sum().item())
    assert (logps.grad[clipped_rows] == 0).all() and (logps.grad[~clipped_rows] != 0).any()


def test_the_kl_term_is_k3_times_the_ratio_and_zero_at_the_reference():
    logps, mask, A = batch()
    same = grpo_loss(logps, logps.detach(), A, mask, beta=0.1, ref_logps=logps.detach())
    assert same.kl == 0.0
    ref = logps.detach() + 0.3
    out = grpo_loss(logps, logps.detach(), A, mask, beta=0.1, ref_logps=ref)
    assert out.kl == pytest.approx(math.exp(0.3) - 0.3 - 1, rel=1e-5)
    none = grpo_loss(logps, logps.detach(), A, mask)
    assert out.loss.item() == pytest.approx(none.loss.item() + 0.1 * out.kl, rel=1e-5)


def test_dr_grpo_divides_by_a_constant_that_the_answers_lengths_do_not_change():
    logps, mask, A = batch()
    shorter = mask.clone()
    shorter[:, 2:] = 0  # the same answers cut short: "dapo"'s and "grpo"'s divisors change
    for m in (mask, shorter):
        out = grpo_loss(logps, logps.detach(), A, m, loss_type="dr_grpo",
                        max_completion_length=8)
        by_hand = (-(A[:, None] * m)).sum() / (6 * 8)  # on-policy: per token -A
        torch.testing.assert_close(out.loss, by_hand)
    dapo = grpo_loss(logps, logps.detach(), A, shorter).loss
    assert not torch.allclose(dapo, by_hand)  # "dapo" divides by the 12 tokens left


def test_a_masked_minus_inf_log_probability_poisons_neither_the_loss_nor_its_gradient():
    for loss_type, longest in (("dapo", None), ("grpo", None), ("dr_grpo", 5)):
        grads, losses = [], []
        for fill in (-math.inf, -3.0):  # after an answer's end: a token it never writes
            logps, mask, A = batch()
            outside = mask == 0
            with torch.no_grad():
                logps[outside] = fill
            old = logps.detach().masked_fill(outside, fill) - 0.1  # the clip binds: A > 0
            ref = logps.detach().masked_fill(outside, -math.inf)
            out = grpo_loss(logps, old, A, mask, loss_type=loss_type, beta=0.1,
                            ref_logps=ref, max_completion_length=longest)
            out.loss.backward()
            assert math.isfinite(out.loss.item()) and math.isfinite(out.kl)
            assert torch.isfinite(logps.grad).all() and (logps.grad[outside] == 0).all()
            grads.append(logps.grad)
            losses.append(out.loss)
        torch.testing.assert_close(losses[0], losses[1], rtol=0, atol=0)
        torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=0)


def test_dapo_over_a_slice_divides_by_the_whole_batch_s_tokens():
    logps, mask, A = batch()
    whole = grpo_loss(logps, logps.detach(), A, mask).loss
    halves = [grpo_loss(logps[s], logps.detach()[s], A[s], mask[s],
                        num_items=int(mask.sum())).loss for s in (slice(0, 3), slice(3, 6))]
    torch.testing.assert_close(halves[0] + halves[1], whole)


# ------------------------------------------------------------------------------ pass@k
@pytest.mark.parametrize("n, c, k", [(8, 3, 1), (8, 3, 2), (8, 3, 5), (8, 3, 6), (10, 0, 4),
                                     (10, 10, 4), (1, 1, 1), (20, 1, 20), (50, 7, 13)])
def test_pass_at_k_is_its_closed_form(n, c, k):
    closed = 1 - math.comb(n - c, k) / math.comb(n, k)
    assert pass_at_k(n, c, k) == pytest.approx(closed, abs=1e-12)


def test_pass_at_1_is_the_share_right_and_pass_at_n_is_any_right():
    assert pass_at_k(8, 3, 1) == pytest.approx(3 / 8)
    assert pass_at_k(8, 1, 8) == 1.0 and pass_at_k(8, 0, 8) == 0.0
    assert pass_at_k(2000, 1, 1) == pytest.approx(1 / 2000)  # no overflow at large n


# ------------------------------------------------------------------------------ sampling
def ending_gpt(end: int = 3) -> GPT:
    """A GPT that writes ``end`` with probability about 0.4 at every step."""
    model = tiny_gpt()
    with torch.no_grad():  # every position's final state is all ones; logit 2 for the end token
        model.ln_f.weight.zero_()
        model.ln_f.bias.fill_(1.0)
        model.lm_head.weight[end] = 2 / model.config.d_model  # p(end) = e^2 / (e^2 + ~11)
    return model


def test_sample_groups_stops_once_every_row_has_ended_and_masks_after_the_end():
    model, end = ending_gpt(), 3
    prompts = torch.tensor([[1, 2], [4, 5]])
    comp, mask = sample_groups(model, prompts, 4, 14, end, generator=torch.Generator().manual_seed(0))
    assert comp.shape[0] == 8 and comp.shape[1] < 14 and mask.shape == comp.shape
    assert (comp == end).any(1).all()  # every row ended, and sampling stopped there
    for row, m in zip(comp.tolist(), mask.tolist()):
        first = row.index(end)
        assert m == [1] * (first + 1) + [0] * (len(row) - first - 1)
        assert all(t == end for t in row[first:])


@pytest.mark.parametrize("seed", range(3))
def test_sample_groups_draws_the_tokens_of_chapter_7s_generate(seed):
    model, prompts = ending_gpt(), torch.tensor([[1, 2], [4, 5]])
    comp, mask = sample_groups(model, prompts, 4, 14, 3, generator=torch.Generator().manual_seed(seed))
    out = generate(model, prompts.repeat_interleave(4, 0), comp.shape[1],
                   generator=torch.Generator().manual_seed(seed))[:, 2:]  # (N, C), no stop
    assert ((comp == out) | (mask == 0)).all() and mask.sum(1).min() < mask.sum(1).max()


def test_completion_logps_take_token_ids_of_any_integer_dtype():
    model, prompts = tiny_gpt(1), torch.tensor([[1, 2, 5]])
    comp = torch.tensor([[3, 11, 4]])
    torch.testing.assert_close(completion_logps(model, prompts.to(torch.uint8),
                                                comp.to(torch.uint8)),
                               completion_logps(model, prompts, comp), rtol=0, atol=0)


def test_completion_logps_are_the_models_own_one_row_at_a_time():
    model = tiny_gpt(1)
    prompts = torch.tensor([[1, 2, 5]])
    comp, _ = sample_groups(model, prompts, 3, 6, end_id=11,
                            generator=torch.Generator().manual_seed(5))
    logps = completion_logps(model, prompts.repeat_interleave(3, 0), comp)  # (3, C)
    idx = torch.cat([prompts.repeat_interleave(3, 0), comp], dim=1)
    logits, _ = model(idx)
    by_hand = torch.log_softmax(logits[:, 2:-1], -1).gather(-1, comp[..., None])[..., 0]
    torch.testing.assert_close(logps, by_hand)


# ------------------------------------------------------------------------------ the loop
def reward_token_7(i: int, completion: list[int]) -> float:
    return float(7 in completion)


def test_train_grpo_raises_the_reward_and_one_update_never_clips():
    prompts = [[1, 2], [4, 5], [6, 2]]
    model = tiny_gpt()
    history = train_grpo(model, prompts, reward_token_7, end_id=3, steps=12, lr=3e-2,
                         max_new_tokens=4, group_size=6, batch_size=3)
    assert len(history.reward) == 12 and history.kl == [] and not model.training
    assert max(history.clipped) == 0.0  # the ratio is exactly 1
    assert sum(history.reward[-3:]) > sum(history.reward[:3]) + 0.5
    assert all(0.0 <= m <= 1.0 for m in history.mixed)


def test_two_updates_per_batch_let_the_clip_bind_and_beta_logs_the_kl():
    import copy

    prompts = [[1, 2], [4, 5]]
    model = tiny_gpt()
    reference = copy.deepcopy(model)
    history = train_grpo(model, prompts, reward_token_7, end_id=3, steps=4, lr=5e-2,
                         max_new_tokens=4, group_size=6, batch_size=2, updates=2, beta=0.1,
                         reference=reference)
    assert max(history.clipped) > 0 and len(history.kl) == 4 and history.kl[-1] > 0


def test_the_reference_is_read_in_eval_mode_whatever_mode_it_was_left_in(monkeypatch):
    """TRL keeps its reference in eval mode. A reference with dropout 0.5 copied from a
    policy in training mode (reference=copy.deepcopy(policy)) gives its eval-mode
    log-probabilities, not a dropout draw's, and is handed back in training mode."""
    reads = []

    def spy(model, idx, completions, temperature=1.0):
        out = completion_logps(model, idx, completions, temperature)
        if model is reference:
            reads.append((model.training, idx, completions, out))
        return out

    monkeypatch.setattr(grpo_train, "completion_logps", spy)
    policy = tiny_gpt(dropout=0.5).train()
    reference = copy.deepcopy(policy)
    train_grpo(policy, [[1, 2], [4, 5]], reward_token_7, 3, 2, group_size=4, batch_size=2,
               max_new_tokens=4, beta=0.1, reference=reference)
    assert len(reads) == 2 and not any(training for training, *_ in reads)
    assert all(m.training for m in reference.modules())  # given back as it was left
    with torch.no_grad():
        for _, idx, comp, out in reads:
            train_mode = completion_logps(reference, idx, comp)  # dropout on
            assert not torch.equal(out, train_mode)
            with grpo_train.eval_mode(reference):
                torch.testing.assert_close(out, completion_logps(reference, idx, comp),
                                           rtol=0, atol=0)


def spy_on_grpo_loss(monkeypatch) -> list:
    """Each ``grpo_loss`` call of ``train_grpo``: its ratio (N, C), output and options."""
    calls = []

    def spy(logps, old_logps, *args, **kwargs):
        out = grpo_loss(logps, old_logps, *args, **kwargs)
        calls.append((torch.exp(logps.detach() - old_logps), out, kwargs))
        return out

    monkeypatch.setattr(grpo_train, "grpo_loss", spy)
    return calls


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_every_update_s_ratio_is_against_the_first_update_s_own_log_probabilities(
        monkeypatch, dropout):
    """The weights held still (AdamW's step a no-op), rewards random: without dropout every
    update's ratio is exactly 1 and nothing is clipped; with dropout the first update's is
    still exactly 1 (old_logps is its own logps.detach(), not an eval-mode pass, whose
    ratio held dropout's noise on which the clip bound: 24-46% of tokens with weights x8),
    and a later one's holds two dropout draws' difference, as the docstring says."""
    calls = spy_on_grpo_loss(monkeypatch)
    monkeypatch.setattr(torch.optim.AdamW, "step", lambda self, closure=None: None)
    model = tiny_gpt(dropout=dropout)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(8)  # a peaked model: dropout moves its log-probabilities a lot
    weights = [p.clone() for p in model.parameters()]
    g = torch.Generator().manual_seed(0)
    train_grpo(model, [[1, 2], [4, 5]], lambda i, c: torch.rand(1, generator=g).item(), 3,
               3, group_size=4, batch_size=2, max_new_tokens=5, updates=3)
    assert all(torch.equal(a, b) for a, b in zip(weights, model.parameters()))
    first, later = calls[0::3], calls[1::3] + calls[2::3]
    assert len(calls) == 9 and all((r == 1).all() and o.clipped == 0 for r, o, _ in first)
    if dropout == 0:
        assert all((r == 1).all() and o.clipped == 0 for r, o, _ in later)
    else:
        assert all((r != 1).any() for r, _, _ in later)


def test_train_grpo_s_dr_grpo_divides_by_the_cap_on_an_answer_s_length(monkeypatch):
    calls = spy_on_grpo_loss(monkeypatch)
    history = train_grpo(tiny_gpt(), [[1, 2], [4, 5]], reward_token_7, 3, 2, group_size=4,
                         batch_size=2, max_new_tokens=5, loss_type="dr_grpo")
    assert [kw["max_completion_length"] for _, _, kw in calls] == [5, 5]
    assert all(math.isfinite(x) for x in history.loss)
    train_grpo(tiny_gpt(), [[1, 2], [4, 5]], reward_token_7, 3, 1, group_size=4,
               batch_size=2, max_new_tokens=5)
    assert calls[-1][2]["max_completion_length"] is None  # "dapo" divides by the tokens


def test_a_temperature_too_small_for_float32_scores_the_sampler_s_own_tokens():
    """As next_token, completion_logps clamps the temperature to float32's range and
    subtracts each row's largest logit first: at 1e-300 the sampler picks each row's most
    likely token, whose log-probability is then 0, not the nan of logits / 1e-300; at
    1e300, -log V; at 0.5, log_softmax(logits / 0.5) by hand."""
    model, prompts = tiny_gpt(1), torch.tensor([[1, 2, 5]])
    idx = prompts.repeat_interleave(3, 0)  # (N, P)
    comp, mask = sample_groups(model, prompts, 3, 6, end_id=11, temperature=1e-300,
                               generator=torch.Generator().manual_seed(5))
    logps = completion_logps(model, idx, comp, 1e-300)  # (N, C)
    assert not logps.isnan().any() and (logps[mask.bool()] == 0).all()
    out = grpo_loss(logps, logps.detach(), torch.tensor([1.0, -1.0, 0.0]), mask)
    out.loss.backward()
    assert math.isfinite(out.loss.item())
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())
    torch.testing.assert_close(completion_logps(model, idx, comp, 1e300),
                               torch.full(comp.shape, -math.log(12)))
    logits, _ = model(torch.cat([idx, comp], dim=1))
    by_hand = torch.log_softmax(logits[:, 2:-1] / 0.5, -1)  # (N, C, V)
    by_hand = by_hand.gather(-1, comp[..., None])[..., 0]  # (N, C)
    torch.testing.assert_close(completion_logps(model, idx, comp, 0.5), by_hand)


# ------------------------------------------------------------------------------ bad input
LOGPS = torch.zeros(4, 3)
MASK = torch.ones(4, 3)
ADV = torch.zeros(4)


@pytest.mark.parametrize("call, fragment", [
    (lambda m: group_advantages(torch.ones(6), 4), "6 rewards do not split into groups of "
                                                    "group_size=4"),
    (lambda m: group_advantages(torch.ones(6), 1), "group_size=1 must be an int >= 2"),
    (lambda m: group_advantages(torch.ones(4), 2, scale="batch"), "scale='batch' must be"),
    (lambda m: group_advantages([1.0, 0.0], 2), "rewards must be a 1-D float tensor"),
    (lambda m: group_advantages(torch.tensor([1.0, float("nan")]), 2), "a reward is nan"),
    (lambda m: grpo_loss(LOGPS, LOGPS, ADV, MASK, loss_type="bnpo"),
     "loss_type='bnpo' must be one of"),
    (lambda m: grpo_loss(LOGPS, LOGPS, ADV, torch.ones(4, 2)),
     r"'mask': \(4, 2\)\} must all be one shape \(N, C\)"),
    (lambda m: grpo_loss(LOGPS, LOGPS, torch.zeros(4, 1), MASK),
     r"advantages of shape \(4, 1\) must be \(N,\) = \(4,\)"),
    (lambda m: grpo_loss(LOGPS, LOGPS, ADV, MASK, beta=0.1), "beta=0.1 > 0 needs ref_logps"),
    (lambda m: grpo_loss(LOGPS, LOGPS, ADV, MASK, epsilon=1.5), r"epsilon=1.5 must be in"),
    (lambda m: grpo_loss(LOGPS, LOGPS, ADV, MASK, beta=-1.0), r"beta=-1.0 must be in"),
    (lambda m: grpo_loss([[0.0]], LOGPS, ADV, MASK), "logps, old_logps, advantages and mask "
                                                     "must be tensors"),
    (lambda m: completion_logps(m, torch.zeros(2, 0, dtype=torch.long),
                                torch.zeros(2, 3, dtype=torch.long)), "at least one prompt token"),
    (lambda m: mixed_groups(torch.ones(3), 2), "3 rewards do not split into groups"),
    (lambda m: pass_at_k(4, 2, 5), "k=5 > n=4: pass@k needs at least k samples"),
    (lambda m: pass_at_k(4, 5, 1), "c=5 right answers among n=4 samples"),
    (lambda m: pass_at_k(4, 2, 0), "k=0 must be a positive int"),
    (lambda m: pass_at_k(4.0, 2, 1), "pass n=4"),
    (lambda m: completion_logps(m, torch.zeros(2, 3, dtype=torch.long),
                                torch.zeros(3, 2, dtype=torch.long)), "repeat each prompt"),
    (lambda m: sample_groups(m, torch.tensor([[1, 2]]), 2, 15, 3),
     "plus max_new_tokens=15 exceed context_length=16: sample at most 14"),
    (lambda m: sample_groups(m, torch.tensor([[1, 20]]), 2, 4, 3), r"must be in \[0, 12\)"),
    (lambda m: train_grpo(m, [[1, 2]], reward_token_7, 3, 1, group_size=1),
     "group_size=1 must be an int >= 2"),
    (lambda m: train_grpo(m, [], reward_token_7, 3, 1), "prompts is empty"),
    (lambda m: train_grpo(m, [[1, 2]], 0.5, 3, 1), "reward=0.5 must be a function"),
    (lambda m: train_grpo(m, [[1, 2]], reward_token_7, 3, 1, beta=0.1),
     "needs a frozen reference other than the policy"),
    (lambda m: train_grpo(m, [[1, 2]], reward_token_7, 3, 1, max_new_tokens=20),
     r"max_new_tokens=20 must be in \[1, 14\]"),
    (lambda m: train_grpo(m, [[1, 2]], lambda i, c: None, 3, 1, max_new_tokens=2),
     r"returned None \(NoneType\) for completion 0: it must return a real number"),
    (lambda m: grpo_loss(LOGPS, LOGPS, torch.tensor([0.0, math.nan, 1.0, 0.0]), MASK),
     "an advantage is nan or inf, so the loss would be nan"),
    (lambda m: train_grpo(m, [list(range(1, 12)) * 2], reward_token_7, 3, 1),
     r"longest prompt is 22 tokens and the model reads 16, which leaves no room for an "
     r"answer: pass prompts of at most 15 tokens"),
    (lambda m: train_grpo(m, torch.tensor([[1, 2]]), reward_token_7, 3, 1),
     r"prompts must be a list of token-id lists, got Tensor .*prompts.tolist\(\)"),
    (lambda m: train_grpo(m, [[1, 2.5]], reward_token_7, 3, 1),
     "prompts must hold token ids"),
    (lambda m: train_grpo(m, [[1, 12]], reward_token_7, 3, 1),
     r"token ids in \[1, 12\], outside the model's vocabulary \[0, 12\)"),
    (lambda m: train_grpo(m, [[1, 2]], reward_token_7, 3, 1, max_new_tokens=0),
     "max_new_tokens=0 must be a positive int"),
    (lambda m: grpo_loss(LOGPS, LOGPS, ADV, MASK * 0.5),
     r"mask holds values other than 0 and 1 \(\[0.5\]"),
    (lambda m: mixed_groups([1.0, 0.0], 2), "mixed_groups: rewards must be a 1-D float"),
    (lambda m: mixed_groups(torch.tensor([math.nan, 0.0]), 2), "a reward is nan or inf"),
    (lambda m: completion_logps(m, torch.tensor([[1, 2]]), [[3, 4]]),
     "prompts and completions must be tensors of token ids, got Tensor and list"),
    (lambda m: sample_groups(m, torch.tensor([[1, 2]]), 2, 3, 3, generator=5),
     "generator=5 must be a torch.Generator"),
    (lambda m: train_grpo(m, [[1, 2]], reward_token_7, 3, 1, epsilon=0.0),
     r"train_grpo.epsilon=0.0 must be in \(0, 1\)"),
    (lambda m: train_grpo(m, [[1, 2]], reward_token_7, 3, 1, seed=1.5),
     "train_grpo.seed=1.5 must be an int"),
    (lambda m: train_grpo(m.requires_grad_(False), [[1, 2]], reward_token_7, 3, 1),
     r"no weight of the policy requires a gradient, .*p\.requires_grad_\(True\)"),
    (lambda m: train_grpo(m, [[1, 2]], reward_token_7, 3, 1, beta=0.1,
                          reference=tiny_gpt(vocab=20)),
     "the reference reads 20 tokens, the policy 12"),
    (lambda m: grpo_loss(LOGPS, LOGPS, ADV, MASK, num_items=5),
     "num_items=5 is fewer than the 12 completion tokens of this slice"),
    (lambda m: mixed_groups(torch.tensor([]), 4), "mixed_groups: rewards is empty"),
    (lambda m: group_advantages(torch.tensor([]), 4), "group_advantages: rewards is empty"),
    (lambda m: grpo_loss(LOGPS[:0], LOGPS[:0], ADV[:0], MASK[:0], loss_type="grpo"),
     r"logps of shape \(0, 3\) holds no token, so the loss would be nan"),
    (lambda m: grpo_loss(LOGPS, LOGPS, ADV.bool(), MASK),
     "advantages holds torch.bool: log-probabilities and advantages are real numbers"),
    (lambda m: grpo_loss(LOGPS, LOGPS, ADV.long(), MASK), "advantages holds torch.int64"),
    (lambda m: grpo_loss(LOGPS.long(), LOGPS.long(), ADV, MASK),
     r"logps holds torch.int64: .*loss with no gradient.*pass float tensors"),
    (lambda m: grpo_loss(LOGPS, LOGPS, ADV, MASK, loss_type="grpo", num_items=12),
     "num_items=12 is used by loss_type='dapo' only, not 'grpo', which would ignore it"),
    (lambda m: grpo_loss(LOGPS, LOGPS, ADV, MASK, max_completion_length=3),
     "max_completion_length=3 is used by loss_type='dr_grpo' only, not 'dapo'"),
    (lambda m: grpo_loss(LOGPS, LOGPS, ADV, MASK, loss_type="dr_grpo"),
     "'dr_grpo' divides by the constant N \\* max_completion_length: pass"),
    (lambda m: grpo_loss(LOGPS, LOGPS, ADV, MASK, loss_type="dr_grpo",
                         max_completion_length=2),
     "max_completion_length=2 is less than the completions' width C=3"),
    (lambda m: sample_groups(m, torch.tensor([[True, False]]), 2, 3, 3),
     "prompts must be a .* tensor of integer token ids"),
    (lambda m: completion_logps(m, torch.tensor([[1, 2]]), torch.tensor([[3, 12]])),
     r"completions hold token ids in \[3, 12\], outside the model's vocabulary \[0, 12\)"),
    (lambda m: completion_logps(m, torch.tensor([[-1, 2]]), torch.tensor([[3, 4]])),
     r"prompts hold token ids in \[-1, 2\], outside"),
    (lambda m: completion_logps(m, torch.tensor([[1, 2]]), torch.tensor([[3.0, 4.0]])),
     "completions hold torch.float32, not token ids"),
    (lambda m: check_reward(10**400, 3),
     r"returned 1000.* \(int\) for completion 3: it must return a real number that "
     "float32 holds finite"),
    (lambda m: train_grpo(m, [[1, 2]], lambda i, c: 1e300, 3, 1, max_new_tokens=2),
     r"returned 1e\+300 \(float\) for completion 0: .*float32 holds finite \(\|r\| <= "
     r"3.4e\+38.*scaled down"),
    (lambda m: group_advantages(torch.tensor([3e38, 3e38, 0.0, 0.0]), 4),
     r"rewards up to 3e\+38 overflow torch.float32 in their group's mean or standard "
     r"deviation, .*scale the rewards down"),
    (lambda m: grpo_loss(LOGPS, LOGPS, ADV, MASK, ref_logps=LOGPS),
     r"ref_logps is given but beta=0, which would ignore it .*or leave ref_logps None"),
    (lambda m: train_grpo(m, [[1, 2]], reward_token_7, 3, 1, reference=tiny_gpt()),
     r"a reference is given but beta=0, .*pass beta > 0 .*or leave reference None"),
    (lambda m: grpo_loss(LOGPS, LOGPS, ADV, MASK * 0),
     r"mask of shape \(4, 3\) is all 0, so no token .*pass the mask sample_groups"),
    (lambda m: grpo_loss(LOGPS, LOGPS, ADV.clone().requires_grad_(), MASK),
     r"advantages carry a gradient \(requires_grad=True\): .*advantages.detach\(\)"),
    (lambda m: completion_logps(m, torch.ones(2, 10, dtype=torch.long),
                                torch.ones(2, 8, dtype=torch.long)),
     r"prompts of P=10 tokens and completions of C=8 need P \+ C - 1 = 17 positions, and "
     r"the model reads T=16: .*\(P \+ C <= 17\)"),
    (lambda m: expected_weight(1.0, 8), r"expected_weight.p=1.0 must be in \(0, 1\)"),
    (lambda m: expected_weight(0.5, 1), "expected_weight.group_size=1 must be an int >= 2"),
    (lambda m: expected_weight(0.5, 8, scale="batch"),
     "expected_weight: scale='batch' must be 'group'"),
    (lambda m: check_reward(Decimal("0.5"), 0), r"returned Decimal\('0.5'\) \(Decimal\) .*"
                                                r"return float\(...\) of it"),
    (lambda m: train_grpo(m, [[1, 2]], reward_token_7, 3, 1, loss_type="bnpo"),
     r"train_grpo: loss_type='bnpo' must be one of \('dapo', 'grpo', 'dr_grpo'\)"),
])
def test_grpo_names_a_bad_value_and_the_fix(call, fragment):
    with pytest.raises(ValueError, match=fragment):
        call(tiny_gpt())


@pytest.mark.parametrize("name", ["old_logps", "ref_logps"])
def test_log_probabilities_that_carry_a_gradient_are_refused_not_a_silent_zero(name):
    logps = torch.randn(4, 3, requires_grad=True)
    given = dict(old_logps=logps.detach(), ref_logps=logps.detach() - 0.1) | {name: logps}
    # Without the check, old_logps = logps (undetached) makes the ratio exp(0) = 1 whatever
    # the weights: the clipped loss then has a zero gradient (REINFORCE's is not zero).
    with pytest.raises(ValueError, match=fr"{name} carries a gradient .* logps.detach\(\)"):
        grpo_loss(logps, given["old_logps"], ADV, MASK, beta=0.1,
                  ref_logps=given["ref_logps"])


def test_a_reward_is_any_real_number_a_float_holds():
    values = (Fraction(1, 4), np.float32(0.25), 2**60, True)
    assert [check_reward(x, 0) for x in values] == [0.25, 0.25, 2.0**60, 1.0]


def test_a_reward_as_a_numpy_bool_is_its_number():
    runs = [train_grpo(tiny_gpt(), [[1, 2]], reward, 3, 1, group_size=4, max_new_tokens=3)
            for reward in (lambda i, c: np.bool_(7 in c), lambda i, c: 7 in c)]
    assert runs[0] == runs[1]


@pytest.mark.parametrize("clip", [math.nan, math.inf, -1.0, 0.0, "1"])
def test_train_grpo_refuses_a_clip_that_would_break_or_freeze_the_weights(clip):
    model = tiny_gpt()
    weights = [p.clone() for p in model.parameters()]
    with pytest.raises(ValueError, match=r"clip=.* must be a finite number > 0: it caps "
                                         r"the gradient's norm .* 1.0 is the default"):
        train_grpo(model, [[1, 2]], reward_token_7, 3, 2, group_size=4, max_new_tokens=3,
                   clip=clip)
    assert all(torch.equal(a, b) for a, b in zip(weights, model.parameters()))


@pytest.mark.parametrize("end_id", [12, -1])
def test_an_end_token_outside_the_vocabulary_is_refused_as_no_answer_could_end(end_id):
    with pytest.raises(ValueError, match=fr"end_id={end_id}"):
        sample_groups(tiny_gpt(), torch.tensor([[1, 2]]), 2, 3, end_id)
    with pytest.raises(ValueError, match=r"end_id=12 is outside the model's vocabulary "
                                         r"\[0, 12\), so no answer could end"):
        train_grpo(tiny_gpt(), [[1, 2]], reward_token_7, 12, 1)


@pytest.mark.parametrize("temperature", [-1.0, 0.0, math.nan, math.inf])
def test_a_temperature_that_is_not_a_finite_positive_number_is_refused(temperature):
    model, prompts, comp = tiny_gpt(), torch.tensor([[1, 2]]), torch.tensor([[3, 4]])
    rule = r"temperature=.* must be a finite number > 0: the logits are divided by it"
    with pytest.raises(ValueError, match="completion_logps: " + rule):
        completion_logps(model, prompts, comp, temperature)
    for call in (lambda: sample_groups(model, prompts, 2, 3, 3, temperature),
                 lambda: train_grpo(model, [[1, 2]], reward_token_7, 3, 1,
                                    temperature=temperature)):
        with pytest.raises(ValueError, match=rule) as error:
            call()
        assert "greedy" not in str(error.value)  # neither function has a greedy option


def test_numpy_numbers_are_taken_as_the_python_numbers_they_hold():
    model, prompts, comp = tiny_gpt(), torch.tensor([[1, 2]]), torch.tensor([[3, 4]])
    torch.testing.assert_close(completion_logps(model, prompts, comp, np.float32(0.5)),
                               completion_logps(model, prompts, comp, 0.5))
    runs = [train_grpo(tiny_gpt(), [[1, 2], [4, 5]], reward_token_7, end, 2, lr=lr,
                       clip=clip, group_size=4, batch_size=2, max_new_tokens=3,
                       temperature=t)
            for end, lr, clip, t in [(np.int64(3), np.float32(0.25), np.float32(0.5),
                                      np.float64(0.75)), (3, 0.25, 0.5, 0.75)]]
    assert runs[0] == runs[1]


@pytest.mark.parametrize("updates, steps, seen", [
    (1, 3, "at step 1: the logits of its answers are not finite"),  # sampling after it
    (2, 3, "at step 0: the GRPO loss is nan"),  # the second update of the same answers
    (1, 1, "at step 0: the logits of its prompts are not finite"),  # the last update
])
def test_a_diverging_lr_is_named_and_the_weights_before_its_update_are_put_back(
        updates, steps, seen):
    model = tiny_gpt()
    first = [p.clone() for p in model.parameters()]
    with pytest.raises(FloatingPointError, match=fr"train_grpo: training diverged {seen} "
                       r".* lr=1e\+30 is the likely cause: lower it .* back to its weights "
                       r"from before that update, in eval mode"):
        train_grpo(model, [[1, 2], [4, 5]], reward_token_7, 3, steps, lr=1e30, group_size=4,
                   batch_size=2, max_new_tokens=4, updates=updates)
    # the first update diverged: the weights are the ones before it, the initial ones
    assert all(torch.equal(a, b) for a, b in zip(first, model.parameters()))
    assert not model.training


def test_a_policy_broken_before_training_is_not_blamed_on_lr():
    model = tiny_gpt()
    with torch.no_grad():
        model.lm_head.weight[0, 0] = math.nan
    with pytest.raises(ValueError, match="the model's weights or inputs are broken") as err:
        train_grpo(model, [[1, 2]], reward_token_7, 3, 1, max_new_tokens=3)
    assert "lr" not in str(err.value)
