"""Chapter 14's GRPO loss agrees with TRL's ``GRPOTrainer.compute_loss`` (1.16 or later:
older versions are skipped) to 1e-6, given the same inputs: the loss and every gradient,
for ``loss_type="dapo"`` (TRL's default), ``"grpo"`` and ``"dr_grpo"``, on- and off-policy,
with and without the KL term. A random 2-layer ``GPT2LMHeadModel`` and the
book's ``GPT`` hold the same weights (``from_hf``); our gradients are mapped to GPT-2's
layout (``to_hf_state_dict``). ``bf16=False``: TRL's default bf16 on a CPU moves the
per-token log-probabilities by ~4e-4.

The scope: TRL runs with its model in eval mode (``hf.eval()``, no dropout), so its
``_compute_loss`` takes the eval branch of its normaliser: one batch, no gradient
accumulation, ``steps_per_generation`` not applied. Its training-mode branch (which divides
further by the accumulation steps, and rescales ``num_items_in_batch`` to one accumulation
window) is not compared here. The advantages' test does not run TRL's code: TRL computes
them inline in ``_generate_and_score_completions``, with no function to call; the test
re-writes that formula and calls only TRL's ``nanstd``."""

from __future__ import annotations

import copy

import pytest
import torch

from gpt_from_scratch.grpo import grpo_loss
from gpt_from_scratch.grpo_advantages import group_advantages
from gpt_from_scratch.grpo_sampling import completion_logps
from gpt_from_scratch.hf_weights import from_hf, to_hf_state_dict
from tests.test_assistant import hf_chat_tokenizer, random_gpt2

REASON = "TRL 1.15+ needs Python 3.11 and is not installed here (the oldest-versions job)"
TRL = "1.16"  # the version the chapter names: an older one (the extra allows 0.29) skips
REWARDS = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0]  # 2 groups of 4
LENGTHS = [4, 7, 5, 6, 7, 4, 5, 6]  # completion lengths, C = 7


def grpo_batch(seed: int):
    g = torch.Generator().manual_seed(seed)
    prompts = torch.randint(50_257, (8, 5), generator=g)  # (N, P): one prompt length
    completions = torch.randint(50_257, (8, 7), generator=g)  # (N, C)
    mask = (torch.arange(7)[None] < torch.tensor(LENGTHS)[:, None]).long()  # (N, C)
    completions = completions.masked_fill(mask == 0, 50_260)  # TRL pads after the end
    return prompts, completions, mask


def trl_loss(tmp_path, hf, loss_type: str, beta: float, prompts, completions, mask, advantages,
             old=None, ref=None, max_completion_length: int = 7) -> torch.Tensor:
    trl = pytest.importorskip("trl", minversion=TRL, reason=REASON)
    datasets = pytest.importorskip("datasets", reason=REASON)
    args = trl.GRPOConfig(output_dir=str(tmp_path), report_to=[], use_cpu=True, bf16=False,
                          loss_type=loss_type, beta=beta, per_device_train_batch_size=8,
                          num_generations=4, max_completion_length=max_completion_length)
    trainer = trl.GRPOTrainer(model=hf, reward_funcs=lambda completions, **kw: [0.0] * len(
        completions), args=args, train_dataset=datasets.Dataset.from_dict({"prompt": ["a"] * 8}),
        processing_class=hf_chat_tokenizer())
    inputs = dict(prompt_ids=prompts, prompt_mask=torch.ones_like(prompts),
                  completion_ids=completions, completion_mask=mask, advantages=advantages,
                  num_items_in_batch=mask.sum())
    if old is not None:
        inputs["old_per_token_logps"] = old
    if ref is not None:
        inputs["ref_per_token_logps"] = ref
    hf.eval()  # no dropout, and TRL's eval normaliser: "dapo" by num_items_in_batch alone
    return trainer.compute_loss(hf, inputs)


CASES = [(loss_type, policy, beta) for loss_type in ("dapo", "grpo", "dr_grpo")
         for policy in ("on", "off") for beta in (0.0, 0.1)]


