"""Chapter 7: the sampling filters, generate() and its KV cache."""

from __future__ import annotations

import math

import pytest
import torch

from gpt_from_scratch.generate import generate, next_token, top_k_filter, top_p_filter
from gpt_from_scratch.hf_weights import to_hf_config, to_hf_state_dict
from gpt_from_scratch.model import GPT, GPTConfig

NEG_INF = float("-inf")


def _tiny_model(context_length: int = 16, vocab_size: int = 50, seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    config = GPTConfig(vocab_size=vocab_size, context_length=context_length, d_model=32, n_layers=2, n_heads=4,
                       dropout=0.1)
    model = GPT(config)
    with torch.no_grad():  # larger weights than GPT-2's init, so the logits are far from uniform
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.3, generator=torch.Generator().manual_seed(seed + p.numel()))
    return model


# ---------------------------------------------------------------------------------------------- top-k


def test_top_k_keeps_the_k_largest_of_each_row():
    logits = torch.randn(4, 30, generator=torch.Generator().manual_seed(1))
    out = top_k_filter(logits, 5)
    for row, filtered in zip(logits, out):
        largest = set(sorted(range(30), key=lambda i: -row[i].item())[:5])
        kept = {i for i in range(30) if filtered[i] != NEG_INF}
        assert kept == largest
        assert torch.equal(filtered[sorted(kept)], row[sorted(kept)])  # kept logits unchanged


def test_top_k_keeps_ties_and_does_not_modify_its_input():
    logits = torch.tensor([1.0, 3.0, 2.0, 2.0, 0.0])
    before = logits.clone()
    out = top_k_filter(logits, 2)  # 3.0 and both 2.0s tie for second place
    assert torch.equal(logits, before)
    assert torch.equal(out, torch.tensor([NEG_INF, 3.0, 2.0, 2.0, NEG_INF]))


def test_top_k_at_least_the_vocabulary_keeps_everything():
    logits = torch.randn(2, 7, generator=torch.Generator().manual_seed(2))
    assert torch.equal(top_k_filter(logits, 7), logits)
    assert torch.equal(top_k_filter(logits, 100), logits)


@pytest.mark.parametrize("k", [0, -1, 2.5, True])
def test_top_k_rejects_bad_k(k):
    with pytest.raises(ValueError, match="top_k must be an integer >= 1"):
        top_k_filter(torch.zeros(3), k)


def test_top_k_matches_hugging_face():
    from transformers.generation.logits_process import TopKLogitsWarper

    logits = torch.randn(3, 100, generator=torch.Generator().manual_seed(3))
    for k in (1, 10, 99):
        expected = TopKLogitsWarper(top_k=k)(None, logits.clone())
        torch.testing.assert_close(top_k_filter(logits, k), expected)


# ---------------------------------------------------------------------------------------------- top-p


def _nucleus_by_hand(row: list[float], p: float) -> set[int]:
    """Tokens by decreasing probability until their total reaches p (in exact float64 arithmetic)."""
    z = sum(math.exp(v) for v in row)
    probs = [math.exp(v) / z for v in row]
    kept, total = set(), 0.0
    for i in sorted(range(len(row)), key=lambda i: -probs[i]):
        if total >= p:
            break
        kept.add(i)
        total += probs[i]
    return kept


@pytest.mark.parametrize("p", [0.05, 0.3, 0.5, 0.9, 0.99])
def test_top_p_keeps_the_smallest_set_reaching_p(p):
    logits = 2.0 * torch.randn(5, 40, generator=torch.Generator().manual_seed(4))
    out = top_p_filter(logits, p)
    for row, filtered in zip(logits, out):
        kept = {i for i in range(40) if filtered[i] != NEG_INF}
        assert kept == _nucleus_by_hand(row.tolist(), p)
        assert torch.equal(filtered[sorted(kept)], row[sorted(kept)])


def test_top_p_worked_example():
    logits = torch.log(torch.tensor([0.05, 0.5, 0.15, 0.3]))
    kept = lambda p: (top_p_filter(logits, p) != NEG_INF).nonzero().flatten().tolist()  # noqa: E731
    assert kept(0.4) == [1]  # 0.5 alone reaches 0.4
    assert kept(0.7) == [1, 3]  # 0.5 + 0.3 crosses 0.7
    assert kept(0.9) == [1, 2, 3]  # 0.5 + 0.3 + 0.15 crosses 0.9
    assert kept(1.0) == [0, 1, 2, 3]


