"""The grade sheet and what goes back to students: the CSV, feedback files, a Canvas import.

The sheet is rewritten (to a temporary file, then renamed) after every student, so a stopped
run leaves a readable sheet; rows of students not graded in this run (regrading one student)
and the ``written`` column the teacher fills in are kept. Every cell is escaped against
spreadsheet formulas (a leading ``= + - @``, tab or carriage return gets a ``'``) and notes
are cut short.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from pathlib import Path

MAX_NOTE = 600  # characters of a notes or flags cell
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
WRITTEN = "written"  # points for the predict/explain answers, filled in by the teacher


@dataclass
class Result:
    points: float = 0.0
    flag: str = ""  # an integrity problem: the exercise scores 0
    note: str = ""  # why points were lost
    feedback: str = ""  # the public check's report on the solution, for the student


@dataclass
class Grade:
    student: str
    file: str
    results: dict[str, Result] = field(default_factory=dict)
    note: str = ""  # about the file as a whole (skipped, unreadable)
    written: str = ""

    @property
    def total(self) -> float:
        written = (
            float(self.written) if re.fullmatch(r"\s*\d+(\.\d+)?\s*", self.written) else 0.0
        )
        return sum(r.points for r in self.results.values()) + written


def safe(text: str, limit: int = MAX_NOTE) -> str:
    """A cell a spreadsheet shows as text: no formula, no control characters, cut to ``limit``."""
    text = re.sub(r"[\x00-\x08\x0b-\x1f\x7f]", " ", str(text))
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return "'" + text if text.startswith(FORMULA_START) else text


def columns(names: list[str]) -> list[str]:
    return ["student", *names, WRITTEN, "total", "flags", "notes", "file"]


def row(grade: Grade, names: list[str]) -> list[str]:
    flags = "; ".join(f"{n}: {r.flag}" for n, r in grade.results.items() if r.flag)
    notes = "; ".join(
        [grade.note] * bool(grade.note)
        + [f"{n}: {r.note}" for n, r in grade.results.items() if r.note]
    )
    return [
        safe(grade.student, 200),
        *(f"{grade.results[n].points:g}" if n in grade.results else "0" for n in names),
        safe(grade.written, 20),
        f"{grade.total:g}",
        safe(flags),
        safe(notes),
        safe(grade.file, 300),
    ]


def read_written(out: Path) -> dict[str, str]:
    """The written-answer points already in the sheet, by student."""
    if not out.exists():
        return {}
    with out.open(newline="") as f:
        return {r.get("student", ""): r.get(WRITTEN, "") or "" for r in csv.DictReader(f)}


def write(grades: list[Grade], names: list[str], out: Path) -> None:
    """Write the sheet: these rows, plus the rows of other students already in ``out``."""
    kept = []
    graded = {safe(g.student, 200) for g in grades}
    if out.exists():
        with out.open(newline="") as f:
            reader = csv.reader(f)
            header = next(reader, [])
            if header == columns(names):
                kept = [r for r in reader if r and r[0] not in graded]
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    with partial.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns(names))
        writer.writerows(sorted(kept + [row(g, names) for g in grades], key=lambda r: r[0]))
    partial.replace(out)  # the old sheet or the new one, never half of one


def file_name(student: str) -> str:
    """A safe file name for a student's id (no path separators, no leading dot)."""
    return re.sub(r"[^\w.@ -]+", "_", student).strip(". ")[:120] or "student"


def feedback_text(grade: Grade, exercises: list[dict]) -> str:
    lines = [f"Grade for {grade.student}: {grade.total:g} points", ""]
    if grade.note:
        lines += [grade.note, ""]
    for exercise in exercises:
        r = grade.results.get(exercise["name"], Result())
        lines.append(f"{exercise['name']}: {r.points:g} of {exercise['points']}")
        lines += [f"  integrity: {r.flag}"] * bool(r.flag) + [f"  {r.note}"] * bool(r.note)
        lines += [f"  the public check on your solution: {r.feedback}"] * bool(r.feedback)
    return "\n".join(lines) + "\n"


def write_feedback(grade: Grade, exercises: list[dict], folder: Path) -> Path:
    """``folder/<student>/feedback.txt``: Moodle's layout for uploading feedback files as a zip."""
    path = folder / file_name(grade.student) / "feedback.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(feedback_text(grade, exercises))
    return path


def write_canvas(out: Path, canvas: Path, title: str) -> None:
    """A Canvas gradebook import: Student, ID, SIS User ID, SIS Login ID, Section, the total.
    The sheet's student id goes into SIS Login ID: name the files by login for a direct import."""
    with out.open(newline="") as f:
        rows = list(csv.DictReader(f))
    with canvas.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["Student", "ID", "SIS User ID", "SIS Login ID", "Section", title])
        for r in rows:
            writer.writerow([r["student"], "", "", r["student"], "", r["total"]])
