"""Test the rendered book the way a reader sees it: in a browser.

Serves ``_build/html`` on 127.0.0.1, opens every page of the table of contents in headless Chromium
(Debian's ``chromium`` and ``chromium-driver``; network features off) and checks, on each page:

- no console errors;
- every image loaded (``naturalWidth > 0``) and has real alt text or a caption;
- formulas rendered by the vendored MathJax: no raw TeX (a ``$`` or a backslash command) in the
  text outside code, generated prose (a cell's Markdown output) included, and no invisible
  character quoted there (``' '``);
- chapter pages: a Colab button and a download button that point at this chapter's notebook;
- every internal link answered by the local server;
- heading levels never skip a level;
- no test scaffolding: no ``NBVAL`` text, no output box that only says ``True``;
- one output box per print sequence (streams merged), balanced curly quotes;
- chapters number their sections (4.1, 4.2 ...) and their figures (Fig. 4.1 ...); the References
  page labels entries like the citations ("Vaswani et al., 2017") and links them;
- inline code keeps its spaces (GPT-2's token ``" the"`` must not read ``"the"``);
- at 1280 px: no code line and no output wider than its box (a text table may scroll inside its own
  box: the test names each one that does), the page itself no wider than the window;
  every figure crisp on a 2x screen (SVG, or a PNG with at least 2 pixels per CSS px);
- at 1280 and 390 px: every figure's smallest text at least 9 CSS px as drawn, or the figure opens at
  full size on a tap (book/_static/figure-zoom.js) and its smallest text is at least 9 CSS px there.
  A figure's smallest text size, in points, is in its PNG (``figure_text.book_figures``); shown at
  ``w`` CSS px from a PNG ``n`` pixels wide at ``dpi``, it is ``points / 72 * dpi * w / n`` CSS px;
- tables, outputs, code and display equations wider than their box scroll inside it, never the page;
- the ☰ button opens and closes the chapter list, and the contents button the page's sections,
  at 1280 px and at 390 px (pydata-sphinx-theme#2451 made both do nothing);
- the interactive figures and the quizzes respond (scripts/browser_interactive.py);
- the live models compute PyTorch's numbers, by keyboard and by touch, and say what is wrong
  with odd inputs (scripts/browser_live.py, which prints their budgets);
- at 390 px (a phone): the page never scrolls sideways; and, over the whole book, the bars of
  scripts/browser_phone.py: at most 10% of code cells scroll sideways, no display equation cut,
  every figure's smallest text at least 9 CSS px as drawn, interactive pages under 4 MB (the
  numbers are printed at the end whether or not they pass).

A screenshot of each page at both widths goes to ``_build/screenshots/`` (``name.png`` at 1280 px,
``name-390.png`` at 390 px), and one of every figure at 390 px to ``_build/screenshots/figures/``
(``fig-name-390.png`` as it sits in the page, ``fig-name-390-full.png`` opened at full size).
Run it with ``make browser-test``; ``python scripts/browser_test.py PAGE ...`` checks only the pages
named (e.g. ``notebooks/04_attention``), without the link check.
"""

from __future__ import annotations

import functools
import http.server
import io
import os
import re
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urldefrag, urljoin

import yaml
from PIL import Image
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from gpt_from_scratch.book.figure_text import SMALLEST_TEXT  # noqa: E402
from scripts.browser_interactive import check_interactive  # noqa: E402  (figures and quizzes)
from scripts.browser_live import check_live  # noqa: E402  (the live models)
from scripts.browser_phone import MIN_TEXT_PX, PhoneReport  # noqa: E402  (the phone's bars)
from scripts.jupyter_notebooks import colab_url  # noqa: E402  (the Jupyter editions Colab opens)

WIDE, PHONE = 1280, 390
# Raw TeX that MathJax left: a dollar sign, a backslash command (\\times) or a \\( \\[ delimiter.
RAW_TEX = re.compile(r"\$|\\[A-Za-z]+|\\[()\[\]]")
# TeX math left in a printed output ("$p = 0.9$"): printed text may hold backslashes ('\n').
RAW_MATH = re.compile(r"\$[^$\s][^$\n]*\$")
# An invisible character quoted in the prose: ' ' or a quoted newline reads as nothing.
INVISIBLE = re.compile(r"(['\"‘’“”])\s+(['\"‘’“”])")
HTML = ROOT / "_build" / "html"
SHOTS = ROOT / "_build" / "screenshots"
CHROMIUM_FLAGS = [
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
    "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-default-apps", "--disable-extensions", "--window-size=1280,1600",
]


