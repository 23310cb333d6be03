"""The judge: reads what the sandbox sent back over its pipe (plain data only, never a file)
and compares it with the expected values it computed.

Nothing of the student's runs here, and nothing the student chose reaches the student: a
result is parsed as JSON (size capped), its tensors loaded by safetensors (plain tensors, no
pickle, no subclass), and every failure is said in fixed words: the case's name and what
went wrong (wrong shape, wrong dtype, wrong values, no or a wrong gradient, changed its
inputs, raised an exception, a limit), never the expected values, the inputs, the
student's message, nor the error class or dtype their code chose (those go to the
teacher's ``details`` column: a student could pick them to read back bits of the private
inputs).
"""

from __future__ import annotations

import builtins
import json
import re
from dataclasses import dataclass, field

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
    "deadlock": "its ranks deadlocked (each waited for another)",
    "no_process": "could not start (too many processes left running)",
    "skipped": "not run (an earlier case ran past its limit)",
    "sandbox": "no result (its sandbox ended first)",
}


@dataclass
class Verdict:
    passed: int = 0
    failures: list = field(default_factory=list)  # (case name, why, the teacher's detail)
    error: str = ""  # the program itself failed on every case
    detail: str = ""  # the teacher's: the error's kind


def error_name(value) -> str:
    """A builtin or torch error's class name; any other (the student's own class)
    unnamed. For the teacher's column only: a student who chooses the class of the error
    they raise would read back a few bits of the private inputs from it."""
    name = str(value)
    return name if name in KNOWN_ERRORS else "an exception of its own"


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
        if expected.dtype == torch.bool:
            return "" if torch.equal(got.to(torch.bool), expected) else "wrong values"
        if got.dtype == torch.bool or not expected.is_floating_point():
            return "" if torch.equal(got.double(), expected.double()) else "wrong values"
        close = torch.isclose(  # in float64: a float64 result is not rounded first
            got.double(), expected.double(), atol=case.atol, rtol=case.rtol, equal_nan=True
        )
        return "" if bool(close.all()) else "wrong values"
    if isinstance(expected, (list, tuple)):
        if not isinstance(got, list) or len(got) != len(expected):
            return "wrong number of values"
        return next((why for g, e in zip(got, expected) if (why := same(g, e, case))), "")
    if isinstance(expected, float):
        if isinstance(got, torch.Tensor) and got.numel() == 1 and got.dtype != torch.bool:
            got = got.item()  # a number as a one-element tensor: no type is stated
        ok = (
            isinstance(got, (int, float))
            and not isinstance(got, bool)
            and abs(got - expected) <= case.atol + case.rtol * abs(expected)
        )
        return "" if ok else "wrong value"
    return "" if got == expected and type(got) is type(expected) else "wrong value"


def peel(got: list, case: Case) -> tuple[list, str]:
    """The values without what a step reported beside its value (the arguments after the
    call, the value's gradient: ``cases.Step``), and what is wrong there ("" if
    nothing)."""
    got, why = list(got), ""
    for i, step in enumerate(case.steps, len(case.fresh)):
        if step.unchanged:
            got[i], after = got[i]
            kept = len(after) == len(step.args) and all(map(unchanged, after, step.args))
            why = why or ("" if kept else "changed its inputs")
        if step.gradient is not None:
            got[i], grad = got[i]
            if grad is None:
                why = why or "no gradient"
            elif same(grad, step.gradient[1], case):
                why = why or "wrong gradient"
    return got, why


def unchanged(after, sent) -> bool:
    """Whether an argument came back from the call as it was sent."""
    if isinstance(sent, torch.Tensor):
        return isinstance(after, torch.Tensor) and after.dtype == sent.dtype and (
            after.shape == sent.shape and torch.equal(after, sent)
        )
    return type(after) is type(sent) and after == sent


def report(raw: bytes | str):
    """(report dict, tensors) of one case's result as the sandbox sent it, or (None,
    why)."""
    if isinstance(raw, str):
        return {"stopped": raw}, {}
    size = int.from_bytes(raw[:8], "big")
    if len(raw) < 8 + size or size > MAX_JSON or len(raw) - 8 - size > MAX_TENSORS:
        return None, "an unreadable result"
    try:
        result, tensors = json.loads(raw[8 : 8 + size]), load(raw[8 + size :])
    except Exception:  # noqa: BLE001 - garbled output counts against this case only
        return None, "an unreadable result"
    return (result, tensors) if isinstance(result, dict) else (None, "an unreadable result")


def judge(results: list, cases: list[Case]) -> Verdict:
    """The verdict on one exercise's ``results`` (``report``'s input), case by case."""
    verdict, cell_errors = Verdict(), set()
    for raw, case in zip(results, cases):
        result, tensors = report(raw)
        if result is None:
            verdict.failures.append((case.name, tensors, ""))
            continue
        if "stopped" in result:
            why = STOPPED.get(result["stopped"], "stopped")
            verdict.failures.append((case.name, why, ""))
            continue
        if "error" in result:
            kind = error_name(result["error"])
            if result.get("stage") == "cell":
                cell_errors.add(kind)
            verdict.failures.append((case.name, "raised an exception", kind))
            continue
        values = result.get("values")
        got = [decode(v, tensors) for v in values] if isinstance(values, list) else []
        try:
            got, beside = peel(got, case)
            if case.check is not None:
                case.check(got)  # raises AssertionError: the values are wrong
            why = "" if case.check is not None else same(got, case.expected, case)
            why = why or beside
        except Exception:  # noqa: BLE001 - a check meeting an unexpected output
            why = "wrong values"
        if why:
            fixed, _, detail = why.partition(" (")  # "wrong dtype (float64)": the detail
            verdict.failures.append((case.name, fixed, detail.rstrip(")")))
        else:
            verdict.passed += 1
    if len(cell_errors) == 1 and len(verdict.failures) == len(cases) and all(
        f[1] == "raised an exception" for f in verdict.failures
    ):
        verdict.error = "the program raised an exception before any case ran"
        verdict.detail = cell_errors.pop()
    return verdict


def describe(case: Case, why: str) -> str:
    """A failed case in the grader's words: its name, its behaviour, what went wrong."""
    behaviour = f" ({case.behaviour})" if case.behaviour else ""
    return re.sub(r"\s+", " ", f"case {case.name}{behaviour}: {why}")
