"""Check the PDF edition (``make pdf``) the way a reader of the printed book would see it.

Reads ``_build/latex/gpt-from-scratch.pdf`` and its LaTeX log with poppler's ``pdfinfo``,
``pdftotext``, ``pdfimages`` and ``pdftohtml`` and checks:

- its page count is in a sane range (a chapter cut off, or a page per output line, leaves it);
- the title of every page of ``_toc.yml`` is in the text;
- no word lies past the margins (``pdftotext -bbox``): code and outputs wrap, none is cut off;
- every figure of the notebooks is in it as an image, at 150 pixels per inch or more;
- the LaTeX log has no missing glyph ("Missing character"), no undefined reference or citation,
  and no line of a paragraph or a table cell wider than its column ("Overfull \\hbox"): in a
  table, such a line overprints the next cell;
- the bookmarks (``pdftohtml -xml`` lists them) keep the math of every section title that has
  some, as Unicode text (``# ## 4.5 Why divide by $\\sqrt{d_k}$`` in a text twin is the
  bookmark "4.5 Why divide by √dₖ": book/_ext/math_bookmarks.py), and hyperref dropped nothing
  from any bookmark ("Token not allowed in a PDF string" in the log);
- the print edition's appendix (book/_ext/print_edition.py): it follows every chapter; each
  exercise's answer, each solution and each chapter's quiz answers left a line in the chapter
  ("The answer is in the appendix, page N."), as many lines as the notebooks hold answers,
  solutions and quizzes, each naming a page of the appendix; and no answer is still printed
  where its exercise is (an answer box's title, "Answer", never ends up in a chapter).

Prints the size and the page count. Run it with ``make pdf`` (``make test-pdf``: a built PDF).
"""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
LATEX = ROOT / "_build" / "latex"
PDF = LATEX / "gpt-from-scratch.pdf"
PAGES = range(150, 600)  # 233 pages when written; fewer means text is missing
MIN_PPI = 150  # a figure prints sharp at this resolution or more
SLACK_PT = 1.0  # how far a glyph may pass the margin (rounding of the text positions)
CM = 72 / 2.54  # points per centimetre
WORD = re.compile(r'xMin="([\d.]+)" yMin="[\d.]+" xMax="([\d.]+)" yMax="[\d.]+">([^<]*)<')
# A missing glyph, an unresolved reference (a hyperlink's too) or citation in LuaLaTeX's log.
UNRESOLVED = re.compile(r"Missing character|reference .* undefined|Citation .* undefined|"
                        r"There were undefined references", re.IGNORECASE)
# A line wider than its paragraph or table column, by how much.
OVERFULL = re.compile(r"^Overfull \\hbox \(([\d.]+)pt too wide\) (.*)$", re.MULTILINE)
# hyperref left part of a title out of its bookmark; the next log line says what.
DROPPED = "Token not allowed in a PDF string"
# A section title with math in a text twin: "# ## 4.5 Why divide by $\sqrt{d_k}$".
MATH_TITLE = re.compile(r"^# #+ (.*\$.+\$.*)$", re.MULTILINE)
APPENDIX = "Appendix: answers and solutions"  # book/_ext/print_edition.py's title
POINTER = re.compile(r"The (?:answer is|solution is|answers are) in the appendix, page (\d+)\.")


def run(*command: str) -> str:
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout


def normalise(text: str) -> str:
    """Ligatures decomposed (NFKC), hyphenated line breaks joined, spaces collapsed."""
    text = unicodedata.normalize("NFKC", text)
    return re.sub(r"\s+", " ", re.sub(r"-\n(?=\w)", "", text))


