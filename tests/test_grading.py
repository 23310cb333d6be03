"""The grader end to end, in its sandbox, on simulated classes: every chapter's correct
solutions, typical mistakes and untouched stubs (the hostile class and honest formats are in
test_grading_hostile.py).
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

import nbformat
import pytest

from grading_class import MISTAKES, assign, grade, material, solutions, submission

sandbox = pytest.importorskip("grading.sandbox")
LIMITS = sandbox.Limits(cpu_seconds=5.0)
needs_sandbox = pytest.mark.usefixtures("grading_sandbox")  # skips, or fails: conftest.py


@pytest.fixture
def secret(tmp_path) -> Path:
    path = tmp_path / "course_secret"
    path.write_text("a-course-secret-for-the-tests-" + "0" * 32)
    return path


# Exercises whose book solution is the package's function as the chapter writes it
PACKAGE_TWINS = {
    "online_softmax_step": "gpt_from_scratch.tiled_attention.online_softmax_step"
}


def sheet(out: Path) -> dict[str, dict]:
    with out.open(newline="") as f:
        return {r["student"]: r for r in csv.DictReader(f)}


@needs_sandbox
@pytest.mark.parametrize("chapter", list(assign.ASSIGNMENTS))
def test_every_chapter_grades_correct_solutions_and_typical_mistakes(
    chapter, tmp_path, secret
):
    assignment, autograder, chapter_nb, student_nb = material(chapter, tmp_path / "assign")
    names = [e.name for e in assignment.exercises]
    points = {e.name: e.points for e in assignment.exercises}
    folder = tmp_path / "submissions"
    folder.mkdir()
    expected = {"correct": dict(points), "untouched_stub": dict.fromkeys(names, 0.0)}
    nbformat.write(
        submission(student_nb, solutions(chapter_nb, names)), folder / "correct.ipynb"
    )
    nbformat.write(student_nb, folder / "untouched_stub.ipynb")
    for i in range(3):
        nbformat.write(
            submission(student_nb, {n: MISTAKES[n][i][0] for n in names}),
            folder / f"mistake_{i + 1}.ipynb",
        )
        expected[f"mistake_{i + 1}"] = {
            n: round(MISTAKES[n][i][1] * points[n], 2) for n in names
        }
    out = tmp_path / "grades.csv"
    grade.grade_folder(folder, autograder, out, secret=secret, limits=LIMITS, quiet=True)
    rows = sheet(out)
    assert set(rows) == set(expected)
    for student, want in expected.items():
        got = {n: float(rows[student][n]) for n in names}
        assert got == pytest.approx(want), f"{student}: {rows[student]}"
        # "correct" is the book's own solution cells: hinted, never a point less; where
        # the exercise asks for a package function as the chapter writes it, flagged as a
        # near copy of that function too (true, and a flag costs nothing)
        hinted = "; ".join(
            f"{n}: " + (f"a near copy of the package's {PACKAGE_TWINS[n]} (NN% alike); "
                        if n in PACKAGE_TWINS else "")
            + "the book's published solution, pasted line for line" for n in names)
        want = hinted if student == "correct" else ""
        flags = re.sub(r"\(\d+% alike\)", "(NN% alike)", rows[student]["flags"])
        assert flags == want, f"{student}: {rows[student]}"
    assert "raised an exception" in rows["untouched_stub"]["notes"]  # fixed words
    assert "NotImplementedError" in rows["untouched_stub"]["details"]  # the teacher's


def test_untouched_hand_in_notebooks_run_top_to_bottom(tmp_path):
    """Every chapter's hand-in notebook, as handed out, in a fresh kernel: no cell raises, and
    each check says "not implemented yet"."""
    from nbclient import NotebookClient

    for chapter, assignment in assign.ASSIGNMENTS.items():
        folder = assign.write_assignment(assignment, tmp_path)
        nb = nbformat.read(folder / "student" / f"{chapter}_assignment.ipynb", as_version=4)
        NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=False).execute()
        printed = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
        assert printed.count("not implemented yet") == len(assignment.exercises), (
            f"{chapter}:\n{printed}"
        )
        assert "✅" not in printed and "Traceback" not in printed


def test_the_instructors_points_table_is_the_assignments():
    """book/instructors.md's table of points per implementation exercise lists every chapter
    that scripts/assign.py hands out, with its exercises and points, in order."""
    page = (Path(__file__).resolve().parents[1] / "book" / "instructors.md").read_text()
    table = page[page.index("| chapter | exercise | points |"):].split("\n\n")[0]
    rows = [line.split(" | ") for line in table.splitlines()[2:]]
    expected = [[a.chapter.split("_")[0].lstrip("0"),
                 ", ".join(f"`{e.name}`" for e in a.exercises),
                 " + ".join(str(e.points) for e in a.exercises)]
                for a in assign.ASSIGNMENTS.values()]
    assert [[r[0].strip("| "), r[1], r[2].strip("| ")] for r in rows] == expected


def test_the_quiz_after_the_exercises_is_in_no_exercise_block():
    cells = [nbformat.v4.new_markdown_cell("## Exercises\n\n### Exercise 1. Why (explain)\n\nWhy?"),
             nbformat.v4.new_code_cell("print(42)"),
             nbformat.v4.new_markdown_cell("## Check yourself", metadata={"tags": ["quiz"]}),
             nbformat.v4.new_code_cell("show_quiz([])", metadata={"tags": ["quiz"]})]
    blocks = assign.exercise_blocks(nbformat.v4.new_notebook(cells=cells))
    assert [[c.source for c in block] for block in blocks] == [[cells[0].source, "print(42)"]]


@needs_sandbox
def test_a_hint_points_at_a_solution_using_the_name_and_never_changes_points(
    tmp_path, secret
):
    """A name the criterion is about, used in code, is hinted in the teacher's sheet; in a
    comment or a string it is not; the points are the same either way."""
    chapter = "04_attention"
    assignment, autograder, chapter_nb, student_nb = material(chapter, tmp_path / "assign")
    names = [e.name for e in assignment.exercises]
    correct = solutions(chapter_nb, names)
    variants = {
        "arange": correct["causal_mask_arange"],
        "tril": "def causal_mask_arange(T):\n"
        "    return torch.ones(T, T, dtype=torch.bool).tril()",
        "comment": "def causal_mask_arange(T):\n"
        '    """Not torch.tril: two aranges."""\n'
        "    note = 'tril would do it'  # tril, triu\n"
        "    return torch.arange(T)[None, :] <= torch.arange(T)[:, None]",
    }
    folder = tmp_path / "submissions"
    folder.mkdir()
    for student, source in variants.items():
        sources = correct | {"causal_mask_arange": source}
        nbformat.write(submission(student_nb, sources), folder / f"{student}.ipynb")
    out, feedback = tmp_path / "grades.csv", tmp_path / "feedback"
    grade.grade_folder(
        folder,
        autograder,
        out,
        secret=secret,
        limits=LIMITS,
        quiet=True,
        feedback=feedback,
    )
    rows = sheet(out)
    assert {s: rows[s]["hints"] for s in variants} == {
        "arange": "",
        "tril": "causal_mask_arange: tril",
        "comment": "",
    }
    assert {s: [rows[s][n] for n in names] for s in variants} == dict.fromkeys(
        variants, [f"{e.points:g}" for e in assignment.exercises]
    )
    texts = {s: (feedback / s / "feedback.txt").read_text() for s in variants}
    bodies = {t.split("\n", 1)[1] for t in texts.values()}  # after "Grade for <id>"
    assert len(bodies) == 1  # the feedback the same: the hint is the teacher's


def graded_ring(tmp_path, secret, name: str, ring) -> tuple:
    """Chapter 15's class of one: the book's solutions with ``ring(the book's
    ring_all_reduce)`` in its place, graded in the sandbox: ``(assignment, its row)``."""
    assignment, autograder, chapter_nb, student_nb = material("15_many_devices",
                                                              tmp_path / "assign")
    correct = solutions(chapter_nb, [e.name for e in assignment.exercises])
    folder = tmp_path / "submissions"
    folder.mkdir()
    sources = correct | {"ring_all_reduce": ring(correct["ring_all_reduce"])}
    nbformat.write(submission(student_nb, sources), folder / f"{name}.ipynb")
    out = tmp_path / "grades.csv"
    grade.grade_folder(folder, autograder, out, secret=secret, limits=LIMITS, quiet=True)
    return assignment, sheet(out)[name]


@needs_sandbox
def test_a_ring_whose_ranks_all_receive_first_ends_at_once_as_a_deadlock(tmp_path, secret):
    """Chapter 15's ranks are threads of the case's process: a ring in which every rank
    waits for a message before sending any ends each case as soon as all ranks wait (no
    limit runs out), noted as a deadlock for the teacher; the student's other exercises,
    run in the same sandbox after it, score full marks."""
    send = "        send(chunks[(rank - step - 1) % world_size], after)\n"

    def waits_first(correct: str) -> str:
        ring = correct.replace(send, "").replace(
            "        incoming += received\n", "        incoming += received\n" + send)
        assert ring.index("recv(received") < ring.index("send(chunks")
        return ring

    assignment, row = graded_ring(tmp_path, secret, "waits_first", waits_first)
    assert [float(row[e.name]) for e in assignment.exercises] == [0.0, 2.0, 2.0]
    assert row["notes"].count("its ranks deadlocked") == 3, row
    assert "limit" not in row["notes"], row


TEXTBOOK_RING = """def ring_all_reduce(tensor, rank, world_size, send, recv):
    chunks = tensor.clone().tensor_split(world_size)
    after, before = (rank + 1) % world_size, (rank - 1) % world_size
    for step in range(world_size - 1):  # rank r ends with chunk r + 1's sum
        send(chunks[(rank - step) % world_size], after)
        incoming = chunks[(rank - step - 1) % world_size]
        received = torch.empty_like(incoming)
        recv(received, before)
        incoming += received
    for step in range(world_size - 1):
        send(chunks[(rank - step + 1) % world_size], after)
        recv(chunks[(rank - step) % world_size], before)
    return torch.cat(chunks)"""


@needs_sandbox
def test_the_textbook_ring_scores_full_marks(tmp_path, secret):
    """Chapter 15's ring as Baidu's and Gibiansky's texts write it (rank r ends the
    reduce-scatter with chunk r + 1's sum, so each rank sends other numbers than section
    15.2's ring) is a ring all the same: every case passes."""
    assignment, row = graded_ring(tmp_path, secret, "textbook", lambda _: TEXTBOOK_RING)
    assert [float(row[e.name]) for e in assignment.exercises] == [
        e.points for e in assignment.exercises], row
