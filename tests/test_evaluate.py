"""Chapter 11's measurements: multiple-choice scores equal to lm-evaluation-harness's on the same
weights and items (a local task file, offline), bits per byte, and the offline next-line set."""

from __future__ import annotations

import json
import copy
import math

import numpy as np
import pytest
import torch
from torch.distributions import Categorical, kl_divergence

from gpt_from_scratch.book.measuring import (
    DELIMITER, BigramTable, NextLineSettings, frequency_accuracy, last_word_sets, next_line_sets,
    speeches, word_counts,
    write_jsonl,
)
from gpt_from_scratch.evaluate import (
    ChoiceScores, MultipleChoice, bits_per_byte, continuation_logprobs, encode_pair,
    model_bits_per_byte, score_choices, summed_nats, text_kl,
)
from gpt_from_scratch.model import GPT, GPTConfig
from gpt_from_scratch.tokenizer import CharTokenizer

HAND_ITEMS = [  # the harness's default delimiter " ", and contexts that end in spaces
    MultipleChoice("To be, or not to be: that is ", ["the question:", "a horse", "mine"], 0),
    MultipleChoice("But soft, what light through yonder", ["window breaks?", "sun", "is it"], 0),
    MultipleChoice("Now is the winter of our  ", ["discontent", "summer", "glorious sun of York"],
                   2),
]


def tiny_gpt(vocab_size: int, context_length: int = 16, seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=vocab_size, context_length=context_length, d_model=32,
                         n_layers=2, n_heads=4, d_ff=64, dropout=0.0)).eval()


def by_hand(model: GPT, ctx: list[int], cont: list[int], start: list[int]) -> torch.Tensor:
    """One pair alone, unpadded: log p(cont[j] | start + ctx + cont[:j]) for each j."""
    seq = torch.tensor([start + (ctx + cont)[-(model.config.context_length + 1 - len(start)):]])
    with torch.no_grad():
        logp = model(seq[:, :-1])[0].log_softmax(-1)[0]  # (T, V)
    n = len(cont)
    return logp[-n:].gather(-1, seq[0, -n:, None])[:, 0]


def test_encode_pair_moves_the_spaces_and_encodes_the_pair_together(gpt2):
    ctx, cont = encode_pair(gpt2.encode_ordinary, "To be or not ", " to be")
    assert gpt2.decode(ctx) == "To be or not" and gpt2.decode(cont) == "  to be"
    assert ctx + cont == gpt2.encode_ordinary("To be or not  to be")
    with pytest.raises(ValueError, match="context is empty"):
        encode_pair(gpt2.encode_ordinary, "", " x")


@pytest.mark.parametrize("start", [[], [11]])
def test_batched_and_padded_log_probs_equal_each_pair_alone(start):
    tok = CharTokenizer("abcdefghij \n")
    texts = [("abc", "d"), ("a b c d e f g h i j a b", " cdef"), ("j" * 30, "ab\n")]  # truncated
    pairs = [encode_pair(tok.encode, c, x) for c, x in texts]
    for model in (tiny_gpt(tok.vocab_size), BigramTable(np.arange(40) % 12, 12, 16)):
        got = continuation_logprobs(model, pairs, batch_size=2, start=start)
        for lp, (ctx, cont) in zip(got, pairs):
            torch.testing.assert_close(lp, by_hand(model, ctx, cont, start))
    with pytest.raises(ValueError, match="continuation of 17 tokens does not fit"):
        continuation_logprobs(tiny_gpt(12), [([1], [2] * 17)])