def toc_pages() -> list[str]:
    """Every page of ``_toc.yml``, root first, as paths without suffix (``notebooks/04_attention``)."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    pages = [toc["root"]]
    for part in toc.get("parts", []):
        pages += [chapter["file"] for chapter in part.get("chapters", [])]
    return pages


def repository_url() -> str:
    return yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"].rstrip("/")


def serve(folder: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    class QuietHandler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    class QuietServer(http.server.ThreadingHTTPServer):
        def handle_error(self, request, client_address):
            if not isinstance(sys.exc_info()[1], ConnectionError):  # the browser dropped a request: not an error
                super().handle_error(request, client_address)

    handler = functools.partial(QuietHandler, directory=str(folder))
    server = QuietServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


def browser() -> webdriver.Chrome:
    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium must not look for drivers online
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={ROOT / '_build' / 'chromium-profile'}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))


PAGE_FACTS = """
const images = [...document.querySelectorAll('main img, article img')].map(img => ({
  src: img.getAttribute('src'), loaded: img.complete && img.naturalWidth > 0,
  alt: (img.getAttribute('alt') || '').trim(),
  caption: (img.closest('figure')?.querySelector('figcaption')?.innerText || '').trim()}));
const main = document.querySelector('main') || document.body;
// The text a reader reads as prose: every text node outside code, printed outputs and rendered
// formulas; a cell's Markdown output (generated prose) is prose.
const outsideCode = {acceptNode: node => node.parentElement.closest(
  'code, pre, kbd, samp, mjx-container, script, style, div.highlight, div.plotly-graph-div, svg')
  ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT};
const walker = document.createTreeWalker(main, NodeFilter.SHOW_TEXT, outsideCode);
const prose = [];
while (walker.nextNode()) prose.push(walker.currentNode.textContent);
const headings = [...main.querySelectorAll('h1, h2, h3, h4, h5, h6')].map(h => Number(h.tagName[1]));
const links = [...document.querySelectorAll('a[href]')].map(a => a.href);
const math = document.querySelectorAll('mjx-container').length;
const outputs = [...main.querySelectorAll('div.cell_output')].map(o => o.innerText.trim());
const printed = [...main.querySelectorAll('div.cell_output pre')].map(p => p.textContent);
// textContent, not innerText: a citation inside a folded answer is hidden, and innerText is empty then.
const citations = [...main.querySelectorAll('span.bibtex-citation a')].map(a => a.textContent.trim());
const references = [...main.querySelectorAll('div.citation')].map(c => ({
  label: c.querySelector('.label')?.innerText.replace(/^\\[|\\]$/g, '').trim() || '',
  link: !!c.querySelector('a.reference.external')}));
