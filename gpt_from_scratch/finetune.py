"""Chapter 9 — fine-tuning: a speaker-classification task from Tiny Shakespeare, and a classifier.

``parse_speeches`` cuts the play script into ``(speaker, speech)`` pairs; ``speaker_dataset`` keeps the
most frequent speakers, removes the speaker line and the characters' names from the speeches, encodes
them and splits them by speech. ``GPTClassifier`` puts a linear head on the hidden state of a ``GPT``
at the last real token, or on the mean over the speech's tokens; ``set_trainable`` chooses what trains
(head only, last blocks, everything) and ``train_classifier`` / ``accuracy`` train and score it.
``pooled_features`` and ``fit_linear`` train a head alone on features computed once.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .model import GPT
from .utils import check_float, check_int

_SPEAKER_LINE = re.compile(r"([A-Z][A-Za-z' ]*?):")
NAME_MASK = "NAME"  # what stands in for a character's name inside a speech


def parse_speeches(text: str) -> list[tuple[str, str]]:
    """Tiny Shakespeare as ``(speaker, speech)`` pairs, in order (Chapter 9).

    The corpus is a play script: blocks separated by a blank line, each starting with a line
    ``NAME:``. The speech is the rest of the block, its lines joined by newlines.
    """
    out = []
    for block in text.split("\n\n"):
        lines = block.strip("\n").split("\n")
        match = _SPEAKER_LINE.fullmatch(lines[0])
        if match and len(lines) > 1:
            out.append((match[1], "\n".join(lines[1:])))
    if not out:
        raise ValueError("no speech found: the text should be a play script whose blocks start with a line 'NAME:'")
    return out


def name_words(speeches: list[tuple[str, str]]) -> set[str]:
    """The words that are proper names of the play's characters (Chapter 9): each word of a speaker's
    name, capitalised (``"Romeo"``), that the speeches write in lower case less often than capitalised
    (so ``"King"`` and ``"First"`` stay: ``"king"`` and ``"first"`` are common words)."""
    seen = Counter(w for _, s in speeches for w in re.findall(r"[A-Za-z']+", s))
    words = {w.capitalize() for speaker, _ in speeches for w in speaker.split()}
    return {w for w in words if len(w) > 1 and seen[w.lower()] < seen[w]}


def mask_names(speech: str, names: set[str], mask: str = NAME_MASK) -> str:
    """``speech`` with each of ``names`` (whole words, also in capitals) replaced by ``mask`` (Chapter 9)."""
    if not names:
        return speech
    pattern = r"\b(" + "|".join(sorted(map(re.escape, names | {n.upper() for n in names}))) + r")\b"
    return re.sub(pattern, mask, speech)


@dataclass
class Split:
    """One split of the classification data: token ids (N, T) padded at the end, lengths, labels, texts."""

    ids: Tensor  # (N, T) int64, padded with pad_id after each speech
    lengths: Tensor  # (N,) real tokens per speech (>= 1)
    labels: Tensor  # (N,) class index
    texts: list[str]

    def __len__(self) -> int:
        return len(self.labels)

    def real(self) -> Tensor:
        """(N, T) True at the speeches' tokens, False at the padding."""
        return torch.arange(self.ids.shape[1]) < self.lengths[:, None]


@dataclass
class SpeakerData:
    """Chapter 9's task: which of ``classes`` speaks this (name-masked) speech?"""

    classes: list[str]
    train: Split
    val: Split
    test: Split
    masked_names: set[str]

    def counts(self) -> dict[str, list[int]]:
        """Speeches per class in each split: ``{"train": [n_0, n_1, ...], "val": ..., "test": ...}``."""
        return {name: torch.bincount(s.labels, minlength=len(self.classes)).tolist()
                for name, s in (("train", self.train), ("val", self.val), ("test", self.test))}


