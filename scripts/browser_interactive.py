"""Browser checks of the interactive figures and the quizzes (called by
scripts/browser_test.py).

On each page: every interactive figure (gpt_from_scratch.book.interactive) is drawn by the
plotly.js the book serves from its own ``_static`` (no request leaves the local server);
hovering over a heatmap shows a query, a key and a weight, and another cell shows another; a
slider step, a button or a menu entry changes what is drawn. Every chapter has a quiz;
picking an answer and typing a number (a wrong one, a near miss, then the right one written
as readers write it, 1.244e+08, read from the question) each show their feedback.
"""

from __future__ import annotations

import html
import re
import time

from selenium.webdriver.common.by import By
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.keys import Keys

# Interactive figures each chapter must show.
FIGURES = {"notebooks/04_attention": 1, "notebooks/07_generation": 1, "notebooks/08_gpt2_weights": 1}

# What a figure draws, as a string that changes whenever the picture does: the heatmap
# images and the bars of the visible traces.
DRAWN = """
const gd = arguments[0];
const images = [...gd.querySelectorAll('image')].map(i => i.getAttribute('href')).join('|');
const bars = [...gd.querySelectorAll('.bars path')].map(p => p.getAttribute('d')).join('|');
return images + '#' + bars;
"""
HOVER_TEXT = "return [...arguments[0].querySelectorAll('.hoverlayer text')]" \
             ".map(t => t.textContent).join(' ');"
EXTERNAL = """
const here = location.origin;
return performance.getEntriesByType('resource').map(r => r.name)
  .filter(name => !name.startsWith(here) && !name.startsWith('data:'));
"""


def _hover(driver, figure, fx: float, fy: float) -> str:
    """Move the mouse to a fraction of the plot area and return the hover label's text."""
    drag = figure.find_element(By.CSS_SELECTOR, ".nsewdrag")
    size = drag.size
    ActionChains(driver).move_to_element_with_offset(
        drag, int((fx - 0.5) * size["width"]), int((fy - 0.5) * size["height"])).perform()
    time.sleep(0.3)
    return driver.execute_script(HOVER_TEXT, figure)


def _changes(driver, figure, *clicks) -> bool:
    """Whether clicking the given (element, x fraction) pairs in turn changes the picture."""
    before = driver.execute_script(DRAWN, figure)
    for find, fraction in clicks:
        element = find()
        offset = int((fraction - 0.5) * element.size["width"])
        ActionChains(driver).move_to_element_with_offset(element, offset, 0).click().perform()
        time.sleep(0.4)
    return driver.execute_script(DRAWN, figure) != before


def check_figure(driver, figure, name: str) -> list[str]:
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", figure)
    time.sleep(0.3)
    if "js-plotly-plot" not in (figure.get_attribute("class") or ""):
        return [f"{name}: not drawn (plotly.js did not run)"]
    problems = []
    if figure.find_elements(By.CSS_SELECTOR, ".heatmaplayer image, .hm image"):
        first, second = _hover(driver, figure, 0.15, 0.85), _hover(driver, figure, 0.5, 0.95)
        if not ("query" in first and "key" in first and "weight" in first):
            problems.append(f"{name}: hovering over a cell shows {first!r}, not query, key, weight")
        elif first == second:
            problems.append(f"{name}: two cells show the same hover text {first!r}")

    def last(selector):
        return lambda: figure.find_elements(By.CSS_SELECTOR, selector)[-1]

    def second(selector):
        return lambda: figure.find_elements(By.CSS_SELECTOR, selector)[1]

    controls = []
    if figure.find_elements(By.CSS_SELECTOR, ".slider-rail-touch-rect"):  # either end: one may be
        rail = last(".slider-rail-touch-rect")  # where the slider starts
        controls.append(("the slider", [(rail, 0.95)], [(rail, 0.05)]))
    if figure.find_elements(By.CSS_SELECTOR, ".updatemenu-header"):  # a drop-down menu
        controls.append(("the menu", [(last(".updatemenu-header"), 0.5),
                                      (second(".updatemenu-dropdown-button"), 0.5)]))
    elif figure.find_elements(By.CSS_SELECTOR, ".updatemenu-button"):
        controls.append(("the buttons", [(last(".updatemenu-button"), 0.5)]))
    for label, *tries in controls:
        if not any(_changes(driver, figure, *clicks) for clicks in tries):
            problems.append(f"{name}: the picture did not change when {label} was used")
    return problems


