"""Chapter 13's Colab track on GPT-2 small: its induction heads on repeated random tokens, found
by attention and by activation patching, and the heads that name the indirect object in Wang et
al.'s task, found by patching; offline, a sentence that says what each does."""

from __future__ import annotations

import numbers
import random

import torch
from torch import Tensor

from .. import interp, patching
from ..hf_weights import WeightsUnavailableError, from_pretrained
from ..tokenizer import gpt2_encoding
from ..utils import check_int
from .inside import rank_correlation, top_heads


NOT_RUN = "*Not run here*: GPT-2's weights cannot be reached. With them, this cell "


def _gpt2(model):
    """``model`` in eval mode and its name in a sentence, or GPT-2 small's weights when it
    is None; (None, name) when they cannot be reached (offline)."""
    if model is not None:
        H = model.blocks[0].attn.n_heads
        return model.eval(), f"the model given ({len(model.blocks)} layers of {H} heads)"
    try:
        return from_pretrained("gpt2").eval(), "GPT-2 small"
    except (WeightsUnavailableError, OSError):
        return None, "GPT-2 small"


def online_run(n: int = 20, half: int = 50, seed: int = 0, model=None) -> str:
    """Rows ``[<|endoftext|>, s, s]`` of ``half`` random tokens, and corrupted rows whose first ``s``
    is other tokens: each head's induction score (attention from position t of the second copy
    to the token after t's earlier copy) and its patching share of the second copy's
    log-probability. ``model`` defaults to GPT-2 small's weights."""
    n = check_int("online_run", "n", n, minimum=1)
    half = check_int("online_run", "half", half, minimum=2)  # one token: nothing to predict
    model, _ = _gpt2(model)
    if model is None:
        return (NOT_RUN + f"makes {n} sequences of {half} random tokens repeated, finds each of "
                "the 144 heads' induction score and patching share, and names the heads both "
                "rankings put first (ARENA's interpretability course lists L5H1, L5H5, L6H9, "
                "L7H2 and L7H10).")
    g = torch.Generator().manual_seed(seed)
    V, L = model.config.vocab_size, len(model.blocks)
    first, other = (torch.randint(0, V - 1, (n, half), generator=g) for _ in range(2))
    bos = torch.full((n, 1), V - 1)  # <|endoftext|> is GPT-2's last id
    clean = torch.cat([bos, first, first], 1)  # (n, 2 half + 1)
    corrupted = torch.cat([bos, other, first], 1)
    mask = torch.zeros_like(clean, dtype=torch.bool)
    mask[:, half + 1:-1] = True  # the second copy, each position predicting the next token

    def metric(logits):
        return patching.mean_logprob(logits, clean.roll(-1, 1), mask)
    shares = patching.patching_shares(model, clean, corrupted, metric)
    _, cache = interp.run_with_hooks(model, clean, read=[f"blocks.{l}.attn.pattern" for l in range(L)])
    t = torch.arange(half + 1, 2 * half + 1)  # queries in the second copy
    scores = torch.stack([cache[f"blocks.{l}.attn.pattern"][:, :, t, t - half + 1].mean((0, 2))
                          for l in range(L)])  # (L, H)
    return (f"On {n} rows of {half} random tokens repeated: the heads with the highest induction "
            f"score are {top_heads(scores, 5)}; patching picks {top_heads(shares, 5)} (shares of "
            f"the gap restored, summing to {float(shares.sum()):.2f}); Spearman's rank correlation "
            f"between the two rankings over {shares.numel()} heads is "
            f"{rank_correlation(shares, scores):.2f}.")


NAMES = ("Mary", "John", "Tom", "James", "Dan", "Sarah", "Alice", "Bob", "Paul", "Anna", "Kate",
         "Lisa")
