"""From a folder of submissions to each student's program per exercise, as plain Python.

A file is opened without following links, only when it is a regular file of at most
``MAX_BYTES``. Cells go through IPython's own transformer first (``TransformerManager``), so
``%%time`` on the first line, ``%timeit`` or ``!pip`` lines do not hide a definition: the
body
of a timing magic is kept, every other magic and shell line is dropped. A pasted check
(``from gpt_from_scratch.exercises import check_…`` or a ``check_…(…)`` call) is dropped
too:
it is feedback, not the solution. A ``.py`` submission is read as jupytext's percent format
when it has ``# %%`` cells; otherwise (Colab's *Download .py*, nbconvert's ``# In[ ]:``
scripts) every top-level statement is a cell of its own. An exercise's program is the last
cell that defines its name, preceded by the definitions (functions, classes, imports,
assignments) of other cells that it uses, directly or through each other: a helper in its
own cell counts.
"""

from __future__ import annotations

import ast
import builtins
import json
import os
import re
import stat
from functools import lru_cache
from pathlib import Path

import jupytext
import nbformat
from IPython.core.inputtransformer2 import TransformerManager
from make_student import defined_names  # scripts/ is on the path, as for grade.py

from grading.sheet import canvas_user

GRADED = {".ipynb", ".py"}  # suffixes graded, in any case
KEPT_MAGICS = {
    "time",
    "timeit",
    "capture",
    "prun",
}  # they run their body: the body is the cell
CHECKS = "gpt_from_scratch.exercises"
PACKAGE = "gpt_from_scratch"
MAX_BYTES = 4 << 20  # of code: a .py file, or a notebook's code cells
MAX_NOTEBOOK_BYTES = 64 << 20  # a notebook file, outputs included (dropped: never graded)
DEFINITIONS = (
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.Import,
    ast.ImportFrom,
    ast.Assign,
    ast.AnnAssign,
)


def submissions(folder: Path) -> list[tuple[str, Path]]:
    """(student id, file) for every file: the path below ``folder`` without its suffix, or
    the student's folder in Moodle's layout (``Name_123_assignsubmission_file_/x.ipynb``),
    or name and user id in Canvas's (``doejane_12345_67890_x.ipynb``: ``doejane_12345``)."""
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
        if len(relative.parts) == 1 and (canvas := canvas_user(path.name)):
            student = "_".join(canvas)  # its name and Canvas user id: LATE or not, one id
        if moodle and "_assignsubmission_" in relative.parts[0]:
            student = (
                moodle
                if sum(1 for p in (folder / relative.parts[0]).rglob("*")) == 1
                else student
            )
        found.append((student, path))
    return found


class TooLarge(ValueError):
    """A file over the grader's cap: its row says so, with the cap."""


