"""Test the rendered book the way a reader sees it: in a browser.

Serves ``_build/html`` on 127.0.0.1, opens every page of the table of contents in headless Chromium
(Debian's ``chromium`` and ``chromium-driver``; network features off) and checks, on each page:

- no console errors;
- every image loaded (``naturalWidth > 0``) and has real alt text or a caption;
- formulas rendered by the vendored MathJax (no raw ``\\(`` or ``$$`` left in the text);
- chapter pages: a Colab button and a download button that point at this chapter's notebook;
- every internal link answered by the local server;
- heading levels never skip a level.

A screenshot of each page goes to ``_build/screenshots/``. Run it with ``make browser-test``.
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urldefrag, urljoin, urlparse

import yaml
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

ROOT = Path(__file__).resolve().parent.parent
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
const headings = [...main.querySelectorAll('h1, h2, h3, h4, h5, h6')].map(h => Number(h.tagName[1]));
const links = [...document.querySelectorAll('a[href]')].map(a => a.href);
const math = document.querySelectorAll('mjx-container').length;
return {images, headings, links, math, text: main.innerText, mathjax: typeof MathJax !== 'undefined'};
"""


def check_page(driver, base: str, page: str, repo: str) -> list[str]:
    problems = []
    url = urljoin(base, page + ".html")
    driver.get(url)
    driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "if (window.MathJax && MathJax.startup && MathJax.startup.promise) MathJax.startup.promise.then(done, done);"
        "else done();"
    )
    time.sleep(0.3)
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
    if re.search(r"\\\(|\\\[|\$\$", facts["text"]):
        problems.append("raw TeX left in the page: MathJax did not render it")
    previous = 0
    for level in facts["headings"]:
        if previous and level > previous + 1:
            problems.append(f"heading levels skip from h{previous} to h{level}")
        previous = level

    if page.startswith("notebooks/"):
        notebook = page + ".ipynb"
        colab = f"colab.research.google.com/github/{urlparse(repo).path.strip('/')}/blob/main/{notebook}"
        if not any(colab in link for link in facts["links"]):
            problems.append(f"no Colab button pointing at {colab}")
        if not any(link.endswith("_sources/" + notebook) for link in facts["links"]):
            problems.append(f"no download button for {notebook}")
    return problems, facts


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


def main() -> int:
    if not (HTML / "index.html").is_file():
        print("no _build/html/index.html: run `make book` first", file=sys.stderr)
        return 2
    SHOTS.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    server, base = serve(HTML)
    driver = browser()
    failures, internal = 0, set()
    try:
        for page in toc_pages():
            problems, facts = check_page(driver, base, page, repository_url())
            internal |= {urldefrag(link)[0] for link in facts["links"] if link.startswith(base)}
            status = "ok  " if not problems else "FAIL"
            print(f"{status} {page}: {len(facts['images'])} images, {facts['math']} formulas")
            for problem in problems:
                print(f"     - {problem}")
            failures += bool(problems)
        link_problems = check_internal_links(base, internal)
        print(f"{'ok  ' if not link_problems else 'FAIL'} {len(internal)} internal links")
        for problem in link_problems:
            print(f"     - {problem}")
        failures += bool(link_problems)
    finally:
        driver.quit()
        server.shutdown()
    print(f"browser test: {failures} failing, screenshots in {SHOTS.relative_to(ROOT)}, "
          f"{time.perf_counter() - start:.1f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
