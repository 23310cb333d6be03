"""The book's figures say how small their text is, so the browser test can check it.

``book_figures()`` (every chapter's set-up cell) shows each matplotlib figure as a retina
PNG, as ``set_matplotlib_formats("retina")`` does, and writes the size of the figure's
smallest text, in points, into the PNG's metadata under ``SMALLEST_TEXT``. A reader sees
that text at ``points / 72 * dpi * shown / stored`` CSS px, from the PNG's dpi and its shown
and stored widths; ``scripts/browser_test.py`` reads it there and fails a figure whose text
is under 9 CSS px.
"""

from __future__ import annotations

SMALLEST_TEXT = "Smallest text (pt)"


def smallest_text_pt(fig) -> float | None:
    """The size, in points, of the smallest non-empty text the figure draws (None: none).

    Walks the artists as ``Figure.draw`` does: hidden ones and their children are skipped, and
    so are the axis lines, ticks and labels of an ``Axes`` switched off with ``ax.axis("off")``.
    """
    from matplotlib.axes import Axes
    from matplotlib.axis import Axis
    from matplotlib.spines import Spine
    from matplotlib.text import Text

    sizes = []

    def walk(artist, axis_on: bool) -> None:
        hidden_axis = not axis_on and isinstance(artist, (Axis, Spine))
        if not artist.get_visible() or hidden_axis:
            return
        if isinstance(artist, Text) and artist.get_text().strip():
            sizes.append(artist.get_fontsize())
        for child in artist.get_children():
            walk(child, artist.axison if isinstance(artist, Axes) else axis_on)

    walk(fig, True)
    return min(sizes, default=None)


def retina_png(fig, **kwargs):
    """The figure as a pixel-doubled PNG (IPython's ``retina_figure``, base64-encoded) whose
    metadata holds its smallest text size."""
    from IPython.core.pylabtools import retina_figure

    size = smallest_text_pt(fig)
    metadata = {} if size is None else {SMALLEST_TEXT: f"{size:g}"}
    return retina_figure(fig, base64=True, metadata=metadata, **kwargs)


def book_figures() -> None:
    """Show the notebook's figures as retina PNGs that record their smallest text size."""
    from IPython import get_ipython
    from matplotlib.figure import Figure
    from matplotlib_inline.backend_inline import set_matplotlib_formats

    shell = get_ipython()
    if shell is None:
        raise RuntimeError("book_figures() sets how a notebook shows its figures: "
                           "call it in Jupyter or IPython")
    set_matplotlib_formats("retina")
    shell.display_formatter.formatters["image/png"].for_type(Figure, retina_png)
