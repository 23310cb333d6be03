"""Plot helpers for looking inside attention (Chapter 4; Chapter 8 adds more).

``token_labels`` turns token ids into readable axis labels; ``attention_heatmap`` draws one
``(T_q, T_k)`` matrix of attention weights or scores with those labels on both axes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch


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
    fontsize: float = 8,
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
        fontsize: size of the tick labels.

    Returns:
        The ``Axes`` drawn on.
    """
    import matplotlib.pyplot as plt

    if isinstance(weights, torch.Tensor):
        weights = weights.detach().float().cpu().numpy()
    weights = np.asarray(weights, dtype=float)
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
    colormap = plt.get_cmap(cmap).copy()
    colormap.set_bad("#dddddd")
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
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    return ax
