"""Chapter 8 — what the heads of a trained GPT attend to, measured, and the chapter's prose built from it.

One number per head (``previous_token_scores``, ``sink_scores``) against the baseline of a head that
attends evenly (``uniform_share``); GPT-2 small's figures as measured elsewhere (``GPT2_REFERENCE``), so
that a reader without the real weights sees what GPT-2 does; and the Markdown sentences Chapter 8
shows (the ``*_text`` functions), written from the numbers of whichever model ran, so that they stay
true for GPT-2 in Colab and for the offline model alike.

The offline model itself, a small GPT trained on Tiny Shakespeare with every window starting with
``<|endoftext|>`` (as GPT-2's documents do) so that an attention sink can form, is in
``gpt_from_scratch.heads_model``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

SINK_FROM = 8  # the sink score averages queries t >= 8, which have plenty of other tokens to attend to


# ----------------------------------------------------------------------------------------------------
# Head scores.


def _stacked(maps: Sequence[Tensor] | Tensor) -> Tensor:
    """``attention_maps`` output (L tensors (B, H, T, T)) -> one (L, B, H, T, T) tensor, checked."""
    A = maps if isinstance(maps, Tensor) else torch.stack(list(maps))
    if A.dim() != 5 or A.shape[-1] != A.shape[-2]:
        raise ValueError(f"expected attention maps of shape (L, B, H, T, T), got {tuple(A.shape)}: pass "
                         "model.attention_maps(idx) or torch.stack of it")
    if not torch.isfinite(A).all():
        raise ValueError("the attention maps hold NaN or infinite weights: the model's weights are broken")
    return A


def previous_token_scores(maps: Sequence[Tensor] | Tensor) -> Tensor:
    """(L, H): each head's mean weight ``A[t, t-1]`` over the batch and the queries t = 1 .. T-1."""
    return _stacked(maps).diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=(1, 3))


def sink_scores(maps: Sequence[Tensor] | Tensor, start: int = SINK_FROM) -> Tensor:
    """(L, H): each head's mean weight on position 0 over the batch and the queries t = start .. T-1."""
    A = _stacked(maps)
    if not 1 <= start < A.shape[-1]:
        raise ValueError(f"start={start} must be in 1 .. T-1 = {A.shape[-1] - 1}: the queries averaged over")
    return A[..., start:, 0].mean(dim=(1, 3))


def uniform_share(T: int, start: int = 1) -> float:
    """What a head attending evenly (1/(t+1) on each key) scores on one key: mean of 1/(t+1), t = start..T-1.

    The baseline of both scores: ``uniform_share(T)`` for the previous token, ``uniform_share(T, 8)``
    for the first one.
    """
    if not 0 <= start < T:
        raise ValueError(f"start={start} must be in 0 .. T-1 = {T - 1}")
    return (1.0 / torch.arange(start + 1, T + 1, dtype=torch.float64)).mean().item()


def best_heads(scores: Tensor, k: int = 3) -> list[tuple[int, int]]:
    """The ``k`` (layer, head) pairs with the highest scores, best first."""
    H = scores.shape[1]
    return [divmod(int(i), H) for i in scores.flatten().topk(min(k, scores.numel())).indices]


@dataclass(frozen=True)
class Parity:
    """How far our ``GPT`` is from transformers' ``GPT2LMHeadModel`` on the same tokens and weights."""

    max_logit_diff: float  # largest absolute difference of any logit
    same_argmax: bool  # the most likely next token is the same at every position
    max_attention_diff: float  # largest absolute difference of any attention weight


@torch.no_grad()
def parity(ours, theirs, idx: Tensor) -> Parity:
    """Run ``ours`` (a ``GPT``) and ``theirs`` (a ``GPT2LMHeadModel`` with eager attention) on ``idx``
    (B, T) and measure how far apart their logits and attention weights are."""
    out = theirs(idx, output_attentions=True)
    if out.attentions is None or len(out.attentions) == 0:
        raise ValueError("the transformers model returned no attention weights: load it with "
                         'attn_implementation="eager"')
    logits, _ = ours(idx)  # (B, T, V)
    attention = max((a - b).abs().max().item() for a, b in zip(ours.attention_maps(idx), out.attentions))
    return Parity(max_logit_diff=(logits - out.logits).abs().max().item(),
                  same_argmax=torch.equal(logits.argmax(-1), out.logits.argmax(-1)),
                  max_attention_diff=attention)


# ----------------------------------------------------------------------------------------------------
# GPT-2 small as measured elsewhere: openai-community/gpt2, transformers, eager attention.


@dataclass(frozen=True)
class GPT2Reference:
    """Published figures for GPT-2 small, beside which Chapter 8 puts the loaded model's."""

    source: str
    pronoun_sentence: str
    pronoun_head: tuple[int, int]  # (layer, head), counted from 0 as transformers does
    pronoun_tokens: tuple[str, ...]
    pronoun_row: tuple[float, ...]  # the last row of the pronoun head's map: where " She" looks
    previous_token_head: tuple[int, int]
    bias_sentence: str  # "... {pronoun}": She attends most to nurse, He to doctor (in the pronoun head)
    bias_targets: dict  # pronoun -> the noun it attends to most


GPT2_REFERENCE = GPT2Reference(
    source=("measured elsewhere with GPT-2 small (`openai-community/gpt2`, Hugging Face transformers, "
            "eager attention), not on this machine"),
    pronoun_sentence="The girl and the boy walked home. She",
    pronoun_head=(5, 10),
    pronoun_tokens=("The", "␣girl", "␣and", "␣the", "␣boy", "␣walked", "␣home", ".", "␣She"),
    pronoun_row=(0.2532, 0.4147, 0.0184, 0.0241, 0.0077, 0.0213, 0.0687, 0.1233, 0.0685),
    previous_token_head=(4, 11),
    bias_sentence="The doctor asked the nurse a question. {pronoun}",
    bias_targets={"She": "␣nurse", "He": "␣doctor"},
)


def compare_with_reference(row: Sequence[float], reference: Sequence[float] = GPT2_REFERENCE.pronoun_row
                           ) -> float:
    """Largest absolute difference between a recomputed attention row and the published one."""
    row, reference = torch.as_tensor(row, dtype=torch.float64), torch.as_tensor(reference, dtype=torch.float64)
    if row.shape != reference.shape:
        raise ValueError(f"the row has {row.numel()} weights, the published one {reference.numel()}: "
                         "compare the same sentence")
    return (row - reference).abs().max().item()


def agreement(difference: float, tolerance: float = 0.01) -> str:
    """'agree' or 'do not agree', for a largest difference against a tolerance."""
    return "agree" if difference <= tolerance else "do not agree"
