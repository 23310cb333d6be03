"""Links that cannot rot: the book's links to its own pages land, its external ones are listed.

    python scripts/links.py   # after `make book` (`make link-test` builds the book first)

Offline, it checks that

- every link of the site (each page of ``_build/html``: ``<a href>``, ``<link href>``,
  ``<img src>``, ``<script src>``) and of the Jupyter editions (``notebooks/jupyter/``: their
  Markdown and their outputs) to the book's own pages lands on a file of ``_build/html`` and,
  where it names an anchor, on an element of that page with that id. The editions link the
  book by its address, ``scripts/release.py``'s ``site_url`` (from ``_config.yml``'s
  repository, as ``scripts/jupyter_markdown.py`` writes them); the site by relative paths.
  The anchors are Sphinx's (labels, figures, citations), so only the built site can say
  whether one exists: this part needs ``make book``;
- every external link of the site's text (each page's ``<article>``; the theme's buttons
  around it link the repository, its issues and Colab, all from ``_config.yml``) is listed in
  ``book/external_links.txt``;
- every external link of the book's sources is listed there, and every listed one is still
  in the book: the pages of ``book/*.md``, the chapters (``notebooks/*.ipynb``, their Markdown
  and outputs), their text twins (``notebooks/text/*.py``), the Jupyter editions and the
  References page's works (``book/references.bib``). ``tests/test_links.py`` runs this part
  in ``make test`` (it needs no site), so a new external link is added to the list on
  purpose, and the Pages workflow (``.github/workflows/pages.yml``) checks the listed links
  live, where there is internet.

A link is what a reader can follow or what a page loads: Markdown links and images, linkified
bare URLs (Jupyter Book's MyST has ``linkify`` on), HTML's ``href`` and ``src``, and the
addresses that an output's script loads (a Plotly figure's ``script.src = "https://..."``).
A URL inside code (a ``pip install`` command) is not a link.
"""

from __future__ import annotations

import re
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urldefrag, urljoin, urlsplit

import jupytext
import nbformat
import yaml
from bs4 import BeautifulSoup
from markdown_it.renderer import RendererHTML
from myst_parser.config.main import MdParserConfig
from myst_parser.parsers.mdit import create_md_parser
from pybtex.database import parse_file

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from scripts.release import site_url  # noqa: E402

HTML = ROOT / "_build" / "html"
LIST = ROOT / "book" / "external_links.txt"
# The MyST extensions Jupyter Book 1 turns on by default (_config.yml adds none): linkify
# makes a bare URL in the text a link, as the site shows it.
MYST = create_md_parser(MdParserConfig(enable_extensions={
    "colon_fence", "dollarmath", "linkify", "substitution", "tasklist"}), RendererHTML)
LINK_ATTRIBUTES = {"a": "href", "link": "href", "img": "src", "script": "src",
                   "iframe": "src", "source": "src"}
LATEX_URL = re.compile(r"\\url\{([^}]+)\}")
SCRIPT_URL = re.compile(r"""["'](https?://[^"'\s]+)["']""")
NOT_FOLLOWED = ("mailto:", "javascript:", "data:", "attachment:", "tel:")


def is_external(url: str, site: str) -> bool:
    return url.startswith(("http://", "https://", "//")) and not url.startswith(site)


# --- Finding links ---------------------------------------------------------------------

def links_in_html(html: str) -> list[str]:
    """The links of an HTML page or fragment: its elements' ``href``/``src``, then the
    http(s) addresses quoted in its scripts."""
    return links_in_soup(BeautifulSoup(html, "html.parser"))


def links_in_soup(soup) -> list[str]:
    found = [tag[attribute] for name, attribute in LINK_ATTRIBUTES.items()
             for tag in soup.find_all(name) if tag.get(attribute)]
    return found + [url for script in soup.find_all("script")
                    for url in SCRIPT_URL.findall(script.get_text())]


def links_in_markdown(text: str) -> list[str]:
    """The links of MyST Markdown: links, images, linkified URLs, raw HTML's, and those in
    directives' bodies (an admonition's, a dropdown's), which MyST parses as Markdown."""
    found = []
    for token in MYST.parse(text):
        for child in [token, *(token.children or [])]:
            if child.type == "link_open":
                found.append(child.attrs["href"])
            elif child.type == "image":
                found.append(child.attrs["src"])
            elif child.type in ("html_block", "html_inline"):
                found += links_in_html(child.content)
        if token.type in ("fence", "colon_fence") and token.info.startswith("{"):
            found += links_in_markdown(token.content)
    return found


