"""Chapter 5's architecture diagram is read from the model: its labels follow the config."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from gpt_from_scratch.book.diagram import draw_gpt, gpt_diagram_labels  # noqa: E402
from gpt_from_scratch.book.plotting import LABEL_PT  # noqa: E402
from gpt_from_scratch.model import GPT, GPTConfig  # noqa: E402


def test_labels_follow_the_config():
    config = GPTConfig.from_preset("tiny", vocab_size=300, d_model=48, n_heads=3, n_layers=5,
                                   context_length=20, activation="relu", d_ff=100)
    labels = gpt_diagram_labels(config)
    assert "300 × 48" in labels["wte"] and "20 × 48" in labels["wpe"]
    assert "3 causal heads of 16" in labels["attn"] and "48 → 144" in labels["attn"]
    assert "48 → 100, ReLU" in labels["mlp"] and "100 → 48" in labels["mlp"]
    assert labels["repeat"] == "× 5 blocks"
    assert "48 → 300" in labels["lm_head"] and "tied" in labels["lm_head"]


def test_untied_head_and_gpt2_small():
    untied = GPTConfig.from_preset("tiny", tie_weights=False)
    assert "own weight" in gpt_diagram_labels(untied)["lm_head"]
    labels = gpt_diagram_labels(GPTConfig())
    assert "50,257 × 768" in labels["wte"] and "× 12 blocks" == labels["repeat"]
    assert "GELU (tanh)" in labels["mlp"] and "768 → 3,072" in labels["mlp"]


def test_a_model_is_read_as_is():
    model = GPT(GPTConfig.from_preset("tiny"))
    model.lm_head.weight = type(model.lm_head.weight)(model.lm_head.weight.detach().clone())
    assert "own weight" in gpt_diagram_labels(model)["lm_head"]


def test_figure_is_legible_and_narrow():
    fig = draw_gpt(GPTConfig.from_preset("tiny"))
    width, _ = fig.get_size_inches()
    assert width <= 9.5
    texts = fig.axes[0].texts
    assert len(texts) >= 12 and min(t.get_fontsize() for t in texts) >= LABEL_PT
    plt.close(fig)


def test_bad_input_names_the_type():
    with pytest.raises(TypeError, match="GPT or a GPTConfig, got dict"):
        draw_gpt({"d_model": 8})
