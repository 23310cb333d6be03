"""Chapter 16 — what a KV cache keeps: the slots of one batch under three layouts (padded
to the longest sequence, reserved to the context, paged in blocks) and the bytes of a slot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .utils import check_int


@dataclass(frozen=True)
class KVCacheMemory:
    """Cache slots that three layouts keep for one batch (Chapter 16). A slot is one
    position of one sequence: its keys and values in every layer (``slot_bytes``). ``waste``
    is what each layout keeps beyond ``needed``."""

    needed: int  # the positions the sequences hold: the sum of their lengths
    padded: int  # one (B, longest) tensor per layer: Chapter 7's padded batch
    static: int  # (B, max_length) buffers: Chapter 7's static cache (fast.py)
    paged: int  # whole blocks: ceil(length / block_size) of them per sequence

    @property
    def waste(self) -> dict[str, int]:
        """Slots each layout keeps beyond ``needed``, by name."""
        return {name: getattr(self, name) - self.needed for name in ("padded", "static",
                                                                        "paged")}


def kv_cache_memory(lengths: Sequence[int], block_size: int,
                    max_length: int) -> KVCacheMemory:
    """The slots a batch of sequences of ``lengths`` positions keeps padded to its longest,
    reserved to ``max_length`` each, and paged in blocks of ``block_size`` (Chapter 16)."""
    block_size = check_int("kv_cache_memory", "block_size", block_size, minimum=1)
    max_length = check_int("kv_cache_memory", "max_length", max_length, minimum=1)
    if isinstance(lengths, str) or not isinstance(lengths, Sequence) or not lengths:
        raise ValueError(f"kv_cache_memory: lengths={lengths!r} must be a non-empty list "
                         "of ints, one per sequence: pass e.g. lengths=[5, 1, 8]")
    lengths = [check_int("kv_cache_memory", f"lengths[{i}]", n, minimum=0)
               for i, n in enumerate(lengths)]
    if max(lengths) > max_length:
        raise ValueError(f"kv_cache_memory: a sequence of {max(lengths)} positions does "
                         f"not fit a static cache of max_length={max_length}: pass "
                         f"max_length >= {max(lengths)} (the model's context_length)")
    B, S = len(lengths), block_size
    return KVCacheMemory(needed=sum(lengths), padded=B * max(lengths),
                         static=B * max_length, paged=sum(-(-n // S) * S for n in lengths))


def kv_heads(cfg) -> int:
    """The heads a layer caches: a ``Llama``'s ``n_kv_heads`` (grouped-query attention),
    a ``GPT``'s ``n_heads``."""
    return getattr(cfg, "n_kv_heads", None) or cfg.n_heads


def slot_bytes(model) -> int:
    """Bytes of one cache slot of a ``GPT`` or ``Llama`` (Chapter 16): keys and values,
    ``n_kv_heads * d_head`` numbers each (D for a GPT), in every layer."""
    cfg = model.config
    numbers = 2 * cfg.n_layers * kv_heads(cfg) * cfg.d_head
    return numbers * model.lm_head.weight.element_size()
