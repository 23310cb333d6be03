"""Chapter 13 — looking inside Chapter 12's assistant: its fine-tuned models (cached), the "Repeat:"
clean/corrupted pairs, the copy heads by attention and by activation patching, and their
bootstraps over the pairs (the chapter's sentences and lessons are in ``inside_prose`` and
``patching_prose``, its figure in ``inside_figure``).

Chapter 12 fine-tunes the character model on the play's instructions, one run per seed, and keeps
the runs beside the book's models (``assistant_runs.sft_run``): this chapter reads them in a second.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .. import ablation, interp, patching
from ..chat import ChatTokenizer
from ..utils import check_int
from .assistant import STYLES, Item


@dataclass
class Pairs:
    """Clean and corrupted "Repeat:" conversations (B, T) of token ids, aligned position
    by position: the clean prompt holds line A, the corrupted one line B of as many tokens
    as A, and both end with the courteous answer A teacher-forced. ``target`` (B, T) is the
    next token; ``copy`` marks the positions whose next token is a token of A in the
    answer; ``source`` (B, T) is, at those positions, where the prompt holds that token (the
    place an induction head looks); ``opening`` marks the positions whose next token is a
    token of the courteous opening, which no line changes. ``roles`` (B, T) numbers each
    position by what it is, the same in every row and in both runs (the prompt's k-th
    token, the line's k-th, the answer's k-th, ...), -1 for padding: what mean ablation
    averages over (``ablation.ablate_heads``)."""

    clean: Tensor
    corrupted: Tensor
    target: Tensor
    copy: Tensor
    source: Tensor
    opening: Tensor
    roles: Tensor


def _roles(length: int, prompt_at: int, answer_at: int, n: int) -> list[tuple[str, int]]:
    """Each position of a conversation of ``length`` tokens as (part, offset in the part): the
    line of ``n`` tokens starts at ``prompt_at`` in the prompt and ``answer_at`` in the
    answer."""
    starts = (("before", 0), ("line", prompt_at), ("turn", prompt_at + n), ("answer", answer_at),
              ("end", answer_at + n))
    return [next((part, t - at) for part, at in reversed(starts) if t >= at)
            for t in range(length)]


def _check_split(tok: ChatTokenizer, row: int, line: str, head: str) -> None:
    """A ValueError unless ``head + line`` encodes as ``head``'s tokens then ``line``'s: the
    rule that puts a line's k-th token at a known position of both runs."""
    if tok.encode(head + line) != tok.encode(head) + tok.encode(line):
        raise ValueError(
            f"repeat_pairs: pair {row}, line {line!r}: {head + line!r} does not encode as "
            f"the tokens of {head!r} then the line's own. The rule: a line is the same "
            "tokens wherever it stands, after the prompt's task and after the answer's "
            "opening, so that the clean and corrupted rows line up token by token and the "
            "answer's k-th token has its copy at a known place in the prompt. This "
            "tokenizer merges a token across the boundary (GPT-2's BPE joins the space "
            "to the next word): use one whose tokens stop where a line starts, such as "
            "Chapter 12's characters")


def repeat_pairs(items: list[Item], tok: ChatTokenizer, n: int) -> Pairs:
    """``n`` pairs of held-out "Repeat" lines of the same length in tokens, each line used
    once, taken length by length in the order the lengths first occur in ``items`` (all the
    pairs of the first length, then of the second, ...): a few lengths, not all of them
    (``inside_prose.lengths_text`` says which). Positions are counted in ``tok``'s tokens;
    a tokenizer whose tokens cross the start of a line is refused (``_check_split``)."""
    n = check_int("repeat_pairs", "n", n, minimum=1)
    opening = STYLES["courteous"]
    by_length: dict[int, list[Item]] = {}
    for item in items:
        if item.task == "Repeat":
            by_length.setdefault(len(tok.encode(item.line)), []).append(item)
    chosen = [pair for group in by_length.values() for pair in zip(group[::2], group[1::2])]
    chosen = chosen[:n]
    if len(chosen) < n:
        raise ValueError(f"only {len(chosen)} pairs of equal-length Repeat lines among "
                         f"{len(items)} items, {n} asked: pass more held-out items or a "
                         "smaller n")
    rows = {"clean": [], "corrupted": [], "copy": [], "source": [], "opening": [], "roles": []}
    numbers: dict[tuple[str, int], int] = {}
    for row, (a, b) in enumerate(chosen):
        for item in (a, b):
            _check_split(tok, row, item.line, item.prompt[:-len(item.line)])
        _check_split(tok, row, a.line, opening)
        answer = [{"role": "assistant", "content": opening + a.answer}]
        ids, _ = tok.render(a.messages() + answer)
        bad, _ = tok.render(b.messages() + answer)
        size = len(tok.encode(a.line))  # B's too: the lines were grouped by it
        prompt_at = len(tok.render(a.messages())[0]) - size - 1  # the line's first token
        answer_at = len(ids) - size - 1  # A's first token in the answer (before <|end|>)
        said_at = answer_at - len(tok.encode(opening))  # the opening's first token
        copy = [answer_at - 1 <= t < len(ids) - 2 for t in range(len(ids))]
        source = [prompt_at + t - (answer_at - 1) if c else 0 for t, c in enumerate(copy)]
        said = [said_at - 1 <= t < answer_at - 1 for t in range(len(ids))]
        roles = [numbers.setdefault(role, len(numbers))
                 for role in _roles(len(ids), prompt_at, answer_at, size)]
        for key, value in zip(rows, (ids, bad, copy, source, said, roles)):
            rows[key].append(value)
    T = max(len(r) for r in rows["clean"])
    pad = {"clean": tok.pad_id, "corrupted": tok.pad_id, "copy": False, "source": 0,
           "opening": False, "roles": ablation.PAD_ROLE}
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


