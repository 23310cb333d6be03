"""The Colab button opens a chapter's Jupyter and Colab edition, notebooks/jupyter/.

sphinx-book-theme points its Colab button at the page's own source, notebooks/NAME.ipynb,
whose MyST (cross-references, dropdown answers, admonitions) Colab shows as raw text. The
editions are written from those notebooks by ``scripts/jupyter_notebooks.py``; after the
theme has built its launch buttons, this points the Colab one at the page's edition, if any.
"""

from pathlib import Path

EDITIONS = "notebooks/jupyter"


def _colab_to_edition(app, pagename, templatename, context, doctree):
    name = Path(pagename).name
    if not pagename.startswith("notebooks/") or \
            not (Path(app.srcdir) / EDITIONS / f"{name}.ipynb").exists():
        return
    groups = context.get("header_buttons", [])
    for group in (g for g in groups if g.get("label") == "launch-buttons"):
        for button in group.get("buttons", []):
            if button.get("text") == "Colab":
                button["url"] = button["url"].replace(f"/{pagename}.ipynb",
                                                      f"/{EDITIONS}/{name}.ipynb")


def setup(app):
    # After sphinx-book-theme's add_launch_buttons (priority 501).
    app.connect("html-page-context", _colab_to_edition, priority=502)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