@pytest.mark.parametrize("loss_type, policy, beta", CASES)
def test_grpo_loss_and_gradients_equal_trl(tmp_path, loss_type, policy, beta):
    pytest.importorskip("trl", minversion=TRL, reason=REASON)
    random_gpt2(0).save_pretrained(tmp_path / "model")  # TRL loads its reference from a path
    hf = type(random_gpt2(0)).from_pretrained(tmp_path / "model")
    ours = from_hf(copy.deepcopy(hf)).eval()
    prompts, completions, mask = grpo_batch(1)
    advantages = group_advantages(torch.tensor(REWARDS), 4)  # (N,)
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        logps = completion_logps(ours, prompts, completions)  # (N, C)
    old = ref = None
    if policy == "off":  # the clip binds on some tokens
        old = logps + 0.3 * torch.randn(logps.shape, generator=g)
    if beta:
        ref = logps + 0.5 * torch.randn(logps.shape, generator=g)
    longest = 9 if loss_type == "dr_grpo" else None  # TRL's cap, wider than C = 7
    theirs = trl_loss(tmp_path, hf, loss_type, beta, prompts, completions, mask, advantages,
                      old, ref, longest or 7)
    theirs.backward()
    logps = completion_logps(ours, prompts, completions)
    out = grpo_loss(logps, logps.detach() if old is None else old, advantages, mask,
                    loss_type=loss_type, beta=beta, ref_logps=ref,
                    max_completion_length=longest)
    if longest:  # TRL divides by its setting, not by the completions' width C
        width = grpo_loss(logps.detach(), logps.detach() if old is None else old,
                          advantages, mask, loss_type=loss_type, beta=beta, ref_logps=ref,
                          max_completion_length=7).loss
        assert abs(width.item() - theirs.item()) > 1e-3
    out.loss.backward()
    assert (out.clipped > 0) == (policy == "off")
    grads = copy.deepcopy(ours)
    for p, q in zip(ours.parameters(), grads.parameters()):
        q.data = p.grad
    mapped = to_hf_state_dict(grads)
    named = dict(hf.named_parameters())
    worst = max((mapped[name] - p.grad).abs().max().item() for name, p in named.items())
    print(f"{loss_type} {policy}-policy beta={beta}: loss TRL {theirs.item():+.8f} ours "
          f"{out.loss.item():+.8f} |dloss| {abs(theirs.item() - out.loss.item()):.1e} "
          f"max |dgrad| {worst:.1e} over {len(named)} tensors")
    torch.testing.assert_close(out.loss, theirs.detach(), rtol=0, atol=1e-6)
    assert worst < 1e-6 and len(named) == 28


@pytest.mark.parametrize("scale", ["group", None])
def test_group_advantages_equal_trls_formula_with_its_own_std(scale):
    """TRL 1.16's ``_generate_and_score_completions`` (grpo_trainer.py) computes the
    advantages inline, with no function of their own to call, so this test re-writes its
    formula: each reward minus its group's ``nanmean``, divided by its group's ``nanstd``
    (Bessel's correction) plus 1e-4 where ``scale_rewards="group"``; the mean only where
    ``"none"``. Only TRL's ``nanstd`` is TRL's code here, so a std of another convention or
    another epsilon fails; a change to TRL's formula around it would not be seen."""
    pytest.importorskip("trl", minversion=TRL, reason=REASON)
    utils = pytest.importorskip("trl.trainer.utils", reason=REASON)
    g = torch.Generator().manual_seed(0)
    rewards = torch.rand(24, generator=g).round(decimals=1)  # (N,) = 6 groups of 4
    rewards[4:8] = 0.5  # a group of equal rewards: advantages 0
    grouped = rewards.view(-1, 4)  # (B, G)
    theirs = rewards - torch.nanmean(grouped, dim=1).repeat_interleave(4)
    if scale == "group":
        theirs = theirs / (utils.nanstd(grouped, dim=1).repeat_interleave(4) + 1e-4)
    ours = group_advantages(rewards, 4, scale=scale)
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=0)
    assert torch.equal(ours[4:8], torch.zeros(4))
