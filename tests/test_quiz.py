"""The chapters' quizzes: questions in jupyterquiz's format, answers checked as the page checks them."""

from __future__ import annotations

import ast
import builtins
import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from gpt_from_scratch.book.quiz import (
    Choice, MultipleChoice, Numeric, as_html, quiz_json, quiz_text, show_quiz,
)


jupytext = pytest.importorskip("jupytext", reason="reading the twins needs jupytext")
ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("make_student", ROOT / "scripts" / "make_student.py")
make_student = importlib.util.module_from_spec(spec)
sys.modules.setdefault("make_student", make_student)
spec.loader.exec_module(make_student)


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
    as_tensor = Numeric("Q?", torch.tensor(measured), 0.006, "").to_json()  # JSON-ready
    assert json.loads(json.dumps(as_tensor))["answers"][0]["range"] == pytest.approx(
        question["answers"][0]["range"])


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


def test_show_quiz_puts_the_questions_and_their_script_in_the_output():
    pytest.importorskip("jupyterquiz", reason="the quizzes need jupyterquiz (pip install jupyterquiz)")
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    InteractiveShell.instance()  # display() publishes through a shell, as in a notebook
    questions = [Numeric("How many heads?", 12, 0.5, "Twelve."),
                 MultipleChoice("Which?", [Choice("this", True, ""), Choice("that", False, "")])]
    with capture_output() as shown:
        show_quiz(questions)
    container, script = (output.data for output in shown.outputs)
    assert container["text/html"].startswith("<div id=")  # the container the script fills
    assert container["text/plain"] == quiz_text(questions)  # the PDF's version
    assert "2. Which?\n   a) this\n   b) that" in container["text/plain"]
    js = script["application/javascript"]
    assert '"question": "How many heads?"' in js and "show_questions" in js
    assert script["text/plain"] == ""


def defined_names(tree) -> set[str]:
    """Names a cell binds: assignments, imports, definitions, loop and with targets."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def python(source: str) -> str:
    """A cell's source with its IPython magics (``%pip ...``) as ``pass``."""
    lines = source.splitlines()
    return "\n".join(line[:len(line) - len(line.lstrip())] + "pass"
                     if line.lstrip().startswith(("%", "!")) else line for line in lines)


@pytest.mark.parametrize("twin", sorted((ROOT / "notebooks" / "text").glob("*.py")),
                         ids=lambda p: p.stem)
def test_each_chapter_ends_with_a_quiz_built_from_its_own_variables(twin):
    """The quiz reads only names that the chapter binds before its exercises and the exercises
    leave alone, so it runs in a student copy (whose solutions are stubs) and its numbers are
    the ones the chapter printed."""
    nb = jupytext.read(twin)
    quiz = [c for c in nb.cells if c.cell_type == "code" and "quiz" in c.metadata.get("tags", [])]
    assert len(quiz) == 1, f"{twin.name}: expected one quiz cell tagged quiz, found {len(quiz)}"
    assert nb.cells[-1] is quiz[0], f"{twin.name}: the quiz must end the chapter"
    start = make_student.exercises_start(nb)
    bound = set(dir(builtins))
    for cell in nb.cells[:start]:
        if cell.cell_type == "code":
            bound |= defined_names(ast.parse(python(cell.source)))
    tree = ast.parse(quiz[0].source)
    bound |= defined_names(tree)
    read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    assert read <= bound, f"{twin.name}: the quiz reads {sorted(read - bound)}, which no cell before the exercises binds"
    rebound = set()
    for cell in nb.cells[start:-1]:
        if cell.cell_type == "code":
            rebound |= defined_names(ast.parse(python(cell.source)))
    assert not read & rebound, f"{twin.name}: the exercises rebind {sorted(read & rebound)}, which the quiz reads"
    assert "Numeric(" in quiz[0].source and "MultipleChoice(" in quiz[0].source


