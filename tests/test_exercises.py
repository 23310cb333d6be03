"""The exercise checkers: references pass, each typical mistake fails with its own hint, nothing escapes."""

from __future__ import annotations

import math
import random
from functools import partial

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from gpt_from_scratch import exercises as ex
from gpt_from_scratch.tokenizer import CharTokenizer

NEG_INF = float("-inf")


def run_check(check, candidate, capsys) -> tuple[bool, str]:
    result = check(candidate)
    out = capsys.readouterr().out
    assert isinstance(result, bool)
    assert "Traceback" not in out
    return result, out


def assert_fails(check, candidate, capsys, *fragments: str) -> str:
    """The check returns False, prints one failure report, and its text names the mistake."""
    result, out = run_check(check, candidate, capsys)
    assert result is False, out
    assert out.startswith(ex.FAIL_MARK) and ex.PASS_MARK not in out, out
    for fragment in fragments:
        assert fragment in out, f"{fragment!r} not in:\n{out}"
    assert len(out.splitlines()) <= 6, out  # short enough for a notebook
    return out


def assert_passes(check, candidate, capsys) -> None:
    result, out = run_check(check, candidate, capsys)
    assert result is True, out
    assert out.strip().splitlines()[-1].startswith(ex.PASS_MARK), out


# ----------------------------------------------------------------------------------------------
# Chapter 1: character tokenizer and get_batch
# ----------------------------------------------------------------------------------------------


class FirstSeenTokenizer(CharTokenizer):
    """Vocabulary in order of first appearance: consistent, but not sorted."""

    def __init__(self, text):
        super().__init__(text)
        self.chars = list(dict.fromkeys(text))
        self.stoi = {c: i for i, c in enumerate(self.chars)}


class SetOrderTokenizer:
    """list(set(text)): the order depends on the hash seed."""

    def __init__(self, text):
        self.chars = list(set(text))
        self.stoi = {c: i for i, c in enumerate(self.chars)}
        self.vocab_size = len(self.chars)

    def encode(self, s):
        return [self.stoi[c] for c in s]

    def decode(self, ids):
        return "".join(self.chars[i] for i in ids)


class PaddedTokenizer(CharTokenizer):
    @property
    def vocab_size(self):
        return len(self.chars) + 1


class SpacedDecodeTokenizer(CharTokenizer):
    def decode(self, ids):
        return " ".join(self.chars[int(i)] for i in ids)


class TensorTokenizer(CharTokenizer):
    """encode returning a tensor and vocab_size a plain attribute are fine."""

    def __init__(self, text):
        super().__init__(text)
        self.n = len(self.chars)

    def encode(self, s):
        return torch.tensor(super().encode(s))


def test_char_tokenizer_reference_passes(capsys):
    assert_passes(ex.check_char_tokenizer, CharTokenizer, capsys)
    assert_passes(ex.check_char_tokenizer, TensorTokenizer, capsys)


@pytest.mark.parametrize("candidate, fragment", [
    (FirstSeenTokenizer, "sorted(set(text))"),
    (PaddedTokenizer, "expected vocab_size 8"),
    (SpacedDecodeTokenizer, "''.join"),
])
def test_char_tokenizer_mistakes(candidate, fragment, capsys):
    assert_fails(ex.check_char_tokenizer, candidate, capsys, fragment)


def test_char_tokenizer_unsorted_set(capsys):
    # list(set(text)) can come out sorted by chance for a given hash seed; the hint only appears if it does not
    result, out = run_check(ex.check_char_tokenizer, SetOrderTokenizer, capsys)
    text = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n"
    lucky = all(list(set(t)) == sorted(set(t)) for t in ("hello world", text))
    assert result is lucky, out


def reference_get_batch(data, batch_size, block_size, generator=None):
    starts = torch.randint(len(data) - block_size, (batch_size,), generator=generator)
    x = torch.stack([torch.as_tensor(data[s:s + block_size]) for s in starts]).long()
    y = torch.stack([torch.as_tensor(data[s + 1:s + 1 + block_size]) for s in starts]).long()
    return x, y


