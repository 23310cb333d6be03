"""Chapter 8 — head scores, parity, the offline model's training wrapper, and the generated prose.

The prose functions are checked by parsing their numbers back and comparing them with the numbers
they were given, on both branches: GPT-2 loaded (``real=True``) and the offline model.
"""

from __future__ import annotations

import re
import time

import numpy as np
import pytest
import torch

from gpt_from_scratch import heads
from gpt_from_scratch.book import heads_prose as prose
from gpt_from_scratch.book.offline_model import EOT, DocumentStart, with_document_start
from gpt_from_scratch.hf_weights import WeightsUnavailableError, from_hf, from_pretrained
from gpt_from_scratch.model import GPT, GPTConfig

T = 12


def _previous_token_maps(L=2, B=3, H=4):
    A = torch.zeros(T, T)
    A[0, 0] = 1.0
    A[torch.arange(1, T), torch.arange(T - 1)] = 1.0  # every query on the token before it
    return [A.expand(B, H, T, T).clone() for _ in range(L)]


def _uniform_maps(L=2, B=3, H=4):
    A = torch.ones(T, T).tril() / torch.arange(1, T + 1)[:, None]  # row t: 1/(t+1) on each key
    return [A.expand(B, H, T, T).clone() for _ in range(L)]


def _numbers(text: str) -> list[float]:
    return [float(x.replace(",", "")) for x in re.findall(r"(?<![\w.])\d[\d,]*\.\d+|(?<![\w.])\d+(?![\w.])",
                                                          text)]


# ----------------------------------------------------------------------------------------------------
# Scores.


def test_previous_token_head_scores_one_and_uniform_scores_the_baseline():
    torch.testing.assert_close(heads.previous_token_scores(_previous_token_maps()), torch.ones(2, 4))
    uniform = heads.previous_token_scores(_uniform_maps())
    torch.testing.assert_close(uniform, torch.full((2, 4), heads.uniform_share(T)))
    expected = sum(1 / (t + 1) for t in range(1, T)) / (T - 1)
    assert heads.uniform_share(T) == pytest.approx(expected)


def test_own_token_scores_tell_a_current_token_head_from_a_previous_token_head():
    maps = _previous_token_maps()
    maps[1][:, 3] = torch.eye(T)  # layer 1, head 3: every query on itself
    own, previous = heads.own_token_scores(maps), heads.previous_token_scores(maps)
    assert own[1, 3] == pytest.approx(1.0) and previous[1, 3] == pytest.approx(0.0)
    assert own[0, 0] == pytest.approx(0.0) and previous[0, 0] == pytest.approx(1.0)
    text = prose.ranked_heads_text([(0, 0), (1, 3)], previous, own)
    assert "layer 1, head 3 puts 1.00 on the query's own token and 0.00" in text
    assert "layer 0, head 0" not in text and "*current-token* head" in text
    assert "more weight on the previous token" in prose.ranked_heads_text([(0, 0)], previous, own)
    with pytest.raises(ValueError, match=r"\(L, B, H, T, T\)"):
        heads.own_token_scores(torch.ones(2, 3, T, T))


def test_sink_scores_average_queries_from_start():
    maps = _uniform_maps()
    torch.testing.assert_close(heads.sink_scores(maps, start=8),
                               torch.full((2, 4), heads.uniform_share(T, start=8)))
    sink = torch.zeros(T, T)
    sink[:, 0] = 1.0  # every query on position 0
    maps[1][:, 2] = sink
    scores = heads.sink_scores(maps)
    assert scores[1, 2] == pytest.approx(1.0)
    assert heads.best_heads(scores, 1) == [(1, 2)]
    assert heads.previous_token_scores(maps)[1, 2] == pytest.approx(1 / (T - 1))  # only t = 1 hits 0


