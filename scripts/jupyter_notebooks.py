"""Write every chapter's Jupyter and Colab edition from the committed, executed chapters.

    python scripts/jupyter_notebooks.py           # notebooks/*.ipynb -> notebooks/jupyter/
    python scripts/jupyter_notebooks.py --check   # exit 1 when one is missing, stale or old

The chapters' MyST (cross-references, citations, admonitions, dropdown answers, figure
captions) renders only in the book; Jupyter and Colab show it as raw text. Each edition is
the chapter with its Markdown rewritten by ``scripts/jupyter_markdown.py`` and its outputs
as committed (nothing is executed): the hidden test cells (``remove-cell``) are dropped; the
source of ``remove-input`` and ``hide-input`` cells (generated prose, quizzes, exercise
solutions) is hidden twice over: collapsed with ``jupyter.source_hidden``, which JupyterLab
honours, and made a Colab form (a first line ``#@title <what it is>`` and the metadata
``cellView: "form"``), which Colab shows as its title alone, the code behind "Show code";
Colab ignores ``source_hidden``. A figure's numbered caption follows it. A live model (an
HTML element that book/_static/live-model.js runs in the book) becomes the sentence that
says where it runs, as in the PDF (book/_ext/live_model.py).

The editions are committed, in ``notebooks/jupyter/``: Colab opens a notebook from GitHub
by its path at a git ref, so the book's Colab button (book/_ext/jupyter_launch.py) and the
README point there, at the release's tag (``scripts/colab_setup.py``'s ``colab_url``).
``make test`` checks that they match the chapters (tests/test_jupyter_notebooks.py);
``make notebooks`` and ``make jupyter`` rewrite them. An
edition whose chapter is gone is deleted; any other notebook in the folder (a reader's copy,
JupyterLab's "Duplicate") is named and left as it is.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from gpt_from_scratch.utils import atomic_path  # noqa: E402
from scripts import colab_setup  # noqa: E402
from scripts.jupyter_markdown import BookIndex, Converter  # noqa: E402
from live_model import ELEMENT, sentence  # noqa: E402  (book/_ext, on the path above)

CHAPTERS = ROOT / "notebooks"
EDITIONS = CHAPTERS / "jupyter"
HIDDEN_SOURCE = {"remove-input", "hide-input"}
# A hidden cell's title in Colab, by the first of its tags found here; any other hidden cell
# writes text from the chapter's results (the book shows only that text).
COLAB_TITLES = {"solution": "Solution", "quiz": "Quiz"}
COLAB_TITLE_OTHERWISE = "Text written from this run's results"


def colab_form(source: str, tags: set[str]) -> str:
    """``source`` as a Colab form: its title line first, the code unchanged below it."""
    title = next((COLAB_TITLES[tag] for tag in COLAB_TITLES if tag in tags),
                 COLAB_TITLE_OTHERWISE)
    return f'#@title {title} {{ display-mode: "form" }}\n{source}'


def chapters() -> list[Path]:
    return sorted(CHAPTERS.glob("*.ipynb"))


def colab_url(chapter: str) -> str:
    """Where Colab opens a chapter's edition (``chapter``: "06_training"): at the release's
    tag, whose set-up cell installs that release (scripts/colab_setup.py)."""
    return colab_setup.colab_url(chapter)


def edition(chapter: Path, index: BookIndex) -> nbformat.NotebookNode:
    """The chapter as Jupyter and Colab render it (see the module's docstring)."""
    nb = nbformat.read(chapter, as_version=4)
    page = f"notebooks/{chapter.stem}"
    convert = Converter(index, page)
    cells = []
    for cell in nb.cells:
        tags = set(cell.metadata.get("tags", []))
        if "remove-cell" in tags:
            continue
        cell = copy.deepcopy(cell)
        cells.append(cell)
        if cell.cell_type == "markdown":
            convert.attachments = {}
            cell.source = ELEMENT.sub(lambda element: sentence(page), cell.source)
            cell.source = convert.markdown(cell.source)
            if convert.attachments:
                cell.attachments = convert.attachments
            if len(cells) == 1 and page in index.pages:  # under the title: the book's page
                title, _, rest = cell.source.partition("\n")
                cell.source = (f"{title}\n\n*[Read this chapter in the rendered book]"
                               f"({index.url(index.pages[page])}); this notebook is its "
                               f"Jupyter and Colab edition.*\n{rest}")
        if cell.cell_type != "code":
            continue
        if tags & HIDDEN_SOURCE:
            cell.metadata["jupyter"] = {"source_hidden": True}
            cell.metadata["cellView"] = "form"
            cell.source = colab_form(cell.source, tags)
        figure = cell.metadata.get("mystnb", {}).get("figure")
        if figure:
            caption = nbformat.v4.new_markdown_cell(convert.caption_cell(figure))
            caption.id = f"{cell.id}-caption"
            cells.append(caption)
    nb.cells = cells
    nb.metadata.pop("jupytext", None)
    nb.metadata["gpt_from_scratch"] = {"written_by": "scripts/jupyter_notebooks.py",
                                       "from": f"notebooks/{chapter.name}",
                                       "edit": f"notebooks/text/{chapter.stem}.py"}
    return nb


def is_edition(path: Path) -> bool:
    """Whether ``path`` is the edition this script wrote for the chapter of the same name.

    JupyterLab's "Duplicate" copies the metadata but not the name: "06_training-Copy1.ipynb"
    says it is from notebooks/06_training.ipynb, so it is a reader's notebook.
    """
    try:
        written = nbformat.read(path, as_version=4).metadata.get("gpt_from_scratch", {})
    except (OSError, ValueError):  # not a notebook nbformat reads: not one of ours
        return False
    return (written.get("written_by") == "scripts/jupyter_notebooks.py"
            and written.get("from") == f"notebooks/{path.name}")


def leftovers(wanted: set[Path]) -> tuple[list[Path], list[Path]]:
    """The notebooks of ``EDITIONS`` that are not ``wanted``: ``(stale, kept)``, the
    editions of chapters that are gone (to delete) and every other notebook (never
    touched)."""
    extra = sorted(set(EDITIONS.glob("*.ipynb")) - wanted)
    stale = [path for path in extra if is_edition(path)]
    return stale, [path for path in extra if path not in stale]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="report drift, write nothing")
    args = parser.parse_args(argv)
    index = BookIndex.read()
    wanted = {EDITIONS / chapter.name: nbformat.writes(edition(chapter, index)) + "\n"
              for chapter in chapters()}  # the text nbformat.write writes
    stale, kept = leftovers(set(wanted))
    for path in kept:
        print(f"{path.relative_to(ROOT)}: not an edition of a chapter (a copy of yours?), "
              "left as it is; keep your notebooks outside notebooks/jupyter/")
    drifted = [path for path, text in wanted.items()
               if not path.exists() or path.read_text() != text]
    if args.check:
        for path in drifted:
            print(f"{path.relative_to(ROOT)}: differs from its chapter; run "
                  "python scripts/jupyter_notebooks.py (make jupyter)")
        for path in stale:
            print(f"{path.relative_to(ROOT)}: no chapter notebooks/{path.name}; delete it")
        return 1 if drifted or stale else 0
    for path in drifted:
        with atomic_path(path) as tmp:
            tmp.write_text(wanted[path])
        print(f"{path.relative_to(ROOT)}: written")
    for path in stale:
        path.unlink()
        print(f"{path.relative_to(ROOT)}: deleted (its chapter is gone)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
