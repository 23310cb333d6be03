"""Chapter 9's task and classifier: speeches parsed and split without leaks, names masked, the head
reads the last real token, and set_trainable trains what it says."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from gpt_from_scratch.finetune import (
    GPTClassifier,
    bag_of_tokens,
    fit_linear,
    fit_linears,
    hidden_states,
    majority_accuracy,
    mask_names,
    name_words,
    parse_speeches,
    pooled_features,
    set_trainable,
    speaker_dataset,
    train_classifier,
)
from gpt_from_scratch.model import GPT, GPTConfig
from gpt_from_scratch.tokenizer import gpt2_encoding

PLAY = "\n\n".join(
    [f"ROMEO:\nO Juliet, my {i} loves, my lady.\nAnd more." for i in range(10)]
    + [f"JULIET:\nRomeo, the king {i} is here." for i in range(8)]
    + [f"FIRST CITIZEN:\nFirst, the first King and Romeo {i}." for i in range(6)]
    + ["not a speech", "NURSE:\nAnon, anon!"]
)


def test_parse_speeches_drops_the_speaker_line():
    speeches = parse_speeches(PLAY)
    assert len(speeches) == 25 and speeches[0] == ("ROMEO", "O Juliet, my 0 loves, my lady.\nAnd more.")
    with pytest.raises(ValueError, match="no speech"):
        parse_speeches("just prose\n\nmore prose")


def test_names_are_masked_but_common_words_are_not():
    names = name_words(parse_speeches(PLAY))
    assert {"Romeo", "Juliet"} <= names and not {"First", "Citizen", "King"} & names
    assert mask_names("O Romeo, ROMEO! Romeos", names) == "O NAME, NAME! Romeos"


def test_speaker_dataset_splits_by_speech_keeps_proportions_and_hides_names():
    data = speaker_dataset(PLAY, gpt2_encoding(), n_speakers=3, max_tokens=8, val_frac=0.2, test_frac=0.2)
    assert data.classes == ["ROMEO", "JULIET", "FIRST CITIZEN"]
    assert data.counts() == {"train": [6, 4, 4], "val": [2, 2, 1], "test": [2, 2, 1]}
    texts = [t for s in (data.train, data.val, data.test) for t in s.texts]
    assert len(set(texts)) == len(texts) == 24  # every speech once: no speech in two splits
    assert not any("Romeo" in t or "Juliet" in t for t in texts)
    assert data.train.ids.shape == (14, 8) and (data.train.lengths <= 8).all()
    real = data.train.real()
    assert (data.train.ids[~real] == 50_256).all()
    assert majority_accuracy(data) == pytest.approx(2 / 5)


@pytest.mark.parametrize("kwargs, message", [(dict(n_speakers=9), "only 4 speakers"),
                                             (dict(val_frac=0.5, test_frac=0.5), "nothing to train"),
                                             (dict(max_tokens=0), "positive int"),
                                             (dict(max_tokens=4, min_tokens=5), "min_tokens=5 > max_tokens=4")])
def test_speaker_dataset_refuses_bad_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        speaker_dataset(PLAY, gpt2_encoding(), **kwargs)


def test_speaker_dataset_drops_short_speeches():
    data = speaker_dataset(PLAY, gpt2_encoding(), n_speakers=3, max_tokens=16, min_tokens=12)
    texts = [t for s in (data.train, data.val, data.test) for t in s.texts]
    assert len(texts) == 10 and all(t.startswith("O NAME") for t in texts)  # ROMEO's 13-token speeches only
    assert data.counts()["train"][1:] == [0, 0]


def test_bag_of_tokens_counts_only_real_tokens_of_the_vocabulary():
    data = speaker_dataset(PLAY, gpt2_encoding(), n_speakers=3, max_tokens=8)
    vocab = torch.unique(data.train.ids[data.train.real()])
    counts = bag_of_tokens(data.train, vocab)
    assert counts.shape == (len(data.train), len(vocab))
    torch.testing.assert_close(counts.sum(1), data.train.lengths.float())
    row = data.train.ids[0, :data.train.lengths[0]]
    assert counts[0, (vocab[:, None] == row).any(1)].sum() == len(row)


def test_the_classifier_reads_the_last_real_token_only():
    torch.manual_seed(0)
    clf = GPTClassifier(GPT(GPTConfig.from_preset("tiny")), n_classes=3).eval()
    idx = torch.randint(0, 1000, (2, 10))
    padded = idx.clone()
    padded[0, 6:] = 50_256  # the first sequence has 6 tokens, then padding
    with torch.no_grad():
        logits = clf(padded, torch.tensor([6, 10]))
        alone = clf(idx[:1, :6], torch.tensor([6]))
    torch.testing.assert_close(logits[:1], alone)
    with pytest.raises(ValueError, match="lengths"):
        clf(idx, torch.tensor([0, 3]))


def test_mean_pooling_and_the_start_token():
    torch.manual_seed(0)
    model = GPT(GPTConfig.from_preset("tiny")).eval()
    clf = GPTClassifier(model, n_classes=3, pool="mean", start_token=7).eval()
    idx = torch.randint(0, 1000, (2, 10))
    padded = idx.clone()
    padded[0, 6:] = 50_256
    with torch.no_grad():
        h = hidden_states(model, torch.cat([torch.full((2, 1), 7), idx], dim=1))  # (B, 1 + T, D)
        expected = torch.stack([h[0, 1:7].mean(0), h[1, 1:].mean(0)])  # the start token left out
        torch.testing.assert_close(clf.features(padded, torch.tensor([6, 10])), expected)
    with pytest.raises(ValueError, match="pool='max' is unknown"):
        GPTClassifier(model, n_classes=3, pool="max")


def test_head_on_cached_features_equals_the_classifier():
    data = speaker_dataset(PLAY, gpt2_encoding(), n_speakers=2, max_tokens=8)
    torch.manual_seed(0)
    clf = GPTClassifier(GPT(GPTConfig.from_preset("tiny")), n_classes=2, pool="mean")
    features = pooled_features(clf, data.train)
    assert features.shape == (len(data.train), clf.model.config.d_model)
    losses = fit_linear(clf.head, features, data.train.labels, steps=100)
    assert losses[-1] < losses[0]
    with torch.no_grad():
        torch.testing.assert_close(clf.head(features), clf(data.train.ids, data.train.lengths))
    with pytest.raises(ValueError, match="steps"):
        fit_linear(clf.head, features, data.train.labels, steps=0)


def test_heads_fitted_at_once_follow_the_path_each_takes_alone():
    torch.manual_seed(0)
    X, y = torch.randn(5, 12, 6), torch.randint(0, 3, (5, 12))  # (K, N, F), (K, N)
    alone = [nn.Linear(6, 3) for _ in range(5)]
    together = [copy.deepcopy(head) for head in alone]
    start = copy.deepcopy(together)
    for head, features, labels in zip(alone, X, y):
        fit_linear(head, features, labels, steps=50)
    fit_linears(together, X, y, steps=50)
    for a, b in zip(alone, together):
        torch.testing.assert_close(b.weight, a.weight, atol=1e-5, rtol=0)
        torch.testing.assert_close(b.bias, a.bias, atol=1e-5, rtol=0)
    assert all(not torch.equal(b.weight, s.weight) for b, s in zip(together, start))  # trained
    with pytest.raises(ValueError, match=r"features \(5, 12, 6\), labels \(5, 11\)"):
        fit_linears(together, X, y[:, :11], steps=1)
    with pytest.raises(ValueError, match="heads of one shape"):
        fit_linears(together[:4] + [nn.Linear(7, 3)], X, y, steps=1)
    with pytest.raises(ValueError, match="steps"):
        fit_linears(together, X, y, steps=0)


def test_set_trainable_counts_and_freezes():
    model = GPT(GPTConfig.from_preset("tiny"))
    clf = GPTClassifier(model, n_classes=4)
    D = model.config.d_model
    assert set_trainable(clf, "head") == D * 4 + 4
    block = sum(p.numel() for p in model.blocks[-1].parameters())
    assert set_trainable(clf, "last") == D * 4 + 4 + block + 2 * D
    assert set_trainable(clf, "all") == sum(p.numel() for p in clf.parameters())
    set_trainable(clf, "last")
    assert not model.blocks[0].ln_1.weight.requires_grad and model.blocks[-1].ln_1.weight.requires_grad
    with pytest.raises(ValueError, match="unknown"):
        set_trainable(clf, "lora")
    n_blocks = len(model.blocks)
    assert set_trainable(clf, "last", n_last=n_blocks) < set_trainable(clf, "all")  # embeddings
    with pytest.raises(ValueError, match=rf"n_last=99 is more blocks than the model has \({n_blocks}\)"
                                         rf": pass n_last <= {n_blocks}, or mode='all'"):
        set_trainable(clf, "last", n_last=99)


def test_training_the_head_learns_a_separable_task():
    data = speaker_dataset(PLAY, gpt2_encoding(), n_speakers=2, max_tokens=8)
    torch.manual_seed(0)
    clf = GPTClassifier(GPT(GPTConfig.from_preset("tiny")), n_classes=2)
    set_trainable(clf, "all")
    before = [p.clone() for p in clf.model.parameters()]
    losses = train_classifier(clf, data.train, steps=40, lr=3e-3, generator=torch.Generator().manual_seed(0))
    assert losses[-1] < losses[0] * 0.5
    assert any(not torch.equal(a, b) for a, b in zip(before, clf.model.parameters()))
    set_trainable(clf, "head")
    frozen = [p.clone() for p in clf.model.parameters()]
    train_classifier(clf, data.train, steps=2)
    assert all(torch.equal(a, b) for a, b in zip(frozen, clf.model.parameters()))
    with torch.no_grad():
        clf.head.weight.fill_(float("nan"))
    with pytest.raises(FloatingPointError, match="step 0"):
        train_classifier(clf, data.train, steps=1)


def test_the_prose_follows_the_numbers():
    from gpt_from_scratch.book import finetune_prose as prose

    rows = {"head only": dict(accuracy=0.30, trainable=1_032), "everything": dict(accuracy=0.5, trainable=7_000_000)}
    text = prose.classification_text(rows, majority=0.25, bag=0.45, n_test=100)
    assert "**everything**, at 50.0% on the 100 test speeches (one standard error: 5.0 points)" in text
    assert "7,000,000" in text and "the weakest is head only, at 30.0%" in text
    assert "1 of the 2 beat the majority baseline by more than two standard errors (everything)" in text
    assert "1 of the 2 beat the bag of tokens (everything)" in text
    weak = prose.classification_text({"head only": dict(accuracy=0.4, trainable=10)}, 0.25, 0.45, 100)
    assert "Every fine-tuned classifier beats the majority" in weak and "None beats the bag" in weak
    lost = prose.classification_text({"head only": dict(accuracy=0.3, trainable=10)}, 0.25, 0.45, 100)
    assert "None beats the majority baseline by more than two standard errors" in lost
    with pytest.raises(ValueError, match="not finite"):
        prose.classification_text({"x": dict(accuracy=float("nan"), trainable=1)}, 0.1, 0.2, 10)
    with pytest.raises(ValueError, match="at least one test example"):
        prose.classification_text(rows, 0.1, 0.2, 0)
    wide = prose.pooling_text(0.30, 0.60, 1000)
    assert "the mean of the hidden states (60.0%) beats the last token's (30.0%), 30.0 points" in wide
    assert "the last token's hidden state (60.0%) beats" in prose.pooling_text(0.60, 0.30, 1000)
    near = prose.pooling_text(0.40, 0.475, 121)  # Chapter 9's 7.5 points on 121 speeches
    assert "7.5 points apart" in near and "cannot tell the two apart" in near and "beats" not in near


def _windows(mean: float, spread: float, n: int = 48) -> list[float]:
    """``n`` per-window losses with mean ``mean``: alternately ``spread`` above and below it."""
    return [mean + spread * (-1) ** i for i in range(n)]


def test_the_style_prose_compares_gains_and_losses_as_sizes():
    from gpt_from_scratch.book import finetune_prose as prose

    before = {"ROMEO": _windows(6.0, 0.5), "others": _windows(6.1, 0.5)}
    both = prose.style_text("ROMEO", before, {"ROMEO": _windows(5.5, 0.52),
                                              "others": _windows(6.0, 0.48)})
    assert "fell from 6.000 to 5.500 nats per token (-0.500 ± 0.003)" in both
    assert "over the 48 windows" in both and "one run from one seed" in both
    assert "helps most" in both and "It gained 0.500 nats there and 0.100 elsewhere" in both
    # Chapter 9's run: gained 0.073 on the speaker, lost 0.087 elsewhere: the loss is the larger
    costly = prose.style_text("ROMEO", before, {"ROMEO": _windows(5.927, 0.49),
                                                "others": _windows(6.187, 0.51)})
    assert "helps most" in costly
    assert "gained 0.073 nats there and lost 0.087 elsewhere: the loss elsewhere is the larger" in costly
    assert "more than it gained" not in costly
    cheap = prose.style_text("ROMEO", before, {"ROMEO": _windows(5.9, 0.49),
                                               "others": _windows(6.13, 0.51)})
    assert "gained 0.100 nats there and lost 0.030 elsewhere: the gain is the larger" in cheap
    noisy = {"ROMEO": [6.0 + (0.3 if i % 2 else -0.3) + 0.01 * i for i in range(48)],
             "others": _windows(6.1, 0.5)}
    within = prose.style_text("ROMEO", before, {"ROMEO": [v - 0.05 for v in noisy["ROMEO"]],
                                                "others": _windows(6.07, 0.6)})
    assert "did not single out" in within and "within two standard errors" in within
    wrong_way = prose.style_text("ROMEO", before, {"ROMEO": _windows(5.9, 0.51),
                                                   "others": _windows(5.5, 0.49)})
    assert "did not single out" in wrong_way and "the wrong way" in wrong_way
    with pytest.raises(ValueError, match="not finite"):
        prose.style_text("ROMEO", before, {"ROMEO": [float("nan")] * 48, "others": before["others"]})


def test_the_compact_view_of_a_corpus_vocabulary_model_shares_its_weights():
    from gpt_from_scratch.book.corpus_vocab import CorpusVocabGPT, compact_ids
    from gpt_from_scratch.lora import apply_lora, count_trainable

    torch.manual_seed(0)
    vocab = torch.tensor([3, 17, 250, 50_256])
    model = CorpusVocabGPT(GPT(GPTConfig.from_preset("tiny", vocab_size=5)), vocab).eval()
    apply_lora(model, r=2)
    compact = model.compact().eval()
    assert compact.config.vocab_size == 5 and count_trainable(compact) == count_trainable(model)
    ids = torch.tensor([[3, 250, 17, 50_256]])
    with torch.no_grad():
        torch.testing.assert_close(compact(compact_ids(vocab)[ids])[0][..., :4], model(ids)[0][..., vocab])


def test_the_learning_curve_compares_pretrained_random_and_bag_on_the_same_speeches():
    from gpt_from_scratch.book.corpus_vocab import CorpusVocabGPT
    from gpt_from_scratch.book.finetune_runs import few_labels, learning_curve, random_like

    labels = torch.tensor([0, 1, 0, 1, 2, 0, 2, 1])
    pick = few_labels(labels, 2, seed=0)
    assert torch.bincount(labels[pick]).tolist() == [2, 2, 2]
    assert torch.equal(pick, few_labels(labels, 2, seed=0))
    assert len(few_labels(labels, 10, seed=0)) == len(labels)  # at most all of a class
    data = speaker_dataset(PLAY, gpt2_encoding(), n_speakers=3, max_tokens=8)
    vocab = torch.unique(torch.cat([data.train.ids.flatten(), torch.tensor([50_256])]))
    torch.manual_seed(0)
    model = CorpusVocabGPT(GPT(GPTConfig.from_preset("tiny", vocab_size=len(vocab) + 1)), vocab).eval()
    fresh = random_like(model, seed=1)
    assert fresh.config == model.config and torch.equal(fresh.vocab, model.vocab)
    assert not torch.equal(fresh.wte.weight, model.wte.weight)
    torch.manual_seed(1)
    other = CorpusVocabGPT(GPT(GPTConfig.from_preset("tiny", vocab_size=len(vocab) + 1)), vocab).eval()
    curve = learning_curve([model, other], data, sizes=(1, 3), seeds=3, n_random=2)
    assert curve["sizes"] == [1, 3]
    for key in ("pretrained", "random", "bag"):
        assert [len(v) for v in curve[key]] == [3, 3]
        assert all(0 <= a <= 1 for v in curve[key] for a in v)
    assert [[len(v) for v in each] for each in curve["per_backbone"]] == [[3, 3], [3, 3]]
    for size, each in enumerate(curve["per_backbone"]):  # each draw: the mean over the backbones
        assert curve["pretrained"][size] == pytest.approx([(a + b) / 2 for a, b in zip(*each)])
    alone = learning_curve([model], data, sizes=(3,), seeds=3, n_random=2)
    assert alone["per_backbone"][0][0] == curve["per_backbone"][1][0]  # the same draws
    with pytest.raises(ValueError, match="backbones is empty"):
        learning_curve([], data)
    wider = CorpusVocabGPT(GPT(GPTConfig.from_preset("tiny", vocab_size=len(vocab) + 1,
                                                     d_model=16)), vocab).eval()
    with pytest.raises(ValueError, match="differ in shape or vocabulary"):
        learning_curve([model, wider], data)


def test_the_pretraining_prose_follows_the_curve(monkeypatch):
    from gpt_from_scratch.book import finetune_prose as prose
    from gpt_from_scratch.book import lessons

    monkeypatch.setattr(lessons, "_LESSONS", {})
    curve = dict(sizes=[8, 32], pretrained=[[0.30, 0.32, 0.31], [0.40, 0.42, 0.44]],
                 random=[[0.30, 0.31, 0.32], [0.30, 0.31, 0.32]],
                 bag=[[0.35, 0.36, 0.37], [0.41, 0.42, 0.43]])
    gaps = prose.pretraining_gaps(curve)
    assert gaps[1]["vs_random"][0] == pytest.approx(0.11)
    text = prose.pretraining_text(curve)
    assert text.startswith("The pretrained features beat the same network from a random "
                           "initialization by more than 2 standard errors with 32 speeches")
    assert "+11.0 ± 0.6 points at 32" in text and "With 8 the difference (+0.0" in text
    assert "within the noise with 32" in text and "behind with 8 (-5.0 ± 0.6 points at 8)" in text
    assert lessons.verdicts() == "no lesson judged in this run"  # no backbones to compare
    one = prose.pretraining_text(curve | dict(per_backbone=[[[0.30, 0.32, 0.31]]] * 2))
    assert one == text and lessons.verdicts() == "no lesson judged in this run"
    curve["per_backbone"] = [[[0.30, 0.32, 0.31]] * 3,
                             [[0.40, 0.42, 0.44], [0.30, 0.31, 0.32], [0.50, 0.53, 0.56]]]
    text = prose.pretraining_text(curve)
    assert text.startswith("Backbone by backbone, with 32 speeches per speaker the pretrained "
                           "features are +11.0 ± 0.6, +0.0 ± 0.0, +22.0 ± 1.2 points from the "
                           "random network. The two furthest apart differ by 22.0 ± 1.2 points on "
                           "the same draws, 19.1 standard errors: more than 2, so what one")
    assert "which is why each draw above averages 3 of them. Averaged over the 3 backbones" in text
    assert lessons.verdicts() == "holds: one pretraining run is not enough to judge pretraining by"
    assert ("Counting the runs too (the spread of the 3 backbones' gaps at 32), the average is "
            "+11.0 ± 6.4 points, 1.7 standard errors: within 2, so 3 runs cannot tell") in text
    curve["per_backbone"][1] = [[0.40, 0.42, 0.44], [0.41, 0.42, 0.43], [0.43, 0.42, 0.44]]
    text = prose.pretraining_text(curve)
    assert "standard errors: within 2, so runs of this recipe agree" in text
    assert "+11.3 ± 0.3 points, 34.0 standard errors: more than 2, so this recipe's" in text
    assert lessons.verdicts().startswith("DOES NOT HOLD: one pretraining run")
    later = prose.pretraining_text(dict(sizes=[8, 32], pretrained=[[0.40, 0.42, 0.44]] * 2,
                                        random=[[0.30, 0.31, 0.32], [0.40, 0.42, 0.44]],
                                        bag=[[0.35, 0.36, 0.37]] * 2))
    assert "With 32 the difference (+0.0 ± 0.0 points at 32) is within the noise. " in later
    assert "so few speeches" not in later  # more speeches than where it won: not their fault
    none = prose.pretraining_text(dict(sizes=[8], pretrained=[[0.3, 0.4]], random=[[0.3, 0.4]],
                                       bag=[[0.2, 0.3]]))
    assert "never beat the same network from a random initialization by more than 2" in none
    with pytest.raises(ValueError, match="two seeds"):
        prose.mean_se([0.5])


def test_the_backbones_sentence_follows_the_numbers():
    from gpt_from_scratch.book import finetune_prose as prose

    models = {"Chapter 6 BPE model": (7_234_432, 6.334, 51_200),
              "Chapter 8 offline model": (823_296, 5.151, 1_024_000)}
    text = prose.backbones_text(models, 0.889, "Chapter 8 offline model")
    assert text.startswith("The Chapter 8 offline model predicts the validation text better, "
                           "5.151 nats per token against 6.334.")
    assert "7,234,432 parameters (89% of them its token embedding) and read 51,200 tokens" in text
    models["Chapter 6 BPE model"] = (7_234_432, 5.0, 51_200)  # the other way round
    assert prose.backbones_text(models, 0.889, "Chapter 8 offline model").startswith(
        "The Chapter 6 BPE model predicts the validation text better, 5.000 nats per token "
        "against 5.151.")


def test_the_offline_model_of_another_seed_is_cached_apart():
    from gpt_from_scratch.book.offline_model import SEED, offline_model_path

    def name(**kw):  # the folder's name without its key
        return offline_model_path(**kw).name.rpartition("-")[0]

    assert offline_model_path() == offline_model_path(seed=SEED)
    assert name() == "shakespeare-bpe-heads"
    assert name(seed=0) == "shakespeare-bpe-heads-seed0"
    assert name(full=True, seed=1, device="cpu") == "shakespeare-bpe-heads-full-seed1"
    for bad in (-1, 1.5, True, "0"):
        with pytest.raises(ValueError, match=f"seed={bad!r} must be a whole number >= 0"):
            offline_model_path(seed=bad)
