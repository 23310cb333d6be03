"""Chapter 16 — speculative decoding: a small draft model guesses, the big target model
checks, and the output is exactly what the target alone would have given.

One round (Leviathan, Kalman & Matias 2023, Algorithm 1; Chen et al. 2023): the draft
proposes γ tokens x_1 .. x_γ one at a time, drawn from its distributions q_1 .. q_γ; the
target scores the text and all γ guesses in ONE forward pass, which gives its distributions
p_1 .. p_{γ+1} at the same positions; ``accept_or_resample`` keeps each guess x_i with
probability min(1, p_i(x_i) / q_i(x_i)), and at the first rejection draws from the residual
norm(max(0, p_i - q_i)) instead. When all γ are kept, a bonus token comes from p_{γ+1}. So
a round adds between 1 and γ + 1 tokens for one pass of the target.

Why the output is distributed as p (the module's claim; the tests check it in closed form
and by sampling). With β = Σ_y min(p(y), q(y)), a rejection happens with probability 1 - β,
and Σ_y max(0, p(y) - q(y)) = 1 - β too, so the first token is y with probability

    q(y) min(1, p(y)/q(y)) + (1 - β) max(0, p(y) - q(y)) / (1 - β)
        = min(p(y), q(y)) + max(0, p(y) - q(y)) = p(y).

Greedy decoding is the limit where p and q put all their mass on their arg-max: a guess is
kept while it equals the target's arg-max, so the tokens are the target's greedy tokens.

``speculative_generate`` runs the rounds for ONE sequence (batch size 1) of two ``GPT``s,
with a KV cache for each. A rejected guess leaves its keys and values in the caches;
``RollbackKVCache.crop`` forgets them, so each cache holds exactly the text kept so far.
The window does not slide: prompt and new tokens must fit in both context lengths.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .attention import KVCache
from .generate import top_k_filter
from .model import check_vocabulary_range
from .utils import check_float, check_int, eval_mode


class RollbackKVCache(KVCache):
    """A ``KVCache`` whose newest positions can be forgotten (Hugging Face: ``crop``)."""

    def crop(self, n: int) -> None:
        """Keep the first ``n`` positions; the next ``update`` overwrites the others."""
        self._length = min(self._length, check_int("RollbackKVCache.crop", "n", n, 0))


@dataclass
class SpeculativeStats:
    """What ``speculative_generate`` did: the numbers Chapter 16 turns into a speed-up."""

    new_tokens: int = 0  # tokens added to the prompt
    proposed: int = 0  # draft tokens proposed (γ per round, fewer at the end)
    accepted: int = 0  # of those, kept
    target_forwards: int = 0  # forward passes of the target: one per round
    draft_forwards: int = 0  # forward passes of the draft: one per proposed token

    @property
    def acceptance_rate(self) -> float:
        """accepted / proposed (nan when nothing was proposed)."""
        return self.accepted / self.proposed if self.proposed else math.nan

    @property
    def tokens_per_target_forward(self) -> float:
        """new_tokens / target_forwards: 1 for plain decoding, at most γ + 1 (nan: none)."""
        return self.new_tokens / self.target_forwards if self.target_forwards else math.nan


def sampling_probabilities(logits: Tensor, temperature: float = 1.0,
                           top_k: int | None = None) -> Tensor:
    """(N, V) logits -> (N, V) probabilities, made as ``generate.next_token`` makes them
    (Chapter 7): float32, ``top_k_filter``, minus each row's max, divided by the
    temperature, softmax. Chapter 16 applies it to the target's and the draft's logits.
    ``temperature`` must be a finite number > 0 (greedy decoding is the arg-max)."""
    temperature = check_float("sampling_probabilities", "temperature", temperature, 0.0,
                              low_open=True)
    if logits.dim() == 0 or logits.size(-1) == 0:
        raise ValueError(f"sampling_probabilities: logits of shape {tuple(logits.shape)} "
                         "have no vocabulary (V = 0): pass (N, V) logits with V >= 1, a "
                         "model's output at its last positions")
    if not torch.isfinite(logits.float().amax(dim=-1)).all() or logits.isnan().any():
        raise ValueError("sampling_probabilities: a row of logits holds NaN, or no finite "
                         "value: no distribution comes from it; check the model's output")
    logits = logits.float()  # (N, V)
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    finfo = torch.finfo(logits.dtype)  # as next_token: no 0/0 or inf/inf
    temperature = min(max(temperature, finfo.tiny), finfo.max)
    logits = (logits - logits.amax(dim=-1, keepdim=True)) / temperature  # (N, V), max 0
    return torch.softmax(logits, dim=-1)  # (N, V)


def residual_distribution(p: Tensor, q: Tensor) -> Tensor:
    """norm(max(0, p - q)) for two (V,) distributions: the draw after a rejection (Ch. 16).

    A rejection of x needs p(x) < q(x), so the residual then has mass >= q(x) - p(x) > 0.
    When p == q nothing is ever rejected (the ratio is 1). If floats that sum to 1 only up
    to rounding leave no positive mass, p and q agree to rounding: this returns p itself.
    """
    if p.shape != q.shape or p.dim() != 1:
        raise ValueError(f"residual_distribution: p {tuple(p.shape)} and q "
                         f"{tuple(q.shape)} must be laws over one vocabulary (V,): the "
                         "draft and the target must share their tokens")
    for name, t in (("p", p), ("q", q)):
        if (t < 0).any() or not torch.isfinite(t).all() or abs(t.sum().item() - 1) > 1e-4:
            raise ValueError(f"residual_distribution: {name} must be a law (finite, >= 0, "
                             "summing to 1): pass softmax probabilities")
    residual = (p - q).clamp(min=0.0)  # (V,)
    mass = residual.sum()
    return residual / mass if mass > 0 else p


def _check_step(p: Tensor, q: Tensor, draft_tokens: Tensor) -> None:
    """ValueErrors for ``accept_or_resample``'s arguments, naming the rule and the fix."""
    if not (isinstance(draft_tokens, Tensor) and draft_tokens.dim() == 1
            and not draft_tokens.is_floating_point() and draft_tokens.dtype != torch.bool):
        raise ValueError(f"accept_or_resample: draft_tokens must be a 1-D tensor of the γ "
                         f"drafted ids, got {draft_tokens!r:.60}: pass torch.tensor([x_1, "
                         "..., x_γ])")
    gamma = len(draft_tokens)
    for name, t, rows in (("p", p, gamma + 1), ("q", q, gamma)):
        if not isinstance(t, Tensor) or t.dim() != 2 or t.size(0) != rows:
            raise ValueError(f"accept_or_resample: {name} must be a ({rows}, V) tensor for "
                             f"γ={gamma} drafted tokens, got {getattr(t, 'shape', t)!r}: p "
                             "has a row per drafted position and one more, q one per draft")
        ones = torch.ones(rows, dtype=t.dtype, device=t.device)
        if (not torch.isfinite(t).all() or (t < 0).any()
                or not torch.allclose(t.sum(dim=-1), ones, atol=1e-4)):
            raise ValueError(f"accept_or_resample: each row of {name} must be a "
                             "probability distribution (finite, >= 0, summing to 1): "
                             "pass torch.softmax(logits, dim=-1)")
    V = q.size(1)
    if p.size(1) != V:
        raise ValueError(f"accept_or_resample: p has V={p.size(1)} columns, q {V}: the "
                         "draft and the target must share one vocabulary")
    if ((draft_tokens < 0) | (draft_tokens >= V)).any():
        raise ValueError(f"accept_or_resample: draft_tokens {draft_tokens.tolist()} must "
                         f"be ids in [0, {V})")
    if gamma and (q.gather(1, draft_tokens.long()[:, None]) == 0).any():
        raise ValueError("accept_or_resample: a drafted token has q_i(x_i) = 0, so q "
                         "cannot have drawn it: pass the distributions the draft drew from")


