"""Check every chapter's Jupyter edition as JupyterLab shows it, with no cell run.

Starts the venv's JupyterLab (127.0.0.1, a token, no browser, nothing fetched from the
internet, temporary config and data) on temporary copies of every chapter's Jupyter and
Colab edition (notebooks/jupyter/, scripts/jupyter_notebooks.py), and opens each in headless
Chromium (browser_test.py's flags; no host name but 127.0.0.1 resolves). JupyterLab draws
the saved outputs; the kernel it starts runs no cell and is shut down after each chapter.
Every wait is for a condition (polled), 2 minutes at most. Checks:

- Markdown: every Markdown cell rendered, no raw MyST in the rendered text (a role such as
  ``{ref}`...```, a ``(label)=`` target, a ``:class:`` option, a directive fence), every
  answer folded in a closed ``<details>`` that opens on a click, and the hidden sources
  (generated prose, quizzes, solutions) collapsed.
- Figures (Plotly's mime type, drawn by the jupyterlab-plotly extension of the plotly wheel,
  trusted or not), as scripts/browser_interactive.py does in the book: drawn; the hover
  label names query, key and weight; a slider (Ch. 7 temperature, Ch. 8 head), the buttons
  or the menu change the picture; the figure keeps its height.
- Quizzes (jupyterquiz: a JavaScript output, run only in a trusted notebook): chapter 1 is
  trusted (``jupyter trust`` on the copy): choices and numbers show their feedback. 4, 7 and
  8 stay untrusted (a fresh clone): the questions show as HTML; a click opens an answer.
- No request leaves 127.0.0.1 (the page's resource list).

Screenshots (each chapter's top and first answer, figures as opened and once used, quizzes):
_build/screenshots/jupyterlab/.
Run: ``make jupyterlab-test``; ``scripts/jupyterlab_test.py [--notebooks DIR] [CHAPTER]``.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import nbformat
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from scripts.browser_interactive import FIGURES, check_figure, check_quiz  # noqa: E402
from scripts.browser_test import CHROMIUM_FLAGS, report  # noqa: E402

EDITIONS = ROOT / "notebooks" / "jupyter"
TRUSTED = {"01_tokens_and_batches"}  # opened trusted: the quiz's script runs
WAIT = 120  # seconds, at most, for a notebook's cells, figures and quiz to be drawn
SHOTS = ROOT / "_build" / "screenshots" / "jupyterlab"
BIN = Path(sys.executable).parent
NEWS = "@jupyterlab/apputils-extension/notification.jupyterlab-settings"
TRACKER = "@jupyterlab/notebook-extension/tracker.jupyterlab-settings"
# The page's state: cells, drawn figures, quizzes, and requests that left 127.0.0.1.
STATE = r"""
const markdown = [...document.querySelectorAll('.jp-Notebook .jp-RenderedMarkdown')];
return {cells: document.querySelectorAll('.jp-Notebook .jp-Cell').length,
        markdown: [...document.querySelectorAll(
          '.jp-Notebook .jp-MarkdownCell .jp-RenderedMarkdown')].filter(
          m => m.childElementCount).length,  // rendered, not only attached
        myst: markdown.flatMap(m => {  // MyST as Jupyter shows it: {ref}<code>ch-gpt</code>
          const walk = document.createTreeWalker(m, NodeFilter.SHOW_TEXT), found = [];
          while (walk.nextNode()) {
            const node = walk.currentNode, text = node.textContent;
            const next = node.nextSibling, inCode = node.parentElement.closest('code, pre');
            const role = /\{[a-z][\w:+-]*\}$/.exec(text);
            if (!inCode && role && next && next.nodeName === 'CODE')
              found.push(role[0] + next.textContent);
            found.push(...(/\{[a-z][\w:+-]*\}`|:class:/.exec(text) || []));
            const target = /^\s*(\([\w.:-]+\)=|:::)/m.exec(text);
            if (!inCode && target) found.push(target[0]);
          }
          return found.concat([...m.querySelectorAll('code[class*="language-{"]')]
                              .map(c => c.className)); }),
        details: [...document.querySelectorAll('.jp-RenderedMarkdown details')]
          .map(d => d.open),
        collapsed: document.querySelectorAll('.jp-Notebook .jp-InputPlaceholder').length,
        rawMath: markdown.flatMap(m => {  // math MathJax has not typeset (yet)
          const walk = document.createTreeWalker(m, NodeFilter.SHOW_TEXT), raw = [];
          while (walk.nextNode()) {
            const node = walk.currentNode;
            if (/\$|\\\(/.test(node.textContent)
                && !node.parentElement.closest('mjx-container, code, pre'))
              raw.push(node.textContent);
          }
          return raw; }),
        plots: [...document.querySelectorAll('.jp-RenderedPlotly.js-plotly-plot')]
          .filter(p => p.querySelector('.main-svg')).length,
        math: document.querySelectorAll('.jp-RenderedMarkdown mjx-container').length,
        drawnQuizzes: document.querySelectorAll('.Quiz').length,
        staticQuizzes: document.querySelectorAll('.gfs-quiz-static').length,
        external: performance.getEntriesByType('resource').map(r => r.name)
          .filter(n => !/^(https?|wss?):\/\/127\.0\.0\.1[:\/]/.test(n)
                       && !/^(data|blob):/.test(n))};
"""


def start_lab(folder: Path, env: dict, token: str) -> tuple[subprocess.Popen, str]:
    """JupyterLab serving ``folder``, once it answers, and its URL."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [str(BIN / "jupyter"), "lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
               f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
               f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={folder}",
               "--LabApp.news_url=None", "--LabApp.extension_manager=readonly",
               "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
               f"--LabApp.user_settings_dir={folder.parent / 'settings'}",
               f"--LabApp.workspaces_dir={folder.parent / 'workspaces'}"]
    if os.geteuid() == 0:
        command.append("--allow-root")  # CI's containers run as root
    log = folder.parent / "jupyterlab.log"
    lab = subprocess.Popen(command, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    for _ in range(240):
        if lab.poll() is not None:
            raise RuntimeError(f"JupyterLab exited ({lab.returncode}): {log.read_text()}")
        try:
            urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
            return lab, base
        except OSError:
            time.sleep(0.5)
    lab.terminate()
    raise RuntimeError("JupyterLab did not answer within 2 minutes")


def stop_kernels(base: str, token: str) -> None:
    """Shut down the kernels JupyterLab started for the notebooks opened so far (they run no
    cell, but each is a Python process the next chapter's page competes with)."""
    with urllib.request.urlopen(f"{base}/api/sessions?token={token}", timeout=30) as answer:
        sessions = json.load(answer)
    for session in sessions:
        url = f"{base}/api/sessions/{session['id']}?token={token}"
        urllib.request.urlopen(urllib.request.Request(url, method="DELETE"), timeout=30)


def settings(folder: Path, all_at_once: bool) -> None:
    """The next page's settings: no news, no update check (both fetch from the internet).
    All at once: every cell laid out when the notebook opens (by default a cell is sized as
    it comes into view, a figure's button moves between WebDriver's scroll and its click,
    and a long chapter takes three times as long to attach). Else the default, under which a
    trusted quiz is drawn after JupyterLab's MathJax is defined, as a reader sees."""
    for name, values in {NEWS: {"fetchNews": "false", "checkForUpdates": False},
                         TRACKER: {"windowingMode": "none"} if all_at_once else {}}.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(json.dumps(values))


def browser(profile: Path) -> webdriver.Chrome:
    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium must not look for drivers online
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in CHROMIUM_FLAGS + [f"--user-data-dir={profile}", "--host-resolver-rules="
                                  "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"]:
        options.add_argument(flag)
    return webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))


def expected(path: Path) -> dict:
    """What the page must show, read from the notebook: its cells, Markdown cells, folded
    answers, collapsed sources, and whether it has a quiz."""
    cells = nbformat.read(path, as_version=4).cells
    markdown = [c.source for c in cells if c.cell_type == "markdown"]
    return {"cells": len(cells), "markdown": len(markdown),
            "details": sum(text.count("<details>") for text in markdown),
            "collapsed": sum(bool(c.metadata.get("jupyter", {}).get("source_hidden"))
                             for c in cells),
            "quiz": any("quiz" in c.metadata.get("tags", []) and c.get("outputs")
                        for c in cells)}


def ready(state: dict, want: dict, figures: int, trusted: bool) -> bool:
    """Every cell attached, every Markdown cell rendered and its math typeset, the figures
    drawn, the quiz drawn (trusted: its script has run) or shown as HTML (untrusted)."""
    quiz = state["drawnQuizzes"] if trusted else state["staticQuizzes"]
    return (state["cells"] >= want["cells"] and state["markdown"] >= want["markdown"]
            and len(state["details"]) >= want["details"] and not state["rawMath"]
            and state["plots"] >= figures
            and (quiz or not want["quiz"]))


def open_notebook(driver, url: str, want: dict, figures: int, trusted: bool) -> dict:
    """Open a notebook and poll its state until it is ready, WAIT seconds at most."""
    driver.get(url)
    deadline = time.time() + WAIT
    state = driver.execute_script(STATE)
    while not ready(state, want, figures, trusted) and time.time() < deadline:
        time.sleep(0.5)
        state = driver.execute_script(STATE)
    return state


def check_markdown(driver, chapter: str, state: dict, want: dict) -> list[str]:
    """No raw MyST in the rendered Markdown; answers folded, and opened by a click; the
    hidden sources collapsed. Screenshots: the chapter's top, its first answer opened."""
    driver.save_screenshot(str(SHOTS / f"{chapter}.png"))
    problems = [f"{state[key]} {what}, expected {want[key]}" for key, what in (
        ("cells", "cells"), ("markdown", "Markdown cells rendered"),
        ("collapsed", "collapsed sources")) if state[key] != want[key]]
    problems += [f"math not typeset: {text[:60]!r}" for text in state["rawMath"][:3]]
    raw = sorted(set(state["myst"]))
    problems += [f"raw MyST shows: {raw[:5]}"] * bool(raw)
    if len(state["details"]) != want["details"] or any(state["details"]):
        problems.append(f"answers: {len(state['details'])} <details> "
                        f"({sum(state['details'])} open), expected {want['details']}, "
                        "all folded")
    answers = driver.find_elements(By.CSS_SELECTOR, ".jp-RenderedMarkdown details")
    if answers:
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", answers[0])
        answers[0].find_element(By.TAG_NAME, "summary").click()
        body = answers[0].find_elements(By.CSS_SELECTOR, "summary ~ *")
        deadline = time.time() + 10
        while not (body and body[0].is_displayed()) and time.time() < deadline:
            time.sleep(0.2)
        if not (body and body[0].is_displayed()):
            problems.append("a click on an answer's summary did not show the answer")
        driver.save_screenshot(str(SHOTS / f"{chapter}-answer.png"))
    return problems


def check_figures(driver, chapter: str, expected: int) -> list[str]:
    figures = driver.find_elements(By.CSS_SELECTOR, ".jp-RenderedPlotly")
    problems = [] if len(figures) >= expected else [
        f"{len(figures)} Plotly outputs, expected {expected}"]
    for number, figure in enumerate(figures, 1):
        name, shot = f"interactive figure {number}", SHOTS / f"{chapter}-figure{number}"
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", figure)
        if not figure.find_elements(By.CSS_SELECTOR, ".plot-container svg.main-svg"):
            problems.append(f"{name}: no .plot-container with an SVG (Plotly did not draw)")
            continue
        figure.screenshot(f"{shot}.png")
        height = figure.size["height"]
        try:
            problems += check_figure(driver, figure, name)
        except Exception as error:  # a control that is no longer where it was drawn
            problems.append(f"{name}: using its controls failed: {error!r}"[:300])
        if figure.size["height"] < 0.9 * height:  # see book.interactive.MIME_CONFIG
            problems.append(f"{name}: {height} px tall, {figure.size['height']} px once "
                            "its controls were used")
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", figure)
        figure.screenshot(f"{shot}-used.png")
    return problems


def check_static_quiz(driver, chapter: str) -> list[str]:
    """Untrusted: the quiz is HTML (book.quiz.quiz_static_html); a click opens an answer."""
    static = driver.find_elements(By.CSS_SELECTOR, ".gfs-quiz-static")
    if not static:
        return ["untrusted, the quiz shows nothing (re-execute the chapter: its output "
                "predates book.quiz.quiz_static_html)"]
    driver.execute_script("arguments[0].scrollIntoView();", static[0])
    answer = static[0].find_element(By.CSS_SELECTOR, "li details")
    answer.find_element(By.TAG_NAME, "summary").click()
    time.sleep(0.3)
    static[0].screenshot(str(SHOTS / f"{chapter}-quiz-untrusted.png"))
    if not answer.find_element(By.TAG_NAME, "p").is_displayed():
        return [f"untrusted, a click on {answer.text!r} did not open its feedback"]
    return []


def check_chapter(driver, base: str, token: str, path: Path) -> list[str]:
    chapter, page = path.stem, f"notebooks/{path.stem}"
    figures, want = FIGURES.get(page, 0), expected(path)
    state = open_notebook(driver, f"{base}/lab/tree/{chapter}.ipynb?reset&token={token}",
                          want, figures, chapter in TRUSTED)
    if not state["cells"]:
        return [f"the notebook did not open within {WAIT} s"]
    problems = check_markdown(driver, chapter, state, want) + check_figures(
        driver, chapter, figures)
    if chapter in TRUSTED:
        problems += check_quiz(driver, page)
        for quiz in driver.find_elements(By.CSS_SELECTOR, ".Quiz")[:1]:
            box = quiz.find_element(By.XPATH, "..")
            driver.execute_script("arguments[0].scrollIntoView();", box)
            box.screenshot(str(SHOTS / f"{chapter}-quiz.png"))
        if any(e.is_displayed() for e in driver.find_elements(By.CSS_SELECTOR,
                                                               ".gfs-quiz-static")):
            problems.append("trusted, the static quiz still shows beside the drawn one")
    elif want["quiz"]:
        problems += check_static_quiz(driver, chapter)
    external = driver.execute_script(STATE)["external"]
    return problems + [f"requests that leave 127.0.0.1: {external[:3]}"] * bool(external)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("chapters", nargs="*", help="e.g. 07_generation (default: all)")
    parser.add_argument("--notebooks", type=Path, default=EDITIONS,
                        help="the folder to copy the notebooks from "
                        "(default: notebooks/jupyter/)")
    args = parser.parse_args()
    chosen = [p for p in sorted(args.notebooks.glob("*.ipynb"))
              if not args.chapters or p.stem in args.chapters]
    if not chosen:
        raise SystemExit(f"no notebook {args.chapters or '*.ipynb'} in {args.notebooks}: "
                         "run make jupyter (scripts/jupyter_notebooks.py) first")
    SHOTS.mkdir(parents=True, exist_ok=True)
    start, token, failures = time.perf_counter(), secrets.token_hex(16), 0
    with tempfile.TemporaryDirectory(prefix="jupyterlab-test-") as tmp:
        folder = Path(tmp) / "notebooks"
        folder.mkdir()
        dirs = {f"JUPYTER_{d}_DIR": f"{tmp}/{d}" for d in ("CONFIG", "DATA", "RUNTIME")}
        env = dict(os.environ, IPYTHONDIR=f"{tmp}/ipython", **dirs)
        for path in chosen:
            shutil.copy(path, folder)
            if path.stem in TRUSTED:  # signs the copy, in the temporary data folder's list
                subprocess.run([str(BIN / "jupyter"), "trust", str(folder / path.name)],
                               env=env, check=True, capture_output=True)
        lab, base = start_lab(folder, env, token)
        print(f"JupyterLab {base} ({time.perf_counter() - start:.1f} s)")
        driver = browser(folder.parent / "chromium-profile")
        try:
            for path in chosen:
                began = time.perf_counter()
                settings(folder.parent / "settings", path.stem not in TRUSTED)
                problems = check_chapter(driver, base, token, folder / path.name)
                stop_kernels(base, token)
                trust = "trusted" if path.stem in TRUSTED else "untrusted"
                took = time.perf_counter() - began
                failures += report(f"{path.stem} ({trust}, {took:.1f} s)", problems)
        finally:
            driver.quit()
            lab.terminate()
            lab.wait(timeout=30)
    print(f"jupyterlab test: {failures} failing, screenshots in {SHOTS.relative_to(ROOT)}, "
          f"{time.perf_counter() - start:.1f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
