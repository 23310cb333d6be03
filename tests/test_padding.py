"""Chapter 7's padding masks: a left-padded batch gives each prompt the logits and the greedy tokens it
gets alone, and the same as Hugging Face's GPT2LMHeadModel with an attention mask and left padding."""

import pytest
import torch
from torch.testing import assert_close

from gpt_from_scratch.generate import generate
from gpt_from_scratch.hf_weights import from_hf
from gpt_from_scratch.model import GPT
from gpt_from_scratch.padding import (
    generate_padded,
    left_pad,
    padded_forward,
    padding_causal_mask,
    position_ids,
)
from tests.test_model import hf_gpt2

PROMPTS = [[5, 17, 3, 99, 42, 8, 1], [250], [7, 7, 7, 100], [30, 31, 32, 33, 34, 35, 36]]


@pytest.fixture(scope="module")
def pair():
    hf = hf_gpt2(n_layers=2, d_model=48, n_heads=4, context_length=32, vocab_size=257)
    return hf, from_hf(hf).eval()


def test_left_pad_mask_and_positions():
    idx, mask = left_pad([[4, 5, 6], [9]], pad_id=0)
    assert idx.tolist() == [[4, 5, 6], [0, 0, 9]]
    assert mask.tolist() == [[True, True, True], [False, False, True]]
    assert position_ids(mask).tolist() == [[0, 1, 2], [0, 0, 0]]
    combined = padding_causal_mask(mask)  # (B, 1, T, T)
    assert combined.shape == (2, 1, 3, 3)
    assert combined[1, 0].tolist() == [[False, False, False], [False, False, False],
                                       [False, False, True]]


@torch.no_grad()
def test_padded_logits_equal_each_prompt_alone(pair):
    _, model = pair
    idx, mask = left_pad(PROMPTS, pad_id=0)
    logits = padded_forward(model, idx, mask)  # (B, T, V)
    assert torch.isfinite(logits).all()
    for b, prompt in enumerate(PROMPTS):
        alone, _ = model(torch.tensor([prompt]))
        assert_close(logits[b, mask[b]], alone[0], atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_the_pad_id_does_not_matter(pair):
    _, model = pair
    idx0, mask = left_pad(PROMPTS, pad_id=0)
    idx1, _ = left_pad(PROMPTS, pad_id=123)
    assert_close(padded_forward(model, idx0, mask)[mask], padded_forward(model, idx1, mask)[mask])


def test_greedy_batch_equals_one_prompt_at_a_time(pair):
    _, model = pair
    batched = generate_padded(model, PROMPTS, max_new_tokens=12, greedy=True)
    for prompt, row in zip(PROMPTS, batched):
        alone = generate(model, torch.tensor([prompt]), max_new_tokens=12, greedy=True)
        assert row == alone[0].tolist()


@torch.no_grad()
def test_logits_and_greedy_tokens_equal_hugging_face_with_left_padding(pair):
    hf, model = pair
    idx, mask = left_pad(PROMPTS, pad_id=0)
    hf_logits = hf(idx, attention_mask=mask.long(), position_ids=position_ids(mask)).logits
    assert_close(padded_forward(model, idx, mask)[mask], hf_logits[mask], atol=1e-4, rtol=1e-4)
    hf_tokens = hf.generate(idx, attention_mask=mask.long(), max_new_tokens=10, do_sample=False,
                            pad_token_id=0)  # (B, T + 10), left padding kept
    ours = generate_padded(model, PROMPTS, max_new_tokens=10, greedy=True)
    for b, row in enumerate(ours):
        real = torch.cat([mask[b], torch.ones(10, dtype=torch.bool)])  # drop the left pads
        assert row == hf_tokens[b, real].tolist()


def test_bad_inputs_raise_clear_errors(pair):
    _, model = pair
    with pytest.raises(ValueError, match="at least one token"):
        left_pad([[1, 2], []])
    with pytest.raises(ValueError, match="context_length=32"):
        generate_padded(model, PROMPTS, max_new_tokens=30, greedy=True)
    idx, mask = left_pad(PROMPTS)
    with pytest.raises(ValueError, match="boolean tensor of idx's shape"):
        padded_forward(model, idx, mask.long())


def test_a_prompt_longer_than_the_context_is_told_to_shorten_not_to_generate_fewer(pair):
    _, model = pair  # context_length=32; the advice was "generate at most -4 tokens"
    with pytest.raises(ValueError, match="shorten the prompts to fewer than 32 tokens"):
        generate_padded(model, [[1] * 36], max_new_tokens=4, greedy=True)


@pytest.mark.parametrize("pad_id", [-1, 257, 1.5])
def test_a_pad_id_outside_the_vocabulary_is_named(pair, pad_id):
    _, model = pair
    with pytest.raises(ValueError, match=rf"pad_id={pad_id!r} must be a token id in \[0, 257\)"):
        generate_padded(model, PROMPTS, max_new_tokens=2, pad_id=pad_id, greedy=True)


@pytest.mark.parametrize("bad", [257, -3])
def test_a_prompt_id_outside_the_vocabulary_is_named(pair, bad):
    _, model = pair
    prompts = [[1, 2], [4, bad, 5]]
    with pytest.raises(ValueError, match=rf"prompt 1 has id {bad} at position 1, outside"):
        generate_padded(model, prompts, max_new_tokens=2, greedy=True)
