"""Serve plotly.js from the book itself, as MathJax is: never from a CDN.

The interactive figures (gpt_from_scratch.book.interactive) are HTML that draws with the page's
``Plotly``: heatmaps and bars, which plotly.js's cartesian bundle draws (1.5 MB, the full bundle
4.8 MB). ``make book`` installs that bundle into ``.plotly`` (the Makefile's ``PLOTLY_JS``); this
copies it into ``_static`` and loads it, in the page's head, on the pages that hold such a
figure only (the browser caches it across pages). Its version must be the one plotly.py bundles,
which the figures' JSON is written for.
"""

import re
import shutil
from pathlib import Path

from plotly.offline import get_plotlyjs_version
from sphinx.errors import ExtensionError

SCRIPT = "plotly.min.js"
BUNDLE = (Path(__file__).resolve().parents[2] / ".plotly" / "node_modules"
          / "plotly.js-cartesian-dist-min" / "plotly-cartesian.min.js")


def _bundle() -> Path:
    """The cartesian bundle, checked: present and of plotly.py's plotly.js version."""
    wanted = get_plotlyjs_version()
    if not BUNDLE.is_file():
        raise ExtensionError(f"no plotly.js bundle at {BUNDLE}: run `make book`, which installs "
                             f"plotly.js-cartesian-dist-min@{wanted} with npm")
    found = re.search(r" v(\S+)", BUNDLE.read_text()[:200])
    if found is None or found.group(1) != wanted:
        raise ExtensionError(f"{BUNDLE} is plotly.js {found and found.group(1)}, but plotly.py "
                             f"writes figures for {wanted}: set PLOTLY_JS_VERSION := {wanted} "
                             "in the Makefile and run `make book`")
    return BUNDLE


def _load_where_needed(app, pagename, templatename, context, doctree):
    if "plotly-graph-div" in context.get("body", ""):
        app.add_js_file(SCRIPT)


def _copy(app, exception):
    if exception is None and app.builder.format == "html":
        shutil.copyfile(_bundle(), Path(app.outdir) / "_static" / SCRIPT)


def setup(app):
    app.connect("html-page-context", _load_where_needed)
    app.connect("build-finished", _copy)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
