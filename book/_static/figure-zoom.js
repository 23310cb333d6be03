// GPT from Scratch: a figure drawn smaller than its stored size (any figure on a phone, a wide one on
// a laptop) opens at full size on a tap, in a dialog that scrolls both ways; a tap, the close button
// or Escape closes it. scripts/browser_test.py taps every figure whose text is under 9 CSS px.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  const dialog = document.createElement("dialog");
  dialog.className = "figure-zoom";
  dialog.setAttribute("aria-label", "The figure at full size");
  const close = document.createElement("button");
  close.type = "button";
  close.className = "figure-zoom-close";
  close.textContent = "✕ Close";
  const full = document.createElement("img");
  dialog.append(close, full);
  document.body.append(dialog);
  dialog.addEventListener("click", () => dialog.close());

  // The full size in CSS px: myst-nb writes a retina PNG's half size into its inline style.
  const fullWidth = img => parseFloat(img.style.width) || img.naturalWidth;
  const figures = [...document.querySelectorAll("main figure img, main div.cell_output img")];
  const hints = new Map();  // a line under each shrunken figure says it opens at full size
  const mark = () => {
    for (const img of figures) {
      const shown = img.getBoundingClientRect().width;
      const shrunk = img.naturalWidth > 0 && shown > 0 && shown < fullWidth(img) - 1;
      img.classList.toggle("zoomable", shrunk);
      img.title = shrunk ? "Tap for the figure at full size" : "";
      hints.get(img).hidden = !shrunk;
    }
  };
  for (const img of figures) {
    const open = event => {
      if (!img.classList.contains("zoomable")) return;
      event.preventDefault();  // Sphinx wraps the image in a link to the bare PNG: stay in the page
      full.src = img.currentSrc || img.src;
      full.alt = img.alt;
      full.style.width = `${fullWidth(img)}px`;
      dialog.showModal();
      dialog.scrollTo(0, 0);
    };
    const hint = document.createElement("button");
    hint.type = "button";
    hint.className = "figure-zoom-hint";
    hint.textContent = "⤢ Full size";
    hint.hidden = true;
    hint.addEventListener("click", open);
    (img.closest("a") || img).after(hint);
    hints.set(img, hint);
    img.addEventListener("load", mark);
    img.addEventListener("click", open);
  }
  window.addEventListener("resize", mark);
  mark();
});
