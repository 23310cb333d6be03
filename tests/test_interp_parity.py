"""Chapter 13's hooks, logit lens and attribution (gpt_from_scratch.interp), ablation and patching
(gpt_from_scratch.patching) equal to the two references of the field: TransformerLens's
``TransformerBridge`` on the book's model converted to transformers (``hf_weights``), and nnsight
wrapped around the book's own ``GPT``.

Both are the ``interp`` extra of pyproject.toml; TransformerLens 4.x needs transformers >= 5.9, so the
oldest-versions job skips these tests. Tolerances as measured in the design study: our SDPA against
TransformerLens's eager attention differs by ~1e-5 in the logits."""

from __future__ import annotations

import json

import pytest
import torch

from gpt_from_scratch import ablation, interp, patching
from gpt_from_scratch.hf_weights import to_hf_config, to_hf_state_dict
from gpt_from_scratch.model import GPT, GPTConfig
from gpt_from_scratch.tokenizer import gpt2_files

L, H, V = 3, 4, 50_257


@pytest.fixture(scope="module")
def model() -> GPT:
    torch.manual_seed(0)
    model = GPT(GPTConfig(context_length=24, d_model=64, n_layers=L, n_heads=H, dropout=0.0)).eval()
    with torch.no_grad():  # larger than GPT-2's initialisation: sharper attention, larger logits
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return model


@pytest.fixture(scope="module")
def pairs() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    clean = torch.randint(0, 1000, (4, 20), generator=generator)
    corrupted = clean.clone()
    corrupted[:, :8] = torch.randint(0, 1000, (4, 8), generator=generator)
    return clean, corrupted


def _metric(clean: torch.Tensor):
    """The mean log-probability of the clean token at each corrupted position: a random model with
    tied embeddings leans towards its input token, so clean and corrupted runs differ by ~1 nat."""
    mask = torch.zeros_like(clean, dtype=torch.bool)
    mask[:, :8] = True
    return lambda logits: patching.mean_logprob(logits, clean, mask)


def _bridge(model, folder):
    pytest.importorskip("transformer_lens", reason="TransformerLens is the interp extra (transformers >= 5.9)")
    transformers = pytest.importorskip("transformers")
    from transformer_lens.model_bridge import TransformerBridge

    hf = transformers.GPT2LMHeadModel(to_hf_config(model)).eval()
    hf.load_state_dict(to_hf_state_dict(model), strict=False)  # the causal-mask buffers are not weights
    files = gpt2_files()
    vocab = json.loads(files["encoder.json"].read_text(encoding="utf-8"))
    merges = [tuple(m.split()) for m in files["vocab.bpe"].read_text(encoding="utf-8").split("\n")[1:-1]]
    # A tokenizer built in memory fails in TransformerLens (KeyError 'name_or_path'): save and reload it.
    transformers.GPT2TokenizerFast(vocab=vocab, merges=merges).save_pretrained(folder)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    return TransformerBridge.boot_transformers("gpt2", hf_model=hf, tokenizer=tokenizer, device="cpu")


@pytest.fixture(scope="module")
def bridge(model, tmp_path_factory):
    return _bridge(model, tmp_path_factory.mktemp("gpt2-tokenizer"))


@pytest.fixture(scope="module")
def folded(model, tmp_path_factory):
    """A bridge in TransformerLens's compatibility mode with the final LayerNorm's γ folded into
    the unembedding (``fold_ln``), as its logit attribution expects, and nothing else moved:
    the writing weights, the unembedding and the value biases as they are, so that each head's
    result and each logit are the book's."""
    bridge = _bridge(model, tmp_path_factory.mktemp("gpt2-tokenizer-folded"))
    bridge.enable_compatibility_mode(disable_warnings=True, fold_ln=True, center_writing_weights=False,
                                     center_unembed=False, fold_value_biases=False)
    return bridge


def test_activations_and_the_logit_lens_equal_transformer_lens(model, bridge, pairs):
    clean, _ = pairs
    logits, cache = interp.run_with_hooks(model, clean, read=interp.hook_names(model))
    with torch.no_grad():
        tl_logits, tl = bridge.run_with_cache(clean)
    torch.testing.assert_close(logits, tl_logits, atol=1e-4, rtol=0)
    lens = interp.logit_lens(model, clean)
    for l in range(L):
        for ours, theirs in (("resid_pre", "hook_resid_pre"), ("attn.pattern", "attn.hook_pattern"),
                             ("attn.z", "attn.hook_z"), ("attn_out", "hook_attn_out"),
                             ("mlp_out", "hook_mlp_out"), ("resid_post", "hook_resid_post")):
            reference = tl[f"blocks.{l}.{theirs}"]  # equal to 1e-5 of its largest value (float32, two orders)
            torch.testing.assert_close(cache[f"blocks.{l}.{ours}"], reference, rtol=0,
                                       atol=1e-5 * float(reference.abs().max()), msg=f"blocks.{l}.{ours}")
        with torch.no_grad():
            tl_lens = bridge.unembed(bridge.ln_final(tl[f"blocks.{l}.hook_resid_post"]))
        torch.testing.assert_close(lens[l], tl_lens, atol=1e-4, rtol=0)


