"""Chapter 13 — hooks, the logit lens and direct logit attribution (gpt_from_scratch.interp) on
small random GPTs, and every tool of interp and patching refusing a model that is not the book's
GPT. Ablation and patching are in test_patching.py; the comparisons with TransformerLens and
nnsight in test_interp_parity.py."""

from __future__ import annotations

import pytest
import torch

from gpt_from_scratch import ablation, interp, patching
from gpt_from_scratch.lora import apply_lora, merge_lora
from small_heads import small_idx, small_model
from gpt_from_scratch.modern import Llama, LlamaConfig


def test_reading_every_activation_leaves_the_logits_as_they_are_and_the_pieces_fit():
    model, idx = small_model(), small_idx()
    logits, cache = interp.run_with_hooks(model, idx, read=interp.hook_names(model))
    assert torch.equal(logits, model(idx)[0])
    for l, block in enumerate(model.blocks):
        pre, post = cache[f"blocks.{l}.resid_pre"], cache[f"blocks.{l}.resid_post"]
        torch.testing.assert_close(post, pre + cache[f"blocks.{l}.attn_out"] + cache[f"blocks.{l}.mlp_out"])
        torch.testing.assert_close(block.attn.c_proj(cache[f"blocks.{l}.attn.z"].flatten(2)),
                                   cache[f"blocks.{l}.attn_out"])
        if l:
            assert torch.equal(pre, cache[f"blocks.{l - 1}.resid_post"])
    maps = model.attention_maps(idx)
    for l in range(3):
        torch.testing.assert_close(cache[f"blocks.{l}.attn.pattern"], maps[l])
    assert cache["blocks.1.attn.z"].shape == (3, 10, 4, 8)  # (B, T, H, d_k)
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


def test_names_to_read_may_come_from_any_iterable_even_a_generator():
    model, idx = small_model(), small_idx()
    wanted = ["blocks.0.attn.z", "blocks.2.mlp_out"]
    expected = interp.run_with_hooks(model, idx, read=wanted)[1]
    for read in (iter(wanted), (name for name in wanted), tuple(wanted),
                 dict.fromkeys(wanted)):
        cache = interp.run_with_hooks(model, idx, read=read)[1]
        assert list(cache) == wanted  # a generator used up by the check read nothing
        for name in wanted:
            assert torch.equal(cache[name], expected[name])


def test_an_edited_pattern_becomes_the_heads_output():
    model, idx = small_model(), small_idx()
    T = idx.shape[1]
    uniform = torch.ones(T, T).tril() / torch.arange(1, T + 1)[:, None]  # each query: the mean of its keys

    def flatten_head_2(pattern):
        pattern = pattern.clone()
        pattern[:, 2] = uniform
        return pattern
    same, _ = interp.run_with_hooks(model, idx, edit={"blocks.1.attn.pattern": lambda p: p.clone()})
    torch.testing.assert_close(same, model(idx)[0], atol=1e-5, rtol=0)
    _, cache = interp.run_with_hooks(model, idx, read=["blocks.1.resid_pre", "blocks.1.attn.z"],
                                     edit={"blocks.1.attn.pattern": flatten_head_2})
    block = model.blocks[1]
    v = block.attn.c_attn(block.ln_1(cache["blocks.1.resid_pre"])).chunk(3, dim=-1)[2]  # (B, T, D)
    v2 = v.unflatten(-1, (4, 8))[:, :, 2]  # (B, T, d_k)
    expected = v2.cumsum(1) / torch.arange(1, T + 1)[None, :, None]
    torch.testing.assert_close(cache["blocks.1.attn.z"][:, :, 2], expected, atol=1e-5, rtol=1e-5)


def test_an_edit_changes_what_follows_and_the_hooks_go_even_after_a_failure():
    model, idx = small_model(), small_idx()
    zeroed, _ = interp.run_with_hooks(model, idx, edit={"blocks.2.mlp_out": torch.zeros_like})
    _, cache = interp.run_with_hooks(model, idx, read=["blocks.2.resid_pre", "blocks.2.attn_out"])
    torch.testing.assert_close(zeroed, model.lm_head(model.ln_f(cache["blocks.2.resid_pre"]
                                                                + cache["blocks.2.attn_out"])))
    with pytest.raises(ValueError, match=r"the edit of blocks.0.attn.z returned \(3, 10, 32\)"):
        interp.run_with_hooks(model, idx, edit={"blocks.0.attn.z": lambda z: z.flatten(2)})
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


def test_the_logit_lens_ends_at_the_models_logits():
    model, idx = small_model(), small_idx()
    lens = interp.logit_lens(model, idx)
    assert lens.shape == (3, 3, 10, 50)
    torch.testing.assert_close(lens[-1], model(idx)[0])
    assert not torch.allclose(lens[0], lens[-1])


@pytest.mark.parametrize("bias", [True, False])
def test_direct_logit_attribution_adds_up_to_the_logit(bias):
    model, idx = small_model(bias=bias), small_idx()
    target = small_idx(seed=2)
    parts = interp.direct_logit_attribution(model, idx, target)
    assert parts.heads.shape == (3, 4, 3, 10) and parts.mlps.shape == (3, 3, 10)
    logit = model(idx)[0].gather(-1, target[..., None])[..., 0]
    torch.testing.assert_close(parts.total(), logit, atol=1e-4, rtol=1e-5)
    assert parts.heads.abs().amax() > 0.01 * logit.abs().amax()  # the heads carry real shares