def links_in_outputs(cell) -> list[str]:
    found = []
    for output in cell.get("outputs", []):
        data = output.get("data", {})
        found += links_in_html(data.get("text/html", ""))
        found += links_in_markdown(data.get("text/markdown", ""))
        found += SCRIPT_URL.findall(data.get("application/javascript", ""))
    return found


def links_in_notebook(notebook) -> list[str]:
    """The links of a notebook's Markdown cells and of its outputs; code is not read."""
    found = []
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            found += links_in_markdown(cell.source)
        found += links_in_outputs(cell)
    return found


def links_in_bibliography(path: Path) -> list[str]:
    """The addresses the References page links: each work's ``url`` (else
    ``https://doi.org/`` and its ``doi``) and any ``\\url{...}`` in its fields."""
    found = []
    for fields in (entry.fields for entry in parse_file(path).entries.values()):
        if fields.get("url") or fields.get("doi"):
            found.append(fields.get("url") or f"https://doi.org/{fields['doi']}")
        found += [url for value in fields.values() for url in LATEX_URL.findall(value)]
    return found


def source_links(root: Path = ROOT) -> dict[str, set[str]]:
    """Every link of the book's sources (see the module's docstring), with where it is."""
    found = defaultdict(set)

    def add(path: Path, links: list[str]) -> None:
        for link in links:
            found[link].add(str(path.relative_to(root)))

    for path in sorted((root / "book").glob("*.md")):
        add(path, links_in_markdown(path.read_text()))
    for path in sorted((root / "notebooks").glob("*.ipynb")) + sorted(
            (root / "notebooks" / "jupyter").glob("*.ipynb")):
        add(path, links_in_notebook(nbformat.read(path, as_version=4)))
    for path in sorted((root / "notebooks" / "text").glob("*.py")):
        add(path, links_in_notebook(jupytext.read(path)))
    add(root / "book" / "references.bib", links_in_bibliography(root / "book" / "references.bib"))
    return dict(found)


# --- The list of external links --------------------------------------------------------

def read_list(path: Path = LIST) -> list[str]:
    """The listed URLs: one a line; blank lines and lines starting with ``#`` are skipped."""
    urls = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if not re.fullmatch(r"https?://\S+", line):
            raise ValueError(f"{path.name}:{n}: {line!r} is not an http(s) URL; write one URL "
                             "a line, comments on lines of their own starting with '#'")
        if line in urls:
            raise ValueError(f"{path.name}:{n}: {line!r} is listed twice; delete one")
        urls.append(line)
    return urls


def check_listed(found: dict[str, set[str]], listed: list[str], site: str) -> list[str]:
    """Why the list and the sources' external links differ; empty when they do not."""
    external = {url: where for url, where in found.items() if is_external(url, site)}
    problems = [f"{url} (in {', '.join(sorted(where))}) is not in {LIST.name}: check it "
                "opens, then add it there" for url, where in sorted(external.items())
                if url not in listed]
    problems += [f"{url} is listed in {LIST.name} but no longer in the book: delete it there"
                 for url in listed if url not in external]
    return problems


# --- Links into the built site ---------------------------------------------------------

