"""Chapter 5: the GPT model is Hugging Face's GPT-2, number for number (checked on random small GPT-2s, offline)."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch.testing import assert_close
from transformers import GPT2Config, GPT2LMHeadModel

import gpt_from_scratch.attention as attention
from gpt_from_scratch.hf_weights import (
    WeightsUnavailableError,
    from_hf,
    from_pretrained,
    to_hf_config,
    to_hf_state_dict,
)
from gpt_from_scratch.layernorm import LayerNorm
from gpt_from_scratch.model import GPT, Block, GPTConfig

# (n_layers, d_model, n_heads, context_length, vocab_size, extra GPT2Config settings)
HF_CONFIGS = {
    "L2-D32-H2": (2, 32, 2, 16, 101, {}),
    "L3-D48-H4": (3, 48, 4, 48, 257, {}),
    "L1-D64-H8-gelu-dff100": (1, 64, 8, 40, 300, {"activation_function": "gelu", "n_inner": 100}),
    "L4-D128-H2-untied": (4, 128, 2, 64, 97, {"tie_word_embeddings": False}),
}


def hf_gpt2(n_layers, d_model, n_heads, context_length, vocab_size, seed=0, **extra) -> GPT2LMHeadModel:
    """A random GPT2LMHeadModel in eval mode with *every* parameter random.

    GPT-2's own init leaves biases at 0 and LayerNorms at γ = 1, β = 0, which would hide a
    swapped bias or LayerNorm; here they are all drawn at random.
    """
    torch.manual_seed(seed)
    config = GPT2Config(
        vocab_size=vocab_size, n_positions=context_length, n_embd=d_model, n_layer=n_layers, n_head=n_heads,
        attn_implementation="eager", bos_token_id=0, eos_token_id=0, **extra,
    )
    model = GPT2LMHeadModel(config).eval()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator)
            if "ln_" in name and name.endswith("weight"):
                param.copy_(1.0 + 0.2 * noise)
            else:
                param.copy_(0.1 * noise)
    return model


def shifted(idx: torch.Tensor) -> torch.Tensor:
    """Our targets for HF's ``labels=idx``: the next token, -100 (ignored) after the last one."""
    return torch.cat([idx[:, 1:], torch.full_like(idx[:, :1], -100)], dim=1)


def greedy(step, idx: torch.Tensor, n: int, context_length: int) -> torch.Tensor:
    """The simplest greedy decoder: ``step(idx) -> logits (B, T, V)``; keeps the last context_length tokens."""
    for _ in range(n):
        logits = step(idx[:, -context_length:])
        idx = torch.cat([idx, logits[:, -1].argmax(dim=-1, keepdim=True)], dim=1)
    return idx


@pytest.fixture(scope="module", params=list(HF_CONFIGS), ids=list(HF_CONFIGS))
def pair(request):
    n_layers, d_model, n_heads, context_length, vocab_size, extra = HF_CONFIGS[request.param]
    hf = hf_gpt2(n_layers, d_model, n_heads, context_length, vocab_size, **extra)
    return hf, from_hf(hf)


@torch.no_grad()
def test_logits_loss_and_attention_equal_hugging_face(pair):
    hf, model = pair
    V, T = hf.config.vocab_size, hf.config.n_positions
    idx = torch.randint(0, V, (3, T), generator=torch.Generator().manual_seed(1))
    out = hf(idx, labels=idx, output_attentions=True)
    logits, loss = model(idx, shifted(idx))
    print(f"max |logits - HF| = {(logits - out.logits).abs().max().item():.3g}")
    assert_close(logits, out.logits, atol=1e-5, rtol=0)
    assert_close(loss, out.loss, atol=1e-5, rtol=0)
    maps = model.attention_maps(idx)
    assert len(maps) == len(out.attentions) == hf.config.n_layer
    for ours, theirs in zip(maps, out.attentions):
        assert ours.shape == (3, hf.config.n_head, T, T)
        assert_close(ours, theirs, atol=1e-5, rtol=0)


