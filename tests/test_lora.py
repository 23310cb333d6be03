"""Chapter 9's LoRA: equal to Hugging Face peft on the same weights, exact merge, clear errors."""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn

from gpt_from_scratch.hf_weights import from_hf
from gpt_from_scratch.lora import (
    LoRALinear,
    apply_lora,
    count_trainable,
    lora_layers,
    merge_lora,
    unmerge_lora,
)
from gpt_from_scratch.model import GPT, GPTConfig

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")


def tiny_gpt2():
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=97, n_positions=16, n_embd=32, n_layer=2, n_head=4,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return transformers.GPT2LMHeadModel(config).eval()


@pytest.mark.parametrize("r, alpha", [(1, 1.0), (4, 8.0), (8, 3.0)])
def test_lora_equals_peft_on_the_same_weights(r, alpha):
    hf = tiny_gpt2()
    ours = from_hf(hf)
    theirs = peft.get_peft_model(hf, peft.LoraConfig(r=r, lora_alpha=alpha, lora_dropout=0.0,
                                                     target_modules=["c_attn", "c_proj", "c_fc"],
                                                     fan_in_fan_out=True))
    apply_lora(ours, r=r, alpha=alpha)
    trainable, _ = theirs.get_nb_trainable_parameters()
    assert count_trainable(ours) == trainable
    # peft starts B at zero too; give every B (and A) random values, then copy them across.
    g = torch.Generator().manual_seed(1)
    theirs_params = dict(theirs.named_parameters())
    for name, layer in lora_layers(ours).items():
        hf_name = "base_model.model.transformer." + re.sub(r"^blocks\.", "h.", name)
        A, B = theirs_params[f"{hf_name}.lora_A.default.weight"], theirs_params[f"{hf_name}.lora_B.default.weight"]
        assert A.shape == layer.lora_A.shape and B.shape == layer.lora_B.shape
        with torch.no_grad():
            B.copy_(torch.randn(B.shape, generator=g) * 0.1)
            A.copy_(torch.randn(A.shape, generator=g) * 0.1)
            layer.lora_A.copy_(A)
            layer.lora_B.copy_(B)
    idx = torch.randint(0, 97, (3, 16), generator=g)
    with torch.no_grad():
        expected = theirs(idx).logits
        got, _ = ours(idx)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)
    assert (got - from_hf(tiny_gpt2())(idx)[0]).abs().max() > 1e-3  # the update does change the outputs


def test_a_new_lora_model_computes_what_the_model_computed():
    torch.manual_seed(0)
    model = GPT(GPTConfig.from_preset("tiny"))
    idx = torch.randint(0, 50_257, (2, 8))
    before, _ = model(idx)
    apply_lora(model, r=4, alpha=8)
    after, _ = model(idx)
    assert torch.equal(before, after)
    assert all(torch.equal(layer.lora_B, torch.zeros_like(layer.lora_B)) for layer in lora_layers(model).values())


def test_apply_lora_freezes_the_model_and_counts_r_times_in_plus_out():
    model = GPT(GPTConfig.from_preset("tiny"))
    apply_lora(model, r=2)
    D, L = model.config.d_model, model.config.n_layers
    per_block = 2 * ((D + 3 * D) + (D + D) + (D + 4 * D) + (4 * D + D))  # c_attn, attn.c_proj, c_fc, mlp.c_proj
    assert count_trainable(model) == L * per_block
    assert {n.split(".")[-1] for n, p in model.named_parameters() if p.requires_grad} == {"lora_A", "lora_B"}


def test_merge_and_unmerge_are_exact():
    torch.manual_seed(0)
    model = GPT(GPTConfig.from_preset("tiny"))
    weights = {n: p.clone() for n, p in model.named_parameters()}
    apply_lora(model, r=4, alpha=8)
    for layer in lora_layers(model).values():
        nn.init.normal_(layer.lora_B, std=0.1)
    idx = torch.randint(0, 50_257, (2, 8))
    with torch.no_grad():
        adapted, _ = model(idx)
        merge_lora(model)
        merged, _ = model(idx)
        unmerge_lora(model)
    torch.testing.assert_close(merged, adapted, atol=1e-5, rtol=1e-5)
    for layer in lora_layers(model).values():
        assert not layer.merged
    restored = {n.replace(".base", ""): p for n, p in model.named_parameters() if "lora_" not in n}
    for name, p in weights.items():
        torch.testing.assert_close(restored[name], p, atol=1e-6, rtol=0)


