// GPT from Scratch: a code line longer than the column (on a phone: 92 characters do not fit in
// 390 px) wraps instead of scrolling sideways, and reads as Python: its continuation lines hang
// four spaces in from the line's own indentation (book.css, span.code-line), and it breaks at
// spaces or after a bracket, a comma, a dot or an operator (<wbr>), never inside a name. Copying
// the cell copies the original lines: the spans are inline blocks between the original newlines.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  const breakAfter = /[(\[{,.=]$/;
  for (const pre of document.querySelectorAll("article div.highlight pre")) {
    if (pre.closest("div.cell_output")) continue;
    // Pygments writes one span per token: split every node that holds a newline into lines.
    const lines = [[]];
    for (const node of [...pre.childNodes]) {
      const parts = node.textContent.split("\n");
      parts.forEach((part, i) => {
        if (i) lines.push([]);
        if (!part) return;
        const piece = node.nodeType === Node.TEXT_NODE ? document.createTextNode(part)
          : Object.assign(node.cloneNode(false), {textContent: part});
        lines.at(-1).push(piece);
        const token = piece.nodeType === Node.ELEMENT_NODE && piece.matches("span.p, span.o");
        if (token && breakAfter.test(part)) lines.at(-1).push(document.createElement("wbr"));
      });
    }
    pre.replaceChildren(...lines.flatMap((nodes, i) => {
      const line = document.createElement("span");
      line.className = "code-line";
      line.append(...nodes);
      const indent = line.textContent.match(/^ */)[0].length;
      line.style.setProperty("--indent", `${indent}ch`);
      return i ? [document.createTextNode("\n"), line] : [line];
    }));
  }
});
