"""Tests for gpt_from_scratch.layernorm (Chapter 3)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from gpt_from_scratch.layernorm import LayerNorm

SHAPES = [16, 768, (4, 8), [3, 5]]  # int and tuple/list normalized shapes


def make_pair(shape, affine: bool, bias: bool = True, seed: int = 0, fast: bool = False):
    """Our LayerNorm and nn.LayerNorm with the same random γ, β (random so the affine part is tested).

    ``fast=False`` (the default here) tests the written-out formula; ``fast=True`` the call to F.layer_norm.
    """
    reference = nn.LayerNorm(shape, elementwise_affine=affine, bias=bias)
    if affine:
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in reference.parameters():
                p.copy_(torch.randn(p.shape, generator=g))
    ours = LayerNorm(shape, elementwise_affine=affine, bias=bias, fast=fast)
    ours.load_state_dict(reference.state_dict(), strict=True)
    return ours, reference


def run(module, x, upstream):
    """Output and every gradient of <module(x), upstream>."""
    x = x.clone().requires_grad_(True)
    y = module(x)
    (y * upstream).sum().backward()
    grads = {name: p.grad for name, p in module.named_parameters()}
    return y.detach(), x.grad, grads


def trailing(shape) -> tuple[int, ...]:
    return (shape,) if isinstance(shape, int) else tuple(shape)


@pytest.mark.parametrize("fast", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(("affine", "bias"), [(True, True), (True, False), (False, True)])
def test_matches_nn_layernorm_outputs_and_gradients(shape, affine, bias, fast):
    ours, reference = make_pair(shape, affine, bias, fast=fast)
    g = torch.Generator().manual_seed(1)
    x = torch.randn((2, 7, *trailing(shape)), generator=g)  # (B, T, *normalized_shape)
    upstream = torch.randn(x.shape, generator=g)
    y, dx, grads = run(ours, x, upstream)
    y_ref, dx_ref, grads_ref = run(reference, x, upstream)
    torch.testing.assert_close(y, y_ref, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(dx, dx_ref, atol=1e-6, rtol=1e-6)
    assert grads.keys() == grads_ref.keys()
    for name in grads:  # sums over the B * T rows, whose order differs between PyTorch versions
        torch.testing.assert_close(grads[name], grads_ref[name], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("fast", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("input_std", [1e-4, 1e-3])
def test_matches_nn_layernorm_on_tiny_variance_relative_to_magnitude(shape, affine, input_std, fast):
    # var ≪ eps: the gradients w.r.t. x are ~1/sqrt(eps) ≈ 300 times the upstream gradient, and
    # float32 itself is ~1e-4..1e-3 off in absolute terms; compare relative to the reference's size.
    ours, reference = make_pair(shape, affine, fast=fast)
    g = torch.Generator().manual_seed(2)
    x = input_std * torch.randn((3, 5, *trailing(shape)), generator=g)
    upstream = torch.randn(x.shape, generator=g)
    y, dx, grads = run(ours, x, upstream)
    y_ref, dx_ref, grads_ref = run(reference, x, upstream)
    pairs = [(y, y_ref), (dx, dx_ref)] + [(grads[n], grads_ref[n]) for n in grads_ref]
    for got, expected in pairs:
        scale = expected.abs().max().item()
        assert (got - expected).abs().max().item() <= 1e-5 * scale


@pytest.mark.parametrize("fast", [False, True])
def test_float64_matches_to_rounding(fast):
    ours, reference = make_pair(32, True, fast=fast)
    ours, reference = ours.double(), reference.double()
    x = torch.randn(4, 6, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(ours(x), reference(x), atol=1e-12, rtol=1e-12)


def test_formula_on_a_hand_computed_row():
    # x = [1, 2, 3, 4]: mean 2.5, biased variance (2.25 + 0.25 + 0.25 + 2.25) / 4 = 1.25
    expected = torch.tensor([-1.5, -0.5, 0.5, 1.5]) / 2**0.5
    for fast in (False, True):
        ln = LayerNorm(4, eps=0.75, fast=fast)  # var + eps = 2, so y = (x - 2.5) / sqrt(2)
        torch.testing.assert_close(ln(torch.tensor([1.0, 2.0, 3.0, 4.0])), expected)


def test_fast_is_the_default_and_shows_in_the_repr():
    assert LayerNorm(8).fast and not LayerNorm(8, fast=False).fast
    assert "fast=True" in repr(LayerNorm(8)) and "fast=False" in repr(LayerNorm(8, fast=False))


def test_state_dict_and_initialisation_match_nn_layernorm():
    for kwargs in [{}, {"bias": False}, {"elementwise_affine": False}]:
        ours, reference = LayerNorm((4, 8), **kwargs), nn.LayerNorm((4, 8), **kwargs)
        ours_state, reference_state = ours.state_dict(), reference.state_dict()
        assert list(ours_state) == list(reference_state)
        for key in reference_state:
            assert torch.equal(ours_state[key], reference_state[key])
        reference.load_state_dict(ours_state, strict=True)
    ln = LayerNorm(8, elementwise_affine=False)
    assert ln.weight is None and ln.bias is None and list(ln.parameters()) == []


def test_output_rows_have_zero_mean_and_unit_biased_variance():
    x = 5.0 + 3.0 * torch.randn(2, 9, 64, generator=torch.Generator().manual_seed(4))
    y = LayerNorm(64, fast=False)(x).detach()
    torch.testing.assert_close(y.mean(-1), torch.zeros(2, 9), atol=1e-6, rtol=0)
    # var / (var + eps) with var ≈ 9: 1 - 1e-5/9 ≈ 1 to 1e-6
    torch.testing.assert_close(y.var(-1, unbiased=False), torch.ones(2, 9), atol=1e-5, rtol=0)


rows = st.integers(min_value=0, max_value=2**31 - 1)


@settings(max_examples=40, deadline=None)
@given(seed=rows, shift=st.floats(min_value=-100.0, max_value=100.0), D=st.sampled_from([8, 64, 256]))
def test_shifting_a_row_leaves_the_output_unchanged(seed, shift, D):
    ln = LayerNorm(D, elementwise_affine=False, fast=False)
    x = torch.randn(3, D, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    torch.testing.assert_close(ln(x + shift), ln(x), atol=1e-10, rtol=0)


@settings(max_examples=40, deadline=None)
@given(seed=rows, scale=st.floats(min_value=0.5, max_value=1000.0), D=st.sampled_from([8, 64, 256]))
def test_positive_scaling_leaves_the_output_unchanged(seed, scale, D):
    ln = LayerNorm(D, eps=1e-12, elementwise_affine=False, fast=False)  # with eps = 1e-5 the invariance is exact only as eps -> 0
    x = 1.0 + torch.randn(3, D, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    torch.testing.assert_close(ln(scale * x), ln(x), atol=1e-9, rtol=0)
    torch.testing.assert_close(ln(-scale * x), -ln(x), atol=1e-9, rtol=0)  # a negative scale flips the sign


def test_eps_breaks_scale_invariance_only_for_tiny_rows():
    ln = LayerNorm(64, elementwise_affine=False, fast=False)
    x = torch.randn(1, 64, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    ordinary = (ln(x) - ln(10 * x)).abs().max().item()
    tiny = (ln(1e-3 * x) - ln(x)).abs().max().item()
    assert ordinary < 1e-4  # var ≈ 1 ≫ eps: off by about eps / (2 var) relative
    assert tiny > 0.5  # var ≈ 1e-6 ≪ eps: the output is shrunk by about sqrt(var / eps) ≈ 0.3


@pytest.mark.parametrize("fast", [False, True])
def test_wrong_trailing_shape_names_shapes_and_fix(fast):
    with pytest.raises(ValueError, match=r"shape \(2, 5, 7\).*normalized_shape=\(8,\).*\(\.\.\., 8\)"):
        LayerNorm(8, fast=fast)(torch.zeros(2, 5, 7))
    with pytest.raises(ValueError, match=r"normalized_shape=\(4, 8\)"):
        LayerNorm((4, 8), fast=fast)(torch.zeros(8, 4))


@pytest.mark.parametrize("bad", [0, -3, (), (4, 0), 2.5])
def test_bad_normalized_shape_is_rejected(bad):
    with pytest.raises(ValueError, match="normalized_shape"):
        LayerNorm(bad)


@pytest.mark.parametrize("eps", [0.0, -1e-5])
def test_non_positive_eps_is_rejected(eps):
    with pytest.raises(ValueError, match=r"eps=.*> 0"):
        LayerNorm(8, eps=eps)
