"""Student copies (scripts/make_student.py): no solution code survives, and a copy runs up to its first exercise."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="the notebook checks need nbformat (pip install nbformat)")

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"

spec = importlib.util.spec_from_file_location("make_student", ROOT / "scripts" / "make_student.py")
make_student = importlib.util.module_from_spec(spec)
sys.modules["make_student"] = make_student
spec.loader.exec_module(make_student)


def code(source: str, tags: tuple[str, ...] = (), output: str | None = None):
    cell = nbformat.v4.new_code_cell(source, metadata={"tags": list(tags)} if tags else {})
    if output is not None:
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=output)]
        cell.execution_count = 1
    return cell


def markdown(source: str):
    return nbformat.v4.new_markdown_cell(source)


SOLUTION = '''\
import torch


@torch.no_grad()
def causal_mask_solution(
    T: int,  # the number of positions
) -> torch.Tensor:
    """Boolean (T, T) mask, True on and below the diagonal."""
    # every query sees itself and the past
    ones = torch.ones(T, T, dtype=torch.bool)
    return ones.tril()
'''

CLASS_SOLUTION = '''\
class CharTokenizerSolution:
    """One token per character."""

    def __init__(self, text):
        self.chars = sorted(set(text))

    @property
    def vocab_size(self):
        return len(self.chars)

    def encode(self, s): return [self.chars.index(c) for c in s]
'''


def chapter():
    return nbformat.v4.new_notebook(cells=[
        markdown("(ch-test)=\n# 9. A test chapter"),
        code("x = 1 + 1\nprint(x)", output="2\n"),
        markdown("## Summary\nDone."),
        markdown("## Exercises\n\n**1. Predict, then run.** What does this print?"),
        code("print(x * 21)", output="42\n"),
        markdown("**2. Implement.** Write `causal_mask_solution(T)`: a boolean mask. Then check it."),
        code(SOLUTION, tags=("solution", "hide-input"), output=""),
        code("from gpt_from_scratch.exercises import check_causal_mask\ncheck_causal_mask(causal_mask_solution)",
             output="✅ check_causal_mask: all 3 cases passed.\n"),
        markdown("### Exercise 3\n\nBuild a character tokenizer class."),
        code(CLASS_SOLUTION, tags=("solution",)),
        code("answer = 6 * 7\nprint(answer)", tags=("solution",), output="42\n"),
        markdown("**4. Explain.** Why 42?\n\n```{admonition} Answers\n:class: dropdown\n1. It prints 42.\n"
                 "   ```python\n   print(42)\n   ```\n4. Six times seven.\n```\n\nThe end."),
    ])


def body_lines(source: str) -> set[str]:
    """Lines of a solution that are its answer: function bodies (docstrings excluded) and top-level code.

    Worked out here from the syntax tree, independently of make_student's own slicing.
    """
    lines = source.splitlines()
    tree = ast.parse(source)
    spans = []

    def function_body(node) -> None:
        first = node.body[0]
        has_doc = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str)
        start = first.end_lineno + 1 if has_doc else first.lineno
        if start > node.lineno:  # a one-line def keeps its body on the header line: skipped
            spans.append((start, node.end_lineno))
        elif not has_doc:
            spans.append((node.end_lineno + 1, node.end_lineno))

    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function_body(node)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    function_body(item)
                elif not (isinstance(item, ast.Expr) and isinstance(item.value, ast.Constant)):
                    spans.append((item.lineno, item.end_lineno))
        elif not isinstance(node, (ast.Import, ast.ImportFrom)):
            spans.append((node.lineno, node.end_lineno))
    found = set()
    for start, end in spans:
        for line in lines[start - 1:end]:
            if len(line.strip()) >= 6:  # ")", "else:" and the like say nothing
                found.add(line.strip())
    return found


def all_lines(nb, skip_solutions: bool = False) -> set[str]:
    return {line.strip() for cell in nb.cells
            if not (skip_solutions and make_student.is_solution(cell))
            for line in cell.source.splitlines()}


def assert_no_solution_code(original, student) -> None:
    legit = all_lines(original, skip_solutions=True)  # lines the chapter itself shows (e.g. its inline build)
    copy = all_lines(student)
    for cell in original.cells:
        if make_student.is_solution(cell):
            leaked = (body_lines(cell.source) - legit) & copy
            assert not leaked, f"solution lines left in the student copy: {sorted(leaked)}"


# ----------------------------------------------------------------------------------------------
# The transformation, on a synthetic chapter
# ----------------------------------------------------------------------------------------------


def test_function_stub_keeps_decorator_signature_and_docstring():
    stub = make_student.stub_source(SOLUTION, "Your turn: write it.")
    assert "import torch" in stub
    assert "@torch.no_grad()\ndef causal_mask_solution(\n    T: int,  # the number of positions\n) -> torch.Tensor:" in stub
    assert '    """Boolean (T, T) mask, True on and below the diagonal."""\n' in stub
    assert stub.rstrip().endswith("    raise NotImplementedError('Your turn: write it.')")
    assert not body_lines(SOLUTION) & {line.strip() for line in stub.splitlines()}
    assert "every query sees" not in stub  # comments of the body go too


def test_class_stub_keeps_method_signatures():
    stub = make_student.stub_source(CLASS_SOLUTION, "Your turn.")
    tree = ast.parse(stub)
    (cls,) = tree.body
    assert [m.name for m in cls.body if isinstance(m, ast.FunctionDef)] == ["__init__", "vocab_size", "encode"]
    assert "    @property\n    def vocab_size(self):" in stub
    assert "sorted(set(text))" not in stub and "index(c)" not in stub and "len(self.chars)" not in stub
    namespace = {}
    exec(compile(stub, "<stub>", "exec"), namespace)
    with pytest.raises(NotImplementedError, match="Your turn."):
        namespace["CharTokenizerSolution"]("abc")


def test_an_answer_cell_becomes_a_prompt_without_the_answer():
    """A solution cell that defines nothing answers an explain or predict exercise: the copy keeps a
    comment asking for the student's answer, no code of the answer, and lets *Run all* go on."""
    stub = make_student.stub_source("answer = 6 * 7\nprint(answer)", "Your turn: explain.")
    assert "answer = 6 * 7" not in stub and "print" not in stub
    assert stub.startswith("# Your turn: explain.")
    assert ast.parse(stub).body == []  # comments only: running it does nothing