def _click(driver, element) -> None:
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", element)
    element.click()
    time.sleep(0.2)


def check_quiz(driver, page: str) -> list[str]:
    """A chapter's quiz: a wrong and the right choice, a wrong and the right number, each with
    its own feedback."""
    quizzes = driver.find_elements(By.CSS_SELECTOR, ".Quiz")
    choices = [q for q in quizzes if q.find_elements(By.CSS_SELECTOR, ".MCButton")]
    numbers = [q for q in quizzes if q.find_elements(By.CSS_SELECTOR, "input.Input-text")]
    if not page.startswith("notebooks/"):
        return []
    if not (choices and numbers):
        return [f"the quiz has {len(choices)} multiple-choice and {len(numbers)} numeric "
                "questions: a chapter ends with both"]
    problems = []
    buttons = choices[0].find_elements(By.CSS_SELECTOR, ".MCButton")
    for correct in ("false", "true"):
        button = next(b for b in buttons if b.get_attribute("data-correct") == correct)
        _click(driver, button)
        shown = choices[0].find_element(By.CSS_SELECTOR, ".Feedback").text.strip()
        expected = html.unescape(re.sub(r"<[^>]+>", "", button.get_attribute("data-feedback")))
        if shown != expected.strip():
            problems.append(f"picking a quiz answer (correct={correct}) showed {shown!r}")
    field = numbers[0].find_element(By.CSS_SELECTOR, "input.Input-text")
    low, high = driver.execute_script(
        "return JSON.parse(arguments[0].dataset.answers)[0].range;", field)
    middle, tolerance = (low + high) / 2, (high - low) / 2
    far = repr(middle + 20 * tolerance + 0.1 * abs(middle) + 1000.0)  # no rounding explains it
    near = repr(middle + 3 * tolerance)  # a digit off: told to check the rounding
    written = f"{middle:.3e}"  # as readers write it (quiz.NUMBER_JS): 1.244e+08 for 124439808
    # and with a suffix, typed key by key past jupyterquiz's own filter: 124.4M, 50.26k
    suffixed = (f"{middle / 1e6:.4g}M" if abs(middle) >= 1e6 else f"{middle / 1e3:.4g}k"
                if abs(middle) >= 1e4 else f"{middle:.4g}")
    for typed, expected in ((far, "Not quite"), (near, "Close"), (written, "Correct"),
                            (suffixed, "Correct")):
        _click(driver, field)
        field.clear()
        field.send_keys(typed + Keys.ENTER)
        time.sleep(0.2)
        shown = numbers[0].find_element(By.CSS_SELECTOR, ".Feedback").text
        if expected not in shown:
            problems.append(f"typing {typed} in a numeric question showed {shown!r}, "
                            f"not {expected!r} (a quiz from before quiz.NUMBER_JS: re-execute "
                            "the chapter)")
    return problems


def check_interactive(driver, page: str) -> list[str]:
    """The interactive figures and the quiz of one page, already loaded at the wide width."""
    figures = driver.find_elements(By.CSS_SELECTOR, ".gfs-interactive")
    problems = []
    if len(figures) < FIGURES.get(page, 0):
        problems.append(f"{len(figures)} interactive figures, expected {FIGURES[page]}")
    for number, figure in enumerate(figures, 1):
        problems += check_figure(driver, figure, f"interactive figure {number}")
    problems += check_quiz(driver, page)
    external = driver.execute_script(EXTERNAL)
    if external:
        problems.append(f"requests that leave the book: {external[:3]}")
    return problems
