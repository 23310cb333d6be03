"""Tests for Chapter 16's tiled attention: FlashAttention's forward pass equals attention.

References are PyTorch's own (``F.scaled_dot_product_attention``, ``torch.logsumexp``,
``torch.softmax``) and the book's GPT; a deliberately wrong update fails the same checks.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

import gpt_from_scratch.tiled_attention as tiled_module
from gpt_from_scratch import attention
from gpt_from_scratch.model import GPT, GPTConfig
from gpt_from_scratch.tiled_attention import (
    attention_memory,
    measure_peak_bytes,
    online_softmax_step,
    tiled_attention,
)

TOLERANCES = {torch.float32: {"atol": 1e-5, "rtol": 0.0},
              torch.float64: {"atol": 1e-12, "rtol": 0.0}}
# (T, block_q, block_k): blocks that divide T, that do not (a ragged last block), larger
# than T, and of one query or key
SHAPES = [(1, 1, 1), (7, 1, 1), (16, 4, 4), (17, 4, 5), (33, 64, 7), (31, 8, 32),
          (50, 16, 16), (40, 3, 64), (64, 64, 64)]


def qkv(B: int, H: int, T_q: int, T_k: int, d: int = 16, dtype=torch.float32, seed: int = 0,
        d_v: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, T_q, d, generator=g, dtype=dtype)
    k = torch.randn(B, H, T_k, d, generator=g, dtype=dtype)
    v = torch.randn(B, H, T_k, d if d_v is None else d_v, generator=g, dtype=dtype)
    return q, k, v


def bottom_right_mask(T_q: int, T_k: int) -> torch.Tensor:
    """(T_q, T_k), True = may attend: query i is position T_k - T_q + i."""
    return torch.ones(T_q, T_k, dtype=torch.bool).tril(diagonal=T_k - T_q)


# ---------------------------------------------------------------- equal to attention


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("T, block_q, block_k", SHAPES)
def test_equals_sdpa(T, block_q, block_k, causal, dtype):
    q, k, v = qkv(2, 3, T, T, dtype=dtype)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    got = tiled_attention(q, k, v, causal=causal, block_q=block_q, block_k=block_k)
    assert got.dtype == dtype
    assert_close(got, expected, **TOLERANCES[dtype])


@pytest.mark.parametrize("block_q, block_k", [(1, 1), (1, 64), (4, 7), (64, 300)])
def test_decode_one_query_against_a_long_cache(block_q, block_k):
    q, k, v = qkv(2, 2, 1, 200, dtype=torch.float64)
    expected = F.scaled_dot_product_attention(q, k, v)  # the last position sees every key
    for causal in (True, False):
        got = tiled_attention(q, k, v, causal=causal, block_q=block_q, block_k=block_k)
        assert_close(got, expected, **TOLERANCES[torch.float64])


def test_causal_aligns_queries_with_the_last_keys_unlike_sdpa_is_causal():
    q, k, v = qkv(1, 2, 5, 37, dtype=torch.float64)
    got = tiled_attention(q, k, v, block_q=2, block_k=8)
    mask = bottom_right_mask(5, 37)
    assert_close(got, F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
                 **TOLERANCES[torch.float64])
    top_left = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert not torch.allclose(got, top_left)  # is_causal=True: query i sees keys 0..i


@pytest.mark.parametrize("T_q, T_k, block_q, block_k, steps", [
    (64, 64, 16, 16, 1 + 2 + 3 + 4),  # a triangle of blocks, not the 4 x 4 square
    (50, 50, 16, 16, 1 + 2 + 3 + 4),  # the ragged last query block still needs all 4
    (5, 37, 2, 8, 5 + 5 + 5),  # after 32 cached keys every query block sees all 5
    (20, 40, 10, 10, 3 + 4),  # queries at 20..39: key block 30..39 waits for query 30
])
def test_causal_skips_the_key_blocks_after_a_query_blocks_last_query(
        monkeypatch, T_q, T_k, block_q, block_k, steps):
    calls = []

    def counting_step(*args):
        calls.append(1)
        return online_softmax_step(*args)

    monkeypatch.setattr(tiled_module, "online_softmax_step", counting_step)
    q, k, v = qkv(1, 1, T_q, T_k)
    tiled_attention(q, k, v, block_q=block_q, block_k=block_k)
    assert len(calls) == steps
    calls.clear()
    tiled_attention(q, k, v, causal=False, block_q=block_q, block_k=block_k)
    assert len(calls) == math.ceil(T_q / block_q) * math.ceil(T_k / block_k)


def test_value_size_may_differ_from_head_size():
    q, k, v = qkv(2, 2, 19, 19, d=16, d_v=5)
    got = tiled_attention(q, k, v, block_q=4, block_k=6)
    assert got.shape == (2, 2, 19, 5)
    assert_close(got, F.scaled_dot_product_attention(q, k, v, is_causal=True),
                 **TOLERANCES[torch.float32])


@pytest.mark.parametrize("causal, T_q, T_k",
                         [(True, 6, 23), (True, 23, 23), (False, 9, 14)])
def test_lse_is_logsumexp_of_the_scaled_masked_scores(causal, T_q, T_k):
    q, k, v = qkv(2, 3, T_q, T_k, dtype=torch.float64)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, H, T_q, T_k)
    if causal:
        scores = scores.masked_fill(~bottom_right_mask(T_q, T_k), float("-inf"))
    _, lse = tiled_attention(q, k, v, causal=causal, block_q=4, block_k=5, return_lse=True)
    assert lse.shape == (2, 3, T_q)
    assert_close(lse, torch.logsumexp(scores, dim=-1), **TOLERANCES[torch.float64])


def test_online_softmax_step_folds_blocks_into_the_softmax():
    g = torch.Generator().manual_seed(1)
    scores = 3 * torch.randn(4, 20, generator=g, dtype=torch.float64)  # (Q, T_k)
    v = torch.randn(20, 6, generator=g, dtype=torch.float64)  # (T_k, d_v)
    m = torch.full((4, 1), float("-inf"), dtype=torch.float64)
    l, acc = torch.zeros(4, 1, dtype=torch.float64), torch.zeros(4, 6, dtype=torch.float64)
    for start, stop in [(0, 5), (5, 6), (6, 15), (15, 20)]:
        m, l, acc = online_softmax_step(m, l, acc, scores[:, start:stop], v[start:stop])
    m_all = scores.amax(dim=-1, keepdim=True)
    assert_close(m, m_all)
    assert_close(l, torch.exp(scores - m_all).sum(dim=-1, keepdim=True))
    assert_close(acc / l, torch.softmax(scores, dim=-1) @ v)


def test_an_update_without_the_rescale_fails_the_parity(monkeypatch):
    def step_without_rescale(m, l, acc, scores, v_block):
        m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))
        p = torch.exp(scores - m_new)
        l_new = torch.exp(m - m_new) * l + p.sum(dim=-1, keepdim=True)
        return m_new, l_new, acc + p @ v_block  # wrong: acc still counts against m_old

    q, k, v = qkv(2, 3, 40, 40)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    monkeypatch.setattr(tiled_module, "online_softmax_step", step_without_rescale)
    wrong = tiled_attention(q, k, v, block_q=8, block_k=8)
    assert (wrong - expected).abs().max() > 1e-2
    # with one block of keys there is nothing to rescale: the wrong update passes, so the
    # check above fails because of the rescale and nothing else
    one_block = tiled_attention(q, k, v, block_q=8, block_k=40)
    assert_close(one_block, expected, **TOLERANCES[torch.float32])


@pytest.mark.parametrize("dtype, rtol", [(torch.bfloat16, 2**-8), (torch.float16, 2**-11)])
def test_half_precision_is_off_by_its_own_rounding_only(dtype, rtol):
    """Computed in float32, then rounded once: within half a unit in the last place of
    the float64 answer for the same (rounded) inputs, a relative 2^-8 in bfloat16 and
    2^-11 in float16."""
    q, k, v = (x.to(dtype) for x in qkv(2, 3, 70, 70, d=32))
    expected = F.scaled_dot_product_attention(q.double(), k.double(), v.double(),
                                              is_causal=True)
    got = tiled_attention(q, k, v, block_q=16, block_k=24)
    assert got.dtype == dtype
    assert_close(got.double(), expected, rtol=rtol, atol=1e-5)


def test_no_queries_give_empty_outputs():
    q, k, v = qkv(2, 3, 0, 5, d_v=7)
    for causal in (True, False):
        out, lse = tiled_attention(q, k, v, causal=causal, return_lse=True)
        assert out.shape == (2, 3, 0, 7) and lse.shape == (2, 3, 0)


# ---------------------------------------------------------------- the book's GPT


def small_gpt() -> GPT:
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=65, context_length=32, n_layers=2, n_heads=2, d_model=32,
                       dropout=0.0)
    return GPT(config).eval()


def test_equals_a_blocks_own_attention_on_its_queries_keys_and_values():
    model = small_gpt()
    idx = torch.randint(0, 65, (2, 23), generator=torch.Generator().manual_seed(2))
    attn = model.blocks[1].attn
    seen = []  # what the model's second block feeds its attention, (B, T, D)
    attn.register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    with torch.no_grad():
        model(idx)
        x = seen[0]  # (B, T, D)
        q, k, v = attn.c_attn(x).split(attn.d_model, dim=2)  # 3 x (B, T, D)
        q, k, v = map(attn.split_heads, (q, k, v))  # 3 x (B, H, T, d)
        y = tiled_attention(q, k, v, block_q=5, block_k=7)  # (B, H, T, d)
        assert_close(attn.c_proj(attn.merge_heads(y)), attn(x), **TOLERANCES[torch.float32])


def test_gpt_logits_unchanged_when_its_attention_is_tiled(monkeypatch):
    model = small_gpt()
    idx = torch.randint(0, 65, (2, 20), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected, _ = model(idx)
        cache = model.new_kv_cache()
        expected_steps = [model(idx[:, :17], kv_cache=cache)[0]]
        expected_steps += [model(idx[:, t:t + 1], kv_cache=cache)[0] for t in (17, 18, 19)]
    calls = []

    def tiled_sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False):
        assert attn_mask is None and dropout_p == 0.0  # the paths this test takes
        calls.append(q.size(2))
        return tiled_attention(q, k, v, causal=is_causal, block_q=3, block_k=4)

    # attention.F is torch.nn.functional: patched for this test only, attention.py unedited
    monkeypatch.setattr(attention.F, "scaled_dot_product_attention", tiled_sdpa)
    with torch.no_grad():
        assert_close(model(idx)[0], expected, **TOLERANCES[torch.float32])
        cache = model.new_kv_cache()  # a prompt, then one token at a time after the cache
        steps = [model(idx[:, :17], kv_cache=cache)[0]]
        steps += [model(idx[:, t:t + 1], kv_cache=cache)[0] for t in (17, 18, 19)]
    for got, want in zip(steps, expected_steps):
        assert_close(got, want, **TOLERANCES[torch.float32])
    assert calls == [20, 20, 17, 17] + [1, 1] * 3  # 2 layers; tiled attention ran each time


# ---------------------------------------------------------------- memory


def test_attention_memory_formula():
    memory = attention_memory(1024, 64, 64, 32, B=2, H=12, dtype_bytes=2)
    assert memory.naive_bytes == 2 * 12 * 1024 * 1024 * 2
    assert memory.tiled_bytes == 2 * 12 * (64 * 32 + 64 * (2 * 64 + 2)) * 2
    # a block larger than T is T
    assert attention_memory(10, 8, 64, 64) == attention_memory(10, 8, 10, 10)


def test_measure_peak_bytes_sees_a_known_allocation():
    assert measure_peak_bytes(lambda: torch.ones(256, 256)) == 256 * 256 * 4
    assert measure_peak_bytes(lambda: (torch.ones(100), torch.ones(50))) == 150 * 4


def test_measured_memory_grows_with_t_squared_naive_and_stays_flat_tiled():
    d, block = 8, 32
    naive_extra, tiled_extra = {}, {}
    for T in (128, 256):
        q, k, v = qkv(1, 1, T, T, d=d)
        mask = attention.causal_mask(T)  # made before: an input, not working memory
        outputs = T * d * 4  # the output, (B, H, T, d) float32
        naive_extra[T] = measure_peak_bytes(
            lambda: attention.scaled_dot_product_attention(q, k, v, mask)) - outputs
        tiled_peak = measure_peak_bytes(
            lambda: tiled_attention(q, k, v, block_q=block, block_k=block))
        tiled_extra[T] = tiled_peak - outputs - T * 4  # and each row's lse, (B, H, T)
        formula = attention_memory(T, d, block, block)
        assert formula.naive_bytes <= naive_extra[T] <= 3 * formula.naive_bytes
        assert formula.tiled_bytes <= tiled_extra[T] <= 3 * formula.tiled_bytes
    assert naive_extra[256] > 3.5 * naive_extra[128]  # T doubled: four times the scores
    assert tiled_extra[256] == tiled_extra[128]  # the same blocks, whatever T


# ---------------------------------------------------------------- refused inputs


Q, K, V = qkv(2, 3, 6, 6)
REFUSED = [
    ((Q.numpy(), K, V), {}, TypeError, "q must be a torch.Tensor"),
    ((Q[0], K, V), {}, ValueError, r"q has shape \(3, 6, 16\), not \(B, H, T, d\)"),
    ((Q, K.long(), V), {}, TypeError, "one floating dtype"),
    ((Q.long(), K.long(), V.long()), {}, TypeError, "one floating dtype"),
    ((Q, K.double(), V), {}, TypeError, "one floating dtype"),
    ((Q, K[:1], V[:1]), {}, ValueError, r"must share the batch and heads \(B, H\)"),
    ((Q, K[:, :2], V), {}, ValueError, r"must share the batch and heads \(B, H\)"),
    ((Q, K[..., :8], V), {}, ValueError, "must share the head size d"),
    ((Q, K, V[:, :, :5]), {}, ValueError, "k and v .* the keys T_k"),
    ((Q, K[:, :, :4], V[:, :, :4]), {}, ValueError, "T_q=6 queries but T_k=4 keys"),
    ((Q, K[:, :, :0], V[:, :, :0]), {"causal": False}, ValueError, r"no keys \(T_k=0\)"),
    ((Q, K, V), {"block_q": 0}, ValueError, "block_q=0 must be a positive int"),
    ((Q, K, V), {"block_k": -3}, ValueError, "block_k=-3 must be a positive int"),
    ((Q, K, V), {"block_k": 2.5}, ValueError, r"block_k=2\.5 must be an int"),
    ((Q, K, V), {"block_q": True}, ValueError, "block_q=True must be an int"),
]


@pytest.mark.parametrize("args, kwargs, error, match", REFUSED)
def test_refused_inputs(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        tiled_attention(*args, **kwargs)


@pytest.mark.parametrize("name", ["q", "k", "v"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_inputs_are_refused(name, bad):
    tensors = dict(zip("qkv", qkv(1, 2, 6, 6)))
    tensors[name][0, 1, 4, 2] = bad
    with pytest.raises(ValueError, match=f"{name} holds 1 NaN or infinite value"):
        tiled_attention(**tensors)


def test_attention_memory_refuses_bad_sizes():
    with pytest.raises(ValueError, match="attention_memory.T=0 must be a positive int"):
        attention_memory(0, 8, 4, 4)
    with pytest.raises(ValueError, match=r"attention_memory.block_k=1\.5 must be an int"):
        attention_memory(16, 8, 4, 1.5)
