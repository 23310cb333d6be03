"""Chapter 16's paged KV cache: ragged prompts decoded through block tables give token for
token what ``generate`` gives each prompt alone (without a cache, and with Chapter 7's
contiguous ``KVCache``), with the contiguous cache's logits at every step; a gather that
ignores the table fails the same checks; freed blocks are reused; the memory count is what
a run allocates; bad input gets clear errors."""

from __future__ import annotations

import copy
import random

import pytest
import torch

from gpt_from_scratch.generate import generate
from gpt_from_scratch.model import GPT, GPTConfig
from gpt_from_scratch.kv_memory import kv_cache_memory, slot_bytes
from gpt_from_scratch.paged_cache import PagedKVCache, paged_generate

LENGTHS = (7, 1, 4, 11, 2)  # ragged: 3, 4 and 5 divide none or only some of them
N_NEW = 12


def _model() -> GPT:
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=97, context_length=32, n_layers=2, n_heads=2, d_model=32,
                       dropout=0.0)
    model = GPT(config).eval()
    with torch.no_grad():  # larger weights than GPT-2's init: sharp logits, varied tokens
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.3)
    return model


@pytest.fixture(scope="module")
def model() -> GPT:
    return _model()


def _prompts(device="cpu") -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, 97, (n,), generator=g).to(device) for n in LENGTHS]


def _shuffled(cache: PagedKVCache, seed: int = 0) -> PagedKVCache:
    """The cache with its free list in random order: physical order is not logical order."""
    random.Random(seed).shuffle(cache.free_blocks)
    return cache


def _scattered(table: list[int]) -> bool:
    """True when logical neighbours are not physical neighbours somewhere in ``table``."""
    return any(b != a + 1 for a, b in zip(table, table[1:]))


def gather_in_pool_order(self, seq, layer):
    """A wrong gather: the sequence's blocks read in the pool's order, not the table's."""
    blocks = torch.tensor(sorted(self.block_tables[seq]))
    H, d, L = self.n_heads, self.d_head, self.length(seq, layer)

    def read(pool):
        return pool[blocks].transpose(0, 1).reshape(H, -1, d)[None, :, :L]

    return read(self.keys[layer]), read(self.values[layer])


# ----------------------------------------------------------------------------- the pool
def test_append_then_gather_returns_what_was_written_through_a_scattered_table():
    cache = _shuffled(PagedKVCache(n_layers=2, n_heads=2, d_head=4, block_size=3,
                                   num_blocks=12))
    g = torch.Generator().manual_seed(0)
    written = {0: [], 1: []}
    for T in (5, 1, 1, 4, 2):  # chunks crossing block ends, two sequences interleaved
        for seq in (0, 1):
            k = torch.randn(1, 2, T, 4, generator=g)
            cache.append(seq, 0, k, -k)
            written[seq].append(k)
    for seq in (0, 1):
        keys, values = cache.gather(seq, 0)
        expected = torch.cat(written[seq], dim=2)  # (1, H, 13, d)
        assert torch.equal(keys, expected) and torch.equal(values, -expected)
        assert cache.length(seq, 0) == 13
        assert len(cache.block_tables[seq]) == 5  # ceil(13 / 3)
        assert _scattered(cache.block_tables[seq])
        wrong, _ = gather_in_pool_order(cache, seq, 0)
        assert not torch.equal(wrong, expected)  # the table matters
    assert cache.blocks_in_use == 10 and len(cache.free_blocks) == 2


def test_freed_blocks_are_reused_in_table_order():
    cache = PagedKVCache(n_layers=1, n_heads=1, d_head=2, block_size=2, num_blocks=8)
    for seq, T in ((0, 3), (1, 5), (2, 1)):
        cache.append(seq, 0, torch.randn(1, 1, T, 2), torch.randn(1, 1, T, 2))
    freed = cache.block_tables[1]
    assert freed == [2, 3, 4] and cache.blocks_in_use == 6
    cache.free(1)
    assert cache.blocks_in_use == 3 and 1 not in cache.block_tables
    assert cache.length(1) == 0
    cache.append(3, 0, torch.randn(1, 1, 6, 2), torch.randn(1, 1, 6, 2))
    assert cache.block_tables[3] == freed  # the freed blocks first, in their old order
    with pytest.raises(ValueError, match="sequence 1 holds no blocks .*freed already"):
        cache.free(1)


