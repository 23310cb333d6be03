"""The live models (book/_static/live-model.js): loaded where a page holds one, and a
sentence in their place in the PDF.

A chapter places a live model with an HTML element in a Markdown cell,
``<div class="live-model" data-model="shakespeare-char" data-mode="generate"></div>``. The
HTML pages that hold one load live-model.js as a module (it imports ONNX Runtime Web only
when the reader presses Run), the others nothing; inside the element, ``NO_SCRIPT`` says
what it is until the script replaces it (a reader with JavaScript off, or whose browser
cannot run the module, reads that sentence, not an empty box). The PDF drops raw HTML: there
the element becomes the sentence ``SENTENCE`` with the page's address in the HTML edition,
as the interactive figures print "(The interactive version of this figure is in the HTML
edition.)". scripts/jupyter_notebooks.py writes the same sentence into the Jupyter and Colab
editions.
"""

import re
import sys
from pathlib import Path

from docutils import nodes
from sphinx import addnodes

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from scripts.release import site_url  # noqa: E402  (the rendered book's address)

SCRIPT = "live-model.js"
ELEMENT = re.compile(r'<div class="live-model"[^>]*>.*?</div>', re.DOTALL)
SENTENCE = "(The live model runs in the HTML edition of this page: {url}.)"
NO_SCRIPT = ('<p class="live-status live-error">A live model of this chapter runs here, '
             "in your browser, with JavaScript, which this browser has turned off or could "
             "not run. The chapter's outputs show what it computes.</p>")


def sentence(docname: str) -> str:
    """What stands for a live model in the Jupyter editions: ``SENTENCE`` in Markdown, the
    address a link (a period after a bare address would be read as part of it)."""
    url = f"{site_url()}{docname}.html"
    before, after = SENTENCE.split("{url}")
    return f"{before}[{url}]({url}){after}"


def _load_where_needed(app, pagename, templatename, context, doctree):
    if 'class="live-model"' in context.get("body", ""):
        app.add_js_file(SCRIPT, type="module")


def _pages(doctree, docname: str) -> dict:
    """Each live model's raw HTML node in ``doctree``, with the page it comes from. The
    LaTeX builder resolves the whole book as one tree, each page's nodes in a
    ``start_of_file`` node that names it; Sphinx's ``inline_all_toctrees`` moves them there
    without setting their parent, so the pages are found walking down, not up."""
    def live(tree) -> list:
        return [raw for raw in tree.findall(nodes.raw)
                if "html" in raw.get("format", "").split() and ELEMENT.search(raw.astext())]

    found = dict.fromkeys(live(doctree), docname)
    for page in doctree.findall(addnodes.start_of_file):  # outer pages first, inner after
        found |= dict.fromkeys(live(page), page["docname"])
    return found


def _place(app, doctree, docname):
    """In HTML, ``NO_SCRIPT`` inside each live model's element; elsewhere ``SENTENCE``."""
    for raw, page in _pages(doctree, docname).items():
        if app.builder.format == "html":
            html = ELEMENT.sub(lambda m: m[0].replace("</div>", NO_SCRIPT + "</div>"),
                               raw.astext())
            raw.replace_self(nodes.raw("", html, format="html"))
            continue
        url = f"{site_url()}{page}.html"
        before, after = SENTENCE.split("{url}")
        # the address as a link whose text is itself: LaTeX's \sphinxurl breaks it at a
        # slash, where plain text would run past the margin
        raw.replace_self(nodes.paragraph("", "", nodes.Text(before),
                                         nodes.reference(url, url, refuri=url),
                                         nodes.Text(after)))


def setup(app):
    app.connect("html-page-context", _load_where_needed)
    app.connect("doctree-resolved", _place)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