def numpy_get_batch(data, batch_size, block_size, generator=None):
    """nanoGPT's style: NumPy data (a memmap), torch.from_numpy."""
    ix = torch.randint(len(data) - block_size, (batch_size,), generator=generator)
    x = torch.stack([torch.from_numpy(data[i:i + block_size].astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + block_size].astype(np.int64)) for i in ix])
    return x, y


def shifted_get_batch(shift, start_high=lambda n, t: n - t, dtype=torch.long, use_generator=True):
    def get_batch(data, batch_size, block_size, generator=None):
        g = generator if use_generator else None
        starts = torch.randint(start_high(len(data), block_size), (batch_size,), generator=g)
        x = torch.stack([data[s:s + block_size] for s in starts]).to(dtype)
        y = torch.stack([data[s + shift:s + shift + block_size] for s in starts]).to(dtype)
        return x, y
    return get_batch


def test_get_batch_references_pass(capsys):
    from gpt_from_scratch.data import get_batch

    assert_passes(ex.check_get_batch, get_batch, capsys)
    assert_passes(ex.check_get_batch, reference_get_batch, capsys)
    result, out = run_check(ex.check_get_batch, numpy_get_batch, capsys)
    assert result is True and "NumPy" in out, out


@pytest.mark.parametrize("candidate, fragments", [
    (shifted_get_batch(0), ["y must be x shifted by one token"]),
    (shifted_get_batch(2), ["shifted by two"]),
    # starts drawn from [0, len(data) - block_size]: the last start runs past the end
    (shifted_get_batch(1, start_high=lambda n, t: n - t + 1), ["case 2 of 3", "len(data) - block_size"]),
    # starts drawn from [0, len(data) - block_size - 1): the last window is never used
    (shifted_get_batch(1, start_high=lambda n, t: n - t - 1), ["case 2 of 3", "last window"]),
    (shifted_get_batch(1, dtype=torch.int32), ["torch.int32", "int64"]),
    (shifted_get_batch(1, use_generator=False), ["generator=generator"]),
])
def test_get_batch_mistakes(candidate, fragments, capsys):
    assert_fails(ex.check_get_batch, candidate, capsys, *fragments)


def test_get_batch_numpy_without_cast(capsys):
    def get_batch(data, batch_size, block_size, generator=None):  # forgets .astype(np.int64)
        ix = torch.randint(len(data) - block_size, (batch_size,), generator=generator)
        x = torch.stack([torch.from_numpy(data[i:i + block_size]) for i in ix])
        y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + block_size]) for i in ix])
        return x, y

    assert_fails(ex.check_get_batch, get_batch, capsys, "astype(np.int64)")


# ----------------------------------------------------------------------------------------------
# Chapter 2: sinusoidal positional encoding
# ----------------------------------------------------------------------------------------------


