"""Grade a folder of submissions with a course's private cases: one sheet row per file.

    python scripts/grade.py SUBMISSIONS/ --autograder _build/assign/04_attention/autograder \\
        --out grades.csv [--tests ~/course/tests] [--secret PATH] [--feedback DIR] [--canvas FILE]

For every file under SUBMISSIONS (recursively: Moodle's per-student folders too) there is a row:
a notebook (``.ipynb``, any case) or a percent-format ``.py`` is graded, anything else is named
as skipped. For each graded exercise the grader

1. takes the last code cell that defines the exercise's name, as plain Python (``grading.cells``);
2. judges its integrity and the exercise's rules from the syntax tree (``grading.integrity``,
   ``grading.rules``): a flagged exercise scores 0, with the reason;
3. runs the cells of one student in a sandbox (``grading.sandbox``) on the course's case inputs,
   drawn from the course secret, which writes plain data only;
4. compares that data with the expected values it computed itself (``grading.judge``).

SUBMISSIONS may be a single file: that student's row is replaced in the existing sheet.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grading import cases as case_files  # noqa: E402  (scripts/ is not a package)
from grading import cells, integrity, judge, rules, sandbox, sheet, similarity  # noqa: E402
from grading.secret import read_secret, secret_path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TESTS = ROOT / "scripts" / "private_tests"
# Python 3.11's ast is not thread-safe ("AST constructor recursion depth mismatch"): the syntax
# tree is read by one grading thread at a time (the sandboxes run in parallel).
SYNTAX = threading.Lock()


def prepare(assignment: dict, tests: Path | None, secret: bytes, scratch: Path) -> dict:
    """Per exercise: its cases (expected values kept here), rules, and the runner's programs."""
    chapter, tensors, prepared = assignment["chapter"], {}, {}
    for exercise in assignment["exercises"]:
        name = exercise["name"]
        path = next(
            p
            for p in (
                tests and tests / chapter / f"{name}.py",
                DEFAULT_TESTS / chapter / f"{name}.py",
            )
            if p and p.exists()
        )
        module = case_files.load_case_file(path)
        cases = case_files.exercise_cases(path, secret, chapter, name)
        programs = [
            case_files.program(c, f"{name}.{i}", tensors) for i, c in enumerate(cases)
        ]
        prepared[name] = {
            "cases": cases,
            "rules": getattr(module, "rules", ()),
            "programs": programs,
            "file": str(path),
        }
    from safetensors.torch import save_file

    save_file(tensors, scratch / "inputs.safetensors")
    return prepared


def static(
    path: Path, assignment: dict, prepared: dict, grade: sheet.Grade
) -> dict[str, str]:
    """Fill ``grade`` with what the syntax tree decides; the cells left to run, by exercise."""
    try:
        sources = cells.code_cells(path)
    except Exception as error:  # noqa: BLE001 - an unreadable file is that row's note
        grade.note = f"unreadable file ({type(error).__name__}: {judge.short(error, 120)})"
        return {}
    to_run = {}
    for exercise in assignment["exercises"]:
        name = exercise["name"]
        result = grade.results.setdefault(name, sheet.Result())
        source = cells.solution_cell(sources, name)
        if source is None:
            result.note = "no cell defines it"
            continue
        try:
            flags = integrity.flags(source, name, assignment["setup"])
        except SyntaxError as error:
            result.note = (
                f"syntax error on line {error.lineno}: {judge.short(error.msg, 80)}"
            )
            continue
        if flags:
            result.flag = "; ".join(flags)
            continue
        to_run[name] = source
    return to_run


def score(
    grade: sheet.Grade, exercise: dict, prepared: dict, source: str, folder: Path
) -> None:
    name, info = exercise["name"], prepared[exercise["name"]]
    result, verdict = grade.results[name], judge.judge(folder, name, info["cases"])
    if verdict.error:
        result.note = verdict.error
        return
    with SYNTAX:
        broken = rules.judge_rules(source, info["rules"])
    kept = len(info["rules"]) - len(broken) if not verdict.failures else 0
    total = len(info["cases"]) + len(info["rules"])
    result.points = round(exercise["points"] * (verdict.passed + kept) / total, 2)
    reasons: dict[str, list[str]] = {}  # the same reason once, with every case it failed
    for case, why in verdict.failures:
        reasons.setdefault(why, []).append(case)
    result.note = "; ".join(
        [f"case {', '.join(c)}: {why}" for why, c in reasons.items()]
        + [f"rule '{label}' broken: {why}" for label, why in broken]
    )
    result.feedback = judge.short(judge.check_output(folder, name), 400)


