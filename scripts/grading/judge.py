"""The judge: reads what the sandbox sent back (plain data only, in files the grader wrote
itself) and compares it with the expected values it computed.

Nothing of the student's runs here, and nothing the student wrote reaches a note: a report
is
parsed as JSON (size capped), its tensors loaded by safetensors (plain tensors, no pickle,
no
subclass), and every failure is said in the grader's words: the case's name and what went
wrong (wrong shape, wrong values, an error of a named kind, a limit), never the expected
values, the inputs or the student's own message.
"""

from __future__ import annotations

import builtins
import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load

from grading.cases import Case

MAX_JSON = 4 << 20  # bytes of a report worth reading
MAX_TENSORS = 128 << 20
KNOWN_ERRORS = {
    n
    for n in dir(builtins)
    if isinstance(getattr(builtins, n), type)
    and issubclass(getattr(builtins, n), BaseException)
} | {"OutOfMemoryError", "JITException", "FrontendError", "NotSupportedError"}
STOPPED = {
    "wall": "ran past its wall-clock limit (a stall?)",
    "cpu": "ran past its CPU limit",
    "killed": "was killed (its memory limit?)",
    "crashed": "its process crashed",
    "no_report": "its process ended without a report (exit()?)",
    "no_process": "could not start (too many processes left running)",
    "skipped": "not run (an earlier case ran past its limit)",
}


@dataclass
class Verdict:
    passed: int = 0
    failures: list = field(default_factory=list)  # (case name, why)
    error: str = ""  # the program itself failed on every case


def error_name(value) -> str:
    """A builtin or torch error's class name; any other (the student's own class)
    unnamed."""
    name = str(value)
    return name if name in KNOWN_ERRORS else "an exception of its own"


def read_file(path: Path, limit: int) -> bytes | None:
    """A regular file the grader wrote, opened without following a link, at most
    ``limit``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        return f.read(limit)


def decode(value, tensors: dict):
    """The runner's JSON back to values: tensors from the safetensors file, lists,
    scalars."""
    if isinstance(value, dict):
        if "$tensor" in value:
            return tensors.get(value["$tensor"])
        if "$list" in value:
            return [decode(v, tensors) for v in value["$list"]]
        return "an object"
    return value


def same(got, expected, case: Case) -> str:
    """ "" when ``got`` matches ``expected``, else what kind of difference (no values)."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return "not a tensor"
        if tuple(got.shape) != tuple(expected.shape):
            return "wrong shape"
        if case.exact_dtype and got.dtype != expected.dtype:
            return f"wrong dtype ({str(got.dtype).removeprefix('torch.')})"
        if got.dtype == torch.bool or not expected.is_floating_point():
            return "" if torch.equal(got.to(expected.dtype), expected) else "wrong values"
        close = torch.isclose(
            got.to(expected.dtype), expected, atol=case.atol, rtol=case.rtol, equal_nan=True
        )
        return "" if bool(close.all()) else "wrong values"
    if isinstance(expected, (list, tuple)):
        if not isinstance(got, list) or len(got) != len(expected):
            return "wrong number of values"
        return next((why for g, e in zip(got, expected) if (why := same(g, e, case))), "")
    if isinstance(expected, float):
        ok = isinstance(got, (int, float)) and abs(got - expected) <= (
            case.atol + case.rtol * abs(expected)
        )
        return "" if ok else "wrong value"
    return "" if got == expected and type(got) is type(expected) else "wrong value"


def report(folder: Path, name: str, index: int):
    """(report dict, tensors) of one case, or (None, why)."""
    data = read_file(folder / f"{name}.{index}.json", MAX_JSON)
    raw = read_file(folder / f"{name}.{index}.safetensors", MAX_TENSORS)
    if data is None or raw is None:
        return None, "no report (the sandbox stopped?)"
    try:
        result, tensors = json.loads(data), load(raw)
    except Exception:  # noqa: BLE001 - garbled output counts against this case only
        return None, "an unreadable report"
    return (result, tensors) if isinstance(result, dict) else (None, "an unreadable report")


def judge(folder: Path, name: str, cases: list[Case]) -> Verdict:
    verdict, cell_errors = Verdict(), set()
    for index, case in enumerate(cases):
        result, tensors = report(folder, name, index)
        if result is None:
            verdict.failures.append((case.name, tensors))
            continue
        if "stopped" in result:
            verdict.failures.append((case.name, STOPPED.get(result["stopped"], "stopped")))
            continue
        if "error" in result:
            kind = error_name(result["error"])
            if result.get("stage") == "cell":
                cell_errors.add(kind)
            verdict.failures.append((case.name, f"raised {kind}"))
            continue
        values = result.get("values")
        got = [decode(v, tensors) for v in values] if isinstance(values, list) else []
        try:
            if case.check is not None:
                case.check(got)  # raises AssertionError: the values are wrong
            why = "" if case.check is not None else same(got, case.expected, case)
        except Exception:  # noqa: BLE001 - a check meeting an unexpected output
            why = "wrong values"
        if why:
            verdict.failures.append((case.name, why))
        else:
            verdict.passed += 1
    if len(cell_errors) == 1 and len(verdict.failures) == len(
        cases
    ) == verdict.failures.count(verdict.failures[0]):
        verdict.error = f"the program raised {cell_errors.pop()} before any case ran"
    return verdict


def describe(case: Case, why: str) -> str:
    """A failed case in the grader's words: its name, its behaviour, what went wrong."""
    behaviour = f" ({case.behaviour})" if case.behaviour else ""
    return re.sub(r"\s+", " ", f"case {case.name}{behaviour}: {why}")