def accept_or_resample(p: Tensor, q: Tensor, draft_tokens: Tensor,
                       generator: torch.Generator | None = None) -> tuple[Tensor, int]:
    """The accept/reject step of speculative sampling (Chapter 16; Leviathan et al. 2023,
    Algorithm 1).

    Args:
        p: the target's probabilities (γ + 1, V) at the γ drafted positions and one more.
        q: the draft's probabilities (γ, V) that drew the drafted tokens.
        draft_tokens: the γ drafted ids x_1 .. x_γ, shape (γ,).
        generator: for the uniform draws and the token drawn at the end.

    Keeps x_i with probability min(1, p_i(x_i) / q_i(x_i)), in order. At the first
    rejection it draws the new token from ``residual_distribution(p_i, q_i)`` and stops;
    when all γ are kept, it draws a bonus token from p_{γ+1}. Returns
    ``(tokens, n_accepted)``: the kept drafts and the new token, 1 to γ + 1 int64 ids, and
    how many drafts were kept. γ = 0 is one draw from p. Each token out is distributed as
    the target's p (the module's docstring proves it).
    """
    _check_step(p, q, draft_tokens)
    draft_tokens = draft_tokens.long()
    for i, x in enumerate(draft_tokens.tolist()):
        r = torch.rand((), generator=generator, device=p.device)  # uniform on [0, 1)
        if r < p[i, x] / q[i, x]:  # r < 1, so a ratio >= 1 always keeps x: min(1, p/q)
            continue
        new = torch.multinomial(residual_distribution(p[i], q[i]), 1, generator=generator)
        return torch.cat([draft_tokens[:i], new]), i
    bonus = torch.multinomial(p[-1], 1, generator=generator)  # (1,): all γ were kept
    return torch.cat([draft_tokens, bonus]), len(draft_tokens)