def sinusoid(T, D, exponent=lambda i, D: 2 * i / D, swap=False, dtype=torch.float32):
    pe = torch.zeros(T, D, dtype=torch.float64)
    for t in range(T):
        for i in range(D // 2):
            angle = t / 10000 ** exponent(i, D)
            first, second = (math.cos(angle), math.sin(angle)) if swap else (math.sin(angle), math.cos(angle))
            pe[t, 2 * i], pe[t, 2 * i + 1] = first, second
    return pe.to(dtype)


def test_sinusoidal_references_pass(capsys):
    from gpt_from_scratch.embeddings import sinusoidal_positional_encoding

    assert_passes(ex.check_sinusoidal_positional_encoding, sinusoidal_positional_encoding, capsys)
    assert_passes(partial(ex.check_sinusoidal_positional_encoding, whole_tensor=False), sinusoid, capsys)  # loops


def halves(T, D):
    position = torch.arange(T)[:, None].float()
    angle = position / 10000 ** (torch.arange(0, D, 2).float() / D)
    return torch.cat([angle.sin(), angle.cos()], dim=1)


@pytest.mark.parametrize("candidate, fragments", [
    (lambda T, D: sinusoid(T, D, swap=True), ["sin and cos are swapped"]),
    (lambda T, D: sinusoid(T, D, exponent=lambda i, D: i / D), ["the exponent is 2i/D"]),
    (halves, ["interleaved"]),
    (lambda T, D: sinusoid(T, D, dtype=torch.float64), ["torch.float64", "float32"]),
    (lambda T, D: sinusoid(T, D).T, ["shape (T, D)"]),
])
def test_sinusoidal_mistakes(candidate, fragments, capsys):
    assert_fails(ex.check_sinusoidal_positional_encoding, candidate, capsys, *fragments)


# ----------------------------------------------------------------------------------------------
# Chapter 3: layer norm (function or module class)
# ----------------------------------------------------------------------------------------------


def layer_norm(x, weight, bias, eps):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


def test_layer_norm_references_pass(capsys):
    from gpt_from_scratch.layernorm import LayerNorm

    assert_passes(ex.check_layer_norm, layer_norm, capsys)
    assert_passes(ex.check_layer_norm, lambda x, w, b, eps: F.layer_norm(x, x.shape[-1:], w, b, eps), capsys)
    assert_passes(ex.check_layer_norm, HandWrittenLayerNorm, capsys)
    # a module is Chapter 3's exercise, which rules out the library's LayerNorm and the package's
    assert_fails(ex.check_layer_norm, nn.LayerNorm, capsys, "rules out")
    assert_fails(ex.check_layer_norm, LayerNorm, capsys, "rules out")


class HandWrittenLayerNorm(nn.Module):
    def __init__(self, D, eps=1e-5):
        super().__init__()
        self.weight, self.bias, self.eps = nn.Parameter(torch.ones(D)), nn.Parameter(torch.zeros(D)), eps

    def forward(self, x):
        return layer_norm(x, self.weight, self.bias, self.eps)


def unbiased(x, w, b, eps):
    return (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True) + eps) * w + b


def std_plus_eps(x, w, b, eps):
    return (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True, unbiased=False) + eps) * w + b


def no_affine(x, w, b, eps):
    return F.layer_norm(x, x.shape[-1:], None, None, eps)


def no_bias(x, w, b, eps):
    return F.layer_norm(x, x.shape[-1:], w, None, eps)


def fixed_eps(x, w, b, eps):
    return F.layer_norm(x, x.shape[-1:], w, b, 1e-5)


def first_dim(x, w, b, eps):
    mean, var = x.mean(0, keepdim=True), x.var(0, keepdim=True, unbiased=False)
    return (x - mean) / torch.sqrt(var + eps) * w + b


class GammaBetaLayerNorm(nn.Module):
    def __init__(self, D, eps=1e-5):
        super().__init__()
        self.gamma, self.beta, self.eps = nn.Parameter(torch.ones(D)), nn.Parameter(torch.zeros(D)), eps

    def forward(self, x):
        return F.layer_norm(x, x.shape[-1:], self.gamma, self.beta, self.eps)


class UnbiasedLayerNorm(nn.LayerNorm):
    def forward(self, x):
        return unbiased(x, self.weight, self.bias, self.eps)


@pytest.mark.parametrize("candidate, fragments", [
    (unbiased, ["case 1 of 3", "biased variance"]),
    (std_plus_eps, ["tiny variance", "eps goes inside the square root"]),
    (no_affine, ["scale and shift"]),
    (no_bias, ["add the shift bias"]),
    (fixed_eps, ["eps=0.1", "use the eps you are given"]),
    (first_dim, ["last dimension"]),
    (GammaBetaLayerNorm, ["no parameter weight"]),
    (UnbiasedLayerNorm, ["biased variance"]),
])
def test_layer_norm_mistakes(candidate, fragments, capsys):
    assert_fails(ex.check_layer_norm, candidate, capsys, *fragments)


# ----------------------------------------------------------------------------------------------
# Chapter 4: causal mask, attention, multi-head attention
# ----------------------------------------------------------------------------------------------


def test_causal_mask_references_pass(capsys):
    from gpt_from_scratch.attention import causal_mask

    # The hints about tril-built masks: the book's exercise forbids tril (tested in test_exercises_constraints)
    assert_passes(partial(ex.check_causal_mask, allow_tril=True), causal_mask, capsys)
    assert_passes(partial(ex.check_causal_mask, allow_tril=True), lambda T: torch.tril(torch.ones(T, T)).bool(),
                  capsys)


