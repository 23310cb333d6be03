"""A similarity report for the teacher: identical files, and groups of students whose
programs
for an exercise are near-identical after normalization (``grading.integrity`` fingerprints:
names renamed in order, docstrings and comments gone). It changes no grade.

Bounded: each program is a sketch of at most ``integrity.SKETCH`` hashes, pairs are compared
for ``SECONDS`` at most, near-identical pairs are merged into groups (one row per group, not
per pair), a group holding more than half of the class is the common solution and named as
such, and the report keeps the ``MAX_ROWS`` largest groups.
"""

from __future__ import annotations

import csv
import time
from pathlib import Path

from grading import integrity
from grading.sheet import safe

NEAR = 0.9  # resemblance of two near-identical programs
SECONDS = 30.0  # comparisons per exercise stop here (the report says so)
MAX_ROWS = 100


def groups(prints: dict[str, list[int]], deadline: float) -> tuple[list[list[str]], bool]:
    """Students joined by near-identical programs (union-find); False when cut short."""
    parent = {s: s for s in prints}

    def root(s: str) -> str:
        while parent[s] != s:
            parent[s] = parent[parent[s]]
            s = parent[s]
        return s

    students, complete = list(prints), True
    for i, a in enumerate(students):
        if time.monotonic() > deadline:
            complete = False
            break
        for b in students[i + 1 :]:
            if (
                root(a) != root(b)
                and integrity.resemblance(prints[a], prints[b], NEAR) >= NEAR
            ):
                parent[root(b)] = root(a)
    found: dict[str, list[str]] = {}
    for s in students:
        found.setdefault(root(s), []).append(s)
    return sorted(
        (g for g in found.values() if len(g) > 1), key=len, reverse=True
    ), complete


def write_report(
    found: list[tuple[str, Path]], replies: list[dict], names: list[str], out: Path
) -> list[list[str]]:
    rows = []
    by_digest: dict[str, list[str]] = {}
    for (student, _), reply in zip(found, replies):
        if reply.get("digest"):
            by_digest.setdefault(reply["digest"], []).append(student)
    rows += [
        ["whole file", "identical files", " | ".join(s)]
        for s in by_digest.values()
        if len(s) > 1
    ]
    for name in names:
        prints = {
            student: reply["prints"][name]
            for (student, _), reply in zip(found, replies)
            if name in reply.get("prints", {})
        }
        joined, complete = groups(prints, time.monotonic() + SECONDS)
        for group in joined:
            kind = (
                f"the common solution ({len(group)} students)"
                if len(group) > len(found) / 2
                else f"near-identical ({len(group)} students)"
            )
            rows.append([name, kind, " | ".join(sorted(group))])
        if not complete:
            rows.append([name, f"comparisons stopped after {SECONDS:g} s", ""])
    kept = rows[:MAX_ROWS]
    if len(rows) > MAX_ROWS:
        kept.append(["", f"{len(rows) - MAX_ROWS} more rows left out", ""])
    partial = out.with_name(out.name + ".partial")
    with partial.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["exercise", "kind", "students"])
        writer.writerows([[safe(c, 4000) for c in r] for r in kept])
    partial.replace(out)
    return kept
