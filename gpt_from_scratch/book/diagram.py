"""Chapter 5 — an architecture diagram of GPT-2 drawn from the model's own module tree.

``gpt_diagram_labels(model)`` reads every box of the diagram from the modules (their names, sizes and
whether the head is tied to ``wte``); ``draw_gpt(model_or_config)`` lays them out with matplotlib: the
embeddings, one pre-LN block with its two residual branches (repeated ``n_layers`` times), the final
LayerNorm and the head. Nothing is typed in by hand, so the figure follows any ``GPTConfig``.
"""

from __future__ import annotations

import torch
from torch import nn

from .plotting import LABEL_PT


def _model(model_or_config) -> nn.Module:
    """A ``GPT`` as given, or one built on the meta device (no memory, no init cost) from a config."""
    from ..model import GPT, GPTConfig

    if isinstance(model_or_config, GPTConfig):
        with torch.device("meta"):
            return GPT(model_or_config)
    if isinstance(model_or_config, GPT):
        return model_or_config
    raise TypeError(
        f"draw_gpt takes a GPT or a GPTConfig, got {type(model_or_config).__name__}: "
        "pass model or model.config"
    )


def _linear(name: str, layer: nn.Linear) -> str:
    return f"{name}: {layer.in_features:,} → {layer.out_features:,}"


def gpt_diagram_labels(model_or_config) -> dict[str, str]:
    """The text of every box of ``draw_gpt``'s diagram, read from the model's modules (Chapter 5)."""
    model = _model(model_or_config)
    wte, wpe, block = model.wte, model.wpe, model.blocks[0]
    attn, mlp = block.attn, block.mlp
    tied = model.lm_head.weight is model.wte.weight
    act = type(mlp.act).__name__
    if getattr(mlp.act, "approximate", "none") != "none":
        act += f" ({mlp.act.approximate})"
    return {
        "input": "token ids idx  (B, T)",
        "wte": f"wte: Embedding\n{wte.num_embeddings:,} × {wte.embedding_dim}",
        "wpe": f"wpe: positions\n{wpe.context_length:,} × {wpe.D}",
        "drop": f"drop: Dropout(p={model.drop.p})",
        "ln_1": "ln_1: LayerNorm",
        "attn": f"attn: {attn.n_heads} causal heads of {attn.d_head}\n"
        f"{_linear('c_attn', attn.c_attn)} (q, k, v)\n{_linear('c_proj', attn.c_proj)}",
        "ln_2": "ln_2: LayerNorm",
        "mlp": f"mlp: feed-forward\n{_linear('c_fc', mlp.c_fc)}, {act}\n"
        f"{_linear('c_proj', mlp.c_proj)}",
        "repeat": f"× {len(model.blocks)} blocks",
        "ln_f": "ln_f: final LayerNorm",
        "lm_head": f"{_linear('lm_head', model.lm_head)}" + ("\n(tied: its weight is wte's)"
                                                             if tied else "\n(own weight)"),
        "output": "logits  (B, T, V)",
    }


def draw_gpt(model_or_config, ax=None, fontsize: float = LABEL_PT):
    """Draw GPT-2's architecture from a ``GPT`` (or a ``GPTConfig``), top to bottom (Chapter 5).

    The residual stream is the thick vertical line; each sublayer reads a LayerNorm'd copy of it and
    adds its output back at a ⊕. Returns the matplotlib ``Figure``.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch, Rectangle

    labels = gpt_diagram_labels(model_or_config)
    if ax is None:
        _, ax = plt.subplots(figsize=(4.8, 8.6))
    ax.set(xlim=(0, 10), ylim=(0, 21.5))
    ax.axis("off")
    colors = {"embed": "#dbe9f6", "norm": "#fde9c9", "attn": "#d9f0d3", "mlp": "#f2dcef",
              "head": "#e6e6e6"}

    def box(x, y, w, h, key, color):
        ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.1",
                                    facecolor=color, edgecolor="0.3", linewidth=0.8))
        ax.text(x, y, labels[key], ha="center", va="center", fontsize=fontsize)

    def arrow(x0, y0, x1, y1):
        ax.annotate("", xy=(x1, y1), xytext=(x0, y0),
                    arrowprops=dict(arrowstyle="-|>", color="0.25", lw=1.0))

    def plus(x, y):
        ax.text(x, y, "⊕", ha="center", va="center", fontsize=fontsize + 6,
                bbox=dict(boxstyle="circle,pad=0.05", facecolor="white", edgecolor="none"))

    stream = 1.3  # x of the residual stream; the sublayers sit to its right
    ax.text(5, 21.1, labels["input"], ha="center", va="center", fontsize=fontsize)
    box(2.6, 19.6, 4.2, 1.1, "wte", colors["embed"])
    box(7.4, 19.6, 4.2, 1.1, "wpe", colors["embed"])
    arrow(3.5, 20.8, 2.6, 20.3)
    arrow(6.5, 20.8, 7.4, 20.3)
    plus(5, 18.3)
    arrow(2.6, 19.0, 4.7, 18.4)
    arrow(7.4, 19.0, 5.3, 18.4)
    box(5, 17.3, 5.0, 0.6, "drop", colors["head"])
    arrow(5, 18.0, 5, 17.7)
    ax.plot([5, 5, stream, stream], [16.9, 16.5, 16.5, 16.2], color="0.25", lw=1.0)

    # One block, framed, with the residual stream running down its left side.
    top, bottom = 16.2, 5.2
    ax.add_patch(Rectangle((0.2, bottom), 9.6, top - bottom, fill=False, linestyle="--",
                           edgecolor="0.4", linewidth=1.0))
    ax.text(9.7, top - 0.35, labels["repeat"], ha="right", va="center", fontsize=fontsize,
            fontweight="bold")
    ax.plot([stream, stream], [top, bottom - 0.6], color="0.45", lw=3.0, zorder=0)
    for (norm_key, sub_key, color, y_norm, y_sub, y_add) in [
        ("ln_1", "attn", colors["attn"], 14.9, 12.9, 11.2),
        ("ln_2", "mlp", colors["mlp"], 9.9, 7.9, 6.2),
    ]:
        ax.plot([stream, 5.6], [y_norm + 0.9, y_norm + 0.9], color="0.25", lw=1.0)
        arrow(5.6, y_norm + 0.9, 5.6, y_norm + 0.35)
        box(5.6, y_norm, 4.2, 0.6, norm_key, colors["norm"])
        arrow(5.6, y_norm - 0.35, 5.6, y_sub + 0.9)
        box(5.6, y_sub, 7.6, 1.6, sub_key, color)
        ax.plot([5.6, 5.6], [y_sub - 0.85, y_add], color="0.25", lw=1.0)
        arrow(5.6, y_add, stream + 0.3, y_add)
        plus(stream, y_add)
    ax.text(stream - 0.2, (top + bottom) / 2, "residual stream", rotation=90, ha="right",
            va="center", fontsize=fontsize)

    box(5, 3.9, 5.0, 0.6, "ln_f", colors["norm"])
    ax.plot([stream, stream, 5], [bottom - 0.6, 4.6, 4.6], color="0.25", lw=1.0)
    arrow(5, 4.6, 5, 4.3)
    box(5, 2.3, 6.4, 1.1, "lm_head", colors["head"])
    arrow(5, 3.5, 5, 2.95)
    arrow(5, 1.65, 5, 0.9)
    ax.text(5, 0.5, labels["output"], ha="center", va="center", fontsize=fontsize)
    return ax.figure