def test_top_p_always_keeps_the_most_likely_token_and_ties():
    logits = torch.tensor([[0.0, 5.0, 1.0], [2.0, 2.0, 2.0]])
    out = top_p_filter(logits, 1e-6)
    assert torch.equal(out[0], torch.tensor([NEG_INF, 5.0, NEG_INF]))
    assert torch.equal(out[1], logits[1])  # three equally likely tokens: none can be preferred


def test_top_p_matches_hugging_face():
    from transformers.generation.logits_process import TopPLogitsWarper

    logits = 3.0 * torch.randn(4, 200, generator=torch.Generator().manual_seed(5))
    for p in (0.1, 0.6, 0.95):
        expected = TopPLogitsWarper(top_p=p)(None, logits.clone())
        torch.testing.assert_close(top_p_filter(logits, p), expected)


@pytest.mark.parametrize("p", [0.0, -0.1, 1.5, float("nan")])
def test_top_p_rejects_p_outside_0_1(p):
    with pytest.raises(ValueError, match=r"top_p must be in \(0, 1\]"):
        top_p_filter(torch.zeros(3), p)


# ---------------------------------------------------------------------------------------------- sampling


def test_next_token_samples_from_the_tempered_filtered_distribution():
    logits = torch.log(torch.tensor([0.1, 0.2, 0.3, 0.4]))[None].expand(20_000, 4)  # (B, V): one draw per row
    generator = torch.Generator().manual_seed(6)

    def frequencies(**options):
        ids = next_token(logits, generator=generator, **options)[:, 0]
        return torch.bincount(ids, minlength=4).float() / len(ids)

    p = torch.tensor([0.1, 0.2, 0.3, 0.4])
    torch.testing.assert_close(frequencies(), p, atol=0.015, rtol=0)
    tempered = p**2 / (p**2).sum()  # temperature 0.5 squares the probabilities
    torch.testing.assert_close(frequencies(temperature=0.5), tempered, atol=0.015, rtol=0)
    torch.testing.assert_close(frequencies(top_k=2), torch.tensor([0, 0, 3 / 7, 4 / 7]), atol=0.015, rtol=0)
    torch.testing.assert_close(frequencies(top_p=0.6), torch.tensor([0, 0, 3 / 7, 4 / 7]), atol=0.015, rtol=0)
    assert torch.equal(next_token(logits[:3], greedy=True), torch.full((3, 1), 3))


def test_next_token_checks_its_temperature_and_survives_extreme_ones():
    logits = torch.randn(300, 50, generator=torch.Generator().manual_seed(0))  # (B, V)
    for bad in (math.inf, 0.0, -1.0, math.nan, True, "1"):
        with pytest.raises(ValueError, match="temperature must be a finite number > 0"):
            next_token(logits, temperature=bad, top_k=5)
    top5 = logits.topk(5, dim=-1).indices  # (B, 5)
    drawn = next_token(logits, temperature=1e40, top_k=5, generator=torch.Generator().manual_seed(1))
    assert (drawn == top5).any(dim=-1).all()  # all logits round to one value, yet only the top 5 are drawn
    tiny = next_token(logits, temperature=1e-40, generator=torch.Generator().manual_seed(2))
    assert torch.equal(tiny, next_token(logits, greedy=True))


# ---------------------------------------------------------------------------------------------- generate


def test_generate_keeps_the_prompt_and_adds_tokens():
    model = _tiny_model()
    idx = torch.randint(50, (2, 5), generator=torch.Generator().manual_seed(7))
    out = generate(model, idx, 9, generator=torch.Generator().manual_seed(8))
    assert out.shape == (2, 14) and out.dtype == torch.long
    assert torch.equal(out[:, :5], idx)
    assert ((out >= 0) & (out < 50)).all()
    assert torch.equal(generate(model, idx, 0), idx)


@pytest.mark.parametrize("prompt_length,new_tokens", [(3, 10), (5, 40), (20, 12)])  # within, past, beyond T_max
def test_kv_cache_gives_the_same_greedy_tokens(prompt_length, new_tokens):
    model = _tiny_model(context_length=16)
    idx = torch.randint(50, (3, prompt_length), generator=torch.Generator().manual_seed(9))
    slow = generate(model, idx, new_tokens, greedy=True, use_cache=False)
    fast = generate(model, idx, new_tokens, greedy=True, use_cache=True)
    assert torch.equal(fast, slow)


