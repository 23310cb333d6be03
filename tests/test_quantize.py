"""Chapter 16's weight-only quantization: the half-step bound, PyTorch's observer's scales
and integers, QuantizedLinear, quantized models (GPT, Llama, LoRA) close to float32, and
clear errors."""

from __future__ import annotations

import copy
import inspect
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import gpt_from_scratch.model as model_module
from gpt_from_scratch.evaluate import model_bits_per_byte
from gpt_from_scratch.generate import generate
from gpt_from_scratch.lora import LoRALinear, apply_lora, merge_lora
from gpt_from_scratch.model import GPT, GPTConfig
from gpt_from_scratch.modern import Llama, LlamaConfig
from gpt_from_scratch.quantize import (
    EPS,
    QuantizedLinear,
    QuantizedWeight,
    absmax_quantize,
    dequantize,
    model_bytes,
    pack_int4,
    q_max,
    quantize_model,
    unpack_int4,
    weight_error,
)
from gpt_from_scratch.tokenizer import CharTokenizer

SCHEMES = [(8, None), (8, 16), (4, 16), (4, None)]  # (bits, group_size)
# |w - q s| <= s / 2 exactly, up to the one float rounding, of w / s: |fl(w / s) - w / s|
# <= 2^-24 |w / s| < 2^-17 for |w / s| <= 128 (q s itself is exact in float64)
HALF_STEP = 0.5 + 2**-17


