"""A class of 100 different submissions for timing ``make grade``:

    python -m benchmarks.grade_class 04 /tmp/class04
    time make grade CHAPTER=04 SUBMISSIONS=/tmp/class04

70 correct solutions and 30 typical mistakes (``tests/grading_class.py``), each file with a
line of its own, so that no two files are the same.
"""

import sys
import tempfile
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from grading_class import MISTAKES, assign, material, solutions, submission  # noqa: E402


def write_class(chapter: str, out: Path, students: int = 100) -> None:
    stem = assign.find(chapter).chapter
    with tempfile.TemporaryDirectory() as scratch:
        assignment, _, chapter_nb, student_nb = material(stem, Path(scratch))
    names = [e.name for e in assignment.exercises]
    out.mkdir(parents=True, exist_ok=True)
    right = solutions(chapter_nb, names)
    for k in range(students):
        chosen = {
            n: right[n] if k < 0.7 * students else MISTAKES[n][k % 3][0] for n in names
        }
        own = f"\n\n_student_{k} = {k}  # student {k}'s own line"
        nb = submission(student_nb, {n: s + own for n, s in chosen.items()})
        nbformat.write(nb, out / f"student_{k:03d}.ipynb")


if __name__ == "__main__":
    write_class(sys.argv[1], Path(sys.argv[2]))