def test_the_three_rules_pick_as_defined():
    scores = ChoiceScores(loglik=torch.tensor([[-10.0, -4.0], [-6.0, -9.0]], dtype=torch.float64),
                          n_tokens=torch.tensor([[5.0, 1.0], [2.0, 9.0]], dtype=torch.float64),
                          n_chars=torch.tensor([[20.0, 2.0], [3.0, 3.0]], dtype=torch.float64),
                          gold=torch.tensor([0, 1]))
    assert scores.picks("acc").tolist() == [1, 0]  # -4 > -10; -6 > -9
    assert scores.picks("acc_norm").tolist() == [0, 0]  # -0.5 > -2; -2 > -3
    assert scores.picks("acc_token").tolist() == [0, 1]  # -2 > -4; -1 > -3
    assert scores.accuracy("acc_token") == 1.0 and scores.accuracy("acc") == 0.0
    with pytest.raises(ValueError, match="unknown rule 'acc_byte'"):
        scores.picks("acc_byte")


def test_score_choices_refuses_ragged_items():
    tok = CharTokenizer("ab")
    bad = [MultipleChoice("a", ["a", "b"], 0), MultipleChoice("b", ["a"], 0)]
    with pytest.raises(ValueError, match="item 1 has 1 choices"):
        score_choices(tiny_gpt(2), tok.encode, bad)



def test_a_context_of_only_spaces_is_refused_not_scored_from_the_wrong_position():
    """Its spaces all moved to the continuation, whose first token was read at -1."""
    with pytest.raises(ValueError, match=r"context is empty or only spaces \('   '\)"):
        encode_pair(CharTokenizer("ab ").encode, "   ", "a")


def test_a_diverged_model_is_refused_not_scored_100_percent():
    model, tok = tiny_gpt(3), CharTokenizer("ab ")
    with torch.no_grad():
        model.lm_head.weight.fill_(math.nan)  # NaN log-likelihoods won every argmax
    items = [MultipleChoice("a", ["a", "b"], 1), MultipleChoice("b", ["a", "b"], 1)]
    with pytest.raises(FloatingPointError, match="item 0, choice 0 has log-likelihood nan"):
        score_choices(model, tok.encode, items)


@pytest.mark.parametrize("call, error, fragment", [
    (lambda m, e: score_choices(m, e, [dict(context="a", choices=["b"], gold=0)]),
     TypeError, "item 0 is a dict: pass MultipleChoice"),
    (lambda m, e: score_choices(torch.nn.Linear(2, 2), e, [MultipleChoice("a", ["b"], 0)]),
     TypeError, "model is a Linear without config.context_length"),
    (lambda m, e: continuation_logprobs(m, [([0], [])]), ValueError,
     "pair 0 has no continuation token"),
    (lambda m, e: continuation_logprobs(m, [([0], [1])], start=[0] * 16), ValueError,
     "start has 16 tokens and the model reads 16"),
    (lambda m, e: summed_nats(m, [1]), ValueError, r"ids of shape \(1,\).*at least 2"),
    (lambda m, e: summed_nats(m, [0, 1, 0], batch_size=0), ValueError,
     "batch_size=0 must be a positive int"),
    (lambda m, e: summed_nats(m, [0, 1, 0], start=[0] * 16), ValueError,
     "start has 16 tokens and the model reads 16"),
    (lambda m, e: bits_per_byte(math.nan, 10), ValueError, "nats=nan must be a finite"),
    (lambda m, e: text_kl(m, {"m": m}, [1]), ValueError, r"text_kl: ids of shape \(1,\)"),
    (lambda m, e: text_kl(m, {"m": m}, [0, 1], batch_size=0), ValueError,
     "batch_size=0 must be a positive int"),
    (lambda m, e: text_kl(m, m, [0, 1]), TypeError, "models is a GPT: pass a dict"),
    (lambda m, e: text_kl(m, {}, [0, 1]), TypeError, "models is a dict: pass a dict"),
    (lambda m, e: text_kl(m, {"short": tiny_gpt(3, context_length=8)}, [0, 1]), ValueError,
     "the reference reads 16 tokens and 'short' 8"),
    (lambda m, e: text_kl(m, {"wide": tiny_gpt(4)}, [0, 1]), ValueError,
     r"logits \(1, 1, 3\) and 'wide' \(1, 1, 4\)"),
    (lambda m, e: text_kl(torch.nn.Linear(2, 2), {"m": m}, [0, 1]), TypeError,
     "model is a Linear without config.context_length"),
])
def test_odd_inputs_name_the_value_and_the_fix(call, error, fragment):
    """Each was a bare AttributeError, torch.cat or range() error, or a silent result."""
    with pytest.raises(error, match=fragment):
        call(tiny_gpt(3), CharTokenizer("ab ").encode)

