"""Chapter 1b — learning BPE merges from a text (Sennrich et al., 2016; byte-level, as GPT-2).

``learn_merges`` is the algorithm behind ``BPETokenizer.train``: the chapter's ``train_bpe``, made
fast by counting each distinct chunk once and by a heap that finds the most frequent pair.
"""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict

from .bpe import Pair, merge, pair_counts, pretokenize


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