def toc_titles() -> list[str]:
    """The first heading of every page of ``_toc.yml``, as the reader sees it."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]] + [c["file"] for part in toc["parts"] for c in part["chapters"]]
    titles = []
    for name in files:
        if (ROOT / f"{name}.ipynb").is_file():
            cells = json.loads((ROOT / f"{name}.ipynb").read_text())["cells"]
            text = "\n".join("".join(cell["source"]) for cell in cells
                             if cell["cell_type"] == "markdown")
        else:
            text = (ROOT / f"{name}.md").read_text()
        heading = re.search(r"^# (.+)$", text, re.MULTILINE)
        titles.append(re.sub(r"[*_`]", "", heading.group(1)).strip() if heading else name)
    return titles


def notebook_figures() -> int:
    """How many figures the chapters show: cells with a ``mystnb`` figure name and a displayed
    output (an interactive figure too: the PDF needs a static image of it)."""
    return sum(1 for notebook in sorted((ROOT / "notebooks").glob("*.ipynb"))
               for cell in json.loads(notebook.read_text())["cells"]
               if cell.get("metadata", {}).get("mystnb", {}).get("figure", {}).get("name")
               and any(output.get("data") for output in cell.get("outputs", [])))


def margins_cm() -> float:
    """The side margins set by ``_config.yml``'s ``sphinxsetup`` (``hmargin={2cm,2cm}``)."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    setup = config["sphinx"]["config"]["latex_elements"]["sphinxsetup"]
    return float(re.search(r"hmargin=\{([\d.]+)cm", setup).group(1))


def words_past_margin(bbox_html: str, margin_pt: float) -> list[str]:
    """Every word of ``pdftotext -bbox`` output outside the text block, with its page."""
    problems = []
    for number, page in enumerate(bbox_html.split("<page ")[1:], start=1):
        width = float(re.match(r'width="([\d.]+)"', page).group(1))
        for match in WORD.finditer(page):
            left, right = float(match.group(1)), float(match.group(2))
            word = html.unescape(match.group(3))
            if left < margin_pt - SLACK_PT or right > width - margin_pt + SLACK_PT:
                problems.append(f"page {number}: {word!r} lies past the margin "
                                f"({left:.1f} to {right:.1f} pt of {width:.0f})")
    return problems


def bookmarks() -> list[str]:
    """The PDF's outline, every entry's text (pdftohtml lists it whatever pages it reads)."""
    xml = run("pdftohtml", "-xml", "-i", "-q", "-stdout", "-f", "1", "-l", "1", str(PDF))
    return [html.unescape(item) for item in re.findall(r"<item[^>]*>([^<]*)</item>", xml)]


def math_title_bookmarks() -> dict[str, str]:
    """Every section title with math in the text twins, and the bookmark it should have: its
    math as Unicode text (``pdf_text``), its Markdown marks (`code`, **bold**) dropped."""
    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    from math_bookmarks import pdf_text

    expected = {}
    for twin in sorted((ROOT / "notebooks" / "text").glob("*.py")):
        for title in MATH_TITLE.findall(twin.read_text()):
            parts = title.strip().split("$")  # text, math, text ...
            text = [pdf_text(part) if i % 2 else re.sub(r"[*`]", "", part)
                    for i, part in enumerate(parts)]
            expected[title.strip()] = "".join(text)
    return expected


def overfull_lines(log: str) -> list[str]:
    """Each line of the log's text wider than its column by more than SLACK_PT."""
    return [f"LaTeX log: a line {float(width):.1f} pt wider than its column, {where}"
            for width, where in OVERFULL.findall(log) if float(width) > SLACK_PT]


def check_bookmarks(log: str) -> list[str]:
    problems, outline = [], bookmarks()
    for title, bookmark in math_title_bookmarks().items():
        if bookmark not in outline:
            number = title.split()[0] + " "
            found = [repr(entry) for entry in outline if entry.startswith(number)] or ["missing"]
            problems.append(f"bookmark of {title!r} is {found[0]}, not {bookmark!r}")
    lines = log.splitlines() + [""]
    for index, line in enumerate(lines):
        if DROPPED in line:  # "(hyperref)   removing `\times' on input line 7727."
            what = " ".join(lines[index + 1].split()[1:])
            problems.append(f"LaTeX log: a bookmark lost part of its title: {what}")
    return problems


def notebook_answers() -> int:
    """How many things the print edition moves to its appendix: answers (dropdown admonitions),
    solution cells and quizzes, in every chapter."""
    count = 0
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in json.loads(notebook.read_text())["cells"]:
            tags = cell.get("metadata", {}).get("tags", [])
            source = "".join(cell["source"])
            if cell["cell_type"] == "markdown":
                count += source.count(":class: dropdown")
            else:
                count += "solution" in tags or "quiz" in tags
    return count


