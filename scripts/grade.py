"""Grade a folder of submissions with a course's private cases: one sheet row per file.

    python scripts/grade.py SUBMISSIONS/ --autograder _build/assign/04_attention/autograder
    \\
        --out grades.csv [--tests ~/course/tests] [--secret PATH] [--feedback DIR]
        [--canvas FILE]

For every file under SUBMISSIONS (recursively: Moodle's per-student folders too) there is a
row:
a notebook (``.ipynb``, any case) or a ``.py`` file is graded, anything else is named as
skipped. The grader

1. reads every file in a process of its own under CPU and memory limits, each student's
files under one time budget (``grading.parse``):
   per exercise the program (its solution cell and the helpers it uses), the teacher's flags
   (a near copy of the package, the book's solution pasted, a reach for the package: flags
   never cost points) and a fingerprint;
2. runs each program in a sandbox (``grading.sandbox``) on the course's case inputs, drawn
from
   the course secret, one process per case, with the exercise's set-up made of stand-ins
   (``grading.standins``): the package is not in the sandbox;
3. compares what came back (plain data) with the expected values it computed itself
   (``grading.judge``); points are the share of cases passed. Rules that no output shows are
   the teacher's written criteria, printed in each feedback file;
4. writes the sheet after every student, then the similarity report, the feedback folders
   and the Canvas import, whatever happened before.

SUBMISSIONS may be a single file: that student's row is replaced in the existing sheet.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grading import cases as case_files  # noqa: E402  (scripts/ is not a package)
from grading import cells, judge, parse, sandbox, sheet, similarity  # noqa: E402
from grading import standins, startup  # noqa: E402
from grading.secret import read_secret, secret_path  # noqa: E402
from safetensors.torch import save  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TESTS = ROOT / "scripts" / "private_tests"


def prepare(assignment: dict, tests: Path | None, secret: bytes) -> dict:
    """Per exercise: its cases (expected values kept here), criteria, set-up, and per case
    what the sandbox gets of it: its program and its own tensors (safetensors bytes)."""
    chapter, prepared = assignment["chapter"], {}
    for exercise in assignment["exercises"]:
        name = exercise["name"]
        candidates = (
            tests and tests / chapter / f"{name}.py",
            DEFAULT_TESTS / chapter / f"{name}.py",
        )
        path = next(p for p in candidates if p and p.exists())
        module = case_files.load_case_file(path)
        cases = case_files.exercise_cases(path, secret, chapter, name)
        programs = []
        for case in cases:
            tensors: dict = {}
            program = case_files.program(case, "in", tensors)
            programs.append(
                {"program": program, "tensors": save(tensors), "cpu": case.cpu_seconds}
            )
        prepared[name] = {
            "cases": cases,
            "criteria": tuple(getattr(module, "criteria", ())),
            "hints": tuple(getattr(module, "hints", ())),
            "setup": standins.setup_source(
                assignment["setup"], tuple(getattr(module, "withheld", ()))
            ),
            "programs": programs,
        }
    return prepared


def score(grade: sheet.Grade, exercise: dict, cases: list, results: list) -> None:
    result, verdict = grade.results[exercise["name"]], judge.judge(results, cases)
    result.points = round(exercise["points"] * verdict.passed / len(cases), 2)
    by_case = {c.name: c for c in cases}
    failures = verdict.failures
    # The student's feedback: passed or not, a case; how it failed is the teacher's (a
    # student who chooses how a case fails would read back its private inputs)
    result.feedback = "; ".join(judge.describe(by_case[n], "not passed") for n, *_ in failures)
    if verdict.error:
        result.note, result.detail = verdict.error, verdict.detail
        return
    result.note = "; ".join(judge.describe(by_case[n], why) for n, why, _ in failures)
    result.detail = "; ".join(f"case {n}: {d}" for n, _, d in failures if d)


def grade_one(
    grade: sheet.Grade, reply: dict, assignment: dict, prepared: dict, box: sandbox.Sandbox
) -> None:
    """Fill ``grade`` from the file's ``reply`` (``grading.parse``) and a run in ``box``."""
    if "skipped" in reply:
        grade.note = f"skipped: {reply['skipped']}"
        return
    if "error" in reply:
        grade.note = f"unreadable file ({reply['error']})"
        return
    if "over" in reply:
        grade.note = f"not graded: {reply['over']}"
        return
    exercises = []
    for exercise in assignment["exercises"]:
        name = exercise["name"]
        result = grade.results[name]
        result.flag = "; ".join(reply["flags"].get(name, []))
        result.hint = ", ".join(reply.get("hints", {}).get(name, []))
        if reply["programs"].get(name) is None:
            result.note = result.feedback = "no cell defines it"
            continue
        exercises.append(
            {
                "name": name,
                "setup": prepared[name]["setup"],
                "source": reply["programs"][name],
                "cpu_seconds": box.limits.cpu_seconds,
                "cases": prepared[name]["programs"],
            }
        )
    if not exercises:
        return
    results, grade.detail = box.run(exercises)
    if all(r == "sandbox" for got in results.values() for r in got):
        # Not one case answered: the sandbox, not the student's code, may be at fault.
        # Once more in a new one, then said as such, never a silent 0.
        results, note = box.run(exercises)
        if all(r == "sandbox" for got in results.values() for r in got):
            grade.note = f"grader error (sandbox): {note or 'no case answered'}"
    for exercise in assignment["exercises"]:
        if exercise["name"] in results:
            name = exercise["name"]
            score(grade, exercise, prepared[name]["cases"], results[name])


