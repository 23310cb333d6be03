"""The chapters' Jupyter and Colab editions (notebooks/jupyter/, scripts/jupyter_notebooks.py): written
from the committed chapters, with no MyST left (Jupyter and Colab would show it as raw text), every
answer folded in <details>, the hidden test cells dropped and the hidden sources collapsed; and the
MyST rewrite itself (scripts/jupyter_markdown.py) on small examples of each construct.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from scripts import jupyter_notebooks  # noqa: E402
from scripts.jupyter_markdown import (MYST, BookIndex, Converter, Target,  # noqa: E402
                                      Unsupported, glue_outputs)

CHAPTERS = jupyter_notebooks.chapters()
MYST_LEFT = {
    "a role": re.compile(r"\{[a-z][\w:+-]*\}`"),
    "a target": re.compile(r"^\s*\([\w.:-]+\)=\s*$", re.MULTILINE),
    "a directive": re.compile(r"^\s*(```+|~~~+)\s*\{|^\s*:::", re.MULTILINE),
    "a directive option": re.compile(r"^\s*:(class|name|label|alt|width|align):", re.MULTILINE),
}


def myst_left(text: str) -> list[str]:
    return [f"{kind}: {m.group(0).strip()!r}" for kind, pattern in MYST_LEFT.items()
            for m in pattern.finditer(text)]


def markdown_texts(nb) -> list[str]:
    """Every Markdown the page shows: the Markdown cells and the Markdown outputs."""
    return [c.source for c in nb.cells if c.cell_type == "markdown"] + [
        output["data"]["text/markdown"] for c in nb.cells if c.cell_type == "code"
        for output in c.outputs if "text/markdown" in output.get("data", {})]


@pytest.fixture(scope="module")
def index() -> BookIndex:
    return BookIndex.read()


def test_every_chapter_has_an_edition_and_they_are_up_to_date():
    assert jupyter_notebooks.main(["--check"]) == 0, (
        "notebooks/jupyter/ differs from the chapters: run make jupyter and commit it")


def test_the_readme_opens_every_edition_in_colab():
    readme = (ROOT / "README.md").read_text()
    links = set(re.findall(r"https://colab\.research\.google\.com/\S+?\.ipynb", readme))
    wanted = {jupyter_notebooks.colab_url(chapter.stem) for chapter in CHAPTERS}
    assert links == wanted, (f"README.md's Colab links: missing {sorted(wanted - links)}, "
                             f"not an edition {sorted(links - wanted)}")


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_no_myst_left_and_answers_folded(chapter):
    source = nbformat.read(chapter, as_version=4)
    edition = nbformat.read(jupyter_notebooks.EDITIONS / chapter.name, as_version=4)
    left = [found for text in markdown_texts(edition) for found in myst_left(text)]
    assert not left, f"{chapter.name}'s Jupyter edition shows raw MyST: {left[:5]}"
    dropdowns = sum(token.info.startswith("{") and "dropdown" in token.content
                    for cell in source.cells if cell.cell_type == "markdown"
                    for token in MYST.parse(cell.source))
    folded = [c.source for c in edition.cells if c.cell_type == "markdown" and "<details>" in c.source]
    assert sum(text.count("<details>") for text in folded) == dropdowns, (
        f"{chapter.name}: {dropdowns} dropdowns in the chapter, {len(folded)} folded cells")
    for cell in (c for c in edition.cells if "answer" in c.metadata.get("tags", [])):
        assert cell.source.startswith("<details>") and cell.source.endswith("</details>"), (
            f"{chapter.name}: an answer is not folded in <details>: {cell.source[:80]!r}")


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_hidden_cells(chapter):
    edition = nbformat.read(jupyter_notebooks.EDITIONS / chapter.name, as_version=4)
    tags = [set(c.metadata.get("tags", [])) for c in edition.cells]
    assert not any("remove-cell" in t for t in tags), f"{chapter.name}: a hidden test cell shows"
    for cell, cell_tags in zip(edition.cells, tags):
        if cell_tags & {"remove-input", "hide-input"}:
            assert cell.metadata.get("jupyter", {}).get("source_hidden") is True, (
                f"{chapter.name}: the source of a {sorted(cell_tags)} cell is not collapsed")


def test_the_myst_check_finds_each_construct():
    planted = ("(ch-x)=\n# Title\nSee {ref}`ch-x` and {cite:p}`a`.\n"
               "```{admonition} Answer\n:class: dropdown\nYes.\n```\n:::{note}\nHi\n:::\n")
    kinds = {found.split(":")[0] for found in myst_left(planted)}
    assert kinds == set(MYST_LEFT), kinds
    assert myst_left("Plain `code`, $\\{x\\}$ and <details>text</details>.") == []


# ----------------------------------------------------------------------------------------------
# The rewrite, construct by construct, on a small made-up book
# ----------------------------------------------------------------------------------------------

SITE = "https://example.org/book/"


@pytest.fixture
def convert() -> Converter:
    pages = {"notebooks/06_training": Target("notebooks/06_training", "", "Training", "6"),
             "notebooks/07_generation": Target("notebooks/07_generation", "", "Generating", "7"),
             "book/notation": Target("book/notation", "", "Notation")}
    labels = {"ch-training": Target("notebooks/06_training", "ch-training", "Training", "6"),
              "sec-ladder": Target("notebooks/06_training", "sec-ladder", "The ladder", "6.4"),
              "fig-lr": Target("notebooks/06_training", "fig-lr", "Fig. 6.1", "6.1")}
    index = BookIndex(SITE, pages, labels, {"vaswani2017": "Vaswani et al., 2017", "k": "K, 2023b"})
    glued = glue_outputs([nbformat.v4.new_code_cell(outputs=[nbformat.v4.new_output(
        "display_data", {"application/papermill.record/text/plain": "0.12345",
                         "image/png": "iVBORw0KGgo="}, metadata={"scrapbook": {"name": "loss"}})])])
    return Converter(index, "notebooks/07_generation", glued)


def test_references_become_links_with_plain_text(convert):
    text = convert.markdown("(ch-generation)=\n# 7. Generating\n\nAs {ref}`ch-training` showed, "
                            "Chapter 6 ({ref}`ch-training`) and {ref}`sec-ladder`; "
                            "{numref}`fig-lr`, {numref}`Figure {number} <fig-lr>`, "
                            "{ref}`the loop <sec-ladder>`, {doc}`/book/notation`. `{ref}` stays.")
    url = f"{SITE}notebooks/06_training.html"
    assert text == (
        f"# 7. Generating\n\nAs [Chapter 6, *Training*]({url}#ch-training) showed, "
        f"Chapter 6 ([*Training*]({url}#ch-training)) and [Chapter 6, section 6.4]({url}#sec-ladder); "
        f"[Fig. 6.1]({url}#fig-lr), [Figure 6.1]({url}#fig-lr), [the loop]({url}#sec-ladder), "
        f"[Notation]({SITE}book/notation.html). `{{ref}}` stays.")


def test_a_citation_reads_as_a_name_where_it_is_one(convert):
    refs = f"{SITE}book/references.html#cite-vaswani2017"
    assert convert.markdown("Attention {cite}`vaswani2017`. {cite}`vaswani2017` found it, as "
                            "{cite}`vaswani2017` did; see {cite:p}`vaswani2017`.") == (
        f"Attention ([Vaswani et al., 2017]({refs})). [Vaswani et al. (2017)]({refs}) found it, "
        f"as [Vaswani et al. (2017)]({refs}) did; see ([Vaswani et al., 2017]({refs})).")


def test_citations_admonitions_and_dropdowns(convert):
    text = convert.markdown("As {cite}`vaswani2017,k` did.\n\n```{note}\nA {cite:t}`k` note.\n```\n\n"
                            "- item\n\n  :::{admonition} Answer\n  :class: dropdown\n  $x$ is 1.\n  :::\n")
    refs = f"{SITE}book/references.html"
    assert text == (
        f"As ([Vaswani et al., 2017]({refs}#cite-vaswani2017); [K, 2023b]({refs}#cite-k)) did.\n\n"
        f"> **Note**\n>\n> A [K (2023b)]({refs}#cite-k) note.\n\n"
        "- item\n\n  <details>\n  <summary><b>Answer</b></summary>\n\n  $x$ is 1.\n\n  </details>")


def test_figures_and_glue_become_what_they_show(convert):
    text = convert.markdown("Loss {glue:text}`loss:.2f`, raw {glue}`loss`.\n\n"
                            "```{glue:figure} loss\n:name: fig-loss\nThe loss.\n```\n\n"
                            "```{figure} /book/favicon.svg\n:alt: The icon\n:name: fig-icon\nThe icon.\n```")
    assert text == ("Loss 0.12, raw 0.12345.\n\n![](attachment:fig-loss.png)\n\n**Fig. 7.1.** The loss."
                    "\n\n![The icon](attachment:fig-icon.svg)\n\n**Fig. 7.2.** The icon.")
    assert convert.attachments["fig-loss.png"] == {"image/png": "iVBORw0KGgo="}
    assert "<svg" in convert.attachments["fig-icon.svg"]["image/svg+xml"]
    assert convert.caption_cell({"caption": "After {ref}`ch-training`."}).startswith("**Fig. 7.3.** After [")


@pytest.mark.parametrize("myst, message", [
    ("{kbd}`Ctrl`", "the role {kbd}"), ("{ref}`nowhere`", "no such label"),
    ("{cite}`nobody`", "not in book/references.bib"), ("{glue}`nothing`", "nothing was glued"),
    ("```{code-cell}\nx\n```", "the directive {code-cell}"), ("$$x$$ (eq-x)", "math_block_label")])
def test_what_has_no_jupyter_rendering_fails_with_its_name(convert, myst, message):
    with pytest.raises(Unsupported, match=re.escape(message)):
        convert.markdown(myst)


def test_the_book_index_reads_labels_figures_and_citations(index):
    assert index.site.startswith("https://") and index.site.endswith("/")
    chapters = [t for page, t in index.pages.items() if page.startswith("notebooks/")]
    assert len(chapters) == len(CHAPTERS) and all(t.number for t in chapters)
    figures = [t for t in index.labels.values() if t.title.startswith("Fig. ")]
    assert figures and all(t.title == f"Fig. {t.number}" for t in figures)
    assert all(re.fullmatch(r".+, \d{4}[a-z]?", label) for label in index.citations.values())
