"""Shared fixtures. Loaded once per test session; keep this file small."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def no_lesson_record(monkeypatch):
    """The lessons the tests judge are made up: keep them out of a run's record of the chapters'
    margins (``GPT_FROM_SCRATCH_LESSONS``, set for ``make test`` to measure them)."""
    monkeypatch.delenv("GPT_FROM_SCRATCH_LESSONS", raising=False)


@pytest.fixture(scope="session")
def corpus() -> str:
    """The whole Tiny Shakespeare text, verified (found through $GPT_FROM_SCRATCH_DATA or the cache)."""
    from gpt_from_scratch.data import load_tiny_shakespeare

    return load_tiny_shakespeare()


@pytest.fixture(scope="session")
def gpt2():
    """The package's offline GPT-2 encoding (a tiktoken ``Encoding``)."""
    from gpt_from_scratch.tokenizer import gpt2_encoding

    return gpt2_encoding()


@pytest.fixture(params=["cpu", "cuda"])
def device(request) -> str:
    """Each test that takes it runs on the CPU, and again on a GPU where one is available (skipped here
    otherwise): the GPU branches of ``train`` and ``generate`` (fused AdamW, pinned copies, CUDA graphs)."""
    if request.param == "cuda" and not torch.cuda.is_available():
        pytest.skip("no GPU here: the cuda case runs where torch.cuda.is_available()")
    return request.param


@pytest.fixture
def grading_sandbox():
    """The grader's sandbox starts here; else the test skips, or fails where the grader must
    be tested (tests/grading_class.py)."""
    from grading_class import require_sandbox

    require_sandbox()
