"""The interactive figures: what a hover, a button or a slider step shows is the right data."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("plotly", reason="the interactive figures need plotly (pip install plotly)")

from gpt_from_scratch.book.interactive import (  # noqa: E402
    CONFIG, PLOTLY_MIME, Interactive, SamplingFilter, attention_figure, layer_head_explorer,
    sampling_explorer)

TOKENS = ["The", "␣cat", "␣sat", "␣the", "␣mat"]  # " the" and "The" differ; labels may repeat
T = len(TOKENS)


def causal_maps(*shape: int, seed: int = 0) -> torch.Tensor:
    scores = torch.randn(*shape, T, T, generator=torch.Generator().manual_seed(seed))
    future = torch.ones(T, T, dtype=torch.bool).triu(diagonal=1)
    return scores.masked_fill(future, float("-inf")).softmax(dim=-1)


def shown(z) -> np.ndarray:
    """A trace's z as drawn: blank cells (None) as NaN."""
    return np.array([[np.nan if v is None else v for v in row] for row in z], dtype=float)


def expected(weights: torch.Tensor) -> np.ndarray:
    future = np.triu(np.ones((T, T), dtype=bool), k=1)
    return np.where(future, np.nan, np.round(weights.numpy().astype(np.float64), 4))


def test_attention_figure_hover_names_the_query_and_key_of_each_cell():
    maps = causal_maps(3)
    fig = attention_figure(maps, TOKENS, ["a", "b", "c"])
    for trace, weights in zip(fig.data, maps):
        np.testing.assert_array_equal(shown(trace.z), expected(weights))
        assert list(trace.customdata[3][1]) == ["␣the", "␣cat", 3, 1]  # query 3, key 1
        assert "%{customdata[0]}" in trace.hovertemplate and "%{z" in trace.hovertemplate
    assert [t.visible for t in fig.data] == [True, False, False]
    buttons = fig.layout.updatemenus[0].buttons
    assert [b.args[0]["visible"] for b in buttons] == [[True, False, False], [False, True, False],
                                                       [False, False, True]]


def test_attention_figure_rejects_labels_that_do_not_match():
    with pytest.raises(ValueError, match="one label per token"):
        attention_figure(causal_maps(1), TOKENS[:-1], ["a"])
    with pytest.raises(ValueError, match="one name per map"):
        attention_figure(causal_maps(2), TOKENS, ["a"])


FILTERS = [SamplingFilter("all"), SamplingFilter("top-k 2", top_k=2),
           SamplingFilter("top-p 0.5", top_p=0.5)]


def test_sampling_explorer_slider_steps_hold_each_temperatures_distribution():
    logits = torch.randn(12, generator=torch.Generator().manual_seed(1)) * 2
    labels = [f"t{i}" for i in range(12)]
    temperatures = (0.5, 1.0, 2.0)
    fig = sampling_explorer(logits, labels, temperatures, FILTERS, n_bars=4)
    order = torch.argsort(logits, descending=True)[:4]
    assert list(fig.data[0].x) == [labels[i] for i in order] + ["other 8"]
    steps = fig.layout.sliders[0].steps
    assert [s.label for s in steps] == ["0.5", "1", "2"] and fig.layout.sliders[0].active == 1
    for t, step in zip(temperatures, steps):
        y_all, y_top_k, y_top_p = step.args[0]["y"]
        p = torch.softmax(logits / t, dim=-1)
        np.testing.assert_allclose(y_all[:4], p[order].numpy(), atol=1e-4)
        np.testing.assert_allclose(sum(y_all), 1.0, atol=1e-3)
        assert sum(v > 0 for v in y_top_k) == 2 and y_top_k[-1] == 0  # two tokens, no tail
        np.testing.assert_allclose(sum(y_top_k), 1.0, atol=1e-3)
        assert y_top_p[0] >= 0.5 or sum(y_top_p[:2]) >= 0.5  # the nucleus reaches p
    # The bars drawn at first are the step at temperature 1.
    assert list(fig.data[1].y) == steps[1].args[0]["y"][1]
    # Lower temperature, sharper distribution: the top bar grows.
    assert steps[0].args[0]["y"][0][0] > steps[2].args[0]["y"][0][0]