def test_merged_weight_is_w_plus_scaled_b_a():
    torch.manual_seed(0)
    base = nn.Linear(6, 5)
    W = base.weight.clone()
    layer = LoRALinear(base, r=2, alpha=6)
    nn.init.normal_(layer.lora_B)
    layer.merge()
    torch.testing.assert_close(layer.base.weight, W + 3.0 * layer.lora_B @ layer.lora_A)


@pytest.mark.parametrize("r, message", [(0, "positive int"), (-1, "positive int"), (7, "rank at most 5"),
                                        (2.0, "must be an int")])
def test_bad_ranks_are_refused(r, message):
    with pytest.raises(ValueError, match=message):
        LoRALinear(nn.Linear(6, 5), r=r)


def test_misuse_is_refused_with_the_fix():
    model = GPT(GPTConfig.from_preset("tiny"))
    with pytest.raises(ValueError, match="call apply_lora"):
        merge_lora(model)
    apply_lora(model, r=2)
    with pytest.raises(RuntimeError, match="already has LoRA"):
        apply_lora(model, r=2)
    with pytest.raises(RuntimeError, match="not merged"):
        unmerge_lora(model)
    merge_lora(model)
    with pytest.raises(RuntimeError, match="already merged"):
        merge_lora(model)
    with pytest.raises(ValueError, match="no nn.Linear"):
        apply_lora(GPT(GPTConfig.from_preset("tiny")), r=2, targets=("q_proj",))
    with pytest.raises(ValueError, match="alpha"):
        LoRALinear(nn.Linear(4, 4), r=1, alpha=0.0)
    with pytest.raises(TypeError, match="nn.Linear"):
        LoRALinear(nn.Conv1d(4, 4, 1), r=1)


def test_a_non_finite_update_is_not_merged():
    layer = LoRALinear(nn.Linear(4, 4), r=1)
    with torch.no_grad():
        layer.lora_B.fill_(float("nan"))
    with pytest.raises(FloatingPointError, match="non-finite"):
        layer.merge()
    assert not layer.merged and torch.isfinite(layer.base.weight).all()


@pytest.mark.parametrize("merged", [False, True])
def test_a_lora_model_saves_and_loads_as_it_was(tmp_path, merged):
    from gpt_from_scratch.checkpoint import load_checkpoint, save_checkpoint

    torch.manual_seed(0)
    model = apply_lora(GPT(GPTConfig.from_preset("tiny", vocab_size=50)), r=2, alpha=4.0)
    with torch.no_grad():
        for layer in lora_layers(model).values():
            layer.lora_B.normal_()  # a trained adapter: B is no longer 0
    if merged:
        merge_lora(model)
    idx = torch.randint(0, 50, (2, 9))
    save_checkpoint(tmp_path / "ckpt", model)
    loaded = load_checkpoint(tmp_path / "ckpt").model
    assert set(lora_layers(loaded)) == set(lora_layers(model))
    assert all(layer.merged == merged and (layer.r, layer.alpha) == (2, 4.0)
               for layer in lora_layers(loaded).values())
    assert count_trainable(loaded) == count_trainable(model)
    assert torch.equal(loaded.eval()(idx)[0], model.eval()(idx)[0])
    if merged:  # and it unmerges back to the network it started from
        unmerge_lora(loaded)
        unmerge_lora(model)
        assert torch.equal(loaded(idx)[0], model(idx)[0])


def test_lora_layers_one_setting_cannot_describe_are_refused_at_save_time(tmp_path):
    from gpt_from_scratch.checkpoint import save_checkpoint

    mixed = apply_lora(GPT(GPTConfig.from_preset("tiny")), r=2)
    next(iter(lora_layers(mixed).values())).merge()  # one merged, the others not
    with pytest.raises(ValueError, match=r"differ in \(r, alpha, merged\).*merge_lora\(model\)"):
        save_checkpoint(tmp_path / "mixed", mixed)
    by_hand = GPT(GPTConfig.from_preset("tiny"))
    by_hand.blocks[0].mlp.c_fc = LoRALinear(by_hand.blocks[0].mlp.c_fc, r=2)  # one layer only
    with pytest.raises(ValueError, match="not the ones apply_lora.*puts there"):
        save_checkpoint(tmp_path / "by-hand", by_hand)
    assert not (tmp_path / "mixed").exists() and not (tmp_path / "by-hand").exists()
