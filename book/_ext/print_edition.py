"""The PDF edition for learning: self-checks that work on paper, tables as tables, a preface.

Only the LaTeX builder is touched; the HTML book keeps its folded answers and live quizzes.

- Every chapter's quiz prints as numbered questions with their lettered choices (a blank to
  fill in for a number), read from the quiz's own JSON (``gpt_from_scratch.book.quiz``'s
  ``quiz_json``, which jupyterquiz's script holds as ``var questions<id>=[...];``).
- The answers of the exercises (dropdown admonitions), their solutions (cells tagged
  ``solution``) and the quizzes' answers with their explanations move to an appendix at the end
  of the book; each leaves a line that names the appendix page it moved to, and each answer
  points back at its exercise's page. "Predict, then run" works on paper too.
- A pandas DataFrame prints as a table (from its HTML), not as text broken in two with ``\\``.
- The front page's text and sections (``book/intro.md``) form a chapter titled Preface, rather
  than an untitled page followed by its sections as chapters.

``scripts/pdf_test.py`` checks the appendix in the built PDF.
"""

from __future__ import annotations

import html
import json
import math
import re
from html.parser import HTMLParser

from docutils import nodes
from sphinx import addnodes
from sphinx.errors import ExtensionError
from sphinx.transforms.post_transforms import SphinxPostTransform

APPENDIX_TITLE = "Appendix: answers and solutions"
PREFACE_TITLE = "Preface"
CHAPTER_TITLE = re.compile(r"^(\d+[a-z]?)\.\s")
QUESTIONS = re.compile(r"^var questions\w*=(\[.*\]);$", re.MULTILINE)  # jupyterquiz's script
CODE = re.compile(r"<code>(.*?)</code>")


def _inline(text: str) -> list[nodes.Node]:
    """Quiz text (HTML-escaped, `code` as <code>) as docutils inline nodes."""
    parts = CODE.split(text)
    return [nodes.literal(text=html.unescape(part)) if i % 2 else nodes.Text(html.unescape(part))
            for i, part in enumerate(parts) if part]


def _letter(i: int) -> str:
    return "abcdefgh"[i]


def quiz_questions(questions: list[dict]) -> nodes.enumerated_list:
    """The questions as the reader answers them on paper."""
    listing = nodes.enumerated_list(enumtype="arabic")
    for q in questions:
        item = nodes.list_item("", nodes.paragraph("", "", *_inline(q["question"])))
        if q["type"] == "multiple_choice":
            choices = nodes.enumerated_list(enumtype="loweralpha", suffix=")")
            choices += [nodes.list_item("", nodes.paragraph("", "", *_inline(a["answer"])))
                        for a in q["answers"]]
            item += choices
        else:
            item += nodes.paragraph("", "Your answer: ______________")
        listing += item
    return listing


def quiz_answers(questions: list[dict]) -> nodes.enumerated_list:
    """Each question's answer with its explanation; for a choice, what each other choice misses."""
    listing = nodes.enumerated_list(enumtype="arabic")
    for q in questions:
        item = nodes.list_item()
        if q["type"] == "multiple_choice":
            for i, a in enumerate(q["answers"]):
                lead = f"{_letter(i)}) " + ("right. " if a["correct"] else "not quite. ")
                para = nodes.paragraph("", "", nodes.strong(text=lead), *_inline(a["answer"]),
                                       nodes.Text(": "), *_inline(a["feedback"]))
                item += para
        else:
            right = next(a for a in q["answers"] if a.get("correct"))
            low, high = right["range"]
            feedback = re.sub(r"^Correct:\s*", "", right["feedback"])
            decimals = max(0, -math.floor(math.log10((high - low) / 2)))  # the tolerance's digits
            item += nodes.paragraph("", "", nodes.strong(text="Answer: "), *_inline(feedback),
                                    nodes.Text(f" (accepted: {low:,.{decimals}f} to "
                                               f"{high:,.{decimals}f})"))
        listing += item
    return listing


