"""Chapter 16 — paged attention: the KV cache in fixed-size blocks from one shared pool
(vLLM's PagedAttention, Kwon et al. 2023), and decoding prompts of ragged lengths with it.

Chapter 7's caches keep each sequence's keys and values in one contiguous tensor: a padded
batch reserves the longest sequence's length for every row, a static cache (``fast``) the
whole context. ``PagedKVCache`` instead cuts each layer's storage into ``num_blocks``
physical blocks of ``block_size`` positions, ``(num_blocks, H, block_size, d_head)`` for the
keys and the same for the values, hands them out from a free list, and keeps a **block
table** per sequence: its logical block ``i`` (positions ``i * block_size ..``) lives in
physical block ``table[i]``, wherever that is in the pool. A sequence then wastes at most
``block_size - 1`` positions, in its last block (``kv_memory.kv_cache_memory`` counts three
layouts).

The model does not know its cache is paged: ``PagedLayer`` has what attention asks of a
``KVCache`` (its length, and ``update``: append, then return all), read through the block
table. So ``paged_generate`` runs the model's own ``forward``, and the tests prove it gives
token for token what ``generate`` gives each prompt alone, with the contiguous cache's
logits. ``block_size`` is the paging block, in positions (nanoGPT's ``block_size`` is this
package's ``context_length``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from .generate import _check_options, next_token
from .kv_memory import kv_cache_memory, kv_heads
from .model import check_vocabulary_range
from .utils import check_int, eval_mode, skip_token_id_checks


class PagedKVCache:
    """Many sequences' keys and values, in every layer, in blocks of one pool (Chapter 16).

    ``keys[layer]``, ``values[layer]``: the pools, ``(num_blocks, H, block_size, d_head)``
    each. ``free_blocks``: a stack of the unused physical blocks. ``block_tables[seq]``: a
    sequence's physical blocks in logical order, shared by all layers.
    ``lengths[seq][layer]``: the positions written in that layer (equal once a forward
    pass is done). A sequence starts with its first ``append``."""

    def __init__(self, n_layers: int, n_heads: int, d_head: int, block_size: int,
                 num_blocks: int, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu") -> None:
        self.n_layers = check_int("PagedKVCache", "n_layers", n_layers, minimum=1)
        self.n_heads = check_int("PagedKVCache", "n_heads", n_heads, minimum=1)
        self.d_head = check_int("PagedKVCache", "d_head", d_head, minimum=1)
        self.block_size = check_int("PagedKVCache", "block_size", block_size, minimum=1)
        self.num_blocks = check_int("PagedKVCache", "num_blocks", num_blocks, minimum=1)
        shape = (self.num_blocks, self.n_heads, self.block_size, self.d_head)
        layers = range(self.n_layers)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in layers]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in layers]
        self.free_blocks = list(range(self.num_blocks - 1, -1, -1))  # pop() gives 0, 1, ...
        self.block_tables: dict[int, list[int]] = {}
        self.lengths: dict[int, list[int]] = {}

    @classmethod
    def for_model(cls, model, block_size: int, num_blocks: int) -> PagedKVCache:
        """An empty cache shaped for a ``GPT`` (or a ``Llama``: its ``n_kv_heads``), in its
        dtype, on its device (Chapter 16)."""
        cfg, weight = model.config, model.lm_head.weight
        return cls(cfg.n_layers, kv_heads(cfg), cfg.d_head, block_size, num_blocks,
                   weight.dtype, weight.device)

    @property
    def blocks_in_use(self) -> int:
        """Physical blocks held by sequences: ``num_blocks - len(free_blocks)``."""
        return sum(len(table) for table in self.block_tables.values())

    def length(self, seq: int, layer: int = -1) -> int:
        """Positions of ``seq`` cached in ``layer`` (by default the last one, which a
        forward pass writes last); 0 for a sequence not in the cache."""
        if not -self.n_layers <= layer < self.n_layers:
            raise ValueError(f"PagedKVCache.length: layer={layer} must be in "
                             f"[-{self.n_layers}, {self.n_layers})")
        return self.lengths[seq][layer] if seq in self.lengths else 0

    def _check_layer(self, what: str, layer) -> None:
        if isinstance(layer, bool) or not isinstance(layer, int) or not (
                0 <= layer < self.n_layers):
            raise ValueError(f"PagedKVCache.{what}: layer={layer!r} must be an int in "
                             f"[0, {self.n_layers}), one of the model's layers")

    def layers(self, seq: int) -> list[PagedLayer]:
        """``seq``'s cache as ``GPT.forward(idx, kv_cache=...)`` takes it: one view per
        layer."""
        return [PagedLayer(self, seq, layer) for layer in range(self.n_layers)]

    def append(self, seq: int, layer: int, k: Tensor, v: Tensor) -> None:
        """Write ``k`` and ``v`` (each ``(1, H, T, d_head)``), the next ``T`` positions of
        ``seq``, into ``layer``'s pools, taking a free block when its last one is full."""
        H, S, d = self.n_heads, self.block_size, self.d_head
        if k.shape != v.shape or k.dim() != 4 or k.shape[:2] + k.shape[3:] != (1, H, d):
            raise ValueError(
                f"PagedKVCache.append: k and v must both have shape (1, {H}, T, {d}), got "
                f"{tuple(k.shape)} and {tuple(v.shape)}: append one sequence at a time")
        self._check_layer("append", layer)
        pool = self.keys[layer]
        if (k.dtype, k.device) != (pool.dtype, pool.device) or (v.dtype, v.device) != (
                k.dtype, k.device):
            raise ValueError(
                f"PagedKVCache.append: k and v ({k.dtype} on {k.device}, {v.dtype} on "
                f"{v.device}) must match the pool ({pool.dtype} on {pool.device}): build "
                "the cache with the model's dtype and device (PagedKVCache.for_model)")
        table = list(self.block_tables.get(seq, []))
        lengths = list(self.lengths.get(seq, [0] * self.n_layers))
        P, T = lengths[layer], k.size(2)
        self._allocate(seq, table, P + T)  # raises before anything changes if it cannot
        pos = torch.arange(P, P + T, device=k.device)  # (T,): the new positions
        blocks = torch.tensor(table, dtype=torch.long, device=k.device)[pos // S]  # (T,)
        offsets = pos % S  # (T,): its slot in that block
        # Indices on dims 0 and 2, a slice between them: the part selected is (T, H, d).
        self.keys[layer][blocks, :, offsets] = k[0].transpose(0, 1)  # (T, H, d)
        self.values[layer][blocks, :, offsets] = v[0].transpose(0, 1)
        lengths[layer] = P + T
        self.block_tables[seq], self.lengths[seq] = table, lengths  # written: now it counts

    def _allocate(self, seq: int, table: list[int], n_positions: int) -> None:
        """Grow ``table`` from the free list until it has room for ``n_positions``."""
        needed = max(0, -(-n_positions // self.block_size) - len(table))  # ceil, less held
        if needed > len(self.free_blocks):
            raise RuntimeError(
                f"PagedKVCache: sequence {seq!r} needs {needed} more block(s) of "
                f"{self.block_size} positions, but only {len(self.free_blocks)} of "
                f"{self.num_blocks} are free: make the pool bigger (num_blocks), decode "
                "fewer sequences at once (a smaller batch), or free finished sequences")
        table.extend(self.free_blocks.pop() for _ in range(needed))

    def gather(self, seq: int, layer: int) -> tuple[Tensor, Tensor]:
        """``seq``'s keys and values in ``layer``, contiguous and in order: each
        ``(1, H, L, d_head)`` for its ``L`` positions, read through its block table."""
        self._check_layer("gather", layer)
        if seq not in self.block_tables:
            raise ValueError(
                f"PagedKVCache.gather: sequence {seq!r} is not in the cache (it holds "
                f"{sorted(self.block_tables)}): append to it first")
        table = torch.tensor(self.block_tables[seq], dtype=torch.long,
                             device=self.keys[layer].device)  # (n,), maybe empty
        H, d, n_slots = self.n_heads, self.d_head, len(table) * self.block_size
        L = self.length(seq, layer)

        def read(pool: Tensor) -> Tensor:
            blocks = pool[table]  # (n, H, S, d): logical block i is physical block table[i]
            return blocks.transpose(0, 1).reshape(H, n_slots, d)[None, :, :L]

        return read(self.keys[layer]), read(self.values[layer])

    def free(self, seq: int) -> None:
        """Give ``seq``'s blocks back to the free list; the next allocations take them
        first."""
        if seq not in self.block_tables:
            raise ValueError(f"PagedKVCache.free: sequence {seq!r} holds no blocks (never "
                             "added, or freed already): free each sequence once")
        self.free_blocks.extend(reversed(self.block_tables.pop(seq)))  # pop(): table order
        del self.lengths[seq]

    def __repr__(self) -> str:
        return (f"PagedKVCache(sequences={len(self.block_tables)}, blocks_in_use="
                f"{self.blocks_in_use}/{self.num_blocks}, block_size={self.block_size})")


@dataclass
class PagedLayer:
    """One layer of one sequence of a ``PagedKVCache``, with what attention calls on a
    ``KVCache``: ``len`` (positions cached) and ``update`` (append, then read back)."""

    cache: PagedKVCache
    seq: int
    layer: int

    def __len__(self) -> int:
        return self.cache.length(self.seq, self.layer)

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append ``k``, ``v`` (each ``(1, H, T, d_head)``); return all of the sequence's,
        ``(1, H, P + T, d_head)`` each."""
        self.cache.append(self.seq, self.layer, k, v)
        return self.cache.gather(self.seq, self.layer)


def _check_prompts(model, prompts, max_new_tokens: int) -> list[Tensor]:
    """The prompts as int64 tensors on the model's device, or a ValueError naming the bad
    one."""
    if not isinstance(prompts, Sequence) or len(prompts) == 0:
        raise ValueError(
            "paged_generate: prompts must be a non-empty list of 1-D tensors of token ids "
            f"(of any lengths), got {type(prompts).__name__}: pass [torch.tensor(ids) for "
            "ids in batch]")
    C, V = model.config.context_length, model.config.vocab_size
    checked = []
    for b, prompt in enumerate(prompts):
        if (not isinstance(prompt, Tensor) or prompt.dim() != 1
                or prompt.dtype == torch.bool or prompt.is_floating_point()
                or prompt.is_complex()):
            got = (f"{prompt.dtype} of shape {tuple(prompt.shape)}"
                   if isinstance(prompt, Tensor) else type(prompt).__name__)
            raise ValueError(f"paged_generate: prompt {b} must be a 1-D tensor of integer "
                             f"token ids, got {got}: pass torch.tensor(ids)")
        T = len(prompt)
        if T == 0:
            raise ValueError(f"paged_generate: prompt {b} is empty: drop it, or start it "
                             "with a token such as <|endoftext|>")
        if T > C:
            raise ValueError(f"paged_generate: prompt {b} has {T} tokens, more than the "
                             f"model's context_length={C} (the cache's block_size is "
                             f"another thing): keep its last {C} tokens")
        if T + max_new_tokens - 1 > C:
            raise ValueError(
                f"paged_generate: prompt {b} ({T} tokens) plus max_new_tokens="
                f"{max_new_tokens} needs {T + max_new_tokens - 1} cached positions, more "
                f"than context_length={C} (the window is not slid): generate at most "
                f"{C - T + 1} new tokens")
        check_vocabulary_range(prompt[None], V)
        checked.append(prompt.long().to(model.lm_head.weight.device))
    return checked


def _next_logits(model, idx: Tensor, cache: PagedKVCache, seq: int) -> Tensor:
    """Logits (1, V) after the tokens ``idx`` (1, T) of sequence ``seq``, which extend its
    cache."""
    logits, _ = model(idx, kv_cache=cache.layers(seq))  # (1, T, V): the model's own forward
    return logits[:, -1, :]


@torch.no_grad()
def paged_generate(model, prompts: Sequence[Tensor], max_new_tokens: int,
                   block_size: int = 16, num_blocks: int | None = None, greedy: bool = True,
                   temperature: float = 1.0, top_k: int | None = None,
                   top_p: float | None = None, generator: torch.Generator | None = None,
                   ) -> tuple[list[Tensor], PagedKVCache]:
    """Extend prompts of different lengths together, each through its own block table
    (Chapter 16).

    ``prompts``: 1-D tensors of token ids, of any lengths. Each prompt is prefilled on its
    own; then every step runs the model once per sequence on its newest token, attending to
    its keys and values gathered from the pool, and picks the ``B`` next tokens together
    with ``next_token`` (greedy by default; else ``temperature``, ``top_k``, ``top_p`` and
    ``generator`` as in ``generate``). ``num_blocks=None`` makes the pool exactly as large
    as the run needs (``kv_cache_memory(...).paged`` slots).

    Returns ``(sequences, cache)``: each prompt and its ``max_new_tokens`` new tokens, and
    the cache, still holding sequence ``b`` (``cache.free(b)`` gives its blocks back).
    Greedy, the tokens are ``generate(model, prompt[None], ..., greedy=True)``'s for each
    prompt alone. A prompt plus its new tokens must fit the context (no sliding window);
    logits that are not finite raise ``generate``'s ValueError, whose row is the sequence.
    """
    _check_options(temperature, top_k, top_p, greedy, max_new_tokens)
    block_size = check_int("paged_generate", "block_size", block_size, minimum=1)
    num_blocks = check_int("paged_generate", "num_blocks", num_blocks, minimum=1,
                           optional=True)
    prompts = _check_prompts(model, prompts, max_new_tokens)
    # The last new token is never fed back: sequence b ends with len(prompt) + n - 1
    # positions cached.
    cached = [len(p) + max_new_tokens - 1 if max_new_tokens else 0 for p in prompts]
    memory = kv_cache_memory(cached, block_size, model.config.context_length)
    needed = memory.paged // block_size  # blocks
    if num_blocks is not None and num_blocks < needed:
        raise ValueError(
            f"paged_generate: num_blocks={num_blocks} is too few: these {len(prompts)} "
            f"sequences reach {cached} positions, {needed} blocks of {block_size}; pass "
            f"num_blocks >= {needed} (or None), or a smaller batch")
    if num_blocks is None:
        num_blocks = max(1, needed)  # a pool of at least one block, even for no new tokens
    cache = PagedKVCache.for_model(model, block_size, num_blocks)
    sequences = list(prompts)
    with eval_mode(model), skip_token_id_checks(model):  # the ids are checked above
        for step in range(max_new_tokens):
            if step == 0:  # prefill: each whole prompt on its own
                logits = [_next_logits(model, p[None], cache, b)
                          for b, p in enumerate(prompts)]
            else:  # each sequence's newest token: one position, attending to its own blocks
                logits = [_next_logits(model, s[None, -1:], cache, b)
                          for b, s in enumerate(sequences)]
            tokens = next_token(torch.cat(logits), temperature, top_k, top_p, greedy,
                                generator)  # (B, V) -> (B, 1)
            sequences = [torch.cat([s, t]) for s, t in zip(sequences, tokens)]
    return sequences, cache
