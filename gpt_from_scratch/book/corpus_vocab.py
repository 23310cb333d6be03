"""Chapter 8 — a GPT that keeps GPT-2's token ids but learns only the tokens its corpus uses.

Tiny Shakespeare's training split uses 11,234 of GPT-2's 50,257 tokens. A model trained on it with
the full vocabulary spends almost all of its time in the 50,257-way output layer, computing logits
for tokens it never sees, only to learn that they are unlikely. ``CorpusVocabGPT`` trains on the
*corpus vocabulary* instead: the tokens of the training text, plus one ``<unk>`` row that stands for
every other token, and reads and writes GPT-2's ids through a lookup table, so that a chapter can
tokenize its prompts with GPT-2's BPE and analyse the model exactly as it analyses GPT-2.

A token outside the corpus vocabulary is read as ``<unk>`` (it is not an error: the validation text
and a reader's prompts contain a few), and the output's ``<unk>`` probability is shared equally by
all of those tokens, so the logits over GPT-2's 50,257 tokens still give a proper distribution.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch
from torch import Tensor, nn

from ..model import GPT

GPT2_VOCAB_SIZE = 50_257


def corpus_vocabulary(train_ids, extra: tuple[int, ...] = ()) -> Tensor:
    """The sorted GPT-2 ids that occur in ``train_ids`` (an array of token ids), plus ``extra`` ones."""
    ids = np.unique(np.concatenate([np.asarray(train_ids, dtype=np.int64), np.asarray(extra, dtype=np.int64)]))
    if ids.size == 0 or ids[0] < 0 or ids[-1] >= GPT2_VOCAB_SIZE:
        raise ValueError(f"token ids must be in [0, {GPT2_VOCAB_SIZE}), got {ids[:1]} .. {ids[-1:]}: "
                         "pass GPT-2 token ids")
    return torch.from_numpy(ids)


def compact_ids(vocab: Tensor) -> Tensor:
    """(50,257,) lookup table: GPT-2 id -> row in the corpus vocabulary; ``len(vocab)`` (``<unk>``) for
    every token outside it. Index it with GPT-2 ids (a tensor, or a numpy array via ``.numpy()``)."""
    table = torch.full((GPT2_VOCAB_SIZE,), len(vocab), dtype=torch.long)
    table[vocab] = torch.arange(len(vocab))
    return table


class MappedEmbedding(nn.Module):
    """``wte`` of a ``CorpusVocabGPT``: GPT-2 ids (B, T) -> rows of the corpus embedding (B, T, D)."""

    def __init__(self, embedding: nn.Embedding, table: Tensor):
        super().__init__()
        self.embedding = embedding
        self.register_buffer("table", table, persistent=False)

    @property
    def weight(self) -> Tensor:
        return self.embedding.weight  # (V_corpus + 1, D)

    def forward(self, idx: Tensor) -> Tensor:
        return self.embedding(self.table[idx])  # (B, T) GPT-2 ids -> (B, T) rows -> (B, T, D)


class ExpandedHead(nn.Module):
    """``lm_head`` of a ``CorpusVocabGPT``: (B, T, D) -> logits over GPT-2's 50,257 tokens.

    A corpus token keeps its logit; each of the n tokens outside the corpus gets ``<unk>``'s logit
    minus ln n, so that together they take exactly ``<unk>``'s probability.
    """

    def __init__(self, head: nn.Linear, table: Tensor):
        super().__init__()
        self.head = head
        unknown = table == head.out_features - 1  # (50,257,): the tokens read as <unk>
        offset = torch.zeros(len(table))
        offset[unknown] = -math.log(max(int(unknown.sum()), 1))
        self.register_buffer("table", table, persistent=False)
        self.register_buffer("offset", offset, persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        logits = self.head(x)  # (B, T, V_corpus + 1)
        return logits.index_select(-1, self.table) + self.offset  # (B, T, 50,257)


class CorpusVocabGPT(GPT):
    """A ``GPT`` trained on a corpus vocabulary, read and written in GPT-2's ids.

    It takes over the modules of ``compact`` (a ``GPT`` whose ``vocab_size`` is ``len(vocab) + 1``,
    the last row ``<unk>``): the same weights, so ``attention_maps``, ``generate`` and
    ``model.blocks[l]`` work as for any ``GPT``, while ``config.vocab_size`` is GPT-2's 50,257.
    """

    def __init__(self, compact: GPT, vocab: Tensor):
        nn.Module.__init__(self)
        if compact.config.vocab_size != len(vocab) + 1:
            raise ValueError(f"the model has {compact.config.vocab_size} token rows, the vocabulary "
                             f"{len(vocab)} tokens: it needs len(vocab) + 1 rows (the last one <unk>)")
        table = compact_ids(vocab)
        self.config = dataclasses.replace(compact.config, vocab_size=GPT2_VOCAB_SIZE)
        self.register_buffer("vocab", vocab, persistent=False)  # (V_corpus,) sorted GPT-2 ids
        self.wte = MappedEmbedding(compact.wte, table)
        self.wpe, self.drop, self.blocks, self.ln_f = compact.wpe, compact.drop, compact.blocks, compact.ln_f
        self.lm_head = ExpandedHead(compact.lm_head, table)

    def in_vocabulary(self, idx: Tensor) -> Tensor:
        """True where a GPT-2 id of ``idx`` is in the corpus vocabulary (False: read as ``<unk>``)."""
        return self.wte.table[idx] < len(self.vocab)

    def compact(self) -> GPT:
        """The ``GPT`` over the corpus vocabulary inside this model, sharing its modules (Chapter 9).

        It reads and predicts rows of the corpus vocabulary (``compact_ids(vocab)[gpt2_ids]``), not
        GPT-2's ids: its output layer has ``len(vocab) + 1`` rows instead of 50,257, so training it
        costs a fraction, and what it learns (a LoRA adapter, say) is this model's too.
        """
        compact = GPT.__new__(GPT)
        nn.Module.__init__(compact)
        compact.config = dataclasses.replace(self.config, vocab_size=len(self.vocab) + 1)
        compact.wte, compact.wpe, compact.drop = self.wte.embedding, self.wpe, self.drop
        compact.blocks, compact.ln_f, compact.lm_head = self.blocks, self.ln_f, self.lm_head.head
        return compact
