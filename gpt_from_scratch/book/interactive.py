"""Interactive figures that need no kernel: attention maps with the token pair and weight on
hover, a sampling explorer (temperature, top-k, top-p) and a layer-and-head picker.

Every control is precomputed into the Plotly figure itself (slider steps and menu buttons
that restyle its traces), so moving a slider changes the picture in the rendered book, in
Jupyter and in Colab without running any Python. Plotly over Altair/Vega-Lite: its figures
are plain JSON that JupyterLab, VS Code and the book render with one bundled script
(plotly.js, MIT, no other dependency), its heatmaps show the hovered cell out of the box,
and its sliders and menus need no data transform language. ``Interactive`` displays a figure
as the Plotly mime type (JupyterLab's own renderer, offline), as HTML (the book, which
serves plotly.js from its ``_static`` folder, and Colab) and as text (the PDF, which shows
the chapter's static figure instead).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from ..generate import top_k_filter, top_p_filter

if TYPE_CHECKING:
    import plotly.graph_objects as go

PLOTLY_MIME = "application/vnd.plotly.v1+json"
CONFIG = {"responsive": True, "displayModeBar": False, "scrollZoom": False}
# Under the mime type, JupyterLab's renderer (jupyterlab-plotly) follows the output's width
# itself, by relayout(autosize) that drops layout.height: responsive on too, the next full
# redraw (a button) sizes the plot to 100% of an output as tall as its content, and the
# figure collapses to 29 px. Responsive stays on in the HTML (the book, Colab).
MIME_CONFIG = {**CONFIG, "responsive": False}
HOVER = ("query %{customdata[0]} (position %{customdata[2]})<br>key %{customdata[1]} "
         "(position %{customdata[3]})<br>weight %{z:.3f}<extra></extra>")


def _plotly():
    """The ``plotly`` package, imported when a figure is drawn: only the notebooks' extra
    installs it, so that the rest of the package runs without it."""
    try:
        import plotly.graph_objects
        import plotly.io
        import plotly.offline
    except ImportError as error:
        raise ImportError("the interactive figures need plotly, which the notebooks' "
                          "extra installs: pip install \"gpt-from-scratch-book[notebooks]\""
                          ) from error
    return plotly


def plotly_js_url() -> str:
    """Where the HTML fetches plotly.js outside the book and JupyterLab (Colab's output
    frames, nbviewer): the version plotly.py bundles. The book's pages hold it already."""
    return f"https://cdn.plot.ly/plotly-{_plotly().offline.get_plotlyjs_version()}.min.js"


def _as_maps(maps) -> np.ndarray:
    """(T, T), (N, T, T) or (L, H, T, T) maps as a float array, rounded to 4 places."""
    if isinstance(maps, torch.Tensor):
        maps = maps.detach().cpu().numpy()
    return np.round(np.asarray(maps).astype(np.float64), 4)


def _check_tokens(maps: np.ndarray, tokens: Sequence[str]) -> None:
    T = maps.shape[-1]
    if maps.shape[-2] != T or len(tokens) != T:
        raise ValueError(f"attention maps must be (..., T, T) with T = len(tokens); got "
                         f"maps of shape {maps.shape} and {len(tokens)} tokens: pass one "
                         "label per token")


def _causal(weights: np.ndarray) -> list:
    """A (T, T) map with the future (above the diagonal) blank, as Plotly's nested lists."""
    T = weights.shape[-1]
    return np.where(np.tril(np.ones((T, T), dtype=bool)), weights, np.nan).tolist()


def _heatmap(weights: np.ndarray, tokens: Sequence[str], visible: bool) -> go.Heatmap:
    T = len(tokens)
    pairs = [[[tokens[q], tokens[k], q, k] for k in range(T)]
             for q in range(T)]  # (T, T, 4)
    return _plotly().graph_objects.Heatmap(
        z=_causal(weights), customdata=pairs, hovertemplate=HOVER, zmin=0, zmax=1,
        colorscale="Viridis", colorbar={"title": {"text": "weight"}}, hoverongaps=False,
        visible=visible)