def read_text(path: Path, limit: int = MAX_BYTES) -> str:
    """The file's text: a regular file, not a link, at most ``limit`` bytes (else
    TooLarge; ValueError when it is not a regular file)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file")
        if info.st_size > limit:
            raise TooLarge(f"larger than {limit >> 20} MiB")
        # its size, not the cap: a 64 MiB buffer would not fit under the reader's address
        # space limit where torch's CUDA build already maps most of it
        return f.read(info.st_size).decode("utf-8", errors="replace")


def code_cells(path: Path) -> list[str]:
    """The code cells of a notebook (``.ipynb``, any case: its outputs dropped unread, at
    most MAX_NOTEBOOK_BYTES in all and MAX_BYTES of code) or a ``.py`` file (MAX_BYTES)."""
    if path.suffix.lower() != ".py":
        raw = json.loads(read_text(path, MAX_NOTEBOOK_BYTES))
        for cell in raw.get("cells", []) if isinstance(raw, dict) else []:
            if isinstance(cell, dict) and "outputs" in cell:
                cell["outputs"] = []  # not graded: a 50 MB plot costs nothing
        nb = nbformat.reads(json.dumps(raw), as_version=4)
        found = [cell.source for cell in nb.cells if cell.cell_type == "code"]
        if sum(len(source.encode()) for source in found) > MAX_BYTES:
            raise TooLarge(f"more than {MAX_BYTES >> 20} MiB of code")
        return found
    text = read_text(path)
    if re.search(r"^# %%", text, re.MULTILINE):
        nb = jupytext.reads(text, fmt="py:percent")
        return [cell.source for cell in nb.cells if cell.cell_type == "code"]
    return script_cells(text)


def script_cells(text: str) -> list[str]:
    """A plain script (Colab's download, nbconvert's): each top-level statement a cell; cell
    magics' first lines dropped (their bodies stay), other magics and shell lines
    resolved."""
    text = "\n".join(
        line for line in text.splitlines() if not line.lstrip().startswith("%%")
    )
    python = python_source(text)
    try:
        return [ast.unparse(node) for node in ast.parse(python).body]
    except SyntaxError:
        return [python]


def _magic_call(node: ast.stmt) -> tuple[str, str, list] | None:
    """("run_cell_magic" / "run_line_magic" / "system", magic name, arguments) of IPython's
    call."""
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


@lru_cache(maxsize=512)  # each exercise's program reads the same cells
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
    """A pasted check: an import from gpt_from_scratch.exercises, or a call of a check_
    function."""
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


def solution_cell(cells: list[str], name: str, plain: bool = False) -> str | None:
    """The last cell that binds ``name``, as plain Python without pasted checks; else the
    last cell
    that names it some other way (``exec`` of a string, a syntax error), for the grader to
    judge;
    None if no cell names it. ``plain``: the cells are plain Python already."""
    found = named = None
    for source in cells:
        python = source if plain else python_source(source)
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


def _free(tree: ast.AST) -> set[str]:
    """Names ``tree`` reads and never binds itself (arguments, locals, loop targets
    aside)."""
    read, bound = set(), set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Name):
            (read if isinstance(n.ctx, ast.Load) else bound).add(n.id)
        elif isinstance(n, ast.arg):
            bound.add(n.arg)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            bound |= _bound(n)
    return read - bound


def _bound(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {a.asname or a.name.split(".")[0] for a in node.names}
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    targets = (
        node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
    )
    return {n.id for t in targets if t for n in ast.walk(t) if isinstance(n, ast.Name)}


def _only_setup(node: ast.stmt, provided: set[str]) -> bool:
    """An import of the package that binds only names the set-up provides (a copy of the
    set-up cell): dropped, the set-up gives them."""
    return (
        isinstance(node, ast.ImportFrom)
        and (node.module or "").split(".")[0] == PACKAGE
        and _bound(node) <= provided
    )


def program(cells: list[str], name: str, provided: set[str]) -> str | None:
    """The solution cell of ``name`` and, before it, the definitions of the other cells it
    uses
    (transitively); None if no cell names it."""
    pythons = [python_source(source) for source in cells]
    solution = solution_cell(pythons, name, plain=True)
    if solution is None:
        return None
    try:
        tree = ast.parse(solution)
    except SyntaxError:
        return solution
    tree.body = [n for n in tree.body if not _only_setup(n, provided)]
    pool = []  # (position, statement) of every other cell's top-level definitions
    for position, python in enumerate(pythons):
        try:
            body = ast.parse(python).body
        except SyntaxError:
            continue
        if any(name in _bound(n) for n in body):
            continue  # a cell defining the exercise's name is a solution, not a helper
        pool += [
            (position, i, n)
            for i, n in enumerate(body)
            if isinstance(n, DEFINITIONS) and not _is_check(n)
        ]
    known = provided | set(dir(builtins)) | set().union(*(_bound(n) for n in tree.body))
    wanted, chosen = _free(tree) - known, {}
    while wanted:
        missing = wanted.pop()
        for position, i, node in reversed(pool):
            if missing in _bound(node) and not _only_setup(node, provided):
                if (position, i) not in chosen:
                    chosen[(position, i)] = node
                    known |= _bound(node)
                    wanted |= _free(node) - known
                break
    helpers = [chosen[k] for k in sorted(chosen)]
    return ast.unparse(ast.Module(body=helpers + tree.body, type_ignores=[]))
