"""The book's links (scripts/links.py): every external link of its sources is listed in
book/external_links.txt and every listed one is still in the book (offline, no site
needed); and the checks that `make link-test` runs on the built site catch a missing page, a
missing anchor and an unlisted link, on a small site made here.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import pytest

# The link check uses the book's tools (requirements.txt); the oldest-versions job has none.
BOOK_TOOLS = "the link check needs the book's tools (requirements.txt)"
pytest.importorskip("myst_parser", reason=BOOK_TOOLS)
pytest.importorskip("bs4", reason=BOOK_TOOLS)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from scripts import links  # noqa: E402
from scripts.release import site_url  # noqa: E402

SITE = "https://someone.github.io/a-book/"


def test_every_external_link_of_the_book_is_listed_and_every_listed_one_is_in_it():
    problems = links.check_listed(links.source_links(), links.read_list(), site_url())
    assert not problems, "\n".join(problems)


def test_links_are_found_where_myst_and_html_put_them():
    text = """See [the paper](https://a.example/paper) and https://b.example/bare.

![a figure](https://c.example/figure.png) and <a href="https://d.example">HTML</a>.

```{admonition} Answer
:class: dropdown
As [the answer](https://e.example/answer) says.
```

Not `https://code.example/span`, nor a block:

```python
url = "https://code.example/block"
```
"""
    assert links.links_in_markdown(text) == [
        "https://a.example/paper", "https://b.example/bare", "https://c.example/figure.png",
        "https://d.example", "https://e.example/answer"]


def test_outputs_links_and_the_addresses_their_scripts_load():
    cell = nbformat.v4.new_code_cell("show()")
    cell.outputs = [
        nbformat.v4.new_output("display_data", {
            "text/html": '<div id="f"></div><script>var s = document.createElement("script");'
                         's.src = "https://cdn.example/plot.js";</script>',
            "text/markdown": "Read [more](https://f.example/more)."}),
        nbformat.v4.new_output("display_data", {
            "application/javascript": "s.src = 'https://cdn.example/math.js';"})]
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("[Chapter 2](https://someone.github.io/a-book/x.html)"),
        cell])
    assert links.links_in_notebook(notebook) == [
        "https://someone.github.io/a-book/x.html", "https://cdn.example/plot.js",
        "https://f.example/more", "https://cdn.example/math.js"]


def test_the_bibliography_links_urls_dois_and_urls_in_its_text(tmp_path):
    bib = tmp_path / "refs.bib"
    bib.write_text("""@article{a, title={A}, author={X, Y}, year={2020}, url={https://a.example}}
@article{b, title={B}, author={X, Y}, year={2021}, doi={10.1/b}}
@misc{c, title={C}, author={X, Y}, year={2022}, howpublished={\\url{https://c.example/code}}}
@book{d, title={D}, author={X, Y}, year={1949}, publisher={P}}
""")
    assert links.links_in_bibliography(bib) == [
        "https://a.example", "https://doi.org/10.1/b", "https://c.example/code"]


def test_the_list_names_every_external_link_and_no_other():
    found = {"https://a.example": {"book/intro.md"}, f"{SITE}x.html": {"notebooks/x.ipynb"},
             "https://new.example": {"notebooks/text/x.py"}}
    problems = links.check_listed(found, ["https://a.example", "https://gone.example"], SITE)
    assert len(problems) == 2
    assert "https://new.example (in notebooks/text/x.py) is not in" in problems[0]
    assert "https://gone.example is listed" in problems[1] and "delete it" in problems[1]


@pytest.mark.parametrize("text, message", [
    ("https://a.example\nnot a url\n", "external_links.txt:2: 'not a url' is not an http(s) URL"),
    ("# c\nhttps://a.example\n\nhttps://a.example\n", "external_links.txt:4: "
     "'https://a.example' is listed twice"),
])
def test_a_malformed_list_is_named_with_its_line(tmp_path, text, message):
    path = tmp_path / "external_links.txt"
    path.write_text(text)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        links.read_list(path)


PAGE = """<html><head><link rel="stylesheet" href="{up}_static/book.css?digest=1"></head><body>
<nav><a href="{up}index.html">home</a> <a href="https://github.com/someone/a-book">repo</a>
</nav><article id="top"><h1 id="chapter">Chapter</h1>{body}</article></body></html>"""


@pytest.fixture
def site(tmp_path) -> links.Site:
    html = tmp_path / "html"
    (html / "notebooks").mkdir(parents=True)
    (html / "_static").mkdir()
    (html / "_static" / "book.css").write_text("")
    (html / "index.html").write_text(PAGE.format(up="", body=(
        '<a href="notebooks/ch.html#sec-1">a section</a> <a href="#chapter">here</a> '
        '<a href="#">top</a> <a href="mailto:a@b.example">mail</a> '
        '<a href="https://listed.example/paper">listed</a>')))
    (html / "notebooks" / "ch.html").write_text(PAGE.format(up="../", body=(
        '<section id="sec-1"><a href="../index.html#nowhere">a lost anchor</a> '
        '<a href="gone.html">a lost page</a> <img src="../_images/fig.png" alt="f"> '
        '<a href="https://unlisted.example/x">unlisted</a></section>')))
    return links.Site(html, SITE)


def test_the_site_check_finds_lost_pages_anchors_and_unlisted_links(site):
    problems, internal, external = links.check_site(site, ["https://listed.example/paper"])
    assert sorted(problems) == [
        "notebooks/ch.html: ../_images/fig.png: no file _images/fig.png in the site",
        "notebooks/ch.html: ../index.html#nowhere: no anchor #nowhere in index.html",
        "notebooks/ch.html: gone.html: no file notebooks/gone.html in the site",
        "notebooks/ch.html: https://unlisted.example/x is not in external_links.txt: check "
        "it opens, then add it there"]
    # index: css, home, section, #chapter; ch: css, home, anchor, page, image
    assert (internal, external) == (9, 2)


def test_the_editions_links_to_the_book_must_land(site, tmp_path):
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(
        f"[ok]({SITE}notebooks/ch.html#sec-1), [home]({SITE}), [lost]({SITE}notebooks/"
        f"ch.html#sec-9), [gone]({SITE}notebooks/ch2.html), [out](https://someone.github.io/"
        "other/), [away](https://elsewhere.example/x), [relative](ch.html), "
        "![fig](attachment:fig.png)")])
    path = tmp_path / "ch.ipynb"
    nbformat.write(notebook, path)
    problems, internal = links.check_editions(site, [path])
    assert problems == [
        f"ch.ipynb: {SITE}notebooks/ch.html#sec-9: no anchor #sec-9 in notebooks/ch.html",
        f"ch.ipynb: {SITE}notebooks/ch2.html: no file notebooks/ch2.html in the site",
        "ch.ipynb: https://someone.github.io/other/: outside the site",
        f"ch.ipynb: ch.html: a relative link, which Colab resolves on GitHub; link the "
        f"book's page at {SITE}"]
    assert internal == 5
