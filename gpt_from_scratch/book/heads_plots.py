"""Chapter 8 — plots of many heads at once: a layers x heads grid of attention maps, maps on one
colour scale (in a row where they fit, else stacked), bertviz's head view as a static figure, and
one score per head.

The one-map heatmap and the label size these share are Chapter 4's, in ``plotting``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .figure_text import WIDTH_IN
from .plotting import LABEL_PT, _as_array, attention_heatmap

# Inches per token label along a map's side: labels at LABEL_PT, a little space between them.
TOKEN_PITCH = 1.25 * LABEL_PT / 72


def _stack_maps(maps, batch_index: int) -> np.ndarray:
    """``GPT.attention_maps`` output (``L`` tensors ``(B, H, T, T)``) or one ``(L, H, T, T)`` array -> (L, H, T, T)."""
    if isinstance(maps, (list, tuple)):
        shapes = sorted({tuple(m.shape) for m in maps})
        if len(shapes) != 1 or len(shapes[0]) != 4:
            raise ValueError(
                f"expected one (B, H, T, T) tensor per layer, as model.attention_maps(idx) returns; got shapes {shapes}"
            )
        B = shapes[0][0]
        if not -B <= batch_index < B:
            raise ValueError(f"batch_index={batch_index} is out of range for a batch of B={B}: use 0 .. {B - 1}")
        return np.stack([_as_array(m[batch_index]) for m in maps])  # (L, H, T, T)
    array = _as_array(maps)
    if array.ndim != 4:
        raise ValueError(
            f"expected a list of (B, H, T, T) tensors or one (L, H, T, T) array, got shape {array.shape}"
        )
    return array


def attention_grid(
    maps,
    tokens: Sequence[str] | None = None,
    *,
    layers: Sequence[int] | None = None,
    heads: Sequence[int] | None = None,
    batch_index: int = 0,
    title: str | None = None,
    cmap: str = "viridis",
    vmax: float | None = 1.0,
    cell_size: float = 0.8,
):
    """A layers × heads grid of small attention maps: row ``l`` is layer ``l``, column ``h`` is head ``h``.

    Args:
        maps: what ``GPT.attention_maps(idx)`` returns (``L`` tensors of shape ``(B, H, T, T)``), or one
            array of shape ``(L, H, T, T)``.
        tokens: the ``T`` token labels, beside the left column and under the bottom row
            when a map is tall enough to fit them (``cell_size >= T * TOKEN_PITCH``).
        layers, heads: which layers and heads to draw, in that order (default: all of them).
        batch_index: which sequence of the batch to draw.
        title: the figure's title.
        cmap: the colour map.
        vmax: top of the one colour scale all maps share (the bottom is 0). The default 1.0 makes a
            colour mean the same weight in every map; ``None`` uses the largest weight drawn.
        cell_size: width and height of one small map, in inches.

    Returns:
        The ``Figure``: ``len(layers) * len(heads)`` map axes, then one colour-bar axes.
    """
    import matplotlib.pyplot as plt

    array = _stack_maps(maps, batch_index)  # (L, H, T, T)
    L, H, T_q, T_k = array.shape
    layers = list(range(L)) if layers is None else [int(i) for i in layers]
    heads = list(range(H)) if heads is None else [int(i) for i in heads]
    for what, chosen, n in (("layers", layers, L), ("heads", heads, H)):
        bad = [i for i in chosen if not 0 <= i < n]
        if bad or not chosen:
            raise ValueError(f"{what}={chosen} is not a non-empty selection of the {n} {what} 0 .. {n - 1}")
    if tokens is not None and len(tokens) != T_k:
        raise ValueError(f"got {len(tokens)} tokens for maps over T={T_k} positions: pass one label per position")
    if vmax is None:
        vmax = float(array[np.ix_(layers, heads)].max())

    labelled = tokens is not None and cell_size >= T_k * TOKEN_PITCH
    label_size = 0.6 * LABEL_PT / 72 * max(map(len, tokens)) if labelled else 0.0  # inches
    fig, axes = plt.subplots(
        len(layers), len(heads), squeeze=False, layout="constrained",
        figsize=(cell_size * len(heads) + 1.4 + label_size,
                 cell_size * len(layers) + 0.9 + label_size),
    )
    for r, layer in enumerate(layers):
        for c, head in enumerate(heads):
            ax = axes[r, c]
            image = ax.imshow(array[layer, head], cmap=cmap, vmin=0.0, vmax=vmax, interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if labelled and r == len(layers) - 1:
                ax.set_xticks(range(T_k), tokens, rotation=90, fontsize=LABEL_PT)
            if labelled and c == 0:
                ax.set_yticks(range(T_q), list(tokens)[T_k - T_q:], fontsize=LABEL_PT)
            if r == 0:
                ax.set_title(f"head {head}", fontsize=LABEL_PT)
            if c == 0:
                ax.set_ylabel(f"layer {layer}", fontsize=LABEL_PT)
    fig.colorbar(image, ax=axes, shrink=0.6, label="attention weight")
    fig.suptitle(title or "Attention maps, layers × heads\n(rows: queries, columns: keys)",
                 fontsize=LABEL_PT)
    return fig


def compare_attention(
    weights: Sequence,
    titles: Sequence[str],
    tokens=None,
    *,
    vmax: float | None = None,
    annotate: bool | None = None,
    cmap: str = "viridis",
    panel_size: float = 3.3,
    ncols: int | None = None,
):
    """Attention maps in a row where they fit the book's width, else one above the other, on one
    colour scale with one shared colour bar.

    Args:
        weights: 2-D maps ``(T_q, T_k)``, e.g. the same head for two inputs; sizes may differ.
        titles: one title per map.
        tokens: the key labels: one list for every map, or one list per map (for inputs that differ,
            such as "... She" and "... He").
        vmax: top of the shared colour scale (the bottom is 0); ``None`` uses the largest weight
            drawn, so faint patterns stay visible while every panel reads on the same scale.
        annotate: write each weight (two decimals) in its cell; default when every map has at most 12 keys.
        cmap: the colour map.
        panel_size: width and height of one map, in inches.
        ncols: maps per row; more maps wrap onto further rows. The default puts as many in a row
            as fit in ``figure_text.WIDTH_IN``, the widest figure whose labels stay legible on
            a phone (one map per row at the default ``panel_size``).

    Returns:
        The ``Figure``: one axes per map (row by row), then one colour-bar axes.
    """
    import matplotlib.pyplot as plt

    arrays = [_as_array(w) for w in weights]
    if not arrays or any(a.ndim != 2 for a in arrays):
        raise ValueError(
            f"compare_attention needs one or more 2-D (T_q, T_k) maps, got shapes {[a.shape for a in arrays]}: "
            "select a batch row and a head first, e.g. maps[layer][0, head]"
        )
    if len(titles) != len(arrays):
        raise ValueError(f"got {len(titles)} titles for {len(arrays)} maps: pass one title per map")
    if tokens is None or (len(tokens) and isinstance(tokens[0], str)):
        tokens = [tokens] * len(arrays)
    if len(tokens) != len(arrays):
        raise ValueError(f"got {len(tokens)} token lists for {len(arrays)} maps: pass one list, or one per map")
    if vmax is None:
        vmax = max(float(a.max()) for a in arrays)
    if annotate is None:
        annotate = all(a.shape[1] <= 12 for a in arrays)

    if ncols is None:  # as many as fit the book's figure width, else one above the other
        ncols = max(1, int((WIDTH_IN - 1.2) // panel_size))
    ncols = max(1, min(ncols, len(arrays)))
    nrows = -(-len(arrays) // ncols)
    fig, axes = plt.subplots(nrows, ncols, squeeze=False, layout="constrained",
                             figsize=(panel_size * ncols + 1.2, panel_size * nrows))
    for ax in axes.flat[len(arrays):]:
        ax.remove()  # empty places in the last row
    for n, (ax, a, title, labels) in enumerate(zip(axes.flat, arrays, titles, tokens)):
        attention_heatmap(a, labels, ax=ax, title=title, cmap=cmap, vmin=0.0, vmax=vmax, colorbar=False)
        if n % ncols:
            ax.set_ylabel("")  # said once per row, on the left
        if annotate:
            for i, j in zip(*np.nonzero(a >= 0.005)):
                text = f"{a[i, j]:.2f}".removeprefix("0")  # ".37"; "1.00" stays
                ax.text(j, i, text, ha="center", va="center", fontsize=LABEL_PT - 2,
                        color="black" if a[i, j] > 0.6 * vmax else "white")
    drawn = list(axes.flat[: len(arrays)])
    fig.colorbar(drawn[0].images[0], ax=drawn, shrink=0.8, label="attention weight")
    return fig


def attention_lines(
    weights,
    tokens: Sequence[str],
    *,
    heads: Sequence[int] | None = None,
    title: str | None = None,
    ncols: int | None = None,
):
    """A static version of bertviz's head view: for each head, a line from every query token (left)
    to every key token (right), as opaque as its attention weight.

    Args:
        weights: one layer's weights ``(H, T, T)`` (e.g. ``model.attention_maps(idx)[layer][0]``), or one
            head's ``(T, T)``.
        tokens: the ``T`` token labels.
        heads: which heads to draw, one panel each (default: all).
        title: the figure's title.
        ncols: panels per row; more heads wrap onto further rows. The default puts as many in a
            row as fit in ``figure_text.WIDTH_IN``, so that the labels stay legible on a phone.

    Returns:
        The ``Figure``, with one axes per head drawn.
    """
    import matplotlib.pyplot as plt
    from matplotlib.collections import LineCollection

    array = _as_array(weights)
    if array.ndim == 2:
        array = array[None]
    if array.ndim != 3 or array.shape[1] != array.shape[2]:
        raise ValueError(f"expected one layer's weights (H, T, T) or one head's (T, T), got shape {array.shape}")
    H, T, _ = array.shape
    if len(tokens) != T:
        raise ValueError(f"got {len(tokens)} tokens for maps over T={T} positions: pass one label per position")
    heads = list(range(H)) if heads is None else [int(h) for h in heads]
    bad = [h for h in heads if not 0 <= h < H]
    if bad or not heads:
        raise ValueError(f"heads={heads} is not a non-empty selection of the {H} heads 0 .. {H - 1}")

    colours = plt.get_cmap("tab10")
    label_width = 0.6 * LABEL_PT / 72 * max(map(len, tokens)) + 0.1  # inches, longest label
    if ncols is None:  # as many panels as fit the book's figure width
        ncols = max(1, int((WIDTH_IN - 0.2) // (2 * label_width + 0.6)))
    ncols = max(1, min(ncols, len(heads)))
    nrows = -(-len(heads) // ncols)
    margin = label_width / 0.6  # in data units: the lines span x = 0 .. 1, drawn 0.6 inches wide
    fig, axes = plt.subplots(nrows, ncols, squeeze=False, layout="constrained",
                             figsize=((2 * label_width + 0.6) * ncols + 0.2,
                                      (1.5 * LABEL_PT / 72 * T + 0.6) * nrows + 0.4))
    for ax in axes.flat[len(heads):]:
        ax.remove()  # empty places in the last row
    for ax, h in zip(axes.flat, heads):
        i, j = np.nonzero(array[h] > 0.01)  # query i -> key j; fainter lines are invisible anyway
        segments = [[(0.0, -q), (1.0, -k)] for q, k in zip(i, j)]
        colour = np.array(colours(h % 10))
        rgba = np.tile(colour, (len(i), 1))
        rgba[:, 3] = array[h][i, j]
        ax.add_collection(LineCollection(segments, colors=rgba, linewidths=2.0))
        for t, label in enumerate(tokens):
            ax.text(-0.05, -t, label, ha="right", va="center", fontsize=LABEL_PT)
            ax.text(1.05, -t, label, ha="left", va="center", fontsize=LABEL_PT)
        ax.set_xlim(-margin, 1.0 + margin)
        ax.set_ylim(-T + 0.5, 0.5)
        ax.axis("off")
        ax.set_title(f"head {h}", fontsize=LABEL_PT, color=colour)
    fig.suptitle(title or "Attention: query tokens (left) to the keys they attend to (right)", fontsize=10)
    return fig


def head_scores_heatmap(scores, title: str, label: str):
    """Chapter 8: one number per head (e.g. a sink or previous-token score), as a layers x heads heatmap
    with every cell annotated, on a fixed colour scale from 0 to 1.

    Args:
        scores: an ``(L, H)`` tensor or array of values in [0, 1].
        title: the figure's title.
        label: the colour bar's label.

    Returns:
        The ``Figure``.
    """
    import matplotlib.pyplot as plt

    array = _as_array(scores)
    if array.ndim != 2 or not np.isfinite(array).all():
        raise ValueError(f"scores must be a finite (layers, heads) array, got shape {array.shape}")
    L, H = array.shape
    width = min(0.55 * H + 2.5, 9)
    fig, ax = plt.subplots(figsize=(width, 0.45 * L + 1.5), layout="constrained")
    image = ax.imshow(array, cmap="magma", vmin=0.0, vmax=1.0)
    # The values in the book's type size where the figure fits a phone (a small model's few
    # heads), smaller for GPT-2's 12 x 12, whose figure is read at full size.
    size = LABEL_PT if width <= WIDTH_IN else 7
    for (l, h), value in np.ndenumerate(array):
        ax.text(h, l, f"{value:.2f}", ha="center", va="center", fontsize=size,
                color="black" if value > 0.6 else "white")
    ax.set_xticks(range(H))
    ax.set_yticks(range(L))
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_title(title, fontsize=10)
    fig.colorbar(image, ax=ax, label=label)
    return fig