def speaker_dataset(text: str, encoding, n_speakers: int = 8, max_tokens: int = 64, val_frac: float = 0.1,
                    test_frac: float = 0.2, seed: int = 0, pad_id: int = 50_256,
                    min_tokens: int = 1) -> SpeakerData:
    """The speeches of the ``n_speakers`` most frequent speakers, split by speech (Chapter 9).

    The speaker line is removed and every character's name (``name_words``) becomes ``NAME``, so that
    "O Romeo, Romeo!" does not give Juliet away. Speeches of fewer than ``min_tokens`` tokens ("Ay.")
    are dropped; each of the others keeps its first ``max_tokens`` tokens. The ``n_speakers`` are
    the most frequent ones before dropping.
    Speeches are shuffled with ``seed``, then each class is cut into test, validation and training
    parts, so all three splits keep the class proportions.
    """
    n_speakers = check_int("speaker_dataset", "n_speakers", n_speakers, minimum=2)
    max_tokens = check_int("speaker_dataset", "max_tokens", max_tokens, minimum=1)
    min_tokens = check_int("speaker_dataset", "min_tokens", min_tokens, minimum=1)
    if min_tokens > max_tokens:
        raise ValueError(f"min_tokens={min_tokens} > max_tokens={max_tokens} would keep no speech: "
                         "choose min_tokens <= max_tokens")
    val_frac = check_float("speaker_dataset", "val_frac", val_frac, 0.0, 1.0, low_open=True)
    test_frac = check_float("speaker_dataset", "test_frac", test_frac, 0.0, 1.0, low_open=True)
    if val_frac + test_frac >= 1:
        raise ValueError(f"val_frac + test_frac = {val_frac + test_frac:g} leaves nothing to train on: keep it below 1")
    speeches = parse_speeches(text)
    counts = Counter(speaker for speaker, _ in speeches)
    if len(counts) < n_speakers:
        raise ValueError(f"n_speakers={n_speakers} but the text has only {len(counts)} speakers: choose fewer")
    classes = [speaker for speaker, _ in counts.most_common(n_speakers)]
    names = name_words(speeches)
    g = torch.Generator().manual_seed(seed)
    parts: dict[str, list[tuple[str, int]]] = {"train": [], "val": [], "test": []}
    for label, speaker in enumerate(classes):
        mine = [mask_names(s, names) for who, s in speeches if who == speaker]
        mine = [s for s in mine if len(encoding.encode_ordinary(s)) >= min_tokens]
        order = torch.randperm(len(mine), generator=g).tolist()
        n_test, n_val = round(test_frac * len(mine)), round(val_frac * len(mine))
        cuts = {"test": order[:n_test], "val": order[n_test:n_test + n_val], "train": order[n_test + n_val:]}
        for split, indices in cuts.items():
            parts[split] += [(mine[i], label) for i in indices]
    splits = {}
    for split, items in parts.items():
        order = torch.randperm(len(items), generator=g).tolist()  # mix the classes
        items = [items[i] for i in order]
        encoded = [encoding.encode_ordinary(s)[:max_tokens] for s, _ in items]
        ids = torch.full((len(items), max_tokens), pad_id, dtype=torch.long)
        for row, tokens in enumerate(encoded):
            ids[row, :len(tokens)] = torch.tensor(tokens)
        splits[split] = Split(ids, torch.tensor([max(len(t), 1) for t in encoded]),
                              torch.tensor([label for _, label in items]), [s for s, _ in items])
    return SpeakerData(classes, splits["train"], splits["val"], splits["test"], names)


def majority_accuracy(data: SpeakerData) -> float:
    """Test accuracy of always answering the training set's most frequent class (Chapter 9)."""
    majority = torch.bincount(data.train.labels).argmax()
    return (data.test.labels == majority).float().mean().item()


def bag_of_tokens(split: Split, vocab: Tensor) -> Tensor:
    """(N, len(vocab)) counts of each token of ``vocab`` in each speech; other tokens and padding are left
    out (Chapter 9). ``vocab`` is usually the tokens that occur in the training split."""
    real = split.real()  # (N, T)
    column = torch.full((int(max(vocab.max(), split.ids.max())) + 1,), -1)
    column[vocab] = torch.arange(len(vocab))
    cols = column[split.ids]  # (N, T): -1 where the token is not in vocab
    keep = real & (cols >= 0)
    counts = torch.zeros(len(split), len(vocab))
    counts.scatter_add_(1, cols.clamp(min=0), keep.float())
    return counts


def hidden_states(model: GPT, idx: Tensor) -> Tensor:
    """(B, T) -> (B, T, D): the final LayerNorm's output, what GPT's ``lm_head`` reads (Chapter 9)."""
    x = model._embed(idx)  # (B, T, D)
    for block in model.blocks:
        x = block(x)
    return model.ln_f(x)


POOLS = ("last", "mean")


