"""Tests for Chapter 4: scaled dot-product attention, causal masks, the KV cache, multi-head attention."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.testing import assert_close

from gpt_from_scratch.attention import (
    KVCache,
    MultiHeadAttention,
    causal_mask,
    scaled_dot_product_attention,
)

F32 = {"atol": 1e-6, "rtol": 1e-6}


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=gen(seed))


def make_mha(d_model: int = 32, n_heads: int = 4, seed: int = 0, **kwargs) -> MultiHeadAttention:
    torch.manual_seed(seed)
    return MultiHeadAttention(d_model, n_heads, **kwargs).eval()


# ---------------------------------------------------------------- causal_mask


def test_causal_mask_is_lower_triangle():
    mask = causal_mask(5)
    assert mask.dtype == torch.bool and mask.shape == (5, 5)
    for i in range(5):
        for j in range(5):
            assert bool(mask[i, j]) == (j <= i)


def test_causal_mask_with_past_positions():
    P, T = 3, 4
    mask = causal_mask(T, n_past=P)
    assert mask.shape == (T, P + T)
    for i in range(T):
        for j in range(P + T):
            assert bool(mask[i, j]) == (j <= P + i)
    # The last T rows of the full (P + T) mask.
    assert torch.equal(mask, causal_mask(P + T)[P:])


# ---------------------------------------------------------------- scaled_dot_product_attention


@pytest.mark.parametrize("T_q, T_k", [(6, 6), (3, 7), (7, 2)])
@pytest.mark.parametrize("masked", [False, True])
def test_sdpa_matches_torch(T_q, T_k, masked):
    q, k, v = randn(2, 3, T_q, 8, seed=1), randn(2, 3, T_k, 8, seed=2), randn(2, 3, T_k, 5, seed=3)
    mask = None
    if masked:
        mask = torch.rand(T_q, T_k, generator=gen(4)) > 0.4
        mask[:, 0] = True  # every query may see at least one key
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert out.shape == (2, 3, T_q, 5) and weights.shape == (2, 3, T_q, T_k)
    assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), **F32)


def test_sdpa_broadcasts_a_per_batch_mask():
    q, k, v = randn(2, 3, 4, 8, seed=1), randn(2, 3, 5, 8, seed=2), randn(2, 3, 5, 8, seed=3)
    mask = torch.rand(2, 1, 4, 5, generator=gen(5)) > 0.3
    mask[..., 0] = True
    out, _ = scaled_dot_product_attention(q, k, v, mask)
    assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), **F32)


def test_sdpa_causal_matches_torch_is_causal():
    q, k, v = (randn(2, 4, 9, 8, seed=s) for s in (1, 2, 3))
    out, _ = scaled_dot_product_attention(q, k, v, causal_mask(9))
    assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), **F32)


def test_weights_rows_sum_to_one_and_future_is_exactly_zero():
    q, k, v = (randn(2, 3, 10, 8, seed=s) for s in (1, 2, 3))
    _, weights = scaled_dot_product_attention(q, k, v, causal_mask(10))
    assert_close(weights.sum(-1), torch.ones(2, 3, 10), **F32)
    upper = torch.ones(10, 10, dtype=torch.bool).triu(diagonal=1)
    assert torch.all(weights[..., upper] == 0)
    assert torch.all(weights[..., ~upper] > 0)


def test_scaling_is_by_sqrt_d_k():
    # Two keys: softmax([s0, s1]) with s = q.k / sqrt(d_k) has a closed form.
    d_k = 16
    q = torch.full((1, d_k), 0.5)
    k = torch.stack([torch.full((d_k,), 1.0), torch.zeros(d_k)])
    _, weights = scaled_dot_product_attention(q, k, torch.eye(2))
    s0 = 0.5 * d_k / d_k**0.5  # = 2.0
    expected = torch.tensor([[1 / (1 + torch.exp(torch.tensor(-s0))), 1 / (1 + torch.exp(torch.tensor(s0)))]])
    assert_close(weights, expected, **F32)


def test_fully_masked_row_gives_zero_weights_and_output_not_nan():
    q, k, v = randn(4, 8, seed=1), randn(5, 8, seed=2), randn(5, 3, seed=3)
    q.requires_grad_(True)
    k.requires_grad_(True)
    mask = torch.ones(4, 5, dtype=torch.bool)
    mask[2] = False  # query 2 may see nothing
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert torch.equal(weights[2], torch.zeros(5)) and torch.equal(out[2], torch.zeros(3))
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    # The other rows are untouched.
    ref, _ = scaled_dot_product_attention(q[[0, 1, 3]], k, v)
    assert_close(out[[0, 1, 3]], ref, **F32)
    out.sum().backward()
    assert torch.isfinite(q.grad).all() and torch.equal(q.grad[2], torch.zeros(8))
    assert torch.isfinite(k.grad).all()


def test_fully_masked_row_in_one_batch_element_of_a_broadcast_mask():
    q, k, v = randn(2, 3, 4, 8, seed=1), randn(2, 3, 5, 8, seed=2), randn(2, 3, 5, 8, seed=3)
    mask = torch.ones(2, 1, 4, 5, dtype=torch.bool)
    mask[1, 0, 2] = False  # in batch element 1, query 2 may see nothing (in every head)
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert torch.equal(out[1, :, 2], torch.zeros(3, 8)) and torch.equal(weights[1, :, 2], torch.zeros(3, 5))
    ref, _ = scaled_dot_product_attention(q, k, v)
    assert_close(out[0], ref[0], **F32)
    assert_close(out[1, :, [0, 1, 3]], ref[1, :, [0, 1, 3]], **F32)


def test_non_bool_mask_is_rejected():
    q = randn(3, 4)
    with pytest.raises(TypeError, match="boolean"):
        scaled_dot_product_attention(q, q, q, mask=torch.ones(3, 3))


def test_attention_dropout_zeroes_weights_and_rescales():
    q, k, v = randn(1, 50, 8, seed=1), randn(1, 50, 8, seed=2), torch.eye(50).unsqueeze(0)
    torch.manual_seed(0)
    out, weights = scaled_dot_product_attention(q, k, v, dropout_p=0.5)  # v = I: output is the dropped weights
    dropped = out == 0
    assert 0.3 < dropped.float().mean() < 0.7
    assert_close(out[~dropped], 2 * weights[~dropped], **F32)
    assert_close(weights.sum(-1), torch.ones(1, 50), **F32)  # returned weights: before dropout


def test_permuting_tokens_permutes_outputs_without_mask():
    x = randn(2, 7, 12, seed=1)
    w_q, w_k, w_v = (randn(12, 12, seed=s) for s in (2, 3, 4))
    perm = torch.randperm(7, generator=gen(5))
    out, weights = scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v)
    xp = x[:, perm]
    out_p, weights_p = scaled_dot_product_attention(xp @ w_q, xp @ w_k, xp @ w_v)
    assert_close(out_p, out[:, perm], **F32)
    assert_close(weights_p, weights[:, perm][:, :, perm], **F32)


def test_permutation_equivariance_of_multi_head_projections_without_mask():
    # A non-causal (encoder-style) use of the layer's own projections and head split.
    mha = make_mha()
    x = randn(2, 6, 32, seed=1)
    perm = torch.randperm(6, generator=gen(2))

    def encoder_attention(x):
        q, k, v = (mha.split_heads(t) for t in mha.c_attn(x).split(32, dim=2))
        out, _ = scaled_dot_product_attention(q, k, v)
        return mha.c_proj(mha.merge_heads(out))

    assert_close(encoder_attention(x[:, perm]), encoder_attention(x)[:, perm], **F32)


def test_causal_attention_is_not_permutation_equivariant():
    mha = make_mha()
    x = randn(1, 6, 32, seed=1)
    perm = torch.tensor([5, 4, 3, 2, 1, 0])
    assert not torch.allclose(mha(x[:, perm]), mha(x)[:, perm], atol=1e-4)


# ---------------------------------------------------------------- MultiHeadAttention


def test_bad_head_count_raises_a_clear_error():
    with pytest.raises(ValueError, match="n_heads=5 does not divide d_model=32"):
        MultiHeadAttention(32, 5)
    with pytest.raises(ValueError, match="n_heads=0"):
        MultiHeadAttention(32, 0)


def test_wrong_input_width_raises():
    with pytest.raises(ValueError, match=r"\(B, T, 32\)"):
        make_mha()(randn(2, 5, 16))


def test_submodules_and_parameter_count():
    mha = make_mha(d_model=32, n_heads=4)
    assert isinstance(mha.c_attn, nn.Linear) and mha.c_attn.weight.shape == (96, 32)
    assert isinstance(mha.c_proj, nn.Linear) and mha.c_proj.weight.shape == (32, 32)
    assert sum(p.numel() for p in mha.parameters()) == 4 * 32 * 32 + 4 * 32
    no_bias = MultiHeadAttention(32, 4, bias=False)
    assert no_bias.c_attn.bias is None and no_bias.c_proj.bias is None


def test_split_and_merge_heads_are_inverse_and_slice_features():
    mha = make_mha(d_model=32, n_heads=4)
    x = randn(2, 5, 32)
    heads = mha.split_heads(x)
    assert heads.shape == (2, 4, 5, 8)
    assert torch.equal(heads[:, 1], x[:, :, 8:16])  # head h owns features h*d_k .. (h+1)*d_k - 1
    assert torch.equal(mha.merge_heads(heads), x)


@pytest.mark.parametrize("bias", [True, False])
def test_matches_nn_multihead_attention(bias):
    D, H, T = 32, 4, 9
    mha = make_mha(D, H, bias=bias)
    ref = nn.MultiheadAttention(D, H, bias=bias, batch_first=True).eval()
    with torch.no_grad():
        ref.in_proj_weight.copy_(mha.c_attn.weight)  # same layout: q, k, v stacked on the output dim
        ref.out_proj.weight.copy_(mha.c_proj.weight)
        if bias:
            ref.in_proj_bias.copy_(mha.c_attn.bias)
            ref.out_proj.bias.copy_(mha.c_proj.bias)
    x = randn(3, T, D, seed=1)
    # nn.MultiheadAttention's bool mask means the opposite: True = may NOT attend.
    expected, expected_weights = ref(x, x, x, attn_mask=~causal_mask(T), need_weights=True, average_attn_weights=False)
    for fast in (True, False):
        mha.fast = fast
        assert_close(mha(x), expected, **F32)
    y, weights = mha(x, return_weights=True)
    assert_close(y, expected, **F32)
    assert_close(weights, expected_weights, **F32)


def test_fast_and_written_out_paths_agree():
    mha = make_mha(d_model=48, n_heads=6)
    x = randn(3, 17, 48, seed=1)
    mha.fast = True
    fast = mha(x)
    mha.fast = False
    slow = mha(x)
    assert_close(fast, slow, **F32)


def test_return_weights_shape_rows_and_causality():
    mha = make_mha()
    y, weights = mha(randn(2, 8, 32, seed=1), return_weights=True)
    assert y.shape == (2, 8, 32) and weights.shape == (2, 4, 8, 8)
    assert_close(weights.sum(-1), torch.ones(2, 4, 8), **F32)
    assert torch.all(weights.triu(diagonal=1) == 0)


@pytest.mark.parametrize("fast", [True, False])
def test_no_information_flows_from_the_future(fast):
    T = 7
    mha = make_mha(fast=fast)
    x = randn(2, T, 32, seed=1).requires_grad_(True)
    y = mha(x)
    for t in range(T):
        (grad,) = torch.autograd.grad(y[:, t].sum(), x, retain_graph=True)
        assert torch.all(grad[:, t + 1 :] == 0), f"output {t} depends on a later input"
        assert torch.all(grad[:, : t + 1].abs().sum(-1) > 0), f"output {t} ignores an earlier input"


def test_dropout_is_active_in_training_and_off_in_eval():
    mha = make_mha(dropout=0.5)
    x = randn(2, 6, 32, seed=1)
    mha.eval()
    assert torch.equal(mha(x), mha(x))
    mha.train()
    torch.manual_seed(0)
    a = mha(x)
    b = mha(x)
    assert not torch.equal(a, b)


# ---------------------------------------------------------------- KVCache


def test_kv_cache_appends_along_time():
    cache = KVCache()
    assert len(cache) == 0
    k1, v1 = randn(2, 3, 4, 8, seed=1), randn(2, 3, 4, 8, seed=2)
    k_all, v_all = cache.update(k1, v1)
    assert len(cache) == 4 and torch.equal(k_all, k1) and torch.equal(v_all, v1)
    k2, v2 = randn(2, 3, 1, 8, seed=3), randn(2, 3, 1, 8, seed=4)
    k_all, v_all = cache.update(k2, v2)
    assert len(cache) == 5
    assert torch.equal(k_all, torch.cat([k1, k2], dim=2)) and torch.equal(v_all, torch.cat([v1, v2], dim=2))


@pytest.mark.parametrize("max_positions", [None, 7, 40])
def test_kv_cache_keeps_every_position_across_reallocations(max_positions):
    """Growing the buffers (several times, and up to max_positions) copies what is cached, nothing else."""
    cache, ks, vs = KVCache(max_positions=max_positions), [], []
    for step, T in enumerate([1, 1, 2, 1, 1, 1] if max_positions == 7 else [3, 1, 1, 5, 1, 9, 1, 1]):
        ks.append(randn(2, 3, T, 8, seed=2 * step))
        vs.append(randn(2, 3, T, 8, seed=2 * step + 1))
        k_all, v_all = cache.update(ks[-1], vs[-1])
        assert torch.equal(k_all, torch.cat(ks, dim=2)) and torch.equal(v_all, torch.cat(vs, dim=2))
        assert cache._keys.size(2) >= len(cache)
        if max_positions is not None:
            assert cache._keys.size(2) <= max_positions  # never more memory than the context needs


def test_kv_cache_rejects_mismatched_shapes():
    cache = KVCache()
    cache.update(randn(2, 3, 4, 8), randn(2, 3, 4, 8))
    with pytest.raises(ValueError, match="batch, heads and d_k"):
        cache.update(randn(1, 3, 1, 8), randn(1, 3, 1, 8))
    with pytest.raises(ValueError, match="same shape"):
        cache.update(randn(2, 3, 1, 8), randn(2, 3, 2, 8))


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("chunks", [[5, 1, 1, 1, 1, 1], [1] * 10, [3, 4, 2, 1], [10]])
def test_kv_cache_chunks_match_one_full_pass(fast, chunks):
    mha = make_mha(fast=fast)
    x = randn(2, sum(chunks), 32, seed=1)
    with torch.no_grad():
        full = mha(x)
        cache, outs, start = KVCache(), [], 0
        for n in chunks:
            outs.append(mha(x[:, start : start + n], kv_cache=cache))
            start += n
            assert len(cache) == start
    assert_close(torch.cat(outs, dim=1), full, **F32)


def test_kv_cache_weights_cover_past_and_new_positions():
    mha = make_mha()
    x = randn(1, 6, 32, seed=1)
    _, full_weights = mha(x, return_weights=True)
    cache = KVCache()
    mha(x[:, :4], kv_cache=cache)
    _, weights = mha(x[:, 4:], return_weights=True, kv_cache=cache)
    assert weights.shape == (1, 4, 2, 6)
    assert_close(weights, full_weights[:, :, 4:], **F32)
