"""The machinery shared by every chapter's checkers (see ``gpt_from_scratch.exercises``).

A checker builds a list of ``_Case``s and hands it to ``_run_cases``, which runs them in order under a
time limit, turns whatever the candidate raises (an exception, ``exit()``, an endless loop) into a
short report, and prints one success line or the first failure with a hint.
"""

from __future__ import annotations

import ast
import inspect
import math
import os
import random
import textwrap
import signal
import sysconfig
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn


PASS_MARK, FAIL_MARK = "✅", "❌"
_MAX_MESSAGE = 240  # characters of an exception message worth printing
# Frames of these folders (the standard library, installed packages) are not the candidate's code.
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))  # the checkers' own frames
_LIBRARY_DIRS = tuple({sysconfig.get_path(name) for name in ("stdlib", "platstdlib", "purelib", "platlib")})


# ----------------------------------------------------------------------------------------------
# The machinery shared by every checker
# ----------------------------------------------------------------------------------------------


class _Mismatch(Exception):
    """A case failed: ``lines`` say what differs, ``hint`` what to look at."""

    def __init__(self, *lines: str, hint: str = ""):
        super().__init__(lines[0] if lines else "")
        self.lines, self.hint = list(lines), hint


class _CandidateError(Exception):
    """The candidate itself raised ``error``."""

    def __init__(self, error: Exception):
        super().__init__(str(error))
        self.error = error


@dataclass
class _Case:
    label: str  # what the case feeds the candidate, in words
    run: Callable[[], None]  # raises _Mismatch or _CandidateError on failure
    error_hint: str = ""  # the usual reason for an exception in this case


class _ForbiddenCall(Exception):
    """The candidate called a function its exercise rules out (raised by the patch of ``_forbid``)."""


@contextmanager
def _forbid(rule: str, *targets: tuple[object, str]) -> Iterator[None]:
    """Inside the block, calling ``owner.name`` for any ``(owner, name)`` of ``targets`` raises
    ``_ForbiddenCall`` naming ``rule`` (the exercise's constraint); the originals come back afterwards."""
    originals = [(owner, name, getattr(owner, name)) for owner, name in targets]

    def refuse(label: str) -> Callable:
        def refused(*args, **kwargs):
            raise _ForbiddenCall(f"your code called {label}, which this exercise rules out: {rule}")
        return refused

    try:
        for owner, name, _ in originals:
            owner_name = getattr(owner, "__name__", type(owner).__name__)
            setattr(owner, name, refuse(f"{owner_name}.{name}"))
        yield
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)


class _TimeUp(BaseException):
    """A case ran past its time limit (raised by the alarm in ``_time_limit``)."""


def _call(fn: Callable, *args, **kwargs):
    """Call the candidate; wrap anything it raises so the report can tell it from a checker bug."""
    try:
        return fn(*args, **kwargs)
    except SystemExit as err:  # exit() or sys.exit() in the candidate must not end the kernel
        raise _CandidateError(RuntimeError(f"your code called exit({err.code!r})")) from None
    except Exception as err:  # noqa: BLE001 - every error of the candidate is reported, none escapes
        raise _CandidateError(err) from None


CASE_SECONDS = 20.0  # one case of any checker takes well under a second with a correct candidate


@contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Raise ``_TimeUp`` inside the block after ``seconds`` (main thread on Unix; elsewhere no limit)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def alarm(signum, frame):
        raise _TimeUp

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _where(error: BaseException) -> str:
    """The last line of the candidate's code that ran before ``error`` (checker frames skipped)."""
    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if not f.filename.startswith((_PACKAGE_DIR, *_LIBRARY_DIRS))]
    if not frames or not frames[-1].line:
        return ""
    frame = frames[-1]
    return f"in {frame.name}(): {frame.line.strip()}"


def _message(error: BaseException) -> str:
    text = " ".join(str(error).split())
    if len(text) > _MAX_MESSAGE:
        text = text[: _MAX_MESSAGE - 1] + "…"
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


@contextmanager
def _rng_preserved() -> Iterator[None]:
    """Candidates may draw random numbers: give PyTorch, NumPy and Python their states back afterwards."""
    python_state, numpy_state = random.getstate(), np.random.get_state()
    try:
        with torch.random.fork_rng(devices=[]):
            yield
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)


