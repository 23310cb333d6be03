"""The book's model cache (``book.model_cache``): every input of the key changes the key, nothing
else does, a damaged or foreign entry is retrained and never loaded, old entries go.

Two processes that train one model at once make one entry:
``tests/test_train.py::test_two_processes_that_ask_for_a_book_model_at_once_train_it_once``.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time

import numpy as np
import pytest
import torch

from gpt_from_scratch.book import model_cache, recipes
from gpt_from_scratch.book.model_cache import (
    PACKAGE,
    model_entry,
    source_closure,
    source_digest,
)
from gpt_from_scratch.checkpoint import load_checkpoint
from gpt_from_scratch.model import GPTConfig

TRAINER = "gpt_from_scratch.book.recipes"
SETTINGS = {"steps": 3, "lr": 1e-3}


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPT_FROM_SCRATCH_CACHE", str(tmp_path))


def digest(**changes) -> str:
    """The key digest of a made-up model, with ``changes`` to its arguments."""
    args = dict(name="m", settings=SETTINGS, trainer=TRAINER) | changes
    return model_entry(**args).digest


# ------------------------------------------------------------------ the key
def test_each_argument_of_the_key_changes_it():
    parent = model_entry("p", {}, TRAINER)
    other_parent = model_entry("p", {"a": 1}, TRAINER)
    digests = [digest(), digest(name="n"), digest(settings=SETTINGS | {"lr": 2e-3}),
               digest(trainer="gpt_from_scratch.book.verifier"), digest(parents=(parent,)),
               digest(parents=(other_parent,)), digest(device="meta")]
    assert len(set(digests)) == len(digests), digests
    assert digest() == digest(settings=dict(reversed(SETTINGS.items())))  # order is not an input


@pytest.mark.parametrize("patch", [
    lambda mp: mp.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "DEFAULT"),
    lambda mp: mp.setattr(model_cache, "_processor", lambda: "another CPU"),
    lambda mp: mp.setattr(model_cache.platform, "machine", lambda: "aarch64"),
    lambda mp: mp.setattr(model_cache.platform, "python_version", lambda: "3.99.0"),
    lambda mp: mp.setattr(model_cache.metadata, "version", lambda name: "0.0.1"),
    lambda mp: mp.setattr(model_cache, "source_digest", lambda module: "0" * 64),
], ids=["kernels", "processor", "machine", "python", "library versions", "code"])
def test_each_input_of_the_machine_changes_the_key(monkeypatch, patch):
    before = digest()
    patch(monkeypatch)
    assert digest() != before


def test_the_thread_count_changes_the_key():
    threads = torch.get_num_threads()
    before = digest()
    try:
        torch.set_num_threads(threads + 1)
        assert digest() != before
    finally:
        torch.set_num_threads(threads)
    assert digest() == before


def test_editing_code_the_trainer_imports_changes_its_digest_and_other_code_does_not(tmp_path):
    copies = [tmp_path / "a" / PACKAGE.name, tmp_path / "b" / PACKAGE.name]
    for copy in copies:  # two clones of one commit
        shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert source_digest("book.recipes", copies[0]) == source_digest("book.recipes", copies[1])
    before = {m: source_digest(m, copies[0]) for m in ("book.recipes", "book.verifier")}
    with open(copies[0] / "train.py", "a", encoding="utf-8") as f:  # recipes imports train
        f.write("\nEDITED = 1\n")
    after = {m: source_digest(m, copies[0]) for m in ("book.recipes", "book.verifier")}
    assert after["book.recipes"] != before["book.recipes"]
    assert after["book.verifier"] != before["book.verifier"]  # it trains from recipes' models
    with open(copies[0] / "book" / "verifier_prose.py", "a", encoding="utf-8") as f:
        f.write("\nPROSE_NO_TRAINER_IMPORTS = 1\n")
    assert source_digest("book.recipes", copies[0]) == after["book.recipes"]


def test_docstrings_and_comments_are_not_code_but_every_statement_is(tmp_path):
    copy = tmp_path / PACKAGE.name
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    before = source_digest("book.recipes", copy)
    train = copy / "train.py"
    text = train.read_text(encoding="utf-8")
    first_def = text.index('"""', text.index("\ndef ")) + 3  # inside a function's docstring
    for edit in (lambda t: t.replace('"""', '"""An edited docstring. ', 1),  # the module's
                 lambda t: t[:first_def] + "Edited. " + t[first_def:],
                 lambda t: t + "\n# a comment\n\n\n",
                 lambda t: t.replace("\ndef ", "\n# a comment on its own line\ndef ", 1)):
        train.write_text(edit(text), encoding="utf-8")
        assert source_digest("book.recipes", copy) == before
    for edit in (lambda t: t + "\nEDITED = 1\n",
                 lambda t: t + '\n"a string that is a statement, not a docstring"\n',
                 lambda t: t.replace("return history", "return None", 1)):
        train.write_text(edit(text), encoding="utf-8")
        assert edit(text) != text and source_digest("book.recipes", copy) != before
    train.write_text(text, encoding="utf-8")
    assert source_digest("book.recipes", copy) == before