@pytest.mark.parametrize("typed, right", [
    ("124M", True), ("1.24e8", True), ("124,439,808", True), ("124439808", True),
    ("124.4M", True), (" 0.1244 B ", True), ("120M", False), ("125M", False),
    ("1.2e8", False),  # two significant digits: too coarse to count as the answer
    ("124,000,000", True), ("1,244", False), ("abc", False)])
def test_typed_numbers_are_read_as_readers_write_them(typed, right):
    """The page's own reading of a typed number (quiz.NUMBER_JS, run by Node), then
    jupyterquiz's range check."""
    import shutil
    import subprocess

    from gpt_from_scratch.book.quiz import NUMBER_JS

    if shutil.which("node") is None:
        pytest.skip("reading typed numbers is JavaScript: the test needs Node")
    question = Numeric("Parameters of GPT-2 small?", 124_439_808, 0.5, "124M: its name.").to_json()
    script = ("globalThis.window = {}; globalThis.document = {addEventListener() {}};\n"
              + NUMBER_JS + f"\nconsole.log(window.gfsTypedNumber({json.dumps(typed)}, "
              f"{json.dumps(question['answers'])}));")
    read = subprocess.run(["node", "-e", script], capture_output=True, text=True,
                          check=True).stdout.strip()
    try:
        number = float(read)
    except ValueError:
        number = float("nan")
    assert accepts(question, number) == right, read


@pytest.mark.parametrize("key, passes", [("M", False), (",", False), ("%", False),
                                          ("Enter", True)])
def test_letters_reach_a_numeric_field_past_jupyterquizs_key_filter(key, passes):
    """jupyterquiz drops every key but digits, ".", "-", "e" and "/" (its isValid), so "124M"
    could not be typed: the page's capture listener stops the others before that filter, in a
    numeric question only, and reads the number on Enter."""
    import shutil
    import subprocess

    from gpt_from_scratch.book.quiz import NUMBER_JS

    if shutil.which("node") is None:
        pytest.skip("the key listener is JavaScript: the test needs Node")
    answers = Numeric("Parameters?", 124_439_808, 0.5, "Its name.").to_json()["answers"]
    script = (
        "const listeners = [];\n"
        "globalThis.window = {};\n"
        "globalThis.document = {addEventListener(type, f, capture) {"
        " listeners.push([type, f, capture]); }};\n" + NUMBER_JS + "\n"
        f"const numericAnswers = {json.dumps(json.dumps(answers))};\n"
        "const stringAnswers = JSON.stringify([{type: 'string', answer: '124M', correct: true}]);\n"
        "const field = (numeric) => ({value: '124M', dataset: {answers: numeric ? numericAnswers"
        " : stringAnswers}, matches: s => s === 'input.Input-text'});\n"
        "const out = [];\n"
        "for (const numeric of [true, false]) {\n"
        "  let stopped = false;\n"
        "  const input = field(numeric);\n"
        f"  const event = {{key: {json.dumps(key)}, target: input,"
        " stopPropagation() { stopped = true; }};\n"
        "  for (const [type, f, capture] of listeners) if (type === 'keypress' && capture) f(event);\n"
        "  out.push({stopped, value: input.value});\n"
        "}\n"
        "console.log(JSON.stringify(out));")
    numeric, other = json.loads(subprocess.run(["node", "-e", script], capture_output=True,
                                               text=True, check=True).stdout)
    assert numeric["stopped"] is not passes and not other["stopped"]
    assert numeric["value"] == ("124439808" if key == "Enter" else "124M")
    assert other["value"] == "124M"


def test_a_wrong_number_gets_the_reasoning_and_a_near_miss_a_word_on_rounding():
    question = Numeric("Share held by the MLP? (Percent, one decimal.)", 66.6558, 0.06,
                       "About two thirds: d_ff = 4D.").to_json()
    near, default = question["answers"][1], question["answers"][2]
    assert near["range"][0] <= 66.0 < near["range"][1] and not near["correct"]
    assert "rounding" in near["feedback"] and "d_ff = 4D" in near["feedback"]
    assert "d_ff = 4D" in default["feedback"] and "look at the printed output" not in \
        default["feedback"]
