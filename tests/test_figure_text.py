"""The smallest text a figure draws, recorded in its PNG for the browser test."""

import base64
import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from PIL import Image  # noqa: E402

from gpt_from_scratch.book.figure_text import (  # noqa: E402
    COLOURS, SMALLEST_TEXT, WIDTH_IN, max_width_in, retina_png, smallest_text_pt)


def test_smallest_text_counts_drawn_text_only():
    fig, (left, right) = plt.subplots(1, 2)
    left.set_xticks([0, 1], ["a", "b"], fontsize=11)
    left.set_yticks([0, 1], ["c", "d"], fontsize=12)
    left.set_title("title", fontsize=14)
    right.axis("off")  # its tick labels are not drawn
    right.set_xticks([0], ["tiny"], fontsize=3)
    right.text(0.5, 0.5, "kept", fontsize=9)
    hidden = right.text(0, 0, "hidden", fontsize=2)
    hidden.set_visible(False)
    right.text(0, 0, "  ", fontsize=1)  # blank: nothing to read
    assert smallest_text_pt(fig) == 9
    plt.close(fig)


def test_smallest_text_of_a_figure_without_text_is_none():
    fig = plt.figure()
    assert smallest_text_pt(fig) is None
    plt.close(fig)


def test_retina_png_records_the_smallest_text_and_the_dpi():
    fig, ax = plt.subplots(figsize=(2, 1), dpi=100)
    ax.set_xticks([0, 1], ["a", "b"], fontsize=7.5)
    ax.set_yticks([])
    data, size = retina_png(fig)
    image = Image.open(io.BytesIO(base64.b64decode(data)))
    assert image.text[SMALLEST_TEXT] == "7.5"
    assert round(image.info["dpi"][0]) == 200
    assert size["width"] == image.width // 2
    assert image.mode == "P" and len(image.getpalette()) // 3 <= COLOURS  # light on a phone
    plt.close(fig)


def test_the_widest_legible_figure_grows_with_its_type():
    # 10-point text in a 5.3-inch figure drawn 343 CSS px wide is 9 CSS px tall.
    assert 5.25 < max_width_in(10) < 5.35
    assert max_width_in(8) == 0.8 * max_width_in(10)
    assert WIDTH_IN < max_width_in(10)  # the book's figures leave room for their labels
