"""The live models' build side (issue #65): scripts/live_models.py writes the ONNX files
the chapters' live models load, book/_ext/live_model.py loads live-model.js where a page
holds one and prints a sentence in its place in the PDF, and scripts/jupyter_notebooks.py
writes the same sentence into the Jupyter editions. The pages themselves run in Chromium
(scripts/browser_live.py, ``make browser-test``), never here.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest
pytest.importorskip("docutils", reason="the book's tools (requirements.txt)")
from docutils import nodes  # noqa: E402
from sphinx import addnodes  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "book" / "_ext"))
import live_model  # noqa: E402  (book/_ext)
from scripts import jupyter_notebooks, live_models  # noqa: E402

from gpt_from_scratch.chat import ChatTokenizer, add_chat_tokens  # noqa: E402
from gpt_from_scratch.model import GPT, GPTConfig  # noqa: E402
from gpt_from_scratch.tokenizer import CharTokenizer  # noqa: E402

ELEMENT = re.compile(r'<div class="live-model" data-model="([\w-]+)" data-mode="(\w+)">')
MODES = {"generate", "inside", "chat"}


def placed() -> list[tuple[str, str, str]]:
    """Every live model the chapters place: (chapter, data-model, data-mode)."""
    return [(path.stem, *m.groups()) for path in sorted(ROOT.glob("notebooks/text/*.py"))
            for m in ELEMENT.finditer(path.read_text(encoding="utf-8"))]


def test_every_placed_live_model_loads_a_file_that_make_live_models_writes():
    found = placed()
    assert {chapter for chapter, *_ in found} == {"07_generation", "12_assistant",
                                                  "13_inside"}
    for chapter, model, mode in found:
        assert mode in MODES, (chapter, mode)
        name = f"{model}{'-inside' if mode == 'inside' else ''}.onnx"  # live-model.js's
        assert name in live_models.FILES, (chapter, name)
        options = live_models.FILES[name][1]
        assert options.get("lens", False) == options.get("internals", False) == (
            mode == "inside")


def test_each_file_is_exported_with_its_options_and_tokenizer(tmp_path, monkeypatch):
    """What ``write`` asks ``export_onnx`` for (tests/test_export.py exports such models,
    lens and chat tokens included, and checks them against PyTorch)."""
    calls = []

    def export_onnx(model, path, tokenizer, **options):
        calls.append((model, path.name, tokenizer, options))
        return path

    monkeypatch.setattr(live_models, "export_onnx", export_onnx)
    tokenizer = CharTokenizer("ROMEO:\nIs the day so young?\n")
    base = GPT(GPTConfig(vocab_size=tokenizer.vocab_size, context_length=8, d_model=16,
                         n_layers=1, n_heads=2))
    chat_tok = ChatTokenizer(tokenizer, tokenizer.vocab_size)
    grown = add_chat_tokens(base)
    written = live_models.write(tmp_path, {"shakespeare-char": (base, tokenizer),
                                           "assistant": (grown, chat_tok)})
    assert written == [tmp_path / name for name in live_models.FILES]
    assert [(m is base, m is grown, name, t is chat_tok, options)
            for m, name, t, options in calls] == [
        (True, False, "shakespeare-char.onnx", False, {}),
        (True, False, "shakespeare-char-inside.onnx", False,
         {"internals": True, "lens": True}),
        (False, True, "assistant.onnx", True, {})]  # last: the Makefile's LIVE_MODELS


def doctree_with_a_live_model() -> nodes.document:
    doc = nodes.document(None, None)
    doc += nodes.paragraph(text="Before.")
    doc += nodes.raw("", '<div class="live-model" data-model="assistant" '
                     'data-mode="chat"></div>', format="html")
    doc += nodes.raw("", "<b>other HTML</b>", format="html")
    return doc


def app_for(builder_format: str) -> SimpleNamespace:
    scripts = []
    return SimpleNamespace(builder=SimpleNamespace(format=builder_format), scripts=scripts,
                           add_js_file=lambda name, **attrs: scripts.append((name, attrs)))


def test_the_pdf_prints_a_sentence_where_the_html_runs_the_model():
    latex, html = doctree_with_a_live_model(), doctree_with_a_live_model()
    live_model._place(app_for("latex"), latex, "notebooks/12_assistant")
    live_model._place(app_for("html"), html, "notebooks/12_assistant")
    url = "github.io/gpt-from-scratch/notebooks/12_assistant.html"
    assert [type(n).__name__ for n in latex.children] == ["paragraph", "paragraph", "raw"]
    assert latex.children[1].astext().startswith("(The live model runs in the HTML edition")
    assert url in latex.children[1].astext()
    assert [type(n).__name__ for n in html.children] == ["paragraph", "raw", "raw"]
    # in HTML, the element holds a sentence for a reader whose browser runs no script
    assert html.children[1].astext() == ('<div class="live-model" data-model="assistant" '
                                         f'data-mode="chat">{live_model.NO_SCRIPT}</div>')
    assert html.children[1]["format"] == "html"
    assert html.children[2].astext() == "<b>other HTML</b>"


def test_the_pdf_names_the_page_the_live_model_is_on():
    book = nodes.document(None, None)  # the LaTeX builder's one tree, from the front page
    page = addnodes.start_of_file(docname="notebooks/07_generation")
    page.children = doctree_with_a_live_model().children  # as inline_all_toctrees does it
    book += page
    live_model._place(app_for("latex"), book, "book/intro")
    assert "notebooks/07_generation.html" in page.children[1].astext()


def test_live_model_js_loads_as_a_module_only_where_a_page_holds_one():
    with_one, without = app_for("html"), app_for("html")
    body = '<div class="live-model" data-model="assistant" data-mode="chat"></div>'
    live_model._load_where_needed(with_one, "p", "page.html", {"body": body}, None)
    live_model._load_where_needed(without, "p", "page.html", {"body": "<p>text</p>"}, None)
    assert with_one.scripts == [("live-model.js", {"type": "module"})]
    assert without.scripts == []


def test_the_jupyter_editions_say_where_the_live_model_runs():
    index = jupyter_notebooks.BookIndex.read()
    chapters = {stem for stem, *_ in placed()}
    for chapter in chapters:
        path = ROOT / "notebooks" / f"{chapter}.ipynb"
        cells = jupyter_notebooks.edition(path, index).cells
        text = "\n".join(c.source for c in cells if c.cell_type == "markdown")
        assert "live-model" not in text, chapter
        assert live_model.sentence(f"notebooks/{chapter}") in text, chapter
        book = nbformat.read(path, as_version=4).cells
        assert any(ELEMENT.search(c.source) for c in book if c.cell_type == "markdown")