def test_running_out_of_blocks_names_free_needed_and_the_fix():
    cache = PagedKVCache(n_layers=1, n_heads=1, d_head=2, block_size=4, num_blocks=3)
    cache.append(0, 0, torch.randn(1, 1, 8, 2), torch.randn(1, 1, 8, 2))
    with pytest.raises(RuntimeError, match=r"needs 2 more block\(s\) of 4 positions, but "
                                           r"only 1 of 3 are free: make the pool bigger "
                                           r".*smaller batch"):
        cache.append(1, 0, torch.randn(1, 1, 5, 2), torch.randn(1, 1, 5, 2))
    assert 1 not in cache.block_tables and cache.blocks_in_use == 2  # nothing half-done


# ---------------------------------------------------------------------- parity with ch. 7
@pytest.mark.parametrize("block_size", [1, 3, 4, 5, 16])
def test_greedy_tokens_equal_generate_on_each_prompt_alone(device, block_size):
    model = _model().to(device)
    prompts = _prompts(device)
    sequences, cache = paged_generate(model, prompts, N_NEW, block_size=block_size)
    for prompt, row in zip(prompts, sequences):
        no_cache = generate(model, prompt[None], N_NEW, greedy=True, use_cache=False)[0]
        contiguous = generate(model, prompt[None], N_NEW, greedy=True)[0]  # a KVCache
        assert torch.equal(row, no_cache) and torch.equal(row, contiguous)
    assert len(set(sequences[3][-N_NEW:].tolist())) > 3  # the tokens vary: a real check
    if block_size < 16:  # decoding in turn interleaves the sequences' blocks in the pool
        assert any(_scattered(table) for table in cache.block_tables.values())


def test_tokens_hold_with_a_shuffled_pool_and_fail_in_pool_order(model, monkeypatch):
    prompts = _prompts()
    expected = [generate(model, p[None], N_NEW, greedy=True)[0] for p in prompts]
    for_model = PagedKVCache.for_model.__func__
    monkeypatch.setattr(PagedKVCache, "for_model", classmethod(
        lambda cls, *args: _shuffled(for_model(cls, *args))))
    sequences, cache = paged_generate(model, prompts, N_NEW, block_size=3)
    tables = cache.block_tables.values()
    assert all(table != sorted(table) for table in tables if len(table) > 1)
    assert all(torch.equal(a, b) for a, b in zip(sequences, expected))
    monkeypatch.setattr(PagedKVCache, "gather", gather_in_pool_order)
    wrong, _ = paged_generate(model, prompts, N_NEW, block_size=3)
    assert not all(torch.equal(a, b) for a, b in zip(wrong, expected))


@torch.no_grad()
def step_logits_gap(model: GPT, cache: PagedKVCache) -> float:
    """The largest |paged - contiguous| logit over N_NEW greedy steps of every prompt, the
    sequences decoded in turn, each step's tokens from the contiguous cache."""
    prompts = _prompts()
    contiguous = [model.new_kv_cache() for _ in prompts]
    fed = [p[None] for p in prompts]  # (1, T): the prompt, then one token per step
    gap = 0.0
    for _ in range(N_NEW):
        for b in range(len(prompts)):
            reference, _ = model(fed[b], kv_cache=contiguous[b])  # (1, T, V)
            paged, _ = model(fed[b], kv_cache=cache.layers(b))  # (1, T, V)
            gap = max(gap, (paged - reference).abs().max().item())
            fed[b] = reference[:, -1:].argmax(dim=-1)  # (1, 1)
    return gap


@pytest.mark.parametrize("block_size", [1, 3, 4, 16])
def test_logits_at_every_step_equal_the_contiguous_cache(model, block_size, monkeypatch):
    cache = _shuffled(PagedKVCache.for_model(model, block_size, num_blocks=200))
    assert step_logits_gap(model, cache) <= 1e-5
    assert all(_scattered(t) for t in cache.block_tables.values() if len(t) > 1)
    monkeypatch.setattr(PagedKVCache, "gather", gather_in_pool_order)
    wrong = _shuffled(PagedKVCache.for_model(model, block_size, num_blocks=200))
    assert step_logits_gap(model, wrong) > 1e-2  # the same check catches a wrong gather


