"""Chapter 13's figure: each head's induction score against its patching share, one panel
per seed, the largest shares labelled where no label covers another (``label_points``)."""

from __future__ import annotations

import itertools

from torch import Tensor


def patching_figure(shares: dict[int, Tensor], scores: dict[int, Tensor]):
    """One panel per seed: each head's induction score against its patching share, the three
    largest shares labelled where no label covers another, a point or the frame
    (``label_points``)."""
    import matplotlib.pyplot as plt

    if not (isinstance(shares, dict) and isinstance(scores, dict) and shares
            and list(shares) == list(scores)):
        raise ValueError(f"patching_figure: shares and scores must be dicts with the same "
                         f"seeds in the same order, got {_keys(shares)} and "
                         f"{_keys(scores)}: pass one (L, H) tensor per seed to each")
    for seed in shares:
        if not (isinstance(shares[seed], Tensor) and isinstance(scores[seed], Tensor)
                and shares[seed].dim() == 2 and shares[seed].shape == scores[seed].shape):
            raise ValueError(f"patching_figure: seed {seed}'s shares and scores must be "
                             "(L, H) tensors of one shape: one value per head in each")
    fig, axes = plt.subplots(len(shares), 1, figsize=(5.2, 2.6 * len(shares)), sharex=True,
                             squeeze=False)
    axes = axes[:, 0]  # one panel per seed, one seed too
    for ax, seed in zip(axes, shares):
        x, y = scores[seed].flatten(), shares[seed].flatten()
        ax.scatter(x, y, s=18)
        low, high, span = float(y.min()), float(y.max()), float(y.max() - y.min()) or 1.0
        ax.set_ylim(low - 0.08 * span, high + 0.25 * span)  # room for a label above the top
        ax.margins(x=0.06)
        ax.set_title(f"seed {seed}")
        ax.set_ylabel("share restored")
    axes[-1].set_xlabel("induction score")
    fig.tight_layout()  # the axes where they will be drawn, before the labels are placed
    for ax, seed in zip(axes, shares):
        x, y = scores[seed].flatten(), shares[seed].flatten()
        H = scores[seed].shape[1]
        top = y.argsort(descending=True)[:3].tolist()
        label_points(ax, x.tolist(), y.tolist(), {i: f"L{i // H}H{i % H}" for i in top})
    return fig


def _keys(x) -> str:
    return str(list(x)) if isinstance(x, dict) else f"a {type(x).__name__}"


# Where a label may sit, in points from its point, in order of preference: beside it on the
# right, centred above or below it, beside it on the left; then further up or down on either
# side, with a thin line back to its point. Each place: offsets x and y, the alignments.
_NEAR = ((5, 0, "left", "center"), (0, 5, "center", "bottom"), (0, -5, "center", "top"),
         (-5, 0, "right", "center"))
_FAR = tuple((side * 8, rise, align, "center")
             for rise in (11, -11, 18, -18, 25, -25, 32, -32)
             for side, align in ((1, "left"), (-1, "right")))


def label_points(ax, x: list[float], y: list[float], labels: dict[int, str],
                 fontsize: float = 10, size: float = 18):
    """Label the points that ``labels`` names (index -> text) of a scatter of ``x``, ``y``
    (marker area ``size``, points squared) so that no label covers another label, a point
    of the scatter or the axes' frame. Each label may sit beside, above or below its point,
    or further up or down with a line to it (``_NEAR``, then ``_FAR``); of the ways to place
    them all, the one that keeps them nearest their points wins (if none exists, each label
    takes its first place clear of the points and the frame). Call it once the axes' limits
    and position are final (after ``tight_layout``). Returns the annotations, in ``labels``'
    order. Every combination is tried: meant for a few labels."""
    from matplotlib.transforms import Bbox

    fig = ax.figure
    renderer = fig.canvas.get_renderer()
    radius = size ** 0.5 / 2 * fig.dpi / 72 + 1  # display pixels
    frame = ax.get_window_extent(renderer)
    points = [Bbox.from_extents(cx - radius, cy - radius, cx + radius, cy + radius)
              for cx, cy in ax.transData.transform(list(zip(x, y)))]

    def clear(box) -> bool:
        inside = (box.x0 >= frame.x0 + 1 and box.x1 <= frame.x1 - 1
                  and box.y0 >= frame.y0 + 1 and box.y1 <= frame.y1 - 1)
        return inside and not any(box.overlaps(point) for point in points)

    options = []  # per label: (rank, place, box) of each place clear of points and frame
    for i in labels:
        probe = ax.annotate(labels[i], (x[i], y[i]), xytext=(0, 0), fontsize=fontsize,
                            textcoords="offset points")
        found = []
        for rank, (dx, dy, align, valign) in enumerate(_NEAR + _FAR):
            probe.set_position((dx, dy))
            probe.set_horizontalalignment(align)
            probe.set_verticalalignment(valign)
            box = probe.get_window_extent(renderer).padded(1)
            if clear(box):
                found.append((rank, (dx, dy, align, valign), box))
        probe.remove()
        options.append(found or [(0, _NEAR[0], Bbox.null())])
    best, cost = [choice[0] for choice in options], None
    for choice in itertools.product(*options):
        total = sum(rank for rank, _, _ in choice)
        if cost is not None and total >= cost:
            continue
        if not any(a[2].overlaps(b[2]) for a, b in itertools.combinations(choice, 2)):
            best, cost = list(choice), total
    annotations = []
    for i, (_, (dx, dy, align, valign), _) in zip(labels, best):
        line = dict(arrowstyle="-", lw=0.6, color="0.4", shrinkA=1, shrinkB=3)
        annotations.append(ax.annotate(labels[i], (x[i], y[i]), xytext=(dx, dy),
                                       textcoords="offset points", fontsize=fontsize,
                                       ha=align, va=valign,
                                       arrowprops=line if abs(dy) > 5 else None))
    return annotations
