"""A hint for the teacher, never points: a solution that is the book's own, its "Show the
solution" cell pasted in (``make assign`` keeps each graded exercise's cell in
``assignment.json``, under ``published``).

The code alone is no evidence: the book's solutions are a few lines, written as the text
leads every student to write them. A paste is told by what a student's own work would not
share with it: the cell's lines as the book writes them, its comments included; or, with
names changed or a line added, one of the book's comments (``DISTINCT`` characters or more)
kept beside a near copy of its code (``integrity`` fingerprints, ``integrity.NEAR``).
"""

from __future__ import annotations

import ast
import io
import tokenize

from grading import cells, integrity

DISTINCT = 12  # characters of a comment that no one writes alike by chance


def definition(python: str, name: str) -> ast.AST | None:
    """The top-level def or class ``name`` of ``python``, else None."""
    try:
        body = ast.parse(python).body
    except SyntaxError:
        return None
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return next((n for n in body if isinstance(n, kinds) and n.name == name), None)


def comments(source: str) -> list[str]:
    """The text of ``source``'s comments of ``DISTINCT`` characters or more."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    texts = [t.string.lstrip("#").strip() for t in tokens if t.type == tokenize.COMMENT]
    return [text for text in texts if len(text) >= DISTINCT]


def lines(source: str) -> list[str]:
    return [line.strip() for line in source.splitlines() if line.strip()]


def line_for_line(mine: list[str], book: list[str]) -> bool:
    """Whether every line of ``book`` is in ``mine``, in order (others may come between)."""
    rest = iter(mine)
    return all(any(line == other for other in rest) for line in book)


def flags(found: list[str], name: str, book: str | None) -> list[str]:
    """``["the book's published solution, …"]`` when the last of the code cells ``found``
    that defines ``name`` is the ``book``'s cell pasted, else []."""
    cell = next(
        (c for c in reversed(found) if name in cells.defined_names(cells.python_source(c))),
        None,
    )
    if book is None or cell is None:
        return []
    if line_for_line(lines(cell), lines(book)):
        return ["the book's published solution, pasted line for line"]
    kept = [text for text in comments(book) if text in cell]
    mine = definition(cells.python_source(cell), name)
    theirs = definition(book, name)
    if not kept or mine is None or theirs is None:
        return []
    alike = integrity.resemblance(
        integrity.fingerprint(mine), integrity.fingerprint(theirs)
    )
    if alike < integrity.NEAR:
        return []
    return [f"the book's published solution, {alike:.0%} alike, its comment {kept[0]!r} "
            "kept"]