@pytest.mark.parametrize("candidate, fragments", [
    (lambda T: torch.ones(T, T, dtype=torch.bool).triu(), ["wrong side", "expected 1000 1100 1110 1111",
                                                           "got      1111 0111 0011 0001"]),
    (lambda T: ~torch.ones(T, T, dtype=torch.bool).tril(), ["inverted"]),
    (lambda T: torch.ones(T, T, dtype=torch.bool).tril(-1), ["diagonal must be True"]),
    (lambda T: torch.ones(T, T).tril(), ["dtype torch.float32", "boolean"]),
    (lambda T: torch.ones(T, T + 1, dtype=torch.bool).tril(), ["shape (4, 5)"]),
])
def test_causal_mask_mistakes(candidate, fragments, capsys):
    assert_fails(partial(ex.check_causal_mask, allow_tril=True), candidate, capsys, *fragments)


def attention(q, k, v, mask=None, scale=None, dim=-1, invert=False, use_mask=True):
    scores = q @ k.transpose(-2, -1) / (math.sqrt(q.size(-1)) if scale is None else scale)
    if mask is not None and use_mask:
        scores = scores.masked_fill(mask if invert else ~mask, NEG_INF)
    weights = torch.softmax(scores, dim=dim)
    return weights @ v, weights


def test_attention_references_pass(capsys):
    from gpt_from_scratch.attention import scaled_dot_product_attention

    check = partial(ex.check_scaled_dot_product_attention, require_einsum=False)
    assert_passes(check, scaled_dot_product_attention, capsys)
    assert_passes(check, attention, capsys)


@pytest.mark.filterwarnings("ignore:The use of `x.T` on tensors of dimension other than 2")
@pytest.mark.parametrize("candidate, fragments", [
    (lambda q, k, v, mask=None: attention(q, k, v, mask, dim=-2), ["dim=-1"]),
    (lambda q, k, v, mask=None: attention(q, k, v, mask, scale=1.0), ["1/sqrt(d_k) before the softmax"]),
    (lambda q, k, v, mask=None: attention(q, k, v, mask, scale=q.size(-1)), ["not 1/d_k"]),
    (lambda q, k, v, mask=None: attention(q, k, v, mask, invert=True), ["case 2 of 3", "inverted"]),
    (lambda q, k, v, mask=None: attention(q, k, v, mask, use_mask=False), ["case 2 of 3", "before the softmax"]),
    (lambda q, k, v, mask=None: attention(q, k, v, mask)[0], ["return output, weights"]),
    (lambda q, k, v, mask=None: attention(q, k.T, v, mask), ["case 1 of 3", "k.transpose(-2, -1)"]),
])
def test_attention_mistakes(candidate, fragments, capsys):
    assert_fails(partial(ex.check_scaled_dot_product_attention, require_einsum=False), candidate, capsys,
                 *fragments)


class Attention(nn.Module):
    """A compact GPT-2 attention; the flags reproduce the usual slips."""

    split_wrong = merge_wrong = no_mask = no_scale = False

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.c_attn = nn.Linear(d_model, 3 * d_model)
        self.c_proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        B, T, D = x.shape
        H, d_k = self.n_heads, D // self.n_heads
        q, k, v = self.c_attn(x).split(D, dim=2)
        if self.split_wrong:
            q, k, v = (t.reshape(B, H, T, d_k) for t in (q, k, v))
        else:
            q, k, v = (t.view(B, T, H, d_k).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-2, -1) / (1.0 if self.no_scale else math.sqrt(d_k))
        if not self.no_mask:
            scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), NEG_INF)
        y = torch.softmax(scores, dim=-1) @ v  # (B, H, T, d_k)
        y = y.reshape(B, T, D) if self.merge_wrong else y.transpose(1, 2).reshape(B, T, D)
        return self.c_proj(y)


def variant(**flags):
    return type("Variant", (Attention,), flags)


class RenamedAttention(Attention):
    def __init__(self, d_model, n_heads):
        super().__init__(d_model, n_heads)
        self.qkv = self.c_attn
        del self.c_attn


class TupleAttention(Attention):
    def forward(self, x):
        return super().forward(x), None


