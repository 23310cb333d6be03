"""The chapters' Jupyter and Colab editions (notebooks/jupyter/, written by
scripts/jupyter_notebooks.py): up to date with the committed chapters, with no MyST left
(Jupyter and Colab would show it as raw text), every answer folded in <details>, the hidden
test cells dropped, the hidden sources collapsed for JupyterLab and Colab forms for Colab
(checked in nbconvert's HTML, rendered honouring Colab's rule alone), the set-up cell first,
and the README's Colab links on them; and the MyST rewrite itself
(scripts/jupyter_markdown.py) on small examples of each construct.
"""

from __future__ import annotations

import copy
import re
import sys
from pathlib import Path

import nbformat
import pytest

# The editions are written with the book's own tools (docutils comes with Jupyter Book, in
# requirements.txt), not with the package's: the oldest-versions job has none of them.
pytest.importorskip("docutils", reason="the Jupyter editions need the book's tools (requirements.txt)")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from scripts import jupyter_notebooks  # noqa: E402
from scripts.jupyter_markdown import (  # noqa: E402
    MYST, BookIndex, Converter, Target, Unsupported)

CHAPTERS = jupyter_notebooks.chapters()
MYST_LEFT = {
    "a role": re.compile(r"\{[a-z][\w:+-]*\}`"),
    "a target": re.compile(r"^\s*\([\w.:-]+\)=\s*$", re.MULTILINE),
    "a directive": re.compile(r"^\s*(```+|~~~+)\s*\{|^\s*:::", re.MULTILINE),
    "a directive option": re.compile(r"^\s*:(class|name|label|alt|width|align):",
                                     re.MULTILINE),
}


def myst_left(text: str) -> list[str]:
    return [f"{kind}: {m.group(0).strip()!r}" for kind, pattern in MYST_LEFT.items()
            for m in pattern.finditer(text)]


def markdown_texts(nb) -> list[str]:
    """Every Markdown the page shows: the Markdown cells and the Markdown outputs."""
    return [c.source for c in nb.cells if c.cell_type == "markdown"] + [
        output["data"]["text/markdown"] for c in nb.cells if c.cell_type == "code"
        for output in c.outputs if "text/markdown" in output.get("data", {})]


def read_edition(chapter: Path):
    return nbformat.read(jupyter_notebooks.EDITIONS / chapter.name, as_version=4)


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
    source, edition = nbformat.read(chapter, as_version=4), read_edition(chapter)
    left = [found for text in markdown_texts(edition) for found in myst_left(text)]
    assert not left, f"{chapter.name}'s Jupyter edition shows raw MyST: {left[:5]}"
    dropdowns = sum(token.info.startswith("{") and "dropdown" in token.content
                    for cell in source.cells if cell.cell_type == "markdown"
                    for token in MYST.parse(cell.source))
    folded = sum(c.source.count("<details>") for c in edition.cells
                 if c.cell_type == "markdown")
    assert folded == dropdowns, f"{chapter.name}: {dropdowns} dropdowns, {folded} <details>"
    for cell in (c for c in edition.cells if "answer" in c.metadata.get("tags", [])):
        assert cell.source.startswith("<details>") and cell.source.endswith("</details>"), (
            f"{chapter.name}: an answer is not folded in <details>: {cell.source[:80]!r}")


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_valid_with_hidden_cells_hidden(chapter):
    edition = read_edition(chapter)
    nbformat.validate(edition)  # e.g. cell ids, attachments, the jupyter metadata
    tags = [set(c.metadata.get("tags", [])) for c in edition.cells]
    assert not any("remove-cell" in t for t in tags), f"{chapter.name}: a test cell shows"
    for cell, cell_tags in zip(edition.cells, tags):
        if cell_tags & {"remove-input", "hide-input"}:
            assert cell.metadata.get("jupyter", {}).get("source_hidden") is True, (
                f"{chapter.name}: a {sorted(cell_tags)} cell's source is not collapsed")


COLAB_TITLE = re.compile(r"#@title (\S.*)")


