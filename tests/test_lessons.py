"""The lessons a chapter judges (gpt_from_scratch.book.lessons) and nbval's tolerance for numbers
from training (notebooks/conftest.py): a lesson never raises, its verdict line fails nbval."""

import importlib.util
import json
import math
from pathlib import Path

import pytest

from gpt_from_scratch.book import lessons

ROOT = Path(__file__).resolve().parents[1]


def _tolerance_plugin():
    spec = importlib.util.spec_from_file_location("nbval_tolerance", ROOT / "notebooks/conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    monkeypatch.setattr(lessons, "_LESSONS", {})
    monkeypatch.delenv("GPT_FROM_SCRATCH_LESSONS", raising=False)


def test_a_lesson_that_holds_and_one_that_does_not():
    good = lessons.lesson("the loss falls", 0.08, "nats", "It falls.", "It does not fall here.")
    bad = lessons.lesson("words are real", -0.01, "points", "Real.", "Not real here.")
    assert good.holds and good.text == "It falls."
    assert not bad.holds and bad.text == "Not real here."
    assert lessons.verdicts() == "holds: the loss falls\nDOES NOT HOLD: words are real"


def test_verdicts_carry_no_numbers_and_a_rejudged_lesson_replaces_itself():
    lessons.lesson("x", 1.234, "nats", "a", "b")
    lessons.lesson("x", -2.5, "nats", "a", "b")
    assert lessons.verdicts() == "DOES NOT HOLD: x"
    assert not any(ch.isdigit() for ch in lessons.verdicts())


def test_a_margin_that_is_not_a_number_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="margin nan must be a number"):
        lessons.lesson("x", math.nan, "nats", "a", "b")


def test_margins_are_recorded_for_the_spread_measurement(tmp_path, monkeypatch):
    path = tmp_path / "lessons.jsonl"
    monkeypatch.setenv("GPT_FROM_SCRATCH_LESSONS", str(path))
    lessons.lesson("x", 0.5, "nats", "a", "b")
    record = json.loads(path.read_text())
    assert record["name"] == "x" and record["margin"] == 0.5 and record["holds"] is True


def test_paired_difference_and_standard_errors():
    mean, se = lessons.paired_difference([2.30, 2.34, 2.28], [2.27, 2.30, 2.26])
    assert mean == pytest.approx(0.03) and se == pytest.approx(0.01 / math.sqrt(3), rel=1e-6)
    assert lessons.standard_errors(0.03, 0.0) == math.inf
    assert lessons.standard_errors(0.0, 0.0) == 0.0
    with pytest.raises(ValueError, match="one value per seed"):
        lessons.paired_difference([1.0], [2.0])


def test_tolerance_accepts_numbers_within_it_and_nothing_else():
    within = _tolerance_plugin().within
    tol = {"abs": 0.02}
    assert within("val 1.73 at step 500", "val 1.72 at step 500", tol) == "val 1.72 at step 500"
    assert within("val 1.75 at step 500", "val 1.72 at step 500", tol) == "val 1.75 at step 500"
    assert within("train 1.73", "val 1.72", tol) == "train 1.73"  # other words: unchanged
    rel = {"rel": 0.05}
    assert within("89% and 1.00", "86% and 1.01", rel) == "86% and 1.01"
    assert within("70% and 1.00", "86% and 1.01", rel) == "70% and 1.01"  # only the near one
