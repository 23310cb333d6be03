"""Chapter 7 — generating text: greedy decoding, temperature, top-k and top-p (nucleus) sampling,
and a KV cache that gives exactly the tokens of the slow path, faster.

``generate`` turns a model's next-token logits into text one token at a time. Each step's logits
go through, in this order: temperature (a finite number > 0), ``top_k_filter``, ``top_p_filter``,
softmax, then one draw (or the arg-max when ``greedy``). The filters return logits with the removed
entries set to ``-inf``, so the softmax gives them probability exactly 0. Logits holding nan (or
+inf, or only -inf) raise a ``ValueError``.
"""

from __future__ import annotations

import math
import numbers

import torch
from torch import Tensor

from .model import check_vocabulary_range
from .utils import eval_mode, skip_token_id_checks


def top_k_filter(logits: Tensor, k: int) -> Tensor:
    """Keep the ``k`` largest logits of each row (last dimension); set the others to ``-inf``.

    ``logits`` has shape ``(..., V)``. Ties with the ``k``-th largest value are all kept (so a row may
    keep more than ``k`` entries when values repeat), the convention of nanoGPT and Hugging Face.
    ``k >= V`` keeps everything. Returns a new tensor; the input is not changed.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"top_k must be an integer >= 1, got {k!r}: pass top_k=None to keep every token")
    if k >= logits.size(-1):
        return logits.clone()
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]  # (..., 1): the k-th largest of each row
    return logits.masked_fill(logits < kth, float("-inf"))


def top_p_filter(logits: Tensor, p: float) -> Tensor:
    """Nucleus filter: keep the smallest set of most likely tokens whose probabilities sum to at least ``p``.

    ``logits`` has shape ``(..., V)``; probabilities are ``softmax(logits)`` over the last dimension.
    Sort the tokens from most to least likely; a token is kept when the probability of the tokens
    before it is still below ``p``. So the most likely token is always kept, and ``p = 1`` keeps
    every token. Ties: every token exactly as likely as the last kept one is kept too, so the result
    does not depend on how the sort orders equal values. Removed entries become ``-inf``; returns a
    new tensor.
    """
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 < p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {p!r}: pass top_p=None (or 1.0) to keep every token")
    if p == 1.0:
        return logits.clone()
    sorted_logits, _ = torch.sort(logits, dim=-1, descending=True)  # (..., V)
    sorted_probs = torch.softmax(sorted_logits.float(), dim=-1)  # (..., V), largest first
    mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs  # (..., V): probability of the tokens ahead
    keep_sorted = mass_before < p  # (..., V): True for a prefix of the sorted tokens, at least the first
    # The smallest kept logit of each row; everything at least as large stays (ties included).
    n_kept = keep_sorted.sum(dim=-1, keepdim=True)  # (..., 1), >= 1
    threshold = sorted_logits.gather(-1, n_kept - 1)  # (..., 1)
    return logits.masked_fill(logits < threshold, float("-inf"))


def _check_temperature(temperature) -> None:
    if (isinstance(temperature, bool) or not isinstance(temperature, numbers.Real)
            or not 0 < temperature < math.inf):
        raise ValueError(
            f"temperature must be a finite number > 0, got {temperature!r}: for the single most likely token "
            "at every step (the limit temperature -> 0) pass greedy=True"
        )


def _check_options(temperature, top_k, top_p, greedy, max_new_tokens) -> None:
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}")
    if not greedy:
        _check_temperature(temperature)
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k must be an integer >= 1, got {top_k!r}: pass top_k=None to keep every token")
    if top_p is not None and (isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0.0 < top_p <= 1.0):
        raise ValueError(f"top_p must be in (0, 1], got {top_p!r}: pass top_p=None to keep every token")


def _broken_rows(logits: Tensor) -> Tensor:
    """(..., V) -> (...): True where the softmax cannot use the row (a nan, a +inf, or no entry > -inf)."""
    return logits.isnan().any(-1) | (logits == math.inf).any(-1) | (logits == -math.inf).all(-1)


def _check_logits(broken: Tensor) -> None:
    """A ValueError naming the first True of ``broken``: ``_broken_rows`` of one step's logits (B,), or of
    every step of a call, stacked (steps, B); then the step is named too."""
    if broken.any():
        *step, row = broken.nonzero()[0].tolist()
        where = f" of new token {step[0] + 1}" if step else ""
        raise ValueError(
            f"the logits{where} are not finite (row {row} of {broken.shape[-1]} holds nan or inf): the "
            "model's weights or inputs are broken; check them with torch.isfinite(p).all() for each "
            "parameter p"
        )


def next_token(logits: Tensor, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
               greedy: bool = False, generator: torch.Generator | None = None) -> Tensor:
    """Pick one token per row from next-token ``logits`` of shape ``(B, V)``; returns ids of shape ``(B, 1)``.

    ``greedy`` takes the arg-max (temperature and the filters cannot change it, so they are skipped).
    Otherwise: divide by ``temperature`` (a finite number > 0), apply ``top_k_filter`` then
    ``top_p_filter``, softmax, and draw with ``torch.multinomial`` using ``generator`` (on the logits'
    device). The top ``k`` are picked before dividing, which cannot change them, so that a huge
    temperature, which rounds every logit to the same value, still draws from them only; each row's
    largest logit is subtracted first, so that a tiny temperature gives greedy's token, not an overflow.
    Logits with a nan, a +inf, or no finite entry in a row raise a ``ValueError`` (a model whose weights
    or inputs are broken).
    """
    _check_logits(_broken_rows(logits))
    if greedy:
        return logits.argmax(dim=-1, keepdim=True)  # (B, 1)
    _check_temperature(temperature)
    if generator is not None and generator.device.type != logits.device.type:
        raise ValueError(
            f"the generator is on {generator.device} but the logits are on {logits.device}: torch draws "
            f"on the logits' device; make it there: torch.Generator({logits.device.type!r}).manual_seed(seed)"
        )
    logits = logits.float()  # (B, V)
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    finfo = torch.finfo(logits.dtype)  # a temperature float32 cannot hold would give 0/0 or inf/inf
    temperature = min(max(temperature, finfo.tiny), finfo.max)
    logits = (logits - logits.amax(dim=-1, keepdim=True)) / temperature  # (B, V), each row's max at 0
    if top_p is not None:
        logits = top_p_filter(logits, top_p)
    probs = torch.softmax(logits, dim=-1)  # (B, V)
    return torch.multinomial(probs, num_samples=1, generator=generator)  # (B, 1)


def _picker(temperature, top_k, top_p, greedy, generator):
    """``(pick, finish)`` for ``generate``'s loop: ``pick(logits (B, V))`` returns the next tokens (B, 1)
    as ``next_token`` does, and ``finish()`` raises its error if some step's logits were not finite.

    A draw checks each step's logits as it comes (``torch.multinomial`` reads its input back anyway). A
    greedy pick must not wait for the GPU at every token (Chapter 7's last section): it notes each step's
    broken rows on the device, and ``finish`` reads them all at once, before ``generate`` returns.
    """
    if not greedy:
        return (lambda logits: next_token(logits, temperature, top_k, top_p, False, generator)), lambda: None
    noted = []

    def pick(logits: Tensor) -> Tensor:
        noted.append(_broken_rows(logits))  # (B,), not read yet
        return logits.argmax(dim=-1, keepdim=True)  # (B, 1)

    def finish() -> None:
        if noted:
            _check_logits(torch.stack(noted))  # (steps, B): one read for the whole call

    return pick, finish


@torch.no_grad()
def generate(model, idx: Tensor, max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None,
             top_p: float | None = None, greedy: bool = False, use_cache: bool = True,
             generator: torch.Generator | None = None, static_cache: bool = False, compile: bool = False) -> Tensor:
    """Extend each row of ``idx`` (token ids, shape ``(B, T)``) by ``max_new_tokens`` tokens.

    Returns a LongTensor of shape ``(B, T + max_new_tokens)`` whose first ``T`` columns are ``idx``.

    The model sees at most ``model.config.context_length`` tokens (call it ``T_max``): the newest
    ``T_max``. Without the cache (``use_cache=False``) every step runs the model on that window and keeps
    the last position's logits. With the cache (the default), the window is run once (the *prefill*),
    then each step feeds only the newest token and reuses the keys and values of the earlier positions
    (one ``KVCache`` per layer, ``model.new_kv_cache()``). Once the cache holds ``T_max`` positions, the
    next window starts one token later: with learned absolute positions every token's position, and so
    every cached key and value, changes. The cache is then dropped and rebuilt from the newest ``T_max``
    tokens, which is exactly what the slow path computes. The cache therefore saves work for the first
    ``T_max - T`` new tokens; past the context length both paths do the same work per token. Both paths
    give the same tokens, greedy or sampled with the same ``generator`` (up to float rounding, which in
    practice never flips a choice).

    The model is put in ``eval()`` mode for the call (no dropout) and its previous mode is restored
    afterwards. Gradients are off (``torch.no_grad``). The prompt's token ids are checked once (the
    model's own per-call checks are off: ``utils.skip_token_id_checks``). Logits that are not finite
    raise a ``ValueError``: at once when sampling, at the end of the call, naming the step, when greedy
    (so that a GPU is not kept waiting at every token).

    Args:
        temperature: divides the logits; < 1 sharpens, > 1 flattens. Must be > 0 unless ``greedy``.
        top_k: keep only the ``top_k`` most likely tokens (``top_k_filter``); None keeps all.
        top_p: keep the smallest set of tokens with probability >= ``top_p`` (``top_p_filter``); None keeps all.
        greedy: always take the most likely token (deterministic; ignores temperature, top_k, top_p).
        use_cache: use the KV cache (same tokens, faster).
        generator: a ``torch.Generator`` for the draws, for reproducible samples, on the model's device
            (``torch.Generator("cuda")`` for a model on a GPU).
        static_cache: keep the keys and values in buffers of fixed size (``fast.StaticDecoder``, Chapter 7's
            last section): same tokens; needs a ``GPT``.
        compile: also compile the decoding step (``torch.compile``; CUDA graphs on a GPU). Implies
            ``static_cache``. The first call compiles (seconds to a minute); later calls reuse it.
    """
    if not isinstance(idx, Tensor):
        raise ValueError(
            f"idx must be a (B, T) torch.Tensor of token ids, got a {type(idx).__name__}: "
            "pass torch.tensor([ids]) for one prompt"
        )
    if idx.dim() != 2 or idx.size(1) < 1:
        raise ValueError(
            f"idx must be a (B, T) tensor of token ids with T >= 1, got {tuple(idx.shape)}: "
            "for a single prompt pass idx[None] (shape (1, T))"
        )
    if idx.dtype == torch.bool or idx.is_floating_point() or idx.is_complex():
        raise ValueError(f"idx must hold integer token ids, got {idx.dtype}: e.g. idx.long() if the values are whole")
    idx = idx.long()  # the new tokens are int64, and torch.cat needs one dtype
    _check_options(temperature, top_k, top_p, greedy, max_new_tokens)
    T_max = model.config.context_length
    vocab_size = getattr(model.config, "vocab_size", None)
    if vocab_size is not None:
        check_vocabulary_range(idx, vocab_size)  # once: the new tokens are the model's own
    pick, finish = _picker(temperature, top_k, top_p, greedy, generator)
    with eval_mode(model), skip_token_id_checks(model):
        if static_cache or compile:
            from .fast import check_fast_options, generate_static

            check_fast_options(model, use_cache, static_cache, compile)
            idx = generate_static(model, idx, max_new_tokens, pick, compile=compile)
        else:
            cache = None
            for _ in range(max_new_tokens):
                if not use_cache:
                    logits, _ = model(idx[:, -T_max:])  # (B, T', V)
                elif cache is None or len(cache[0]) >= T_max:
                    cache = model.new_kv_cache()  # (re)start: prefill the newest T_max tokens
                    logits, _ = model(idx[:, -T_max:], kv_cache=cache)  # (B, T', V)
                else:
                    logits, _ = model(idx[:, -1:], kv_cache=cache)  # (B, 1, V): only the newest token
                token = pick(logits[:, -1, :])  # (B, 1)
                idx = torch.cat([idx, token], dim=1)  # (B, T + 1)
    finish()
    return idx