def accept_greedy(target_choices: Tensor, draft_tokens: Tensor) -> tuple[Tensor, int]:
    """Greedy speculative decoding's step (Chapter 16): keep the drafted tokens (γ,) while
    each equals the target's arg-max there; then add the target's arg-max at the first
    mismatch (or after all γ). ``target_choices`` (γ + 1,) are the target's arg-maxes.
    Returns ``(tokens, n_accepted)`` as ``accept_or_resample`` does: the target's own next
    1 to γ + 1 greedy tokens, and how many drafts were kept."""
    if (draft_tokens.dim() != 1 or target_choices.dim() != 1
            or len(target_choices) != len(draft_tokens) + 1):
        raise ValueError(f"accept_greedy: target_choices {tuple(target_choices.shape)} "
                         f"must be (γ + 1,) for draft_tokens {tuple(draft_tokens.shape)} "
                         "(γ,): the target's arg-max at each drafted position and one more")
    gamma = len(draft_tokens)
    agree = (draft_tokens == target_choices[:gamma]).long()  # (γ,)
    n_accepted = int(agree.cumprod(dim=0).sum())  # the length of the agreeing prefix
    return target_choices[: n_accepted + 1], n_accepted


def _check_models(target: nn.Module, draft: nn.Module, idx: Tensor,
                  max_new_tokens: int) -> None:
    """ValueErrors for a batch other than 1, an empty prompt, two vocabularies, or a request
    longer than a context."""
    if (not isinstance(idx, Tensor) or idx.dim() != 2 or idx.is_floating_point()
            or idx.dtype == torch.bool):
        raise ValueError(f"speculative_generate: idx must be a (1, T) tensor of token ids, "
                         f"got {idx!r:.60}: pass torch.tensor([ids])")
    B, T = idx.shape
    if B != 1:
        raise ValueError(f"speculative_generate: batch size B={B}, but this implementation "
                         "decodes one sequence (B = 1): call it once per prompt")
    if T == 0:
        raise ValueError("speculative_generate: the prompt has no tokens (T = 0): the "
                         "first new token is predicted at the last prompt token, so give "
                         "at least one (a newline, or an end-of-text token)")
    V_target, V_draft = target.config.vocab_size, draft.config.vocab_size
    if V_target != V_draft:
        raise ValueError(f"speculative_generate: the target has vocab_size={V_target}, the "
                         f"draft vocab_size={V_draft}: the draft's guesses must be the "
                         "target's tokens; use a draft trained with the target's tokenizer")
    for name, model in (("target", target), ("draft", draft)):
        n = model.config.context_length
        if T + max_new_tokens - 1 > n:
            raise ValueError(f"speculative_generate: T={T} prompt tokens and "
                             f"max_new_tokens={max_new_tokens} need "
                             f"{T + max_new_tokens - 1} positions, but the {name}'s "
                             f"context_length={n} (the window does not slide): pass "
                             f"max_new_tokens <= {n - T + 1} or a shorter prompt")
    check_vocabulary_range(idx, V_target)


def _finite(name: str, logits: Tensor) -> Tensor:
    """``logits`` unchanged, or a ValueError when they hold nan or inf."""
    if not torch.isfinite(logits).all():
        raise ValueError(f"speculative_generate: the {name}'s logits are not finite (nan "
                         "or inf): its weights or inputs are broken; check "
                         "torch.isfinite(p).all() for each of its parameters p")
    return logits