class _TableParser(HTMLParser):
    """The rows of a pandas DataFrame's HTML table: [(is_header, [cell text, ...]), ...]."""

    def __init__(self):
        super().__init__()
        self.rows, self.cell, self.head = [], None, False

    def handle_starttag(self, tag, attrs):
        if tag == "thead":
            self.head = True
        elif tag == "tbody":
            self.head = False
        elif tag == "tr":
            self.rows.append((self.head, []))
        elif tag in ("td", "th"):
            self.cell = ""

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self.cell is not None:
            self.rows[-1][1].append(" ".join(self.cell.split()))
            self.cell = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell += data


def dataframe_table(markup: str) -> nodes.table:
    """A DataFrame's HTML (``DataFrame._repr_html_``) as a docutils table: header rows, then the
    body; every row padded to the widest."""
    parser = _TableParser()
    parser.feed(markup)
    width = max(len(cells) for _, cells in parser.rows)
    group = nodes.tgroup(cols=width)
    group += [nodes.colspec(colwidth=1) for _ in range(width)]
    head, body = nodes.thead(), nodes.tbody()
    for is_header, cells in parser.rows:
        row = nodes.row()
        row += [nodes.entry("", nodes.paragraph(text=text)) for text in cells + [""] * (width - len(cells))]
        (head if is_header else body).append(row)
    if len(head):
        group += head
    group += body
    return nodes.table("", group, classes=["colwidths-auto"])


def _mime(bundle: nodes.Element, mime_type: str) -> nodes.Element | None:
    return next((c for c in bundle.children if c.get("mime_type") == mime_type), None)


def _bundles(tree: nodes.Node) -> list[nodes.Element]:
    return [n for n in tree.findall(nodes.container) if n.get("nb_element") == "mime_bundle"]


class PrintOutputs(SphinxPostTransform):
    """Before myst-nb picks each output's mime type (its post-transform runs at priority 4): a
    quiz's outputs become its questions on paper plus a container of its answers, which
    ``move_answers`` then moves to the appendix; a DataFrame's become a table."""

    default_priority = 3
    formats = ("latex",)

    def run(self, **kwargs):
        for cell in list(self.document.findall(nodes.container)):
            if "tag_quiz" in cell["classes"] and cell.get("nb_element") == "cell_code":
                self.print_quiz(cell)
        for bundle in _bundles(self.document):
            markup = _mime(bundle, "text/html")
            if markup is not None and 'class="dataframe"' in markup.astext():
                bundle.replace_self(dataframe_table(markup.astext()))

    def print_quiz(self, cell: nodes.container) -> None:
        found = [QUESTIONS.search(script.astext()) for bundle in _bundles(cell)
                 if (script := _mime(bundle, "application/javascript")) is not None]
        found = [match for match in found if match]
        if len(found) != 1:
            raise ExtensionError(f"{cell.source}: a cell tagged quiz holds {len(found)} quiz "
                                 "scripts, expected one (re-execute the chapter: its show_quiz "
                                 "cell must display one quiz)")
        questions = json.loads(found[0].group(1))
        answers = nodes.container("", quiz_answers(questions), classes=["print-quiz-answers"])
        cell.children = []
        cell.extend([quiz_questions(questions), answers])


def _chapter_of(node: nodes.Node) -> tuple[str, str] | None:
    """The chapter a node is in: its number and title (``("5", "5. The full GPT")``)."""
    for section in _sections_around(node)[::-1]:
        title = section[0].astext()
        match = CHAPTER_TITLE.match(title)
        if match:
            return match.group(1), title
    return None


def _sections_around(node: nodes.Node) -> list[nodes.section]:
    found = []
    while node is not None:
        if isinstance(node, nodes.section):
            found.append(node)
        node = node.parent
    return found[::-1]


def _is_answer(node: nodes.Node) -> bool:
    return (isinstance(node, nodes.admonition) and "dropdown" in node["classes"]) or (
        isinstance(node, nodes.container) and ("tag_solution" in node["classes"]
                                               or "print-quiz-answers" in node["classes"]))


