"""nbval, with a measured tolerance for the numbers that come out of training.

A compared cell (tag ``nbval-check-output``) whose metadata holds
``"tolerance": {"abs": 0.02, "rel": 0.0, "why": "..."}`` matches its committed output when the
text around its numbers is the same and every number is within ``abs + rel * |committed|`` of
the committed one; ``why`` states the measured spread that justifies the width
(``scripts/arithmetic_spread.py`` measures it). The spread is measured over the whole matrix,
PyTorch's AVX-512, AVX2 and portable kernels with 1, 2 and 4 threads, each model trained under
that arithmetic, and the width is at least 1.5 times the largest move in it: a thread count or a
kernel set not measured moves a number too. Every other cell is compared as nbval compares it.

Run side by side (pytest-xdist), the notebooks go longest first, by their committed run's cell
times (``pytest_collection_modifyitems``). The kernels read the chapters' own training calls
from a cache where each can be keyed exactly (``gpt_from_scratch.book.run_cache``), trained on
the first run of a machine and read on the next, except where a lesson times them (``TIMED``).

Why our own: nbval compares text exactly, and its sanitizers are regular expressions applied to
every cell alike, so a per-cell numeric tolerance needs this small wrapper around its comparison.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import nbval.plugin
import pytest

import gpt_from_scratch
from gpt_from_scratch.book.timing import cell_seconds

# nbval reads a cell's messages only once the cell has finished, and the kernel's message socket
# keeps about a thousand: past that, messages are dropped, the "idle" one too, and nbval fails
# with "Timeout of 5 seconds exceeded waiting for output". A progress bar redrawn every 0.1 s
# passes that in minutes of one-thread training (Chapter 6 under test-arithmetic failed so; a
# 60 s loop redrawn every 0.01 s fails alike). Redrawn every 5 s, a cell within the Makefile's
# cell limit (CELL_TIMEOUT, 1200 s) sends a few hundred.
os.environ.setdefault("TQDM_MININTERVAL", "5")  # the kernels nbval starts inherit it

# The kernels nbval starts read the chapters' training runs from the cache, where a call can be
# keyed exactly (gpt_from_scratch.book.run_cache; GPT_FROM_SCRATCH_RUN_CACHE=0 turns it off),
# except in the chapters whose lessons time their own training: those train every time.
ROOT = Path(gpt_from_scratch.__file__).resolve().parents[1]
STARTUP = ROOT / "scripts" / "nbval_startup.py"
TIMED = {"10_modern_llm.ipynb": "section 10.4 compares the step times of two models",
         "16_fast_inference.ipynb": "it says how long its draft model trained"}
_STARTUP_BEFORE = os.environ.get("PYTHONSTARTUP")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Before nbval starts a notebook's kernel (in its first cell's setup): the startup file
    that installs the run cache, or none for a chapter of ``TIMED``."""
    if item.path.name in TIMED or not STARTUP.is_file():
        os.environ.pop("PYTHONSTARTUP", None)
        if _STARTUP_BEFORE is not None:
            os.environ["PYTHONSTARTUP"] = _STARTUP_BEFORE
    else:
        os.environ["PYTHONSTARTUP"] = str(STARTUP)


NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
_compare = nbval.plugin.IPyNbCell.compare_outputs


def within(test: str, ref: str, tolerance: dict) -> str:
    """``test`` with each number that is within the tolerance of ``ref``'s replaced by ``ref``'s,
    where the two texts differ only in their numbers; else ``test`` unchanged (nbval reports it)."""
    if not isinstance(test, str) or not isinstance(ref, str):
        return test
    words = NUMBER.split(test)
    if words != NUMBER.split(ref):
        return test
    width = lambda r: tolerance.get("abs", 0.0) + tolerance.get("rel", 0.0) * abs(r)  # noqa: E731
    numbers = [r if abs(float(t) - float(r)) <= width(float(r)) else t
               for t, r in zip(NUMBER.findall(test), NUMBER.findall(ref))]
    return "".join(w + n for w, n in zip(words, numbers + [""]))


def _align(test, ref, tolerance: dict):
    """Apply ``within`` to every text of ``test``'s outputs, paired in order with ``ref``'s."""
    for t, r in zip(test, ref):
        if "text" in t and "text" in r:
            t["text"] = within(t["text"], r["text"], tolerance)
        for key, value in t.get("data", {}).items():
            if key in r.get("data", {}):
                t["data"][key] = within(value, r["data"][key], tolerance)
    return test


def compare_outputs(self, test, ref, skip_compare=None):
    tolerance = self.cell.metadata.get("tolerance")
    if tolerance:
        test = _align(test, ref, tolerance)
    return _compare(self, test, ref, skip_compare)


nbval.plugin.IPyNbCell.compare_outputs = compare_outputs


def pytest_collection_modifyitems(items):
    """The longest notebooks first, by their committed run: run side by side (pytest-xdist,
    ``-n 2 --dist loadfile --no-loadscope-reorder``), the workers then end at about the same time.
    Each notebook's cells keep their order."""
    seconds = {path: sum(cell_seconds(json.loads(path.read_text(encoding="utf-8"))).values())
               for path in {item.path for item in items}}
    items.sort(key=lambda item: -seconds[item.path])  # stable: a notebook's cells stay in order