def test_a_cell_that_is_not_plain_python_becomes_a_raise():
    stub = make_student.stub_source("%timeit sum(range(10))", "Your turn.")
    assert "timeit" not in stub
    with pytest.raises(NotImplementedError, match="Your turn."):
        exec(compile(stub, "<stub>", "exec"), {})


def test_stubbed_function_raises_with_the_instructions():
    nb = make_student.make_student(chapter())
    namespace = {}
    exec(compile(nb.cells[6].source, "<stub>", "exec"), namespace)
    with pytest.raises(NotImplementedError, match=r"Your turn: 2. Implement. Write `causal_mask_solution\(T\)`"):
        namespace["causal_mask_solution"](4)


def test_the_message_quotes_the_exercise_not_the_summary_above_it():
    cell = ("## Summary\n\n- Attention is a weighted average.\n\n## Exercises\n\n"
            "**1. A causal mask (implement).** Write `causal_mask_solution(T)` from two {ref}`aranges <ch-attention>` "
            "and a comparison, using broadcasting so that it works for every $T$ without a loop over rows.")
    message = make_student.instruction(cell)
    assert message.startswith("1. A causal mask (implement). Write `causal_mask_solution(T)` from two aranges")
    assert len(message) <= 120 and message.endswith("…")


def test_student_copy_of_a_synthetic_chapter():
    original = chapter()
    before = nbformat.writes(original)
    student = make_student.make_student(original)
    assert nbformat.writes(original) == before  # the chapter itself is not modified
    nbformat.validate(student)
    assert len(student.cells) == len(original.cells)
    for index in (0, 1, 2, 3, 5, 7, 8):  # prose, chapter code, check calls: same source
        assert student.cells[index].source == original.cells[index].source
    assert student.cells[1].outputs == original.cells[1].outputs  # the chapter keeps its outputs
    for index in (4, 6, 7, 9, 10):  # the exercises section: no outputs, no answers
        assert student.cells[index].outputs == [] and student.cells[index].execution_count is None
    for index in (6, 9, 10):
        assert student.cells[index].metadata["tags"] == ["exercise"]  # "solution" and "hide-input" gone
    assert student.cells[11].source == f"**4. Explain.** Why 42?\n\n{make_student.ANSWERS_REMOVED}\n\nThe end."
    assert_no_solution_code(original, student)


def test_the_quiz_after_the_exercises_keeps_its_outputs():
    nb = chapter()
    quiz_output = "<the questions and their feedback>"
    nb.cells += [nbformat.v4.new_markdown_cell("## Check yourself", metadata={"tags": ["quiz"]}),
                 code("show_quiz([...])", tags=("quiz", "remove-input"), output=quiz_output)]
    student = make_student.make_student(nb)
    assert student.cells[-1].outputs == nb.cells[-1].outputs
    assert student.cells[-1].metadata["tags"] == ["quiz", "remove-input"]
    assert student.cells[10].outputs == []  # the last exercise's cell is still cleared


@pytest.mark.parametrize("fence", ["```", "````", ":::"])
def test_answers_admonitions_are_removed_and_other_admonitions_kept(fence):
    note = "```{note}\nKeep me.\n```"
    answers = f"{fence}{{admonition}} Answers\n:class: dropdown\n3. The answer.\n{fence}"
    assert make_student.strip_answers(f"Intro.\n\n{note}\n\n{answers}\n") == \
        f"Intro.\n\n{note}\n\n{make_student.ANSWERS_REMOVED}\n"


def test_without_an_exercises_heading_outputs_clear_from_the_first_solution():
    nb = chapter()
    nb.cells[3].source = "**1. Predict, then run.**"
    student = make_student.make_student(nb)
    assert student.cells[4].outputs == nb.cells[4].outputs
    assert student.cells[7].outputs == []


