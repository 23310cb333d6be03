"""Chapter 14 — the answers GRPO learns from: sampling groups of them, and their
log-probabilities.

``sample_groups`` answers each prompt G times with Chapter 7's KV cache (``new_kv_cache``
and ``next_token``), stopping once every row has written the end token;
``completion_logps`` scores each answer token under a model, with the graph, in one full
pass. The two passes compute nearly the same numbers (the cached pass and the full one
round differently in the last bits), so the ratio of ``grpo.grpo_loss`` takes both of its
sides from ``completion_logps``. Shapes: N = B * G completions of C tokens after prompts of
P tokens.
"""

from __future__ import annotations

import math
import numbers

import torch
from torch import Tensor, nn

from .generate import next_token
from .model import check_vocabulary_range
from .utils import check_int, eval_mode, skip_token_id_checks


def check_temperature(function: str, temperature) -> float:
    """``temperature`` as a float (NumPy numbers accepted), else a ValueError."""
    if (isinstance(temperature, bool) or not isinstance(temperature, numbers.Real)
            or not 0 < temperature < math.inf):
        raise ValueError(f"{function}: temperature={temperature!r} must be a finite number "
                         "> 0: the logits are divided by it, to sample and to score the "
                         "answers; 1.0, the default, is the model's own distribution")
    return float(temperature)


def _end_mask(completions: Tensor, end_id: int) -> Tensor:
    """(N, C) -> (N, C): 1 up to and including each row's first ``end_id``, 0 after it."""
    ended = (completions == end_id).long()  # (N, C)
    return ((ended.cumsum(dim=1) - ended) == 0).long()


def check_end_id(function: str, end_id, vocab_size: int) -> int:
    end_id = check_int(function, "end_id", end_id, minimum=0)
    if end_id >= vocab_size:
        raise ValueError(f"{function}: end_id={end_id} is outside the model's vocabulary "
                         f"[0, {vocab_size}), so no answer could end: pass the tokenizer's "
                         "end token (ChatTokenizer.end_id) of a model that has it "
                         "(add_chat_tokens)")
    return end_id


@torch.no_grad()
def sample_groups(model: nn.Module, prompts: Tensor, group_size: int, max_new_tokens: int,
                  end_id: int, temperature: float = 1.0,
                  generator: torch.Generator | None = None
                  ) -> tuple[Tensor, Tensor]:
    """``group_size`` sampled completions of each of the B prompts (B, P), all of one
    length: ``(completions, mask)``, both (B * G, C), the G answers of a prompt side by
    side. ``mask`` is 1 up to and including a row's first ``end_id``; after it the row holds
    ``end_id``. Sampling stops once every row has ended, so C <= ``max_new_tokens``. The
    window is never slid."""
    if (not isinstance(prompts, Tensor) or prompts.dim() != 2 or prompts.is_floating_point()
            or prompts.is_complex() or prompts.dtype == torch.bool):
        raise ValueError(f"sample_groups: prompts must be a (B, P) tensor of integer token "
                         f"ids, prompts of one length, got {prompts!r:.60}: pass "
                         "torch.tensor([ids_1, ids_2, ...])")
    G = check_int("sample_groups", "group_size", group_size, minimum=1)
    max_new_tokens = check_int("sample_groups", "max_new_tokens", max_new_tokens, minimum=1)
    temperature = check_temperature("sample_groups", temperature)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise ValueError(f"sample_groups: generator={generator!r:.40} must be a "
                         "torch.Generator: pass torch.Generator().manual_seed(seed), or "
                         "None")
    end_id = check_end_id("sample_groups", end_id, model.config.vocab_size)
    T_max = model.config.context_length
    if prompts.shape[1] + max_new_tokens > T_max:
        raise ValueError(f"sample_groups: prompts of {prompts.shape[1]} tokens plus "
                         f"max_new_tokens={max_new_tokens} exceed context_length={T_max}: "
                         f"sample at most {T_max - prompts.shape[1]} new tokens")
    check_vocabulary_range(prompts, model.config.vocab_size)
    idx = prompts.long().repeat_interleave(G, dim=0)  # (N, P), N = B * G
    done = torch.zeros(len(idx), dtype=torch.bool, device=idx.device)  # (N,)
    new = []
    with eval_mode(model), skip_token_id_checks(model):
        cache = model.new_kv_cache()
        logits, _ = model(idx, kv_cache=cache)  # (N, P, V): the prefill
        for _ in range(max_new_tokens):
            token = next_token(logits[:, -1], temperature, generator=generator)  # (N, 1)
            token = token.masked_fill(done[:, None], end_id)  # an ended row stays ended
            new.append(token)
            done |= token[:, 0] == end_id
            if done.all():
                break
            logits, _ = model(token, kv_cache=cache)  # (N, 1, V): only the newest token
    completions = torch.cat(new, dim=1)  # (N, C)
    return completions, _end_mask(completions, end_id)