@torch.no_grad()
def test_written_out_layernorm_and_attention_give_the_same_logits(pair):
    """Every LayerNorm and attention layer on its written-out lines (fast=False) still equals transformers."""
    hf, model = pair
    written = copy.deepcopy(model)
    switched = [m for m in written.modules() if isinstance(m, (LayerNorm, attention.MultiHeadAttention))]
    assert len(switched) == 3 * written.config.n_layers + 1  # ln_1, attn, ln_2 per block, and ln_f
    for module in switched:
        assert module.fast  # the model trains on the fused kernels
        module.fast = False
    idx = torch.randint(0, hf.config.vocab_size, (2, hf.config.n_positions), generator=torch.Generator().manual_seed(3))
    assert_close(written(idx)[0], hf(idx).logits, atol=1e-5, rtol=0)


@torch.no_grad()
def test_greedy_tokens_equal_hugging_face(pair):
    hf, model = pair
    prompt = torch.randint(0, hf.config.vocab_size, (2, 5), generator=torch.Generator().manual_seed(2))
    T_max = hf.config.n_positions
    ours = greedy(lambda x: model(x)[0], prompt, 30, T_max)
    theirs = greedy(lambda x: hf(x).logits, prompt, 30, T_max)
    assert torch.equal(ours, theirs)


@torch.no_grad()
def test_export_round_trips_to_hugging_face(pair):
    hf, model = pair
    exported = GPT2LMHeadModel(to_hf_config(model))
    exported.load_state_dict(to_hf_state_dict(model))  # strict: every key, every shape
    exported.eval()
    idx = torch.randint(0, hf.config.vocab_size, (2, 9), generator=torch.Generator().manual_seed(3))
    assert_close(exported(idx).logits, hf(idx).logits, atol=1e-5, rtol=0)
    assert model.config.tie_weights == hf.config.tie_word_embeddings


def test_tied_head_is_the_embedding_matrix():
    model = GPT(GPTConfig.from_preset("tiny"))
    assert model.lm_head.weight is model.wte.weight
    assert GPT(GPTConfig.from_preset("tiny", tie_weights=False)).lm_head.weight is not None
    hf = hf_gpt2(2, 32, 2, 16, 101)
    loaded = from_hf(hf)
    assert loaded.lm_head.weight is loaded.wte.weight  # still shared after loading
    untied = from_hf(hf_gpt2(2, 32, 2, 16, 101, tie_word_embeddings=False))
    assert untied.lm_head.weight is not untied.wte.weight


@torch.no_grad()
def test_from_hf_state_dict_infers_the_config():
    hf = hf_gpt2(2, 128, 2, 16, 101)
    idx = torch.randint(0, 101, (2, 16), generator=torch.Generator().manual_seed(4))
    expected = hf(idx).logits
    # the LM model's state dict ("transformer." prefix) and the bare GPT2Model's (no prefix, no lm_head)
    for state_dict in (hf.state_dict(), hf.transformer.state_dict()):
        model = from_hf(state_dict)  # n_heads inferred as d_model / 64 = 2
        assert (model.config.n_layers, model.config.n_heads, model.config.d_model) == (2, 2, 128)
        assert model.config.tie_weights
        assert_close(model(idx)[0], expected, atol=1e-5, rtol=0)
    small = hf_gpt2(2, 32, 4, 16, 101)
    with pytest.raises(ValueError, match="n_heads"):
        from_hf(small.state_dict())
    assert_close(from_hf(small.state_dict(), n_heads=4)(idx)[0], small(idx).logits, atol=1e-5, rtol=0)


