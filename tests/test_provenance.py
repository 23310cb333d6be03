"""Every number in a chapter's prose comes from one of that chapter's outputs.

The book's rule, enforced: a number in a Markdown cell must be (a) printed by one of the notebook's cells
(an output or a generated sentence; the prose may round it) or a literal of its code (a setting the
cell runs with, restated), (b) structure, not a claim: a section,
chapter, exercise or figure number, a list item's number, a year, code, a citation or a link, or a
number in a sentence that cites its source ({cite}`...`): quoted, or (c) listed in
notebooks/text/quoted_numbers.txt with the reason it is quoted or derived. The same folder's math is
checked for the two slips that break rendering: a tab inside math, and a `$...$` span whose next
line starts with `+ ` or `- ` (Markdown reads it as a bullet).

The notebooks read are notebooks/*.ipynb, or those in $PROVENANCE_NOTEBOOKS (executed copies).
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = Path(os.environ.get("PROVENANCE_NOTEBOOKS", ROOT / "notebooks"))
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
ALLOWED_FILE = ROOT / "notebooks" / "text" / "quoted_numbers.txt"
PAGES = sorted([*(ROOT / "notebooks" / "text").glob("*.py"), *NOTEBOOKS,
                *(ROOT / "book").glob("*.md"), ROOT / "README.md"])

NUMBER = re.compile(r"(?<![\w.])(?<!\w[-−])[-−]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:e[-−+]?\d+)?")
SCALE = {"%": 0.01, "k": 1e3, "M": 1e6, "B": 1e9, " million": 1e6, " billion": 1e9}
REFERENCE = (r"(?:[Ss]ections?|[Cc]hapters?|[Ee]xercises?|[Ff]igures?|[Ee]quations?|[Tt]ables?|"
             r"[Pp]arts?|[Ss]teps?|[Ll]ayers?|[Hh]eads?|§|Eq\.)")
STRUCTURE = [
    re.compile(r"```.*?```", re.S),                        # fenced code
    re.compile(r"`[^`\n]*`"),                              # inline code, {cite}, {ref}, {numref}
    re.compile(r"\]\([^)]*\)|https?://\S+"),               # link targets
    re.compile(r"^\(.*\)=$", re.M),                        # labels
    re.compile(r"^#+ [\d.]+", re.M),                       # heading numbers
    re.compile(r"^\s*\d+\.\s", re.M),                      # list items
    re.compile(REFERENCE + r"\s+[\d.]+(?:(?:,\s*|\s+and\s+|\s+or\s+|–)[\d.]+)*"),
    re.compile(r"(?<![\d.])(?:19[5-9]\d|20[0-2]\d)(?!\d|\.\d)"),  # years
]


def _latex_numbers(text: str) -> str:
    """TeX spellings as plain numbers: 12{,}288 → 12,288; 4.7 \\times 10^{-4} → 4.7e-4."""
    text = text.replace("{,}", ",").replace("\\,", "")
    text = re.sub(r"(\d+(?:\.\d+)?)\s*\\times\s*10\^\{?([-−]?\d+)\}?", r"\1e\2", text)
    return re.sub(r"(?<![\d.])10\^\{?([-−]?\d+)\}?", r"1e\1", text)


def _value(token: str) -> float:
    return float(token.replace(",", "").replace("−", "-"))


def _decimals(token: str) -> int:
    mantissa = token.split("e")[0]
    return len(mantissa.split(".")[1]) if "." in mantissa else 0


def output_numbers(notebook: dict) -> list[float]:
    """Every number a code cell printed or displayed (text, generated Markdown, HTML tables)."""
    texts = []
    for cell in notebook["cells"]:
        for output in cell.get("outputs", []) if cell["cell_type"] == "code" else []:
            texts.append("".join(output.get("text", "")))
            texts += ["".join(v) for k, v in output.get("data", {}).items() if k.startswith("text/")]
    return sorted({abs(_value(m.group())) for m in NUMBER.finditer(_latex_numbers("\n".join(texts)))})


def prose_numbers(markdown: str):
    """(token, value, scale, context) for each number that claims something."""
    for pattern in STRUCTURE:
        markdown = pattern.sub(" ", markdown)
    for sentence in re.split(r"(?<=[.;:!?])\s+(?=[A-Z$(*])|\n\n", markdown):
        if "{cite}" in sentence:
            continue
        text = _latex_numbers(sentence)
        for match in NUMBER.finditer(text):
            after = text[match.end():match.end() + 8]
            scale = next((s for suffix, s in SCALE.items() if after.startswith(suffix)), 1.0)
            yield match.group(), abs(_value(match.group())), scale, " ".join(text.split())[:160]


def _printed(value: float, token: str, scale: float, printed: list[float]) -> bool:
    """Whether some output, rounded as the prose rounds it, reads `token` (alone or with its scale)."""
    if "e" in token:                                   # 4.7e-4: compare significant figures
        digits = len(token.split("e")[0].replace(".", "").lstrip("0")) or 1
        return any(y and math.isclose(float(f"{y:.{digits}g}"), value, rel_tol=1e-9) for y in printed)
    half = 0.5 * 10 ** -_decimals(token) + 1e-12
    return any(abs(y / s - value) <= half for y in printed for s in {1.0, scale})


def allowed_numbers() -> dict[str, set[str]]:
    """quoted_numbers.txt: `chapter number reason...` per line, `#` comments."""
    allowed: dict[str, set[str]] = {}
    for line in ALLOWED_FILE.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            chapter, number, reason = (line.split(maxsplit=2) + ["", ""])[:3]
            assert reason, f"quoted_numbers.txt: {line!r} gives no reason: add why it is quoted or derived"
            allowed.setdefault(chapter, set()).add(number)
    return allowed


def code_numbers(notebook: dict) -> set[float]:
    """The literals of the code cells: the settings a cell runs with, which the prose may restate."""
    code = "\n".join("".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code")
    return {abs(_value(m.group())) for m in NUMBER.finditer(code.replace("_", ""))}


def unprinted_numbers(path: Path, allowed: set[str]) -> list[tuple[str, str]]:
    notebook = json.loads(path.read_text())
    printed, literals = output_numbers(notebook), code_numbers(notebook)
    markdown = "\n\n".join("".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "markdown")
    return [(token, context) for token, value, scale, context in prose_numbers(markdown)
            if token not in allowed and value * scale not in literals and value not in literals
            and not _printed(value, token, scale, printed)]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_number_in_the_prose_is_printed_or_quoted(path):
    missing = unprinted_numbers(path, allowed_numbers().get(path.stem, set()))
    assert not missing, (
        f"{path.name}: {len(missing)} numbers in the prose that no output prints, e.g. "
        + "; ".join(f"{t!r} in '{c}'" for t, c in missing[:4])
        + ": write them from the cell's values (print them, or generate the sentence), or list a quoted "
          "constant in notebooks/text/quoted_numbers.txt with its reason")


def test_every_listed_number_is_still_in_its_chapter():
    """An entry whose number left the prose is stale: delete it, so the list stays the short list it is."""
    stale = []
    for chapter, numbers in allowed_numbers().items():
        tokens = {t for t, *_ in prose_numbers(_markdown(ROOT / "notebooks" / "text" / f"{chapter}.py"))}
        stale += [f"{chapter} {n}" for n in sorted(numbers - tokens)]
    assert not stale, f"quoted_numbers.txt lists numbers no longer in their chapter's prose: {stale}"


def math_slips(markdown: str) -> list[str]:
    """Tabs inside math, and `$...$` spans broken by a line that Markdown reads as a bullet."""
    slips = []
    for pattern in STRUCTURE[:2]:
        markdown = pattern.sub(" ", markdown)
    for paragraph in re.split(r"\n\s*\n", markdown):
        for span in re.findall(r"\$\$.*?\$\$|\$[^$]+\$", paragraph, re.S):
            if "\t" in span:
                slips.append(f"a tab inside {span[:40]!r} (was it \\t in \\times?)")
            slips += [f"a line starting {line.strip()[:2]!r} inside {span[:40]!r}: a bullet to Markdown"
                      for line in span.splitlines()[1:] if re.match(r"\s*[-+] ", line)]
    return slips


def _markdown(path: Path) -> str:
    if path.suffix == ".md":
        return path.read_text()
    jupytext = pytest.importorskip("jupytext", reason="reading the chapters needs jupytext")
    return "\n\n".join(c.source for c in jupytext.read(path).cells if c.cell_type == "markdown")


@pytest.mark.parametrize("path", PAGES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_math_renders_as_written(path):
    slips = math_slips(_markdown(path))
    assert not slips, f"{path.name}: " + "; ".join(slips[:3])


def test_the_checks_catch_what_they_promise():
    printed = output_numbers({"cells": [{"cell_type": "code", "outputs": [
        {"output_type": "stream", "text": "max |diff| 7.1623, typical 1.7311, 124,439,808\n"}]}]})
    claims = {t: (v, s) for t, v, s, _ in prose_numbers(
        "## 5.3 Post-LN\n\nThe largest difference, 7.16, against 1.73, and 6.79. In section 5.3, 124M.")}
    assert [t for t, (v, s) in claims.items() if not _printed(v, t, s, printed)] == ["6.79"]
    assert math_slips("$a \times b$") and math_slips("$a\n+ b$") and not math_slips("$a + b$\n- item")
