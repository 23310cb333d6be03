"""From a folder of submissions to each student's solution cells, as plain Python.

Cells go through IPython's own transformer first (``TransformerManager``), so ``%%time`` on
the first line, ``%timeit`` or ``!pip`` lines do not hide a definition: the body of a timing
magic is kept, every other magic and shell line is dropped. A pasted check (``from
gpt_from_scratch.exercises import check_…`` or a ``check_…(…)`` call) is dropped too: it is
feedback, not the solution. A ``.py`` submission is read as a notebook of ``# %%`` cells
(jupytext's percent format).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import jupytext
import nbformat
from IPython.core.inputtransformer2 import TransformerManager
from make_student import defined_names  # scripts/ is on the path, as for grade.py

GRADED = {".ipynb", ".py"}  # suffixes graded, in any case
KEPT_MAGICS = {
    "time",
    "timeit",
    "capture",
    "prun",
}  # they run their body: the body is the cell
CHECKS = "gpt_from_scratch.exercises"


def submissions(folder: Path) -> list[tuple[str, Path]]:
    """(student id, file) for every file: the path below ``folder`` without its suffix, or the
    student's folder in Moodle's layout (``Name_123_assignsubmission_file_/x.ipynb``)."""
    if folder.is_file():
        return [(folder.stem, folder)]
    found = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file() or p.is_symlink()):
        relative = path.relative_to(folder)
        student = (
            relative.with_suffix("").as_posix()
            if path.suffix.lower() in GRADED
            else relative.as_posix()
        )
        moodle = (
            relative.parts[0].split("_assignsubmission_")[0]
            if len(relative.parts) > 1
            else ""
        )
        if moodle and "_assignsubmission_" in relative.parts[0]:
            student = (
                moodle
                if sum(1 for p in (folder / relative.parts[0]).rglob("*")) == 1
                else student
            )
        found.append((student, path))
    return found


def code_cells(path: Path) -> list[str]:
    """The code cells of a notebook (``.ipynb``, any case) or a percent-format ``.py`` file."""
    if path.suffix.lower() == ".py":
        nb = jupytext.reads(path.read_text(errors="replace"), fmt="py:percent")
    else:
        nb = nbformat.read(path, as_version=4)
    return [cell.source for cell in nb.cells if cell.cell_type == "code"]


def _magic_call(node: ast.stmt) -> tuple[str, str, list] | None:
    """("run_cell_magic" / "run_line_magic" / "system", magic name, arguments) of IPython's call."""
    if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)):
        return None
    call = node.value
    func = call.func
    if (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Call)
        and isinstance(func.value.func, ast.Name)
        and func.value.func.id == "get_ipython"
    ):
        args = [a.value if isinstance(a, ast.Constant) else None for a in call.args]
        return func.attr, (args[0] if args else ""), args
    return None


def python_source(source: str, depth: int = 0) -> str:
    """A cell as plain Python: magics resolved as IPython would, timing magics unwrapped."""
    try:
        tree = ast.parse(TransformerManager().transform_cell(source))
    except SyntaxError:
        return source  # reported as a syntax error where it is run
    body = []
    for node in tree.body:
        magic = _magic_call(node)
        if magic is None:
            body.append(node)
            continue
        kind, name, args = magic
        inner = (
            args[2]
            if kind == "run_cell_magic" and len(args) > 2
            else (args[1] if kind == "run_line_magic" and len(args) > 1 else None)
        )
        if name in KEPT_MAGICS and isinstance(inner, str) and depth < 3:
            body += ast.parse(python_source(inner, depth + 1)).body
    tree.body = body
    return ast.unparse(tree) if body else ""


def _is_check(node: ast.stmt) -> bool:
    """A pasted check: an import from gpt_from_scratch.exercises, or a call of a check_ function."""
    if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(CHECKS):
        return True
    if isinstance(node, ast.Import) and all(a.name.startswith(CHECKS) for a in node.names):
        return True
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        func = node.value.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        return name.startswith("check_")
    return False


def without_checks(source: str) -> str:
    tree = ast.parse(source)
    tree.body = [node for node in tree.body if not _is_check(node)]
    return ast.unparse(tree)


def solution_cell(cells: list[str], name: str) -> str | None:
    """The last cell that binds ``name``, as plain Python without pasted checks; else the last cell
    that names it some other way (``exec`` of a string, a syntax error), for the grader to judge;
    None if no cell names it."""
    found = named = None
    for source in cells:
        python = python_source(source)
        if name in defined_names(python):
            found = python
        elif re.search(rf"\b{re.escape(name)}\b", python) and _unchecked(python).strip():
            named = python
    return None if (found or named) is None else _unchecked(found or named)


def _unchecked(source: str) -> str:
    try:
        return without_checks(source)
    except SyntaxError:
        return source
