"""The judge: reads what the sandbox wrote (plain data only) and compares it with the
reference.

Nothing of the student's runs here: the sandbox's ``<exercise>.json`` is parsed as JSON
(sizes capped), its tensors are loaded by safetensors (plain tensors, no pickle, no
subclass), and the expected values were computed by the grader from the course's case files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file

from grading.cases import Case

MAX_JSON = 4 << 20  # bytes of a report worth reading
MAX_TENSORS = 256 << 20
MAX_MESSAGE = 200  # characters of a message kept in a note


@dataclass
class Verdict:
    passed: int = 0
    failures: list = None  # (case name, why)
    error: str = ""  # the cell itself failed (raised, timed out, died): no case ran

    def __post_init__(self):
        self.failures = [] if self.failures is None else self.failures


def short(text: str, limit: int = MAX_MESSAGE) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def decode(value, tensors: dict):
    """The runner's JSON back to values: tensors from the safetensors file, lists, scalars."""
    if isinstance(value, dict):
        if "$tensor" in value:
            return tensors.get(value["$tensor"])
        if "$list" in value:
            return [decode(v, tensors) for v in value["$list"]]
        return f"an object of type {value.get('$type', '?')}"
    return value


def same(got, expected, case: Case) -> str:
    """ "" when ``got`` matches ``expected``, else what differs."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return f"expected a tensor, got {short(repr(got), 60)}"
        if tuple(got.shape) != tuple(expected.shape):
            return f"shape {tuple(got.shape)}, expected {tuple(expected.shape)}"
        if case.exact_dtype and got.dtype != expected.dtype:
            return f"dtype {got.dtype}, expected {expected.dtype}"
        if (
            got.dtype == torch.bool
            or expected.dtype == torch.bool
            or not expected.is_floating_point()
        ):
            return "" if torch.equal(got.to(expected.dtype), expected) else "values differ"
        try:
            torch.testing.assert_close(
                got.to(expected.dtype), expected, atol=case.atol, rtol=case.rtol
            )
        except AssertionError as error:
            lines = [line.strip() for line in str(error).splitlines() if line.strip()]
            return short("values differ (" + "; ".join(lines[1:3] or lines[:1]) + ")")
        return ""
    if isinstance(expected, (list, tuple)):
        if not isinstance(got, list) or len(got) != len(expected):
            return f"expected {len(expected)} values, got {short(repr(got), 60)}"
        return next((why for g, e in zip(got, expected) if (why := same(g, e, case))), "")
    if isinstance(expected, float):
        ok = isinstance(got, (int, float)) and abs(
            got - expected
        ) <= case.atol + case.rtol * abs(expected)
        return "" if ok else f"{short(repr(got), 60)}, expected {expected!r}"
    return (
        ""
        if got == expected
        else f"{short(repr(got), 60)}, expected {short(repr(expected), 60)}"
    )


def check_output(folder: Path, name: str) -> str:
    """What the public check printed on the solution in the sandbox (feedback only, never points)."""
    try:
        report = json.loads((folder / f"{name}.json").read_text())
        return str(report.get("check", ""))
    except (OSError, ValueError, AttributeError):
        return ""


def judge(folder: Path, name: str, cases: list[Case]) -> Verdict:
    report_path, tensor_path = folder / f"{name}.json", folder / f"{name}.safetensors"
    if not report_path.is_file() or not tensor_path.is_file():
        return Verdict(
            error="its process died or was stopped before it reported (a crash, "
            "exit(), a CPU or wall-clock limit)"
        )
    if report_path.stat().st_size > MAX_JSON or tensor_path.stat().st_size > MAX_TENSORS:
        return Verdict(error="its output is too large")
    try:
        report = json.loads(report_path.read_text())
        tensors = load_file(tensor_path)
    except Exception as error:  # noqa: BLE001 - garbled output counts against this exercise only
        return Verdict(error=f"its output is unreadable ({type(error).__name__})")
    if not isinstance(report, dict):
        return Verdict(error="its output is unreadable")
    if report.get("error"):
        return Verdict(
            error=short(report["error"])
            if report.get("stopped")
            else f"the solution cell raised {short(report['error'])}"
        )
    verdict = Verdict()
    results = report.get("cases", {})
    for case in cases:
        result = results.get(case.name) if isinstance(results, dict) else None
        if not isinstance(result, dict) or (
            "values" not in result and "error" not in result
        ):
            verdict.failures.append((case.name, "did not finish"))
            continue
        if "error" in result:
            verdict.failures.append((case.name, f"raised {short(result['error'])}"))
            continue
        got = (
            [decode(v, tensors) for v in result["values"]]
            if isinstance(result["values"], list)
            else []
        )
        try:
            if case.check is not None:
                case.check(got)  # raises AssertionError saying what is wrong
            why = "" if case.check is not None else same(got, case.expected, case)
        except AssertionError as error:
            why = short(str(error) or "the values are wrong")
        except Exception as error:  # noqa: BLE001 - a check meeting an unexpected type
            why = short(f"unexpected output ({type(error).__name__}: {error})")
        if why:
            verdict.failures.append((case.name, why))
        else:
            verdict.passed += 1
    return verdict
