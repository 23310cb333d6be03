"""The book's heatmaps stay legible (issue #15): labels at LABEL_PT or larger, figures at most
9.5 inches wide, so that scripts/browser_test.py finds every label at least 9 CSS px tall."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from gpt_from_scratch.book.figure_text import WIDTH_IN  # noqa: E402
from gpt_from_scratch.book.heads_plots import compare_attention  # noqa: E402
from gpt_from_scratch.book.plotting import LABEL_PT, attention_heatmap  # noqa: E402


def _tick_sizes(ax):
    return [t.get_fontsize() for t in ax.get_xticklabels() + ax.get_yticklabels()]


def test_heatmap_labels_are_at_least_label_pt():
    ax = attention_heatmap(torch.rand(5, 5).softmax(-1), list("abcde"))
    assert min(_tick_sizes(ax)) >= LABEL_PT
    plt.close(ax.figure)


def test_compare_attention_stacks_maps_within_the_books_figure_width():
    maps = [torch.rand(4, 4).softmax(-1) for _ in range(5)]
    fig = compare_attention(maps, [f"map {i}" for i in range(5)], list("abcd"))
    width, height = fig.get_size_inches()
    assert width <= WIDTH_IN  # legible on a phone (figure_text.max_width_in)
    drawn = [ax for ax in fig.axes if ax.images]
    assert len(drawn) == 5 and len(fig.axes) == 5 + 1  # five maps, one colour bar
    assert len({round(ax.get_position().y0, 3) for ax in drawn}) == 5  # one map per row
    assert min(min(_tick_sizes(ax)) for ax in drawn) >= LABEL_PT
    two = compare_attention(maps, [f"map {i}" for i in range(5)], list("abcd"), panel_size=1.9)
    assert len({round(ax.get_position().y0, 3) for ax in two.axes if ax.images}) == 3  # 2, 2, 1
    plt.close(two)
    plt.close(fig)