@pytest.mark.parametrize("merged", [False, True])
def test_direct_logit_attribution_counts_a_lora_update_merged_or_not(merged):
    model, idx, target = small_model(), small_idx(), small_idx(seed=2)
    apply_lora(model, r=2)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(std=0.3)  # an update that changes the logits
    if merged:
        merge_lora(model)
    parts = interp.direct_logit_attribution(model.eval(), idx, target)
    logit = model(idx)[0].gather(-1, target[..., None])[..., 0]
    torch.testing.assert_close(parts.total(), logit, atol=1e-4, rtol=1e-5)
    assert not torch.allclose(logit, small_model()(idx)[0].gather(-1, target[..., None])[..., 0])


def _llama() -> Llama:
    torch.manual_seed(0)
    return Llama(LlamaConfig(vocab_size=50, context_length=16, d_model=32, n_layers=2,
                             n_heads=4, n_kv_heads=2)).eval()


def _hf_gpt2():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=2, n_head=4, n_embd=32, vocab_size=50,
                                     n_positions=16)
    return transformers.GPT2LMHeadModel(config).eval()


CALLS = {
    "hook_names": lambda m, i: interp.hook_names(m),
    "run_with_hooks": lambda m, i: interp.run_with_hooks(m, i, ["blocks.0.attn.pattern"]),
    "logit_lens": lambda m, i: interp.logit_lens(m, i),
    "direct_logit_attribution": lambda m, i: interp.direct_logit_attribution(m, i, i),
    "ablate_heads": lambda m, i: ablation.ablate_heads(m, i, [(0, 1)]),
    "patch_head": lambda m, i: patching.patch_head(m, i, torch.zeros(3, 10, 4, 8), 0, 1),
    "patching_shares": lambda m, i: patching.patching_shares(m, i, i, lambda x: x.mean()),
    "group_share": lambda m, i: patching.group_share(m, i, i, lambda x: x.mean(), [(0, 1)]),
}


@pytest.mark.parametrize("call", CALLS.values(), ids=CALLS.keys())
@pytest.mark.parametrize("make, fix", [
    (_llama, r"got a Llama: Chapter 10's Llama has no c_attn to hook .* "
             r"to_hf_state_dict\(\)"),
    (_hf_gpt2, r"got a GPT2LMHeadModel: for GPT-2, hf_weights.from_hf\(model\) gives the "
               r"book's GPT"),
], ids=["llama", "hugging-face"])
def test_a_model_that_is_not_the_books_gpt_is_named_with_what_to_use(call, make, fix):
    with pytest.raises(ValueError, match=r"expected the book's GPT "
                                         r"\(gpt_from_scratch.model.GPT.*" + fix
                                         + r".*TransformerLens"):
        call(make(), small_idx())


@pytest.mark.parametrize("call, message", [
    (lambda m, i: interp.direct_logit_attribution(m, i, i + 45),
     r"target holds ids in \[45, 9\d\], outside the vocabulary \[0, 50\)"),
    (lambda m, i: interp.direct_logit_attribution(m, i, i - 50),
     r"target holds ids in \[-50, -\d+\]"),
])
def test_a_target_outside_the_vocabulary_is_named_with_its_range(call, message):
    with pytest.raises(ValueError, match=message):
        call(small_model(), small_idx())


@pytest.mark.parametrize("call, message", [
    (lambda m, i: interp.run_with_hooks(m, i, read=["blocks.3.attn.z"]), r"unknown activation 'blocks.3.attn.z'.*0..2"),
    (lambda m, i: interp.run_with_hooks(m, i, read=["blocks.0.attn.q"]), r"point one of"),
    (lambda m, i: interp.run_with_hooks(m, i, read="blocks.0.attn.z"), r"is one string: pass a list"),
    (lambda m, i: interp.run_with_hooks(torch.nn.Linear(2, 2).eval(), i), r"expected the book's GPT"),
    (lambda m, i: interp.run_with_hooks(m.train(), i), r"training mode.*model.eval\(\)"),
    (lambda m, i: interp.direct_logit_attribution(m, i, i[:, :3]), r"target must be .* idx's shape \(3, 10\)"),
    (lambda m, i: interp.run_with_hooks(m, i, edit={"blocks.00.attn.z": lambda z: z * 0}),
     r"activation 'blocks.00.attn.z': write the layer as a plain number.*'blocks.0.attn.z'"),
    (lambda m, i: interp.run_with_hooks(m, i, read=["blocks.01.mlp_out"]),
     r"'blocks.1.mlp_out'"),
    (lambda m, i: interp.run_with_hooks(m, i, edit={"blocks.0.attn.z": 0}),
     r"edit\['blocks.0.attn.z'\] is a int, not a function"),
    (lambda m, i: interp.run_with_hooks(m, i, edit={"blocks.0.mlp_out": lambda x: x.double()}),
     r"returned \(3, 10, 32\) torch.float64, the activation is \(3, 10, 32\) torch.float32"),
    (lambda m, i: interp.direct_logit_attribution(m, i, i > 3),
     r"target holds torch.bool, not token ids"),
    (lambda m, i: interp.direct_logit_attribution(m, i, i.float()),
     r"target holds torch.float32, not token ids"),
    (lambda m, i: interp.run_with_hooks(m, i, edit={"blocks.0.attn.z": lambda z: z / 0}),
     r"the edit of blocks.0.attn.z returned NaN or inf, which would spread to every logit"),
    (lambda m, i: interp.direct_logit_attribution(m, i[:0], i[:0]),
     r"direct_logit_attribution: idx has shape \(0, 10\): pass token ids \(B, T\) with at "
     r"least one row"),
])
def test_bad_input_names_the_value_the_rule_and_the_fix(call, message):
    model, idx = small_model(), small_idx()
    with pytest.raises(ValueError, match=message):
        call(model, idx)
