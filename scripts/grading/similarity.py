"""A similarity report: identical files, and identical or near-identical solution cells
after normalization (names renamed in order, docstrings and comments gone), between students
(a copy of the package is flagged in the sheet, ``grading.integrity``). It is for the
teacher to read; it changes no grade. Untouched stubs are left out."""

from __future__ import annotations

import ast
import csv
import difflib
import hashlib
from itertools import combinations
from pathlib import Path

from grading import cells, integrity
from grading.sheet import safe

NEAR = 0.9  # SequenceMatcher ratio of two normalized cells called near-identical
MIN_NODES = 25  # shorter solutions may be written alike by anyone


def fingerprints(found: list[tuple[str, Path]], name: str) -> dict[str, str]:
    """Student -> the normalized form of their solution cell for ``name`` (long enough ones only)."""
    prints = {}
    for student, path in found:
        try:
            source = cells.solution_cell(cells.code_cells(path), name)
            tree = ast.parse(source or "")
        except Exception:  # noqa: BLE001 - unreadable files are reported in the sheet
            continue
        if (
            source
            and "NotImplementedError" not in source
            and sum(1 for _ in ast.walk(tree)) >= MIN_NODES
        ):
            prints[student] = integrity.normalized(tree)
    return prints


def write_report(
    found: list[tuple[str, Path]], assignment: dict, out: Path
) -> list[list[str]]:
    rows = []
    by_hash: dict[str, list[str]] = {}
    for student, path in found:
        if path.is_file() and not path.is_symlink():
            by_hash.setdefault(hashlib.sha256(path.read_bytes()).hexdigest(), []).append(
                student
            )
    rows += [
        ["whole file", "identical files", " | ".join(s)]
        for s in by_hash.values()
        if len(s) > 1
    ]
    for exercise in assignment["exercises"]:
        name = exercise["name"]
        prints = fingerprints(found, name)
        groups: dict[str, list[str]] = {}
        for student, text in prints.items():
            groups.setdefault(text, []).append(student)
        for text, students in groups.items():
            if len(students) > 1:
                rows.append([name, "identical after normalization", " | ".join(students)])
        distinct = [(s[0], t) for t, s in groups.items()]
        for (a, ta), (b, tb) in combinations(distinct, 2):
            matcher = difflib.SequenceMatcher(None, ta, tb, autojunk=False)
            if (
                matcher.real_quick_ratio() >= NEAR
                and matcher.quick_ratio() >= NEAR
                and matcher.ratio() >= NEAR
            ):
                rows.append([name, f"near-identical ({matcher.ratio():.2f})", f"{a} | {b}"])
    with out.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["exercise", "kind", "students"])
        writer.writerows([[safe(c, 2000) for c in r] for r in rows])
    return rows
