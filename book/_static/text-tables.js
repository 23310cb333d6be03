// GPT from Scratch: an output printed as a text table (most of its lines with columns aligned by
// runs of spaces, or a tensor's indented rows) keeps its lines and scrolls inside its own box;
// other outputs wrap, so that a long sentence or error message stays readable. In a plain-text
// table, a line that is not a row (a message above or below it) still wraps.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  const aligned = /\S {2,}\S|^ {2,}\S/;
  for (const pre of document.querySelectorAll("div.cell_output pre")) {
    const lines = pre.textContent.split("\n");
    const rows = lines.filter(line => aligned.test(line)).length;
    const table = rows >= 2 && rows >= lines.filter(line => line.trim()).length / 2;
    pre.classList.toggle("text-table", table);
    // Coloured output (spans with text in them): leave its markup alone.
    if (!table || [...pre.children].some(child => child.textContent)) continue;
    pre.replaceChildren(...lines.flatMap((line, i) => {
      const part = aligned.test(line) || !line.trim() ? document.createTextNode(line)
        : Object.assign(document.createElement("span"), {className: "text-line", textContent: line});
      return i ? [document.createTextNode("\n"), part] : [part];
    }));
  }
});
