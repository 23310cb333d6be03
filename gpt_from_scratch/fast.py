"""Chapter 7 — fast generation: a KV cache of fixed size and a compiled decoding step.

``generate(..., static_cache=True)`` decodes through a ``StaticDecoder``: the keys and values live in
buffers allocated once for the whole context (``StaticKVCache``), each step writes its position in
place and attends to the whole buffer under a mask, so every decoding step has the same shapes and the
same memory addresses. That is what ``torch.compile`` needs to compile the step once, and what a CUDA
graph needs to replay it: ``generate(..., compile=True)`` compiles the step, with
``mode="reduce-overhead"`` on a GPU (CUDA graphs: one launch per token instead of one per kernel).
The tokens are those of the eager path (``generate``'s docstring): the masked positions get weight
exactly 0, only the order of float additions may differ.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class StaticKVCache(nn.Module):
    """One layer's keys and values for all ``T_max`` positions: two ``(B, H, T_max, d_head)`` buffers."""

    def __init__(self, B: int, H: int, T_max: int, d_head: int, dtype: torch.dtype, device) -> None:
        super().__init__()
        shape = (B, H, T_max, d_head)
        self.register_buffer("keys", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("values", torch.zeros(shape, dtype=dtype, device=device), persistent=False)

    def clear(self) -> None:
        """Zeros in place (same addresses): a masked position gets weight 0, and 0 x nan is nan."""
        self.keys.zero_()
        self.values.zero_()

    def update(self, k: Tensor, v: Tensor, pos: Tensor) -> tuple[Tensor, Tensor]:
        """Write ``k`` and ``v`` (each ``(B, H, T, d_head)``) at positions ``pos`` (T,); return the buffers."""
        self.keys.index_copy_(2, pos, k)
        self.values.index_copy_(2, pos, v)
        return self.keys, self.values  # (B, H, T_max, d_head) each


class StaticDecoder(nn.Module):
    """A ``GPT`` (in eval mode) with one ``StaticKVCache`` per block, for a batch of ``B`` sequences.

    ``decoder(idx, pos)`` runs the tokens ``idx`` (B, T) at positions ``pos`` (T,), stores their keys
    and values, and returns the logits (B, T, V). Query ``i`` sees the cached positions ``<= pos[i]``;
    what a buffer holds beyond them (zeros, or an older window's keys) is masked out.
    """

    def __init__(self, model: nn.Module, B: int) -> None:
        super().__init__()
        self.model = model
        cfg = model.config
        weight = model.lm_head.weight
        self.caches = nn.ModuleList([StaticKVCache(B, cfg.n_heads, cfg.context_length, cfg.d_head, weight.dtype,
                                                   weight.device) for _ in model.blocks])
        self.register_buffer("positions", torch.arange(cfg.context_length, device=weight.device), persistent=False)

    def forward(self, idx: Tensor, pos: Tensor) -> Tensor:
        m = self.model
        x = m.wte(idx) + m.wpe.weight[pos]  # (B, T, D) + (T, D)
        mask = self.positions[None, :] <= pos[:, None]  # (T, T_max): True = may attend
        for block, cache in zip(m.blocks, self.caches):
            x = x + self._attend(block.attn, block.ln_1(x), cache, pos, mask)  # (B, T, D)
            x = x + block.mlp(block.ln_2(x))
        return m.lm_head(m.ln_f(x))  # (B, T, V)

    @staticmethod
    def _attend(attn: nn.Module, x: Tensor, cache: StaticKVCache, pos: Tensor, mask: Tensor) -> Tensor:
        """``MultiHeadAttention.forward`` in eval mode, with keys and values in the static ``cache``."""
        D = x.size(-1)
        q, k, v = attn.c_attn(x).split(D, dim=2)  # 3 x (B, T, D)
        q, k, v = attn.split_heads(q), attn.split_heads(k), attn.split_heads(v)  # 3 x (B, H, T, d_head)
        k, v = cache.update(k, v, pos)  # 2 x (B, H, T_max, d_head)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (B, H, T, d_head)
        return attn.c_proj(attn.merge_heads(y))  # (B, T, D)


def decoder_for(model: nn.Module, B: int, compile: bool = False):
    """``(decoder, step)``: the ``StaticDecoder`` of ``model`` for batch size ``B``, and the function
    running one decoding step (the decoder itself, or its compiled version with ``compile``).

    Both are made once per model, batch size, dtype, device and ``compile`` and kept in the model's
    ``__dict__`` (not a submodule: ``state_dict`` and ``parameters`` do not see them), so later calls
    reuse the buffers and the compiled code.
    """
    weight = model.lm_head.weight
    key = (B, weight.dtype, weight.device, compile)
    store = model.__dict__.setdefault("_static_decoders", {})
    if key not in store:
        decoder = StaticDecoder(model, B)
        step = decoder
        if compile:
            mode = "reduce-overhead" if weight.device.type == "cuda" else None  # CUDA graphs on a GPU
            step = torch.compile(decoder, mode=mode, fullgraph=True, dynamic=False)
        store[key] = decoder, step
    return store[key]


def check_fast_options(model: nn.Module, use_cache, static_cache, compile) -> None:
    """``generate``'s fast options: booleans, with the cache on, for a ``GPT``; else a ValueError."""
    for name, value in (("static_cache", static_cache), ("compile", compile)):
        if not isinstance(value, bool):
            raise ValueError(f"{name} must be True or False, got {value!r}")
    if not use_cache:
        raise ValueError("static_cache=True and compile=True are ways of using the KV cache: drop "
                         "use_cache=False (or pass static_cache=False, compile=False for the path without cache)")
    if not all(hasattr(model, name) for name in ("wte", "wpe", "blocks", "ln_f", "lm_head")):
        raise ValueError(f"static_cache and compile need a GPT (gpt_from_scratch.model), got a "
                         f"{type(model).__name__}: use generate(..., static_cache=False)")


@torch.no_grad()
def generate_static(model: nn.Module, idx: Tensor, max_new_tokens: int, pick, compile: bool = False) -> Tensor:
    """``generate``'s loop on a ``StaticDecoder``: ``pick(logits (B, V))`` returns the next tokens (B, 1).

    Prefill: the newest ``T_max`` tokens at once (eager); then one token per step (compiled with
    ``compile``). A full cache restarts from the newest ``T_max`` tokens, as ``generate`` does.
    """
    T_max = model.config.context_length  # idx: checked by generate
    decoder, step = decoder_for(model, idx.size(0), compile)
    for cache in decoder.caches:
        cache.clear()  # what an earlier call left, e.g. values of weights since repaired, must not leak
    filled = 0  # positions of the cache holding the current window
    pos = torch.zeros(1, dtype=torch.long, device=idx.device)  # the step's position: one tensor, same strides
    for _ in range(max_new_tokens):
        if filled == 0 or filled >= T_max:
            window = idx[:, -T_max:]  # (B, T')
            logits = decoder(window, decoder.positions[: window.size(1)])  # (B, T', V)
            filled = window.size(1)
        else:
            if compile and idx.is_cuda:
                torch.compiler.cudagraph_mark_step_begin()  # the last step's outputs are no longer read
            logits = step(token, pos.fill_(filled))  # (B, 1, V): only the newest token
            filled += 1
        token = pick(logits[:, -1, :])  # (B, 1)
        idx = torch.cat([idx, token], dim=1)  # (B, T + 1)
    return idx