def test_scores_reject_bad_maps():
    with pytest.raises(ValueError, match=r"\(L, B, H, T, T\)"):
        heads.previous_token_scores(torch.ones(2, 3, T, T))
    bad = _uniform_maps()
    bad[0][0, 0, 5, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        heads.sink_scores(bad)
    with pytest.raises(ValueError, match="start"):
        heads.sink_scores(_uniform_maps(), start=T)


def test_best_heads_orders_by_score():
    scores = torch.tensor([[0.1, 0.9], [0.5, 0.3]])
    assert heads.best_heads(scores, 3) == [(0, 1), (1, 0), (1, 1)]


# ----------------------------------------------------------------------------------------------------
# Parity with transformers, and the published figures.


def _small_hf(seed=0):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(seed)
    config = transformers.GPT2Config(vocab_size=97, n_positions=16, n_embd=32, n_layer=2, n_head=4,
                                     attn_implementation="eager")
    return transformers.GPT2LMHeadModel(config).eval()


def test_parity_is_tiny_for_the_same_weights_and_large_for_others():
    hf = _small_hf()
    idx = torch.randint(0, 97, (2, 10), generator=torch.Generator().manual_seed(0))
    same = heads.parity(from_hf(hf), hf, idx)
    assert same.max_logit_diff < 1e-4 and same.max_attention_diff < 1e-5 and same.same_greedy
    other = heads.parity(from_hf(_small_hf(seed=1)), hf, idx)
    assert other.max_logit_diff > 1e-3 and other.max_attention_diff > 1e-3


def test_published_row_is_a_distribution_over_the_sentence():
    ref = heads.GPT2_REFERENCE
    assert len(ref.pronoun_row) == len(ref.pronoun_tokens)
    assert sum(ref.pronoun_row) == pytest.approx(1.0, abs=1e-3)
    assert heads.compare_with_reference(ref.pronoun_row) == 0.0
    with pytest.raises(ValueError, match="same sentence"):
        heads.compare_with_reference([0.5, 0.5])


# ----------------------------------------------------------------------------------------------------
# The offline model's document starts.


def test_document_start_prepends_endoftext_and_predicts_the_first_token():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=EOT + 1, context_length=8, d_model=16, n_layers=1, n_heads=2,
                          dropout=0.0))
    x = torch.randint(0, 100, (3, 7))
    y = torch.randint(0, 100, (3, 7))
    _, loss = DocumentStart(model)(x, y)
    full = with_document_start(x)
    assert full.shape == (3, 8) and (full[:, 0] == EOT).all() and torch.equal(full[:, 1:], x)
    _, expected = model(full, torch.cat([x[:, :1], y], dim=1))
    torch.testing.assert_close(loss, expected)


@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
def test_document_start_is_in_the_mode_of_the_model_it_wraps(training):
    """A new module is in training mode: a wrapper saying so around an eval model made estimate_loss
    put the wrapper, and with it the model's dropout, back in training mode (Chapter 9, FULL_RUN)."""
    model = GPT(GPTConfig(vocab_size=EOT + 1, context_length=8, d_model=16, n_layers=1, n_heads=2,
                          dropout=0.5)).train(training)
    assert DocumentStart(model).training is training


def test_corpus_vocab_gpt_reads_gpt2_ids_and_shares_unk_among_the_tokens_outside():
    from gpt_from_scratch.book.corpus_vocab import (
        CorpusVocabGPT,
        compact_ids,
        corpus_vocabulary,
    )

    vocab = corpus_vocabulary(np.array([464, 11, 262, 11, 50]), extra=(EOT,))
    assert vocab.tolist() == [11, 50, 262, 464, EOT]
    torch.manual_seed(0)
    compact = GPT(GPTConfig(vocab_size=len(vocab) + 1, context_length=8, d_model=16, n_layers=2,
                            n_heads=2, dropout=0.0)).eval()
    model = CorpusVocabGPT(compact, vocab).eval()
    assert model.config.vocab_size == 50_257 and model.num_parameters() == compact.num_parameters()
    idx = torch.tensor([[EOT, 464, 11, 262, 50]])  # (1, 5) GPT-2 ids, all in the vocabulary
    rows = compact_ids(vocab)[idx]
    assert rows.tolist() == [[4, 3, 0, 2, 1]]
    logits, _ = model(idx)  # (1, 5, 50,257)
    expected, _ = compact(rows)  # (1, 5, 6)
    torch.testing.assert_close(logits[..., vocab], expected[..., :-1])
    probs = logits.double().softmax(-1)  # float64: 50,257 terms summed
    torch.testing.assert_close(probs.sum(-1), torch.ones(1, 5, dtype=torch.float64))
    outside = ~model.in_vocabulary(torch.arange(50_257))
    assert int(outside.sum()) == 50_257 - 5
    torch.testing.assert_close(probs[..., outside].sum(-1), expected.double().softmax(-1)[..., -1])
    for a, b in zip(model.attention_maps(idx), compact.attention_maps(rows)):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(model.wte(idx), compact.wte(rows))
    unknown_a, unknown_b = model(torch.tensor([[EOT, 7]]))[0], model(torch.tensor([[EOT, 9]]))[0]
    torch.testing.assert_close(unknown_a, unknown_b)  # both read as <unk>
    with pytest.raises(ValueError, match="len\\(vocab\\) \\+ 1 rows"):
        CorpusVocabGPT(compact, vocab[:-1])
    with pytest.raises(ValueError, match="GPT-2 token ids"):
        corpus_vocabulary(np.array([50_257]))