def grade_folder(
    folder: Path,
    autograder: Path,
    out: Path,
    *,
    tests: Path | None = None,
    secret: Path | None = None,
    limits: sandbox.Limits = sandbox.Limits(),
    unsafe: bool = False,
    jobs: int = 0,
    feedback: Path | None = None,
    canvas: Path | None = None,
    canvas_column: str = "",
    quiet: bool = False,
) -> list[sheet.Grade]:
    assignment = json.loads((autograder / "assignment.json").read_text())
    names = [e["name"] for e in assignment["exercises"]]
    found = cells.submissions(folder)
    if not found:
        raise SystemExit(f"no files in {folder}: nothing to grade")
    key = read_secret(secret or secret_path())
    written = sheet.read_written(out)  # also refuses a sheet it must not overwrite
    jobs = jobs or os.cpu_count() or 1
    grades = sheet.identify(folder, found)
    for grade in grades:
        grade.written = sheet.written_of(sheet.safe(grade.student, 200), written)
        grade.results = {n: sheet.Result() for n in names}
    ids = [sheet.safe(g.student, 200) for g in grades]
    for warning in sheet.merged(ids, list(written)) if not quiet else ():
        print(f"warning: {warning}")
    duplicates = sorted({g.student for g in grades if g.note.startswith("duplicate")})
    if duplicates and not quiet:
        print(f"duplicate student ids (each gets a row per file): {', '.join(duplicates)}")
    setup = standins.setup_source(assignment["setup"])
    lost = startup.check(limits, setup, unsafe)  # a broken sandbox raised SandboxError
    if lost and not quiet:
        print(f"WARNING, guarantees lost: {lost}")
    prepared = prepare(assignment, tests, key)
    provided = standins.setup_names(assignment["setup"])
    hints = {n: prepared[n]["hints"] for n in names}
    people = [sheet.person(g.student) for g in grades]  # whose reading time each file uses
    replies = parse.read_all(found, names, provided, max(jobs, os.cpu_count() or 1), hints,
                             people, book=assignment.get("published"))
    boxes: queue.Queue = queue.Queue()
    for slot in range(jobs):
        boxes.put(sandbox.Sandbox(slot, limits, unsafe))
    finished = iter(range(1, len(found) + 1))  # next() is atomic: the progress count
    pending = [g.note for g in grades]

    def work(index: int) -> None:
        grade, start = grades[index], time.perf_counter()
        grade.note = ""
        try:
            box = boxes.get()
            try:
                grade_one(grade, replies[index], assignment, prepared, box)
            finally:
                boxes.put(box)
        except Exception as error:  # noqa: BLE001 - one student never costs the class
            grade.note = f"not graded: the grader met {type(error).__name__}"
        if pending[index]:
            grade.note = "; ".join(n for n in (pending[index], grade.note) if n)
        grade.detail = "; ".join(d for d in (lost, grade.detail) if d)
        if not quiet:
            print(
                f"[{next(finished)}/{len(found)}] {grade.student!r}: "
                f"{grade.total:g} points "
                f"({time.perf_counter() - start:.1f} s)",
                flush=True,
            )

    for grade in grades:
        grade.note = grade.note or "not graded: the grader stopped first"
    try:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            for index, future in enumerate(
                [pool.submit(work, i) for i in range(len(found))]
            ):
                future.result()
                sheet.write(grades, names, out)
    finally:
        while not boxes.empty():
            boxes.get().close()
        sheet.write(grades, names, out)
        similarity.write_report(
            found, replies, names, out.with_name(out.stem + "_similarity.csv")
        )
        criteria = {n: prepared[n]["criteria"] for n in names}
        for grade in grades if feedback else []:
            sheet.write_feedback(grade, assignment["exercises"], criteria, feedback)
        if canvas:
            points = sum(e["points"] for e in assignment["exercises"])
            sheet.write_canvas(
                out, canvas, canvas_column or assignment["chapter"], points
            )
    return grades


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "submissions", type=Path, help="a folder of submissions, or one file"
    )
    parser.add_argument(
        "--autograder", type=Path, required=True, help="the chapter's folder from assign.py"
    )
    parser.add_argument("--out", type=Path, default=Path("grades.csv"))
    parser.add_argument(
        "--tests", type=Path, help="the course's own case files (<chapter>/<exercise>.py)"
    )
    parser.add_argument(
        "--secret", type=Path, help=f"the course secret (default {secret_path()})"
    )
    parser.add_argument(
        "--feedback", type=Path, help="write <student>/feedback.txt files here"
    )
    parser.add_argument(
        "--canvas", type=Path, help="write a Canvas gradebook import CSV here"
    )
    parser.add_argument(
        "--canvas-column",
        default="",
        help="the assignment's header in your Canvas export, 'Name (id)' "
        "(default: the chapter)",
    )
    parser.add_argument("--timeout", type=float, default=20.0, help="CPU seconds per case")
    parser.add_argument(
        "--jobs", type=int, default=0, help="sandboxes at once (default: one per core)"
    )
    parser.add_argument(
        "--unsafe", action="store_true", help="grade without a sandbox (UNSAFE=1)"
    )
    args = parser.parse_args(argv)
    limits = sandbox.Limits(cpu_seconds=args.timeout)
    start = time.perf_counter()
    try:
        grades = grade_folder(
            args.submissions,
            args.autograder,
            args.out,
            tests=args.tests,
            secret=args.secret,
            limits=limits,
            unsafe=args.unsafe,
            jobs=args.jobs,
            feedback=args.feedback,
            canvas=args.canvas,
            canvas_column=args.canvas_column,
        )
    except sandbox.SandboxError as error:
        print(f"nothing graded: {error}", file=sys.stderr)
        return 2
    seconds = time.perf_counter() - start
    print(f"{args.out}: {len(grades)} file(s) graded in {seconds:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