def _token_axes(fig: go.Figure, tokens: Sequence[str]) -> None:
    ticks = {"tickvals": list(range(len(tokens))), "ticktext": list(tokens),
             "tickfont_size": 12}
    fig.update_xaxes(title_text="key (attended to)", tickangle=-60, constrain="domain",
                     **ticks)
    fig.update_yaxes(title_text="query (attending)", autorange="reversed", scaleanchor="x",
                     constrain="domain", **ticks)  # square cells


def _show_one(labels: Sequence[str], **menu) -> dict:
    """A menu whose entry i shows trace i alone (one trace per entry)."""
    n = len(labels)
    buttons = [{"label": label, "method": "restyle",
                "args": [{"visible": [j == i for j in range(n)]}]}
               for i, label in enumerate(labels)]
    return {"buttons": buttons, "x": 0, "xanchor": "left", "y": 1.02, "yanchor": "bottom",
            **menu}


def _layout(fig: go.Figure, title: str, height: int, **layout) -> go.Figure:
    fig.update_layout(title={"text": title, "y": 0.98}, height=height,
                      plot_bgcolor="white", margin={"l": 10, "r": 10, "t": 90, "b": 10},
                      **layout)
    return fig


def attention_figure(maps, tokens: Sequence[str], names: Sequence[str],
                     title: str = "") -> go.Figure:
    """Attention maps (``(N, T, T)``, one per name) with buttons to pick one; hovering
    over a cell shows its query token, its key token and their weight."""
    array = _as_maps(maps)
    if array.ndim == 2:
        array = array[None]
    _check_tokens(array, tokens)
    if len(names) != len(array):
        raise ValueError(f"got {len(array)} maps and {len(names)} names: pass one name per "
                         "map")
    fig = _plotly().graph_objects.Figure([_heatmap(w, tokens, visible=i == 0)
                                          for i, w in enumerate(array)])
    if len(array) > 1:
        fig.update_layout(updatemenus=[_show_one(names, type="buttons", direction="right")])
    _token_axes(fig, tokens)
    return _layout(fig, title, height=480)


@dataclass(frozen=True)
class SamplingFilter:
    """One entry of the explorer's menu: top-k and top-p as ``generate`` takes them."""

    name: str
    top_k: int | None = None
    top_p: float | None = None


def sampled_probs(logits: torch.Tensor, temperature: float,
                  f: SamplingFilter) -> torch.Tensor:
    """The distribution ``generate`` samples from: temperature, then top-k, then top-p."""
    z = logits.double() / temperature
    if f.top_k is not None:
        z = top_k_filter(z, f.top_k)
    if f.top_p is not None:
        z = top_p_filter(z, f.top_p)
    return torch.softmax(z, dim=-1)


def _bars(probs: torch.Tensor, order: torch.Tensor) -> list[float]:
    """The probabilities of the tokens in ``order``, then the rest of the vocabulary."""
    shown = probs[order]
    rest = max(1.0 - shown.sum().item(), 0.0)
    return [round(p, 4) for p in shown.tolist() + [rest]]


def sampling_explorer(logits: torch.Tensor, labels: Sequence[str],
                      temperatures: Sequence[float], filters: Sequence[SamplingFilter],
                      n_bars: int = 15, title: str = "") -> go.Figure:
    """Next-token probabilities as bars: a slider sets the temperature, buttons the filter.

    ``logits`` is one ``(V,)`` row of the model's output and ``labels`` its ``V`` token
    labels. The bars are the ``n_bars`` tokens most likely at temperature 1, then every
    other token together. One trace per filter (the buttons show one); each slider step sets
    every trace's bars at its temperature, so the two controls combine without a kernel.
    """
    if logits.dim() != 1 or len(labels) != logits.numel():
        raise ValueError(f"expected one (V,) row of logits and V labels; got shape "
                         f"{tuple(logits.shape)} and {len(labels)} labels")
    if 1.0 not in temperatures:
        raise ValueError(f"temperatures {list(temperatures)} must include 1.0, where the "
                         "explorer starts: add it")
    order = torch.argsort(logits, descending=True)[:n_bars]
    x = [labels[i] for i in order.tolist()] + [f"other {logits.numel() - n_bars}"]
    bars = [[_bars(sampled_probs(logits, t, f), order) for f in filters]
            for t in temperatures]  # (temperatures, filters, n_bars + 1)
    start = list(temperatures).index(1.0)
    go = _plotly().graph_objects
    fig = go.Figure([go.Bar(x=x, y=bars[start][i], visible=i == 0, name=f.name,
                            hovertemplate="%{x}: %{y:.3f}<extra></extra>")
                     for i, f in enumerate(filters)])
    steps = [{"label": f"{t:g}", "method": "restyle", "args": [{"y": bars[j]}]}
             for j, t in enumerate(temperatures)]
    slider = {"active": start, "steps": steps, "currentvalue": {"prefix": "temperature "},
              "pad": {"t": 60}}
    menu = _show_one([f.name for f in filters], type="buttons", direction="right")
    return _layout(fig, title, height=480, sliders=[slider], updatemenus=[menu],
                   yaxis={"range": [0, 1], "title": {"text": "probability"}},
                   xaxis={"type": "category", "tickfont_size": 12})


