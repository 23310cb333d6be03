"""Chapter 4 — plot helpers for looking inside attention (Chapter 8's, for many heads at once,
are in ``heads_plots``).

``token_labels`` turns token ids into readable axis labels; ``attention_heatmap`` draws one
``(T_q, T_k)`` matrix of attention weights or scores with those labels on both axes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

# Every token label of a heatmap is at least this size, in points. The book shows a figure of
# width W inches in a content column of about 700 CSS px at 1280 px, so a heatmap up to
# 9.5 inches wide keeps its labels at least 9 CSS px tall (checked by scripts/browser_test.py).
LABEL_PT = 10


def token_labels(ids: Sequence[int] | torch.Tensor, encoding) -> list[str]:
    """Decode each token id on its own and make whitespace visible: ``" the"`` -> ``"␣the"``, ``"\\n"`` -> ``"↵"``.

    ``encoding`` is anything with ``decode(list[int]) -> str`` (a tiktoken ``Encoding``, a ``CharTokenizer``).
    """
    if isinstance(ids, torch.Tensor):
        ids = ids.tolist()
    return [encoding.decode([int(i)]).replace(" ", "␣").replace("\n", "↵") for i in ids]


def attention_heatmap(
    weights,
    tokens: Sequence[str] | None = None,
    ax=None,
    title: str | None = None,
    *,
    query_tokens: Sequence[str] | None = None,
    cmap: str = "viridis",
    vmin: float | None = None,
    vmax: float | None = None,
    colorbar: bool = True,
    colorbar_label: str | None = None,
    fontsize: float = LABEL_PT,
):
    """Draw a ``(T_q, T_k)`` attention matrix: rows are queries, columns are keys.

    Args:
        weights: 2-D tensor or array, e.g. one head's weights ``A[b, h]`` or its scores. Entries that
            are not finite (the ``-inf`` of masked scores) are drawn in light grey.
        tokens: labels of the keys (columns). Unless ``query_tokens`` is given, the queries (rows) are
            labelled with the last ``T_q`` of them (the newest positions, as with a KV cache).
        ax: the matplotlib ``Axes`` to draw on; a new figure is made when None.
        title: the axes title.
        query_tokens: labels of the rows, when they differ from the keys' (cross-attention).
        cmap, vmin, vmax: colour map and its limits (pass ``vmin=0, vmax=1`` to compare weight maps).
        colorbar: add a colour bar beside the axes.
        colorbar_label: what the colours mean, written along the colour bar.
        fontsize: size of the tick labels, in points.

    Returns:
        The ``Axes`` drawn on.
    """
    import matplotlib.pyplot as plt

    weights = _as_array(weights)
    if weights.ndim != 2:
        raise ValueError(
            f"attention_heatmap draws one (T_q, T_k) matrix, got shape {weights.shape}: "
            "select a batch row and a head first, e.g. weights[0, 3]"
        )
    T_q, T_k = weights.shape
    if tokens is not None and len(tokens) != T_k:
        raise ValueError(f"got {len(tokens)} tokens for {T_k} key columns: pass one label per key")
    if query_tokens is None and tokens is not None:
        if T_q > T_k:
            raise ValueError(f"{T_q} query rows but only {T_k} tokens: pass query_tokens")
        query_tokens = list(tokens)[T_k - T_q :]
    if query_tokens is not None and len(query_tokens) != T_q:
        raise ValueError(f"got {len(query_tokens)} query_tokens for {T_q} rows: pass one label per query")

    if ax is None:
        _, ax = plt.subplots(figsize=(5, 4.5))
    colormap = plt.get_cmap(cmap).with_extremes(bad="#dddddd")  # masked (-inf) scores in grey
    image = ax.imshow(np.ma.masked_invalid(weights), cmap=colormap, vmin=vmin, vmax=vmax)
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    if tokens is not None:
        ax.set_xticks(range(T_k), tokens, rotation=90, fontsize=fontsize)
    if query_tokens is not None:
        ax.set_yticks(range(T_q), query_tokens, fontsize=fontsize)
    if title:
        ax.set_title(title)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label=colorbar_label)
    return ax


def _as_array(x) -> np.ndarray:
    """A tensor (any device, with or without grad) or an array-like, as a float NumPy array."""
    if isinstance(x, torch.Tensor):
        return x.detach().float().cpu().numpy()
    return np.asarray(x, dtype=float)