def tiny_gpt(vocab_size: int = 65, seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    config = GPTConfig(vocab_size=vocab_size, context_length=32, d_model=32, n_layers=2,
                       n_heads=2, dropout=0.0)
    return GPT(config).eval()


def weights(seed: int = 0) -> torch.Tensor:
    """(48, 64) rows of very different sizes, one row of zeros, one group of zeros."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(48, 64, generator=g) * torch.logspace(-4, 1, 48)[:, None]
    w[5] = 0.0
    w[9, 16:32] = 0.0
    return w


@pytest.fixture(scope="module")
def trained():
    """A tiny character GPT trained for 150 steps on model.py's source (about 2 s), its
    tokenizer and held-out ids: a model that predicts something, so that quantization has
    something to spoil (a random model's logits are nearly uniform whatever its weights)."""
    text = inspect.getsource(model_module)
    tok = CharTokenizer(text)
    ids = torch.tensor(tok.encode(text))
    n = int(0.9 * len(ids))
    train, held_out = ids[:n], ids[n:]
    model = tiny_gpt(tok.vocab_size).train()
    g = torch.Generator().manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(150):
        starts = torch.randint(0, len(train) - 33, (16,), generator=g)
        x = torch.stack([train[i: i + 32] for i in starts])  # (B, T)
        y = torch.stack([train[i + 1: i + 33] for i in starts])  # (B, T)
        loss = model(x, y)[1]
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval(), tok, held_out


# ----- one weight ---------------------------------------------------------------------

@pytest.mark.parametrize("bits, group_size", SCHEMES)
def test_round_trip_error_is_at_most_half_a_step(bits, group_size):
    w = weights()
    qw = absmax_quantize(w, bits, group_size)
    size = group_size or w.shape[1]
    s = qw.scale.double().repeat_interleave(size, dim=1)  # (out, in): each number's step
    err = (w.double() - qw.values().double() * s).abs()  # q s is exact in float64
    assert (err <= HALF_STEP * s).all()
    assert qw.values().abs().max() == q_max(bits)  # a group's largest number sits on q_max
    assert (err / s).max() > 0.45  # the bound is tight: a number is almost half a step off
    truncated = (w.double() / s).trunc() * s  # a wrong quantizer: toward zero, not nearest
    assert not ((w.double() - truncated).abs() <= HALF_STEP * s).all()


def test_groups_of_zeros_get_scale_eps_and_stay_exact_zeros():
    w = weights()
    for qw in (absmax_quantize(w), absmax_quantize(w, 4, 16)):
        assert (qw.scale[5] == EPS).all() and qw.scale.min() > 0
        assert (qw.dequantize()[5] == 0).all() and torch.isfinite(qw.dequantize()).all()
    assert absmax_quantize(w, 4, 16).scale[9, 1] == EPS  # w[9, 16:32], the second group


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor:UserWarning")  # deprecated
@pytest.mark.parametrize("bits, group_size", SCHEMES)
def test_scales_and_integers_equal_pytorchs_per_channel_observer(bits, group_size):
    """torch.ao's symmetric per-channel observer and torch.quantize_per_channel, an
    independent implementation. Their default int8 range is [-128, 127] (s = max|w| /
    127.5): quant_min = -q_max, quant_max = q_max make it ours. Groups are the rows of the
    weight reshaped (out * G, group_size). The default range gives other scales: the check
    can fail."""
    from torch.ao.quantization.observer import PerChannelMinMaxObserver

    w = weights()
    qw = absmax_quantize(w, bits, group_size)
    rows = w.reshape(-1, group_size or w.shape[1])  # (out * G, group_size)

    def observed(**quant_range):
        observer = PerChannelMinMaxObserver(ch_axis=0, dtype=torch.qint8,
                                            qscheme=torch.per_channel_symmetric,
                                            **quant_range)
        observer(rows)
        return observer.calculate_qparams()

    scale, zero_point = observed(quant_min=-q_max(bits), quant_max=q_max(bits))
    theirs = torch.quantize_per_channel(rows, scale, zero_point, 0, torch.qint8)
    assert torch.equal(qw.scale.flatten(), scale)
    assert torch.equal(qw.values(), theirs.int_repr().reshape(w.shape))
    assert torch.equal(qw.dequantize(), theirs.dequantize().reshape(w.shape))
    assert not torch.equal(qw.scale.flatten(), observed()[0])  # [-128, 127]: max|w| / 127.5


def test_int4_packs_two_numbers_to_a_byte():
    values = torch.arange(-8, 8, dtype=torch.int8).repeat(3, 2)  # (3, 32): all 16 numbers
    packed = pack_int4(values)
    assert packed.dtype == torch.uint8 and packed.shape == (3, 16)
    assert torch.equal(unpack_int4(packed), values)
    assert packed[0, 0] == (-8 + 8) | ((-7 + 8) << 4)  # column 0 low, column 1 high
    qw = absmax_quantize(weights(), bits=4, group_size=16)
    assert qw.shape == (48, 64)
    assert qw.nbytes == 48 * 64 // 2 + 48 * 4 * 4  # half a byte a number, 4 float32 scales
    assert absmax_quantize(weights()).nbytes == 48 * 64 + 48 * 4


def test_weight_error_by_hand():
    w = torch.tensor([[1.0, -0.5]])
    error = weight_error(w, torch.tensor([[1.0, -0.25]]))
    assert error.max_abs == 0.25 and error.relative == pytest.approx(0.25 / math.sqrt(1.25))
    assert weight_error(w, w).relative == 0.0
    assert weight_error(torch.zeros(2, 2), torch.zeros(2, 2)).relative == 0.0  # 0 of 0


def test_the_relative_error_of_an_all_zero_weight_is_refused():
    """It was inf, silently: ||W - Ŵ|| / ||W|| divides by 0."""
    with pytest.raises(ValueError, match=r"weight_error: w is all zeros .* max\|Ŵ\| = 1"):
        weight_error(torch.zeros(2, 2), torch.ones(2, 2))
    qw = absmax_quantize(weights())
    assert weight_error(weights(), qw).max_abs <= HALF_STEP * qw.scale.max().item()


# ----- one layer ----------------------------------------------------------------------

@pytest.mark.parametrize("bits, group_size", SCHEMES)
@pytest.mark.parametrize("bias", [True, False])
def test_quantized_linear_is_linear_with_the_dequantized_weight(bits, group_size, bias):
    torch.manual_seed(0)
    linear = nn.Linear(64, 48, bias=bias)
    layer = QuantizedLinear.from_linear(linear, bits, group_size)
    x = torch.randn(2, 5, 64)  # (B, T, in)
    W = absmax_quantize(linear.weight, bits, group_size).dequantize()  # (out, in)
    torch.testing.assert_close(layer(x), F.linear(x, W, linear.bias), atol=1e-5, rtol=0)
    assert set(layer.state_dict()) == ({"q", "scale", "bias"} if bias else {"q", "scale"})
    if group_size is None:  # torchao's form: the integers' matmul, then each output's scale
        q = layer.quantized_weight.values().float()  # (out, in)
        y = (x @ q.T) * layer.scale[:, 0]  # (B, T, out)
        y = y + linear.bias if bias else y
        torch.testing.assert_close(layer(x), y, atol=1e-5, rtol=0)


# ----- a model ------------------------------------------------------------------------

def linear_bytes(model: nn.Module, per_weight) -> int:
    """Bytes the block Linears of ``model`` hold when each weight (out, in) takes
    ``per_weight(out, in)`` bytes, biases in float32."""
    return sum(per_weight(*m.weight.shape) + (m.bias.nbytes if m.bias is not None else 0)
               for name, m in model.named_modules()
               if isinstance(m, nn.Linear) and name != "lm_head")


@pytest.mark.parametrize("bits, group_size", [(8, None), (4, 16)])
def test_quantize_model_copies_keeps_the_tie_and_counts_bytes(bits, group_size):
    model = tiny_gpt()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    quantized = quantize_model(model, bits, group_size)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert sum(isinstance(m, QuantizedLinear) for m in model.modules()) == 0
    assert sum(isinstance(m, QuantizedLinear) for m in quantized.modules()) == 8  # 2 x 4
    assert type(quantized.lm_head) is nn.Linear  # tied: left in float32, still wte's matrix
    assert quantized.lm_head.weight is quantized.wte.weight
    # exact accounting: only the block Linears' weights change size; wte (= lm_head), wpe,
    # the norms and the biases stay float32. Here 114,304 bytes; int8 42,880; int4 34,432.
    def stored(o, i):  # bits / 8 bytes a number, and a float32 scale a group
        return o * i * bits // 8 + o * (i // (group_size or i)) * 4

    full = model_bytes(model)
    assert full == 4 * model.num_parameters()
    assert model_bytes(quantized) == full - linear_bytes(model, lambda o, i: 4 * o * i) + (
        linear_bytes(model, stored))
    assert model_bytes(quantized.wte) + model_bytes(quantized.wpe) == 4 * (65 + 32) * 32


@pytest.mark.parametrize("bits, group_size, most", [(8, None, 0.01), (4, 16, 0.05)])
def test_quantized_gpt_logits_stay_close(trained, bits, group_size, most):
    """Measured on the trained tiny GPT (8 x 32 held-out positions): int8 per row, max
    |Δlogit| 0.025, relative error ||Δ|| / ||logits|| 0.0008, argmax equal at 99.2% of the
    positions, greedy text equal; int4 in groups of 16: 0.43, 0.011, 97.3%, 26 of 32 tokens
    equal. Bounds: each layer's relative weight error is about 0.6% (int8) and 9% (int4/16);
    the float32 embeddings carry most of the residual stream, so the logits move less than
    the weights: 1% and 5% leave margins of about 12 and 4. Token agreement is reported and
    only loosely asserted."""
    model, _, held_out = trained
    quantized = quantize_model(model, bits, group_size)
    x = held_out[: 8 * 32].view(8, 32)  # (B, T)
    with torch.no_grad():
        logits, approx = model(x)[0], quantized(x)[0]  # 2 x (B, T, V)
    relative = ((approx - logits).norm() / logits.norm()).item()
    assert relative < most
    agree = (approx.argmax(-1) == logits.argmax(-1)).float().mean().item()
    assert agree >= 0.9  # near-ties between two logits may flip
    prompt = held_out[None, :8]
    tokens = generate(model, prompt, 24, greedy=True)
    quantized_tokens = generate(quantized, prompt, 24, greedy=True)
    assert (tokens == quantized_tokens).float().mean() >= 0.5  # int8: 32 of 32 here


def test_bits_per_byte_stays_close(trained):
    """Chapter 11's bits per byte on the held-out tenth of the text (1,507 characters).
    Measured: float32 4.2337, int8 4.2335, int4 in groups of 16 4.2346, against log2(93) =
    6.54 for guessing. Weak evidence (a tiny model, 150 steps); Chapter 16 measures the
    book's trained model."""
    model, tok, held_out = trained

    def bpb(m):
        return model_bits_per_byte(m, held_out, lambda t: len(tok.chars[t].encode("utf-8")))

    full = bpb(model)
    assert full < math.log2(tok.vocab_size) - 2  # it learned: far below guessing
    assert abs(bpb(quantize_model(model)) - full) < 0.005
    assert abs(bpb(quantize_model(model, bits=4, group_size=16)) - full) < 0.05


def test_static_decoding_runs_on_the_quantized_copy(trained):
    """Chapter 7's static cache reads lm_head.weight (kept: tied); the static decoders it
    caches on a model are not copied onto the quantized one."""
    model, _, held_out = trained
    prompt = held_out[None, :8]
    generate(model, prompt, 4, greedy=True, static_cache=True)
    quantized = quantize_model(model)
    assert model.__dict__["_static_decoders"] and not quantized.__dict__["_static_decoders"]
    assert torch.equal(generate(quantized, prompt, 16, greedy=True, static_cache=True),
                       generate(quantized, prompt, 16, greedy=True))


def test_llama_without_biases_and_untied_head():
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=65, context_length=32, d_model=32, n_layers=2,
                         n_heads=2, n_kv_heads=1, d_ff=64)
    model = Llama(config).eval()
    quantized = quantize_model(model)
    layers = [m for m in quantized.modules() if isinstance(m, QuantizedLinear)]
    assert len(layers) == 2 * 7 + 1 and all(m.bias is None for m in layers)  # + the head
    assert isinstance(quantized.lm_head, QuantizedLinear)  # untied: its own matrix
    assert type(quantize_model(model, skip=("lm_head",)).lm_head) is nn.Linear
    x = torch.randint(0, 65, (2, 32))
    with torch.no_grad():
        logits, approx = model(x)[0], quantized(x)[0]
    assert ((approx - logits).norm() / logits.norm()).item() < 0.02  # measured 0.0055


def test_lora_must_be_merged_and_then_quantizes_the_merged_weights():
    model = tiny_gpt()
    apply_lora(model, r=2, alpha=4.0)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:  # lora_B starts at zero: give the update something to add
                p.normal_(0.0, 0.05)
    with pytest.raises(ValueError, match=r"LoRA layer blocks\.0\.attn\.c_attn is not "
                                         r"merged.*call merge_lora\(model\) first"):
        quantize_model(model)
    merge_lora(model)
    quantized = quantize_model(model)
    assert isinstance(model.blocks[0].attn.c_attn, LoRALinear)  # the caller's keeps LoRA
    # an independent path: the merged weights loaded into a plain GPT, then quantized
    plain = tiny_gpt(seed=1)
    merged = {k.replace(".base.", "."): v for k, v in model.state_dict().items()
              if "lora_" not in k}
    plain.load_state_dict(merged)
    x = torch.randint(0, 65, (2, 32))
    with torch.no_grad():
        assert torch.equal(quantized(x)[0], quantize_model(plain)(x)[0])


# ----- what a reader may get wrong ----------------------------------------------------

def nan_model() -> GPT:
    model = tiny_gpt()
    with torch.no_grad():
        model.blocks[1].mlp.c_fc.weight[3, 4] = float("nan")
    return model


@pytest.mark.parametrize("call, error, match", [
    (lambda: absmax_quantize(weights(), bits=3), ValueError,
     r"bits=3 is not supported: choose one of \(4, 8\)"),
    (lambda: absmax_quantize(weights(), bits=8.0), ValueError, r"bits=8\.0 must be an int"),
    (lambda: absmax_quantize(weights(), group_size=5), ValueError,
     r"group_size 5 does not divide in_features 64 of w; pick a divisor of 64: \[1, 2, 4"),
    (lambda: absmax_quantize(weights(), group_size=0), ValueError,
     r"group_size=0 must be a positive int"),
    (lambda: absmax_quantize(torch.ones(4, 7), bits=4), ValueError,
     r"odd in_features 7, and bits=4 packs two numbers to a byte along a row: use bits=8"),
    (lambda: absmax_quantize(torch.ones(4, 8, dtype=torch.int64)), TypeError,
     r"w holds torch\.int64, not floating-point numbers"),
    (lambda: absmax_quantize(torch.ones(8)), ValueError,
     r"shape \(8,\): pass a 2-D \(out, in\)"),
    (lambda: absmax_quantize([[1.0]]), TypeError, r"w is a list, not a torch\.Tensor"),
    (lambda: absmax_quantize(torch.tensor([[1.0, math.inf]])), ValueError,
     r"w holds nan or inf"),
    (lambda: quantize_model(nan_model()), ValueError,
     r"blocks\.1\.mlp\.c_fc\.weight holds nan or inf"),
    (lambda: quantize_model(tiny_gpt(), bits=2), ValueError, r"choose one of \(4, 8\)"),
    (lambda: quantize_model(tiny_gpt(), skip=("c_atn",)), ValueError,
     r"skip names \['c_atn'\], which no nn\.Linear of the model is called"),
    (lambda: quantize_model(tiny_gpt(), skip="lm_head"), TypeError,
     r"must be a tuple of layer names, e\.g\. skip=\('lm_head',\)"),
    (lambda: quantize_model(nn.Sequential(nn.Embedding(5, 4), nn.LayerNorm(4))), ValueError,
     r"no nn\.Linear to quantize \(0 found"),
    (lambda: quantize_model(quantize_model(tiny_gpt())), ValueError,
     r"1 found, all tied or skipped; a model quantized already has none left"),
    (lambda: quantize_model(tiny_gpt().state_dict()), TypeError, r"model is a OrderedDict"),
    (lambda: weight_error(weights(), torch.ones(3, 3)), ValueError,
     r"w has shape \(48, 64\), its approximation \(3, 3\)"),
    (lambda: weight_error(torch.tensor([[float("nan"), 1.0]]), torch.ones(1, 2)),
     ValueError, r"weight_error: w or its approximation holds NaN or inf"),
])
def test_clear_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_dequantize_function_and_method_agree():
    qw = absmax_quantize(weights(), bits=4, group_size=8)
    assert isinstance(qw, QuantizedWeight) and torch.equal(dequantize(qw), qw.dequantize())


# ----- torchao, where it is installed -------------------------------------------------

def test_int8_is_within_half_steps_of_torchaos_int8_weight_only():
    """torchao's Int8WeightOnlyConfig: per-row symmetric int8 on [-128, 127], so its scale
    is max|w| / 127.5 where ours is max|w| / 127, and an integer may differ by one. Each
    weight of either is within half its own step of w, so the two are within s_ours of each
    other, and a layer's outputs within sum_j |x_j| s_ours[o]: asserted layer by layer (the
    tied head, which torchao would untie, is filtered out)."""
    pytest.importorskip("torchao", reason="torchao is not installed here: this parity test "
                                          "runs where it is (pip install torchao)")
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    model = tiny_gpt()
    ours = quantize_model(model)
    theirs = copy.deepcopy(model)
    quantize_(theirs, Int8WeightOnlyConfig(),
              filter_fn=lambda m, fqn: isinstance(m, nn.Linear) and fqn != "lm_head")
    torch.manual_seed(1)
    for name, layer in ours.named_modules():
        if isinstance(layer, QuantizedLinear):
            x = torch.randn(4, layer.in_features)  # (B, in)
            with torch.no_grad():
                y_ours, y_theirs = layer(x), theirs.get_submodule(name)(x)  # 2 x (B, out)
            bound = x.abs().sum(-1, keepdim=True) * layer.scale[:, 0]  # (B, out)
            assert ((y_ours - y_theirs).abs() <= bound + 1e-5).all(), name
            assert not torch.equal(y_theirs, model.get_submodule(name)(x)), name  # changed


def test_a_quantized_linear_takes_float64_inputs_bias_and_all():
    linear = nn.Linear(8, 4)
    layer = QuantizedLinear.from_linear(linear)
    x = torch.randn(3, 8, dtype=torch.float64)
    weight = layer.quantized_weight.dequantize().double()
    expected = F.linear(x, weight, linear.bias.double())
    torch.testing.assert_close(layer(x), expected)