@pytest.mark.parametrize("options", [{}, {"temperature": 0.7, "top_k": 10}, {"temperature": 1.3, "top_p": 0.9}])
def test_kv_cache_gives_the_same_sampled_tokens(options):
    model = _tiny_model(context_length=16)
    idx = torch.randint(50, (2, 4), generator=torch.Generator().manual_seed(10))
    slow = generate(model, idx, 40, use_cache=False, generator=torch.Generator().manual_seed(11), **options)
    fast = generate(model, idx, 40, use_cache=True, generator=torch.Generator().manual_seed(11), **options)
    assert torch.equal(fast, slow)
    again = generate(model, idx, 40, generator=torch.Generator().manual_seed(11), **options)
    assert torch.equal(again, fast)


def test_kv_cache_feeds_one_token_per_step_until_the_context_is_full():
    model = _tiny_model(context_length=16)
    lengths = []
    model.wte.register_forward_pre_hook(lambda module, args: lengths.append(args[0].size(1)))
    generate(model, torch.zeros(1, 5, dtype=torch.long), 20, greedy=True)
    # prefill 5; then one token at a time while the cache has room (positions 5..15); then the window
    # slides, every position changes, and each step recomputes the newest 16 tokens
    assert lengths == [5] + [1] * 11 + [16] * 8
    lengths.clear()
    generate(model, torch.zeros(1, 5, dtype=torch.long), 20, greedy=True, use_cache=False)
    assert lengths == [min(5 + i, 16) for i in range(20)]


def test_greedy_generate_matches_hugging_face():
    from transformers import GPT2LMHeadModel

    model = _tiny_model(context_length=32).eval()
    hf = GPT2LMHeadModel(to_hf_config(model))
    hf.load_state_dict(to_hf_state_dict(model))
    hf.eval()
    idx = torch.randint(50, (2, 6), generator=torch.Generator().manual_seed(12))
    ours = generate(model, idx, 20, greedy=True)
    theirs = hf.generate(idx, attention_mask=torch.ones_like(idx), max_new_tokens=20, do_sample=False,
                         pad_token_id=0)
    assert torch.equal(ours, theirs)


def test_generate_restores_the_training_mode():
    model = _tiny_model()
    model.train()
    generate(model, torch.zeros(1, 2, dtype=torch.long), 3, greedy=True)
    assert model.training
    model.eval()
    generate(model, torch.zeros(1, 2, dtype=torch.long), 3, greedy=True)
    assert not model.training


def test_generate_in_training_mode_still_turns_dropout_off():
    model = _tiny_model().train()  # dropout 0.1: in training mode two greedy runs would differ
    idx = torch.zeros(1, 3, dtype=torch.long)
    assert torch.equal(generate(model, idx, 15, greedy=True), generate(model.eval(), idx, 15, greedy=True))


@pytest.mark.parametrize("kwargs,message", [
    ({"temperature": 0.0}, "temperature must be a finite number > 0"),
    ({"temperature": -1.0}, "temperature must be a finite number > 0"),
    ({"top_k": 0}, "top_k must be an integer >= 1"),
    ({"top_p": 0.0}, r"top_p must be in \(0, 1\]"),
    ({"top_p": 1.01}, r"top_p must be in \(0, 1\]"),
    ({"max_new_tokens": -1}, "max_new_tokens must be an integer >= 0"),
])
def test_generate_rejects_bad_options(kwargs, message):
    model = _tiny_model()
    options = {"max_new_tokens": 2} | kwargs
    with pytest.raises(ValueError, match=message):
        generate(model, torch.zeros(1, 2, dtype=torch.long), **options)


def test_a_generator_on_another_device_than_the_model_gets_a_clear_error():
    """A reader on a GPU who seeds ``torch.Generator()`` (a CPU one) is told how to make it on the GPU.
    A stand-in for the CUDA generator: the check must come before torch would use it."""
    class GPUGenerator:
        device = torch.device("cuda", 0)

    model = _tiny_model()
    with pytest.raises(ValueError, match=r"generator is on cuda:0 but the logits are on cpu: .*"
                                         r"torch\.Generator\('cpu'\)\.manual_seed\(seed\)"):
        generate(model, torch.zeros(1, 2, dtype=torch.long), 3, generator=GPUGenerator())
    greedy = generate(model, torch.zeros(1, 2, dtype=torch.long), 3, greedy=True, generator=GPUGenerator())
    assert greedy.shape == (1, 5)  # greedy draws nothing: its generator is never used


def test_greedy_needs_no_temperature_and_1d_prompts_get_a_clear_error():
    model = _tiny_model()
    out = generate(model, torch.zeros(1, 2, dtype=torch.long), 3, temperature=0.0, greedy=True)
    assert out.shape == (1, 5)
    with pytest.raises(ValueError, match=r"idx\[None\]"):
        generate(model, torch.zeros(4, dtype=torch.long), 3)