def test_multi_head_attention_references_pass(capsys):
    from gpt_from_scratch.attention import MultiHeadAttention

    check = partial(ex.check_multi_head_attention, require_loop=False)
    assert_passes(check, Attention, capsys)
    assert_passes(check, TupleAttention, capsys)


def test_multi_head_attention_reference_is_pytorchs():
    """The checker's reference equals nn.MultiheadAttention with the same weights (independent truth)."""
    torch.manual_seed(0)
    B, T, D, H = 2, 5, 16, 4
    mha = nn.MultiheadAttention(D, H, batch_first=True).double()
    x = torch.randn(B, T, D, dtype=torch.float64)
    blocked = ~torch.ones(T, T, dtype=torch.bool).tril()  # nn.MultiheadAttention: True = may NOT attend
    expected, _ = mha(x, x, x, attn_mask=blocked, need_weights=False)
    got = ex.ch04._mha_reference(x, mha.in_proj_weight, mha.in_proj_bias, mha.out_proj.weight, mha.out_proj.bias, H)
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("candidate, fragments", [
    (variant(split_wrong=True), ["transpose(1, 2)", "mixes positions and features"]),
    (variant(merge_wrong=True), ["merge the heads"]),
    (variant(no_mask=True), ["causal"]),
    (variant(no_scale=True), ["1/sqrt(d_k)"]),
    (RenamedAttention, ["c_attn.weight", "self.c_attn = nn.Linear"]),
])
def test_multi_head_attention_mistakes(candidate, fragments, capsys):
    assert_fails(partial(ex.check_multi_head_attention, require_loop=False), candidate, capsys, *fragments)


def test_multi_head_attention_instance_is_refused(capsys):
    assert_fails(ex.check_multi_head_attention, Attention(16, 4), capsys, "pass the class itself")


# ----------------------------------------------------------------------------------------------
# Chapter 7: top-k and top-p filters
# ----------------------------------------------------------------------------------------------


def top_k(logits, k, rank=-1, op=torch.lt):
    v = torch.topk(logits, k).values
    return logits.masked_fill(op(logits, v[..., [rank]]), NEG_INF)


def test_top_k_references_pass(capsys):
    assert_passes(ex.check_top_k_filter, top_k, capsys)
    generate = pytest.importorskip("gpt_from_scratch.generate")
    assert_passes(ex.check_top_k_filter, generate.top_k_filter, capsys)


def top_k_plus_one(logits, k):
    return top_k(logits, min(k + 1, logits.size(-1)))


def top_k_smallest(logits, k):
    v = torch.topk(logits, k, largest=False).values
    return logits.masked_fill(logits > v[..., [-1]], NEG_INF)


def top_k_global_threshold(logits, k):
    v = torch.topk(logits, k).values
    return logits.masked_fill(logits < v.flatten()[k - 1], NEG_INF)  # first row's threshold for every row


@pytest.mark.parametrize("candidate, fragments", [
    (top_k_plus_one, ["k + 1 tokens"]),
    (lambda logits, k: top_k(logits, k, op=torch.le), ["strictly below"]),
    (top_k_smallest, ["k smallest"]),
    (top_k_global_threshold, ["case 2 of 4", "broadcasts"]),
    (lambda logits, k: top_k(logits, k).masked_fill(top_k(logits, k) == NEG_INF, 0.0), ["float('-inf')"]),
    (lambda logits, k: torch.softmax(top_k(logits, k), dim=-1), ["not probabilities"]),
])
def test_top_k_mistakes(candidate, fragments, capsys):
    assert_fails(ex.check_top_k_filter, candidate, capsys, *fragments)


def top_p(logits, p, shift=True, extra=False, scatter=True, softmax=True):
    probs = torch.softmax(logits, dim=-1) if softmax else logits
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    cumulative = sorted_probs.cumsum(-1)
    remove = cumulative > p
    if shift:  # keep the token that crosses p
        remove = torch.cat([torch.zeros_like(remove[..., :1]), remove[..., :-1]], dim=-1)
    if extra:
        remove = torch.cat([torch.zeros_like(remove[..., :1]), remove[..., :-1]], dim=-1)
    if scatter:
        remove = remove.scatter(-1, order, remove)
    return logits.masked_fill(remove, NEG_INF)