def _copy_positions(pairs: Pairs, judge: str) -> tuple[Tensor, Tensor]:
    """The (row, position) indices where ``pairs.copy`` holds, or a ValueError."""
    if not pairs.copy.any():
        raise ValueError(f"{judge}: pairs.copy marks no position, so there is no character "
                         "to copy and the mean over them is 0 / 0: pass pairs made by "
                         "repeat_pairs, whose copy mask covers each answer's line")
    return pairs.copy.nonzero(as_tuple=True)


def _induction_sums(model, pairs: Pairs) -> Tensor:
    """(L, H, B): each head's attention from the answer's position before character k of A
    to character k of A in the prompt, summed over each row's copied characters."""
    b, t = _copy_positions(pairs, "induction_scores")
    B = pairs.clean.shape[0]
    return torch.stack([torch.zeros(p.shape[1], B).index_add_(
        1, b, p[b, :, t, pairs.source[b, t]].T) for p in _patterns(model, pairs.clean)])


def induction_scores(model, pairs: Pairs) -> Tensor:
    """(L, H): each head's mean attention, from the answer's position before character k of A, to
    character k of A in the prompt (Chapter 8's induction score on the assistant's own task)."""
    return _induction_sums(model, pairs).sum(-1) / pairs.copy.sum()


def bootstrap_rankings(model, pairs: Pairs, n: int = 1000, seed: int = 0) -> Tensor:
    """(n,): Spearman's rank correlation between the heads' denoising shares of the copy
    (``patching.bootstrap_shares``) and their induction scores, both recomputed on the same
    ``n`` resamples of the pairs (``patching.bootstrap_rows``): its spread is the
    correlation's error over the choice of pairs."""
    L, H = len(model.blocks), model.blocks[0].attn.n_heads
    heads = [[(l, h)] for l in range(L) for h in range(H)]
    shares = patching.bootstrap_shares(model, pairs.clean, pairs.corrupted, pairs.target,
                                       pairs.copy, heads, n=n, seed=seed)  # (n, L H)
    rows = patching.bootstrap_rows(len(pairs.clean), n, seed)  # the same rows: (n, B)
    sums, counts = _induction_sums(model, pairs), pairs.copy.sum(-1)  # (L, H, B), (B,)
    scores = (sums[..., rows].sum(-1) / counts[rows].sum(-1)).flatten(0, 1).T  # (n, L H)
    return torch.tensor([rank_correlation(a, b) for a, b in zip(shares, scores)])


def resampling_excess(model, pairs: Pairs, n: int = 1000, seed: int = 0) -> Tensor:
    """(n, L, H): how much more each head costs the copied line (nats a character) resampled
    from the corrupted run than the larger of zeroing it and mean-ablating it by role,
    recomputed on ``n`` resamples of the pairs (``patching.bootstrap_rows``); the role means
    and the resampled outputs are those of all the pairs, only the rows averaged change."""
    rows = patching.bootstrap_rows(len(pairs.clean), n, seed)  # (n, B)
    count = pairs.copy.sum(-1)[rows].sum(-1)  # (n,)

    def pooled(logits: Tensor) -> Tensor:  # (n,): the metric on each resample
        sums = patching.row_logprobs(logits, pairs.target, pairs.copy)  # (B,)
        return sums[rows].sum(-1) / count
    before = pooled(interp.run_with_hooks(model, pairs.clean)[0])
    how_to = {"zero": {}, "mean": {"roles": pairs.roles},
              "resample": {"reference": pairs.corrupted}}
    L, H = len(model.blocks), model.blocks[0].attn.n_heads
    cost = {how: torch.stack([torch.stack([
        before - pooled(ablation.ablate_heads(model, pairs.clean, [(l, h)], how, **given))
        for h in range(H)], -1) for l in range(L)], -2) for how, given in how_to.items()}
    return cost["resample"] - torch.maximum(cost["mean"], cost["zero"])


def repeat_lengths(items: list[Item], tok: ChatTokenizer) -> list[int]:
    """The length in tokens of each "Repeat" line of ``items``."""
    return [len(tok.encode(item.line)) for item in items if item.task == "Repeat"]


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
    _copy_positions(pairs, "lens_top1")
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


def listed(values) -> str:
    """``"0.39, 0.40, 0.40"``: each value with two decimals."""
    return ", ".join(two(v) for v in values)


def head_name(i: int, H: int) -> str:
    """Head ``i`` of a flattened (L, H) tensor as ``"L{layer}H{head}"``."""
    return f"L{i // H}H{i % H}"


def top_heads(values: Tensor, k: int = 3, largest: bool = True) -> str:
    """The ``k`` largest (or, ``largest=False``, smallest) heads of an (L, H) tensor, as
    ``"L3H1 0.51, ..."``."""
    if not isinstance(values, Tensor) or values.dim() != 2 or values.numel() == 0:
        got = tuple(values.shape) if isinstance(values, Tensor) else type(values).__name__
        raise ValueError(f"top_heads: values has shape {got}: pass one value per head, an "
                         "(L, H) tensor")
    k = check_int("top_heads", "k", k, minimum=1)
    H = values.shape[1]
    order = values.flatten().argsort(descending=largest)[:k].tolist()
    return ", ".join(f"{head_name(i, H)} {two(values.flatten()[i])}" for i in order)