def test_sampling_is_reproducible_and_top_k_1_is_greedy(model):
    prompts = _prompts()
    greedy, _ = paged_generate(model, prompts, N_NEW, block_size=4)

    def sample(**options):
        generator = torch.Generator().manual_seed(5)
        return paged_generate(model, prompts, N_NEW, block_size=4, greedy=False,
                              generator=generator, **options)[0]

    first, second = sample(temperature=0.8), sample(temperature=0.8)
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    assert not all(torch.equal(a, b) for a, b in zip(first, greedy))  # it did sample
    assert all(torch.equal(a, b) for a, b in zip(sample(top_k=1), greedy))


# ------------------------------------------------------------------------------- memory
def test_memory_of_the_three_layouts_by_hand():
    memory = kv_cache_memory([5, 1, 8], block_size=4, max_length=16)
    assert (memory.needed, memory.padded, memory.static, memory.paged) == (14, 24, 48, 20)
    assert memory.waste == {"padded": 10, "static": 34, "paged": 6}
    assert kv_cache_memory([5, 1, 8], block_size=1, max_length=8).waste["paged"] == 0


@pytest.mark.parametrize("block_size", [1, 3, 16])
def test_the_paged_count_is_what_a_run_allocates(model, block_size):
    prompts = _prompts()
    _, cache = paged_generate(model, prompts, N_NEW, block_size=block_size)
    lengths = [len(p) + N_NEW - 1 for p in prompts]  # the last token is never fed back
    assert [cache.length(b) for b in range(len(prompts))] == lengths
    memory = kv_cache_memory(lengths, block_size, model.config.context_length)
    assert memory.paged == cache.blocks_in_use * block_size
    assert cache.free_blocks == []  # num_blocks=None: exactly what the run needs
    assert memory.waste["paged"] <= len(prompts) * (block_size - 1)
    pool_bytes = sum(k.nbytes + v.nbytes for k, v in zip(cache.keys, cache.values))
    assert pool_bytes == cache.num_blocks * block_size * slot_bytes(model)
    for b in range(len(prompts)):
        cache.free(b)
    assert sorted(cache.free_blocks) == list(range(cache.num_blocks))


# --------------------------------------------------------------------------- odd inputs
def test_no_new_tokens_returns_the_prompts(model):
    prompts = _prompts()
    sequences, cache = paged_generate(model, prompts, 0, block_size=4)
    assert all(torch.equal(a, b) for a, b in zip(sequences, prompts))
    assert cache.blocks_in_use == 0


def test_a_prompt_of_the_whole_context_gets_one_token(model):
    prompt = torch.arange(32)
    (row,), _ = paged_generate(model, [prompt], 1, block_size=5)
    assert torch.equal(row, generate(model, prompt[None], 1, greedy=True)[0])


def test_nan_logits_raise_naming_the_sequence(model):
    broken = copy.deepcopy(model)
    with torch.no_grad():
        broken.ln_f.weight[0] = float("nan")
    with pytest.raises(ValueError, match=r"logits are not finite \(row 0 of 5"):
        paged_generate(broken, _prompts(), 3, block_size=4)


EMPTY = torch.tensor([], dtype=torch.long)


@pytest.mark.parametrize("kwargs, match", [
    (dict(block_size=0), r"paged_generate.block_size=0 must be a positive int"),
    (dict(block_size=2.5), r"block_size=2.5 must be an int \(float given\)"),
    (dict(block_size="4"), r"block_size='4' must be an int \(str given\)"),
    (dict(num_blocks=0), r"num_blocks=0 must be a positive int"),
    (dict(num_blocks=5), r"num_blocks=5 is too few: .*num_blocks >= 22 .*smaller batch"),
    (dict(max_new_tokens=-1), r"max_new_tokens must be an integer >= 0"),
    (dict(max_new_tokens=23), r"prompt 3 \(11 tokens\) plus max_new_tokens=23 needs 33 "
                              r"cached positions, more than context_length=32.*at most 22"),
    (dict(prompts=[torch.tensor([1, 2]), EMPTY]), r"prompt 1 is empty"),
    (dict(prompts=[torch.arange(40)]), r"prompt 0 has 40 tokens, more than the model's "
                                       r"context_length=32 \(the cache's block_size"),
    (dict(prompts=torch.ones(2, 3, dtype=torch.long)), r"prompts must be a non-empty list"),
    (dict(prompts=[]), r"prompts must be a non-empty list"),
    (dict(prompts=[torch.tensor([1.0, 2.0])]), r"prompt 0 must be a 1-D tensor of integer"),
    (dict(prompts=[[1, 2]]), r"prompt 0 must be a 1-D tensor .*got list"),
    (dict(prompts=[torch.tensor([1, 97])]), r"token ids must be in \[0, 97\)"),
])
def test_bad_arguments_to_paged_generate(model, kwargs, match):
    arguments = dict(prompts=_prompts(), max_new_tokens=N_NEW, block_size=4) | kwargs
    with pytest.raises(ValueError, match=match):
        paged_generate(model, **arguments)


