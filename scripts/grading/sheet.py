"""The grade sheet and what goes back to students: the CSV, feedback files, a Canvas import.

The sheet is rewritten (to a temporary file, then renamed) after every student, so a stopped
run leaves a readable sheet; rows of students not graded in this run (regrading one student)
and the ``written`` column the teacher fills in are kept, also from a sheet saved by Excel
or
LibreOffice (a byte-order mark, ``;`` or tab separators); a sheet without a ``student``
column is never overwritten. Every cell is escaped against
spreadsheet formulas (a leading ``= + - @``, tab or carriage return gets a ``'``) and notes
are cut short.
"""

from __future__ import annotations

import csv
import io
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

MAX_NOTE = 600  # characters of a notes or flags cell
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
MOODLE = "_assignsubmission_"  # in the folder names of Moodle's submissions download
# Canvas's submissions download: the sortable name (lower case, word characters only), LATE_
# when late, the Canvas user id, the file's attachment id, then the file's own name
CANVAS = re.compile(r"(?P<name>\w+?)_(?:LATE_)?(?P<user>[0-9]+)_[0-9]+_(?P<file>.+)")
WRITTEN = "written"  # points for the predict/explain answers, filled in by the teacher
DETAILS = "details"  # the teacher's: never in a feedback file (see Result.detail)
HINTS = "hints"  # the teacher's: where to read a written criterion (see Result.hint)


@dataclass
class Result:
    points: float = 0.0
    flag: str = ""  # an integrity problem: the exercise scores 0
    note: str = ""  # why points were lost, in the grader's fixed words (the teacher's)
    feedback: str = ""  # the student's: which cases did not pass, one bit a case
    detail: str = ""  # the teacher's only: the error class, dtype… chosen by the code
    hint: str = ""  # the teacher's only: names a written criterion is about (never points)


@dataclass
class Grade:
    student: str
    file: str
    results: dict[str, Result] = field(default_factory=dict)
    note: str = ""  # about the file as a whole (skipped, unreadable)
    detail: str = ""  # the teacher's only: how the sandbox ended, where it ended early
    written: str = ""
    folder: str = ""  # its feedback folder's name (Moodle's, when it came from Moodle)

    @property
    def total(self) -> float:
        written = number(self.written)
        return sum(r.points for r in self.results.values()) + (written or 0.0)


def safe(text: str, limit: int = MAX_NOTE) -> str:
    """A cell a spreadsheet shows as text: no formula, no control characters, cut to
    ``limit``."""
    text = re.sub(r"[\x00-\x08\x0b-\x1f\x7f]", " ", str(text))
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return "'" + text if text.startswith(FORMULA_START) else text


def columns(names: list[str]) -> list[str]:
    return ["student", *names, WRITTEN, "total", "flags", HINTS, "notes", DETAILS, "file"]


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
        safe("; ".join(f"{n}: {r.hint}" for n, r in grade.results.items() if r.hint)),
        safe(notes),
        safe("; ".join([grade.detail] * bool(grade.detail) + [
            f"{n}: {r.detail}" for n, r in grade.results.items() if r.detail
        ])),
        safe(grade.file, 300),
    ]


def _text(out: Path) -> str:
    raw = out.read_bytes()
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        return raw.decode("cp1252", errors="replace")  # Excel's "CSV" on Windows


def _delimiter(text: str) -> str:
    first = text.splitlines()[0] if text.strip() else ""
    return max(",;\t", key=first.count)


def sheet_format(out: Path) -> tuple[str, str]:
    """(delimiter, decimal mark) of an existing sheet, so that a regraded one is written
    back as it was read: ``(";", ",")`` from a spreadsheet in a decimal-comma locale;
    ``(",", ".")`` for a new sheet or this grader's own."""
    if not out.exists():
        return ",", "."
    text = _text(out)
    delimiter = _delimiter(text)
    cells = [c for r in csv.reader(io.StringIO(text), delimiter=delimiter) for c in r[1:]]
    commas, points = (any(re.fullmatch(rf"\s*\d+\{m}\d+\s*", c) for c in cells)
                      for m in ",.")
    comma = delimiter != "," and (commas or (delimiter == ";" and not points))  # ;: Excel's
    return delimiter, "," if comma else "."  # in a decimal-comma locale


