"""Grade a folder of submitted notebooks with an assignment's private tests: one CSV row per student.

    python scripts/grade.py SUBMISSIONS/ --autograder _build/assign/04_attention/autograder --out grades.csv

Each ``*.ipynb`` in SUBMISSIONS is one student (the file name, without ``.ipynb``, is the student's
id in the CSV). For each graded exercise the grader

1. takes the **last code cell that defines the exercise's name** (a ``def``, ``class`` or assignment),
   and nothing else of the notebook: no other cell runs, so printed lines, edited or monkeypatched
   check cells and the rest of the chapter cannot change the grade;
2. flags the cell when it imports ``gpt_from_scratch`` (the package holds every reference solution);
3. runs it in a fresh child process (forked, so the set-up's imports and the test files are loaded
   once) after the assignment's set-up code, with a limit on its CPU time (a loaded machine makes
   nobody fail) and a wall-clock backstop: code that raises, loops forever, calls ``exit()`` or kills
   its process costs that exercise only;
4. flags a solution that *is* the package's object (its ``__module__`` is in ``gpt_from_scratch``,
   or a class derives from one of the package's classes);
5. runs the private test cases (otter-grader's exception-based test files) on it.

A flagged exercise scores 0 and its reason is written in the ``flags`` column, for the teacher to
read. Columns: ``student``, one per exercise (points), ``total``, ``flags``, ``notes`` (why points
were lost: missing, raised, timed out, which private case failed).
"""

from __future__ import annotations

import argparse
import ast
import csv
import json
import linecache
import multiprocessing
import os
import resource
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_student  # noqa: E402  (scripts/ is not a package)

PACKAGE = "gpt_from_scratch"
DEFAULT_TIMEOUT = 30.0  # CPU seconds per exercise; a correct solution needs well under one
WALL_FACTOR = 10  # the wall-clock backstop, in multiples of the CPU limit


@dataclass
class Result:
    points: float = 0.0
    flag: str = ""  # an integrity problem: the exercise scores 0
    note: str = ""  # why points were lost


@dataclass
class Grade:
    student: str
    results: dict[str, Result] = field(default_factory=dict)

    @property
    def total(self) -> float:
        return sum(r.points for r in self.results.values())


def solution_cell(nb, name: str) -> str | None:
    """The source of the last code cell that binds ``name`` at top level, or None."""
    sources = [c.source for c in nb.cells if c.cell_type == "code" and name in make_student.defined_names(c.source)]
    return sources[-1] if sources else None


def imports_package(source: str) -> bool:
    """Whether ``source`` imports gpt_from_scratch (statically, or by a string naming it)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == PACKAGE for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == PACKAGE:
            return True
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and PACKAGE in node.value:
            return True
    return False


def package_origin(obj) -> str:
    """Why ``obj`` is the package's own implementation ("" when it is not)."""
    module = getattr(obj, "__module__", "") or ""
    if module.split(".")[0] == PACKAGE:
        return f"it is {module}.{getattr(obj, '__qualname__', type(obj).__name__)} from the package"
    if isinstance(obj, type):
        for base in obj.__mro__[1:]:
            if (base.__module__ or "").split(".")[0] == PACKAGE:
                return f"it derives from the package's {base.__qualname__}"
    return ""


def _run_one(setup: str, source: str, name: str, test, cpu_seconds: float, conn) -> None:
    """In the child: build the environment, run the private tests, send (fraction, flag, note)."""
    limit = max(1, round(cpu_seconds))
    used = resource.getrusage(resource.RUSAGE_SELF)
    resource.setrlimit(resource.RLIMIT_CPU, (int(used.ru_utime + used.ru_stime) + limit, resource.RLIM_INFINITY))
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # the student's prints go nowhere: they never count
    os.dup2(devnull, 2)

    env: dict = {"__name__": "__main__"}
    filename = "<your solution cell>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)  # for inspect
    try:
        exec(compile(setup, "<assignment set-up>", "exec"), env)
        exec(compile(source, filename, "exec"), env)
    except BaseException as error:  # noqa: BLE001 - SystemExit and all: the exercise scores 0
        conn.send((0.0, "", f"the solution cell raised {type(error).__name__}: {str(error)[:120]}"))
        return
    origin = package_origin(env.get(name))
    if origin:
        conn.send((0.0, f"{name}: {origin}", ""))
        return
    try:
        test.run(env)
    except BaseException as error:  # noqa: BLE001 - exit() inside a test case
        conn.send((0.0, "", f"the private tests stopped: {type(error).__name__}"))
        return
    failed = [r.test_case.name for r in test.test_case_results if not r.passed]
    fraction = float(test.score) / float(test.possible)
    conn.send((fraction, "", f"failed private case(s): {', '.join(failed)}" if failed else ""))