# ----------------------------------------------------------------------------------------------------
# from_pretrained without a network: fails in seconds, says why.


def test_from_pretrained_fails_fast_when_the_hub_does_not_answer(tmp_path, monkeypatch):
    import huggingface_hub

    class NoNetwork:
        def head(self, url, timeout):
            raise ConnectionError(f"cannot reach {url}")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub, "get_session", lambda: NoNetwork())
    started = time.perf_counter()
    with pytest.raises(WeightsUnavailableError, match="hub cannot be reached"):
        from_pretrained("gpt2", cache_dir=tmp_path)
    assert time.perf_counter() - started < 10


def test_hub_check_passes_when_the_hub_answers(monkeypatch):
    import huggingface_hub

    from gpt_from_scratch.hf_weights import _hub_unreachable

    class Answers:
        def head(self, url, timeout):
            return object()

    monkeypatch.setattr(huggingface_hub, "get_session", lambda: Answers())
    assert _hub_unreachable() is None


# ----------------------------------------------------------------------------------------------------
# Generated prose, both branches: the numbers in the text are the numbers computed.

SHE_TOKENS = list(heads.GPT2_REFERENCE.pronoun_tokens)


def test_pronoun_text_online_recomputes_and_compares_with_the_published_row():
    row = list(heads.GPT2_REFERENCE.pronoun_row)
    he = [0.1] * len(row)
    he[4] = 0.3  # He -> boy
    text = prose.pronoun_text("GPT-2 small", 5, 10, SHE_TOKENS, row, he, real=True)
    assert "layer 5, head 10" in text and "GPT-2 small's" in text
    assert f"\" girl\" {row[1]:.3f} and \" boy\" {row[4]:.3f}" in text
    assert "Each pronoun favours the noun of its gender" in text
    assert "differs from that measurement by at most 0.0000: they agree" in text
    off = [w + (0.05 if i == 1 else 0.0) for i, w in enumerate(row)]
    text = prose.pronoun_text("GPT-2 small", 5, 10, SHE_TOKENS, off, he, real=True)
    assert "at most 0.0500: they do not agree" in text


def test_pronoun_text_offline_states_the_chosen_heads_numbers_and_never_claims_recomputation():
    tokens = ["<|endoftext|>"] + SHE_TOKENS
    she = [0.3, 0.1, 0.05, 0.1, 0.1, 0.2, 0.05, 0.05, 0.03, 0.02]
    he = [0.3, 0.1, 0.05, 0.1, 0.1, 0.1, 0.05, 0.05, 0.13, 0.02]
    text = prose.pronoun_text("the offline model", 1, 3, tokens, she, he, real=False)
    assert "the offline model's layer 1, head 3" in text
    assert "\"She\" gives \" girl\" 0.050 and \" boy\" 0.200" in text
    assert "do not each favour" in text
    assert "Recomputed" not in text
    assert "measured elsewhere" in text and "0.415" in text  # GPT-2's figure beside it


def test_sink_text_counts_the_sinks_it_was_given():
    scores = torch.tensor([[0.9, 0.2], [0.7, 0.05]])
    text = prose.sink_text("GPT-2 small", scores, 0.036)
    assert "2 of 4 heads" in text and "layer 0, head 0, puts 0.900" in text
    assert "That is an attention sink." in text
    weak = prose.sink_text("the offline model", torch.tensor([[0.2, 0.04]]), 0.036)
    assert "0 of 2 heads" in weak and "sink in the making" in weak
    none = prose.sink_text("the offline model", torch.tensor([[0.04, 0.04]]), 0.036)
    assert "no attention sink" in none
    for text in (weak, none):
        assert "measured elsewhere" in text


