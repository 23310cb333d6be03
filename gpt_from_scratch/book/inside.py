"""Chapter 13 — looking inside Chapter 12's assistant: its fine-tuned models (cached), the "Repeat:"
clean/corrupted pairs, the copy heads by attention and by activation patching, and the lessons.

Chapter 12 fine-tunes the character model on the play's instructions, one run per seed, and keeps
the runs beside the book's models (``assistant_runs.sft_run``): this chapter reads them in a second.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .. import interp
from ..chat import ChatTokenizer
from ..utils import check_int
from .assistant import STYLES, Item
from .lessons import Lesson, lesson


@dataclass
class Pairs:
    """Clean and corrupted "Repeat:" conversations (B, T), aligned position by position: the clean
    prompt holds line A, the corrupted one line B of A's length, and both end with the courteous
    answer A teacher-forced. ``target`` (B, T) is the next token; ``copy`` marks the positions whose
    next token is a character of A in the answer; ``source`` (B, T) is, at those positions, where
    the prompt holds that character (the place an induction head looks); ``opening`` marks the
    positions whose next token is a character of the courteous opening, which no line changes."""

    clean: Tensor
    corrupted: Tensor
    target: Tensor
    copy: Tensor
    source: Tensor
    opening: Tensor


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
    rows = {"clean": [], "corrupted": [], "copy": [], "source": [], "opening": []}
    for a, b in chosen:
        answer = [{"role": "assistant", "content": opening + a.answer}]
        ids, _ = tok.render(a.messages() + answer)
        bad, _ = tok.render(b.messages() + answer)
        prompt_at = len(tok.render(a.messages())[0]) - len(a.line) - 1  # the line's first character
        answer_at = len(ids) - len(a.line) - 1  # A's first character in the answer (before <|end|>)
        copy = [answer_at - 1 <= t < len(ids) - 2 for t in range(len(ids))]
        source = [prompt_at + t - (answer_at - 1) if c else 0 for t, c in enumerate(copy)]
        said = [answer_at - len(opening) - 1 <= t < answer_at - 1 for t in range(len(ids))]
        for key, row in zip(rows, (ids, bad, copy, source, said)):
            rows[key].append(row)
    T = max(len(r) for r in rows["clean"])
    pad = {"clean": tok.pad_id, "corrupted": tok.pad_id, "copy": False, "source": 0, "opening": False}
    t = {k: torch.tensor([r + [pad[k]] * (T - len(r)) for r in v]) for k, v in rows.items()}
    return Pairs(t["clean"], t["corrupted"], t["clean"].roll(-1, 1), t["copy"], t["source"], t["opening"])


def copy_logprob(pairs: Pairs, where: str = "copy"):
    """The metric: the mean log-probability (nats) of A's characters in the answer (``where="copy"``),
    or of the opening's characters (``"opening"``)."""
    if where not in ("copy", "opening"):
        raise ValueError(f"where={where!r}: choose 'copy' (the line's characters) or 'opening'")
    mask = pairs.copy if where == "copy" else pairs.opening
    return lambda logits: interp.mean_logprob(logits, pairs.target, mask)


def induction_scores(model, pairs: Pairs) -> Tensor:
    """(L, H): each head's mean attention, from the answer's position before character k of A, to
    character k of A in the prompt (Chapter 8's induction score on the assistant's own task)."""
    L = len(model.blocks)
    _, cache = interp.run_with_hooks(model, pairs.clean, read=[f"blocks.{l}.attn.pattern" for l in range(L)])
    b, t = pairs.copy.nonzero(as_tuple=True)
    return torch.stack([cache[f"blocks.{l}.attn.pattern"][b, :, t, pairs.source[b, t]].mean(0)
                        for l in range(L)])


def lens_top1(model, pairs: Pairs) -> Tensor:
    """(L,): the share of A's characters that are the top prediction of the logit lens after each block."""
    lens = interp.logit_lens(model, pairs.clean)  # (L, B, T, V)
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


RANK_BAR = 0.5  # "the rankings agree": Spearman's rho over the heads above 0.5 in every seed


