"""Write student copies of the chapters: solutions replaced by stubs, exercise outputs cleared.

    python scripts/make_student.py                      # every notebooks/*.ipynb -> _build/student/
    python scripts/make_student.py notebooks/04_attention.ipynb --out /tmp/handout
    python scripts/make_student.py --with-chapter --out _build/nbval   # what make test runs

In a student copy:

- each code cell tagged ``solution`` becomes a stub: every function keeps its decorators, ``def``
  line(s) and docstring, and its body becomes ``raise NotImplementedError("<the exercise's first
  sentence>")``; a class keeps its header, docstring and method signatures the same way; imports stay;
  any other statement is dropped. A cell that defines nothing (the answer to an explain or
  predict-then-run exercise) becomes a comment asking for the student's answer, so *Run all* goes on;
  a cell that is not plain Python becomes a single ``raise``. The tag
  ``solution`` becomes ``exercise`` and tags that hide the cell in the book are removed;
- every code cell of the exercises section (from the first heading containing "Exercise" or the
  first solution cell, whichever comes first) loses its outputs, so neither solutions nor predict-then-run
  answers show, and its ``nbval-check-output`` tag (nothing is left to compare);
- a cell tagged ``answer`` (the teacher's answer to a predict-then-run or explain exercise) becomes
  an empty markdown cell "**Your answer:**" for the student to write in;
- an "Answers" admonition in the prose (```` ```{admonition} Answers ````, folded in the book) is
  replaced by a line saying that the answers are in the teacher's copy;
- cells tagged ``quiz`` (the self-check quiz that ends a chapter, after its exercises) keep
  their outputs: the questions give their own feedback, no teacher needed;
- everything else (prose, the chapter's code and its outputs, the ``check_*`` calls) is unchanged.

The chapter files are never modified.
"""

from __future__ import annotations

import argparse
import ast
import copy
import io
import re
import sys
import tokenize
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
SOLUTION_TAG, EXERCISE_TAG, ANSWER_TAG = "solution", "exercise", "answer"
QUIZ_TAG = "quiz"
YOUR_ANSWER = "**Your answer:**\n\n"
# The book's one exercise format: "### Exercise 3. Top-p without sorting (implement)".
EXERCISE_HEADING = re.compile(r"^###\s+Exercise\s+(?P<number>\d+)\.\s+(?P<title>.+?)\s+"
                              r"\((?P<kind>implement|predict, then run|explain)\)\s*$", re.MULTILINE)
NBVAL_CHECK = "nbval-check-output"
HIDING_TAGS = {"hide-input", "hide-cell", "hide-output", "remove-input", "remove-cell", "remove-output"}
EXERCISES_HEADING = re.compile(r"^\s{0,3}#{1,6}\s.*\bexercises?\b", re.IGNORECASE | re.MULTILINE)
DEFAULT_INSTRUCTION = "write this exercise's solution (see the instructions above)"
# A MyST admonition titled "Answer(s)", fenced with backticks or colons: from its opening fence to the
# first closing fence of the same characters at the start of a line.
ANSWERS_BLOCK = re.compile(r"^(?P<fence>`{3,}|:{3,})\{admonition\}[ \t]+Answers?\b.*?^(?P=fence)[ \t]*$",
                           re.IGNORECASE | re.MULTILINE | re.DOTALL)
ANSWERS_REMOVED = "*The answers are in the teacher's copy of this chapter.*"


def tags(cell) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def is_solution(cell) -> bool:
    return cell.cell_type == "code" and SOLUTION_TAG in tags(cell)