def read_sheet(out: Path) -> list[dict[str, str]]:
    """The rows of an existing sheet, as saved by this grader, Excel or LibreOffice."""
    if not out.exists():
        return []
    text = _text(out)
    first = text.splitlines()[0] if text.strip() else ""
    delimiter = _delimiter(text)
    rows = list(csv.DictReader(io.StringIO(text), delimiter=delimiter))
    if text.strip() and "student" not in (
        rows[0].keys() if rows else first.split(delimiter)
    ):
        raise SystemExit(
            f"{out} has no 'student' column: it is not a grade sheet, or its header was "
            "changed. Restore the header (student, …, written, …) or choose another OUT; "
            "nothing was overwritten"
        )
    return rows


def read_written(out: Path) -> dict[str, str]:
    """The written-answer points already in the sheet, by student."""
    return {r.get("student") or "": r.get(WRITTEN) or "" for r in read_sheet(out)}


def without_zeros(student: str) -> str:
    """An id as a spreadsheet saves it after reading it as a number: ``00123`` as ``123``
    (any other id as it is)."""
    return student.lstrip("0") or "0" if re.fullmatch(r"[0-9]+", student) else student


def lost_zeros(ids: list[str], kept: list[str]) -> dict[str, str]:
    """{a sheet's id: the graded id it is} for the sheet's ids that are a graded id without
    its leading zeros: that row is the graded student's, merged into it (a spreadsheet
    drops zeros, never adds them: ``123`` graded leaves a row ``0123`` alone)."""
    graded = {without_zeros(i): i for i in ids if without_zeros(i) != i}
    return {k: graded[k] for k in kept if k in graded and k not in ids}


def merged(ids: list[str], kept: list[str]) -> list[str]:
    """A warning per row of the sheet that ``write`` merges into a graded id's row."""
    return [
        f"the sheet's row {old!r} is {new!r} with its leading zeros lost (a spreadsheet "
        f"read the id as a number): merged into {new!r}'s row, its written points kept"
        for old, new in lost_zeros(ids, kept).items()
    ]


def written_of(student: str, written: dict[str, str]) -> str:
    """The ``written`` cell of ``student``'s row in the sheet: its own, else the row a
    spreadsheet saved without its leading zeros."""
    return written.get(student, written.get(without_zeros(student), ""))


def kept_row(r: dict[str, str], names: list[str]) -> list[str]:
    """A row of the existing sheet, its total recomputed (the teacher may have changed
    ``written`` without it)."""
    points = {n: Result(number(r.get(n))) for n in names if number(r.get(n)) is not None}
    total = Grade("", "", points, written=r.get(WRITTEN) or "").total
    return [f"{total:g}" if c == "total" else r.get(c) or "" for c in columns(names)]


def number(text: str | None) -> float | None:
    """Points as a spreadsheet saved them, ``1.5`` or, in a ;-locale, ``1,5``; else
    None."""
    found = re.fullmatch(r"\s*(\d+)(?:[.,](\d+))?\s*", text or "")
    return float(f"{found[1]}.{found[2] or 0}") if found else None


def write(grades: list[Grade], names: list[str], out: Path) -> None:
    """Write the sheet: these rows, plus the rows of other students already in ``out``, with
    ``out``'s own delimiter and decimal mark (``sheet_format``)."""
    graded = {safe(g.student, 200) for g in grades}
    rows = read_sheet(out)
    graded |= set(lost_zeros(list(graded), [r.get("student") or "" for r in rows]))
    header = columns(names)
    kept = [kept_row(r, names) for r in rows if (r.get("student") or "") not in graded]
    delimiter, decimal = sheet_format(out)
    points = {i for i, c in enumerate(header) if c in (*names, "total", WRITTEN)}

    def local(cells: list[str]) -> list[str]:  # 1.5 as 1,5 where the sheet wrote 1,5
        return [c.replace(".", decimal) if i in points and number(c) is not None else c
                for i, c in enumerate(cells)]
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    with partial.open("w", newline="") as f:
        writer = csv.writer(f, delimiter=delimiter)
        writer.writerow(header)
        writer.writerows(local(r) for r in sorted(kept + [row(g, names) for g in grades],
                                                   key=lambda r: r[0]))
    partial.replace(out)  # the old sheet or the new one, never half of one


def file_name(student: str) -> str:
    """A safe file name for a student's id (no path separators, no leading dot)."""
    return re.sub(r"[^\w.@ -]+", "_", student).strip(". ")[:120] or "student"