def test_the_closure_follows_lazy_imports_and_packages():
    files = {p.relative_to(PACKAGE).as_posix() for p in source_closure("book.verifier")}
    assert {"__init__.py", "book/__init__.py", "book/verifier.py", "book/assistant_runs.py",
            "book/recipes.py", "grpo_train.py", "train.py", "model.py"} <= files
    assert "book/verifier_prose.py" not in files and "interp.py" not in files


@pytest.mark.parametrize("args, message", [
    (dict(settings={"lr": np.float32(1e-3)}), r"int\(x\) or float\(x\) for a NumPy number"),
    (dict(settings={"lr": float("nan")}), "never nan or inf"),
    (dict(trainer="recipes"), "is not a module of gpt_from_scratch"),
    (dict(name="a/b"), "must be a plain folder name"),
    (dict(name=""), "must be a plain folder name"),
])
def test_bad_arguments_are_refused_before_any_training(args, message):
    with pytest.raises(ValueError, match=message):
        digest(**args)


def test_an_unknown_module_is_named():
    with pytest.raises(ValueError, match=r"'book.nothing' is not a module of gpt_from_scratch"):
        source_closure("book.nothing")


# ------------------------------------------------------------------ entries
TINY = recipes.Recipe("char", dataclasses.asdict(GPTConfig(
    vocab_size=65, context_length=16, d_model=32, n_layers=1, n_heads=4, dropout=0.0)),
    dict(max_iters=2, batch_size=2, eval_interval=2, eval_iters=1, warmup_iters=1))


@pytest.fixture
def tiny_char(monkeypatch):
    monkeypatch.setitem(recipes.RECIPES, "shakespeare-char", TINY)
    return recipes.book_model_entry("shakespeare-char")


def saved_at(entry) -> int:
    return (entry.path / "checkpoint.json").stat().st_mtime_ns


@pytest.mark.parametrize("damage", ["truncate", "empty meta"])
def test_a_damaged_entry_is_retrained_never_loaded(tiny_char, damage):
    model, _ = recipes.book_model("shakespeare-char", progress=False)
    weights = tiny_char.path / "model.safetensors"
    if damage == "truncate":
        weights.write_bytes(weights.read_bytes()[:-100])
    else:
        (tiny_char.path / "checkpoint.json").write_text("")
    with pytest.warns(UserWarning, match="retraining shakespeare-char"):
        again, _ = recipes.book_model("shakespeare-char", progress=False)
    torch.testing.assert_close(again.state_dict(), model.state_dict(), rtol=0, atol=0)
    load_checkpoint(tiny_char.path)  # the entry is whole again


def test_an_entry_copied_under_another_key_is_not_used(tiny_char, monkeypatch):
    recipes.book_model("shakespeare-char", progress=False)
    monkeypatch.setitem(recipes.RECIPES, "shakespeare-char",
                        dataclasses.replace(TINY, train=TINY.train | {"max_iters": 3}))
    other = recipes.book_model_entry("shakespeare-char")
    assert other.path != tiny_char.path
    shutil.copytree(tiny_char.path, other.path)  # made from 2 steps, named for 3
    with pytest.warns(UserWarning, match="made from other inputs"):
        recipes.book_model("shakespeare-char", progress=False)
    assert load_checkpoint(other.path).extra["key"] == other.key


def test_a_second_process_reads_the_entry_without_training(tiny_char, monkeypatch):
    recipes.book_model("shakespeare-char", progress=False)
    stamp = saved_at(tiny_char)
    monkeypatch.setattr(recipes, "train", None)  # a second training would fail
    recipes.book_model("shakespeare-char", progress=False)
    assert saved_at(tiny_char) == stamp


def test_old_unused_entries_of_a_name_go_when_a_new_one_is_saved(tiny_char, monkeypatch):
    recipes.book_model("shakespeare-char", progress=False)
    models = tiny_char.path.parent
    for name, days in (("shakespeare-char-" + "a" * 16, 40), ("shakespeare-char-" + "b" * 16, 5),
                       ("shakespeare-char-full-" + "c" * 16, 40)):
        (models / name).mkdir()
        stamp = models / (name + ".used")
        stamp.touch()
        past = time.time() - days * 86400
        os.utime(stamp, (past, past))
    monkeypatch.setitem(recipes.RECIPES, "shakespeare-char",
                        dataclasses.replace(TINY, train=TINY.train | {"max_iters": 3}))
    recipes.book_model("shakespeare-char", progress=False)
    left = sorted(p.name for p in models.iterdir() if p.is_dir())
    assert ("shakespeare-char-" + "a" * 16) not in left  # 40 days unused: removed
    assert {"shakespeare-char-" + "b" * 16, "shakespeare-char-full-" + "c" * 16,
            tiny_char.path.name} <= set(left)  # recent, another name, the one just used
