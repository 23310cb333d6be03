"""Number figures per chapter: "Fig. 4.3" is the third figure of Chapter 4.

Sphinx numbers figures across the whole book (Fig. 1 to 33) unless the table of contents numbers the
chapters itself, and the book's chapters carry their own numbers in their titles ("4. Attention",
"1b. Byte-pair encoding from scratch"). So after Sphinx has numbered the figures, this extension
renumbers those of every page whose title starts with a chapter number: 1, 2, 3 ... within the page,
prefixed with that number. ``{numref}`` references and captions both read the new numbers.

The PDF numbers its figures in LaTeX: each chapter's page starts with ``\\bookchapter{4}``
(``_config.yml``'s LaTeX preamble defines it), so that Fig. 4.3 there is Fig. 4.3 here too.
"""

import re

from docutils import nodes

CHAPTER_TITLE = re.compile(r"^(\d+[a-z]?)\.\s")


def _number_per_chapter(app, env):
    changed = []
    for docname, by_type in env.toc_fignumbers.items():
        title = env.titles.get(docname)
        match = CHAPTER_TITLE.match(title.astext()) if title is not None else None
        if match is None:
            continue
        chapter = match.group(1)
        for numbers in by_type.values():
            in_order = sorted(numbers, key=lambda figure_id: numbers[figure_id])
            for n, figure_id in enumerate(in_order, start=1):
                numbers[figure_id] = (chapter, n)
        changed.append(docname)
    return changed


def _start_chapter_in_latex(app, doctree):
    """After the chapter's title, a raw LaTeX ``\\bookchapter{N}`` (the HTML ignores it)."""
    section = next(iter(doctree.findall(nodes.section)), None)
    match = CHAPTER_TITLE.match(section[0].astext()) if section is not None else None
    if match:
        start = nodes.raw("", rf"\bookchapter{{{match.group(1)}}}", format="latex")
        section.insert(1, start)


def setup(app):
    app.connect("doctree-read", _start_chapter_in_latex)
    # After Sphinx's own numbering (the toctree collector's handler runs at the default priority 500).
    app.connect("env-get-updated", _number_per_chapter, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
