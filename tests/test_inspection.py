"""Chapter 8 — looking inside a GPT: ``GPT.attention_maps``, loading GPT-2 weights, the attention plots.

Parity is checked against Hugging Face's ``GPT2LMHeadModel`` with randomly initialised weights (the hub
is not needed): eager attention, ``output_attentions=True``.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

from gpt_from_scratch.book.heads_plots import (  # noqa: E402
    TOKEN_PITCH,
    attention_grid,
    attention_lines,
    compare_attention,
)
from gpt_from_scratch.book.plotting import LABEL_PT  # noqa: E402
from gpt_from_scratch.hf_weights import WeightsUnavailableError, from_hf, from_pretrained
from gpt_from_scratch.model import GPT  # noqa: E402

transformers = pytest.importorskip("transformers")

V, T_MAX, D, L, H = 101, 24, 32, 3, 4  # a small GPT-2: vocabulary, context, width, layers, heads


def _random_hf_model(seed: int = 0):
    """A random ``GPT2LMHeadModel`` whose attention is far from uniform.

    GPT-2's own initialisation (std 0.02) gives nearly uniform attention, where a wrong scale or a
    wrong mask would hide in small differences; std 0.3 makes the weights peaked.
    """
    config = transformers.GPT2Config(
        vocab_size=V, n_positions=T_MAX, n_embd=D, n_layer=L, n_head=H,
        bos_token_id=0, eos_token_id=0, attn_implementation="eager",
    )
    torch.manual_seed(seed)
    model = transformers.GPT2LMHeadModel(config).eval()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("weight") and param.dim() == 2:
                nn.init.normal_(param, std=0.3, generator=generator)
            else:
                nn.init.normal_(param, mean=1.0 if ".ln_" in name or "ln_f" in name else 0.0, std=0.1,
                                generator=generator)
    return model


@pytest.fixture(scope="module")
def hf_model():
    return _random_hf_model()


@pytest.fixture(scope="module")
def model(hf_model):
    return from_hf(hf_model)


@pytest.fixture(scope="module")
def idx():
    return torch.randint(0, V, (2, 11), generator=torch.Generator().manual_seed(1))  # (B, T)


def test_attention_maps_shapes(model, idx):
    maps = model.attention_maps(idx)
    B, T = idx.shape
    assert isinstance(maps, list) and len(maps) == L
    for weights in maps:
        assert weights.shape == (B, H, T, T)
        assert weights.dtype == torch.float32


def test_attention_maps_are_causal_distributions(model, idx):
    T = idx.shape[1]
    above_diagonal = torch.ones(T, T, dtype=torch.bool).triu(diagonal=1)  # (T, T): the future
    for weights in model.attention_maps(idx):
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))
        assert (weights >= 0).all()
        assert (weights[..., above_diagonal] == 0).all(), "a query attends to a later position"
        # The first query can only see itself.
        torch.testing.assert_close(weights[..., 0, 0], torch.ones(weights.shape[:2]))


def test_attention_maps_equal_hugging_face_output_attentions(hf_model, model, idx):
    with torch.no_grad():
        expected = hf_model(idx, output_attentions=True).attentions
    assert len(expected) == L and expected[0].numel() > 0, "HF returned no attentions: is attention eager?"
    got = model.attention_maps(idx)
    # The weights are peaked, not uniform, so this comparison can tell a wrong mask or scale apart.
    assert max(float(w.max(-1).values.mean()) for w in got) > 0.5
    for layer, (ours, theirs) in enumerate(zip(got, expected)):
        torch.testing.assert_close(ours, theirs, msg=lambda m, layer=layer: f"layer {layer}: {m}")


def test_attention_maps_leave_the_forward_pass_unchanged(model, idx):
    before, _ = model(idx)
    was_training = model.training
    model.attention_maps(idx)
    after, _ = model(idx)
    assert torch.equal(before, after)
    assert model.training == was_training


def test_attention_maps_match_the_maps_of_a_longer_prefix(model, idx):
    # Causality seen from outside: the maps of the first 5 tokens are the top-left corner of the full maps.
    full = model.attention_maps(idx)
    prefix = model.attention_maps(idx[:, :5])
    for a, b in zip(full, prefix):
        torch.testing.assert_close(a[..., :5, :5], b)


def test_logits_equal_hugging_face(hf_model, model, idx):
    with torch.no_grad():
        expected = hf_model(idx).logits
    torch.testing.assert_close(model(idx)[0], expected, rtol=1e-4, atol=1e-4)


def test_from_pretrained_loads_a_save_pretrained_directory(hf_model, idx, tmp_path):
    hf_model.save_pretrained(tmp_path)
    loaded = from_pretrained(str(tmp_path))
    assert not loaded.training
    assert (loaded.config.n_layers, loaded.config.n_heads, loaded.config.d_model) == (L, H, D)
    with torch.no_grad():
        expected = hf_model(idx).logits
    torch.testing.assert_close(loaded(idx)[0], expected, rtol=1e-4, atol=1e-4)
    for ours, theirs in zip(loaded.attention_maps(idx), hf_model(idx, output_attentions=True).attentions):
        torch.testing.assert_close(ours, theirs)


def test_from_pretrained_offline_raises_a_clear_error(tmp_path, monkeypatch):
    # An empty cache and offline mode: what Chapter 8 meets without a network. It must fail fast and say why.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(WeightsUnavailableError, match="gpt2"):
        from_pretrained("gpt2", cache_dir=tmp_path)


def test_from_pretrained_rejects_unknown_names():
    with pytest.raises(ValueError, match="gpt3"):
        from_pretrained("gpt3")


def test_attention_maps_work_in_bertviz_format(model, idx):
    bertviz = pytest.importorskip("bertviz")
    maps = model.attention_maps(idx[:1])  # bertviz wants a batch of one
    html = bertviz.head_view(tuple(maps), [f"t{i}" for i in range(idx.shape[1])], html_action="return")
    assert "bertviz" in html.data


# ----- plot helpers --------------------------------------------------------------------------------


def _maps(L_: int = 3, H_: int = 4, T: int = 6, B: int = 2) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.softmax(torch.randn(B, H_, T, T, generator=g), dim=-1) for _ in range(L_)]


def test_attention_grid_draws_every_layer_and_head():
    fig = attention_grid(_maps(), tokens=list("abcdef"))
    assert len(fig.axes) == 3 * 4 + 1  # the maps and one colour bar
    assert fig.axes[0].images[0].get_array().shape == (6, 6)
    plt.close(fig)


def test_attention_grid_labels_tokens_only_where_they_fit():
    """Token labels go beside the left column and under the bottom row when a map has at
    least TOKEN_PITCH inches per token; on smaller maps they would overlap: left out."""
    tokens = list("abcdef")
    fig = attention_grid(_maps(L_=2, H_=2), tokens=tokens, cell_size=6 * TOKEN_PITCH)
    (top_left, top_right), (bottom_left, bottom_right) = np.reshape(fig.axes[:4], (2, 2))
    labels = lambda ticks: [t.get_text() for t in ticks]  # noqa: E731
    assert labels(bottom_right.get_xticklabels()) == tokens
    assert labels(top_left.get_yticklabels()) == tokens
    assert labels(top_right.get_xticklabels()) == labels(top_right.get_yticklabels()) == []
    assert min(t.get_fontsize() for t in bottom_left.get_xticklabels()) >= LABEL_PT
    plt.close(fig)
    fig = attention_grid(_maps(L_=2, H_=2), tokens=tokens, cell_size=5.9 * TOKEN_PITCH)
    assert all(not ax.get_xticklabels() for ax in fig.axes[:4])
    plt.close(fig)


def test_attention_grid_draws_a_selection_from_a_4d_array():
    array = torch.stack([m[1] for m in _maps()])  # (L, H, T, T)
    fig = attention_grid(array, layers=[2, 0], heads=[3])
    assert len(fig.axes) == 2 * 1 + 1
    drawn = fig.axes[0].images[0].get_array()
    torch.testing.assert_close(torch.as_tensor(drawn.data, dtype=torch.float32), array[2, 3])
    plt.close(fig)


def test_attention_grid_rejects_bad_input():
    with pytest.raises(ValueError, match="heads"):
        attention_grid(_maps(), heads=[4])
    with pytest.raises(ValueError, match="tokens"):
        attention_grid(_maps(), tokens=list("abc"))
    with pytest.raises(ValueError, match="batch_index"):
        attention_grid(_maps(B=1), batch_index=1)
    with pytest.raises(ValueError, match="shape"):
        attention_grid(torch.zeros(4, 6, 6))


def test_compare_attention_shares_one_colour_scale():
    maps = _maps()
    a, b = maps[0][0, 1], maps[1][0, 2][:5, :5]  # maps of different sizes
    fig = compare_attention([a, b], ["first", "second"], [list("abcdef"), list("abcde")])
    assert len(fig.axes) == 2 + 1
    limits = {fig.axes[i].images[0].get_clim() for i in range(2)}
    assert limits == {(0.0, float(max(a.max(), b.max())))}
    assert [fig.axes[i].get_title() for i in range(2)] == ["first", "second"]
    plt.close(fig)


def test_compare_attention_rejects_bad_input():
    with pytest.raises(ValueError, match="2-D"):
        compare_attention([torch.zeros(2, 3, 3)], ["x"])
    with pytest.raises(ValueError, match="titles"):
        compare_attention([torch.zeros(3, 3)], ["x", "y"])


def test_attention_lines_draws_one_panel_per_head_with_opacity_from_the_weights():
    layer = _maps(T=5)[0][0]  # (H, T, T)
    fig = attention_lines(layer, list("abcde"), heads=[1, 3])
    assert len(fig.axes) == 2
    lines = fig.axes[0].collections[0]
    drawn = torch.as_tensor(lines.get_colors()[:, 3], dtype=torch.float32).sort().values  # each line's opacity
    head_1 = layer[1].flatten()
    torch.testing.assert_close(drawn, head_1[head_1 > 0.01].sort().values)
    plt.close(fig)
    with pytest.raises(ValueError, match="tokens"):
        attention_lines(layer, list("abc"))


def test_attention_lines_wraps_many_heads_onto_rows():
    layer = _maps(H_=7, T=4)[0][0]  # (7, T, T)
    fig = attention_lines(layer, list("abcd"), ncols=3)
    assert len(fig.axes) == 7  # 3 + 3 + 1: the two empty places of the last row are removed
    assert [ax.get_title() for ax in fig.axes] == [f"head {h}" for h in range(7)]
    plt.close(fig)
