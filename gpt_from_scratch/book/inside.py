"""Chapter 13 — looking inside Chapter 12's assistant: its fine-tuned models (cached), the "Repeat:"
clean/corrupted pairs, the copy heads by attention and by activation patching (the chapter's
sentences and lessons are in ``inside_prose``).

Chapter 12 fine-tunes the character model on the play's instructions, one run per seed, and keeps
the runs beside the book's models (``assistant_runs.sft_run``): this chapter reads them in a second.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch
from torch import Tensor

from .. import ablation, interp, patching
from ..chat import ChatTokenizer
from ..utils import check_int
from .assistant import STYLES, Item


@dataclass
class Pairs:
    """Clean and corrupted "Repeat:" conversations (B, T), aligned position by position: the clean
    prompt holds line A, the corrupted one line B of A's length, and both end with the courteous
    answer A teacher-forced. ``target`` (B, T) is the next token; ``copy`` marks the positions whose
    next token is a character of A in the answer; ``source`` (B, T) is, at those positions, where
    the prompt holds that character (the place an induction head looks); ``opening`` marks the
    positions whose next token is a character of the courteous opening, which no line changes.
    ``roles`` (B, T) numbers each position by what it is, the same in every row and in both runs
    (the prompt's k-th character, the line's k-th, the answer's k-th, ...), -1 for padding: what
    mean ablation averages over (``ablation.ablate_heads``)."""

    clean: Tensor
    corrupted: Tensor
    target: Tensor
    copy: Tensor
    source: Tensor
    opening: Tensor
    roles: Tensor


def _roles(length: int, prompt_at: int, answer_at: int, n: int) -> list[tuple[str, int]]:
    """Each position of a conversation of ``length`` tokens as (part, offset in the part): the
    line of ``n`` characters starts at ``prompt_at`` in the prompt and ``answer_at`` in the
    answer."""
    starts = (("before", 0), ("line", prompt_at), ("turn", prompt_at + n), ("answer", answer_at),
              ("end", answer_at + n))
    return [next((part, t - at) for part, at in reversed(starts) if t >= at)
            for t in range(length)]


def repeat_pairs(items: list[Item], tok: ChatTokenizer, n: int) -> Pairs:
    """``n`` pairs of held-out "Repeat" lines of equal length (each line used once)."""
    n = check_int("repeat_pairs", "n", n, minimum=1)
    by_length: dict[int, list[Item]] = {}
    for item in items:
        if item.task == "Repeat":
            by_length.setdefault(len(item.line), []).append(item)
    chosen = [(a, b) for group in by_length.values() for a, b in zip(group[::2], group[1::2])][:n]
    if len(chosen) < n:
        raise ValueError(f"only {len(chosen)} pairs of equal-length Repeat lines among {len(items)} "
                         f"items, {n} asked: pass more held-out items or a smaller n")
    opening = STYLES["courteous"]
    rows = {"clean": [], "corrupted": [], "copy": [], "source": [], "opening": [], "roles": []}
    numbers: dict[tuple[str, int], int] = {}
    for a, b in chosen:
        answer = [{"role": "assistant", "content": opening + a.answer}]
        ids, _ = tok.render(a.messages() + answer)
        bad, _ = tok.render(b.messages() + answer)
        prompt_at = len(tok.render(a.messages())[0]) - len(a.line) - 1  # the line's first character
        answer_at = len(ids) - len(a.line) - 1  # A's first character in the answer (before <|end|>)
        copy = [answer_at - 1 <= t < len(ids) - 2 for t in range(len(ids))]
        source = [prompt_at + t - (answer_at - 1) if c else 0 for t, c in enumerate(copy)]
        said = [answer_at - len(opening) - 1 <= t < answer_at - 1 for t in range(len(ids))]
        roles = [numbers.setdefault(role, len(numbers))
                 for role in _roles(len(ids), prompt_at, answer_at, len(a.line))]
        for key, row in zip(rows, (ids, bad, copy, source, said, roles)):
            rows[key].append(row)
    T = max(len(r) for r in rows["clean"])
    pad = {"clean": tok.pad_id, "corrupted": tok.pad_id, "copy": False, "source": 0, "opening": False,
           "roles": ablation.PAD_ROLE}
    t = {k: torch.tensor([r + [pad[k]] * (T - len(r)) for r in v]) for k, v in rows.items()}
    return Pairs(t["clean"], t["corrupted"], t["clean"].roll(-1, 1), t["copy"], t["source"],
                 t["opening"], t["roles"])


def copy_logprob(pairs: Pairs, where: str = "copy"):
    """The metric: the mean log-probability (nats) of A's characters in the answer (``where="copy"``),
    or of the opening's characters (``"opening"``)."""
    if where not in ("copy", "opening"):
        raise ValueError(f"where={where!r}: choose 'copy' (the line's characters) or 'opening'")
    mask = pairs.copy if where == "copy" else pairs.opening
    return lambda logits: patching.mean_logprob(logits, pairs.target, mask)


def _patterns(model, idx: Tensor) -> list[Tensor]:
    """Each layer's attention pattern (B, H, T, T) on ``idx``."""
    names = [f"blocks.{l}.attn.pattern" for l in range(len(model.blocks))]
    _, cache = interp.run_with_hooks(model, idx, read=names)
    return [cache[name] for name in names]


def induction_scores(model, pairs: Pairs) -> Tensor:
    """(L, H): each head's mean attention, from the answer's position before character k of A, to
    character k of A in the prompt (Chapter 8's induction score on the assistant's own task)."""
    b, t = pairs.copy.nonzero(as_tuple=True)
    return torch.stack([p[b, :, t, pairs.source[b, t]].mean(0)
                        for p in _patterns(model, pairs.clean)])


def previous_token_scores(model, pairs: Pairs) -> Tensor:
    """(L, H): each head's mean attention to the position just before, over the clean runs'
    positions after the first (padding left out): Chapter 8's previous-token score."""
    b, t = (pairs.roles >= 0).nonzero(as_tuple=True)
    b, t = b[t > 0], t[t > 0]
    return torch.stack([p[b, :, t, t - 1].mean(0) for p in _patterns(model, pairs.clean)])


def lens_top1(model, pairs: Pairs, run: str = "clean") -> Tensor:
    """(L,): the share of A's characters in the answer that are the top prediction of the logit
    lens after each block, on the clean conversations or (``run="corrupted"``, the control,
    where the prompt holds another line) on the corrupted ones."""
    if run not in ("clean", "corrupted"):
        raise ValueError(f"run={run!r}: choose 'clean' or 'corrupted' (the control)")
    lens = interp.logit_lens(model, getattr(pairs, run))  # (L, B, T, V)
    hits = lens.argmax(-1) == pairs.target  # (L, B, T)
    return hits[:, pairs.copy].float().mean(-1)


def _ranks(name: str, x: Tensor) -> Tensor:
    """Each value's rank from 0, tied values sharing the mean of the ranks they span."""
    x = x.flatten()
    if x.isnan().any():
        raise ValueError(f"rank_correlation: {name} holds nan, which has no rank "
                         f"({x.tolist()!r:.40}): rank finite values")
    if (x == x[:1]).all():
        raise ValueError(f"rank_correlation: {name} is constant ({x.tolist()!r:.40}): "
                         "its ranks are all tied, so the correlation is undefined (0 / 0); "
                         "rank values that differ")
    below, tied = (x[None] < x[:, None]).sum(1), (x[None] == x[:, None]).sum(1)  # (n,) each
    return below + (tied - 1) / 2


def rank_correlation(a: Tensor, b: Tensor) -> float:
    """Spearman's rank correlation of two equally shaped tensors: the Pearson correlation of
    their ranks, ties ranked by their mean rank (as ``scipy.stats.spearmanr``)."""
    if not (isinstance(a, Tensor) and isinstance(b, Tensor) and a.shape == b.shape):
        raise ValueError(f"rank_correlation: a and b must be tensors of one shape, got "
                         f"{getattr(a, 'shape', type(a).__name__)} and "
                         f"{getattr(b, 'shape', type(b).__name__)}: one value per head in "
                         "each")
    ra, rb = _ranks("a", a), _ranks("b", b)
    return float(torch.corrcoef(torch.stack([ra, rb]))[0, 1])


def two(x: float) -> str:
    """``x`` with two decimals, never ``-0.00``."""
    text = f"{float(x):.2f}"
    return "0.00" if text == "-0.00" else text


def top_heads(values: Tensor, k: int = 3, largest: bool = True) -> str:
    """The ``k`` largest (or, ``largest=False``, smallest) heads of an (L, H) tensor, as
    ``"L3H1 0.51, ..."``."""
    H = values.shape[1]
    order = values.flatten().argsort(descending=largest)[:k].tolist()
    return ", ".join(f"L{i // H}H{i % H} {two(values.flatten()[i])}" for i in order)


def patching_figure(shares: dict[int, Tensor], scores: dict[int, Tensor]):
    """One panel per seed: each head's induction score against its patching share, the three
    largest shares labelled where no label covers another, a point or the frame
    (``label_points``)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(shares), 1, figsize=(5.2, 2.6 * len(shares)), sharex=True)
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