def test_text_kl_is_the_mean_kl_of_the_next_token_laws_summed_nats_scores():
    """Against torch.distributions on every predicted position, window by window."""
    reference, model = tiny_gpt(5, context_length=8), tiny_gpt(5, context_length=8, seed=1)
    ids = torch.arange(45) % 5
    laws = []
    for begin in range(0, 44, 8):  # windows of 8 read tokens, overlapping by one
        idx = ids[begin:begin + 9][:-1][None]  # (1, T)
        with torch.no_grad():
            p, q = (m(idx)[0][0].double() for m in (reference, model))  # 2 x (T, V)
        laws.append(kl_divergence(Categorical(logits=p), Categorical(logits=q)))
    expected = torch.cat(laws).mean().item()
    kl = text_kl(reference, {"model": model, "itself": reference}, ids, batch_size=2)
    assert kl["model"] == pytest.approx(expected, rel=1e-5) and kl["itself"] == 0.0
    assert text_kl(model, {"reference": reference}, ids)["reference"] > 0.0


def test_a_token_the_reference_rules_out_adds_nothing_to_text_kl():
    """0 log 0 is 0: a logit of -inf in the reference (a masked token) is no nan; a model
    that rules out a token the reference allows is infinitely far (torch.distributions')."""
    reference, model = tiny_gpt(5, context_length=8), tiny_gpt(5, context_length=8, seed=1)
    masked = copy.deepcopy(reference)
    with torch.no_grad():
        masked.lm_head.bias = torch.nn.Parameter(torch.tensor([-math.inf, 0, 0, 0, 0]))
    ids = torch.tensor([1, 2, 3, 4, 1, 2, 3, 4, 1])  # one window of 8 read tokens
    with torch.no_grad():
        p, q = (m(ids[None, :-1])[0][0].double() for m in (masked, model))  # 2 x (T, V)
    expected = kl_divergence(Categorical(logits=p), Categorical(logits=q)).mean().item()
    kl = text_kl(masked, {"itself": masked, "model": model}, ids)
    assert kl["itself"] == 0.0 and kl["model"] == pytest.approx(expected, rel=1e-5)
    assert text_kl(model, {"masked": masked}, ids)["masked"] == math.inf


def test_bits_per_byte_of_a_uniform_model_is_log2_of_the_vocabulary():
    model = tiny_gpt(16, context_length=8)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()  # every logit 0: a uniform guess over 16 tokens, 4 bits per token
    ids = np.arange(50) % 16
    nats, targets = summed_nats(model, ids, batch_size=3)  # windows over several batches
    assert len(targets) == 49 and targets.tolist() == ids[1:].tolist()
    assert nats == pytest.approx(49 * math.log(16), rel=1e-5)
    assert model_bits_per_byte(model, ids, lambda t: 1) == pytest.approx(4.0, rel=1e-5)
    assert model_bits_per_byte(model, ids, lambda t: 2) == pytest.approx(2.0, rel=1e-5)
    nats, targets = summed_nats(model, ids, batch_size=2, start=[0, 0, 0])  # 5 text tokens a window
    assert targets.tolist() == ids[1:].tolist() and nats == pytest.approx(49 * math.log(16), rel=1e-5)
    with pytest.raises(ValueError, match="n_bytes = 0"):
        bits_per_byte(1.0, 0)