def printed_page_numbers(pages: list[str]) -> dict[int, int]:
    """Each printed page number (the last line of a page's text) and its page in the file,
    counted from 1: the title and the contents come before page 1."""
    numbers = {}
    for index, page in enumerate(pages, start=1):
        lines = [line.strip() for line in page.splitlines() if line.strip()]
        if lines and lines[-1].isdigit():
            numbers.setdefault(int(lines[-1]), index)
    return numbers


def check_appendix(pages: list[str], expected: int) -> list[str]:
    """The appendix follows the chapters and holds every answer; the chapters point at it
    (``pages``: the PDF's text, one string per page; a pointer names a printed page number)."""
    starts = [n for n, page in enumerate(pages, start=1) if APPENDIX.lower() in page.lower()]
    if len(starts) < 2:  # the table of contents names it first
        return [f"no appendix titled {APPENDIX!r}"]
    start, physical = starts[1], printed_page_numbers(pages)
    problems, pointers = [], []
    for number, page in enumerate(pages[:start - 1], start=1):
        pointers += [(number, int(target)) for target in POINTER.findall(normalise(page))]
        if re.search(r"^Answer$", page, re.MULTILINE):
            problems.append(f"page {number}: an answer box is still printed in its chapter")
    if len(pointers) != expected:
        problems.append(f"{len(pointers)} lines point at the appendix, for {expected} answers, "
                        "solutions and quizzes in the notebooks")
    problems += [f"page {page}: points at page {target}, outside the appendix"
                 for page, target in pointers if physical.get(target, 0) < start]
    return problems


def check() -> list[str]:
    problems = []
    info = run("pdfinfo", str(PDF))
    pages = int(re.search(r"^Pages:\s+(\d+)", info, re.MULTILINE).group(1))
    if pages not in PAGES:
        problems.append(f"{pages} pages, expected {PAGES.start} to {PAGES.stop - 1}")
    text = normalise(run("pdftotext", "-enc", "UTF-8", str(PDF), "-"))
    for title in toc_titles():
        if normalise(title) not in text:
            problems.append(f"chapter title {title!r} is not in the PDF's text")
    boxes = run("pdftotext", "-bbox", str(PDF), "-")
    problems += words_past_margin(boxes, margins_cm() * CM)[:20]
    images = [line.split() for line in run("pdfimages", "-list", str(PDF)).splitlines()[2:]]
    images = [row for row in images if row[2] == "image"]
    figures = notebook_figures()
    if len(images) < figures:
        problems.append(f"{len(images)} images in the PDF for {figures} figures in the chapters")
    for row in images:
        if min(float(row[12]), float(row[13])) < MIN_PPI:
            problems.append(f"page {row[0]}: an image at {row[12]} ppi, at least {MIN_PPI}")
    log = (LATEX / "gpt-from-scratch.log").read_text(errors="replace")
    unresolved = {line.strip() for line in log.splitlines() if UNRESOLVED.search(line)}
    problems += [f"LaTeX log: {line}" for line in sorted(unresolved)]
    problems += overfull_lines(log)[:20]
    problems += check_bookmarks(log)
    pages_text = run("pdftotext", "-enc", "UTF-8", str(PDF), "-").split("\f")[:pages]
    problems += check_appendix(pages_text, notebook_answers())
    size = PDF.stat().st_size / 2**20
    print(f"{PDF.relative_to(ROOT)}: {pages} pages, {size:.1f} MiB, {len(images)} images "
          f"for {figures} figures, {len(bookmarks())} bookmarks "
          f"({len(math_title_bookmarks())} from titles with math)")
    return problems


def main() -> int:
    if not PDF.is_file():
        print(f"no {PDF.relative_to(ROOT)}: run `make pdf` first", file=sys.stderr)
        return 2
    problems = check()
    for problem in problems:
        print(f"FAIL {problem}")
    print(f"pdf test: {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