def test_from_hf_errors_name_the_offending_key():
    state_dict = hf_gpt2(2, 32, 2, 16, 101).state_dict()

    missing = dict(state_dict)
    del missing["transformer.h.1.mlp.c_fc.bias"]
    with pytest.raises(ValueError, match=r"missing 'transformer\.h\.1\.mlp\.c_fc\.bias'"):
        from_hf(missing, n_heads=2)

    extra = {**state_dict, "transformer.h.0.attn.q_attn.weight": torch.zeros(32, 32)}
    with pytest.raises(ValueError, match=r"unexpected key 'transformer\.h\.0\.attn\.q_attn\.weight'"):
        from_hf(extra, n_heads=2)

    bad_shape = {**state_dict, "transformer.h.1.attn.c_attn.weight": torch.zeros(32, 95)}
    shape_message = r"'transformer\.h\.1\.attn\.c_attn\.weight' has shape \(32, 95\), expected \(32, 96\)"
    with pytest.raises(ValueError, match=shape_message):
        from_hf(bad_shape, n_heads=2)

    with pytest.raises(ValueError, match="wte.weight"):
        from_hf({"foo.weight": torch.zeros(2)})

    # old checkpoints carry causal-mask buffers: they are ignored
    buffers = {
        "transformer.h.0.attn.bias": torch.ones(1, 1, 16, 16),
        "transformer.h.0.attn.masked_bias": torch.tensor(-1e4),
    }
    old = {**state_dict, **buffers}
    from_hf(old, n_heads=2)


def test_from_hf_rejects_unsupported_hugging_face_settings():
    with pytest.raises(ValueError, match="scale_attn_by_inverse_layer_idx"):
        from_hf(hf_gpt2(1, 32, 2, 8, 50, scale_attn_by_inverse_layer_idx=True))
    with pytest.raises(ValueError, match="activation_function='silu'"):
        from_hf(hf_gpt2(1, 32, 2, 8, 50, activation_function="silu"))
    mixed = hf_gpt2(1, 32, 2, 8, 50, attn_pdrop=0.0)
    with pytest.raises(ValueError, match="dropout"):
        from_hf(mixed)
    assert from_hf(mixed, dropout=0.0).config.dropout == 0.0


@torch.no_grad()
def test_bias_free_model_exports_zero_biases():
    torch.manual_seed(5)
    model = GPT(GPTConfig.from_preset("tiny", bias=False, vocab_size=101)).eval()
    assert not any(name.endswith("bias") for name, _ in model.named_parameters())
    exported = GPT2LMHeadModel(to_hf_config(model))
    exported.load_state_dict(to_hf_state_dict(model))
    idx = torch.randint(0, 101, (2, 16), generator=torch.Generator().manual_seed(6))
    assert_close(exported.eval()(idx).logits, model(idx)[0], atol=1e-5, rtol=0)


@torch.no_grad()
def test_kv_cache_gives_the_same_logits_as_one_pass():
    torch.manual_seed(7)
    model = GPT(GPTConfig.from_preset("tiny", vocab_size=101)).eval()
    idx = torch.randint(0, 101, (2, 16), generator=torch.Generator().manual_seed(8))
    full, _ = model(idx)
    cache = model.new_kv_cache()
    assert len(cache) == model.config.n_layers and len(cache[0]) == 0
    pieces = [model(idx[:, :7], kv_cache=cache)[0]]
    pieces += [model(idx[:, t : t + 1], kv_cache=cache)[0] for t in range(7, 16)]
    assert len(cache[0]) == 16
    assert_close(torch.cat(pieces, dim=1), full, atol=1e-5, rtol=1e-5)


