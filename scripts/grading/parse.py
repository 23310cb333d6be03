"""Reading the submissions, each file in a forked process of its own under a CPU and memory
limit, each student's files together under one time budget (``STUDENT_SECONDS`` of
``grading.clock``: the time a reader waits for a CPU that other programs hold does not
count): a file that stalls the notebook reader, IPython's transformer or the syntax tree (a
notebook of thousands of magics, a deeply nested expression), or a folder of many slow
files, costs that student only, whose rows say so.

Per file it returns plain data: a note when the file cannot be read, and per exercise the
program to run (``grading.cells.program``), the teacher's flags (``grading.integrity``,
``grading.published``), its hints and the fingerprint the similarity report compares
(``grading.similarity``).
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import resource
import select
import signal
from pathlib import Path

from grading import cells, integrity, published
from grading.clock import Clock

STUDENT_SECONDS = 40.0  # of reading, all of a student's files together
MEMORY_BYTES = 4 << 30  # address space of a reading process
MAX_REPLY = 16 << 20


def read_one(
    path: Path,
    names: list[str],
    provided: set[str],
    hints: dict | None = None,
    book: dict | None = None,
) -> dict:
    """What the grader needs of one file (run in the child); ``hints``: per exercise the
    names its case file asks the teacher to look for (``integrity.hints``); ``book``: per
    exercise the book's published solution (``grading.published``)."""
    if path.is_symlink():
        return {"skipped": "a link, not a file"}
    if path.suffix.lower() not in cells.GRADED:
        return {"skipped": f"not a notebook or a .py file ({path.suffix or 'no suffix'})"}
    try:
        found = cells.code_cells(path)
    except cells.TooLarge as error:
        return {"skipped": str(error)}
    except Exception as error:  # noqa: BLE001 - an unreadable file is that row's note
        return {"error": type(error).__name__}
    digest = hashlib.sha256("\0".join(found).encode()).hexdigest()  # the code, not outputs
    reply = {"digest": digest, "programs": {}, "flags": {}, "prints": {}, "hints": {}}
    for name in names:
        source = cells.program(found, name, provided)
        reply["programs"][name] = source
        if source is None:
            continue
        reply["flags"][name] = integrity.flags(source) + published.flags(
            found, name, (book or {}).get(name)
        )
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        reply["hints"][name] = integrity.hints(tree, tuple((hints or {}).get(name, ())))
        if (
            "NotImplementedError" not in source
            and integrity.size(tree) >= integrity.MIN_NODES
        ):
            reply["prints"][name] = integrity.fingerprint(tree)
    return reply


def warm_up() -> None:
    """What every reader would otherwise pay on its own: the package's fingerprints, the
    notebook schema's validator, IPython's transformer, jupytext."""
    import jupytext
    import nbformat

    integrity.package_index()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("%time x = 1")])
    nbformat.reads(nbformat.writes(nb), as_version=4)
    cells.python_source.__wrapped__("%%time\nx = 1\n!ls")
    jupytext.reads("# %%\nx = 1\n", fmt="py:percent")


def _child(
    path: Path,
    names: list[str],
    provided: set[str],
    hints: dict | None,
    book: dict | None,
    pipe: int,
    cpu_seconds: int,
) -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    try:
        reply = read_one(path, names, provided, hints, book)
    except BaseException as error:  # noqa: BLE001 - RecursionError, MemoryError: the note
        reply = {"error": type(error).__name__}
    data = json.dumps(reply).encode()[:MAX_REPLY]
    view = memoryview(data)
    while view:
        view = view[os.write(pipe, view) :]


def over(budget: float) -> dict:
    """The reply for each file of a student whose reading ran past ``budget``."""
    return {"over": f"reading took over {budget:g} s (this student's files together)"}


def read_all(
    found: list[tuple[str, Path]],
    names: list[str],
    provided: set[str],
    jobs: int,
    hints: dict | None = None,
    students: list[str] | None = None,
    budget: float | None = None,
    book: dict | None = None,
) -> list[dict]:
    """``read_one`` of every file, ``jobs`` at once, in order. ``students``: whose each file
    is (default: its id); a student's files share ``budget`` seconds of reading: past it,
    the files being read are stopped, and they and the student's files not yet read get
    ``over``'s reply (files read before stand). ``budget``: STUDENT_SECONDS by default.
    ``book``: per exercise the book's published solution."""
    budget = STUDENT_SECONDS if budget is None else budget
    if budget <= 0:
        raise ValueError(f"budget={budget}: reading needs a positive number of seconds")
    students = students or [student for student, _ in found]
    if len(students) != len(found):
        raise ValueError(
            f"{len(students)} students for {len(found)} files: give one per file"
        )
    warm_up()  # once here, inherited by every child, instead of once per file
    replies: dict[int, dict] = {}
    spent = dict.fromkeys(students, 0.0)  # seconds of the files read to the end
    waiting = list(enumerate(path for _, path in found))
    running: dict[int, tuple[int, int, Clock, bytearray]] = {}  # fd -> …

    while waiting or running:
        while waiting and len(running) < jobs:
            index, path = waiting.pop(0)
            left = budget - spent[students[index]]
            if left <= 0:
                replies[index] = over(budget)
                continue
            read_end, write_end = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(read_end)
                try:
                    _child(path, names, provided, hints, book, write_end, int(left) + 2)
                finally:
                    os._exit(0)
            os.close(write_end)
            running[read_end] = (index, pid, Clock(pid), bytearray())
        ready = select.select(list(running), [], [], 0.1)[0]
        for fd in ready:
            chunk = os.read(fd, 1 << 20)
            if chunk and len(running[fd][3]) < MAX_REPLY:
                running[fd][3].extend(chunk)
                continue
            index, pid, clock, data = running.pop(fd)
            spent[students[index]] += clock.seconds()
            os.close(fd)
            os.waitpid(pid, 0)
            try:
                replies[index] = json.loads(bytes(data))
            except ValueError:
                replies[index] = {
                    "error": "a reader that stopped (its CPU or memory limit)"
                }
            if spent[students[index]] > budget:
                replies[index] = over(budget)
        reading: dict[str, float] = {}
        for index, _, clock, _ in running.values():
            student = students[index]
            reading[student] = reading.get(student, spent[student]) + clock.seconds()
        for fd, (index, pid, _, _) in list(running.items()):
            if reading[students[index]] > budget:
                spent[students[index]] = budget  # none of the student's later files runs
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                os.close(fd)
                running.pop(fd)
                replies[index] = over(budget)
    return [replies[i] for i in range(len(found))]