def completion_logps(model: nn.Module, prompts: Tensor, completions: Tensor,
                     temperature: float = 1.0) -> Tensor:
    """(N, C) log-probability of each completion token after its prompt, with the graph,
    from the logits divided by the sampling ``temperature`` (as TRL). prompts (N, P) of one
    length, completions (N, C), ids of any integer dtype, P + C - 1 <= the model's
    ``context_length``; ``model(idx)`` returns (logits, loss). As Chapter 7's
    ``next_token`` samples, each row's largest logit is subtracted first and the temperature
    held within float32's range, so these are the sampler's log-probabilities even at 1e-300
    (0 for a row's most likely token, -inf for the others) rather than an overflow's nan."""
    temperature = check_temperature("completion_logps", temperature)
    if not isinstance(prompts, Tensor) or not isinstance(completions, Tensor):
        raise ValueError(f"completion_logps: prompts and completions must be tensors of "
                         f"token ids, got {type(prompts).__name__} and "
                         f"{type(completions).__name__}: pass torch.tensor(ids) of each")
    V = model.config.vocab_size
    for name, ids in (("prompts", prompts), ("completions", completions)):
        if ids.dtype == torch.bool or ids.is_floating_point() or ids.is_complex():
            raise ValueError(f"completion_logps: {name} hold {ids.dtype}, not token ids: "
                             "pass whole numbers, torch.long (ids.long() if they are)")
        low, high = (int(ids.min()), int(ids.max())) if ids.numel() else (0, 0)
        if low < 0 or high >= V:
            raise ValueError(f"completion_logps: {name} hold token ids in [{low}, {high}], "
                             f"outside the model's vocabulary [0, {V}): pass ids of the "
                             "model's own tokenizer")
    if prompts.dim() != 2 or completions.dim() != 2 or len(prompts) != len(completions):
        raise ValueError(f"completion_logps: prompts {tuple(prompts.shape)} and "
                         f"completions {tuple(completions.shape)} must be (N, P) and "
                         "(N, C): repeat each prompt once per completion "
                         "(prompts.repeat_interleave(G, 0))")
    P, C, T = prompts.shape[1], completions.shape[1], model.config.context_length
    if P < 1:
        raise ValueError("completion_logps: the prompts have no token: the first "
                         "completion token needs at least one prompt token before it (the "
                         "turn's opening marker)")
    if P + C - 1 > T:
        raise ValueError(f"completion_logps: prompts of P={P} tokens and completions of "
                         f"C={C} need P + C - 1 = {P + C - 1} positions, and the model "
                         f"reads T={T}: a window slid past the prompt's start would no "
                         "longer line up with the completion; pass shorter prompts or "
                         f"completions (P + C <= {T + 1}), as sample_groups' "
                         "max_new_tokens keeps them")
    prompts, completions = prompts.long(), completions.long()  # gather takes int64 ids
    idx = torch.cat([prompts, completions], dim=1)[:, :-1]  # (N, P + C - 1): not the last
    logits, _ = model(idx)  # (N, P + C - 1, V)
    logits = logits[:, P - 1:].float()  # (N, C, V)
    finfo = torch.finfo(logits.dtype)  # as next_token: 1e-300 would be 0 in float32
    temperature = min(max(temperature, finfo.tiny), finfo.max)
    shifted = logits - logits.detach().amax(dim=-1, keepdim=True)  # (N, C, V), max at 0
    logp = torch.log_softmax(shifted / temperature, dim=-1)  # (N, C, V)
    return logp.gather(-1, completions[..., None])[..., 0]  # (N, C)
