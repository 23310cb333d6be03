"""The book on a phone (390 px), measured for scripts/browser_test.py, with the bars it must pass.

On each page at 390 px: how many code cells scroll sideways (a line that cannot wrap: book.css and
code-lines.js wrap the others), how many display equations are cut (still wider than their box
once math-fit.js has set them smaller), and how much the page weighs: every byte the browser
loads for it, uncompressed, with the cache off. ``PhoneReport`` adds the pages up with the
smallest figure text as drawn (``check_figures``) and says which bar the book misses:

- code cells that scroll sideways: at most ``MAX_SCROLLING_CODE`` of all cells;
- cut display equations: none;
- the smallest figure text as drawn, without a tap: at least ``MIN_TEXT_PX`` CSS px;
- a page with an interactive figure or a live model (before Run): under
  ``MAX_INTERACTIVE_BYTES``;
- no number that the prose under an output quotes hidden in that output: a table still wider than
  its box once text-tables.js has set it smaller scrolls, and a number past its right edge is one a
  reader on a phone cannot see while reading the sentence that quotes it. A number counts when it
  has a decimal point, a thousands comma, a percent sign or three digits (so that "2" in a column of
  ranks does not match "2" in the prose), and the prose is the text from the output to the next
  code the reader sees (generated prose included).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MAX_SCROLLING_CODE = 0.10  # share of code cells
MAX_INTERACTIVE_BYTES = 4 * 2**20
MIN_TEXT_PX = 9
QUOTABLE = re.compile(r"[.,%]|\d{3}")  # a number a sentence quotes, not a small count or index

PHONE_FACTS = """
const main = document.querySelector('main') || document.body;
const wide = e => e.scrollWidth > e.clientWidth + 1;
const cells = [...main.querySelectorAll('div.cell_input pre')];
const longest = e => e.textContent.split('\\n').reduce((a, b) => (b.length > a.length ? b : a));
const equations = [...main.querySelectorAll('mjx-container[display="true"]')];
const entries = [...performance.getEntriesByType('navigation'),
                 ...performance.getEntriesByType('resource')];
return {cells: cells.length, scrolling: cells.filter(wide).map(e => longest(e).trim().slice(0, 60)),
        equations: equations.length,
        cut: equations.filter(wide).map(e => e.textContent.slice(0, 60)),
        scaled: equations.filter(e => e.style.fontSize).length,
        bytes: entries.reduce((sum, r) => sum + (r.decodedBodySize || 0), 0),
        interactive: !!main.querySelector('div.plotly-graph-div, div.live-model'),
        hidden: hiddenNumbers()};