def is_colab_form(cell) -> bool:
    """Colab shows such a cell as its title alone: ``cellView: "form"`` and a first line
    ``#@title ...``."""
    first = cell.source.split("\n", 1)[0]
    return cell.metadata.get("cellView") == "form" and bool(COLAB_TITLE.fullmatch(first))


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_hidden_cells_are_colab_forms_and_the_set_up_cell_comes_first(chapter):
    edition = read_edition(chapter)
    code = [c for c in edition.cells if c.cell_type == "code"]
    first = code[0]
    assert "colab-setup" in first.metadata.get("tags", []) and not is_colab_form(first), (
        f"{chapter.name}: the first code cell must be the set-up cell, shown in full")
    for cell in code:
        hidden = set(cell.metadata.get("tags", [])) & jupyter_notebooks.HIDDEN_SOURCE
        assert bool(hidden) == is_colab_form(cell), (
            f"{chapter.name}: a cell tagged {sorted(cell.metadata.get('tags', []))} "
            f"{'is not' if hidden else 'is'} a Colab form (cellView and #@title): "
            f"{cell.source[:80]!r}; run make jupyter")
    solutions = [c for c in code if "solution" in c.metadata.get("tags", [])]
    assert all(map(is_colab_form, solutions)), f"{chapter.name}: a solution shows in Colab"


def rendered_text(nb, colab_forms: bool) -> str:
    """The text of nbconvert's HTML of ``nb``'s cells (the lab template; no cell is run, no
    output drawn), with the JupyterLab metadata dropped: only Colab's rule, when
    ``colab_forms``, hides code; a Colab form then shows its title line alone, as in Colab."""
    nbconvert = pytest.importorskip("nbconvert", reason="the check renders with nbconvert")
    bs4 = pytest.importorskip("bs4", reason="the check reads nbconvert's HTML with bs4")

    def colab_rule_only(nb, resources):
        for cell in nb.cells:
            cell.metadata.pop("jupyter", None)
            if colab_forms and cell.cell_type == "code" and is_colab_form(cell):
                cell.source = cell.source.split("\n", 1)[0]
        return nb, resources

    exporter = nbconvert.HTMLExporter(template_name="lab")
    exporter.register_preprocessor(colab_rule_only, enabled=True)
    sources = copy.deepcopy(nb)  # without outputs (figures are most of the work): a solution's
    for cell in sources.cells:  # own lines are in no output (own_lines)
        if cell.cell_type == "code":
            cell.outputs = []
    html, _ = exporter.from_notebook_node(sources)
    return bs4.BeautifulSoup(html, "html.parser").get_text()


def own_lines(cell, nb) -> set[str]:
    """The lines of a solution (its title aside) that no other cell's source or text output
    holds: seen in the rendered page, they can only come from the solution."""
    elsewhere = "\n".join(
        [c.source for c in nb.cells if c is not cell]
        + [text if isinstance(text, str) else "".join(text)
           for c in nb.cells if c.cell_type == "code"
           for output in c.outputs
           for text in [output.get("text", ""), *output.get("data", {}).values()]
           if isinstance(text, (str, list))])
    return {line.strip() for line in cell.source.split("\n")[1:]
            if len(line.strip()) >= 20 and line.strip() not in elsewhere}


CHAPTERS_WITH_SOLUTIONS = [
    c for c in CHAPTERS if any("solution" in cell.metadata.get("tags", [])
                               for cell in nbformat.read(c, as_version=4).cells)]


@pytest.mark.parametrize("chapter", CHAPTERS_WITH_SOLUTIONS, ids=lambda p: p.stem)
def test_no_solution_shows_in_a_renderer_that_honours_only_colab_forms(chapter):
    """nbconvert stands in for Colab: honouring Colab's forms alone, it shows no solution's
    own line; honouring nothing, it shows every one (so the check can see them)."""
    edition = read_edition(chapter)
    solutions = [c for c in edition.cells if "solution" in c.metadata.get("tags", [])]
    lines = {id(c): own_lines(c, edition) for c in solutions}
    assert all(lines.values()), f"{chapter.name}: a solution has no line of its own to seek"
    page = copy.deepcopy(edition)  # the solutions alone: their own lines are in no other cell
    page.cells = [c for c in page.cells if "solution" in c.metadata.get("tags", [])]
    colab = rendered_text(page, colab_forms=True)
    shown = sorted(line for found in lines.values() for line in found if line in colab)
    assert not shown, f"{chapter.name}: solutions show under Colab's rule: {shown[:3]}"
    plain = rendered_text(page, colab_forms=False)
    unseen = sorted(line for found in lines.values() for line in found if line not in plain)
    assert not unseen, f"{chapter.name}: the check cannot see these lines unhidden: {unseen}"