def layer_head_explorer(maps, tokens: Sequence[str], layer: int = 0, head: int = 0,
                        title: str = "") -> go.Figure:
    """Every head of every layer, one at a time: a menu picks the layer, a slider the head.

    ``maps`` is ``(L, H, T, T)``. One trace per layer (the menu shows one); each slider step
    sets every layer's trace to that head's map, so the two controls combine without a
    kernel.
    """
    array = _as_maps(maps)
    if array.ndim != 4:
        raise ValueError(f"expected maps of shape (L, H, T, T), got {array.shape}: stack "
                         "model.attention_maps(idx) and take one sequence, e.g. [:, 0]")
    _check_tokens(array, tokens)
    L, H = array.shape[:2]
    if not (0 <= layer < L and 0 <= head < H):
        raise ValueError(f"layer={layer}, head={head} out of range: use 0 .. {L - 1} and "
                         f"0 .. {H - 1}")
    fig = _plotly().graph_objects.Figure([_heatmap(array[l, head], tokens,
                                                   visible=l == layer) for l in range(L)])
    steps = [{"label": str(h), "method": "restyle",
              "args": [{"z": [_causal(array[l, h]) for l in range(L)]}]} for h in range(H)]
    slider = {"active": head, "steps": steps, "currentvalue": {"prefix": "head "},
              "pad": {"t": 120}}
    menu = _show_one([f"layer {l}" for l in range(L)], active=layer)
    _token_axes(fig, tokens)
    return _layout(fig, title, height=560, sliders=[slider], updatemenus=[menu])


@dataclass(frozen=True)
class Interactive:
    """A figure as notebooks and the book display it: Plotly's mime type, HTML, and ``text``
    (what the PDF and plain-text readers get instead, naming the static figure)."""

    figure: go.Figure
    text: str

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        spec = json.loads(_plotly().io.to_json(self.figure, validate=False))
        return {PLOTLY_MIME: {**spec, "config": MIME_CONFIG},
                "text/html": self.html({**spec, "config": CONFIG}), "text/plain": self.text}

    @staticmethod
    def html(spec: dict) -> str:
        """A div and a script that draws in it with plotly.js (loaded if missing)."""
        payload = json.dumps(spec, separators=(",", ":")).replace("</", "<\\/")
        div_id = "plotly-" + hashlib.sha1(payload.encode()).hexdigest()[:12]
        height = spec["layout"].get("height", 450)
        return (
            f'<div id="{div_id}" class="plotly-graph-div gfs-interactive" '
            f'style="height:{height}px;width:100%"></div>\n'
            '<script type="text/javascript">\n'
            f"(function () {{\n  var spec = {payload};\n"
            f'  function draw() {{ Plotly.newPlot("{div_id}", spec.data, spec.layout, '
            "spec.config); }\n"
            "  if (window.Plotly) { draw(); return; }\n"
            '  var script = document.createElement("script");\n'
            f'  script.src = "{plotly_js_url()}";\n'
            "  script.onload = draw;\n"
            "  document.head.appendChild(script);\n})();\n</script>")