return {images, headings, links, math, text: main.innerText, prose, mathjax: typeof MathJax !== 'undefined',
        outputs, printed, citations, references, html: main.innerHTML.includes('NBVAL'),
        splitStreams: main.querySelectorAll('div.output.stream + div.output.stream').length,
        title: main.querySelector('h1')?.textContent.replace(/#$/, '').trim() || '',
        sections: [...main.querySelectorAll('article h2')].map(h => h.textContent.replace(/#$/, '').trim()),
        figureNumbers: [...main.querySelectorAll('figcaption .caption-number')]
          .map(s => s.textContent.trim()),
        paragraphs: [...main.querySelectorAll('p, figcaption, li')].map(p => p.innerText)};
"""

# What a reader sees at the current window width: boxes wider than their content, lost spaces,
# every figure's size as drawn and as stored.
LAYOUT_FACTS = """
const main = document.querySelector('main') || document.body;
const clipped = sel => [...main.querySelectorAll(sel)]
  .filter(e => e.scrollWidth > e.clientWidth + 1)
  .map(e => ({width: e.scrollWidth - e.clientWidth,
               text: e.textContent.split('\\n').reduce((a, b) => (b.length > a.length ? b : a)).slice(0, 70)}));
const lostSpaces = [...main.querySelectorAll('code')]
  .filter(c => /^\\s|\\s$/.test(c.textContent) && c.innerText !== c.textContent)
  .map(c => JSON.stringify(c.textContent));
const figures = [...main.querySelectorAll('img')].filter(img => img.naturalWidth > 0).map(img => ({
  src: img.currentSrc, natural: img.naturalWidth, shown: img.getBoundingClientRect().width,
  figure: img.closest('figure')?.id || '', zoomable: img.classList.contains('zoomable'),
  inFigure: !!img.closest('figure, div.cell_output')}));
// Boxes wider than their content must scroll themselves and stay inside the window.
const spills = [...main.querySelectorAll(
    'mjx-container[display="true"], table, div.cell_output pre, div.cell_input pre')]
  .filter(e => e.scrollWidth > e.clientWidth + 1 || e.getBoundingClientRect().right > innerWidth + 1)
  .filter(e => !['auto', 'scroll'].includes(getComputedStyle(e).overflowX)
               || e.getBoundingClientRect().right > innerWidth + 1)
  .map(e => `${e.tagName.toLowerCase()} ${e.textContent.trim().slice(0, 50)}`);
return {code: clipped('div.cell_input pre'), outputs: clipped('div.cell_output pre:not(.text-table)'),
        tables: clipped('div.cell_output pre.text-table'),
        page: document.documentElement.scrollWidth, window: document.documentElement.clientWidth,
        lostSpaces, figures, spills};
"""

# How many links of the chapter list (primary sidebar) and of the page's contents (secondary sidebar)
# a reader can see right now.
VISIBLE_NAVIGATION = """
const visible = sel => [...document.querySelectorAll(sel)].filter(e => {
  const r = e.getBoundingClientRect(), s = getComputedStyle(e);
  return r.width > 0 && r.height > 0 && r.right > 0 && r.left < innerWidth && r.top < innerHeight
    && s.visibility !== 'hidden';
}).length;
return {chapters: visible('nav.bd-docs-nav a'), contents: visible('.bd-toc-nav a, nav.page-toc a')};
"""


def check_page(driver, base: str, page: str, repo: str, phone: PhoneReport) -> list[str]:
    problems = []
    url = urljoin(base, page + ".html")
    driver.set_window_size(WIDE, 1600)
    load(driver, url)
    facts = driver.execute_script(PAGE_FACTS)
    driver.save_screenshot(str(SHOTS / (page.replace("/", "__") + ".png")))

    for entry in driver.get_log("browser"):
        if entry["level"] == "SEVERE":
            problems.append(f"console error: {entry['message'][:200]}")
    for image in facts["images"]:
        if not image["loaded"]:
            problems.append(f"image not loaded: {image['src']}")
        alt_is_path = image["alt"] in ("", image["src"]) or re.search(r"\.(png|jpe?g|svg)$", image["alt"])
        if alt_is_path and not image["caption"]:
            problems.append(f"image without alt text or caption: {image['src']}")
    for snippet in raw_tex(facts["prose"]):
        problems.append(f"raw TeX in the text (MathJax did not render it): {snippet!r}")
    problems += [f"raw TeX in a printed output: {m.group()!r}"
                 for text in facts["printed"] for m in RAW_MATH.finditer(text)]
    problems += [f"an invisible character quoted in the text: {text[:80]!r}"
                 for text in facts["prose"] if INVISIBLE.search(text)]
    if "NBVAL" in facts["text"] or facts["html"]:
        problems.append("test scaffolding shows: NBVAL in the page")
    if facts["splitStreams"]:
        problems.append(f"{facts['splitStreams']} print sequences split into several output boxes")
    stray = sum(output == "True" for output in facts["outputs"])
    if stray:
        problems.append(f"{stray} output box(es) that only say True (a checker's return value)")
    problems += check_layout(driver, page, WIDE)
    figure_problems, wide_note = check_figures(driver, page, WIDE)
    problems += figure_problems
    problems += check_numbering(facts)
    for text in facts["paragraphs"]:
        if not balanced_quotes(text):
            problems.append(f"unbalanced or wrong-way quotes: {text[:80]!r}")
    previous = 0
    for level in facts["headings"]:
        if previous and level > previous + 1:
            problems.append(f"heading levels skip from h{previous} to h{level}")
        previous = level

    if page.startswith("notebooks/"):
        notebook = page + ".ipynb"
        colab = colab_url(page.removeprefix("notebooks/")).removeprefix("https://")
        if not any(colab in link for link in facts["links"]):
            problems.append(f"no Colab button pointing at {colab}")
        if not any(link.endswith("_sources/" + notebook) for link in facts["links"]):
            problems.append(f"no download button for {notebook}")
        if not any(link.rstrip("/") == repo for link in facts["links"]):
            problems.append(f"no repository button pointing at {repo}")
    problems += check_interactive(driver, page)
    live_problems, live_notes = check_live(driver, base, page)
    problems += live_problems
    problems += check_navigation(driver, url, WIDE, contents=False)
    driver.set_window_size(PHONE, 900)
    driver.execute_cdp_cmd("Network.setCacheDisabled", {"cacheDisabled": True})  # weigh it all
    load(driver, url)
    driver.execute_cdp_cmd("Network.setCacheDisabled", {"cacheDisabled": False})
    phone_notes = phone.measure(driver, page)
    problems += check_layout(driver, page, PHONE)
    driver.save_screenshot(str(SHOTS / (page.replace("/", "__") + f"-{PHONE}.png")))
    figure_problems, phone_note = check_figures(driver, page, PHONE, phone)
    problems += figure_problems
    facts["figureNotes"] = ([note for note in (wide_note, phone_note) if note] + phone_notes
                            + live_notes)
    problems += check_navigation(driver, url, PHONE, contents=page.startswith("notebooks/"))
    driver.set_window_size(WIDE, 1600)
    return problems, facts


def load(driver, url: str) -> None:
    """Open a page and wait for MathJax to typeset it."""
    driver.get(url)
    driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "if (window.MathJax && MathJax.startup && MathJax.startup.promise) MathJax.startup.promise.then(done, done);"
        "else done();"
    )
    time.sleep(0.3)


def raw_tex(texts: list[str]) -> list[str]:
    """Each piece of raw TeX in the prose's text nodes, with a little context."""
    return [text[max(0, m.start() - 30):m.end() + 30].strip()
            for text in texts for m in RAW_TEX.finditer(text)]


def check_numbering(facts) -> list[str]:
    """A chapter ("4. Attention") numbers its sections 4.1, 4.2 ... and its figures Fig. 4.1 ..."""
    match = re.match(r"(\d+[a-z]?)\.\s", facts["title"])
    if not match:
        return []
    chapter, problems = match.group(1), []
    for section in facts["sections"]:
        if section not in ("Summary", "Exercises", "Check yourself") \
                and not section.startswith(f"{chapter}."):
            problems.append(f"section {section!r} is not numbered {chapter}.N")
    for number in facts["figureNumbers"]:
        if not number.startswith(f"Fig. {chapter}."):
            problems.append(f"figure numbered {number!r}, not Fig. {chapter}.N")
    return problems


def balanced_quotes(text: str) -> bool:
    """Curly double quotes open and close in turn: a wrong-way “ (smartquotes turning the closing
    quote of ``"It is the "`` into an opening one) leaves two openings in a row."""
    is_open = False
    for char in text:
        if char == "“":
            if is_open:
                return False
            is_open = True
        elif char == "”":
            if not is_open:
                return False
            is_open = False
    return not is_open


@functools.cache
def png_text_size(url: str) -> tuple[float | None, float | None]:
    """A figure PNG's smallest text in points (from ``figure_text``) and its dots per inch."""
    with urllib.request.urlopen(url, timeout=10) as response:
        image = Image.open(io.BytesIO(response.read()))
    points = image.text.get(SMALLEST_TEXT) if hasattr(image, "text") else None
    dpi = image.info.get("dpi", (None,))[0]
    return (float(points) if points else None), dpi


def text_px(points: float, dpi: float, shown: float, natural: float) -> float:
    """How tall text of ``points`` in a PNG at ``dpi``, ``natural`` pixels wide, is drawn ``shown``
    CSS px wide, in CSS px."""
    return points / 72 * dpi * shown / natural


def check_layout(driver, page: str, width: int) -> list[str]:
    """Clipped code and outputs (1280 px), a page wider than the window, lost spaces, figures."""
    facts = driver.execute_script(LAYOUT_FACTS)
    problems = []
    if facts["page"] > facts["window"]:
        problems.append(f"at {width} px the page scrolls sideways ({facts['page']} > {facts['window']} px)")
    if width == WIDE:
        for kind in ("code", "outputs"):
            for box in facts[kind]:
                problems.append(f"{kind} clipped by {box['width']} px at {width} px: {box['text']!r}")
        for box in facts["tables"]:
            print(f"     note: a text table scrolls by {box['width']} px at {width} px: {box['text']!r}")
        for text in facts["lostSpaces"]:
            problems.append(f"inline code {text} loses its leading or trailing space")
    for figure in facts["figures"]:
        name = figure["figure"] or figure["src"].rsplit("/", 1)[-1]
        svg = figure["src"].endswith(".svg")
        if width == WIDE and not svg and figure["natural"] < 2 * figure["shown"] - 1:
            problems.append(f"figure {name} is blurry on a 2x screen: {figure['natural']} px stored, "
                            f"{figure['shown']:.0f} CSS px shown (use retina PNG or SVG)")
    for box in facts["spills"]:
        problems.append(f"at {width} px a box wider than the column does not scroll inside itself: {box!r}")
    return problems


# The full-size dialog of figure-zoom.js: open or not, and its image's drawn width.
ZOOM_FACTS = """
const dialog = document.querySelector('dialog.figure-zoom');
return {open: !!dialog?.open, shown: dialog?.querySelector('img').getBoundingClientRect().width || 0,
        page: document.documentElement.scrollWidth, window: document.documentElement.clientWidth};
"""


def check_figures(driver, page: str, width: int,
                  phone: PhoneReport | None = None) -> tuple[list[str], str]:
    """Every figure's smallest text is at least MIN_TEXT_PX as drawn, or the figure opens at full
    size on a tap and is legible there. At 390 px each figure is photographed both ways, and its
    text size as drawn goes to ``phone``. Returns the problems and a line saying how many figures
    were legible which way."""
    problems, in_place, tapped = [], 0, 0
    figures = driver.execute_script(LAYOUT_FACTS)["figures"]
    images = [img for img in driver.find_elements(By.CSS_SELECTOR, "main img")
              if driver.execute_script("return arguments[0].naturalWidth > 0", img)]
    for figure, image in zip(figures, images):
        if figure["src"].endswith(".svg") or not figure["inFigure"]:
            continue  # a button's logo
        name = figure["figure"] or figure["src"].rsplit("/", 1)[-1].removesuffix(".png")
        points, dpi = png_text_size(figure["src"])
        if points is None or dpi is None:
            problems.append(f"figure {name}: its PNG records no smallest text size or dpi "
                            "(re-execute the chapter: its set-up calls figure_text.book_figures())")
            continue
        drawn = text_px(points, dpi, figure["shown"], figure["natural"])
        if width == PHONE:
            driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", image)
            figure_box = image.find_elements(By.XPATH, "ancestor::figure[1]") or [image]
            figure_box[0].screenshot(str(SHOTS / "figures" / f"{name}-{width}.png"))  # with caption
            phone.smallest_px[f"{page}: {name}"] = drawn
        if drawn >= MIN_TEXT_PX:
            in_place += 1
            continue
        if not figure["zoomable"]:
            problems.append(f"figure {name}: smallest text {drawn:.1f} CSS px at {width} px, and a tap "
                            f"does not open it at full size (at least {MIN_TEXT_PX} px)")
            continue
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", image)
        image.click()
        time.sleep(0.2)
        zoom = driver.execute_script(ZOOM_FACTS)
        full = text_px(points, dpi, zoom["shown"], figure["natural"]) if zoom["open"] else 0.0
        if width == PHONE and zoom["open"]:
            driver.save_screenshot(str(SHOTS / "figures" / f"{name}-{width}-full.png"))
        if full < MIN_TEXT_PX:
            problems.append(f"figure {name}: smallest text {drawn:.1f} CSS px at {width} px, and "
                            f"{full:.1f} px after a tap (at least {MIN_TEXT_PX} px)")
        if zoom["page"] > zoom["window"]:
            problems.append(f"figure {name}: opened at full size, the page scrolls sideways")
        driver.find_element(By.CSS_SELECTOR, "dialog.figure-zoom").click()  # a second tap closes it
        time.sleep(0.1)
        if driver.execute_script(ZOOM_FACTS)["open"]:
            problems.append(f"figure {name}: a tap on the full-size figure does not close it")
        tapped += 1
    note = f"{width} px: {in_place} figures legible as drawn, {tapped} at full size on a tap"
    return problems, note if in_place + tapped else ""


def check_navigation(driver, url: str, width: int, contents: bool) -> list[str]:
    """Click the ☰ button (and the contents button) like a reader and see the navigation change."""
    problems = []
    driver.get(url)
    time.sleep(0.3)
    if not any(b.is_displayed() for b in driver.find_elements(By.CSS_SELECTOR, "button.search-button__button")):
        problems.append(f"at {width} px no visible search button")
    toggles = [("☰ (chapter list)", "button.primary-toggle", "chapters")]
    if contents:
        toggles.append(("contents", "button.secondary-toggle", "contents"))
    for name, selector, what in toggles:
        driver.get(url)
        time.sleep(0.3)
        before = driver.execute_script(VISIBLE_NAVIGATION)[what]
        buttons = [b for b in driver.find_elements(By.CSS_SELECTOR, selector) if b.is_displayed()]
        if not buttons:
            problems.append(f"at {width} px no visible {name} button")
            continue
        buttons[0].click()
        time.sleep(0.6)
        after = driver.execute_script(VISIBLE_NAVIGATION)[what]
        # Wide: the chapter list is open and the button closes it. Phone: closed, and the button opens it.
        opened, closed = (after > 0 and before == 0), (before > 0 and after == 0)
        if not (opened or closed):
            problems.append(f"at {width} px the {name} button does nothing "
                            f"({before} links visible before the click, {after} after)")
        elif width == PHONE and not opened:
            problems.append(f"at {width} px the {name} button does not open the navigation")
    return problems


# Works with no online copy to link to (the References page links every other entry).
NO_ONLINE_COPY = {"Gage, 1994", "Zipf, 1949"}


def check_references(labels: dict[str, bool], citations: set[str]) -> list[str]:
    """The References page reads like the citations ("Vaswani et al., 2017") and links each work."""
    problems = []
    for label, linked in sorted(labels.items()):
        if not re.fullmatch(r".+, \d{4}[a-z]?", label):
            problems.append(f"reference label {label!r} is not in the citations' style (Author et al., year)")
        if not linked and label not in NO_ONLINE_COPY:
            problems.append(f"reference [{label}] has no link")
    for citation in sorted(citations - set(labels)):
        problems.append(f"citation [{citation}] has no entry with that label on the References page")
    return problems


def check_internal_links(base: str, links: set[str]) -> list[str]:
    problems = []
    for link in sorted(links):
        try:
            with urllib.request.urlopen(link, timeout=10) as response:
                if response.status != 200:
                    problems.append(f"{link}: HTTP {response.status}")
        except urllib.error.URLError as err:
            problems.append(f"{link}: {err}")
    return problems


def report(what: str, problems: list[str], notes: list[str] = ()) -> int:
    """Print one checked item ("ok  what" or "FAIL what", its notes and problems); 1 if it failed."""
    print(f"{'ok  ' if not problems else 'FAIL'} {what}")
    for note in notes:
        print(f"       {note}")
    for problem in problems:
        print(f"     - {problem}")
    return int(bool(problems))


def main() -> int:
    if not (HTML / "index.html").is_file():
        print("no _build/html/index.html: run `make book` first", file=sys.stderr)
        return 2
    (SHOTS / "figures").mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    server, base = serve(HTML)
    driver = browser()
    failures, internal, citations, references = 0, set(), set(), {}
    phone = PhoneReport()
    try:
        chosen = sys.argv[1:]
        for page in [page for page in toc_pages() if not chosen or page in chosen]:
            problems, facts = check_page(driver, base, page, repository_url(), phone)
            internal |= {urldefrag(link)[0] for link in facts["links"] if link.startswith(base)}
            citations |= set(facts["citations"])
            references |= {entry["label"]: entry["link"] for entry in facts["references"]}
            failures += report(f"{page}: {len(facts['images'])} images, {facts['math']} formulas",
                               problems, notes=facts["figureNotes"])
        link_problems = [] if chosen else check_internal_links(base, internal)
        if not chosen:
            reference_problems = check_references(references, citations)
            failures += report(f"{len(references)} references, {len(citations)} distinct "
                               "citations", reference_problems)
        failures += report(f"{len(internal)} internal links", link_problems)
        failures += report("the phone (390 px), every page checked", phone.problems(),
                           notes=phone.summary())
    finally:
        driver.quit()
        server.shutdown()
    print(f"browser test: {failures} failing, screenshots in {SHOTS.relative_to(ROOT)}, "
          f"{time.perf_counter() - start:.1f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