def feedback_text(grade: Grade, exercises: list[dict], criteria: dict[str, tuple]) -> str:
    lines = [f"Grade for {grade.student}: {grade.total:g} points", ""]
    if grade.note:
        lines += [grade.note, ""]
    for exercise in exercises:
        r = grade.results.get(exercise["name"], Result())
        lines.append(f"{exercise['name']}: {r.points:g} of {exercise['points']}")
        lines += [f"  {r.feedback}"] * bool(r.feedback)
        lines += [f"  your teacher reads: {c}" for c in criteria.get(exercise["name"], ())]
    return "\n".join(lines) + "\n"


def write_feedback(
    grade: Grade, exercises: list[dict], criteria: dict[str, tuple], folder: Path
) -> Path:
    """``folder/<its folder>/feedback.txt``: Moodle's layout for *Upload multiple feedback
    files in a zip* (the student's folder name from the submissions download)."""
    path = folder / (grade.folder or file_name(grade.student)) / "feedback.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name("feedback.txt.partial")
    partial.write_text(feedback_text(grade, exercises, criteria))
    partial.replace(path)
    return path


def canvas_user(file: str) -> tuple[str, str] | None:
    """(name, Canvas user id) of a file from Canvas's submissions download
    (``doejane_12345_67890_ch04.ipynb``, late: ``doejane_LATE_12345_67890_ch04.ipynb``),
    else None."""
    found = CANVAS.fullmatch(Path(file).name)
    return (found["name"], found["user"]) if found else None


def write_canvas(out: Path, canvas: Path, column: str, points: float) -> None:
    """A Canvas gradebook import: Student, ID, SIS User ID, SIS Login ID, Section, then the
    assignment's column, after a "Points Possible" row. ``column`` is the assignment's
    header as Canvas exports it, ``Name (id)``, to update that assignment; a name without
    an id in parentheses makes Canvas create a new assignment. Canvas finds a row's student
    by ID (its user id), else SIS User ID, else SIS Login ID, else the name: a file from
    Canvas's submissions download fills ID; any other id goes into SIS Login ID (name the
    files by login for a direct import)."""
    rows = read_sheet(out)
    partial = canvas.with_name(canvas.name + ".partial")
    with partial.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["Student", "ID", "SIS User ID", "SIS Login ID", "Section", column])
        writer.writerow(["    Points Possible", "", "", "", "", f"{points:g}"])
        for r in rows:
            if found := canvas_user(r.get("file") or ""):
                writer.writerow([found[0], found[1], "", "", "", r["total"]])
            else:
                writer.writerow([r["student"], "", "", r["student"], "", r["total"]])
    partial.replace(canvas)


def plain(student: str) -> str:
    """An id as a reader sees it: NFKC-normalized, without invisible or right-to-left
    format characters (ids that differ only by them are then duplicates)."""
    text = unicodedata.normalize("NFKC", student)
    return "".join(c for c in text if unicodedata.category(c) != "Cf")


def person(student: str) -> str:
    """Whose file an id is: a Moodle folder's files (``Name_1_assignsubmission_file_/a``)
    are one student's, any other id is its own."""
    first = student.split("/", 1)[0]
    return first if MOODLE in first else student


def identify(folder: Path, found: list[tuple[str, Path]]) -> list[Grade]:
    """A row per file: its id made plain (``plain``), its feedback folder (Moodle's own
    name, else the id made safe, made unique) and a note on ids that more than one file
    has, and on a Moodle folder with several files (one student's: the teacher keeps one
    row)."""
    found = [(plain(s), path) for s, path in found]
    count = Counter(safe(s, 200) for s, _ in found)
    moodle = Counter(
        p.relative_to(folder).parts[0]
        for _, p in found
        if folder.is_dir() and MOODLE in p.relative_to(folder).parts[0]
    )
    grades, used = [], set()
    for student, path in found:
        grade = Grade(student, str(path))
        parts = path.relative_to(folder).parts if folder.is_dir() else ()
        base = parts[0] if len(parts) > 1 and MOODLE in parts[0] else file_name(student)
        grade.folder, n = base, 1
        while grade.folder.lower() in used:  # ids that differ by "/" or case only
            n += 1
            grade.folder = f"{base}_{n}"
        used.add(grade.folder.lower())
        if count[safe(student, 200)] > 1:
            grade.note = f"duplicate id: {count[safe(student, 200)]} files have it"
        elif len(parts) > 1 and moodle[parts[0]] > 1:
            grade.note = f"one student's {moodle[parts[0]]} files: keep one row"
        grades.append(grade)
    return grades
