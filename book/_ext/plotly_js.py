"""Serve plotly.js from the book itself, as MathJax is: never from a CDN.

The interactive figures (gpt_from_scratch.book.interactive) are HTML that draws with the page's
``Plotly``. This copies the plotly.min.js that the installed plotly package bundles into
``_static`` and loads it, in the page's head, on the pages that hold such a figure only (it
is 4.8 MB; the browser caches it across pages).
"""

import shutil
from pathlib import Path

import plotly

SCRIPT = "plotly.min.js"


def _bundled() -> Path:
    return Path(plotly.__file__).parent / "package_data" / SCRIPT


def _load_where_needed(app, pagename, templatename, context, doctree):
    if "plotly-graph-div" in context.get("body", ""):
        app.add_js_file(SCRIPT)


def _copy(app, exception):
    if exception is None and app.builder.format == "html":
        shutil.copyfile(_bundled(), Path(app.outdir) / "_static" / SCRIPT)


def setup(app):
    app.connect("html-page-context", _load_where_needed)
    app.connect("build-finished", _copy)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
