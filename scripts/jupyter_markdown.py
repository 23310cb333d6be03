"""The book's MyST Markdown as Markdown that Jupyter and Colab render (CommonMark, $, HTML).

``BookIndex`` reads every page of ``_toc.yml`` once: its labels (``(label)=`` above a
heading), its figures (a code cell's ``mystnb.figure`` or a ``{figure}`` directive, numbered
per chapter as ``book/_ext/chapter_figure_numbers.py`` numbers them) and the labels of
``book/references.bib`` (the References page's own, ``book/_ext/author_year_labels.py``).
``Converter`` then rewrites one chapter's Markdown: targets and comments dropped; ``{ref}``,
``{numref}`` and ``{doc}`` as links to the rendered book's page and section, with a plain
text ("Chapter 6, section 6.4"); ``{cite}`` as "(Author, year)" linked to the References
page; admonitions as block quotes with a bold title, dropdowns as folded ``<details>``; a
``{figure}`` as its image (a cell attachment) and its numbered caption.

MyST's own parser (myst-parser's markdown-it set-up) finds the roles, targets and
directives, so nothing in code spans, code blocks or math is touched. The rewrite itself is
hand-written: no library renders markdown-it's tokens back to Markdown with such
substitutions (mdformat re-flows every paragraph), so each construct the parser found is
replaced in place and the rest of the text is left as it is. MyST with no rendering here
raises ``Unsupported``.
"""

from __future__ import annotations

import base64
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import yaml
from docutils.nodes import make_id
from docutils.parsers.rst.directives import admonitions
from docutils.parsers.rst.directives.images import Figure
from markdown_it.renderer import RendererHTML
from myst_parser.config.main import MdParserConfig
from myst_parser.parsers.directives import parse_directive_text
from myst_parser.parsers.mdit import create_md_parser
from pybtex.database import parse_file
from sphinx.util.nodes import split_explicit_title

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "book" / "_ext"))
sys.path.insert(0, str(ROOT))
from author_year_labels import AuthorYearLabels, AuthorYearSorting  # noqa: E402
from scripts.release import site_url  # noqa: E402  (the Pages workflow checks it too)

MYST = create_md_parser(MdParserConfig(
    enable_extensions={"dollarmath", "colon_fence", "amsmath"}), RendererHTML)
NUMBERED = re.compile(r"^(\d+[a-z]?(?:\.\d+)*)\.?\s+(.*)$")  # "6. Training", "6.4 The loop"
# A citation as the sentence's subject or object: "... it. {cite}`x` showed", "as {cite}`x`"
CITED_AS_NOUN = re.compile(
    r"(^|(?<!\bal)[.!?]\s+|\b(as|of|by|before|from|than|[Ff]ollowing)\s+)$")
ADMONITIONS = {cls.__name__.lower(): cls for cls in (
    admonitions.Admonition, admonitions.Attention, admonitions.Caution, admonitions.Danger,
    admonitions.Error, admonitions.Hint, admonitions.Important, admonitions.Note,
    admonitions.Tip, admonitions.Warning)}
IMAGE_TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg",
               ".svg": "image/svg+xml"}
DROPPED = {"myst_target", "myst_line_comment", "myst_block_break"}


class Unsupported(ValueError):
    """MyST with no Jupyter rendering here; the message names it, where, and the fix."""


@dataclass
class Target:
    page: str  # docname, "notebooks/06_training"
    anchor: str  # the id in the rendered page, "" for the page itself
    title: str  # the heading's text without its number, or "Fig. 6.2"
    number: str | None = None  # "6" (a chapter), "6.4" (a section), "6.2" (a figure)


