"""Chapter 11's generated sentences and lessons (book.measuring_prose) and its HellaSwag readings
(book.hellaswag), the harness's cleaning checked against the harness itself where installed."""

from __future__ import annotations

import pytest

from gpt_from_scratch.book import lessons
from gpt_from_scratch.book import measuring_prose as prose
from gpt_from_scratch.book.hellaswag import hellaswag_items, hellaswag_rows, preprocess

ROW = {"activity_label": "Baking cookies", "ctx_a": "A woman [header] pours flour.",
       "ctx_b": "then", "ctx": "A woman [header] pours flour. then",
       "endings": ["she stirs it [title] Mix well.", "a dog  barks.", "he sings.", "it rains."],
       "label": "0"}


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    monkeypatch.setattr(lessons, "_LESSONS", {})


def test_mean_and_standard_error_need_two_draws():
    assert prose.mean_se([0.2, 0.4]) == pytest.approx((0.3, 0.1))
    with pytest.raises(ValueError, match="at least two draws"):
        prose.mean_se([0.5])


def test_a_clear_win_holds_and_a_coin_flip_does_not():
    a = {"acc_norm": [0.50, 0.48, 0.52, 0.49, 0.51]}
    b = {"acc_norm": [0.30, 0.31, 0.29, 0.33, 0.30]}
    won = prose.beats("model", a, b, "acc_norm", "the table", "test")
    assert won.holds and "19.4 ± 1.3 points" in won.text
    tie = prose.beats("model", a, {"acc_norm": [0.52, 0.47, 0.50, 0.50, 0.50]}, "acc_norm",
                      "the table", "test")
    assert not tie.holds and "cannot tell" in tie.text
    assert prose.above_chance("model", a["acc_norm"], 0.25, "acc_norm", "test").holds
    assert not prose.above_chance("model", [0.24, 0.27, 0.25], 0.25, "acc_norm", "test").holds


def test_bits_per_byte_sentence_and_lesson():
    text, found = prose.bpb_text({"character model": dict(per_token=1.60, bpb=2.40),
                                  "BPE model": dict(per_token=6.40, bpb=2.90)})
    assert found.holds and "4.0 times apart" in text and "better, by 0.50 bits per byte" in text
    text, found = prose.bpb_text({"character model": dict(per_token=1.60, bpb=3.00),
                                  "BPE model": dict(per_token=6.40, bpb=2.90)})
    assert not found.holds and "only seemed better" in text


def test_the_offline_model_read_per_byte_beside_the_other_two():
    rows = {"character model": dict(bpb=2.37), "BPE model": dict(bpb=2.94),
            "offline model": dict(bpb=2.40)}
    steps = {"character model": 3000, "BPE model": 100, "offline model": 2000}
    text = prose.offline_bpb_text(rows, steps, 11_235)
    assert "only the 11,234 tokens of the training text and `<|endoftext|>`" in text and "2,000 training steps" in text
    assert "2.40 bits per byte, below the BPE model's 2.94" in text
    assert "the character model (2.37) still predicts this text better, by 0.03" in text
    rows["offline model"] = dict(bpb=2.30)
    assert "better than the character model (2.37) too, by 0.07 bits per byte." in (
        prose.offline_bpb_text(rows, steps, 11_235))
    rows["offline model"] = dict(bpb=2.368)
    assert "(2.37) predicts this text as well." in prose.offline_bpb_text(rows, steps, 11_235)


def test_next_line_reading_says_who_stands_clear_of_a_guess():
    text = prose.next_line_text({"BPE model": {"acc_norm": [0.25, 0.26, 0.24]},
                                 "b": {"acc_norm": [0.60, 0.62, 0.58]}}, 0.25, 3.1)
    assert "Clear of a guess by two standard errors: b." in text
    assert "about 198 characters here" in text and "for the BPE model, near a guess" in text
    text = prose.next_line_text({"BPE model": {"acc_norm": [0.60, 0.62, 0.58]}}, 0.25, 3.1)
    assert "several lines." in text and "near a guess" not in text