def test_context_length_and_input_errors():
    model = GPT(GPTConfig.from_preset("tiny", vocab_size=101))
    with pytest.raises(ValueError, match=r"T=17 tokens.*context_length=16"):
        model(torch.zeros(1, 17, dtype=torch.long))
    cache = model.new_kv_cache()
    model(torch.zeros(1, 10, dtype=torch.long), kv_cache=cache)
    with pytest.raises(ValueError, match=r"after 10 cached positions.*context_length=16"):
        model(torch.zeros(1, 7, dtype=torch.long), kv_cache=cache)
    with pytest.raises(ValueError, match=r"\[0, 101\)"):
        model(torch.tensor([[3, 101]]))
    with pytest.raises(ValueError, match="shape \\(B, T\\)"):
        model(torch.zeros(16, dtype=torch.long))
    with pytest.raises(ValueError, match="integer token ids"):
        model(torch.zeros(1, 4))
    with pytest.raises(ValueError, match="targets"):
        model(torch.zeros(1, 4, dtype=torch.long), torch.zeros(1, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="new_kv_cache"):
        model(torch.zeros(1, 4, dtype=torch.long), kv_cache=[attention.KVCache()])


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(d_model=768, n_heads=5), r"n_heads=5 does not divide d_model=768"),
        (dict(n_layers=0), r"n_layers=0 must be a positive int"),
        (dict(vocab_size=-3), r"vocab_size=-3"),
        (dict(d_ff=0), r"d_ff=0"),
        (dict(activation="swish"), r"activation='swish' is unknown.*gelu_tanh"),
        (dict(dropout=1.0), r"dropout=1.0 must be in \[0, 1\)"),
        (dict(dropout=-0.1), r"dropout=-0.1"),
        (dict(layer_norm_eps=0.0), r"layer_norm_eps"),
        (dict(colour="blue"), r"unknown GPTConfig field.*colour"),
    ],
)
def test_impossible_configs_raise_clear_errors(overrides, message):
    with pytest.raises(ValueError, match=message):
        GPTConfig.from_preset("tiny", **overrides)


def test_presets():
    names = "gpt2, gpt2-medium, gpt2-large, gpt2-xl, shakespeare-char, tiny"
    with pytest.raises(ValueError, match=f"unknown preset 'gpt3'.*{names}"):
        GPTConfig.from_preset("gpt3")
    assert GPTConfig() == GPTConfig.from_preset("gpt2")
    assert GPTConfig.from_preset("gpt2").d_ff == 3072
    assert GPTConfig.from_preset("tiny", d_model=64).d_ff == 256  # d_ff follows an overridden d_model
    char = GPTConfig.from_preset("shakespeare-char")
    assert (char.n_layers, char.n_heads, char.d_model, char.context_length, char.dropout, char.vocab_size) == (
        4, 4, 128, 64, 0.0, 65
    )


@pytest.mark.parametrize("name", ["gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl"])
def test_gpt2_family_parameter_counts_match_hugging_face(name):
    config = GPTConfig.from_preset(name)
    hf_config = GPT2Config(n_layer=config.n_layers, n_embd=config.d_model, n_head=config.n_heads)
    with torch.device("meta"):  # shapes only: no memory for the weights
        ours, theirs = GPT(config), GPT2LMHeadModel(hf_config)
    assert ours.num_parameters() == theirs.num_parameters()
    assert ours.num_parameters(exclude_embeddings=True) == theirs.num_parameters(exclude_embeddings=True)


def test_gpt2_small_parameter_count_by_hand():
    V, T_max, D, L = 50_257, 1_024, 768, 12
    per_block = 2 * 2 * D + (D * 3 * D + 3 * D) + (D * D + D) + (D * 4 * D + 4 * D) + (4 * D * D + D)
    tied = V * D + T_max * D + L * per_block + 2 * D
    assert tied == 124_439_808
    with torch.device("meta"):
        assert GPT(GPTConfig.from_preset("gpt2")).num_parameters() == tied
        assert GPT(GPTConfig.from_preset("gpt2", tie_weights=False)).num_parameters() == tied + V * D == 163_037_184


def test_gpt2_initialization():
    torch.manual_seed(9)
    config = GPTConfig.from_preset("tiny", d_model=256, n_layers=8, n_heads=4, vocab_size=1000)
    model = GPT(config)
    residual_std = 0.02 / math.sqrt(2 * config.n_layers)
    for name, param in model.named_parameters():
        is_layer_norm = ".ln_" in name or name.startswith("ln_f")
        if name.endswith("bias"):
            assert torch.count_nonzero(param) == 0, name
        elif is_layer_norm:
            assert torch.all(param == 1), name
        else:
            expected = residual_std if name.endswith("c_proj.weight") else 0.02
            assert param.mean().abs() < 0.1 * expected, name
            assert abs(param.std().item() / expected - 1) < 0.05, (name, param.std().item(), expected)