@dataclass
class BookIndex:
    site: str  # the rendered book's URL, ending in "/"
    pages: dict[str, Target] = field(default_factory=dict)
    labels: dict[str, Target] = field(default_factory=dict)
    citations: dict[str, str] = field(default_factory=dict)  # key: "Vaswani et al., 2017"

    @classmethod
    def read(cls, root: Path = ROOT) -> BookIndex:
        index = cls(site_url(yaml.safe_load((root / "_config.yml").read_text())))
        toc = yaml.safe_load((root / "_toc.yml").read_text())
        pages = [toc["root"]] + [chapter["file"] for part in toc.get("parts", [])
                                 for chapter in part.get("chapters", [])]
        notebooks = [f"notebooks/{path.stem}"
                     for path in sorted((root / "notebooks").glob("*.ipynb"))]
        pages += [page for page in notebooks if page not in pages]
        for page in pages:
            index._read_page(root, page)
        index._read_citations(root / "book" / "references.bib")
        return index

    def url(self, target: Target) -> str:
        anchor = f"#{target.anchor}" if target.anchor else ""
        return f"{self.site}{target.page}.html{anchor}"

    def _read_page(self, root: Path, page: str) -> None:
        path = root / f"{page}.ipynb"
        cells = nbformat.read(path, as_version=4).cells if path.exists() else [
            nbformat.v4.new_markdown_cell((root / f"{page}.md").read_text())]
        figures, label, chapter = 0, None, None
        for cell in cells:
            if cell.cell_type == "code" and "figure" in cell.metadata.get("mystnb", {}):
                figures += 1
                name = cell.metadata.mystnb["figure"].get("name")
                self._add_figure(name, page, chapter, figures)
            tokens = MYST.parse(cell.source) if cell.cell_type == "markdown" else []
            for token, following in zip(tokens, tokens[1:] + [None]):
                if token.type == "myst_target":
                    label = token.content
                    continue
                if token.type == "heading_open":
                    number, title = split_number(following.content)
                    if page not in self.pages:
                        self.pages[page] = Target(page, "", title, number)
                        chapter = number
                    if label:
                        self.labels[label] = Target(page, make_id(label), title, number)
                elif token.type in ("fence", "colon_fence") and token.info.startswith(
                        "{figure}"):
                    figures += 1
                    argument = token.info.removeprefix("{figure}")
                    options = parse_directive_text(Figure, argument, token.content).options
                    name = options.get("name")
                    self._add_figure(name, page, chapter, figures)
                label = None

    def _add_figure(self, name: str | None, page: str, chapter: str | None, n: int) -> None:
        number = f"{chapter}.{n}" if chapter else str(n)
        if name:
            self.labels[name] = Target(page, make_id(name), f"Fig. {number}", number)

    def _read_citations(self, bib: Path) -> None:
        """The References page's labels, from its pybtex style (the book's extension)."""
        entries = AuthorYearSorting().sort(list(parse_file(bib).entries.values()))
        labels = AuthorYearLabels().format_labels(entries)
        self.citations = {entry.key: label for entry, label in zip(entries, labels)}


def split_number(heading: str) -> tuple[str | None, str]:
    match = NUMBERED.match(heading.strip())
    return (match[1], match[2]) if match else (None, heading.strip())