def defined_names(source: str) -> set[str]:
    """The names a code cell binds at top level (functions, classes, assignments); empty if not Python."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = list(node.targets) if isinstance(node, ast.Assign) else [node.target]
            while targets:  # a, (b, *c) = ... binds a, b and c; x[i] = ... and x.y = ... bind nothing
                target = targets.pop()
                if isinstance(target, ast.Name):
                    names.add(target.id)
                elif isinstance(target, (ast.Tuple, ast.List)):
                    targets += target.elts
                elif isinstance(target, ast.Starred):
                    targets.append(target.value)
    return names


EXERCISE_LABEL = re.compile(r"\s*(\*\*|__)?\s*(exercise\b|\d+[.)])", re.IGNORECASE)


def instruction(markdown: str, limit: int = 120) -> str:
    """The first sentence of an exercise's instructions, as plain text for an error message.

    ``markdown`` is the cell above the solution; when it holds more (the summary, several exercises),
    the instructions start at its last paragraph that opens with a label ("**2. ...", "Exercise 2 ...").
    """
    headings = list(EXERCISE_HEADING.finditer(markdown))
    if headings:  # the book's format: the instructions follow the last "### Exercise N." heading
        markdown = markdown[headings[-1].end():]
    paragraphs = re.split(r"\n\s*\n", markdown)
    labelled = [i for i, paragraph in enumerate(paragraphs) if EXERCISE_LABEL.match(paragraph)]
    markdown = "\n\n".join(paragraphs[labelled[-1]:]) if labelled else markdown
    text = re.sub(r"^\s*#+\s*(.*?)[.:]?\s*$", r"\1:", markdown, flags=re.MULTILINE)  # headings end in ':'
    text = re.sub(r"^\s*\([\w-]+\)=\s*$", "", text, flags=re.MULTILINE)  # MyST labels
    text = re.sub(r"\{\w+\}`([^`<]*?)(?:\s*<[^>]*>)?`", r"\1", text)  # {ref}`ch-x`, {cite}`key`
    text = re.sub(r"\*\*|__|\$", "", text)
    text = " ".join(text.split())
    sentences = re.split(r"(?<=[.!?])\s", text) if text else []
    first = ""
    for sentence in sentences:  # past labels such as "Exercise 2 (implement)."
        first = f"{first} {sentence}".strip()
        if len(first) > 40:
            break
    if not first:
        return DEFAULT_INSTRUCTION
    return first if len(first) <= limit else first[: first.rfind(" ", 0, limit)].rstrip(" ,;:") + "…"


def _header_end(lines: list[str], node: ast.stmt) -> tuple[int, int]:
    """(line, column) just after the colon that ends a def/class header (line 1-based)."""
    source = "\n".join(lines[node.lineno - 1:]) + "\n"
    depth = 0
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type != tokenize.OP:
            continue
        if token.string in "([{":
            depth += 1
        elif token.string in ")]}":
            depth -= 1
        elif token.string == ":" and depth == 0:
            return node.lineno + token.end[0] - 1, token.end[1]
    raise ValueError(f"no ':' ends the header starting on line {node.lineno}")


def _docstring_lines(lines: list[str], node) -> list[str]:
    """The docstring's source lines, when the body starts with one on lines of its own."""
    first = node.body[0]
    if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str) and first.lineno > _header_end(lines, node)[0]):
        return lines[first.lineno - 1:first.end_lineno]
    return []


def _header(lines: list[str], node) -> list[str]:
    start = node.decorator_list[0].lineno if node.decorator_list else node.lineno
    end_line, end_col = _header_end(lines, node)
    return lines[start - 1:end_line - 1] + [lines[end_line - 1][:end_col]]


def _body_indent(lines: list[str], node) -> str:
    first = node.body[0]
    if first.lineno > _header_end(lines, node)[0]:
        return " " * first.col_offset
    return " " * (node.col_offset + 4)


def stub_function(lines: list[str], node, message: str) -> list[str]:
    indent = _body_indent(lines, node)
    return [*_header(lines, node), *_docstring_lines(lines, node), f"{indent}raise NotImplementedError({message!r})"]


