"""The chapters' quizzes: questions in jupyterquiz's format, answers checked as the page checks them."""

from __future__ import annotations

import pytest

from gpt_from_scratch.quiz import Choice, MultipleChoice, Numeric, as_html, quiz_json, show_quiz


def accepts(question: dict, submission: float) -> bool:
    """What jupyterquiz's numeric.js does with a typed number: the first range holding it decides."""
    for answer in question["answers"]:
        if "range" in answer and answer["range"][0] <= submission < answer["range"][1]:
            return answer["correct"]
    return False


def test_a_numeric_answer_is_right_within_its_tolerance_only():
    measured = 3.2951  # what a chapter printed as 3.30
    question = Numeric("Characters per token?", measured, 0.006, "BPE compresses.").to_json()
    assert question["type"] == "numeric"
    assert accepts(question, 3.30) and accepts(question, 3.29)
    assert not accepts(question, 3.31) and not accepts(question, 3.28)
    assert question["answers"][0]["feedback"].startswith("Correct: 3.2951.")
    assert question["answers"][-1]["type"] == "default"  # feedback for any other number


def test_multiple_choice_marks_exactly_one_answer_correct():
    question = MultipleChoice("Q?", [Choice("a", True, "yes"), Choice("b", False, "no")])
    answers = question.to_json()["answers"]
    assert [(a["answer"], a["correct"], a["feedback"]) for a in answers] == [
        ("a", True, "yes"), ("b", False, "no")]
    with pytest.raises(ValueError, match="exactly one correct"):
        MultipleChoice("Q?", [Choice("a", True, ""), Choice("b", True, "")])
    with pytest.raises(ValueError, match="exactly one correct"):
        MultipleChoice("Q?", [Choice("a", False, ""), Choice("b", False, "")])


def test_bad_questions_are_refused_with_the_fix():
    with pytest.raises(ValueError, match="tolerance must be > 0"):
        Numeric("Q?", 1.0, 0, "")
    with pytest.raises(ValueError, match="at least one question"):
        quiz_json([])
    with pytest.raises(ValueError, match="TeX"):
        as_html("costs $5")


def test_text_is_shown_as_written():
    assert as_html("an <unk> token & `top_k_filter`") == \
        "an &lt;unk&gt; token &amp; <code>top_k_filter</code>"


def test_show_quiz_puts_the_questions_and_their_script_in_the_output(monkeypatch):
    pytest.importorskip("jupyterquiz", reason="the quizzes need jupyterquiz (pip install jupyterquiz)")
    import jupyterquiz.dynamic.display as display_module

    shown = []
    monkeypatch.setattr(display_module, "display", lambda obj: shown.append(obj))
    show_quiz([Numeric("How many heads?", 12, 0.5, "Twelve.")])
    html, script = shown
    assert html.data.startswith("<div id=")  # the container the script fills
    assert '"question": "How many heads?"' in script.data and "show_questions" in script.data
