"""Chapter 11 — measuring a language model: multiple choice by likelihood, and bits per byte.

A multiple-choice item is a context and a few continuations, one of them right. A language model
answers by likelihood: each continuation's log-probability after the context, and the highest wins.
Three rules circulate for turning log-probabilities into a pick:

- ``acc``: the sum of the continuation's token log-probabilities (lm-evaluation-harness,
  Gao et al.);
- ``acc_norm``: that sum divided by the continuation's length in *characters* (the harness's
  ``acc_norm``: ``lls / len(choice)``, the choice without its leading delimiter);
- ``acc_token``: the mean log-probability per *token* (build-nanogpt's HellaSwag rule, which it
  also calls ``acc_norm``), a rule that depends on the tokenizer.

Requests are encoded as the harness encodes them (``encode_pair``), so on the same weights and items
``score_choices`` gives the harness's numbers (``tests/test_evaluate.py`` runs the harness).

Bits per byte (``bits_per_byte``) puts models with different tokenizers on one scale: the summed
loss in bits over the UTF-8 bytes of the text it predicted. ``text_kl`` (Chapter 16) says
how far changed copies of a model (quantized) predict from it, on the same windows.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .finetune import hidden_states
from .model import GPT
from .utils import check_int, eval_mode

Encode = Callable[[str], list[int]]


@dataclass
class MultipleChoice:
    """One item: ``context``, the ``choices`` that may follow it, and the index of the right one."""

    context: str
    choices: list[str]
    gold: int


def encode_pair(encode: Encode, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """Token ids of ``context`` and of ``continuation`` after it, as lm-evaluation-harness
    makes them.

    Trailing spaces of the context move to the continuation, the two are encoded *together*, and the
    continuation is what follows the context's own ids: with BPE, ``encode(a + b)`` need not be
    ``encode(a) + encode(b)``, and the pair must score the text the model would read.
    """
    if not context.rstrip(" "):  # only spaces: they would all move to the continuation
        raise ValueError(f"encode_pair: the context is empty or only spaces ({context!r}): "
                         "give every item a context, or start it with the model's "
                         "document token (the harness uses <|endoftext|>)")
    n_spaces = len(context) - len(context.rstrip(" "))
    if n_spaces:
        context, continuation = context[:-n_spaces], context[-n_spaces:] + continuation
    whole, ctx = encode(context + continuation), encode(context)
    if not continuation or len(whole) <= len(ctx):
        raise ValueError(f"continuation {continuation!r} encodes to no token after context "
                         f"{context[-30:]!r}: every choice needs at least one character")
    return ctx, whole[len(ctx):]


def _context_length(function: str, model: nn.Module) -> int:
    """``model.config.context_length``, or a TypeError saying which models can be scored."""
    length = getattr(getattr(model, "config", None), "context_length", None)
    if not isinstance(length, int):
        raise TypeError(f"{function}: model is a {type(model).__name__} without "
                        "config.context_length: pass a language model (a GPT, a Llama, a "
                        "BigramTable) whose forward(idx) returns (logits, loss)")
    return length


def _next_token_logprobs(model: nn.Module, idx: Tensor, rows: Tensor, positions: Tensor) -> Tensor:
    """(K, V) log-probabilities of the next token after ``idx[rows, positions]`` (idx is (B, T)).

    A ``GPT`` applies its output layer at those K positions only: with GPT-2's 50,257 tokens the
    output layer is most of the work, and a choice is a few of a window's positions. Any other
    model (a bigram table) gives all its logits."""
    device = next(itertools.chain(model.parameters(), model.buffers())).device
    idx, rows, positions = idx.to(device), rows.to(device), positions.to(device)
    if isinstance(model, GPT):
        logits = model.lm_head(hidden_states(model, idx)[rows, positions])  # (K, V)
    else:
        logits = model(idx)[0][rows, positions]  # (K, V)
    return F.log_softmax(logits.float(), dim=-1).cpu()


@torch.no_grad()
def continuation_logprobs(model: nn.Module, pairs: Sequence[tuple[list[int], list[int]]],
                          batch_size: int = 64, start: Sequence[int] = ()) -> list[Tensor]:
    """Each continuation token's log-probability after its context: one (n_tokens,) tensor per pair.

    A pair longer than the model's context keeps its last ``context_length + 1`` tokens (the
    harness's left truncation); ``start`` (a model's document token, Chapter 8's offline model)
    is read before every pair and kept through truncation. Pairs are padded on the right to the
    batch's longest: causal attention keeps the padding from changing what comes before it.
    """
    check_int("continuation_logprobs", "batch_size", batch_size, minimum=1)
    start = list(start)
    keep = _context_length("continuation_logprobs", model) + 1 - len(start)  # pair tokens
    if keep < 2:
        raise ValueError(f"continuation_logprobs: start has {len(start)} tokens and the "
                         f"model reads {keep + len(start) - 1}: no continuation fits after "
                         "them; pass at most one or two start tokens (a document token)")
    empty = [n for n, (_, cont) in enumerate(pairs) if len(cont) == 0]
    if empty:
        raise ValueError(f"continuation_logprobs: pair {empty[0]} has no continuation "
                         "token: every pair needs at least one (make them with "
                         "encode_pair)")
    out: list[Tensor] = []
    with eval_mode(model):
        for first in range(0, len(pairs), batch_size):
            batch = pairs[first: first + batch_size]
            if any(len(cont) >= keep for _, cont in batch):
                raise ValueError(f"a continuation of {max(len(c) for _, c in batch)} tokens does "
                                 f"not fit the model's context of {keep - 1} after its start "
                                 "tokens: shorten the choices")
            seqs = [start + (ctx + cont)[-keep:] for ctx, cont in batch]
            idx = torch.zeros(len(seqs), max(map(len, seqs)) - 1, dtype=torch.long)  # (B, T)
            for b, seq in enumerate(seqs):
                idx[b, : len(seq) - 1] = torch.tensor(seq[:-1])  # right padding with id 0
            # the last n inputs of a sequence predict its continuation's n tokens
            rows = torch.cat([torch.full((len(c),), b) for b, (_, c) in enumerate(batch)])
            positions = torch.cat([torch.arange(len(s) - 1 - len(c), len(s) - 1)
                                   for s, (_, c) in zip(seqs, batch)])
            targets = torch.cat([torch.tensor(c) for _, c in batch])  # (K,)
            logp = _next_token_logprobs(model, idx, rows, positions)  # (K, V)
            out += logp.gather(1, targets[:, None])[:, 0].split([len(c) for _, c in batch])
    return list(out)


@dataclass
class ChoiceScores:
    """Log-likelihoods of every choice of N items with C choices, and what normalises them."""

    loglik: Tensor  # (N, C) summed log-probabilities of each choice, in nats
    n_tokens: Tensor  # (N, C) tokens of each choice (with its delimiter)
    n_chars: Tensor  # (N, C) characters of each choice (without its delimiter)
    gold: Tensor  # (N,) the right choice

    def picks(self, rule: str) -> Tensor:
        """(N,) the chosen index under ``rule``: "acc", "acc_norm" or "acc_token" (the first
        on ties)."""
        scores = {"acc": self.loglik, "acc_norm": self.loglik / self.n_chars,
                  "acc_token": self.loglik / self.n_tokens}
        if rule not in scores:
            raise ValueError(f"unknown rule {rule!r}: use one of {', '.join(scores)}")
        return scores[rule].argmax(dim=1)

    def correct(self, rule: str) -> Tensor:
        """(N,) 1.0 where ``rule`` picks the right choice."""
        return (self.picks(rule) == self.gold).float()

    def accuracy(self, rule: str) -> float:
        return self.correct(rule).mean().item()


def score_choices(model: nn.Module, encode: Encode, items: Sequence[MultipleChoice],
                  delimiter: str = " ", batch_size: int = 64,
                  start: Sequence[int] = ()) -> ChoiceScores:
    """Score every choice of ``items`` as the continuation ``delimiter + choice`` of its context
    (``start``: see ``continuation_logprobs``)."""
    if not items:
        raise ValueError("no items to score: pass at least one MultipleChoice")
    wrong = [n for n, it in enumerate(items) if not isinstance(it, MultipleChoice)]
    if wrong:
        raise TypeError(f"score_choices: item {wrong[0]} is a "
                        f"{type(items[wrong[0]]).__name__}: pass MultipleChoice(context, "
                        "choices, gold) items")
    C = len(items[0].choices)
    for i, item in enumerate(items):
        if len(item.choices) != C or not 0 <= item.gold < C:
            raise ValueError(f"item {i} has {len(item.choices)} choices and gold {item.gold}; "
                             f"every item needs {C} choices (as item 0) and a gold index "
                             f"in [0, {C})")
    pairs = [encode_pair(encode, it.context, delimiter + ch) for it in items for ch in it.choices]
    logps = continuation_logprobs(model, pairs, batch_size, start)
    N = len(items)
    loglik = torch.stack([lp.sum() for lp in logps]).view(N, C).double()
    if not loglik.isfinite().all():  # NaN wins every argmax: a diverged model scored 100%
        i, c = (~loglik.isfinite()).nonzero()[0].tolist()
        raise FloatingPointError(f"score_choices: item {i}, choice {c} has log-likelihood "
                                 f"{loglik[i, c].item()}: the model's outputs are not "
                                 "finite (its training diverged?); score a model whose "
                                 "weights are finite")
    return ChoiceScores(
        loglik=loglik,
        n_tokens=torch.tensor([len(c) for _, c in pairs], dtype=torch.float64).view(N, C),
        n_chars=torch.tensor([[len(ch) for ch in it.choices] for it in items], dtype=torch.float64),
        gold=torch.tensor([it.gold for it in items]))


def _text_ids(function: str, ids) -> Tensor:
    ids = torch.as_tensor(np.asarray(ids, dtype=np.int64))
    if ids.dim() != 1 or len(ids) < 2:
        raise ValueError(f"{function}: ids of shape {tuple(ids.shape)}: pass one sequence "
                         "of at least 2 token ids (the first is read, the others "
                         "predicted)")
    return ids


def _text_windows(ids: Tensor, T: int, batch_size: int):
    """``ids`` cut into windows of ``T + 1`` tokens that overlap by one, ``batch_size`` at a
    time: (B, T + 1) tensors, the last, shorter window in a batch of its own."""
    for begin in range(0, len(ids) - 1, T * batch_size):  # batch_size windows per forward
        chunk = ids[begin: begin + T * batch_size + 1]
        windows = [chunk[i: i + T + 1] for i in range(0, len(chunk) - 1, T)]
        for length in sorted({len(w) for w in windows}, reverse=True):
            yield torch.stack([x for x in windows if len(x) == length])  # (B, T + 1)


def _device(model: nn.Module) -> torch.device:
    return next(itertools.chain(model.parameters(), model.buffers())).device


@torch.no_grad()
def summed_nats(model: nn.Module, ids: np.ndarray | Tensor, batch_size: int = 16,
                start: Sequence[int] = ()) -> tuple[float, Tensor]:
    """The summed next-token loss (nats) over ``ids`` cut into windows of the model's context.

    Returns ``(nats, targets)``: the sum over every predicted token, and those tokens (the first
    token of each window is read, never predicted; the last, shorter window is scored too).
    ``start`` is read before every window (a document token), never predicted.
    """
    batch_size = check_int("summed_nats", "batch_size", batch_size, minimum=1)
    ids = _text_ids("summed_nats", ids)
    first = torch.tensor(list(start), dtype=torch.long)  # (S,)
    T = _context_length("summed_nats", model) - len(first)  # the text's tokens per window
    if T < 1:
        raise ValueError(f"summed_nats: start has {len(first)} tokens and the model reads "
                         f"{T + len(first)}: no text fits after them; pass a shorter start")
    device, total, predicted = _device(model), 0.0, []
    with eval_mode(model):
        for w in _text_windows(ids, T, batch_size):  # (B, T + 1)
            idx = torch.cat([first.expand(len(w), -1), w[:, :-1]], dim=1)  # (B, S + T)
            logits = model(idx.to(device))[0][:, len(first):].float().cpu()  # (B, T, V)
            total += F.cross_entropy(logits.flatten(0, 1), w[:, 1:].flatten(),
                                     reduction="sum").item()
            predicted.append(w[:, 1:].flatten())
    return total, torch.cat(predicted)


def _log_law(model: nn.Module, idx: Tensor) -> Tensor:
    return F.log_softmax(model(idx.to(_device(model)))[0].double().cpu(), dim=-1)


@torch.no_grad()
def text_kl(reference: nn.Module, models: Mapping[str, nn.Module], ids: np.ndarray | Tensor,
            batch_size: int = 16) -> dict[str, float]:
    """Chapter 16 — how far each of ``models``' next-token laws lies from ``reference``'s on
    ``ids``: for each name, the mean over every token ``summed_nats`` predicts of
    KL(reference || model) in nats, computed in float64 (a token the reference rules out,
    logit -inf, adds 0). Unlike a change of the loss it is never negative and has no
    first-order part: a small change of the weights moves it by about the square of its
    effect, whichever way the loss happens to move."""
    batch_size = check_int("text_kl", "batch_size", batch_size, minimum=1)
    ids = _text_ids("text_kl", ids)
    if not isinstance(models, Mapping) or not models:
        raise TypeError(f"text_kl: models is a {type(models).__name__}: pass a dict of "
                        "names to models, such as {'int8': quantize_model(model)}")
    T = _context_length("text_kl", reference)
    for name, model in models.items():
        if _context_length("text_kl", model) != T:
            raise ValueError(f"text_kl: the reference reads {T} tokens and {name!r} "
                             f"{_context_length('text_kl', model)}: compare models of one "
                             "context length (a model and its quantized copies)")
    total, count = dict.fromkeys(models, 0.0), 0
    with contextlib.ExitStack() as stack:
        for model in (reference, *models.values()):
            stack.enter_context(eval_mode(model))
        for w in _text_windows(ids, T, batch_size):  # (B, T + 1)
            idx = w[:, :-1]  # (B, T)
            p = _log_law(reference, idx)  # (B, T, V)
            for name, model in models.items():
                q = _log_law(model, idx)
                if p.shape != q.shape:
                    raise ValueError(f"text_kl: the reference gives logits "
                                     f"{tuple(p.shape)} and {name!r} {tuple(q.shape)}: "
                                     "compare models of one vocabulary")
                terms = torch.where(p == -math.inf, 0.0, p.exp() * (p - q))  # (B, T, V)
                total[name] += terms.sum().item()
            count += idx.numel()
    return {name: value / count for name, value in total.items()}


def bits_per_byte(nats: float, n_bytes: int) -> float:
    """Summed loss in nats over ``n_bytes`` UTF-8 bytes of predicted text, as bits per byte."""
    if n_bytes <= 0:
        raise ValueError(f"n_bytes = {n_bytes}: bits per byte needs the bytes the loss was "
                         "summed over (a positive count)")
    if not math.isfinite(nats):
        raise ValueError(f"bits_per_byte: nats={nats!r} must be a finite summed loss: the "
                         "model's outputs are not finite (its training diverged?)")
    return nats / (math.log(2) * n_bytes)


def model_bits_per_byte(model: nn.Module, ids, token_bytes: Callable[[int], int],
                        batch_size: int = 16, start: Sequence[int] = ()) -> float:
    """``model``'s bits per byte on ``ids``: ``token_bytes(id)`` is one token's length in bytes."""
    nats, targets = summed_nats(model, ids, batch_size, start)
    sizes = {t: token_bytes(t) for t in torch.unique(targets).tolist()}
    return bits_per_byte(nats, sum(sizes[t] for t in targets.tolist()))
