"""Self-check quizzes at the end of each chapter: multiple choice and numeric questions with
instant feedback, shown by jupyterquiz (MIT) in the rendered book, Jupyter and Colab.

A chapter writes its questions in code from its own variables, so a question about a
measured number is written from the number and stays true when the outputs change.
jupyterquiz puts the questions and its JavaScript into the cell's output: the page needs no
kernel and no network. JupyterLab runs an output's JavaScript only in a trusted notebook
(one whose cells the reader ran, or ``jupyter trust``); elsewhere the output shows the
questions as HTML with each answer's feedback folded (``<details>``), hidden once the quiz
is drawn.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass

CODE = re.compile(r"`([^`]+)`")


def as_html(text: str) -> str:
    """jupyterquiz shows text as HTML: escape it (``<unk>`` stays), `code` as code."""
    if "$" in text:
        raise ValueError(f"{text!r} holds a $, which jupyterquiz reads as TeX: write it "
                         "out")
    return CODE.sub(r"<code>\1</code>", html.escape(text, quote=False))


@dataclass(frozen=True)
class Choice:
    """One answer of a multiple-choice question and the feedback shown when it is picked."""

    text: str
    correct: bool
    feedback: str


@dataclass(frozen=True)
class MultipleChoice:
    question: str
    choices: Sequence[Choice]

    def __post_init__(self):
        n_correct = sum(c.correct for c in self.choices)
        if len(self.choices) < 2 or n_correct != 1:
            raise ValueError(f"{self.question!r} has {len(self.choices)} choices, "
                             f"{n_correct} correct: give at least two choices and mark "
                             "exactly one correct")

    def to_json(self) -> dict:
        answers = [{"answer": as_html(c.text), "correct": c.correct,
                    "feedback": as_html(c.feedback)} for c in self.choices]
        return {"question": as_html(self.question), "type": "multiple_choice",
                "answers": answers}


@dataclass(frozen=True)
class Numeric:
    """A number to type in; any answer within ``tolerance`` of ``answer`` is right, and so is
    one given to 3 or more significant digits that ``answer`` rounds to (124M, 1.24e8 for
    124,439,808: ``NUMBER_JS`` reads what the reader types). ``feedback`` explains how the
    number comes about; a wrong answer gets it too, a near miss a word on the rounding."""

    question: str
    answer: float
    tolerance: float
    feedback: str

    def __post_init__(self):
        if not self.tolerance > 0:
            raise ValueError(f"{self.question!r}: tolerance must be > 0, got "
                             f"{self.tolerance!r}; "
                             "pass half the last printed digit, e.g. 0.005 for 0.12")

    def to_json(self) -> dict:
        answer = float(self.answer)  # a number, a NumPy or a 0-d tensor value
        low, high = answer - self.tolerance, answer + self.tolerance
        shown = f"{int(answer):,}" if answer.is_integer() and abs(answer) < 1e15 else f"{answer:.6g}"
        near = max(10 * self.tolerance, 0.05 * abs(answer))  # a rounding or a digit off
        return {"question": as_html(self.question), "type": "numeric", "answers": [
            {"type": "range", "range": [low, high], "correct": True,
             "feedback": as_html(f"Correct: {shown}. {self.feedback}")},
            {"type": "range", "range": [answer - near, answer + near], "correct": False,
             "feedback": as_html(f"Close, but not within {self.tolerance:g} of the answer: "
                                 f"check the rounding the question asks for. {self.feedback}")},
            {"type": "default",
             "feedback": as_html(f"Not quite. How it comes about: {self.feedback}")}]}


def quiz_json(questions: Sequence[MultipleChoice | Numeric]) -> list[dict]:
    """jupyterquiz's format: one dict per question."""
    if not questions:
        raise ValueError("a quiz needs at least one question")
    return [q.to_json() for q in questions]


def quiz_text(questions: Sequence[MultipleChoice | Numeric]) -> str:
    """The questions as plain text: what the PDF edition shows (no feedback there)."""
    lines = ["Check yourself (instant feedback in the HTML edition):"]
    for number, q in enumerate(questions, 1):
        lines.append(f"{number}. {q.question}")
        if isinstance(q, MultipleChoice):
            lines += [f"   {letter}) {c.text}" for letter, c in zip("abcdefgh", q.choices)]
    return "\n".join(lines)


