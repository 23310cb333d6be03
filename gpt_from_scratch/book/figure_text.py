"""The book's figures say how small their text is, so the browser test can check it.

``book_figures()`` (every chapter's set-up cell) shows each matplotlib figure as a retina
PNG, as ``set_matplotlib_formats("retina")`` does, and writes the size of the figure's
smallest text, in points, into the PNG's metadata under ``SMALLEST_TEXT``. A reader sees
that text at ``points / 72 * dpi * shown / stored`` CSS px, from the PNG's dpi and its shown
and stored widths; ``scripts/browser_test.py`` reads it there and fails a figure whose text
is under 9 CSS px.

The PNG keeps at most 256 colours, on white (a line plot or a heatmap looks the same; the file
is about a third the size), so that a chapter with figures stays light on a phone. ``book_figures()``
also sets the book's one figure style (``STYLE``): type large enough for a phone, where a
figure ``W`` inches wide is drawn ``PHONE_COLUMN_PX`` CSS px wide, so its text of ``s`` points
is ``s * PHONE_COLUMN_PX / (72 * W)`` CSS px: 10-point ticks need ``W`` <= 5.3 inches
(``max_width_in``); the book's figures are at most ``WIDTH_IN`` wide.
"""

from __future__ import annotations

import base64
import io

SMALLEST_TEXT = "Smallest text (pt)"
PHONE_COLUMN_PX = 343  # a figure on a 390-px phone (book.css), in CSS px, as the test draws it
MIN_TEXT_PX = 9  # the smallest legible text, in CSS px (scripts/browser_phone.py)
COLOURS = 256
WIDTH_IN = 5.2  # the widest figure, in inches: 10-point text stays legible (max_width_in(10))
# The book's figure style: every chapter's figures, set by book_figures(). Panels that would
# not fit WIDTH_IN side by side are stacked.
STYLE = {"font.size": 11, "axes.titlesize": 11, "axes.labelsize": 11, "xtick.labelsize": 10,
         "ytick.labelsize": 10, "legend.fontsize": 10, "figure.titlesize": 12,
         "figure.figsize": (WIDTH_IN, 3.6)}


def max_width_in(points: float) -> float:
    """The widest figure, in inches, whose text of ``points`` is legible on a phone."""
    return points * PHONE_COLUMN_PX / (72 * MIN_TEXT_PX)


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
    """The figure as a pixel-doubled PNG (IPython's ``retina_figure``), in at most ``COLOURS``
    colours, base64-encoded, whose metadata holds its smallest text size and its dpi."""
    from IPython.core.pylabtools import retina_figure
    from PIL import Image, PngImagePlugin

    size = smallest_text_pt(fig)
    drawn = retina_figure(fig, base64=False, **kwargs)
    if drawn is None:  # an empty figure: nothing to show
        return None
    data, shape = drawn
    image = Image.open(io.BytesIO(data))
    info = PngImagePlugin.PngInfo()
    if size is not None:
        info.add_text(SMALLEST_TEXT, f"{size:g}")
    opaque = Image.alpha_composite(Image.new("RGBA", image.size, "white"), image.convert("RGBA"))
    # Median cut keeps a colour bar's gradient smooth (the fast octree left 96 colours, in bands).
    fewer = opaque.convert("RGB").quantize(COLOURS, method=Image.Quantize.MEDIANCUT,
                                           dither=Image.Dither.NONE)
    out = io.BytesIO()
    fewer.save(out, "PNG", optimize=True, pnginfo=info, dpi=image.info["dpi"])
    return base64.b64encode(out.getvalue()).decode("ascii"), shape


def book_figures() -> None:
    """Show the notebook's figures in the book's style (``STYLE``) as retina PNGs that record
    their smallest text size."""
    import matplotlib as mpl
    from IPython import get_ipython
    from matplotlib.figure import Figure
    from matplotlib_inline.backend_inline import set_matplotlib_formats

    shell = get_ipython()
    if shell is None:
        raise RuntimeError("book_figures() sets how a notebook shows its figures: "
                           "call it in Jupyter or IPython")
    set_matplotlib_formats("retina")
    mpl.rcParams.update(STYLE)
    shell.display_formatter.formatters["image/png"].for_type(Figure, retina_png)
