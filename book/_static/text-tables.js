// GPT from Scratch: an output printed as a text table (most of its lines with columns aligned by
// runs of spaces, or a tensor's indented rows) keeps its lines; other outputs wrap, so that a long
// sentence or error message stays readable. In a plain-text table, a line that is not a row (a
// message above or below it) still wraps. A table wider than its box (on a phone; a text table or
// an HTML one, such as a pandas DataFrame's) is set smaller until it fits, down to MIN_PX, the
// smallest text the book draws anywhere (a figure's, too); one that still does not fit scrolls
// inside its own box, and scripts/browser_test.py fails a page whose prose quotes a number that
// such a table hides.
"use strict";

(() => {
  const MIN_PX = 9;
  const aligned = /\S {2,}\S|^ {2,}\S/;
  const fit = () => {
    for (const box of document.querySelectorAll(
      "div.cell_output pre.text-table, div.cell_output table")) {
      box.style.fontSize = "";
      let size = parseFloat(getComputedStyle(box).fontSize);
      for (let i = 0; i < 8 && box.scrollWidth > box.clientWidth + 1 && size > MIN_PX; i++) {
        size = Math.max(MIN_PX, Math.floor(10 * size * box.clientWidth / box.scrollWidth) / 10);
        box.style.fontSize = `${size}px`;
      }
    }
  };
  document.addEventListener("DOMContentLoaded", () => {
    for (const pre of document.querySelectorAll("div.cell_output pre")) {
      const lines = pre.textContent.split("\n");
      const rows = lines.filter(line => aligned.test(line)).length;
      const table = rows >= 2 && rows >= lines.filter(line => line.trim()).length / 2;
      pre.classList.toggle("text-table", table);
      // Coloured output (spans with text in them): leave its markup alone.
      if (!table || [...pre.children].some(child => child.textContent)) continue;
      pre.replaceChildren(...lines.flatMap((line, i) => {
        const part = aligned.test(line) || !line.trim() ? document.createTextNode(line)
          : Object.assign(document.createElement("span"), {className: "text-line",
                                                           textContent: line});
        return i ? [document.createTextNode("\n"), part] : [part];
      }));
    }
    fit();
  });
  let pending;
  window.addEventListener("resize", () => {
    clearTimeout(pending);
    pending = setTimeout(fit, 100);
  });
})();