def test_next_line_sets_are_deterministic_length_matched_and_disjoint(corpus):
    settings = NextLineSettings(n_items=20)
    sets = next_line_sets(corpus, 2, settings, seed=3)
    assert sets == next_line_sets(corpus, 2, settings, seed=3) != next_line_sets(
        corpus, 2, settings, seed=4)
    first, second = ({"\n".join(it.context.split("\n")[:2]) for it in items} for items in sets)
    assert not first & second  # no speech (speaker and first line) in both draws
    items = sets[0] + sets[1]
    lines = {line for sp in speeches(corpus[int(0.9 * len(corpus)):]) for line in sp}
    for it in items:
        gold = it.choices[it.gold]
        assert settings.min_chars <= len(gold) <= settings.max_chars
        assert all(abs(len(c) - len(gold)) <= settings.tolerance for c in it.choices)
        assert len(set(it.choices)) == 4 and set(it.choices) <= lines  # validation lines only
        assert it.context.split("\n")[0].endswith(":")  # the speaker line opens the context
    assert {it.gold for it in items} == {0, 1, 2, 3}



def test_last_word_sets_match_lengths_and_draw_no_speech_twice(corpus):
    sets = last_word_sets(corpus, 2, n_items=50, seed=1)
    assert sets == last_word_sets(corpus, 2, n_items=50, seed=1) != last_word_sets(
        corpus, 2, n_items=50, seed=2)
    first, second = ({"\n".join(it.context.split("\n")[:2]) for it in items} for items in sets)
    assert not first & second
    for it in sets[0] + sets[1]:
        gold = it.choices[it.gold]
        assert {len(c) for c in it.choices} == {len(gold)}  # tolerance 0: one length
        assert len({c.lower() for c in it.choices}) == 4
        assert not it.context.endswith(" ") and gold.isalpha()


def test_the_most_frequent_word_is_a_guess_on_the_word_test(corpus):
    """Distractors drawn as the answers are (as they occur) leave a rule that reads only the
    choices at a guess: 25% on average over 20 draws of 100 items (its first version, with
    distinct words as distractors, let this rule score 44%)."""
    counts = word_counts(corpus)
    draws = [frequency_accuracy(items, counts) for seed in range(4)
             for items in last_word_sets(corpus, 5, n_items=100, seed=seed)]
    assert abs(sum(draws) / len(draws) - 0.25) < 0.03


def test_frequency_accuracy_picks_the_most_counted_choice_first_on_ties():
    from collections import Counter
    counts = Counter({"thee": 9, "lord": 5, "love": 5})
    items = [MultipleChoice("", ["lord", "thee", "zzz"], 1), MultipleChoice("", ["lord", "Love"], 1),
             MultipleChoice("", ["Love", "lord"], 0)]
    assert frequency_accuracy(items, counts) == pytest.approx(2 / 3)


@pytest.mark.parametrize("draw, fragment", [
    (lambda text: last_word_sets(text, 1, n_items=2, n_choices=0), "n_choices >= 2"),
    (lambda text: last_word_sets(text, 1, n_items=2, tolerance=-5), "tolerance >= 0"),
    (lambda text: last_word_sets(text, 0), "n_draws >= 1"),
    (lambda text: last_word_sets(text, 1, n_choices=400), "raise the tolerance"),
    (lambda text: next_line_sets(text, 1, NextLineSettings(n_items=-1)), "n_items >= 1"),
    (lambda text: next_line_sets(text, 1, NextLineSettings(n_items=10**6)), "ask for fewer"),
    (lambda text: word_counts("... !!!"), "has no word"),
    (lambda text: frequency_accuracy([], word_counts(text)), "no items"),
    (lambda text: BigramTable(np.array([1, 2, 30]), 5), r"span \[1, 30\], outside .*5\)"),
])
def test_the_offline_sets_name_a_bad_setting(corpus, draw, fragment):
    """Each failed as random.sample's "Sample larger than population" or a view error."""
    with pytest.raises(ValueError, match=fragment):
        draw(corpus)

