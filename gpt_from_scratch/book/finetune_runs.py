"""Chapter 9's fine-tuning runs as functions: one classifier run, the bag-of-tokens baseline, the
table of every method, for the chapter's backbone and for the reference run's, and the learning curve
that asks whether pretraining helps: pretrained backbones (one recipe, several seeds) against the same
network from a random initialization, on few and many labelled speeches.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from ..finetune import (
    GPTClassifier,
    SpeakerData,
    Split,
    accuracy,
    bag_of_tokens,
    fit_linear,
    fit_linears,
    majority_accuracy,
    pooled_features,
    set_trainable,
    train_classifier,
)
from ..lora import apply_lora, count_trainable
from ..model import GPT
from .corpus_vocab import CorpusVocabGPT
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


def random_like(model: CorpusVocabGPT, seed: int) -> CorpusVocabGPT:
    """The network of ``model`` (same config, same corpus vocabulary) from a fresh random
    initialization (``GPT``'s, from ``seed``): what fine-tuning starts from without pretraining."""
    torch.manual_seed(seed)
    return CorpusVocabGPT(GPT(model.compact().config), model.vocab).eval()


def few_labels(labels: torch.Tensor, n: int, seed: int) -> torch.Tensor:
    """Indices of at most ``n`` examples of each class of ``labels``, drawn with ``seed``."""
    g = torch.Generator().manual_seed(seed)
    picks = []
    for c in labels.unique().tolist():
        where = (labels == c).nonzero().flatten()
        picks.append(where[torch.randperm(len(where), generator=g)[:n]])
    return torch.cat(picks)


def _linear_accuracy(train_X, train_y, test_X, test_y, seed: int, steps: int) -> float:
    """Test accuracy of logistic regression (``fit_linear``, ``steps`` passes) from ``seed``."""
    torch.manual_seed(seed)
    head = nn.Linear(train_X.shape[1], int(test_y.max()) + 1)
    fit_linear(head, train_X, train_y, steps)
    with torch.no_grad():
        return (head(test_X).argmax(-1) == test_y).float().mean().item()


def _linear_accuracies(runs: list[tuple], steps: int) -> list[float]:
    """``_linear_accuracy`` of each ``(train_X, train_y, test_X, test_y, seed)``, features of
    one width, fitted all at once (``fit_linears``)."""
    heads = []
    for train_X, _, _, test_y, seed in runs:
        torch.manual_seed(seed)
        heads.append(nn.Linear(train_X.shape[1], int(test_y.max()) + 1))
    fit_linears(heads, torch.stack([run[0] for run in runs]),
                torch.stack([run[1] for run in runs]), steps)
    with torch.no_grad():
        return [(head(test_X).argmax(-1) == test_y).float().mean().item()
                for head, (_, _, test_X, test_y, _) in zip(heads, runs)]


def learning_curve(backbones: list[CorpusVocabGPT], data: SpeakerData, sizes=(8, 32, 128),
                   seeds: int = 20, n_random: int = 5) -> dict:
    """Head-only classifiers (mean pooling) trained on ``n`` speeches per speaker, for each ``n`` of
    ``sizes``, on three inputs: the features of each pretrained model of ``backbones`` (one recipe
    trained from several seeds), those of the same network randomly initialised (``n_random``
    initializations, used in turn), and the bag of tokens.

    Each of ``seeds`` draws its own ``n`` speeches per speaker (``few_labels``); every classifier of
    a draw sees the same speeches and is scored on the whole test split. A draw's ``pretrained``
    accuracy is the mean over the backbones, so that no verdict rests on one training run (another
    CPU's arithmetic trains another backbone); ``per_backbone`` keeps each one's. Returns
    ``{"sizes": [...], "pretrained": [[acc per seed] per size], "random": ..., "bag": ...,
    "per_backbone": [[[acc per seed] per backbone] per size]}``.
    """
    if not backbones:
        raise ValueError("learning_curve: backbones is empty: pass a list of pretrained models "
                         "(the chapter's backbone and the same recipe from other seeds)")
    first = backbones[0]
    if any(m.compact().config != first.compact().config or not torch.equal(m.vocab, first.vocab)
           for m in backbones[1:]):
        raise ValueError(f"learning_curve: the {len(backbones)} backbones differ in shape or "
                         "vocabulary: pass one recipe trained from several seeds, so that the "
                         "random network stands for every one of them")

    def features(m: GPT) -> tuple[torch.Tensor, torch.Tensor]:
        clf = GPTClassifier(m, len(data.classes), pool="mean", start_token=EOT)
        return pooled_features(clf, data.train), pooled_features(clf, data.test)

    pretrained = [features(m) for m in backbones]
    randoms = [features(random_like(first, seed=1000 + k)) for k in range(n_random)]
    y, test_y = data.train.labels, data.test.labels
    curve = dict(sizes=list(sizes), pretrained=[], random=[], bag=[], per_backbone=[])
    for n in sizes:  # every draw's heads on the networks' features fitted at once
        picks = [few_labels(y, n, seed) for seed in range(seeds)]
        runs = [(X[pick], y[pick], test_X, test_y, seed)
                for seed, pick in enumerate(picks)
                for X, test_X in pretrained + [randoms[seed % n_random]]]
        accs = _linear_accuracies(runs, HEAD_STEPS)  # per draw: each backbone's, the random's
        stride = len(backbones) + 1
        each = [accs[k::stride] for k in range(len(backbones))]
        curve["pretrained"].append([sum(draw) / len(draw) for draw in zip(*each)])
        curve["per_backbone"].append(each)
        curve["random"].append(accs[len(backbones)::stride])
        bags = []
        for seed, pick in enumerate(picks):  # a vocabulary of each draw's own: one at a time
            few = Split(data.train.ids[pick], data.train.lengths[pick], y[pick], [])
            vocab = torch.unique(few.ids[few.real()])
            bags.append(_linear_accuracy(bag_of_tokens(few, vocab), y[pick],
                                         bag_of_tokens(data.test, vocab), test_y, seed,
                                         BAG_STEPS))
        curve["bag"].append(bags)
    return curve