def _propose(draft: nn.Module, cache: list[RollbackKVCache], idx: Tensor, gamma: int,
             temperature: float, top_k: int | None, greedy: bool,
             generator: torch.Generator | None) -> tuple[Tensor, Tensor]:
    """The draft's γ guesses after ``idx`` (1, n), one forward pass each: the ids (γ,) and
    the probabilities q (γ, V) that drew them (greedy: the arg-maxes, and q empty)."""
    tokens = idx.new_empty(0)  # (γ,) once filled
    q = torch.empty(0, draft.config.vocab_size, device=idx.device)  # (γ, V) once filled
    pending = idx[:, len(cache[0]):]  # (1, P): the tokens the cache has not seen yet
    for _ in range(gamma):
        logits, _ = draft(pending, kv_cache=cache)  # (1, P, V)
        last = _finite("draft", logits[0, -1:])  # (1, V)
        if greedy:
            token = last.argmax(dim=-1)  # (1,)
        else:
            q_i = sampling_probabilities(last, temperature, top_k)  # (1, V)
            token = torch.multinomial(q_i, 1, generator=generator)[0]  # (1,)
            q = torch.cat([q, q_i])
        tokens = torch.cat([tokens, token])
        pending = token[None]  # (1, 1)
    return tokens, q


@torch.no_grad()
def speculative_generate(target: nn.Module, draft: nn.Module, idx: Tensor,
                         max_new_tokens: int, gamma: int, temperature: float = 1.0,
                         top_k: int | None = None, greedy: bool = False,
                         generator: torch.Generator | None = None,
                         ) -> tuple[Tensor, SpeculativeStats]:
    """Extend one prompt ``idx`` (1, T) by ``max_new_tokens`` tokens of the ``target`` GPT,
    a ``draft`` GPT (smaller, same vocabulary) guessing ``gamma`` tokens a round (Ch. 16).

    Returns ``(tokens (1, T + max_new_tokens), stats)``. Sampled, each token is distributed
    as ``generate(target, ...)``'s with the same ``temperature`` and ``top_k``, applied to
    both models (``sampling_probabilities``). ``greedy=True`` gives the target's greedy
    tokens, token for token. ``gamma=0`` is plain decoding with the target, one pass a
    token: the baseline. A round's last token is the target's own, so a round guesses at
    most one token fewer than remain: a larger ``gamma`` is clipped near the end. Both
    models are in eval mode during the call, then back in their modes. Batch size 1 only;
    nan or inf logits raise a ValueError.
    """
    max_new_tokens = check_int("speculative_generate", "max_new_tokens", max_new_tokens, 0)
    gamma = check_int("speculative_generate", "gamma", gamma, minimum=0)
    top_k = check_int("speculative_generate", "top_k", top_k, minimum=1, optional=True)
    if not greedy:
        temperature = check_float("speculative_generate", "temperature", temperature, 0.0,
                                  low_open=True)
    _check_models(target, draft, idx, max_new_tokens)
    idx, stats = idx.long(), SpeculativeStats()
    end = idx.size(1) + max_new_tokens  # the final length
    target_cache = [RollbackKVCache(target.config.context_length) for _ in target.blocks]
    draft_cache = [RollbackKVCache(draft.config.context_length) for _ in draft.blocks]
    with eval_mode(target), eval_mode(draft):
        while idx.size(1) < end:
            n = idx.size(1)
            gamma_now = min(gamma, end - n - 1)  # the round's bonus may be the last token
            drafted, q = _propose(draft, draft_cache, idx, gamma_now, temperature, top_k,
                                  greedy, generator)  # (γ,), (γ, V)
            # One pass of the target over what its cache has not seen: the text's last
            # token and the γ guesses (the whole prompt too, in the first round).
            candidates = torch.cat([idx, drafted[None]], dim=1)  # (1, n + γ)
            logits, _ = target(candidates[:, len(target_cache[0]):], kv_cache=target_cache)
            logits = _finite("target", logits[0, -(gamma_now + 1):])  # (γ + 1, V)
            if greedy:
                new, n_accepted = accept_greedy(logits.argmax(dim=-1), drafted)
            else:
                p = sampling_probabilities(logits, temperature, top_k)  # (γ + 1, V)
                new, n_accepted = accept_or_resample(p, q, drafted, generator)
            idx = torch.cat([idx, new[None]], dim=1)  # (1, n + n_accepted + 1)
            for cache in target_cache + draft_cache:  # forget the rejected guesses: a
                cache.crop(idx.size(1) - 1)  # cache holds the text but its newest token
            stats.proposed += gamma_now
            stats.accepted += n_accepted
            stats.target_forwards += 1
            stats.draft_forwards += gamma_now
    stats.new_tokens = max_new_tokens
    return idx, stats
