"""Shared fixtures. Loaded once per test session; keep this file small."""

from __future__ import annotations

import pytest


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
