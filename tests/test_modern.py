"""Chapter 10: RMSNorm, SwiGLU, RoPE, grouped-query attention and the Llama-style model, each against
PyTorch or transformers; bad shapes raise clear errors; the generated verdict says what the numbers say."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torch.testing import assert_close

from gpt_from_scratch.attention import KVCache, MultiHeadAttention
from gpt_from_scratch.checkpoint import load_checkpoint, save_checkpoint
from gpt_from_scratch.book.modern_prose import comparison_text
from gpt_from_scratch.generate import generate
from gpt_from_scratch.gqa import GroupedQueryAttention, kv_cache_bytes_per_token, repeat_kv
from gpt_from_scratch.layernorm import RMSNorm
from gpt_from_scratch.modern import Llama, LlamaConfig, SwiGLU, llama_hidden_size
from gpt_from_scratch.rope import apply_rope, rope_cos_sin, rope_frequencies
from gpt_from_scratch.train import train
from gpt_from_scratch.train_config import TrainConfig

transformers = pytest.importorskip("transformers")
from transformers import LlamaForCausalLM  # noqa: E402
from transformers.models.llama import modeling_llama  # noqa: E402


def _g(seed=0):
    return torch.Generator().manual_seed(seed)


# ----- RMSNorm -------------------------------------------------------------------------------------

@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("shape, eps", [((2, 3, 8), 1e-5), ((4, 64), 1e-6), ((5, 16), 0.1)])
def test_rms_norm_matches_torch_outputs_and_gradients(shape, eps, fast):
    D = shape[-1]
    reference = nn.RMSNorm(D, eps=eps)
    with torch.no_grad():
        reference.weight.copy_(1 + 0.5 * torch.randn(D, generator=_g(1)))
    ours = RMSNorm(D, eps=eps, fast=fast)
    ours.load_state_dict(reference.state_dict())
    x1 = (3 + 2 * torch.randn(shape, generator=_g(2))).requires_grad_()
    x2 = x1.detach().clone().requires_grad_()
    upstream = torch.randn(shape, generator=_g(3))
    (ours(x1) * upstream).sum().backward()
    (reference(x2) * upstream).sum().backward()
    assert_close(ours(x1), reference(x2))
    assert_close(x1.grad, x2.grad)
    assert_close(ours.weight.grad, reference.weight.grad)


def test_rms_norm_matches_llama_rms_norm():
    hf = modeling_llama.LlamaRMSNorm(32, eps=1e-6)
    with torch.no_grad():
        hf.weight.normal_(1.0, 0.3, generator=_g(4))
    ours = RMSNorm(32, eps=1e-6)
    ours.load_state_dict(hf.state_dict())
    x = torch.randn(3, 7, 32, generator=_g(5))
    assert_close(ours(x), hf(x))


@pytest.mark.parametrize("kwargs, fragment", [(dict(D=0), "positive int"), (dict(D=8, eps=0.0), "eps=0.0")])
def test_rms_norm_rejects_bad_settings(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        RMSNorm(**kwargs)


def test_rms_norm_rejects_a_wrong_width():
    with pytest.raises(ValueError, match=r"does not end in D=8"):
        RMSNorm(8)(torch.randn(2, 7))


# ----- SwiGLU ---------------------------------------------------------------------------------------

def test_llama_hidden_size_is_llamas():
    assert llama_hidden_size(4096) == 11_008  # Llama 7B
    assert llama_hidden_size(5120) == 13_824  # Llama 13B
    assert llama_hidden_size(768) == 2048  # 8/3 * 768 exactly
    assert llama_hidden_size(64, multiple_of=32) == 192  # int(170.67) = 170, up to 192


def test_swiglu_matches_llama_mlp_and_keeps_the_parameter_count():
    hf = modeling_llama.LlamaMLP(transformers.LlamaConfig(hidden_size=48, intermediate_size=128,
                                                          num_attention_heads=4))
    ours = SwiGLU(48, 128)
    ours.load_state_dict({k.replace("down_proj", "c_proj"): v for k, v in hf.state_dict().items()})
    x = torch.randn(2, 5, 48, generator=_g(6))
    assert_close(ours(x), hf(x))
    swiglu = SwiGLU(768, llama_hidden_size(768))
    assert sum(p.numel() for p in swiglu.parameters()) == 8 * 768**2  # GPT-2's 2 x (768 x 3072)


# ----- RoPE -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("d_head, theta, start", [(16, 10_000.0, 0), (64, 500_000.0, 37), (2, 100.0, 5)])
def test_rope_matches_transformers(d_head, theta, start):
    H, T = 3, 9
    config = transformers.LlamaConfig(hidden_size=H * d_head, num_attention_heads=H, rope_theta=theta)
    rotary = modeling_llama.LlamaRotaryEmbedding(config=config)  # a keyword: 4.x took dim first
    q = torch.randn(2, H, T, d_head, generator=_g(7))
    k = torch.randn(2, H, T, d_head, generator=_g(8))
    positions = torch.arange(start, start + T)
    hf_cos, hf_sin = rotary(q, positions[None])
    hf_q, hf_k = modeling_llama.apply_rotary_pos_emb(q, k, hf_cos, hf_sin)
    cos, sin = rope_cos_sin(positions, d_head, theta)
    assert_close(apply_rope(q, cos, sin), hf_q)
    assert_close(apply_rope(k, cos, sin), hf_k)


def test_rope_scores_depend_only_on_the_offset():
    d = 32
    q, k = torch.randn(d, generator=_g(9)), torch.randn(d, generator=_g(10))
    cos, sin = rope_cos_sin(torch.arange(40), d)
    scores = apply_rope(q.expand(40, d), cos, sin) @ apply_rope(k.expand(40, d), cos, sin).T
    for offset in (0, 1, 5, 17):
        diagonal = scores.diagonal(-offset)  # (m, m - offset)
        assert_close(diagonal, diagonal[:1].expand_as(diagonal), atol=1e-4, rtol=1e-4)
    assert not torch.allclose(scores.diagonal(-1)[0], scores.diagonal(-2)[0])  # offsets differ


@pytest.mark.parametrize("d_head", [7, 0, -2])
def test_rope_rejects_odd_or_empty_head_widths(d_head):
    with pytest.raises(ValueError, match="even head width"):
        rope_frequencies(d_head)


def test_rope_rejects_angles_of_the_wrong_shape():
    cos, sin = rope_cos_sin(torch.arange(4), 8)
    with pytest.raises(ValueError, match="does not fit angles"):
        apply_rope(torch.randn(1, 2, 5, 8), cos, sin)


# ----- Grouped-query attention ------------------------------------------------------------------------

@pytest.mark.parametrize("n_rep", [1, 2, 4])
def test_repeat_kv_matches_transformers(n_rep):
    x = torch.randn(2, 3, 5, 4, generator=_g(11))
    assert_close(repeat_kv(x, n_rep), modeling_llama.repeat_kv(x, n_rep))
    assert_close(repeat_kv(x, n_rep), x.repeat_interleave(n_rep, dim=1))


@pytest.mark.parametrize("fast", [True, False])
def test_gqa_with_as_many_kv_heads_as_heads_is_multi_head_attention(fast):
    D, H = 32, 4
    mha = MultiHeadAttention(D, H, bias=False).eval()
    gqa = GroupedQueryAttention(D, H, n_kv_heads=H, fast=fast)
    w_q, w_k, w_v = mha.c_attn.weight.detach().split(D, dim=0)
    gqa.load_state_dict({"q_proj.weight": w_q, "k_proj.weight": w_k, "v_proj.weight": w_v,
                         "c_proj.weight": mha.c_proj.weight.detach()})
    x = torch.randn(2, 7, D, generator=_g(12))
    with torch.no_grad():
        assert_close(gqa(x), mha(x))
        c1, c2 = KVCache(), KVCache()
        mha(x[:, :3], kv_cache=c1), gqa(x[:, :3], kv_cache=c2)
        assert_close(gqa(x[:, 3:5], kv_cache=c2), mha(x[:, 3:5], kv_cache=c1))  # T > 1 after a cache
        assert_close(gqa(x[:, 5:6], kv_cache=c2), mha(x[:, 5:6], kv_cache=c1))  # T = 1


def test_gqa_caches_only_the_kv_heads_and_fast_equals_written_out():
    gqa = GroupedQueryAttention(48, 6, n_kv_heads=2)
    x = torch.randn(1, 5, 48, generator=_g(13))
    cos, sin = rope_cos_sin(torch.arange(5), 8)
    cache = KVCache()
    with torch.no_grad():
        y = gqa(x, cos, sin, kv_cache=cache)
        gqa.fast = False
        assert_close(gqa(x, cos, sin), y)
    assert cache.keys.shape == (1, 2, 5, 8)
    assert kv_cache_bytes_per_token(1, 2, 8, bytes_per_number=4) == cache.keys.nbytes * 2 / 5


@pytest.mark.parametrize("kwargs, fragment", [
    (dict(d_model=30, n_heads=4, n_kv_heads=2), "n_heads=4 does not divide d_model=30"),
    (dict(d_model=48, n_heads=6, n_kv_heads=4), r"n_kv_heads=4 does not divide n_heads=6.*\[1, 2, 3, 6\]"),
])
def test_gqa_rejects_head_counts_that_do_not_divide(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        GroupedQueryAttention(**kwargs)


def test_kv_cache_bytes_per_token_for_known_models():
    assert kv_cache_bytes_per_token(12, 12, 64) == 36_864  # GPT-2 small, float16
    assert kv_cache_bytes_per_token(32, 8, 128) == 131_072  # Llama 3 8B: 128 KiB


# ----- The whole model ---------------------------------------------------------------------------------

SHAPES = [
    dict(vocab_size=101, context_length=24, d_model=64, n_layers=3, n_heads=8, n_kv_heads=2, d_ff=160),
    dict(vocab_size=77, context_length=20, d_model=48, n_layers=2, n_heads=6, n_kv_heads=1, d_ff=128,
         rope_theta=500_000.0, rms_norm_eps=1e-6),
    dict(vocab_size=64, context_length=16, d_model=32, n_layers=1, n_heads=2, n_kv_heads=2, d_ff=96,
         tie_weights=True),
    dict(vocab_size=50, context_length=18, d_model=96, n_layers=2, n_heads=12, n_kv_heads=3, d_ff=200),
]


def _pair(shape, seed):
    config = LlamaConfig(**shape)
    torch.manual_seed(seed)
    hf = LlamaForCausalLM(Llama(config).to_hf_config()).eval()
    hf.generation_config.eos_token_id = None  # greedy to the end: no token stops it early
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0.0, 0.1)
    return Llama.from_hf(hf), hf


@pytest.mark.parametrize("seed, shape", list(enumerate(SHAPES)))
def test_llama_logits_and_greedy_tokens_equal_transformers(seed, shape):
    ours, hf = _pair(shape, seed)
    c = ours.config
    idx = torch.randint(c.vocab_size, (3, c.context_length), generator=_g(seed))
    with torch.no_grad():
        diff = (ours(idx)[0] - hf(idx).logits).abs().max().item()
    assert diff <= 1e-5
    prompt, n = idx[:, :5], c.context_length - 5
    hf_tokens = hf.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False, max_new_tokens=n,
                            pad_token_id=0)
    cached = generate(ours, prompt, n, greedy=True)
    assert torch.equal(cached, hf_tokens)
    assert torch.equal(cached, generate(ours, prompt, n, greedy=True, use_cache=False))


def test_llama_generates_past_its_context_with_and_without_the_cache():
    ours, _ = _pair(SHAPES[0], 5)
    prompt = torch.randint(101, (2, 6), generator=_g(14))
    n = 2 * ours.config.context_length  # the cache is rebuilt when full
    sampled = [generate(ours, prompt, n, top_k=10, generator=_g(15), use_cache=c) for c in (True, False)]
    assert torch.equal(*sampled)


def test_llama_loss_and_from_state_dict():
    ours, hf = _pair(SHAPES[1], 3)
    idx = torch.randint(77, (2, 10), generator=_g(16))
    targets = idx.roll(-1, 1)
    targets[:, -1] = -100
    loss = ours(idx, targets)[1]
    with torch.no_grad():
        assert_close(loss, hf(idx, labels=idx).loss)  # transformers shifts the labels itself
    again = Llama.from_hf(hf.state_dict(), config=ours.config)
    assert_close(again(idx)[0], ours(idx)[0])
    round_trip = ours.to_hf_state_dict()
    assert set(round_trip) == set(hf.state_dict())
    assert all(torch.equal(round_trip[k], v) for k, v in hf.state_dict().items())


def test_llama_from_hf_names_bad_keys_and_needs_a_config():
    ours, hf = _pair(SHAPES[2], 4)
    state = hf.state_dict()
    with pytest.raises(ValueError, match="needs config"):
        Llama.from_hf(state)
    state["model.layers.0.self_attn.q_proj.bias"] = torch.zeros(32)
    with pytest.raises(ValueError, match=r"unknown keys \['model.layers.0.self_attn.q_proj.bias'\]"):
        Llama.from_hf(state, config=ours.config)
    del state["model.layers.0.self_attn.q_proj.bias"], state["model.norm.weight"]
    with pytest.raises(ValueError, match=r"missing \['ln_f.weight'\]"):
        Llama.from_hf(state, config=ours.config)


def test_llama_from_hf_refuses_what_it_does_not_implement():
    config = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                      num_attention_heads=4, vocab_size=20, attention_bias=True)
    with pytest.raises(ValueError, match="attention_bias"):
        Llama.from_hf(LlamaForCausalLM(config))


@pytest.mark.parametrize("kwargs, fragment", [
    (dict(d_model=30, n_heads=4), "n_heads=4 does not divide d_model=30"),
    (dict(d_model=48, n_heads=6, n_kv_heads=4), "n_kv_heads=4 does not divide n_heads=6"),
    (dict(d_model=36, n_heads=4, n_kv_heads=2), r"even head width, got d_head=9"),
    (dict(n_layers=0), "n_layers=0 must be a positive int"),
    (dict(rope_theta="10000"), r"rope_theta='10000' must be a number \(str given\): pass e.g. "
                               "rope_theta=10000"),
    (dict(rope_theta=1.0), r"rope_theta=1.0 must be in \(1, inf\)"),
])
def test_llama_config_rejects_bad_shapes(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        LlamaConfig(**kwargs)


def test_llama_forward_rejects_bad_inputs():
    model = Llama(LlamaConfig(**SHAPES[2]))
    with pytest.raises(ValueError, match="context_length=16"):
        model(torch.zeros(1, 17, dtype=torch.long))
    with pytest.raises(ValueError, match=r"token ids must be in \[0, 64\)"):
        model(torch.tensor([[3, 64]]))
    with pytest.raises(ValueError, match="targets must be token ids"):
        model(torch.tensor([[3, 4]]), torch.tensor([[1, 99]]))


def test_llama_weights_run_at_a_longer_context():
    """No position table: the same state dict loads into a model with a longer context."""
    short = Llama(LlamaConfig(**SHAPES[0]))
    long = Llama(LlamaConfig(**{**SHAPES[0], "context_length": 64}))
    long.load_state_dict(short.state_dict())
    idx = torch.randint(101, (1, 24), generator=_g(17))
    with torch.no_grad():
        assert_close(long(idx)[0], short(idx)[0])
        assert long(torch.randint(101, (1, 64), generator=_g(18)))[0].isfinite().all()



def test_a_llama_trained_with_out_dir_loads_and_resumes(tmp_path):
    """Its checkpoints name the model they hold: load_checkpoint and resume=True rebuild a
    Llama (they used to refuse them as an invalid GPTConfig)."""
    model = Llama(LlamaConfig(**SHAPES[2]))
    data = np.random.default_rng(0).integers(0, 64, 400).astype(np.uint16)
    cfg = dict(batch_size=2, block_size=8, eval_interval=2, eval_iters=1, progress=False)
    train(model, data, data, TrainConfig(max_iters=2, **cfg), out_dir=tmp_path)
    loaded = load_checkpoint(tmp_path).model
    assert type(loaded) is Llama and loaded.config == model.config
    state = model.state_dict()
    assert all(torch.equal(v, state[k]) for k, v in loaded.state_dict().items())
    history = train(model, data, data, TrainConfig(max_iters=3, **cfg), out_dir=tmp_path,
                    resume=True)
    assert history.step == [0, 1, 2] and load_checkpoint(tmp_path).step == 3
    with pytest.raises(TypeError, match="a checkpoint rebuilds only GPT or Llama"):
        save_checkpoint(tmp_path / "linear", nn.Linear(2, 2))


@pytest.mark.parametrize("build, fragment", [
    (lambda: llama_hidden_size(64, multiple_of=0), "multiple_of=0 must be a positive int"),
    (lambda: Llama(LlamaConfig(**SHAPES[2]))(torch.zeros(1, 2, dtype=torch.long),
                                              kv_cache=[]),
     "kv_cache has 0 layers, the model 1: use model.new_kv_cache()"),
    (lambda: rope_frequencies(8, theta="1e4"), "rope theta='1e4' must be > 1"),
    (lambda: GroupedQueryAttention(32, "4"), r"n_heads='4' must be an int \(str given\)"),
])
def test_chapter_10_parts_name_a_bad_value_and_the_fix(build, fragment):
    """Each used to fail with a bare ZeroDivisionError, IndexError or TypeError."""
    with pytest.raises(ValueError, match=fragment):
        build()
    assert torch.equal(rope_frequencies(np.int64(8)), rope_frequencies(8))  # NumPy's is one

# ----- The generated verdict ---------------------------------------------------------------------------

def test_comparison_text_names_a_real_difference_only_when_there_is_one():
    clear = comparison_text([1.90, 1.91, 1.92], [1.80, 1.81, 1.79], 0.010, 0.012, 250)
    assert "Llama-style model is lower by 0.110" in clear and "on every seed" in clear
    assert "the difference is real" in clear
    assert "1.910 ± 0.010" in clear and "1.20 times as long" in clear and "slower" in clear
    noisy = comparison_text([1.90, 1.95, 1.85], [1.88, 1.97, 1.86], 0.010, 0.009, 250)
    assert "cannot tell the two architectures apart" in noisy and "lower on 1 of 3 seeds" in noisy
    assert "faster" in noisy
    reverse = comparison_text([1.80, 1.81, 1.79], [1.90, 1.91, 1.92], 0.01, 0.01, 100)
    assert "GPT-2-style model is lower by 0.110" in reverse


@pytest.mark.parametrize("args, fragment", [
    (([1.9], [1.8], 0.1, 0.1, 10), "same number"),
    (([1.9, float("nan")], [1.8, 1.7], 0.1, 0.1, 10), "finite"),
    (([1.9, 1.8], [1.8, 1.7], 0.0, 0.1, 10), "finite"),
])
def test_comparison_text_rejects_bad_numbers(args, fragment):
    with pytest.raises(ValueError, match=fragment):
        comparison_text(*args)