def test_direct_logit_attribution_equals_transformer_lens_logit_attrs(model, folded, pairs):
    clean, _ = pairs
    target = clean.roll(-1, 1)
    parts = interp.direct_logit_attribution(model, clean, target)
    with torch.no_grad():
        _, cache = folded.run_with_cache(clean)
        heads = cache.logit_attrs(cache.stack_head_results(layer=-1), tokens=target)  # (L H, B, T)
        resid, labels = cache.decompose_resid(layer=-1, return_labels=True)
        parts_tl = dict(zip(labels, cache.logit_attrs(resid, tokens=target)))  # each (B, T)
    torch.testing.assert_close(parts.heads, heads.unflatten(0, (L, H)), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(parts.mlps, torch.stack([parts_tl[f"{l}_mlp_out"] for l in range(L)]),
                               atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(parts.embed, parts_tl["embed"] + parts_tl["pos_embed"], atol=1e-4, rtol=1e-4)
    assert parts.heads.abs().max() > 0.1  # the heads carry real parts: the comparison is not of zeros


def _roles(clean: torch.Tensor) -> torch.Tensor:
    """Roles of rows that do not line up: row b starts b positions late (its first b positions
    are given the roles of padding), so each role's mean is over positions at different
    places; the last role, held by row 0 alone, is padding too (a mean of the other
    positions of a role needs two)."""
    B, T = clean.shape
    t = torch.arange(T)
    kept = [(t >= b) & (t - b < T - 1) for b in range(B)]
    return torch.stack([torch.where(k, t - b, torch.full_like(t, -1))
                        for b, k in enumerate(kept)])


def test_mean_and_resample_ablation_equal_transformer_lens_hooks(model, bridge, pairs):
    clean, corrupted = pairs
    roles = _roles(clean)
    layer, head = 1, 2
    with torch.no_grad():
        _, tl_clean = bridge.run_with_cache(clean)
        _, tl_corrupted = bridge.run_with_cache(corrupted)
        z = tl_clean[f"blocks.{layer}.attn.hook_z"][:, :, head]  # (B, T, d_k)
        means = z.clone()
        for role in range(int(roles.max()) + 1):  # each position: the mean of the others
            at = roles == role
            means[at] = (z[at].sum(0) - z[at]) / (int(at.sum()) - 1)

        def mean_hook(z, hook):  # z (B, T, H, d_k): padding (role -1) as it is
            z[:, :, head] = torch.where((roles >= 0)[..., None], means, z[:, :, head])
            return z

        def resample_hook(z, hook):
            z[:, :, head] = tl_corrupted[f"blocks.{layer}.attn.hook_z"][:, :, head]
            return z
        name = f"blocks.{layer}.attn.hook_z"
        tl_mean = bridge.run_with_hooks(clean, fwd_hooks=[(name, mean_hook)])
        tl_resample = bridge.run_with_hooks(clean, fwd_hooks=[(name, resample_hook)])
    ours_mean = ablation.ablate_heads(model, clean, [(layer, head)], "mean", roles=roles)
    ours_resample = ablation.ablate_heads(model, clean, [(layer, head)], "resample", reference=corrupted)
    torch.testing.assert_close(ours_mean, tl_mean, atol=1e-4, rtol=0)
    torch.testing.assert_close(ours_resample, tl_resample, atol=1e-4, rtol=0)
    assert (ours_mean - model(clean)[0]).abs().max() > 0.1  # the ablation changes the logits


def test_patching_shares_equal_transformer_lens_run_with_hooks(model, bridge, pairs):
    clean, corrupted = pairs
    metric = _metric(clean)
    shares = patching.patching_shares(model, clean, corrupted, metric)
    with torch.no_grad():
        _, tl = bridge.run_with_cache(clean)
        m_clean, m_corrupt = float(metric(bridge(clean))), float(metric(bridge(corrupted)))
        for l in range(L):
            for h in range(H):
                def patch(z, hook, h=h, l=l):  # z (B, T, H, d_k)
                    z[:, :, h] = tl[f"blocks.{l}.attn.hook_z"][:, :, h]
                    return z
                patched = bridge.run_with_hooks(corrupted, fwd_hooks=[(f"blocks.{l}.attn.hook_z", patch)])
                share = (float(metric(patched)) - m_corrupt) / (m_clean - m_corrupt)
                assert shares[l, h].item() == pytest.approx(share, abs=1e-5), (l, h)
    assert shares.abs().max() > 0.1  # the heads matter: the comparison is not of zeros


def test_hooks_and_patching_equal_nnsight_on_the_books_own_module(model, pairs):
    nnsight = pytest.importorskip("nnsight", reason="nnsight is the interp extra")
    clean, corrupted = pairs
    layer, head, d_k = 1, 2, model.config.d_head
    logits, cache = interp.run_with_hooks(model, clean, read=[f"blocks.{layer}.attn.z",
                                                              f"blocks.{layer}.resid_post"])
    wrapped = nnsight.NNsight(model)
    with torch.no_grad(), wrapped.trace(clean):
        z = wrapped.blocks[layer].attn.c_proj.input.save()  # merged head outputs (B, T, D)
        resid = wrapped.blocks[layer].output.save()
    assert torch.equal(cache[f"blocks.{layer}.attn.z"].flatten(2), z)
    assert torch.equal(cache[f"blocks.{layer}.resid_post"], resid)
    with torch.no_grad(), wrapped.trace(corrupted):
        wrapped.blocks[layer].attn.c_proj.input[..., head * d_k:(head + 1) * d_k] = z[..., head * d_k:(head + 1) * d_k]
        patched = wrapped.output[0].save()
    ours = patching.patch_head(model, corrupted, cache[f"blocks.{layer}.attn.z"], layer, head)
    assert torch.equal(ours, patched)
    assert not torch.equal(ours, model(corrupted)[0])