class GPTClassifier(nn.Module):
    """A ``GPT`` with a linear head on one vector per sequence (Chapter 9).

    ``pool="last"``: the hidden state of each sequence's last real token. With causal attention it is
    the only one that has read the whole speech; tokens after it (padding) cannot change it, so
    sequences padded at the end are classified as if unpadded. ``pool="mean"``: the mean of the
    hidden states of the real tokens. ``start_token`` (e.g. ``<|endoftext|>`` for Chapter 8's
    offline model, trained with it at the start of every window) is put in front of every sequence
    and left out of the mean.
    """

    def __init__(self, model: GPT, n_classes: int, pool: str = "last", start_token: int | None = None):
        super().__init__()
        n_classes = check_int("GPTClassifier", "n_classes", n_classes, minimum=2)
        if pool not in POOLS:
            raise ValueError(f"pool={pool!r} is unknown: choose one of {', '.join(POOLS)}")
        self.model, self.pool, self.start_token = model, pool, start_token
        self.head = nn.Linear(model.config.d_model, n_classes)

    def features(self, idx: Tensor, lengths: Tensor) -> Tensor:
        """(B, T) ids and (B,) lengths -> (B, D): the vector the head reads."""
        if (lengths < 1).any() or (lengths > idx.shape[1]).any():
            raise ValueError(f"lengths must be in [1, T={idx.shape[1]}], got values in "
                             f"[{int(lengths.min())}, {int(lengths.max())}]")
        first = 0
        if self.start_token is not None:
            idx = torch.cat([idx.new_full((idx.shape[0], 1), self.start_token), idx], dim=1)  # (B, T+1)
            first = 1
        h = hidden_states(self.model, idx)[:, first:]  # (B, T, D): the speech's positions
        if self.pool == "last":
            return h[torch.arange(idx.shape[0], device=idx.device), lengths - 1]  # (B, D)
        real = torch.arange(h.shape[1], device=idx.device) < lengths[:, None]  # (B, T)
        return (h * real[..., None]).sum(1) / lengths[:, None]  # (B, D)

    def forward(self, idx: Tensor, lengths: Tensor) -> Tensor:
        """(B, T) ids and (B,) lengths -> (B, n_classes) logits."""
        return self.head(self.features(idx, lengths))


@torch.no_grad()
def pooled_features(clf: GPTClassifier, split: Split, batch_size: int = 128) -> Tensor:
    """(N, D) the vectors ``clf``'s head reads, for every speech of ``split``, computed once (Chapter 9)."""
    clf.eval()
    device = next(clf.parameters()).device
    return torch.cat([clf.features(ids.to(device), n.to(device)).cpu()
                      for ids, n in zip(split.ids.split(batch_size), split.lengths.split(batch_size))])


def _adamw_step(optimizer: torch.optim.Optimizer, loss: Tensor, step: int, lr: float) -> float:
    """One optimizer step on ``loss``, after checking it is finite (Chapter 9); returns its value."""
    value = loss.item()
    if not math.isfinite(value):
        raise FloatingPointError(f"the loss is {value} at step {step}: lower the learning rate (lr={lr:g})")
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return value


def fit_linear(linear: nn.Linear, X: Tensor, y: Tensor, steps: int, lr: float = 1e-2,
               weight_decay: float = 1e-2) -> list[float]:
    """Train ``linear`` on fixed features ``X`` (N, F) and labels ``y`` (N,) with AdamW, the whole set
    each step (Chapter 9): logistic regression, the bag-of-tokens baseline and the head-only
    classifier on cached features. Returns the loss of each step."""
    steps = check_int("fit_linear", "steps", steps, minimum=1)
    optimizer = torch.optim.AdamW(linear.parameters(), lr=lr, weight_decay=weight_decay)
    return [_adamw_step(optimizer, F.cross_entropy(linear(X), y), step, lr) for step in range(steps)]


