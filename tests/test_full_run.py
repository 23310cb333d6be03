"""``FULL_RUN = True``, rehearsed on the CPU: the branches a reader with a GPU switches on run top to bottom.

A chapter's ``FULL_RUN`` branches run only where a reader sets ``FULL_RUN = True``, usually on a GPU in
Colab, so no other test executes them. This one runs a chapter with ``FULL_RUN = True`` on the CPU, from a
copy of its text twin in which

- every ``a if FULL_RUN else b`` keeps the CPU's ``b`` (the GPU's sizes would take hours on 2 cores), and
- a first cell shrinks the GPU-sized recipes: ``RECIPES`` and ``OFFLINE_RECIPES`` ending in ``-full``, and
  the ladder's scaled-up rung;

so what runs is every ``if FULL_RUN:`` block and every ``full=FULL_RUN`` call, in minutes. (It found
that Chapter 9's backbone was left in training mode, dropout on, by an estimate through a wrapper:
invisible on the CPU, where the offline model has no dropout.) Cells that need CUDA
(``torch.cuda.is_available() and FULL_RUN``) and the sizes themselves still need a GPU.

``make test`` skips it; ``make test-full-run`` runs it (CI does), ``FULL_RUN_CHAPTERS="07"`` for one.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

jupytext = pytest.importorskip("jupytext", reason="the rehearsal needs jupytext (pip install jupytext)")
nbclient = pytest.importorskip("nbclient", reason="the rehearsal needs nbclient (pip install nbclient)")
nbformat = pytest.importorskip("nbformat", reason="the rehearsal needs nbformat (pip install nbformat)")

ROOT = Path(__file__).resolve().parent.parent
FULL_RUN_ENV = "GPT_FROM_SCRATCH_TEST_FULL_RUN"  # chapter numbers to run, e.g. "06 07 09"; unset: skip
SWITCH = re.compile(r"^FULL_RUN = False\b", re.MULTILINE)
ATOM = r'(\([^()]*\)|[\w.]+(?:\(\))?|\{\}|"[^"]*")'  # 8, range(3), (64, 2, 4), time.perf_counter, {}, "cpu"
CHOICE = re.compile(ATOM + r" if FULL_RUN else " + ATOM)
SHRINK = '''# %%
import dataclasses

from gpt_from_scratch.book import ladder, offline_model, recipes

TINY_MODEL = dict(n_layers=1, n_heads=2, d_model=32, d_ff=64, context_length=64, dropout=0.1)
TINY_TRAIN = dict(max_iters=12, batch_size=4, eval_interval=6, eval_iters=2, warmup_iters=2)
for table in (recipes.RECIPES, offline_model.OFFLINE_RECIPES):
    for name in [name for name in table if name.endswith("-full")]:
        recipe = table[name]
        table[name] = dataclasses.replace(recipe, model=recipe.model | TINY_MODEL,
                                          train=recipe.train | TINY_TRAIN)
ladder.FINAL_CONFIG = dataclasses.replace(ladder.FINAL_CONFIG, batch_size=4, block_size=16,
                                          d_model=48, max_iters=16, eval_iters=2)

'''


def chapters_with_full_run() -> list[str]:
    return sorted(p.stem for p in (ROOT / "notebooks" / "text").glob("*.py") if SWITCH.search(p.read_text()))


def rehearsal_source(text: str) -> str:
    """The twin with FULL_RUN switched on, the CPU's sizes kept and the shrinking cell first."""
    text, switched = SWITCH.subn("FULL_RUN = True", text)
    assert switched == 1, f"expected one `FULL_RUN = False` line, found {switched}"
    text = CHOICE.sub(r"\2", text)
    assert "if FULL_RUN else" not in text, (
        "an `a if FULL_RUN else b` this test cannot parse: write a and b as names, calls, numbers, strings "
        "or parenthesized tuples, or teach ATOM the new form")
    first_cell = text.index("# %%")
    return text[:first_cell] + SHRINK + text[first_cell:]


def test_the_rehearsal_keeps_the_cpu_sizes_and_switches_full_run_on():
    source = rehearsal_source('"""Doc."""\n# %%\nFULL_RUN = False  # a comment\n'
                              'STEPS = 5000 if FULL_RUN else 500\nD, L = (192, 4) if FULL_RUN else (64, 2)\n'
                              'device = default_device() if FULL_RUN else "cpu"\nif FULL_RUN:\n    pass\n')
    assert "FULL_RUN = True  # a comment" in source and "STEPS = 500\n" in source
    assert "D, L = (64, 2)" in source and 'device = "cpu"' in source and "if FULL_RUN:" in source
    assert source.index("TINY_MODEL") < source.index("FULL_RUN = True")
    assert chapters_with_full_run()  # the chapters still have the switch this test looks for


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """A model cache of the rehearsal's own, where its tiny "-full" models go (never the reader's), with
    links to what the reader's cache already holds (token files, the book's CPU-sized models): those
    are not trained again. Chapters 7 and 9 reuse the models Chapter 6 trains."""
    from gpt_from_scratch.data import cache_dir

    own, reader = tmp_path_factory.mktemp("cache"), cache_dir()
    (own / "models").mkdir()
    for entry in reader.glob("*") if reader.is_dir() else []:
        if entry.name != "models":
            (own / entry.name).symlink_to(entry)
    for model in (reader / "models").glob("*"):  # keyed: a tiny "-full" recipe has keys of its own
        if model.is_dir():
            (own / "models" / model.name).symlink_to(model)
    return own


@pytest.mark.parametrize("stem", chapters_with_full_run())
def test_chapter_runs_top_to_bottom_with_full_run_on(stem, cache, tmp_path, monkeypatch):
    wanted = os.environ.get(FULL_RUN_ENV)
    if wanted is None:
        pytest.skip(f"set {FULL_RUN_ENV}='06 07' (or run `make test-full-run`): minutes per chapter")
    if stem.split("_")[0] not in wanted.split():
        pytest.skip(f"{stem} is not in {FULL_RUN_ENV}={wanted!r}")
    monkeypatch.setenv("GPT_FROM_SCRATCH_CACHE", str(cache))  # not the reader's: "-full" models, tiny
    nb = jupytext.reads(rehearsal_source((ROOT / "notebooks" / "text" / f"{stem}.py").read_text()),
                        fmt="py:percent")
    client = nbclient.NotebookClient(nb, timeout=900, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    try:
        client.execute()
    except nbclient.exceptions.CellExecutionError as err:
        pytest.fail(f"{stem} with FULL_RUN = True stopped:\n{str(err)[-3000:]}", pytrace=False)