def test_sampling_explorer_checks_its_input():
    with pytest.raises(ValueError, match="must include 1.0"):
        sampling_explorer(torch.zeros(3), ["a", "b", "c"], (0.5, 2.0), FILTERS)
    with pytest.raises(ValueError, match="V labels"):
        sampling_explorer(torch.zeros(3), ["a", "b"], (1.0,), FILTERS)


def test_layer_head_explorer_slider_shows_the_picked_head_of_the_picked_layer():
    maps = causal_maps(3, 4, seed=2)  # (L, H, T, T)
    fig = layer_head_explorer(maps, TOKENS, layer=1, head=2)
    assert [t.visible for t in fig.data] == [False, True, False]
    np.testing.assert_array_equal(shown(fig.data[1].z), expected(maps[1, 2]))
    steps = fig.layout.sliders[0].steps
    assert len(steps) == 4 and fig.layout.sliders[0].active == 2
    for h, step in enumerate(steps):
        for l, z in enumerate(step.args[0]["z"]):
            np.testing.assert_array_equal(shown(z), expected(maps[l, h]))
    menu = fig.layout.updatemenus[0]
    assert menu.active == 1 and [b.label for b in menu.buttons] == ["layer 0", "layer 1", "layer 2"]
    assert menu.buttons[2].args[0]["visible"] == [False, False, True]


def test_layer_head_explorer_checks_its_input():
    with pytest.raises(ValueError, match="out of range"):
        layer_head_explorer(causal_maps(2, 2), TOKENS, layer=2)
    with pytest.raises(ValueError, match=r"\(L, H, T, T\)"):
        layer_head_explorer(causal_maps(2), TOKENS)


def test_interactive_bundle_draws_the_same_figure_in_every_format():
    fig = attention_figure(causal_maps(2), TOKENS, ["a", "b"])
    bundle = Interactive(fig, "static figure above")._repr_mimebundle_()
    spec = bundle[PLOTLY_MIME]
    assert bundle["text/plain"] == "static figure above"
    html = bundle["text/html"]
    start = html.index("var spec = ") + len("var spec = ")
    embedded = json.loads(html[start:html.index(";\n", start)])
    assert embedded == {**spec, "config": CONFIG} and embedded["config"]["responsive"]
    assert not spec["config"]["responsive"]  # MIME_CONFIG: JupyterLab's renderer resizes it
    div_id = html.split('id="', 1)[1].split('"', 1)[0]
    assert f'Plotly.newPlot("{div_id}"' in html
    # The same figure gets the same id (outputs stay the same from run to run); another,
    # another.
    assert Interactive(fig, "x")._repr_mimebundle_()["text/html"] == html
    other = attention_figure(causal_maps(2, seed=5), TOKENS, ["a", "b"])
    assert div_id not in Interactive(other, "x")._repr_mimebundle_()["text/html"]


def test_without_plotly_the_module_loads_and_a_figure_names_the_extra_to_install():
    script = """
import sys
sys.modules["plotly"] = None  # as if plotly were not installed
import torch
from gpt_from_scratch.book import interactive
probs = interactive.sampled_probs(torch.zeros(4), 1.0, interactive.SamplingFilter("all"))
print(probs.tolist())
try:
    interactive.attention_figure(torch.eye(2), ["a", "b"], ["one"])
except ImportError as error:
    print(error)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         cwd=Path(__file__).parent.parent, check=True).stdout
    assert out.splitlines() == [
        "[0.25, 0.25, 0.25, 0.25]",
        "the interactive figures need plotly, which the notebooks' extra installs: "
        'pip install "gpt-from-scratch-book[notebooks]"']