// Each number printed past the right edge of the box it scrolls in, with the line it is on and the
// prose after its cell (up to the next cell that shows code).
function hiddenNumbers() {
  const scroller = (e, stop) => {
    for (; e && e !== stop.parentElement; e = e.parentElement) {
      const x = getComputedStyle(e).overflowX;
      if ((x === 'auto' || x === 'scroll') && e.scrollWidth > e.clientWidth + 1) return e;
    }
    return null;
  };
  const proseAfter = cell => {
    const parts = [];
    for (let n = cell.nextElementSibling; n; n = n.nextElementSibling) {
      if (n.matches('div.cell') && n.querySelector('div.cell_input')) break;
      parts.push(n.matches('div.cell')
        ? [...n.querySelectorAll('p, li')].map(p => p.textContent).join(' ') : n.textContent);
    }
    return parts.join(' ');
  };
  const hidden = [];
  for (const out of main.querySelectorAll('div.cell_output')) {
    const cell = out.closest('div.cell');
    const walker = document.createTreeWalker(out, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const box = scroller(node.parentElement, out);
      if (!box || !cell) continue;
      const edge = box.getBoundingClientRect().left + box.clientWidth;
      for (const m of node.textContent.matchAll(/\\d[\\d,.]*\\d%?|\\d%?/g)) {
        const range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        const r = range.getBoundingClientRect();
        if (r.width > 0 && r.right > edge + 1) {
          const line = node.textContent.split('\\n').find(l => l.includes(m[0])) || '';
          hidden.push([m[0], line.trim().slice(0, 60), proseAfter(cell)]);
        }
      }
    }
  }
  return hidden;
}
"""


def quoted_and_hidden(hidden: list[list[str]]) -> list[str]:
    """The hidden numbers (``[number, its line, the prose after it]``) that the prose quotes."""
    found = []
    for number, line, prose in hidden:
        whole = r"(?<![\d.,])" + re.escape(number) + r"(?![\d]|[.,]\d)"
        if QUOTABLE.search(number) and re.search(whole, prose):
            found.append(f"{number} in {line!r}")
    return list(dict.fromkeys(found))


@dataclass
class PhoneReport:
    """The phone measurements of every page checked, added up."""

    cells: int = 0
    scrolling: list[str] = field(default_factory=list)
    equations: int = 0
    cut: list[str] = field(default_factory=list)
    smallest_px: dict[str, float] = field(default_factory=dict)  # figure -> text px as drawn
    weights: dict[str, int] = field(default_factory=dict)  # page -> bytes
    interactive: set[str] = field(default_factory=set)
    hidden_quotes: list[str] = field(default_factory=list)  # "page: number in 'line'"

    def measure(self, driver, page: str) -> list[str]:
        """Read the page (loaded at 390 px with the cache off); its lines for the page's report."""
        facts = driver.execute_script(PHONE_FACTS)
        self.cells += facts["cells"]
        self.scrolling += [f"{page}: {line}" for line in facts["scrolling"]]
        self.equations += facts["equations"]
        self.cut += [f"{page}: {text}" for text in facts["cut"]]
        self.weights[page] = facts["bytes"]
        if facts["interactive"]:
            self.interactive.add(page)
        hidden = quoted_and_hidden(facts["hidden"])
        self.hidden_quotes += [f"{page}: {entry}" for entry in hidden]
        return [f"390 px: {len(facts['scrolling'])} of {facts['cells']} code cells scroll sideways, "
                f"{len(facts['cut'])} of {facts['equations']} display equations cut "
                f"({facts['scaled']} set smaller to fit), {facts['bytes'] / 2**20:.2f} MB, "
                f"{len(hidden)} numbers the prose quotes hidden in a scrolling output"]

    def problems(self) -> list[str]:
        """Each bar the book misses, with what misses it."""
        problems = []
        share = len(self.scrolling) / max(self.cells, 1)
        if share > MAX_SCROLLING_CODE:
            problems.append(f"{share:.0%} of code cells scroll sideways, at most "
                            f"{MAX_SCROLLING_CODE:.0%}: " + "; ".join(self.scrolling[:10]))
        problems += [f"display equation cut at 390 px: {text}" for text in self.cut]
        small = {name: px for name, px in self.smallest_px.items() if px < MIN_TEXT_PX}
        problems += [f"figure {name}: smallest text {px:.1f} CSS px as drawn at 390 px, at least "
                     f"{MIN_TEXT_PX}" for name, px in sorted(small.items(), key=lambda x: x[1])]
        problems += [f"{page} weighs {self.weights[page] / 2**20:.2f} MB, an interactive page "
                     f"under {MAX_INTERACTIVE_BYTES / 2**20:.0f} MB"
                     for page in sorted(self.interactive)
                     if self.weights[page] >= MAX_INTERACTIVE_BYTES]
        problems += [f"hidden at 390 px past the right edge of its output, quoted by the prose "
                     f"under it: {entry}" for entry in self.hidden_quotes]
        return problems

    def summary(self) -> list[str]:
        """The numbers, whether or not they pass."""
        share = len(self.scrolling) / max(self.cells, 1)
        smallest = min(self.smallest_px.values(), default=float("nan"))
        heaviest = max(self.weights, key=self.weights.get, default=None)
        lines = [f"code cells that scroll sideways: {len(self.scrolling)} of {self.cells} "
                 f"({share:.1%}; bar {MAX_SCROLLING_CODE:.0%})",
                 f"display equations cut: {len(self.cut)} of {self.equations} (bar 0)",
                 f"smallest figure text as drawn: {smallest:.1f} CSS px over "
                 f"{len(self.smallest_px)} figures (bar {MIN_TEXT_PX})",
                 f"numbers the prose quotes hidden in a scrolling output: "
                 f"{len(self.hidden_quotes)} (bar 0)"]
        lines += [f"interactive page {page}: {self.weights[page] / 2**20:.2f} MB (bar "
                  f"{MAX_INTERACTIVE_BYTES / 2**20:.0f} MB)" for page in sorted(self.interactive)]
        if heaviest:
            lines.append(f"heaviest page: {heaviest}, {self.weights[heaviest] / 2**20:.2f} MB")
        return lines
