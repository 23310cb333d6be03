"""Tests for gpt_from_scratch.embeddings (Chapter 2)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from gpt_from_scratch.embeddings import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    sinusoidal_positional_encoding,
)

even_widths = st.integers(min_value=1, max_value=64).map(lambda half: 2 * half)


def reference_table(T: int, D: int, base: float = 10000.0) -> torch.Tensor:
    """The formula of Vaswani et al. (2017), one scalar at a time with Python's math module."""
    rows = []
    for p in range(T):
        row = []
        for j in range(D):
            i = j // 2
            angle = p / base ** (2 * i / D)
            row.append(math.sin(angle) if j % 2 == 0 else math.cos(angle))
        rows.append(row)
    return torch.tensor(rows, dtype=torch.float64)


def rotation(k: int, D: int, base: float = 10000.0) -> torch.Tensor:
    """Block-diagonal R_k with [[cos kw, sin kw], [-sin kw, cos kw]] per frequency pair (float64)."""
    R = torch.zeros(D, D, dtype=torch.float64)
    for i in range(D // 2):
        w = base ** (-2 * i / D)
        c, s = math.cos(k * w), math.sin(k * w)
        R[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor([[c, s], [-s, c]], dtype=torch.float64)
    return R


# --- the function -------------------------------------------------------------------------------


def test_first_row_for_D4_is_sin0_cos0():
    pe = sinusoidal_positional_encoding(5, 4)
    assert pe.shape == (5, 4)
    assert pe[0].tolist() == [0.0, 1.0, 0.0, 1.0]


@pytest.mark.parametrize(("T", "D", "base"), [(1, 2, 10000.0), (7, 4, 10000.0), (50, 16, 10000.0), (9, 6, 100.0)])
def test_matches_the_formula_scalar_by_scalar(T, D, base):
    pe = sinusoidal_positional_encoding(T, D, base, dtype=torch.float64)
    torch.testing.assert_close(pe, reference_table(T, D, base), atol=1e-12, rtol=0)


def test_default_dtype_is_float32_and_rounded_from_float64():
    pe32 = sinusoidal_positional_encoding(1024, 768)
    assert pe32.dtype == torch.float32
    # computed in float64 then rounded once: exact rounding of the float64 table, even at position 1023
    exact = sinusoidal_positional_encoding(1024, 768, dtype=torch.float64)
    assert torch.equal(pe32, exact.to(torch.float32))


def test_wavelengths_form_a_geometric_progression_from_2pi():
    D, base = 16, 10000.0
    pe = sinusoidal_positional_encoding(2, D, base, dtype=torch.float64)
    omega = torch.atan2(pe[1, 0::2], pe[1, 1::2])  # angle of position 1 = frequency w_i (all < π)
    wavelength = 2 * math.pi / omega
    torch.testing.assert_close(wavelength[0], torch.tensor(2 * math.pi, dtype=torch.float64))
    ratios = wavelength[1:] / wavelength[:-1]
    torch.testing.assert_close(ratios, torch.full_like(ratios, base ** (2 / D)))


@settings(max_examples=40, deadline=None)
@given(T=st.integers(min_value=1, max_value=200), D=even_widths, base=st.floats(min_value=2.0, max_value=1e5))
def test_each_frequency_pair_lies_on_the_unit_circle(T, D, base):
    pe = sinusoidal_positional_encoding(T, D, base, dtype=torch.float64)
    pair_norms = pe[:, 0::2] ** 2 + pe[:, 1::2] ** 2  # (T, D/2)
    torch.testing.assert_close(pair_norms, torch.ones_like(pair_norms), atol=1e-12, rtol=0)
    torch.testing.assert_close(pe.norm(dim=1), torch.full((T,), math.sqrt(D / 2), dtype=torch.float64))


@settings(max_examples=30, deadline=None)
@given(D=even_widths, k=st.integers(min_value=0, max_value=100))
def test_shift_by_k_is_one_fixed_block_rotation(D, k):
    T = 64
    pe = sinusoidal_positional_encoding(T + k, D, dtype=torch.float64)
    R = rotation(k, D)
    # the same matrix for every position p: P[p + k] = R_k P[p]
    torch.testing.assert_close(pe[:T] @ R.T, pe[k : k + T], atol=1e-9, rtol=0)
    torch.testing.assert_close(R @ R.T, torch.eye(D, dtype=torch.float64), atol=1e-12, rtol=0)


def test_similarity_depends_only_on_distance():
    pe = sinusoidal_positional_encoding(40, 32, dtype=torch.float64)
    S = pe @ pe.T  # (T, T)
    for k in range(-39, 40):
        diagonal = torch.diagonal(S, offset=k)
        torch.testing.assert_close(diagonal, diagonal[:1].expand_as(diagonal), atol=1e-9, rtol=0)


def test_empty_table():
    assert sinusoidal_positional_encoding(0, 8).shape == (0, 8)


@pytest.mark.parametrize("D", [1, 5, 767])
def test_odd_width_is_rejected_with_the_fix(D):
    with pytest.raises(ValueError, match=rf"D={D} is odd.*choose D={D + 1}"):
        sinusoidal_positional_encoding(4, D)


@pytest.mark.parametrize(
    ("T", "D", "base", "match"),
    [(-1, 4, 10000.0, "T=-1"), (4, 0, 10000.0, "D=0"), (4, 4, 1.0, "base=1.0"), (2.5, 4, 10000.0, "T=2.5")],
)
def test_bad_arguments_name_the_value(T, D, base, match):
    with pytest.raises(ValueError, match=match):
        sinusoidal_positional_encoding(T, D, base)


# --- SinusoidalPositionalEncoding ------------------------------------------------------------------


def test_sinusoidal_module_returns_table_rows():
    module = SinusoidalPositionalEncoding(context_length=32, D=8)
    table = sinusoidal_positional_encoding(32, 8)
    x = torch.zeros(2, 10, 8)  # (B, T, D)
    assert torch.equal(module(x), table[:10])
    assert torch.equal(module(10), table[:10])
    assert torch.equal(module(3, start=5), table[5:8])
    assert torch.equal(module(32), table)


def test_sinusoidal_buffer_is_not_in_the_state_dict_but_follows_the_module():
    module = SinusoidalPositionalEncoding(context_length=16, D=8)
    assert module.state_dict() == {}
    assert [name for name, _ in module.named_buffers()] == ["pe"]
    assert list(module.parameters()) == []
    assert module.double()(4).dtype == torch.float64
    # a model holding it loads a checkpoint saved with a different context_length
    bigger = nn.Sequential(SinusoidalPositionalEncoding(64, 8))
    bigger.load_state_dict(nn.Sequential(module).state_dict(), strict=True)


@pytest.mark.parametrize("cls", [SinusoidalPositionalEncoding, LearnedPositionalEmbedding])
def test_too_long_sequence_names_T_table_length_and_fix(cls):
    module = cls(16, 8)
    with pytest.raises(ValueError, match=r"T=17.*context_length=16.*crop the input to its last 16 tokens"):
        module(torch.zeros(1, 17, 8))
    with pytest.raises(ValueError, match=r"T=4 tokens starting at position 13.*context_length=16.*3 more fit"):
        module(4, start=13)
    assert module(3, start=13).shape == (3, 8)  # the last rows fit exactly


@pytest.mark.parametrize("cls", [SinusoidalPositionalEncoding, LearnedPositionalEmbedding])
def test_vector_input_is_rejected(cls):
    with pytest.raises(ValueError, match=r"\(\.\.\., T, D\)"):
        cls(16, 8)(torch.zeros(8))


# --- LearnedPositionalEmbedding ---------------------------------------------------------------------


def test_learned_equals_nn_embedding_on_positions_values_and_gradients():
    torch.manual_seed(0)
    module = LearnedPositionalEmbedding(context_length=12, D=6)
    reference = nn.Embedding(12, 6)
    reference.load_state_dict(module.state_dict())  # same key: "weight"
    start, T = 3, 5
    ours = module(T, start=start)
    theirs = reference(torch.arange(start, start + T))
    assert torch.equal(ours, theirs)
    upstream = torch.randn(T, 6)
    (ours * upstream).sum().backward()
    (theirs * upstream).sum().backward()
    assert torch.equal(module.weight.grad, reference.weight.grad)
    assert module.weight.grad[:start].abs().sum() == 0 and module.weight.grad[start + T :].abs().sum() == 0


def test_learned_state_dict_and_gpt2_initialisation():
    torch.manual_seed(0)
    module = LearnedPositionalEmbedding(context_length=1024, D=768)
    state = module.state_dict()
    assert list(state) == ["weight"] and state["weight"].shape == (1024, 768)
    # 786,432 draws from N(0, 0.02²): the sample std is within 0.5 % of 0.02, the mean near 0
    assert abs(module.weight.std().item() - 0.02) < 1e-4
    assert abs(module.weight.mean().item()) < 1e-4


def test_learned_rejects_empty_table():
    with pytest.raises(ValueError, match="context_length=0"):
        LearnedPositionalEmbedding(0, 8)
