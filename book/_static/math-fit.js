// GPT from Scratch: a display equation wider than the column (on a phone) is set smaller until it
// fits, down to MIN_SCALE of its size; MathJax 3 does not break lines. One that still does not fit
// scrolls inside its own box (book.css), and scripts/browser_test.py counts it as cut.
"use strict";

(() => {
  const MIN_SCALE = 0.6;
  const fit = () => {
    for (const math of document.querySelectorAll('mjx-container[display="true"]')) {
      math.style.fontSize = "";
      let scale = 1;
      while (math.scrollWidth > math.clientWidth + 1 && scale > MIN_SCALE) {
        scale = Math.max(MIN_SCALE, scale * math.clientWidth / math.scrollWidth - 0.01);
        math.style.fontSize = `${(scale * 100).toFixed(1)}%`;
      }
    }
  };
  const start = (tries = 50) => {  // MathJax loads deferred, on pages with math only
    const typeset = window.MathJax?.startup?.promise;
    if (typeset) typeset.then(fit);
    else if (tries) setTimeout(() => start(tries - 1), 100);
  };
  document.addEventListener("DOMContentLoaded", () => start());
  let pending;
  window.addEventListener("resize", () => {
    clearTimeout(pending);
    pending = setTimeout(fit, 100);
  });
})();
