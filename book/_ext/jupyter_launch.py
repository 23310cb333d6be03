"""The Colab button opens a chapter's Jupyter and Colab edition, notebooks/jupyter/, at the
release's tag.

sphinx-book-theme points its Colab button at the page's own source, notebooks/NAME.ipynb, on
``_config.yml``'s branch: its MyST (cross-references, dropdown answers, admonitions) Colab
shows as raw text, and its set-up cell installs the released package, which the branch's
notebook may have outgrown. The editions are written from those notebooks by
``scripts/jupyter_notebooks.py``; after the theme has built its launch buttons, this points
the Colab one at the page's edition, if any, at the tag ``v<version>``, whose set-up cell
installs that very release (``scripts/colab_setup.py``'s ``colab_url``, as the README's).
"""

import functools
import importlib.util
from pathlib import Path

EDITIONS = "notebooks/jupyter"


@functools.cache
def _colab_setup(srcdir: str):
    """``scripts/colab_setup.py`` of the book at ``srcdir`` (the repository's root)."""
    spec = importlib.util.spec_from_file_location(
        "colab_setup", Path(srcdir) / "scripts" / "colab_setup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _colab_to_edition(app, pagename, templatename, context, doctree):
    name = Path(pagename).name
    if not pagename.startswith("notebooks/") or \
            not (Path(app.srcdir) / EDITIONS / f"{name}.ipynb").exists():
        return
    groups = context.get("header_buttons", [])
    for group in (g for g in groups if g.get("label") == "launch-buttons"):
        for button in group.get("buttons", []):
            if button.get("text") == "Colab":
                button["url"] = _colab_setup(app.srcdir).colab_url(name)


def setup(app):
    # After sphinx-book-theme's add_launch_buttons (priority 501).
    app.connect("html-page-context", _colab_to_edition, priority=502)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