def rankings_lesson(rhos: list[float]) -> Lesson:
    low = min(rhos)
    spread = ", ".join(f"{r:.2f}" for r in rhos)
    return lesson("the patching and attention rankings agree", low - RANK_BAR, "rho",
                  f"The two rankings of the heads agree in every seed: Spearman's rank correlation "
                  f"is {spread} (above {RANK_BAR} in each).",
                  f"Here the two rankings of the heads agree less than the bar asks: Spearman's rank "
                  f"correlation is {spread}, at least one at or below {RANK_BAR}. On a few heads and "
                  f"one small batch of pairs the ranks of the weak heads move with small changes.")


def shares_lesson(sums: list[float]) -> Lesson:
    spread = ", ".join(f"{s:.2f}" for s in sums)
    return lesson("the single-head shares sum above one", min(sums) - 1.0, "share",
                  f"The single-head shares add up to {spread}: more than the whole gap in every seed.",
                  f"The single-head shares add up to {spread}: not above one in every seed here.")


def lens_lesson(first: list[float], last: list[float]) -> Lesson:
    rises = [b - a for a, b in zip(first, last)]
    pairs = ", ".join(f"{a:.0%} → {b:.0%}" for a, b in zip(first, last))
    return lesson("the lens's top-1 share rises with depth", min(rises), "share",
                  f"From the first block to the last, the lens's top-1 share rises in every seed "
                  f"({pairs}).",
                  f"The lens's top-1 share does not rise from the first block to the last in every "
                  f"seed here ({pairs}).")


def top_heads(values: Tensor, k: int = 3, largest: bool = True) -> str:
    """The ``k`` largest (or, ``largest=False``, smallest) heads of an (L, H) tensor, as
    ``"L3H1 0.51, ..."``."""
    H = values.shape[1]
    order = values.flatten().argsort(descending=largest)[:k].tolist()
    return ", ".join(f"L{i // H}H{i % H} {float(values.flatten()[i]):.2f}" for i in order)


OPENING_BAR = 0.1  # nats a character: an ablation that costs the opening more has damaged the model


def ablation_text(copy: dict[str, Tensor], opening: dict[str, Tensor]) -> str:
    """What each ablation of zeroing's worst head costs (nats a character, (L, H) tensors per way)
    on the copied line and on the opening, which no line changes."""
    H = copy["zero"].shape[1]
    worst = int(copy["zero"].flatten().argmax())
    cost = {how: (float(copy[how].flatten()[worst]), float(opening[how].flatten()[worst])) for how in copy}
    ways = "; ".join(f"{how} ablation {c:.2f} and {o:.2f}" for how, (c, o) in cost.items())
    head = (f"The head whose zeroing costs the copy most is L{worst // H}H{worst % H}: in nats a "
            f"character on the copied line and on the opening, {ways}. ")
    broke = [how for how, (_, o) in cost.items() if o > OPENING_BAR]
    kept = [how for how in cost if how not in broke]
    if not broke:
        return head + f"None of the three costs the opening more than {OPENING_BAR} nats a character."
    return head + (f"The opening, which depends on no line, loses more than {OPENING_BAR} nats a "
                   f"character under {' and '.join(broke)} ablation"
                   + (f", not under {' and '.join(kept)}" if kept else "") +
                   ": a large cost there measures damage from an output the next layers never see at "
                   "that place, not the head's part in the copy.")


def patching_figure(shares: dict[int, Tensor], scores: dict[int, Tensor]):
    """One panel per seed: each head's induction score against its patching share."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(shares), 1, figsize=(5.2, 2.6 * len(shares)), sharex=True)
    for ax, seed in zip(axes, shares):
        x, y = scores[seed].flatten(), shares[seed].flatten()
        ax.scatter(x, y, s=18)
        H = scores[seed].shape[1]
        for i in y.argsort(descending=True)[:3].tolist():
            ax.annotate(f"L{i // H}H{i % H}", (float(x[i]), float(y[i])), fontsize=10,
                        xytext=(3, 3), textcoords="offset points")
        ax.set_title(f"seed {seed}")
        ax.set_ylabel("share restored")
    axes[-1].set_xlabel("induction score")
    fig.tight_layout()
    return fig


def timing_text(seconds: float, n_models: int, n_heads: int) -> str:
    return (f"The lens, the patching and the induction scores took {seconds:.1f} s of CPU time "
            f"for each of the {n_models} models ({n_heads} patched runs each).")