def grade_exercise(setup: str, source: str | None, name: str, test, timeout: float) -> Result:
    if source is None:
        return Result(note=f"{name}: no cell defines it")
    try:
        if imports_package(source):
            return Result(flag=f"{name}: the solution cell imports {PACKAGE}")
    except SyntaxError as error:
        return Result(note=f"{name}: syntax error on line {error.lineno}")
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_run_one, args=(setup, source, name, test, timeout, send), daemon=True)
    child.start()
    send.close()
    ready = receive.poll(timeout * WALL_FACTOR)
    try:
        outcome = receive.recv() if ready else None
    except EOFError:  # the child died without a word
        outcome = None
    if child.is_alive():
        child.kill()
    child.join()
    if outcome is None:
        if not ready or child.exitcode == -signal.SIGXCPU:
            why = f"did not finish within {timeout:.0f} s of CPU time (an endless loop?)"
        else:
            why = f"its process died (exit code {child.exitcode})"
        return Result(note=f"{name}: {why}")
    points, flag, note = outcome
    return Result(points=points, flag=flag, note=f"{name}: {note}" if note else "")


def grade_notebook(path: Path, assignment: dict, tests: dict, timeout: float) -> Grade:
    grade = Grade(path.stem)
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as error:  # noqa: BLE001 - an unreadable file is a zero, not a crash of the grader
        for exercise in assignment["exercises"]:
            grade.results[exercise["name"]] = Result(note=f"unreadable notebook: {type(error).__name__}")
        return grade
    for exercise in assignment["exercises"]:
        name = exercise["name"]
        result = grade_exercise(assignment["setup"], solution_cell(nb, name), name, tests[name], timeout)
        result.points = round(result.points * exercise["points"], 2)  # the test file's score is a fraction
        grade.results[name] = result
    return grade


def write_csv(grades: list[Grade], assignment: dict, out: Path) -> None:
    names = [e["name"] for e in assignment["exercises"]]
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    with partial.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["student", *names, "total", "flags", "notes"])
        for g in grades:
            writer.writerow([g.student, *(f"{g.results[n].points:g}" for n in names), f"{g.total:g}",
                             "; ".join(r.flag for r in g.results.values() if r.flag),
                             "; ".join(r.note for r in g.results.values() if r.note)])
    partial.replace(out)  # a crash leaves the old CSV or the new one, never half of one


def grade_folder(submissions: Path, autograder: Path, out: Path, timeout: float = DEFAULT_TIMEOUT) -> list[Grade]:
    assignment = json.loads((autograder / "assignment.json").read_text())
    paths = sorted(submissions.glob("*.ipynb"))
    if not paths:
        raise SystemExit(f"no .ipynb files in {submissions}: nothing to grade")
    from otter.test_files.exception_test import ExceptionTestFile

    exec(compile(assignment["setup"], "<assignment set-up>", "exec"), {})  # imported once, before the forks
    import torch

    # Its first call imports torch.distributed's DTensor support: 2.7 s, paid here once, not in every child.
    torch.testing.assert_close(torch.zeros(1), torch.zeros(1))
    tests = {e["name"]: ExceptionTestFile.from_file(str(autograder / "tests" / f"{e['name']}.py"))
             for e in assignment["exercises"]}
    grades = [grade_notebook(p, assignment, tests, timeout) for p in paths]
    write_csv(grades, assignment, out)
    return grades


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("submissions", type=Path, help="a folder of submitted notebooks, one per student")
    parser.add_argument("--autograder", type=Path, required=True, help="the chapter's folder from assign.py")
    parser.add_argument("--out", type=Path, default=Path("grades.csv"))
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="CPU seconds per exercise")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    grades = grade_folder(args.submissions, args.autograder, args.out, args.timeout)
    seconds = time.perf_counter() - start
    print(f"{args.out}: {len(grades)} submission(s) graded in {seconds:.1f} s "
          f"({seconds / len(grades):.2f} s per submission)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