# Numbers as readers type them, before jupyterquiz reads its input (on Enter, in the capture
# phase): a thousands separator (124,439,808), a suffix k, M, B (124M), a percent sign, a
# Unicode minus. One with 3 or more significant digits that the answer rounds to (124M, 1.24e8
# for 124,439,808) becomes the answer itself. jupyterquiz compares the raw text with its ranges,
# so "124M" was NaN and "124,439,808" too: this is the one place that reads them. jupyterquiz
# also refuses, key by key, every character but digits, ".", "-", "e" and "/" (its isValid), so
# "124M" could not even be typed: in a numeric question, the other keys stop here, before it.
NUMBER_JS = r"""
window.gfsTypedNumber = (text, answers) => {
  let t = text.trim().replace(/[\u2212\u2013]/g, "-").replace(/[\s_']/g, "");
  if (/^[-+]?\d{1,3}(,\d{3})+(\.\d*)?($|[^\d,])/.test(t)) t = t.replace(/,/g, "");
  const m = t.match(/^([-+]?(\d*\.?\d*)(?:e[-+]?\d+)?)(%|[kmbgt])?$/i);
  if (!m || !/\d/.test(m[2])) return text;
  const scale = {k: 1e3, m: 1e6, b: 1e9, g: 1e9, t: 1e12}[(m[3] || "").toLowerCase()] || 1;
  const value = Number(m[1]) * scale;
  const digits = m[2].replace(".", "").replace(/^0+/, "");
  const significant = (m[2].includes(".") ? digits : digits.replace(/0+$/, "")).length;
  const right = answers.find(a => a.correct && a.range);
  if (right && significant >= 3) {
    const exact = (right.range[0] + right.range[1]) / 2;
    const rounded = x => Number(x.toPrecision(significant));
    if (rounded(exact) === rounded(value)) return String(exact);
  }
  return String(value);
};
if (!window.gfsQuizNumbers) {
  window.gfsQuizNumbers = true;
  // A numeric question's field: jupyterquiz's input whose answers are ranges or values (a
  // string question's are strings); the field is not inside the question's .NumericQn.
  const numericAnswers = input => {
    if (!(input.matches && input.matches("input.Input-text"))) return null;
    try {
      const answers = JSON.parse(input.dataset.answers || "null");
      const numeric = Array.isArray(answers)
        && answers.some(a => a.type === "range" || a.type === "value");
      return numeric ? answers : null;
    } catch (error) {
      return null;
    }
  };
  document.addEventListener("keypress", event => {
    const input = event.target;
    const answers = numericAnswers(input);
    if (!answers) return;
    if (event.key === "Enter") {
      input.value = window.gfsTypedNumber(input.value, answers);
    } else {
      event.stopPropagation();  // jupyterquiz's own key filter drops M, k, "," and "%"
    }
  }, true);
}
"""

# The static quiz hides once jupyterquiz has drawn its .Quiz (in or after the container).
STATIC_CSS = ("<style>div:has(> .Quiz) > .gfs-quiz-static, "
              "div:has(> .Quiz) + .gfs-quiz-static {display: none}</style>")


def quiz_static_html(questions: Sequence[MultipleChoice | Numeric]) -> str:
    """The questions as HTML that needs no JavaScript: what an untrusted notebook shows (its
    sanitizer keeps ``<details>``); every answer opens to its feedback."""
    items = []
    for q in questions:
        if isinstance(q, MultipleChoice):
            answers = "".join(f"<details><summary>{letter}) {as_html(c.text)}</summary>"
                              f"<p>{as_html(c.feedback)}</p></details>"
                              for letter, c in zip("abcdefgh", q.choices))
        else:
            answers = ("<details><summary>Show the answer</summary>"
                       f"<p>{float(q.answer):.6g}. {as_html(q.feedback)}</p></details>")
        items.append(f"<li><p>{as_html(q.question)}</p>{answers}</li>")
    return (f'{STATIC_CSS}<div class="gfs-quiz-static"><p><strong>Check yourself.</strong> '
            "Open an answer to see its feedback (run this cell, or trust the notebook, for "
            f"the interactive quiz).</p><ol>{''.join(items)}</ol></div>")


def show_quiz(questions: Sequence[MultipleChoice | Numeric]) -> None:
    """Display the questions with instant feedback (answers shuffled on each view).

    jupyterquiz displays an HTML container and the script that fills it; both are shown
    again with plain text fit for the PDF (the questions, and nothing for the script)
    instead of the objects' reprs. The container also holds the questions as static HTML
    for a notebook that does not run the script (``quiz_static_html``). The script runs
    in a scope where ``MathJax`` is undefined: quiz text holds no TeX (``as_html``), and
    jupyterquiz, finding JupyterLab's MathJax (which has no ``typeset``), would replace it
    with MathJax 3 fetched from a CDN.
    """
    from IPython.display import display
    from IPython.utils.capture import capture_output
    from jupyterquiz import display_quiz

    with capture_output() as quiz:
        display_quiz(quiz_json(questions), shuffle_answers=True, max_width=720)
    container, script = (output.data for output in quiz.outputs)
    display({"text/html": container["text/html"] + quiz_static_html(questions),
             "text/plain": quiz_text(questions)}, raw=True)
    code = (f"(function (MathJax) {{\n{script['application/javascript']}\n}})();"
            + NUMBER_JS)
    display({"application/javascript": code, "text/plain": ""}, raw=True)