def _latex(text: str) -> nodes.raw:
    return nodes.raw("", text, format="latex")


def move_answers(app, doctree, docname):
    """Move every answer, solution and quiz answer into the appendix at the end of the book,
    and make the front page's text the Preface."""
    if app.builder.format != "latex":
        return
    make_preface(doctree)
    entries = []  # (chapter, exercise title, label, moved nodes)
    for n, node in enumerate([n for n in doctree.findall(_is_answer)], start=1):
        chapter = _chapter_of(node)
        if chapter is None:
            raise ExtensionError(f"{node.source}: an answer outside a numbered chapter")
        exercise = _sections_around(node)[-1][0].astext()
        label = f"gfs-answer-{n}"
        pointer = nodes.paragraph("", "", _latex(
            rf"\phantomsection\label{{{label}-back}}\hyperref[{label}]{{\textit{{{_kind(node)} "
            rf"in the appendix, page~\pageref*{{{label}}}.}}}}"))
        node.replace_self(pointer)
        entries.append((chapter, exercise, label, node))
    if not entries:
        return
    place_appendix(app, doctree, appendix(entries))


def _kind(node: nodes.Node) -> str:
    if "print-quiz-answers" in node["classes"]:
        return "The answers are"
    return "The solution is" if "tag_solution" in node["classes"] else "The answer is"


def appendix(entries) -> nodes.section:
    """The appendix: per chapter a section, per exercise its title, then what moved there."""
    part = nodes.section("", nodes.title(text=APPENDIX_TITLE), ids=["print-answers-appendix"])
    part += nodes.paragraph(text="The answers and solutions of every chapter's exercises and "
                                 "the answers of its quiz, in the order of the book: try "
                                 "first, then look here.")
    current, last_exercise = None, None
    for (number, title), exercise, label, node in entries:
        if title != current:
            current, section = title, nodes.section("", nodes.title(text=title))
            part += section
        if exercise != last_exercise:
            section += nodes.paragraph("", "", nodes.strong(text=exercise), _latex(
                rf" \hfill\textit{{(page~\pageref*{{{label}-back}})}}"))
            last_exercise = exercise
        if isinstance(node, nodes.admonition):
            body = [child for child in node.children if not isinstance(child, nodes.title)]
        else:
            body = [node]
        section += [nodes.paragraph("", "", _latex(rf"\phantomsection\label{{{label}}}"))] + body
    return part


def place_appendix(app, doctree, part: nodes.section) -> None:
    """Put the appendix after the last chapter and before the page of references (the
    ``bibliography`` of sphinxcontrib-bibtex, whose entries the LaTeX writer prints at the very
    end of the book): a top-level section beside the others, so that it is a chapter too."""
    tops = [section for section in doctree.findall(nodes.section)
            if len(_sections_around(section)) == 1]
    cite = app.env.domains.get("cite")
    sources = {str(app.env.doc2path(key.docname)) for key in cite.bibliographies} if cite else set()
    references = next((top for top in tops if str(top.source) in sources), None)
    if references is None:
        tops[-1].parent.append(part)
    else:
        references.parent.insert(references.parent.index(references), part)


def make_preface(doctree) -> None:
    """The front page's own text and sections, under the title Preface (one level down)."""
    front = next(doctree.findall(nodes.section))
    start = 1  # after the book's title, which is the document's title
    end = next((i for i, child in enumerate(front.children)
                if i >= start and next(child.findall(addnodes.start_of_file), None) is not None),
               len(front.children))
    moved = front.children[start:end]
    if not moved:
        return
    preface = nodes.section("", nodes.title(text=PREFACE_TITLE), *moved, ids=["preface"])
    front.children[start:end] = [preface]
    preface.parent = front
    for child in moved:
        child.parent = preface


def setup(app):
    app.add_post_transform(PrintOutputs)
    app.connect("doctree-resolved", move_answers)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
