"""The page checks of scripts/browser_test.py catch the problems of issue #15 they guard against."""

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("selenium")
SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "browser_test.py"
spec = importlib.util.spec_from_file_location("browser_test", SCRIPT)
browser_test = importlib.util.module_from_spec(spec)
spec.loader.exec_module(browser_test)


def test_wrong_way_quote_is_caught():
    assert browser_test.balanced_quotes("after “It is the␣” the most likely")
    assert not browser_test.balanced_quotes("after “It is the “ the most likely")  # smartquotes slip
    assert not browser_test.balanced_quotes("an unclosed “quote")


def test_unnumbered_sections_and_book_wide_figure_numbers_are_caught():
    good = {"title": "3. Layer normalization", "sections": ["3.1 Mean", "Summary", "Exercises"],
            "figureNumbers": ["Fig. 3.1", "Fig. 3.2"]}
    assert browser_test.check_numbering(good) == []
    bad = {"title": "1b. Byte-pair encoding", "sections": ["Text is bytes"],
           "figureNumbers": ["Fig. 3"]}
    assert len(browser_test.check_numbering(bad)) == 2
    assert browser_test.check_numbering({"title": "References", "sections": ["x"],
                                         "figureNumbers": []}) == []


def test_reference_labels_must_read_like_the_citations_and_link():
    labels = {"Vaswani et al., 2017": True, "Zipf, 1949": False}
    assert browser_test.check_references(labels, {"Vaswani et al., 2017"}) == []
    problems = browser_test.check_references({"VSP+17": True, "Ba et al., 2016": False},
                                             {"Vaswani et al., 2017"})
    assert len(problems) == 3  # alpha label, no link, citation without an entry


def test_raw_tex_in_the_prose_is_caught():
    assert browser_test.raw_tex(["The model has ", " parameters, about 124 million."]) == []
    found = browser_test.raw_tex(["embeddings, $VD", "TD \\times TD", "a \\(x\\) left"])
    assert len(found) == 4 and "$VD" in found[0] and "\\times" in found[1]


def test_figure_text_size_in_css_px():
    # 10-point text, a 200-dpi PNG 2,000 pixels wide: 13.9 CSS px shown 1,000 wide, 4.7 at 342.
    assert round(browser_test.text_px(10, 200, 1000, 2000), 1) == 13.9
    assert browser_test.text_px(10, 200, 342, 2000) < browser_test.MIN_TEXT_PX


def test_invisible_characters_and_printed_tex_are_caught():
    assert browser_test.INVISIBLE.search("the model puts 0.63 on ' ' and 4 characters")
    assert not browser_test.INVISIBLE.search("the model puts 0.63 on “␣” and 4 characters")
    assert browser_test.RAW_MATH.search("the nucleus of $p = 0.9$ holds 17 characters")
    assert not browser_test.RAW_MATH.search("'a\\nb' costs 5 $ per line")


def test_the_phone_bars_fail_the_book_only_where_it_misses_them():
    from scripts.browser_phone import PhoneReport

    report = PhoneReport(cells=100, scrolling=[f"page: line {i}" for i in range(10)],
                         equations=5, smallest_px={"a: fig": 9.4},
                         weights={"a": 3 * 2**20, "b": 5 * 2**20}, interactive={"a"})
    assert report.problems() == []  # 10% scroll (the bar), b is heavy but not interactive
    report.scrolling.append("page: one more")
    report.cut.append("page: FFN(x) = ...")
    report.smallest_px["a: small"] = 6.7
    report.interactive.add("b")
    problems = report.problems()
    assert len(problems) == 4 and "11% of code cells" in problems[0]
    assert "cut" in problems[1] and "6.7 CSS px" in problems[2] and "b weighs 5.00 MB" in problems[3]


def test_a_number_the_prose_quotes_hidden_in_a_scrolling_output_fails_the_phone():
    from scripts.browser_phone import PhoneReport, quoted_and_hidden

    prose = "Greedy decoding repeats 84% of its lines; 1,024 positions, 2 heads and a loss of 0.5."
    hidden = [["84%", "greedy   100%   84%", prose], ["2", "heads  2", prose],
              ["0.50", "loss  0.50", prose], ["1,024", "T  1,024", prose], ["1,02", "x", prose],
              ["73%", "sampled   73%", prose]]
    found = quoted_and_hidden(hidden)
    assert found == ["84% in 'greedy   100%   84%'", "1,024 in 'T  1,024'"]  # not 2, 0.50 or 73%
    report = PhoneReport(cells=10, hidden_quotes=[f"page: {entry}" for entry in found])
    assert len(report.problems()) == 2 and "quoted by the prose" in report.problems()[0]
    assert PhoneReport(cells=10).problems() == []


def test_an_invisible_character_in_smart_quotes_is_caught():
    assert browser_test.INVISIBLE.search("the model puts 0.63 on ’ ’ and 4 characters")