def grade_one(
    student: str, path: Path, assignment: dict, prepared: dict, box: sandbox.Sandbox
) -> sheet.Grade:
    grade = sheet.Grade(student, str(path))
    if path.suffix.lower() not in cells.GRADED or path.is_symlink():
        grade.note = f"skipped: not a notebook or a .py file ({path.suffix or 'no suffix'})"
        return grade
    with SYNTAX:
        to_run = static(path, assignment, prepared, grade)
    if not to_run:
        return grade
    limits = box.limits
    exercises = [
        {
            "name": e["name"],
            "source": to_run[e["name"]],
            "check": e.get("check", ""),
            "cpu_seconds": limits.cpu_seconds,
            "wall_seconds": limits.wall_seconds,
            "cases": prepared[e["name"]]["programs"],
        }
        for e in assignment["exercises"]
        if e["name"] in to_run
    ]
    try:
        out, grade.note = box.run(
            {"setup": assignment["setup"], "exercises": exercises}, len(exercises)
        )
        for exercise in assignment["exercises"]:
            if exercise["name"] in to_run:
                score(grade, exercise, prepared, to_run[exercise["name"]], out)
    finally:
        box.clear()
    return grade


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
    quiet: bool = False,
) -> list[sheet.Grade]:
    assignment = json.loads((autograder / "assignment.json").read_text())
    names = [e["name"] for e in assignment["exercises"]]
    found = cells.submissions(folder)
    if not found:
        raise SystemExit(f"no files in {folder}: nothing to grade")
    key = read_secret(secret or secret_path())
    written = sheet.read_written(out)
    with tempfile.TemporaryDirectory(prefix="grade-") as scratch_name:
        scratch = Path(scratch_name)
        os.chmod(scratch, 0o711)  # the sandbox's own uid reaches its folders, lists nothing
        if not unsafe:
            sandbox.check(limits, scratch)
        prepared = prepare(assignment, tests, key, scratch)
        os.chmod(scratch / "inputs.safetensors", 0o644)
        jobs = jobs or os.cpu_count() or 1
        boxes: queue.Queue = queue.Queue()
        for slot in range(jobs):
            boxes.put(
                sandbox.Sandbox(
                    slot, limits, scratch / "inputs.safetensors", scratch, unsafe
                )
            )
        done: list[sheet.Grade] = []
        finished = iter(range(1, len(found) + 1))  # next() is atomic: the progress count
        pending = {
            student: sheet.Grade(
                student, str(path), note="not graded: the grader stopped first"
            )
            for student, path in found
        }

        def work(student: str, path: Path) -> sheet.Grade:
            start = time.perf_counter()
            try:
                box = boxes.get()
                try:
                    grade = grade_one(student, path, assignment, prepared, box)
                finally:
                    boxes.put(box)
            except Exception as error:  # noqa: BLE001 - one student never costs the class
                grade = sheet.Grade(
                    student,
                    str(path),
                    note=f"grader error: {type(error).__name__}: {judge.short(error, 200)}",
                )
            grade.written = written.get(sheet.safe(student, 200), "")
            for name in names:
                grade.results.setdefault(name, sheet.Result())
            if not quiet:
                print(
                    f"[{next(finished)}/{len(found)}] {student!r}: {grade.total:g} points "
                    f"({time.perf_counter() - start:.1f} s)",
                    flush=True,
                )
            return grade

        with ThreadPoolExecutor(max_workers=jobs) as pool:
            try:
                for future in [pool.submit(work, s, p) for s, p in found]:
                    grade = future.result()
                    done.append(grade)
                    pending.pop(grade.student, None)
                    sheet.write(done + list(pending.values()), names, out)
            finally:
                while not boxes.empty():
                    boxes.get().close()
    similarity.write_report(found, assignment, out.with_name(out.stem + "_similarity.csv"))
    for grade in done:
        if feedback:
            sheet.write_feedback(grade, assignment["exercises"], feedback)
    if canvas:
        sheet.write_canvas(
            out,
            canvas,
            f"{assignment['chapter']} ({sum(e['points'] for e in assignment['exercises'])})",
        )
    return done


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
        "--timeout", type=float, default=30.0, help="CPU seconds per exercise"
    )
    parser.add_argument(
        "--jobs", type=int, default=0, help="sandboxes at once (default: one per core)"
    )
    parser.add_argument(
        "--unsafe", action="store_true", help="grade without a sandbox (UNSAFE=1)"
    )
    args = parser.parse_args(argv)
    limits = sandbox.Limits(cpu_seconds=args.timeout, wall_seconds=2 * args.timeout)
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
        )
    except sandbox.SandboxError as error:
        print(f"no sandbox, nothing graded: {error}", file=sys.stderr)
        return 2
    seconds = time.perf_counter() - start
    print(f"{args.out}: {len(grades)} file(s) graded in {seconds:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