def test_previous_token_text_names_the_best_head_and_gpt2s_rank_online():
    scores = torch.full((6, 12), 0.05)
    scores[4, 11], scores[2, 3] = 0.8, 0.9
    text = prose.previous_token_text("GPT-2 small", scores, 0.059, real=True)
    assert "layer 2, head 3: 0.900" in text and "clearly above" in text
    assert "scores 0.800, rank 2 of 72 heads" in text
    offline = prose.previous_token_text("the offline model", torch.tensor([[0.05, 0.07]]), 0.059,
                                        real=False)
    assert "layer 0, head 1: 0.070" in offline and "not far above" in offline
    assert "Recomputed" not in offline


def test_the_shift_sentence_follows_each_layer():
    # Chapter 8's offline model: layer 0 above uniform and falling, layer 1 near uniform
    text = prose.shift_text([0.072, 0.022], [0.046, 0.029], 0.036, 0.037, "`<|endoftext|>`")
    assert "layer 0, 0.072 → 0.046: most of its excess over uniform leaves with `<|endoftext|>`" in text
    assert "layer 1, 0.022 → 0.029: close to uniform before the shift" in text
    kept = prose.shift_text([0.6], [0.55], 0.036, 0.037, "the window's first token")
    assert "stays on position 0, with the position" in kept


def test_the_sentence_is_said_to_be_adapted_from_its_source():
    tokens = list(heads.GPT2_REFERENCE.pronoun_tokens)
    row = [1 / len(tokens)] * len(tokens)
    text = prose.pronoun_text("the offline model", 0, 0, tokens, row, row, real=False)
    assert "The sentence is adapted from Vig (2019)" in text and "who shows" not in text


def test_bias_texts_follow_the_numbers():
    gpt2_like = {"She": {"␣doctor": 0.1, "␣nurse": 0.5}, "He": {"␣doctor": 0.4, "␣nurse": 0.2}}
    text = prose.bias_attention_text("GPT-2 small", 5, 10, gpt2_like, real=True)
    assert "As in GPT-2" in text and "2 of 2 pronouns follow it" in text
    same = {"She": {"␣doctor": 0.1, "␣nurse": 0.5}, "He": {"␣doctor": 0.1, "␣nurse": 0.4}}
    both = prose.bias_attention_text("the offline model", 1, 2, same, real=False)
    assert "both look most at the same one" in both and "layer 0 cannot" not in both
    # Chapter 8's offline layer-0 head: She -> doctor (0.381), He -> nurse (0.247), reversed
    reversed_ = {"She": {"␣doctor": 0.381, "␣nurse": 0.2}, "He": {"␣doctor": 0.1, "␣nurse": 0.247}}
    text = prose.bias_attention_text("the offline model", 0, 1, reversed_, real=False)
    assert ("split the other way round from GPT-2: \"She\" looks most at \" doctor\" and \"He\" "
            "looks most at \" nurse\"") in text
    assert "A head of layer 0 cannot read the sentence" in text and "not that way" not in text
    ratios = {"a": 2.0, "b": 2.5, "c": 3.0, "d": 3.1}
    text = prose.bias_probs_text("the offline model", ratios, 3.4)
    assert _numbers(text) == [2.0, 3.1, 0.5, 3.4]


