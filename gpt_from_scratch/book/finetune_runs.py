"""Chapter 9's fine-tuning runs as functions: one classifier run, the bag-of-tokens baseline, and
the table of every method, for the chapter's backbone and for the reference run's.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from ..finetune import (
    GPTClassifier,
    SpeakerData,
    accuracy,
    bag_of_tokens,
    fit_linear,
    majority_accuracy,
    pooled_features,
    set_trainable,
    train_classifier,
)
from ..lora import apply_lora, count_trainable
from ..model import GPT
from .offline_model import EOT

HEAD_STEPS = 1000  # full passes of a head-only run, on features computed once
BAG_STEPS = 300


def fine_tune(model: GPT, data: SpeakerData, mode: str, steps: int, lr: float = 1e-3,
              r: int | None = None, pool: str = "mean", device: str = "cpu",
              seed: int = 0) -> dict:
    """Train a fresh classifier on a copy of ``model``: ``mode`` (``set_trainable``), or LoRA of
    rank ``r`` plus the head. A head-only run computes the features once and fits the head on
    them (``HEAD_STEPS`` passes); the others take ``steps`` batches of 16 speeches.

    Returns ``trainable`` (parameters), ``val`` and ``accuracy`` (test).
    """
    torch.manual_seed(seed)
    clf = GPTClassifier(copy.deepcopy(model), len(data.classes), pool=pool,
                        start_token=EOT).to(device)
    if r is None:
        set_trainable(clf, mode)
    else:
        apply_lora(clf.model, r=r, alpha=2 * r)  # the model frozen, the head trainable
    n = count_trainable(clf)
    if mode == "head":
        features = pooled_features(clf, data.train).to(device)  # (N, D)
        fit_linear(clf.head, features, data.train.labels.to(device), HEAD_STEPS, lr=lr)
    else:
        train_classifier(clf, data.train, steps, lr=lr, batch_size=16,
                         generator=torch.Generator().manual_seed(seed))
    return dict(trainable=n, val=accuracy(clf, data.val), accuracy=accuracy(clf, data.test))


def bag_baseline(data: SpeakerData, seed: int = 0) -> dict:
    """Logistic regression on token counts (the tokens of the training split): ``val``, ``accuracy``
    (test) and ``trainable``."""
    vocab = torch.unique(data.train.ids[data.train.real()])
    X = {s: bag_of_tokens(getattr(data, s), vocab) for s in ("train", "val", "test")}
    torch.manual_seed(seed)
    linear = nn.Linear(len(vocab), len(data.classes))
    fit_linear(linear, X["train"], data.train.labels, steps=BAG_STEPS)
    with torch.no_grad():
        acc = {s: (linear(X[s]).argmax(-1) == getattr(data, s).labels).float().mean().item()
               for s in ("val", "test")}
    return dict(trainable=sum(p.numel() for p in linear.parameters()), val=acc["val"],
                accuracy=acc["test"])


METHODS = {  # the chapter's table: name -> fine_tune's arguments
    "head only (last token)": dict(mode="head", lr=1e-2, pool="last"),
    "head only (mean)": dict(mode="head", lr=1e-2),
    "last block + head": dict(mode="last", lr=3e-3),
    "everything": dict(mode="all", lr=3e-4),
    "LoRA r=1 + head": dict(mode="lora", r=1, lr=3e-3),
    "LoRA r=4 + head": dict(mode="lora", r=4, lr=3e-3),
    "LoRA r=16 + head": dict(mode="lora", r=16, lr=3e-3),
}


def finetune_table(model: GPT, data: SpeakerData, steps: int, device: str = "cpu") -> dict:
    """Every method of ``METHODS`` on ``model``, with the majority and bag-of-tokens baselines."""
    rows = {"majority class": dict(trainable=0, val=None, accuracy=majority_accuracy(data)),
            "bag of tokens": bag_baseline(data)}
    for name, kwargs in METHODS.items():
        rows[name] = fine_tune(model, data, steps=steps, device=device, **kwargs)
    return rows
