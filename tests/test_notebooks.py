"""Every chapter is a pair: the notebook readers open and its jupytext text twin, the reviewed source.

These tests fail when the two drift apart, or when a committed notebook's outputs are not from one fresh
top-to-bottom run (cells executed in order, none skipped).
"""

import re
from pathlib import Path

import pytest

jupytext = pytest.importorskip("jupytext", reason="the notebook checks need jupytext (pip install jupytext)")

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
TWINS = sorted((ROOT / "notebooks" / "text").glob("*.py"))


def _cells(notebook):
    return [(c.cell_type, c.source.strip(), sorted(c.metadata.get("tags", []))) for c in notebook.cells]


def test_every_notebook_has_a_twin_and_every_twin_a_notebook():
    assert {p.stem for p in NOTEBOOKS} == {p.stem for p in TWINS}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_matches_its_text_twin(path):
    notebook = jupytext.read(path)
    twin = jupytext.read(path.parent / "text" / f"{path.stem}.py")
    assert _cells(notebook) == _cells(twin), (
        f"{path.name} and text/{path.stem}.py differ: edit the twin, then re-run the chapter "
        "(make notebooks) and commit both"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_outputs_come_from_one_top_to_bottom_run(path):
    notebook = jupytext.read(path)
    counts = [c.execution_count for c in notebook.cells if c.cell_type == "code" and c.source.strip()]
    assert counts == list(range(1, len(counts) + 1)), (
        f"{path.name}: execution counts {counts} are not 1..{len(counts)}: re-run the chapter top to bottom"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_outputs_name_no_machine_paths(path):
    """Committed outputs travel to every reader: no home folders, checkouts or temporary paths in them."""
    notebook = jupytext.read(path)
    texts = [str(output) for cell in notebook.cells if cell.cell_type == "code" for output in cell.get("outputs", [])]
    leaks = sorted({m for text in texts for m in re.findall(r"(?:/root|/home/\w+|/Users/\w+|/tmp)/[\w./-]*", text)})
    assert not leaks, f"{path.name} prints machine paths {leaks[:3]}: print paths relative to the cache or data folder"


PROGRESS_BAR = re.compile(r"\d+%\|")  # tqdm's text: "  0%|          | 0/3000"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_outputs_keep_no_progress_bar(path):
    """A saved tqdm bar reads as it was drawn, "0%", wherever widgets do not run (GitHub, a
    notebook viewer, the PDF): committed runs find their models in the cache and draw none."""
    notebook = jupytext.read(path)
    bars = [i for i, cell in enumerate(notebook.cells) if cell.cell_type == "code"
            for output in cell.get("outputs", []) if PROGRESS_BAR.search(str(output))]
    assert not bars, (f"{path.name}: cells {bars[:5]} keep a progress bar: run the chapter with "
                      "its models in the cache (make book-models first), or progress=False")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_checker_fails_the_books_own_solution(path):
    """Every check cell runs the chapter's solution: a committed "❌" is the book telling its
    reader that its own answer is wrong (Chapter 15's ZeRO-1 did, beside an earlier cell's
    global ``optimizer``, which its checker took for the solution's)."""
    from gpt_from_scratch.exercises import FAIL_MARK

    notebook = jupytext.read(path)
    failed = [i for i, cell in enumerate(notebook.cells) if cell.cell_type == "code"
              for output in cell.get("outputs", []) if FAIL_MARK in str(output)]
    assert not failed, (f"{path.name}: cells {failed[:5]} print {FAIL_MARK}: a checker fails "
                        "the chapter's own solution; fix the checker or the solution and "
                        "re-execute the chapter")


MAX_CODE_LINE = 92  # characters: the rendered page clips wider code (make browser-test measures it)


@pytest.mark.parametrize("path", TWINS, ids=lambda p: p.stem)
def test_code_lines_fit_the_rendered_page(path):
    code = [line for cell in jupytext.read(path).cells if cell.cell_type == "code"
            for line in cell.source.splitlines()]
    wide = [line for line in code if len(line) > MAX_CODE_LINE]
    assert not wide, f"{path.name}: {len(wide)} code lines over {MAX_CODE_LINE} characters, e.g. {wide[0]!r}"