def test_the_script_writes_one_copy_per_notebook(tmp_path):
    source = tmp_path / "09_test.ipynb"
    nbformat.write(chapter(), source)
    assert make_student.main([str(source), "--out", str(tmp_path / "student")]) == 0
    student = nbformat.read(tmp_path / "student" / "09_test.ipynb", as_version=4)
    assert_no_solution_code(chapter(), student)


# ----------------------------------------------------------------------------------------------
# The real chapters
# ----------------------------------------------------------------------------------------------

CHAPTERS = [path for path in sorted(NOTEBOOKS.glob("*.ipynb"))
            if any(make_student.is_solution(c) for c in nbformat.read(path, as_version=4).cells)]
needs_chapters = pytest.mark.skipif(not CHAPTERS, reason="no chapter notebook has a solution cell yet")


@needs_chapters
@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_student_copy_has_no_solution_code(path):
    original = nbformat.read(path, as_version=4)
    student = make_student.make_student(original)
    nbformat.validate(student)
    assert_no_solution_code(original, student)
    for before, after in zip(original.cells, student.cells):
        if make_student.ANSWER_TAG in before.metadata.get("tags", []):
            assert after.cell_type == "markdown" and after.source == make_student.YOUR_ANSWER
        elif make_student.is_solution(before):
            tree = ast.parse(after.source)  # every stub is valid Python
            defines = any(isinstance(n, (ast.FunctionDef, ast.ClassDef)) for n in ast.parse(before.source).body)
            # implement exercises raise until solved; explain/predict answers become a comment prompt
            assert ("raise NotImplementedError(" in after.source) if defines else (tree.body == [])
            assert after.outputs == []
        elif before.cell_type == "markdown":
            assert after.source == make_student.strip_answers(before.source)
            assert "{admonition} Answers" not in after.source
        else:
            assert after.source == before.source


from IPython.core.inputtransformer2 import TransformerManager  # noqa: E402


def stub_names(nb) -> set[str]:
    return set().union(*(make_student.defined_names(c.source) for c in nb.cells
                         if "exercise" in c.metadata.get("tags", [])))


@needs_chapters
@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_only_check_cells_call_the_stubs(path):
    """The static half of "an untouched student copy runs top to bottom": a student copy is the chapter
    (which nbval runs top to bottom in `make test`) with stubs in place of solutions, answer prompts in
    place of answers and no outputs; so it runs to the end when no cell but a check calls a stub, and the
    checks report NotImplementedError instead of raising (tests/test_exercises.py). `make test-student`
    executes every full copy as well."""
    student = make_student.make_student(nbformat.read(path, as_version=4))
    stubs = stub_names(student)
    assert stubs, f"{path.name}: no stub"
    for index, cell in enumerate(student.cells):
        if cell.cell_type != "code" or "exercise" in cell.metadata.get("tags", []):
            continue
        tree = ast.parse(TransformerManager().transform_cell(cell.source))  # %pip and other magics
        used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} & stubs
        if used:
            assert all(isinstance(node, (ast.Import, ast.ImportFrom)) or "check_" in ast.unparse(node)
                       for node in tree.body), f"{path.name} cell {index} calls {used}"


@needs_chapters
@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_no_solution_in_the_student_copys_prose_or_outputs(path):
    """No solution line, no answer text and no output survives in the copy's exercises section (the
    chapter's body may teach the same operations: the exercises ask for variants of them)."""
    original = nbformat.read(path, as_version=4)
    student = make_student.make_student(original)
    start = make_student.exercises_start(student)
    text = "\n".join(c.source for c in student.cells[start:])
    for cell in original.cells:
        hidden = make_student.is_solution(cell) or make_student.ANSWER_TAG in cell.metadata.get("tags", [])
        if hidden:
            body = [line.strip() for line in cell.source.splitlines()
                    if len(line.strip()) > 25 and not line.strip().startswith(("def ", "class ", '"""', "#"))]
            for line in body:
                assert line not in text, f"{path.name}: {line!r} survives in the student copy"
    assert all(not c.get("outputs") for c in student.cells[start:]  # the self-check quiz keeps its own
               if c.cell_type == "code" and make_student.QUIZ_TAG not in make_student.tags(c))
    assert not [c for c in student.cells[start:] if make_student.NBVAL_CHECK in c.metadata.get("tags", [])], (
        "a cleared cell still asks nbval to compare its output (make test-student would fail)")


def test_the_first_chapters_full_student_copy_runs_top_to_bottom():
    """One full copy, executed for real in a fresh kernel (the others: `make test-student`)."""
    from nbclient import NotebookClient

    path = CHAPTERS[0]
    student = make_student.make_student(nbformat.read(path, as_version=4))
    NotebookClient(student, timeout=600, kernel_name="python3", allow_errors=False,
                   resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    printed = "".join(o.get("text", "") for c in student.cells for o in c.get("outputs", []))
    assert printed.count("not implemented yet") == len(stub_names(student))
    assert "✅" not in printed
