"""The checks of scripts/pdf_test.py catch what they guard against, on made-up output."""

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "pdf_test.py"
spec = importlib.util.spec_from_file_location("pdf_test", SCRIPT)
pdf_test = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pdf_test)

PAGE = '<page width="595.28" height="841.89">\n{}\n</page>'
WORD = '<word xMin="{}" yMin="100.0" xMax="{}" yMax="110.0">{}</word>'


def test_a_word_past_either_margin_is_caught():
    inside = PAGE.format(WORD.format(56.7, 538.0, "fits"))
    assert pdf_test.words_past_margin("<doc>" + inside, 56.69) == []
    right = PAGE.format(WORD.format(500.0, 545.0, "cut_off_code"))
    left = PAGE.format(WORD.format(40.0, 90.0, "&lt;hanging"))
    problems = pdf_test.words_past_margin("<doc>" + inside + right + left, 56.69)
    assert len(problems) == 2
    assert problems[0].startswith("page 2: 'cut_off_code'") and "'<hanging'" in problems[1]


def test_titles_match_across_ligatures_and_hyphenated_line_breaks():
    text = "Fine-tun-\ning \ufb01rst  steps"
    assert pdf_test.normalise(text) == "Fine-tuning first steps"


def test_missing_glyphs_and_unresolved_references_are_found_in_the_log():
    for line in ["Missing character: There is no 🤖 (U+1F916) in font DejaVu Sans Mono",
                 "LaTeX Warning: Hyper reference `04_attention:ch' on page 15 undefined",
                 "LaTeX Warning: Citation `vaswani2017' on page 3 undefined on input line 12.",
                 "LaTeX Warning: There were undefined references."]:
        assert pdf_test.UNRESOLVED.search(line), line
    assert not pdf_test.UNRESOLVED.search("Overfull \\vbox (2.3pt too high) at line 1252")


def test_a_line_wider_than_its_column_is_found_in_the_log():
    log = ("Overfull \\hbox (60.4728pt too wide) in paragraph at lines 21127--21127\n"
           "Overfull \\hbox (0.55475pt too wide) in paragraph at lines 300--301\n"
           "Overfull \\vbox (2.3pt too high) detected at line 1252\n")
    problems = pdf_test.overfull_lines(log)
    assert problems == ["LaTeX log: a line 60.5 pt wider than its column, "
                        "in paragraph at lines 21127--21127"]


def test_the_appendix_must_come_last_and_hold_every_answer():
    # Printed page numbers end each page; the title page and the contents have none.
    chapter = "Exercise 1.\nThe answer is in the appendix, page 2.\nThe solution is in the " \
              "appendix, page 2.\n1"
    appendix = f"{pdf_test.APPENDIX.upper()}\n1. Answers\n2"
    contents = f"Contents\n{pdf_test.APPENDIX} 2"
    book = ["GPT from Scratch", contents, chapter, appendix]
    assert pdf_test.printed_page_numbers(book) == {1: 3, 2: 4}
    assert pdf_test.check_appendix(book, expected=2) == []
    assert "no appendix" in pdf_test.check_appendix(book[:3], expected=2)[0]
    missing = pdf_test.check_appendix(book, expected=3)
    assert missing == ["2 lines point at the appendix, for 3 answers, solutions and quizzes "
                       "in the notebooks"]
    wrong_page = chapter.replace("page 2.", "page 1.", 1)
    assert "outside the appendix" in pdf_test.check_appendix(
        [book[0], contents, wrong_page, appendix], expected=2)[0]
    spoiled = chapter.replace("\n1", "\nAnswer\nThe loss barely moves.\n1")
    assert "still printed" in pdf_test.check_appendix(
        [book[0], contents, spoiled, appendix], expected=2)[0]
