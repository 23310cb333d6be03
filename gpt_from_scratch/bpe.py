"""Chapter 1b — byte-pair encoding from scratch: the algorithm (Sennrich et al., 2016; byte-level, as GPT-2).

Text is first cut into chunks by GPT-2's pre-tokenization regex (``pretokenize``), so merges never
cross the borders between letters, digits, punctuation and spaces. ``learn_merges`` learns the merges
"replace the adjacent pair (a, b) by the new id c" from a text: the chapter's ``train_bpe``, made fast
by counting each distinct chunk once and by a heap that finds the most frequent pair. ``merge``
applies one. The tokenizer built on them is ``bpe_tokenizer.BPETokenizer``.
"""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from collections.abc import Sequence

import regex

from .tokenizer import GPT2_PATTERN

Pair = tuple[int, int]

_GPT2_SPLITTER = regex.compile(GPT2_PATTERN)


def pretokenize(text: str) -> list[str]:
    """Cut ``text`` into the chunks GPT-2 merges within: words with their leading space, numbers,
    punctuation runs, whitespace runs and the contractions ``'s 't 're 've 'm 'll 'd``.

    The pattern is ``tokenizer.GPT2_PATTERN``, tiktoken's spelling of the regex in GPT-2's ``encoder.py``.
    Joining the chunks gives ``text`` back: ``"".join(pretokenize(text)) == text``.
    """
    return _GPT2_SPLITTER.findall(text)


def pair_counts(ids: Sequence[int], counts: Counter | None = None, weight: int = 1) -> Counter:
    """Add the adjacent pairs of ``ids``, each ``weight`` times, to ``counts`` (a new ``Counter`` if None)."""
    counts = Counter() if counts is None else counts
    for pair in zip(ids, ids[1:]):
        counts[pair] += weight
    return counts


def merge(ids: Sequence[int], pair: Pair, new_id: int) -> list[int]:
    """Replace every occurrence of ``pair`` in ``ids`` by ``new_id``, scanning left to right.

    ``merge([1, 1, 1], (1, 1), 9) == [9, 1]``: an id already merged is not reused.
    """
    out = []
    i = 0
    while i < len(ids):
        if i + 1 < len(ids) and ids[i] == pair[0] and ids[i + 1] == pair[1]:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def learn_merges(text: str, vocab_size: int) -> dict[Pair, int]:
    """The ``vocab_size - 256`` merges ``{(a, b): new_id}`` of ``text``, in the order learned
    (see ``BPETokenizer.train``)."""
    if vocab_size < 256:
        raise ValueError(
            f"vocab_size={vocab_size!r} is smaller than the 256 byte tokens every byte-level tokenizer "
            "starts from: choose vocab_size >= 256 (256 means no merges)"
        )
    chunk_freqs = Counter(pretokenize(text))
    words = [list(chunk.encode("utf-8")) for chunk in chunk_freqs]  # each chunk as a list of ids
    freqs = list(chunk_freqs.values())
    counts: Counter = Counter()  # pair -> occurrences in the whole text
    where: dict[Pair, set[int]] = defaultdict(set)  # pair -> the words it (may) occur in
    for w, ids in enumerate(words):
        pair_counts(ids, counts, freqs[w])
        for pair in zip(ids, ids[1:]):
            where[pair].add(w)

    # A heap of (-count, pair) finds the most frequent pair without scanning all of them each step.
    # Entries go stale when a count changes; a fresh entry is pushed then, and stale ones are skipped.
    heap = [(-count, pair) for pair, count in counts.items()]
    heapq.heapify(heap)
    merges: dict[Pair, int] = {}
    for new_id in range(256, vocab_size):
        if not counts:
            raise ValueError(
                f"the text has no pair left to merge after {len(merges)} merges, so vocab_size={vocab_size} "
                f"cannot be reached: train on a longer text or choose vocab_size <= {256 + len(merges)}"
            )
        while True:  # most frequent pair; ties go to the smallest ids
            neg_count, best = heapq.heappop(heap)
            if counts.get(best) == -neg_count:
                break
        merges[best] = new_id
        changed = set()
        for w in where.pop(best):
            old, words[w] = words[w], merge(words[w], best, new_id)
            for pair in zip(old, old[1:]):  # forget the word's old pairs ...
                counts[pair] -= freqs[w]
                if counts[pair] == 0:
                    del counts[pair]
                changed.add(pair)
            pair_counts(words[w], counts, freqs[w])  # ... and count its new ones
            for pair in zip(words[w], words[w][1:]):
                where[pair].add(w)
                changed.add(pair)
        for pair in changed & counts.keys():
            heapq.heappush(heap, (-counts[pair], pair))
    return merges
