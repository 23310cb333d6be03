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


# ------------------------------------------------------------------ claims the number check cannot see

UNCHECKED_FILE = ROOT / "notebooks" / "text" / "unchecked_claims.txt"
TWINS = sorted((ROOT / "notebooks" / "text").glob("[0-9]*.py"))
CHAPTER_REF = re.compile(r"\{ref\}`(ch-[\w-]+)`|\b[Cc]hapters? (\d+)")
COMPARATIVE = re.compile(r"\b(?:lower|higher|better|worse|faster|slower|fewer|more|less|larger|"
                         r"smaller|greater|beats?|twice|a (?:half|third|quarter|fifth|tenth) as)\b")
SAMPLE_TALK = re.compile(r"\bsampl|\bgenerat|\btemperature|\bdecod", re.I)
QUOTE = re.compile(r'"([^"\n]{2,80})"|“([^”\n]{2,80})”')
DIRECTION = {"more": 1, "higher": 1, "larger": 1, "greater": 1, "above": 1,
             "less": -1, "lower": -1, "smaller": -1, "fewer": -1, "below": -1}
SPELLED = re.compile(r"\s*(?:two|three|four|five|six|ten|half|twice|once|a (?:half|third|quarter|"
                     r"fifth|tenth))\b")
CLAUSE = re.compile(r"[;:]|\.(?!\d)|\n")


def _sentences(markdown: str) -> list[str]:
    markdown = STRUCTURE[0].sub(" ", markdown)  # fenced code
    return [" ".join(s.split()) for s in re.split(r"(?<=[.;!?])\s+(?=[A-Z{$(*])|\n\n", markdown)]


def chapter_labels() -> dict[str, str]:
    """Each chapter's MyST label (``ch-training``) -> its twin's stem (``06_training``)."""
    labels = {}
    for twin in TWINS:
        for label in re.findall(r"^# \((ch-[\w-]+)\)=$", twin.read_text(), re.M):
            labels[label] = twin.stem
    return labels


def cross_chapter_claims(stem: str, markdown: str, labels: dict[str, str]) -> list[str]:
    """Sentences of chapter ``stem`` that name another chapter and compare something: a claim about
    another chapter's result, which no output of this chapter can check."""
    own, found = int(stem[:2]), []
    for sentence in _sentences(markdown):
        others = [m for m in CHAPTER_REF.finditer(sentence)
                  if (m.group(1) and labels.get(m.group(1), stem) != stem)
                  or (m.group(2) and int(m.group(2)) != own)]
        if others and COMPARATIVE.search(STRUCTURE[1].sub(" ", sentence)):
            found.append(sentence)
    return found


def unchecked_claims() -> dict[tuple[str, str], list[str]]:
    """unchecked_claims.txt: `chapter | cross or quote | the claim's first words | why it stands`."""
    listed: dict[tuple[str, str], list[str]] = {}
    for line in UNCHECKED_FILE.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            chapter, kind, start, reason = ([p.strip() for p in line.split("|")] + ["", "", ""])[:4]
            assert kind in ("cross", "quote") and reason, (
                f"unchecked_claims.txt: {line!r}: give the kind (cross or quote) and the reason")
            listed.setdefault((chapter, kind), []).append(start)
    return listed


def unlisted(found: list[str], listed: list[str]) -> list[str]:
    return [s for s in found if not any(s.startswith(start) for start in listed)]


def _outputs_and_code(notebook: dict) -> str:
    texts = []
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            texts.append("".join(cell["source"]))
            for output in cell.get("outputs", []):
                texts.append("".join(output.get("text", "")))
                texts += ["".join(v) for k, v in output.get("data", {}).items() if k.startswith("text/")]
    return "\n".join(texts)


def unprinted_quotes(markdown: str, printed: str) -> list[str]:
    """Quoted strings in a paragraph about samples that no output (or code) of the chapter holds:
    examples of generated text must be quoted from the run."""
    markdown = STRUCTURE[1].sub(" ", STRUCTURE[0].sub(" ", markdown))
    markdown = re.sub(r"<[a-z][^>\n]*>", " ", markdown)  # an HTML element's attributes: no prose
    return [q for paragraph in re.split(r"\n\s*\n", markdown) if SAMPLE_TALK.search(paragraph)
            for m in QUOTE.finditer(paragraph) if (q := m.group(1) or m.group(2)) not in printed]