def test_the_bigram_table_is_a_model_of_counted_pairs():
    ids = np.array([0, 1, 0, 1, 0, 2])
    table = BigramTable(ids, 3)
    probs = table(torch.tensor([[0, 1]]))[0].exp()[0]  # (T, V)
    torch.testing.assert_close(probs[0], torch.tensor([1.0, 3.0, 2.0]) / 6)  # 0 -> 1 twice, 2 once
    torch.testing.assert_close(probs[1], torch.tensor([3.0, 1.0, 1.0]) / 5)  # 1 -> 0 twice


# ---------------------------------------------------------------- parity with the harness
def test_scores_equal_lm_evaluation_harness_on_the_same_weights(corpus, gpt2, tmp_path):
    """The harness's HFLM on a random GPT2LMHeadModel, our scorer on the same weights in the
    book's GPT: every choice's log-likelihood, and acc and acc_norm item by item."""
    pytest.importorskip("lm_eval", reason="the parity test needs the harness: pip install "
                                          "'gpt-from-scratch-book[eval]'")
    transformers = pytest.importorskip("transformers")
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    from gpt_from_scratch.hf_weights import from_hf
    from gpt_from_scratch.tokenizer import hf_gpt2_tokenizer

    sets = {"next_line": (next_line_sets(corpus, 1, NextLineSettings(
                n_items=24, length_matched=False))[0], DELIMITER),  # unmatched: acc and acc_norm differ
            "hand": (HAND_ITEMS, " ")}
    for name, (items, delimiter) in sets.items():
        write_jsonl(items, tmp_path / f"{name}.jsonl")
        (tmp_path / f"{name}.yaml").write_text(
            f"task: book_{name}\ndataset_path: json\ndataset_kwargs:\n"
            f"  data_files:\n    test: {tmp_path / (name + '.jsonl')}\n"
            f"  cache_dir: {tmp_path / 'datasets'}\n"
            "test_split: test\noutput_type: multiple_choice\n"
            "doc_to_text: '{{context}}'\ndoc_to_choice: '{{choices}}'\ndoc_to_target: gold\n"
            f"target_delimiter: {json.dumps(delimiter)}\n"  # YAML reads JSON's escapes
            "metric_list:\n  - metric: acc\n  - metric: acc_norm\n", encoding="utf-8")
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=2, n_head=2, n_embd=32, n_positions=64)).eval()  # contexts are cut to 64 tokens
    ours = from_hf(hf)
    lm = HFLM(pretrained=hf, tokenizer=hf_gpt2_tokenizer(), device="cpu", batch_size=16)
    out = simple_evaluate(model=lm, tasks=[f"book_{n}" for n in sets], log_samples=True,
                          task_manager=TaskManager(include_path=str(tmp_path),
                                                   include_defaults=False))
    for name, (items, delimiter) in sets.items():
        scores = score_choices(ours, gpt2.encode_ordinary, items, delimiter, batch_size=16)
        samples = sorted(out["samples"][f"book_{name}"], key=lambda s: s["doc_id"])
        theirs = torch.tensor([[ll for ll, _ in s["filtered_resps"]] for s in samples],
                              dtype=torch.float64)  # (N, C)
        torch.testing.assert_close(scores.loglik, theirs, atol=2e-4, rtol=1e-5)
        for rule in ("acc", "acc_norm"):
            assert scores.correct(rule).tolist() == [s[rule] for s in samples], rule
            assert scores.accuracy(rule) == pytest.approx(out["results"][f"book_{name}"][
                f"{rule},none"])
    next_line = score_choices(ours, gpt2.encode_ordinary, sets["next_line"][0], DELIMITER)
    assert (next_line.picks("acc") != next_line.picks("acc_norm")).any()  # the rules differ here
