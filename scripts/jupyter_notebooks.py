"""Write every chapter's Jupyter and Colab edition, from the committed executed chapter notebooks.

    python scripts/jupyter_notebooks.py           # notebooks/*.ipynb -> notebooks/jupyter/*.ipynb
    python scripts/jupyter_notebooks.py --check   # exit 1 when one is missing, stale or out of date

The chapters' MyST (cross-references, citations, admonitions, dropdown answers, figure captions)
renders only in the book; Jupyter and Colab show it as raw text. Each edition is the chapter with
its Markdown rewritten by ``scripts/jupyter_markdown.py`` and its outputs as committed (nothing is
executed): hidden test cells (``remove-cell``) are dropped; the source of ``remove-input`` and
``hide-input`` cells (generated prose, quizzes, exercise solutions) is collapsed with
``jupyter.source_hidden``, which JupyterLab and Colab honour; a figure's caption follows it.

The editions are committed, in ``notebooks/jupyter/``: Colab opens a notebook from GitHub by its
path on a branch, so the book's Colab button and the README point there. ``make test`` checks that
they match the chapters (tests/test_jupyter_notebooks.py); ``make notebooks`` rewrites them.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from gpt_from_scratch.utils import atomic_path  # noqa: E402
from scripts.jupyter_markdown import BookIndex, Converter, glue_outputs  # noqa: E402

CHAPTERS = ROOT / "notebooks"
EDITIONS = CHAPTERS / "jupyter"
HIDDEN_SOURCE = {"remove-input", "hide-input"}


def chapters() -> list[Path]:
    return sorted(CHAPTERS.glob("*.ipynb"))


def colab_url(chapter: str) -> str:
    """Where Colab opens a chapter's edition (``chapter``: "06_training"), from ``_config.yml``
    as the book's Colab button (book/_ext/jupyter_launch.py)."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    repository = config["repository"]["url"].rstrip("/").removeprefix("https://github.com/")
    return (f"{config['launch_buttons']['colab_url'].rstrip('/')}/github/{repository}/blob/"
            f"{config['repository'].get('branch', 'main')}/notebooks/jupyter/{chapter}.ipynb")


def edition(chapter: Path, index: BookIndex) -> nbformat.NotebookNode:
    """The chapter as Jupyter and Colab render it (see the module's docstring)."""
    nb = nbformat.read(chapter, as_version=4)
    page = f"notebooks/{chapter.stem}"
    convert = Converter(index, page, glue_outputs(nb.cells))
    cells = []
    for cell in nb.cells:
        tags = set(cell.metadata.get("tags", []))
        if "remove-cell" in tags:
            continue
        cell = copy.deepcopy(cell)
        if cell.cell_type == "markdown":
            convert.attachments = {}
            cell.source = convert.markdown(cell.source)
            if convert.attachments:
                cell.attachments = convert.attachments
            if not cells and page in index.pages:  # under the title: the rendered chapter
                title, _, rest = cell.source.partition("\n")
                cell.source = (f"{title}\n\n*[Read this chapter in the rendered book]"
                               f"({index.url(index.pages[page])}); this notebook is its Jupyter "
                               f"and Colab edition.*\n{rest}")
        cells.append(cell)
        if cell.cell_type != "code":
            continue
        if tags & HIDDEN_SOURCE:
            cell.metadata["jupyter"] = {"source_hidden": True}
        figure = cell.metadata.get("mystnb", {}).get("figure")
        if figure:
            caption = nbformat.v4.new_markdown_cell(convert.caption_cell(figure))
            caption.id = f"{cell.id}-caption"
            cells.append(caption)
    nb.cells = cells
    nb.metadata.pop("jupytext", None)
    nb.metadata["gpt_from_scratch"] = {
        "written_by": "scripts/jupyter_notebooks.py",
        "from": f"notebooks/{chapter.name}",
        "edit": f"notebooks/text/{chapter.stem}.py"}
    return nb


def text(nb: nbformat.NotebookNode) -> str:
    return nbformat.writes(nb) + "\n"  # as nbformat.write writes it


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="report drift instead of writing")
    args = parser.parse_args(argv)
    index = BookIndex.read()
    wanted = {EDITIONS / chapter.name: text(edition(chapter, index)) for chapter in chapters()}
    stale = sorted(set(EDITIONS.glob("*.ipynb")) - set(wanted))
    drifted = [p for p, new in wanted.items() if not p.exists() or p.read_text() != new]
    if args.check:
        for path in drifted:
            print(f"{path.relative_to(ROOT)}: differs from its chapter; "
                  "run python scripts/jupyter_notebooks.py (make jupyter)")
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