def generated_sentences(notebook: dict) -> list[str]:
    """The generated Markdown of a notebook's outputs, sentence by sentence."""
    texts = ["".join(output["data"]["text/markdown"])
             for cell in notebook["cells"] if cell["cell_type"] == "code"
             for output in cell.get("outputs", []) if "text/markdown" in output.get("data", {})]
    return [s for text in texts for s in _sentences(text)]


def misread_comparisons(sentence: str) -> list[str]:
    """Comparison words that their numbers contradict ("0.2, higher than 0.5"), or that compare a
    printed number with something the sentence does not print ("0.07 are more than it lost")."""
    wrong = []
    text = _latex_numbers(STRUCTURE[1].sub(" ", sentence)).replace("−", "-")
    for clause in CLAUSE.split(text):
        for m in re.finditer(r"\b(" + "|".join(DIRECTION) + r")\b( than)?", clause):
            before = list(NUMBER.finditer(clause[:m.start()]))
            after = NUMBER.search(clause[m.end():])
            if m.group(2) and before and not after and not SPELLED.match(clause[m.end():]):
                wrong.append(f"{m.group(1)} than something unprinted in '{clause.strip()}'")
            elif before and after and clause[before[-1].end():m.start()].count(" ") <= 8 \
                    and clause[m.end():m.end() + after.start()].count(" ") <= 6:
                a, b = _value(before[-1].group()), _value(after.group())
                if (a - b) * DIRECTION[m.group(1)] < 0:
                    wrong.append(f"{a:g} {m.group(1)}{m.group(2) or ''} {b:g} in '{clause.strip()}'")
    return wrong


def _twin_and_notebook(stem: str) -> tuple[str, dict | None]:
    notebook = NOTEBOOK_DIR / f"{stem}.ipynb"
    return (_markdown(ROOT / "notebooks" / "text" / f"{stem}.py"),
            json.loads(notebook.read_text()) if notebook.is_file() else None)


@pytest.mark.parametrize("twin", TWINS, ids=lambda p: p.stem)
def test_no_chapter_compares_another_chapters_result(twin):
    found = unlisted(cross_chapter_claims(twin.stem, _markdown(twin), chapter_labels()),
                     unchecked_claims().get((twin.stem, "cross"), []))
    assert not found, (
        f"{twin.name}: {len(found)} sentences compare something while naming another chapter, which "
        f"no output of this chapter can check, e.g. {found[0][:200]!r}: say it where it is measured, "
        "generate it from numbers printed here, or list it in notebooks/text/unchecked_claims.txt "
        "with how it was checked")


@pytest.mark.parametrize("twin", TWINS, ids=lambda p: p.stem)
def test_examples_of_generated_text_are_quoted_from_the_run(twin):
    markdown, notebook = _twin_and_notebook(twin.stem)
    if notebook is None:
        pytest.skip(f"no {twin.stem}.ipynb to read the outputs of")
    found = unlisted(unprinted_quotes(markdown, _outputs_and_code(notebook)),
                     unchecked_claims().get((twin.stem, "quote"), []))
    assert not found, (
        f"{twin.name}: quoted examples of generated text that no output holds: {found[:4]}: quote "
        "them from the run (or generate the sentence), or list a term in unchecked_claims.txt")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_generated_comparisons_agree_with_their_numbers(path):
    wrong = [w for s in generated_sentences(json.loads(path.read_text()))
             for w in misread_comparisons(s)]
    assert not wrong, (f"{path.name}: generated sentences whose comparison words misread their "
                       f"numbers: {wrong[:3]}: fix the template (compare sizes as sizes, print "
                       "both sides) and re-execute the chapter")


def test_every_unchecked_claim_is_still_in_its_chapter():
    labels, stale = chapter_labels(), []
    for (chapter, kind), starts in unchecked_claims().items():
        markdown, notebook = _twin_and_notebook(chapter)
        found = (cross_chapter_claims(chapter, markdown, labels) if kind == "cross" else
                 unprinted_quotes(markdown, _outputs_and_code(notebook)) if notebook else [])
        stale += [f"{chapter} {start!r}" for start in starts
                  if not any(s.startswith(start) for s in found)]
    assert not stale, f"unchecked_claims.txt lists claims no longer in their chapter: {stale}"


def _with(path: Path, tmp_path: Path, old: str, new: str) -> Path:
    """A copy of the twin ``path`` with ``new`` put back to ``old``."""
    text = path.read_text()
    assert new in text, f"{path.name} no longer holds {new[:60]!r}: update this test"
    copy = tmp_path / path.name
    copy.write_text(text.replace(new, old))
    return copy