def _run_cases(name: str, cases: list[_Case], notes: tuple[str, ...] = ()) -> bool:
    """Run ``cases`` in order, print the first failure (or one success line), return whether all passed."""
    with _rng_preserved():
        for number, case in enumerate(cases, 1):
            try:
                with _time_limit(CASE_SECONDS):
                    case.run()
                continue
            except _TimeUp:
                lines = [f"your code did not return within {CASE_SECONDS:.0f} seconds"]
                hint = "look for a loop whose condition never becomes false (a while loop, a recursion)"
            except _Mismatch as mismatch:
                lines, hint = mismatch.lines, mismatch.hint
            except _CandidateError as raised:
                error = raised.error
                if isinstance(error, _ForbiddenCall):
                    _print(f"{FAIL_MARK} {name}: case {number} of {len(cases)} failed — {case.label}",
                           f"   {error}")
                    return False
                if isinstance(error, NotImplementedError):
                    _print(f"{FAIL_MARK} {name}: not implemented yet ({_message(error)}).",
                           "   Write the body of your function, run its cell, then run this check again.")
                    return False
                lines = [f"your code raised {_message(error)}"]
                where = _where(error)
                if where:
                    lines.append(where)
                hint = case.error_hint
            except Exception as error:  # noqa: BLE001 - the result could not even be inspected
                lines = [f"your result could not be checked: {_message(error)}"]
                hint = "return what the exercise asks for: compare the type and shape you return with its instructions"
            header = f"{FAIL_MARK} {name}: case {number} of {len(cases)} failed — {case.label}"
            _print(header, *(f"   {line}" for line in lines), *([f"   hint: {hint}"] if hint else []))
            return False
    _print(*notes, f"{PASS_MARK} {name}: all {len(cases)} cases passed.")
    return True


def _print(*lines: str) -> None:
    print("\n".join(lines))


def _describe(t) -> str:
    if t is None:
        return "None"
    if isinstance(t, Tensor):
        return f"shape {tuple(t.shape)}, dtype {t.dtype}"
    return f"a {type(t).__name__}"


def _require_tensor(got, expected: Tensor, what: str = "result", dtype: bool = True,
                    shape_hint: str = "", dtype_hint: str = "") -> Tensor:
    """``got`` as a detached tensor with ``expected``'s shape (and dtype), else a _Mismatch."""
    if not isinstance(got, Tensor):
        raise _Mismatch(f"expected {what}: a Tensor, {_describe(expected)}", f"got:      {_describe(got)}",
                        hint=f"return a torch.Tensor for the {what}")
    if got.shape != expected.shape:
        raise _Mismatch(f"expected {what}: {_describe(expected)}", f"got:      {_describe(got)}",
                        hint=shape_hint or "compare the shape you return with the shape asked for")
    if dtype and got.dtype != expected.dtype:
        raise _Mismatch(f"expected {what}: {_describe(expected)}", f"got:      {_describe(got)}",
                        hint=dtype_hint or f"convert the {what} with .to({expected.dtype})")
    return got.detach().cpu()


def _max_difference(a: Tensor, b: Tensor) -> float:
    diff = (a.double() - b.double()).abs()
    diff = torch.where(torch.isnan(diff) & torch.isnan(a.double()) & torch.isnan(b.double()), 0.0, diff)
    diff = torch.nan_to_num(diff, nan=math.inf)
    return float(diff.max()) if diff.numel() else 0.0


def _close(a: Tensor, b: Tensor, atol: float, rtol: float) -> bool:
    return bool(torch.allclose(a.double(), b.double(), atol=atol, rtol=rtol, equal_nan=True))


def _compare_values(got: Tensor, expected: Tensor, atol: float, rtol: float,
                    known_mistakes: list[tuple[Tensor, str]], default_hint: str, what: str = "result") -> None:
    """Raise a _Mismatch unless ``got`` equals ``expected``; name the mistake ``got`` matches, if any."""
    if _close(got, expected, atol, rtol):
        return
    hint = default_hint
    for wrong, mistake_hint in known_mistakes:
        if wrong.shape == got.shape and _close(got, wrong, max(atol, 1e-4), max(rtol, 1e-4)):
            hint = mistake_hint
            break
    if torch.isnan(got).any() and not torch.isnan(expected).any():
        nan_note = f", {int(torch.isnan(got).sum())} NaN values"
    else:
        nan_note = ""
    raise _Mismatch(f"{what}: right shape and dtype ({tuple(got.shape)}, {got.dtype}) but wrong values",
                    f"largest difference from the expected values: {_max_difference(got, expected):.3g}{nan_note}",
                    hint=hint)


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _python_loops(fn) -> bool | None:
    """Whether ``fn``'s source has a Python loop (``for``, ``while`` or a comprehension); None when its
    source cannot be read (a builtin, a lambda typed at a prompt without a file)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return None
    loops = (ast.For, ast.While, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
    return any(isinstance(node, loops) for node in ast.walk(tree))


def _short(value, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