def stub_class(lines: list[str], node: ast.ClassDef, message: str) -> list[str]:
    out = [*_header(lines, node), *_docstring_lines(lines, node)]
    methods = [n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for method in methods:
        out += ["", *stub_function(lines, method, message)]
    if len(out) == len(_header(lines, node)):  # neither docstring nor methods: keep the class valid
        out.append(f"{_body_indent(lines, node)}...")
    return out


def stub_source(source: str, message: str) -> str:
    """The student version of a solution cell's source (see the module docstring)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # IPython magics or a cell that is not plain Python
        return f"# Your solution here.\nraise NotImplementedError({message!r})"
    lines = source.splitlines()
    blocks, defines = [], False
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            blocks.append(lines[node.lineno - 1:node.end_lineno])
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            blocks.append(stub_function(lines, node, message))
            defines = True
        elif isinstance(node, ast.ClassDef):
            blocks.append(stub_class(lines, node, message))
            defines = True
    if not defines:
        return f"# {message}\n# Your answer here (as comments, or code that shows it)."
    out: list[str] = []
    for block in blocks:
        if out and not (len(block) == 1 and block[0].startswith(("import ", "from "))
                        and out[-1].startswith(("import ", "from "))):
            out += ["", ""]
        out += block
    return "\n".join(out)


def exercises_start(nb) -> int | None:
    """Index of the first cell of the exercises section, or None when the chapter has none."""
    starts = [index for index, cell in enumerate(nb.cells)
              if is_solution(cell) or (cell.cell_type == "markdown" and EXERCISES_HEADING.search(cell.source))]
    return min(starts, default=None)


def strip_answers(markdown: str) -> str:
    """``markdown`` with every "Answers" admonition replaced by ``ANSWERS_REMOVED``."""
    return ANSWERS_BLOCK.sub(ANSWERS_REMOVED, markdown)


def make_student(nb):
    """Return the student copy of a notebook (a new object; ``nb`` is left untouched)."""
    nb = copy.deepcopy(nb)
    start = exercises_start(nb)
    last_markdown = ""
    for index, cell in enumerate(nb.cells):
        if ANSWER_TAG in tags(cell):
            nb.cells[index] = nbformat.v4.new_markdown_cell(YOUR_ANSWER, metadata={"tags": [ANSWER_TAG]})
            continue
        if cell.cell_type == "markdown":
            cell.source = strip_answers(cell.source)
            last_markdown = cell.source
            continue
        if cell.cell_type != "code":
            continue
        solution = is_solution(cell)
        if solution:
            message = f"Your turn: {instruction(last_markdown)}"
            cell.source = stub_source(cell.source, message)
            kept = [t for t in tags(cell) if t != SOLUTION_TAG and t not in HIDING_TAGS]
            cell.metadata["tags"] = [EXERCISE_TAG, *kept]
            cell.metadata.pop("mystnb", None)  # the teacher's toggle text
        in_exercises = start is not None and index >= start and QUIZ_TAG not in tags(cell)
        if solution or in_exercises:
            cell.outputs = []
            cell.execution_count = None
            if NBVAL_CHECK in tags(cell):  # no output left to compare with
                cell.metadata["tags"] = [t for t in tags(cell) if t != NBVAL_CHECK]
    nbformat.validate(nb)
    return nb


def with_student_exercises(nb):
    """The notebook ``make test`` runs for a chapter: the chapter up to its exercises, then its student
    copy's exercises (stubs, answer prompts, the checks that call them), then the chapter's own.

    A student copy differs from its chapter only from the exercises on (``make_student``), so this
    checks, at the cost of the exercises alone, what running the whole copy would: every stub and
    every cell after it runs as a student's untouched copy would run it, on the state the chapter's
    code leaves. The chapter's exercises come last, so the stubs see nothing their solutions define.
    A ``ValueError`` when a code cell before the exercises differs in the student copy (the premise).
    """
    start = exercises_start(nb)
    if start is None:
        return copy.deepcopy(nb)
    student = make_student(nb)
    for index in range(start):
        mine, theirs = nb.cells[index], student.cells[index]
        if mine.cell_type == "code" and (theirs.cell_type != "code" or theirs.source != mine.source):
            raise ValueError(f"cell {index}, before the exercises (cell {start}), differs in the student "
                             "copy: make_student changes only the exercises, so fix that first")
    combined = copy.deepcopy(nb)
    copied = student.cells[start:]
    for cell in copied:
        if "id" in cell:  # unique within the notebook, as nbformat wants
            cell.id = f"student-{cell.id}"[:64]
    combined.cells[start:start] = copied
    nbformat.validate(combined)
    return combined


def write_student_copies(notebooks: list[Path], out_dir: Path, checked: bool = False) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for path in notebooks:
        nb = nbformat.read(path, as_version=4)
        target = out_dir / path.name
        if checked:
            nbformat.write(with_student_exercises(nb), target)
            print(f"{target}: the chapter with its student copy's exercises")
        else:
            nbformat.write(make_student(nb), target)
            n_solutions = sum(is_solution(cell) for cell in nb.cells)
            print(f"{target}: {n_solutions} solution cell(s) replaced by stubs")
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="chapter notebooks (default: notebooks/*.ipynb)")
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "student", help="output folder")
    parser.add_argument("--with-chapter", action="store_true",
                        help="write what make test runs: each chapter with its copy's exercises after "
                             "its own code (with_student_exercises)")
    args = parser.parse_args(argv)
    notebooks = args.notebooks or sorted((ROOT / "notebooks").glob("*.ipynb"))
    if not notebooks:
        print("no notebooks found in notebooks/: nothing to do", file=sys.stderr)
        return 1
    write_student_copies(notebooks, args.out, checked=args.with_chapter)
    return 0


if __name__ == "__main__":
    sys.exit(main())