def test_top_p_references_pass(capsys):
    assert_passes(ex.check_top_p_filter, top_p, capsys)
    generate = pytest.importorskip("gpt_from_scratch.generate")
    assert_passes(ex.check_top_p_filter, generate.top_p_filter, capsys)


@pytest.mark.parametrize("candidate, fragments", [
    (lambda logits, p: top_p(logits, p, shift=False), ["keep the token that crosses p"]),
    (lambda logits, p: top_p(logits, p, extra=True), ["one token too many"]),
    (lambda logits, p: top_p(logits, p, scatter=False), ["original positions"]),
    (lambda logits, p: top_p(logits, p, softmax=False), ["case 1 of 4"]),
])
def test_top_p_mistakes(candidate, fragments, capsys):
    assert_fails(ex.check_top_p_filter, candidate, capsys, *fragments)


def test_top_p_cases_are_far_from_the_threshold():
    """No hidden case has a cumulative probability within 1e-3 of p, so float rounding cannot flip a token."""
    probs = torch.tensor([0.05, 0.5, 0.15, 0.3])
    cases = [(torch.log(probs), p) for p in (0.7, 0.9, 0.2)]
    cases.append((2.0 * torch.randn(3, 12, generator=torch.Generator().manual_seed(5)), 0.8))
    for logits, p in cases:
        cumulative = torch.softmax(logits.double(), -1).sort(-1, descending=True).values.cumsum(-1)
        assert (cumulative - p).abs().min() > 1e-3


# ----------------------------------------------------------------------------------------------
# Every checker: exceptions, unfinished stubs, determinism, no side effects
# ----------------------------------------------------------------------------------------------

CHECKS = [getattr(ex, name) for name in ex.__all__ if name.startswith("check_")]
CLASS_CHECKS = (ex.check_multi_head_attention, ex.check_parallel_block)  # candidates are module classes


def raising(*args, **kwargs):
    raise ValueError("shapes do not match")


class RaisingModule(nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()
        raise ValueError("shapes do not match")


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_a_raising_candidate_gives_false_and_a_message(check, capsys):
    candidate = RaisingModule if check in CLASS_CHECKS else raising
    out = assert_fails(check, candidate, capsys, "case 1 of", "ValueError: shapes do not match", "hint:")
    assert 'raise ValueError("shapes do not match")' in out  # the line of the candidate that raised


def test_an_error_inside_pytorch_points_at_the_candidates_line(capsys):
    def layer_norm_wrong_shape(x, weight, bias, eps):
        return F.layer_norm(x, (3,), weight, bias, eps)  # normalized_shape should be (D,)

    out = assert_fails(ex.check_layer_norm, layer_norm_wrong_shape, capsys, "RuntimeError")
    assert "in layer_norm_wrong_shape(): return F.layer_norm(x, (3,), weight, bias, eps)" in out


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_an_unfinished_stub_says_not_implemented(check, capsys):
    class Stub(nn.Module):
        def __init__(self, *args, **kwargs):
            raise NotImplementedError("Exercise: write it")

    def stub(*args, **kwargs):
        raise NotImplementedError("Exercise: write it")

    candidate = Stub if check in CLASS_CHECKS else stub
    out = assert_fails(check, candidate, capsys, "not implemented yet", "NotImplementedError: Exercise: write it")
    assert len(out.splitlines()) == 2


def test_reports_are_deterministic_and_rng_states_untouched(capsys):
    torch.manual_seed(123)
    np.random.seed(123)
    random.seed(123)
    before = torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate()
    candidates = [shifted_get_batch(1, use_generator=False), unbiased]
    first = [run_check(check, c, capsys)[1] for check, c in zip((ex.check_get_batch, ex.check_layer_norm), candidates)]
    second = [run_check(check, c, capsys)[1] for check, c in zip((ex.check_get_batch, ex.check_layer_norm), candidates)]
    assert first == second
    assert torch.equal(torch.get_rng_state(), before[0])
    assert np.array_equal(np.random.get_state()[1], before[1])
    assert random.getstate() == before[2]
