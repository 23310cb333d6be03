// GPT from Scratch: an output printed as a text table (columns aligned with runs of spaces, or a
// tensor's indented rows) keeps its lines and scrolls inside its own box; other outputs wrap.
// book.css styles div.cell_output pre.text-table; scripts/browser_test.py checks both.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  const aligned = /\S {2,}\S|^ {2,}\S/;
  for (const pre of document.querySelectorAll("div.cell_output pre")) {
    const lines = pre.textContent.split("\n").filter(line => aligned.test(line));
    pre.classList.toggle("text-table", lines.length >= 2);
  }
});