def test_the_myst_check_finds_each_construct():
    planted = ("(ch-x)=\n# Title\nSee {ref}`ch-x` and {cite:p}`a`.\n"
               "```{admonition} Answer\n:class: dropdown\nYes.\n```\n:::{note}\nHi\n:::\n")
    assert {found.split(":")[0] for found in myst_left(planted)} == set(MYST_LEFT)
    assert myst_left("Plain `code`, $\\{x\\}$ and <details>text</details>.") == []


# ---------------------------------------------------------------------------------------
# The rewrite, construct by construct, on a small made-up book
# ---------------------------------------------------------------------------------------

SITE = "https://example.org/book/"
REFS = f"{SITE}book/references.html"
CH6 = f"{SITE}notebooks/06_training.html"


@pytest.fixture
def convert() -> Converter:
    training, generation = "notebooks/06_training", "notebooks/07_generation"
    pages = {training: Target(training, "", "Training", "6"),
             generation: Target(generation, "", "Generating", "7"),
             "book/notation": Target("book/notation", "", "Notation")}
    labels = {"ch-training": Target(training, "ch-training", "Training", "6"),
              "sec-ladder": Target(training, "sec-ladder", "The ladder", "6.4"),
              "fig-lr": Target(training, "fig-lr", "Fig. 6.1", "6.1")}
    citations = {"vaswani2017": "Vaswani et al., 2017", "k": "K, 2023b"}
    return Converter(BookIndex(SITE, pages, labels, citations), generation)


def test_references_become_links_with_plain_text(convert):
    text = convert.markdown(
        "(ch-generation)=\n# 7. Generating\n\nAs {ref}`ch-training` showed, Chapter 6 "
        "({ref}`ch-training`) and {ref}`sec-ladder`; {numref}`fig-lr`, {numref}`Figure "
        "{number} <fig-lr>`, {ref}`the loop <sec-ladder>`, {doc}`/book/notation`. "
        "`{ref}` stays.")
    assert text == (
        f"# 7. Generating\n\nAs [Chapter 6, *Training*]({CH6}#ch-training) showed, "
        f"Chapter 6 ([*Training*]({CH6}#ch-training)) and "
        f"[Chapter 6, section 6.4]({CH6}#sec-ladder); [Fig. 6.1]({CH6}#fig-lr), "
        f"[Figure 6.1]({CH6}#fig-lr), [the loop]({CH6}#sec-ladder), "
        f"[Notation]({SITE}book/notation.html). `{{ref}}` stays.")


def test_a_citation_reads_as_a_name_where_it_is_one(convert):
    link = f"{REFS}#cite-vaswani2017"
    text = convert.markdown("Attention {cite}`vaswani2017`. {cite}`vaswani2017` found it, "
                            "as {cite}`vaswani2017` did; see {cite:p}`vaswani2017`.")
    assert text == (
        f"Attention ([Vaswani et al., 2017]({link})). [Vaswani et al. (2017)]({link}) "
        f"found it, as [Vaswani et al. (2017)]({link}) did; see "
        f"([Vaswani et al., 2017]({link})).")


def test_citations_admonitions_and_dropdowns(convert):
    text = convert.markdown(
        "Both {cite}`vaswani2017,k`.\n\n```{note}\nA {cite:t}`k` note.\n```\n\n"
        "- item\n\n  :::{admonition} Answer\n  :class: dropdown\n  $x$ is 1.\n  :::\n")
    assert text == (
        f"Both ([Vaswani et al., 2017]({REFS}#cite-vaswani2017); "
        f"[K, 2023b]({REFS}#cite-k)).\n\n"
        f"> **Note**\n>\n> A [K (2023b)]({REFS}#cite-k) note.\n\n- item\n\n  <details>\n"
        "  <summary><b>Answer</b></summary>\n\n  $x$ is 1.\n\n  </details>")


def test_a_figure_becomes_its_image_and_numbered_caption(convert):
    text = convert.markdown("```{figure} /book/favicon.svg\n:alt: The icon\n"
                            ":name: fig-icon\nThe {ref}`ch-training` icon.\n```")
    assert text == ("![The icon](attachment:fig-icon.svg)\n\n**Fig. 7.1.** The "
                    f"[Chapter 6, *Training*]({CH6}#ch-training) icon.")
    assert "<svg" in convert.attachments["fig-icon.svg"]["image/svg+xml"]
    assert convert.caption_cell({"caption": "Second."}) == "**Fig. 7.2.** Second."