PLACES = ("store", "park", "school", "garden", "beach", "office")
THINGS = ("drink", "book", "ball", "letter", "gift", "bag")
WANG = ("Wang et al. found name movers L9H9, L9H6 and L10H0, which copy the name, S-inhibition "
        "heads L7H3, L7H9, L8H6 and L8H10, which tell them which name to leave out, and negative "
        "name movers L10H7 and L11H10, which push against it.")
GAP_BAR = 1.0  # logits: the least clean-minus-corrupted gap worth sharing among the heads
TEMPLATE = "When {io} and {s} went to the {place}, {s2} gave a {thing} to"  # Wang et al.'s IOI


def name_prompts(n: int, seed: int = 0, encoding=None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``n`` sentences of Wang et al.'s indirect-object task, as GPT-2's token ids: ``clean``
    (B, T) names the subject twice ("When Mary and John went to the store, John gave a drink to":
    the next name is Mary, the indirect object), ``corrupted`` names the indirect object again
    ("..., Mary gave a drink to": the next name is John); and each row's two name ids (B,)."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
        raise ValueError(f"n is {n!r}, the number of sentences: pass a whole number >= 1")
    n = int(n)  # a NumPy int too
    ids = (encoding or gpt2_encoding()).encode
    g = random.Random(seed)
    rows = [(*g.sample(NAMES, 2), g.choice(PLACES), g.choice(THINGS)) for _ in range(n)]
    clean = torch.tensor([ids(TEMPLATE.format(io=a, s=b, place=p, thing=t, s2=b))
                          for a, b, p, t in rows])  # every word one token: the rows align
    corrupted = torch.tensor([ids(TEMPLATE.format(io=a, s=b, place=p, thing=t, s2=a))
                              for a, b, p, t in rows])
    io, s = (torch.tensor([ids(" " + row[k])[0] for row in rows]) for k in (0, 1))
    return clean, corrupted, io, s


def name_mover_run(n: int = 20, seed: int = 0, model=None, encoding=None) -> str:
    """Activation patching on the indirect-object task: the logit difference between the two names
    at the last position, and each head's share of the clean–corrupted gap when its clean output
    is patched into the corrupted run. ``model`` defaults to GPT-2 small's weights. A gap
    under ``GAP_BAR`` logits between the two runs is too small to share among the heads:
    the sentence says so and names none."""
    n = check_int("name_mover_run", "n", n, minimum=1)
    model, name = _gpt2(model)
    if model is None:
        return (NOT_RUN + f"patches each of the 144 heads on {n} sentences such as \"When Mary "
                "and John went to the store, John gave a drink to\" and names the heads that "
                f"restore the choice of Mary most. {WANG}")
    clean, corrupted, io, s = name_prompts(n, seed, encoding)
    rows = torch.arange(n)

    def logit_diff(logits):  # logits (B, T, V): the indirect object over the subject
        return (logits[rows, -1, io] - logits[rows, -1, s]).mean()
    with torch.no_grad():
        gap = [float(logit_diff(interp.run_with_hooks(model, x)[0])) for x in (clean, corrupted)]
    said = (f"On {n} sentences, {name} puts the indirect object {gap[0]:.2f} logits above "
            f"the subject; with the indirect object named in the subject's place, "
            f"{gap[1]:.2f}")
    if gap[0] - gap[1] < GAP_BAR:
        return (f"{said}: a gap of {gap[0] - gap[1]:.2f} logits, under {GAP_BAR:g}, too "
                f"small to share among the heads, so no head is named. {WANG}")
    shares = patching.patching_shares(model, clean, corrupted, logit_diff)
    return (f"{said}. Patched alone into that run, the heads that restore most of the gap "
            f"are {top_heads(shares, 5)}; {_against(shares)}. {WANG}")


def _against(shares: Tensor) -> str:
    """The heads (at most two) whose share is negative, or that none is."""
    n = int((shares < 0).sum())
    if n == 0:
        return f"none pushes the other way (the smallest share is {float(shares.min()):.2f})"
    return f"those that push hardest the other way are {top_heads(shares, min(n, 2), False)}"