@dataclass
class Converter:
    index: BookIndex
    page: str  # the chapter's docname, for relative paths, numbers and messages
    figures: int = 0  # figures met so far, numbered as BookIndex numbers them
    attachments: dict[str, dict] = field(default_factory=dict)  # the current cell's images

    def markdown(self, text: str) -> str:
        """``text`` with every MyST construct rewritten, the rest unchanged."""
        lines = text.splitlines()
        edits = []  # (first line, end line, new text or None), disjoint
        for token in MYST.parse(text):
            footnote = any(c.type == "footnote_ref" for c in token.children or [])
            if token.type in ("math_block_label", "footnote_reference_open") or footnote:
                kind = "footnote_ref" if footnote else token.type
                line = lines[token.map[0]] if token.map else ""
                raise Unsupported(f"{self.page}: {kind} ({line.strip()!r:.60}) has no "
                                  "Jupyter rendering; write it without a label or a "
                                  "footnote")
            if token.type in DROPPED:
                edits.append((*token.map, None))
            elif token.type in ("fence", "colon_fence") and token.info.startswith("{"):
                edits.append((*token.map, self._directive(token, lines[token.map[0]])))
            elif token.type == "inline" and any(c.type == "myst_role"
                                                for c in token.children):
                source = "\n".join(lines[token.map[0]:token.map[1]])
                edits.append((*token.map, self._roles(source, token.children)))
        for start, end, new in sorted(edits, reverse=True):
            lines[start:end] = [] if new is None else new.split("\n")
        return "\n".join(lines).strip("\n")

    def caption_cell(self, figure: dict) -> str:
        """A figure cell's caption, numbered as the book prints it under the figure."""
        self.figures += 1
        return f"**{self._figure_number()}.** {self.markdown(figure.get('caption', ''))}"

    def _figure_number(self) -> str:
        page = self.index.pages.get(self.page)
        chapter = page.number if page else None
        return f"Fig. {chapter}.{self.figures}" if chapter else f"Fig. {self.figures}"

    def _roles(self, source: str, children) -> str:
        """``source`` (an inline's lines) with its roles, in order, replaced."""
        out, position = [], 0
        for role in (c for c in children if c.type == "myst_role"):
            name, content = role.meta["name"], role.content
            words = r"\s+".join(map(re.escape, content.split()))
            pattern = re.compile(r"\{" + re.escape(name) + r"\}(`+)\s*" + words + r"\s*\1")
            match = pattern.search(source, position)
            if match is None:
                raise Unsupported(f"{self.page}: {{{name}}}`{content}` is not in the text")
            out.append(source[position:match.start()])
            out.append(self._role(name, " ".join(content.split()), "".join(out)))
            position = match.end()
        return "".join(out) + source[position:]

    def _role(self, name: str, content: str, before: str) -> str:
        if name in ("ref", "numref", "doc"):
            explicit, title, target = split_explicit_title(content)
            found = self._page(target) if name == "doc" else self.index.labels.get(target)
            if found is None:
                kind = "page" if name == "doc" else "label"
                raise Unsupported(f"{self.page}: {{{name}}}`{content}`: no such {kind} in "
                                  "the pages of _toc.yml")
            if name == "numref":
                text = found.title if not explicit else title.replace(
                    "{number}", found.number or "")
            else:
                text = title if explicit else self._ref_text(found, before)
            return f"[{text}]({self.index.url(found)})"
        if name in ("cite", "cite:p", "cite:t"):
            # The book's {cite} reads "[Vaswani et al., 2017]" wherever it stands; here it
            # is "Vaswani et al. (2017)" as the sentence's subject or object, else "(...)".
            textual = name == "cite:t" or (name == "cite" and CITED_AS_NOUN.search(before))
            links = []
            for key in (k.strip() for k in content.split(",")):
                if key not in self.index.citations:
                    raise Unsupported(f"{self.page}: {{cite}}`{key}`: not in "
                                      "book/references.bib")
                url = f"{self.index.site}book/references.html#{make_id('cite-' + key)}"
                who, _, year = self.index.citations[key].rpartition(", ")
                text = f"{who} ({year})" if textual else f"{who}, {year}"
                links.append(f"[{text}]({url})")
            return "; ".join(links) if textual else f"({'; '.join(links)})"
        if name == "math":
            return f"${content}$"
        raise Unsupported(f"{self.page}: the role {{{name}}} has no Jupyter rendering; add "
                          "one to scripts/jupyter_markdown.py (Converter._role) or write "
                          "plain text")

    def _page(self, target: str) -> Target | None:
        base = "" if target.startswith("/") else str(Path(self.page).parent) + "/"
        return self.index.pages.get((base + target).strip("/").removesuffix(".md"))

    def _ref_text(self, target: Target, before: str) -> str:
        """"Chapter 6, *Training on Tiny Shakespeare*", "Chapter 6, section 6.4",
        "section 6.4" (in the same chapter); no chapter named twice ("Chapter 6 (")."""
        chapter = self.index.pages.get(target.page)
        number = chapter.number if chapter else None
        here = target.page == self.page
        if number is None:
            return target.title
        if target.number and target.number != number:  # a numbered section
            return f"{'' if here else f'Chapter {number}, '}section {target.number}"
        if (here and target.number is None) or re.search(
                rf"Chapter {re.escape(number)}\s*[(,]\s*$", before):
            return f"*{target.title}*"
        return f"Chapter {number}, *{target.title}*"

    def _directive(self, token, opening: str) -> str:
        """An admonition as a block quote (a dropdown as a folded <details>), a figure as
        its image and caption; indented, or quoted, as the directive was."""
        name, _, argument = token.info[1:].partition("}")
        prefix = re.match(r"[ \t>]*", opening)[0]
        if name in ADMONITIONS:
            parsed = parse_directive_text(ADMONITIONS[name], argument.strip(),
                                          token.content)
            title = parsed.arguments[0] if parsed.arguments else name.capitalize()
            body = self.markdown("\n".join(parsed.body))
            if "dropdown" in parsed.options.get("class", []):
                text = (f"<details>\n<summary><b>{title}</b></summary>\n\n{body}\n\n"
                        "</details>")
            else:
                text = "\n".join(f"> {line}".rstrip()
                                 for line in [f"**{title}**", ""] + body.split("\n"))
        elif name == "figure":
            text = self._figure(argument.strip(), token.content)
        else:
            raise Unsupported(f"{self.page}: the directive {{{name}}} has no Jupyter "
                              "rendering; add one to scripts/jupyter_markdown.py "
                              "(Converter._directive)")
        return "\n".join((prefix + line).rstrip() for line in text.split("\n"))

    def _figure(self, argument: str, content: str) -> str:
        """A ``{figure}``: its image as an attachment of the cell, then its caption."""
        parsed = parse_directive_text(Figure, argument, content)
        path = ROOT / argument.lstrip("/") if argument.startswith("/") else \
            (ROOT / self.page).parent / argument
        if path.suffix.lower() not in IMAGE_TYPES or not path.is_file():
            raise Unsupported(f"{self.page}: the figure {argument!r} is not a "
                              f"{'/'.join(IMAGE_TYPES)} file at {path}: point the "
                              "directive at an image of the repository")
        mime = IMAGE_TYPES[path.suffix.lower()]
        data = path.read_text() if mime == "image/svg+xml" else \
            base64.b64encode(path.read_bytes()).decode()
        attachment = make_id(parsed.options.get("name") or path.stem) + path.suffix.lower()
        self.attachments[attachment] = {mime: data}
        self.figures += 1
        caption = self.markdown("\n".join(parsed.body))
        return (f"![{parsed.options.get('alt', '')}](attachment:{attachment})\n\n"
                f"**{self._figure_number()}.** {caption}").rstrip()