def test_the_checks_fail_on_the_errata_put_back(tmp_path):
    """Chapter 1's reversed claim about Chapter 6, Chapter 7's quotes of an earlier model, and
    Chapter 9's gain "more than" a larger loss, each put back into a copy, are each caught."""
    text = ROOT / "notebooks" / "text"
    ch1 = _with(text / "01_tokens_and_batches.py", tmp_path,
                "# its capacity goes to how they combine. {ref}`ch-training` measures it on Tiny "
                "Shakespeare: trained on\n# GPT-2's tokens, a network of the same shape reaches a lower "
                "loss per character than on characters,\n# having seen a fifth as many.\n",
                "# its capacity goes to how they combine. {ref}`ch-training` puts it to a test on Tiny "
                "Shakespeare: a\n# network of one shape trained on characters and on GPT-2's tokens, "
                "both losses counted per character,\n# beside how many characters each model saw in "
                "training.\n")
    listed = unchecked_claims().get((ch1.stem, "cross"), [])
    assert not unlisted(cross_chapter_claims(ch1.stem, _markdown(text / ch1.name), chapter_labels()),
                        listed)
    assert unlisted(cross_chapter_claims(ch1.stem, _markdown(ch1), chapter_labels()), listed) == [
        "{ref}`ch-training` measures it on Tiny Shakespeare: trained on GPT-2's tokens, a network "
        "of the same shape reaches a lower loss per character than on characters, having seen a "
        "fifth as many."]

    ch7 = _with(text / "07_generation.py", tmp_path,
                "# All five use the same random numbers, so they start alike and drift apart. At "
                "temperature 0.5 the text is\n# built from the commonest short words (\"and the the "
                "more my my\"); at 1.5 rare characters land inside words\n# (\"ajes!t\", "
                "\"HyXeriveMes\").\n",
                "# All five use the same random numbers, so they start alike and drift apart. Scored "
                "as the longer\n# samples are below (the share of their words that are words of the "
                "training text):\n")
    _, notebook = _twin_and_notebook(ch7.stem)
    printed = _outputs_and_code(notebook)
    assert not unprinted_quotes(_markdown(text / ch7.name), printed)
    assert unprinted_quotes(_markdown(ch7), printed) == ["and the the more my my", "ajes!t",
                                                         "HyXeriveMes"]

    from gpt_from_scratch.book.finetune_prose import style_text

    old = ("The adapter helps most on the speaker it was trained on: the 0.073 nats it gained there "
           "are more than it gained (or lost) elsewhere.")
    windows = lambda mean: [mean + 0.1 * (-1) ** i for i in range(48)]  # noqa: E731
    new = style_text("ROMEO", {"ROMEO": windows(5.0), "others": windows(5.0)},
                     {"ROMEO": windows(4.927), "others": windows(5.087)})
    for sentence, caught in ((old, True), (new, False)):
        copy = {"cells": [{"cell_type": "code", "source": "", "outputs": [
            {"output_type": "display_data", "data": {"text/markdown": sentence}}]}]}
        wrong = [w for s in generated_sentences(copy) for w in misread_comparisons(s)]
        assert bool(wrong) == caught, (sentence, wrong)
    assert misread_comparisons("It reaches 1.99 nats, lower than the character model's 1.72.")
    assert not misread_comparisons("It reaches 1.99 nats, higher than the character model's 1.72.")
    assert not misread_comparisons("by more than two standard errors (+4.1 ± 1.5 points at 32).")


def test_the_instructors_runtime_table_is_each_chapters_committed_run():
    """book/instructors.md's runtime per chapter is what each committed chapter recorded of itself
    (``book.timing.cell_seconds``): re-executing a chapter changes its row, and this says which."""
    from gpt_from_scratch.book.timing import cell_seconds

    page = (ROOT / "book" / "instructors.md").read_text(encoding="utf-8")
    section = page.split("## Runtime per chapter", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| (\d+b?)\. [^|]+\| (\d+) \|$", section, re.MULTILINE))
    recorded = {p.name.split("_")[0].lstrip("0"): round(sum(cell_seconds(json.loads(
        p.read_text())).values())) for p in sorted((ROOT / "notebooks").glob("*.ipynb"))}
    assert rows == {k: str(v) for k, v in recorded.items()}, (
        "book/instructors.md's runtime table is not the committed runs': write "
        + ", ".join(f"{k}: {v} s" for k, v in recorded.items()))