@pytest.mark.parametrize("myst, message", [
    ("{kbd}`Ctrl`", "the role {kbd}"), ("{ref}`nowhere`", "no such label"),
    ("{cite}`nobody`", "not in book/references.bib"), ("{glue}`x`", "the role {glue}"),
    ("```{code-cell}\nx\n```", "the directive {code-cell}"),
    ("$$x$$ (eq-x)", "math_block_label"),
    ("Text[^1] here.\n\n[^1]: A note.", "footnote_ref ('Text[^1] here.')"),  # never fired
    ("[^n]: A note.", "footnote_reference_open"),
    ("```{figure} /README.md\nA caption.\n```", "the figure '/README.md' is not a .png/")])
def test_what_has_no_jupyter_rendering_fails_with_its_name(convert, myst, message):
    with pytest.raises(Unsupported, match=re.escape(message)):
        convert.markdown(myst)


def test_the_book_index_reads_chapters_figures_and_citations():
    index = BookIndex.read()
    assert index.site.startswith("https://") and index.site.endswith("/")
    chapters = [t for page, t in index.pages.items() if page.startswith("notebooks/")]
    assert len(chapters) == len(CHAPTERS) and all(t.number for t in chapters)
    figures = [t for t in index.labels.values() if t.title.startswith("Fig. ")]
    assert figures and all(t.title == f"Fig. {t.number}" for t in figures)
    assert all(re.fullmatch(r".+, \d{4}[a-z]?", label)
               for label in index.citations.values())


def test_make_jupyter_deletes_only_editions_of_gone_chapters(tmp_path, monkeypatch):
    """A reader's notebook in notebooks/jupyter/ (JupyterLab's "Duplicate" keeps the
    edition's metadata, not its name) is left as it is; it used to be deleted as stale."""
    def notebook(name: str, source: str | None) -> Path:
        nb = nbformat.v4.new_notebook()
        if source:
            nb.metadata["gpt_from_scratch"] = {"written_by": "scripts/jupyter_notebooks.py",
                                               "from": f"notebooks/{source}"}
        nbformat.write(nb, tmp_path / name)
        return tmp_path / name

    gone = notebook("13_gone.ipynb", "13_gone.ipynb")
    kept = [notebook("06_training-Copy1.ipynb", "06_training.ipynb"),
            notebook("mine.ipynb", None)]
    (tmp_path / "broken.ipynb").write_text("{not json")
    kept.append(tmp_path / "broken.ipynb")
    monkeypatch.setattr(jupyter_notebooks, "EDITIONS", tmp_path)
    monkeypatch.setattr(jupyter_notebooks, "ROOT", tmp_path.parent)
    monkeypatch.setattr(jupyter_notebooks, "chapters", lambda: [])
    monkeypatch.setattr(jupyter_notebooks.BookIndex, "read", classmethod(lambda cls: None))
    assert jupyter_notebooks.main(["--check"]) == 1 and gone.exists()  # reported only
    assert jupyter_notebooks.main([]) == 0
    assert not gone.exists() and all(path.exists() for path in kept)
    assert jupyter_notebooks.main(["--check"]) == 0  # a reader's notebook is no drift


def test_colab_opens_the_editions_of_the_release_s_tag():
    """The tag v<version>, whose set-up cell installs that release: a pair (not main, whose
    notebooks may have outgrown the release they install)."""
    import tomllib

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    url = jupyter_notebooks.colab_url("04_attention")
    assert url.endswith(f"/blob/v{version}/notebooks/jupyter/04_attention.ipynb"), url


def test_the_book_s_colab_button_opens_the_same_edition():
    """book/_ext/jupyter_launch.py on the button sphinx-book-theme builds: the page's
    notebook on the branch becomes its edition at the release's tag, as the README links."""
    import importlib.util
    from types import SimpleNamespace

    spec = importlib.util.spec_from_file_location(
        "jupyter_launch", ROOT / "book" / "_ext" / "jupyter_launch.py")
    launch = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(launch)
    chapter = CHAPTERS[0].stem
    theme = ("https://colab.research.google.com/github/gpt-from-scratch/gpt-from-scratch/"
             f"blob/main/notebooks/{chapter}.ipynb")
    buttons = [{"text": "Colab", "url": theme}, {"text": "Binder", "url": "elsewhere"}]
    context = {"header_buttons": [{"label": "launch-buttons", "buttons": buttons}]}
    launch._colab_to_edition(SimpleNamespace(srcdir=str(ROOT)), f"notebooks/{chapter}",
                             "page.html", context, None)
    assert buttons == [{"text": "Colab", "url": jupyter_notebooks.colab_url(chapter)},
                       {"text": "Binder", "url": "elsewhere"}]