def test_loaded_losses_parity_samples_and_recipe_texts():
    online = prose.loaded_text(True, "GPT-2 small", 124_439_808)
    assert "124,439,808" in online and "not available" not in online
    info = dict(recipe="r", settings=dict(model=dict(n_layers=2, n_heads=4, d_model=64, context_length=64),
                                          train=dict(max_iters=300, batch_size=16, learning_rate=3e-3)),
                train_seconds=61.2, device="cpu", threads=2, val_loss=5.123, corpus_vocab=11_235)
    offline = prose.loaded_text(False, "the offline model", 3_300_000, info)
    assert "not available" in offline and "5.12" in offline and "2 layers of 4 heads, D = 64" in offline
    assert "300 steps of batch 16 at learning rate 0.003, in 61 s" in offline
    assert "only 11,235 GPT-2 tokens, those its training text uses and `<|endoftext|>`" in offline
    assert "at most 1.2e-05 in any logit, and their 12 greedy tokens are the same" in prose.parity_text(
        1.23e-5, True, 12, True)
    assert "**not** the same" in prose.parity_text(1.0, False, 12, False)
    losses = prose.losses_text({"a": 6.2, "b": 5.1}, 10.82)
    assert "The lowest is b's" in losses and "6.20" in losses and "10.82" in losses
    samples = prose.samples_text({"m": [[1, 2, 3, 4], [1, 5, 3, 6]]})
    assert "agree at 2 of 4 positions" in samples
    recipe = prose.offline_recipe_text(info, 0.31, 0.62, 0.059, 0.036)
    assert _numbers(recipe)[-6:] == [0.31, 5.3, 0.059, 0.62, 17.2, 0.036] and "61 s" in recipe
    assert "restricted to 11,235 tokens, those of the training text and `<|endoftext|>`" in recipe
    assert "(cpu, 2 threads)" in recipe
    assert "(cpu, 1 thread)" in prose.offline_recipe_text({**info, "threads": 1}, 0.31, 0.62, 0.059, 0.036)
    same = prose.window_loss_text("m", 6.16, 40, 6.35, 64, 0.5)  # chance spread 0.5 * 0.202 = 0.10
    assert _numbers(same)[-6:] == [6.35, 0.5, 0.1, 0.19, 1.9, 6] and "ordinary sampling" in same
    assert "m gets 6.16" in same and "happen to be easier" in same
    far = prose.window_loss_text("m", 6.66, 40, 6.35, 64, 0.5)
    assert "3.1 times that, an unusual but possible draw" in far and "harder" in far


def test_offline_model_trains_once_then_loads_the_same_weights(tmp_path, monkeypatch):
    import dataclasses

    from gpt_from_scratch.book import offline_model as om

    monkeypatch.setenv("GPT_FROM_SCRATCH_CACHE", str(tmp_path))
    tiny = dataclasses.replace(om.OFFLINE_RECIPES["shakespeare-bpe-heads"],
                               model=om._SMALL | dict(d_model=16, n_layers=1, n_heads=2, d_ff=32, context_length=9),
                               train=dict(max_iters=2, batch_size=2, warmup_iters=1, eval_interval=2, eval_iters=1))
    monkeypatch.setitem(om.OFFLINE_RECIPES, "shakespeare-bpe-heads", tiny)
    first, info = om.offline_model(device="cpu")
    assert info["recipe"] == "shakespeare-bpe-heads" and info["settings"]["train"]["max_iters"] == 2
    assert (om.offline_model_path() / "checkpoint.json").is_file() and not first.training
    again, info_again = om.offline_model(device="cpu")
    assert info_again == info
    torch.testing.assert_close(again.state_dict(), first.state_dict())
    changed = dataclasses.replace(tiny, train=tiny.train | dict(max_iters=3))
    monkeypatch.setitem(om.OFFLINE_RECIPES, "shakespeare-bpe-heads", changed)
    assert om.offline_model(device="cpu")[1]["settings"]["train"]["max_iters"] == 3  # retrained


def test_head_scores_heatmap_annotates_every_head_and_rejects_bad_scores():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gpt_from_scratch.book.heads_plots import head_scores_heatmap

    scores = torch.tensor([[0.1, 0.9, 0.5], [0.0, 0.25, 1.0]])
    fig = head_scores_heatmap(scores, "title", "label")
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert texts == [f"{v:.2f}" for v in scores.flatten().tolist()]
    plt.close(fig)
    with pytest.raises(ValueError, match="finite"):
        head_scores_heatmap(torch.tensor([[float("nan")]]), "t", "l")
    with pytest.raises(ValueError, match="layers, heads"):
        head_scores_heatmap(torch.ones(3), "t", "l")


def test_sink_text_says_why_a_small_run_has_no_full_sink():
    weak = prose.sink_text("the offline model", torch.tensor([[0.2, 0.04]]), 0.036,
                           tokens_seen=1_008_000)
    assert "this model read 1,008,000" in weak and "Gu et al. (2025)" in weak
    full = prose.sink_text("the offline model", torch.tensor([[0.9, 0.04]]), 0.036,
                           tokens_seen=1_008_000)
    assert "Gu et al." not in full  # a full sink needs no excuse