def test_the_context_free_rules_are_read_against_a_guess():
    near = {"acc_norm": [0.24, 0.27, 0.25, 0.26]}
    scores = {"most frequent word": near, "bigram table": near,
              "reader": {"acc_norm": [0.40, 0.42, 0.39, 0.41]},
              "skimmer": {"acc_norm": [0.25, 0.26, 0.24, 0.27]}}
    text = prose.context_free_text(scores, 0.25)
    assert "Both stay within two standard errors of a guess" in text
    assert "the skimmer does not beat the most frequent word" in text and "reader" not in text
    scores["most frequent word"] = {"acc_norm": [0.44, 0.49, 0.41, 0.45]}
    assert "still rewards something" in prose.context_free_text(scores, 0.25)


def test_the_shortest_choice_sentence_says_which_way_acc_norm_leans():
    share = {"acc": [0.60, 0.58, 0.62], "gold": [0.38, 0.40, 0.38],
             "acc_norm": [0.29, 0.28, 0.30]}
    text = prose.shortest_text(share)
    assert "`acc` picks the shortest choice 60.0%" in text and "under-picks" in text
    share["acc_norm"] = [0.39, 0.38, 0.39]
    assert "about as often as the right word" in prose.shortest_text(share)


def test_the_two_hellaswag_readings():
    nanogpt, harness = hellaswag_items([ROW], "nanogpt")[0], hellaswag_items([ROW], "harness")[0]
    assert nanogpt.context == ROW["ctx"] and nanogpt.choices == ROW["endings"]
    assert harness.context == "Baking cookies: A woman pours flour. Then"
    assert harness.choices[0] == "she stirs it. Mix well." and harness.choices[1] == "a dog barks."
    with pytest.raises(ValueError, match="unknown reading"):
        hellaswag_items([ROW], "raw")


def test_the_cleaning_equals_the_harness():
    utils = pytest.importorskip("lm_eval.tasks.hellaswag.utils")
    datasets = pytest.importorskip("datasets")
    doc = utils.process_docs(datasets.Dataset.from_list([ROW]))[0]
    item = hellaswag_items([ROW], "harness")[0]
    assert doc["query"] == item.context and doc["choices"] == item.choices
    for text in ROW["endings"] + [ROW["ctx"], " [step] x [title] y  z "]:
        assert preprocess(text) == utils.preprocess(text)


def test_the_hellaswag_sentence_offline_and_online():
    import torch

    from gpt_from_scratch.evaluate import ChoiceScores

    offline = prose.hellaswag_text("no network", None)
    assert "did not run here (no network)" in offline and "0.2955" in offline
    one = torch.ones(2, 2, dtype=torch.float64)
    scores = ChoiceScores(torch.tensor([[-1.0, -2.0], [-3.0, -1.0]], dtype=torch.float64), one,
                          one, torch.tensor([0, 0]))
    online = prose.hellaswag_text(None, {"nanogpt": scores, "harness": scores})
    assert "On 2 items, build-nanogpt's reading gives 0.5000" in online and "+0.0 points" in online


def test_a_damaged_hellaswag_file_is_named_with_its_line(tmp_path):
    path = tmp_path / "hellaswag_val.jsonl"
    path.write_text('{"ctx": "a"}\n{"ctx": "b", "end\n', encoding="utf-8")  # cut short
    with pytest.raises(ValueError, match=r"val.jsonl, line 2, is not JSON .*delete it"):
        hellaswag_rows(path)  # a bare JSONDecodeError before


def test_a_failed_hellaswag_download_says_where_to_put_a_copy(tmp_path, monkeypatch):
    import urllib.error
    import urllib.request

    def offline(*args, **kwargs):
        raise urllib.error.URLError("no route to host")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    path = tmp_path / "hellaswag" / "hellaswag_val.jsonl"
    with pytest.raises(OSError, match="cannot download .*put a copy of hellaswag_val"):
        hellaswag_rows(path)  # a bare URLError before
    assert not path.exists() and list(path.parent.iterdir()) == []  # no half-written file