def fit_linears(heads: list[nn.Linear], X: Tensor, y: Tensor, steps: int, lr: float = 1e-2,
                weight_decay: float = 1e-2) -> None:
    """``fit_linear`` for K independent heads at once (Chapter 9): head k on features ``X[k]``
    and labels ``y[k]``, with ``X`` (K, N, F) and ``y`` (K, N); trains ``heads`` in place.

    The heads are stacked into one weight (K, C, F) and one AdamW step trains them all on the
    sum of their losses: each head's gradient is its own loss's (the sum's other terms do not
    depend on it) and AdamW updates each element on its own, so each head follows the path
    ``fit_linear`` gives it, up to the order of float sums (tests/test_finetune.py compares),
    in one step where there were K. It pays where a head is small: Chapter 9's learning curve
    fits 80 heads of 64 features a step, 2-4 times faster; 4,000 features gain nothing.
    """
    steps = check_int("fit_linears", "steps", steps, minimum=1)
    if X.dim() != 3 or y.shape != X.shape[:2] or len(heads) != X.shape[0]:
        raise ValueError(f"fit_linears: features {tuple(X.shape)}, labels {tuple(y.shape)} and "
                         f"{len(heads)} heads: pass X (K, N, F), y (K, N) and K heads")
    shapes = {(head.in_features, head.out_features) for head in heads}
    if len(shapes) != 1 or next(iter(shapes))[0] != X.shape[2]:
        raise ValueError(f"fit_linears: the heads map {sorted(shapes)} (in, out) but the "
                         f"features have {X.shape[2]} columns: pass heads of one shape, "
                         "nn.Linear(F, C), or fit heads of other shapes with fit_linear")
    W = torch.stack([head.weight.detach() for head in heads]).requires_grad_()  # (K, C, F)
    b = torch.stack([head.bias.detach() for head in heads]).requires_grad_()  # (K, C)
    optimizer = torch.optim.AdamW([W, b], lr=lr, weight_decay=weight_decay)
    for step in range(steps):
        logits = torch.baddbmm(b[:, None, :], X, W.transpose(1, 2))  # (K, N, C)
        loss = F.cross_entropy(logits.transpose(1, 2), y, reduction="none").mean(1).sum()
        _adamw_step(optimizer, loss, step, lr)
    with torch.no_grad():
        for head, w, bias in zip(heads, W, b):
            head.weight.copy_(w)
            head.bias.copy_(bias)


TRAINABLE = ("head", "last", "all")


def set_trainable(clf: GPTClassifier, mode: str, n_last: int = 1) -> int:
    """What trains (Chapter 9): ``"head"`` only; ``"last"``: the last ``n_last`` blocks, the final
    LayerNorm and the head; ``"all"``: everything. Returns the number of trainable parameters."""
    if mode not in TRAINABLE:
        raise ValueError(f"mode={mode!r} is unknown: choose one of {', '.join(TRAINABLE)}")
    n_last = check_int("set_trainable", "n_last", n_last, minimum=1)
    n_blocks = len(clf.model.blocks)
    if mode == "last" and n_last > n_blocks:
        raise ValueError(f"set_trainable: n_last={n_last} is more blocks than the model has "
                         f"({n_blocks}): pass n_last <= {n_blocks}, or mode='all' to train everything")
    for p in clf.parameters():
        p.requires_grad_(mode == "all")
    keep = [clf.head]
    if mode == "last":
        keep += [*clf.model.blocks[-n_last:], clf.model.ln_f]
    for module in keep:
        for p in module.parameters():
            p.requires_grad_(True)
    return sum(p.numel() for p in clf.parameters() if p.requires_grad)


def train_classifier(clf: nn.Module, split: Split, steps: int, lr: float = 1e-3, batch_size: int = 32,
                     generator: torch.Generator | None = None) -> list[float]:
    """AdamW on the trainable parameters, ``steps`` random batches; returns the loss of each step (Chapter 9).

    A non-finite loss stops training with a ``FloatingPointError`` naming the step.
    """
    steps = check_int("train_classifier", "steps", steps, minimum=1)
    lr = check_float("train_classifier", "lr", lr, 0.0, low_open=True)
    params = [p for p in clf.parameters() if p.requires_grad]
    if not params:
        raise ValueError("nothing to train: every parameter has requires_grad=False (see set_trainable)")
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    device = params[0].device  # batches go where the model is
    clf.train()
    losses = []
    for step in range(steps):
        rows = torch.randint(len(split), (min(batch_size, len(split)),), generator=generator)
        logits = clf(split.ids[rows].to(device), split.lengths[rows].to(device))  # (B, C)
        losses.append(_adamw_step(optimizer, F.cross_entropy(logits, split.labels[rows].to(device)), step, lr))
    clf.eval()
    return losses


@torch.no_grad()
def predict(clf: nn.Module, split: Split, batch_size: int = 128) -> Tensor:
    """(N,) predicted classes of a split, on the CPU (Chapter 9)."""
    clf.eval()
    device = next(clf.parameters()).device
    out = [clf(ids.to(device), n.to(device)).argmax(-1).cpu()
           for ids, n in zip(split.ids.split(batch_size), split.lengths.split(batch_size))]
    return torch.cat(out)


def accuracy(clf: nn.Module, split: Split) -> float:
    """Share of a split's speeches whose speaker ``clf`` predicts (Chapter 9)."""
    return (predict(clf, split) == split.labels).float().mean().item()