def test_state_dict_holds_parameters_only():
    model = GPT(GPTConfig.from_preset("tiny"))
    assert set(model.state_dict()) == {name for name, _ in model.named_parameters(remove_duplicate=False)}
    assert not list(model.buffers())


@torch.no_grad()
def test_untrained_loss_is_close_to_uniform():
    torch.manual_seed(10)
    model = GPT(GPTConfig.from_preset("tiny")).eval()  # GPT-2's 50,257 tokens
    idx = torch.randint(0, 50_257, (4, 16), generator=torch.Generator().manual_seed(11))
    _, loss = model(idx, torch.roll(idx, -1, dims=1))
    assert abs(loss.item() - math.log(50_257)) < 0.05


def test_attention_maps_are_causal_distributions(monkeypatch):
    torch.manual_seed(12)
    model = GPT(GPTConfig.from_preset("tiny", vocab_size=101)).eval()
    idx = torch.randint(0, 101, (2, 12), generator=torch.Generator().manual_seed(13))
    maps = model.attention_maps(idx)
    assert len(maps) == 2 and all(m.shape == (2, 2, 12, 12) for m in maps)
    for weights in maps:
        assert_close(weights.sum(-1), torch.ones(2, 2, 12))
        assert torch.all(weights.triu(diagonal=1) == 0)

    # the normal forward pass never builds the (B, H, T, T) weights: the written-out path is not called
    def forbidden(*args, **kwargs):
        raise AssertionError("forward materialized the attention weights")

    monkeypatch.setattr(attention, "scaled_dot_product_attention", forbidden)
    model(idx)
    model(idx[:, :3], kv_cache=model.new_kv_cache())


def test_gradients_reach_every_parameter_and_dropout_acts_in_training():
    torch.manual_seed(14)
    model = GPT(GPTConfig.from_preset("tiny", vocab_size=101, dropout=0.2))
    idx = torch.randint(0, 101, (2, 16), generator=torch.Generator().manual_seed(15))
    _, loss = model(idx, torch.roll(idx, -1, dims=1))
    loss.backward()
    for name, param in model.named_parameters():
        assert param.grad is not None and torch.count_nonzero(param.grad) > 0, name
    assert not torch.equal(model(idx)[0], model(idx)[0])  # training mode: dropout differs per call
    model.eval()
    assert torch.equal(model(idx)[0], model(idx)[0])


def test_block_is_pre_layer_norm():
    torch.manual_seed(16)
    config = GPTConfig.from_preset("tiny")
    block = Block(config).eval()
    x = torch.randn(2, 5, config.d_model)
    h = x + block.attn(block.ln_1(x))
    expected = h + block.mlp(block.ln_2(h))
    assert_close(block(x), expected)


@torch.no_grad()
def test_from_pretrained_reads_a_save_pretrained_directory(tmp_path):
    hf = hf_gpt2(2, 32, 2, 16, 101)
    hf.save_pretrained(tmp_path)
    model = from_pretrained(tmp_path)
    assert not model.training
    idx = torch.randint(0, 101, (1, 16), generator=torch.Generator().manual_seed(17))
    assert_close(model(idx)[0], hf(idx).logits, atol=1e-5, rtol=0)


def test_from_pretrained_offline_explains_what_to_do(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(WeightsUnavailableError, match="network connection once.*local directory"):
        from_pretrained("gpt2", cache_dir=tmp_path)  # an empty cache: nothing to fall back on
    with pytest.raises(ValueError, match="gpt2, gpt2-medium, gpt2-large, gpt2-xl"):
        from_pretrained("gpt-5")


@pytest.mark.parametrize("name", ["shakespeare-char", "tiny"])
def test_cpu_presets_run(name):
    model = GPT(GPTConfig.from_preset(name))
    idx = torch.randint(0, model.config.vocab_size, (2, model.config.context_length))
    logits, loss = model(idx, idx)
    assert logits.shape == (2, model.config.context_length, model.config.vocab_size) and loss.isfinite()
