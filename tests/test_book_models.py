"""scripts/book_models.py: a model whose entries are all in the cache starts no process, and
the entries it computes are the ones the chapters' own calls key (GRPO's, which no library
function returns, against what ``grpo_model`` computes)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from gpt_from_scratch.book import verifier
from gpt_from_scratch.book.model_cache import META_FILE

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "book_models.py"


@pytest.fixture
def book_models(monkeypatch, tmp_path):
    monkeypatch.setenv("GPT_FROM_SCRATCH_CACHE", str(tmp_path))
    spec = importlib.util.spec_from_file_location("book_models", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "book_models", module)  # its dataclass looks itself up
    spec.loader.exec_module(module)
    return module


class Keyed(Exception):
    """Raised in place of training, once grpo_model has keyed its entry."""


def test_grpo_entries_are_the_ones_grpo_model_keys(book_models, monkeypatch):
    seen = []

    def model_entry(*args, **kwargs):
        seen.append(verifier_entry(*args, **kwargs))
        raise Keyed

    verifier_entry = verifier.model_entry
    monkeypatch.setattr(verifier, "model_entry", model_entry)
    for name in ("grpo-1", "grpo-collapse-2", "grpo-brake-0"):  # each kind of recipe
        model = book_models.MODELS[name]
        with pytest.raises(Keyed):
            exec(model.call, {})  # the call a process would run
        assert model.entries() == [seen[-1]], name


def test_a_model_is_trained_only_when_an_entry_is_missing(book_models, monkeypatch):
    """The last model alone lacks an entry: a main that started any other first fails."""
    started = []

    def popen(args, env):
        started.append(args[-1])
        sys.exit("no training")

    monkeypatch.setattr(book_models.subprocess, "Popen", popen)
    monkeypatch.setattr(book_models.torch, "set_num_threads", lambda n: None)  # as keyed
    names = list(book_models.MODELS)
    for name in names[:-1]:
        for entry in book_models.MODELS[name].entries():
            (entry.path / META_FILE).parent.mkdir(parents=True)
            (entry.path / META_FILE).write_text("{}")
    assert [book_models.in_cache(n) for n in names] == [True] * (len(names) - 1) + [False]
    with pytest.raises(SystemExit, match="no training"):
        book_models.main(["--jobs", "1"])
    assert started == [book_models.MODELS[names[-1]].call]