@dataclass
class Site:
    """``_build/html`` as served at ``address`` (ending in "/")."""
    html: Path
    address: str
    _soups: dict[Path, BeautifulSoup] = field(default_factory=dict)
    _ids: dict[Path, set[str]] = field(default_factory=dict)

    def pages(self) -> list[Path]:
        """Every page: the theme's assets and the notebooks' sources are not pages."""
        return sorted(path for path in self.html.rglob("*.html")
                      if not {"_static", "_sources"} & set(path.relative_to(self.html).parts))

    def address_of(self, page: Path) -> str:
        return self.address + page.relative_to(self.html).as_posix()

    def soup(self, page: Path) -> BeautifulSoup:
        if page not in self._soups:
            self._soups[page] = BeautifulSoup(page.read_text(), "html.parser")
        return self._soups[page]

    def ids(self, page: Path) -> set[str]:
        if page not in self._ids:
            soup = self.soup(page)
            self._ids[page] = {tag["id"] for tag in soup.find_all(id=True)} | {
                tag["name"] for tag in soup.find_all("a", attrs={"name": True})}
        return self._ids[page]

    def check(self, url: str) -> str | None:
        """Why ``url``, an address of this site, leads nowhere; None when it lands."""
        address, anchor = urldefrag(url)
        path = unquote(urlsplit(address).path)
        base = urlsplit(self.address).path
        if not path.startswith(base):
            return "outside the site"
        target = self.html / path.removeprefix(base)
        if address.endswith("/") or target.is_dir():
            target = target / "index.html"
        if not target.is_file():
            return f"no file {target.relative_to(self.html).as_posix()} in the site"
        if anchor and target.suffix == ".html" and unquote(anchor) not in self.ids(target):
            return f"no anchor #{anchor} in {target.relative_to(self.html).as_posix()}"
        return None

    def resolve(self, href: str, page: str) -> str | None:
        """``href`` as written on the page at address ``page``: the address of this site it
        leads to, or None when it leads elsewhere (external, mailto:, a bare "#")."""
        if href.startswith(NOT_FOLLOWED) or href in ("", "#"):
            return None
        url = urljoin(page, href)
        same_host = urlsplit(url).netloc == urlsplit(self.address).netloc
        return url if url.startswith(self.address) or same_host else None


def check_site(site: Site, listed: list[str]) -> tuple[list[str], int, int]:
    """Every page's links to the site land, every external link of a page's text is
    listed: (problems, internal links checked, external links of the text)."""
    problems, internal, external = [], 0, set()
    for page in site.pages():
        name = page.relative_to(site.html).as_posix()
        soup = site.soup(page)
        for href in links_in_soup(soup):
            url = site.resolve(href, site.address_of(page))
            if url is not None:
                internal += 1
                if (why := site.check(url)) is not None:
                    problems.append(f"{name}: {href}: {why}")
        for article in soup.find_all("article"):
            for href in links_in_soup(article):
                if is_external(href, site.address):
                    external.add(href)
                    if href not in listed:
                        problems.append(f"{name}: {href} is not in {LIST.name}: check it "
                                        "opens, then add it there")
    return problems, internal, len(external)


def check_editions(site: Site, editions: list[Path]) -> tuple[list[str], int]:
    """Every link of the editions to the book lands on a page and anchor of the site; a
    relative link, which Colab would resolve on GitHub, is reported too."""
    problems, internal = [], 0
    for path in editions:
        for link in links_in_notebook(nbformat.read(path, as_version=4)):
            if link.startswith(NOT_FOLLOWED):
                continue
            if not link.startswith(("http://", "https://", "//")):
                problems.append(f"{path.name}: {link}: a relative link, which Colab resolves "
                                f"on GitHub; link the book's page at {site.address}")
                continue
            if site.resolve(link, link) is None:  # external
                continue
            internal += 1
            if (why := site.check(link)) is not None:
                problems.append(f"{path.name}: {link}: {why}")
    return problems, internal


def report(what: str, problems: list[str]) -> int:
    """Print one check ("ok  what" or "FAIL what") and its problems, each once with how
    often it came; 1 if it failed."""
    print(f"{'ok  ' if not problems else 'FAIL'} {what}")
    for problem, times in Counter(problems).items():
        print(f"     - {problem}{f' ({times} times)' if times > 1 else ''}")
    return int(bool(problems))


def main() -> int:
    if not (HTML / "index.html").is_file():
        print("no _build/html/index.html: run `make book` first (or `make link-test`)",
              file=sys.stderr)
        return 2
    start = time.perf_counter()
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    site = Site(HTML, site_url(config))
    listed = read_list()
    editions = sorted((ROOT / "notebooks" / "jupyter").glob("*.ipynb"))
    site_problems, internal, external = check_site(site, listed)
    edition_problems, edition_links = check_editions(site, editions)
    found = source_links()
    failures = report(f"the site: {len(site.pages())} pages, {internal} links to its own pages, "
                      f"{external} distinct external links in the text", site_problems)
    failures += report(f"the Jupyter editions: {len(editions)} notebooks, {edition_links} links "
                       f"to the book at {site.address}", edition_problems)
    failures += report(f"the sources: {sum(is_external(u, site.address) for u in found)} "
                       f"distinct external links, {len(listed)} listed in {LIST.name}",
                       check_listed(found, listed, site.address))
    print(f"link test: {failures} failing, {time.perf_counter() - start:.1f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