def test_bad_arguments_to_the_cache_and_the_memory_count():
    with pytest.raises(ValueError, match=r"PagedKVCache.block_size=0 must be a positive"):
        PagedKVCache(n_layers=1, n_heads=1, d_head=2, block_size=0, num_blocks=4)
    cache = PagedKVCache(n_layers=1, n_heads=2, d_head=4, block_size=2, num_blocks=4)
    bad = torch.zeros(2, 2, 3, 4)
    with pytest.raises(ValueError, match=r"shape \(1, 2, T, 4\), got \(2, 2, 3, 4\)"):
        cache.append(0, 0, bad, bad)
    with pytest.raises(ValueError, match=r"layer=1 must be an int in \[0, 1\)"):
        cache.append(0, 1, bad[:1], bad[:1])
    with pytest.raises(ValueError, match=r"PagedKVCache.gather: layer=5 must be an int"):
        cache.gather(0, 5)
    with pytest.raises(ValueError, match=r"sequence 7 is not in the cache"):
        cache.gather(7, 0)
    with pytest.raises(ValueError, match=r"block_size=-2 must be a positive int"):
        kv_cache_memory([3], block_size=-2, max_length=8)
    with pytest.raises(ValueError, match=r"lengths\[1\]=-1 must be an int >= 0"):
        kv_cache_memory([3, -1], block_size=2, max_length=8)
    with pytest.raises(ValueError, match=r"lengths=\[\] must be a non-empty list"):
        kv_cache_memory([], block_size=2, max_length=8)
    with pytest.raises(ValueError, match=r"9 positions does not fit .*max_length=8"):
        kv_cache_memory([9], block_size=2, max_length=8)
    with pytest.raises(ValueError, match=r"PagedKVCache.length: layer=5 must be in "
                                         r"\[-1, 1\)"):
        cache.length(0, layer=5)


def test_an_empty_append_to_a_new_sequence_gathers_no_positions():
    """A sequence with no block yet: the table is an empty long tensor, not a float one."""
    cache = PagedKVCache(n_layers=1, n_heads=2, d_head=4, block_size=4, num_blocks=3)
    cache.append(0, 0, torch.zeros(1, 2, 0, 4), torch.zeros(1, 2, 0, 4))
    keys, values = cache.gather(0, 0)
    assert keys.shape == values.shape == (1, 2, 0, 4) and cache.blocks_in_use == 0


def test_a_grouped_query_llama_caches_its_kv_heads_and_decodes_as_generate():
    """Llama with 4 query heads and 1 key/value head: a slot is 2 x 2 layers x 1 head x 8
    dimensions x 4 bytes = 128 bytes (512 if every query head were cached), and the paged
    tokens are generate's."""
    from gpt_from_scratch.modern import Llama, LlamaConfig
    torch.manual_seed(0)
    llama = Llama(LlamaConfig(vocab_size=16, context_length=16, d_model=32, n_layers=2,
                              n_heads=4, n_kv_heads=1, d_ff=64)).eval()
    assert slot_bytes(llama) == 2 * 2 * 1 * 8 * 4
    prompts = [torch.tensor([1, 2]), torch.tensor([3, 4, 5, 6, 7])]
    paged, cache = paged_generate(llama, prompts, 6, block_size=4)
    assert cache.n_heads == 1
    for sequence, prompt in zip(paged, prompts):
        assert torch.equal(sequence, generate(llama, prompt[None], 6, greedy=True)[0])


def test_an_append_that_fails_changes_nothing():
    """Another dtype is refused before a block is taken: no table, no length, no block."""
    cache = PagedKVCache(n_layers=1, n_heads=2, d_head=4, block_size=2, num_blocks=4)
    good, wide = torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4, dtype=torch.float64)
    for k, v in ((wide, wide), (good, wide)):
        with pytest.raises(ValueError,
                           match=r"must match the pool \(torch.float32 on cpu\)"):
            cache.append(7, 0, k, v)
    assert cache.blocks_in_use == 0 and 7 not in cache.block_tables
    assert cache.length(7) == 0
