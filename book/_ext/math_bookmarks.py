"""Keep the math of section titles in the PDF's bookmarks ("4.5 Why divide by √dₖ").

A bookmark is plain text: hyperref drops what it cannot turn into text from a title's LaTeX
(math shifts, ``\\sqrt``, subscripts, ``\\times``), and "4.5 Why divide by $\\sqrt{d_k}$"
became "4.5 Why divide by dk". Sphinx's LaTeX writer puts a title's math in as
``\\protect\\(...\\protect\\)``; this writes
``\\texorpdfstring{\\protect\\(...\\protect\\)}{text}`` instead, where ``text`` is the
formula in Unicode (``pdf_text``): the page, the table of contents and the running heads
typeset the formula, the bookmark shows the text.
``scripts/pdf_test.py`` checks the bookmarks of every title with math, and that hyperref
dropped nothing ("Token not allowed in a PDF string" in the log).
"""

import re

from docutils import nodes
from sphinx.writers.latex import LaTeXTranslator

SYMBOLS = {
    "times": "×", "cdot": "·", "le": "≤", "leq": "≤", "ge": "≥", "geq": "≥", "ne": "≠",
    "approx": "≈", "to": "→", "rightarrow": "→", "infty": "∞", "sum": "∑", "in": "∈",
    "ell": "ℓ", "top": "ᵀ", "log": "log", "exp": "exp", "max": "max", "min": "min",
    "alpha": "α", "beta": "β", "gamma": "γ", "delta": "δ", "epsilon": "ε", "theta": "θ",
    "lambda": "λ", "mu": "μ", "pi": "π", "sigma": "σ", "tau": "τ", "phi": "φ", "Sigma": "Σ",
}
SUBSCRIPT = str.maketrans("0123456789+-=()aehijklmnoprstuvx",
                          "₀₁₂₃₄₅₆₇₈₉₊₋₌₍₎ₐₑₕᵢⱼₖₗₘₙₒₚᵣₛₜᵤᵥₓ")
SUPERSCRIPT = str.maketrans("0123456789+-=()inT", "⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁼⁽⁾ⁱⁿᵀ")
GROUP = r"(\{[^{}]*\}|\\[A-Za-z]+|.)"  # a braced group, a command or one character
LATEX_SPECIAL = {c: "\\" + c for c in "#$%&_{}"} | {"~": r"\textasciitilde{}",
                                                     "^": r"\textasciicircum{}",
                                                     "\\": r"\textbackslash{}"}


def _script(mark: str, table: dict, body: str) -> str:
    """A sub- or superscript in Unicode where every character has one, else ``_k``."""
    body = body.strip("{}")
    scripted = body.translate(table)
    return scripted if all(ord(c) > 127 for c in scripted) else mark + body


def _root(match) -> str:
    """√x, √dₖ; √(1 - β) when the radicand is more than one term."""
    inner = pdf_text(match.group(1).removeprefix("{").removesuffix("}"))
    return "√" + (f"({inner})" if re.search(r"[\s+\-/=·×]", inner) else inner)


def pdf_text(tex: str) -> str:
    """A formula as the plain Unicode text of a bookmark: ``\\sqrt{d_k}`` -> ``√dₖ``,
    ``4\\times`` -> ``4×``. An unknown command keeps its name (``\\foo`` -> ``foo``)."""
    text = re.sub(r"\\(left|right|big|Big|bigl|bigr|displaystyle|mathrm|operatorname"
                  r"|text|mathbf|mathit)\b", "", tex)
    text = re.sub(r"\\[,;:! ]", " ", text)
    text = re.sub(r"\\sqrt\s*" + GROUP, _root, text)
    text = re.sub(r"\\([A-Za-z]+)", lambda m: SYMBOLS.get(m.group(1), m.group(1)), text)
    text = re.sub(r"_\s*" + GROUP, lambda m: _script("_", SUBSCRIPT, m.group(1)), text)
    text = re.sub(r"\^\s*" + GROUP, lambda m: _script("^", SUPERSCRIPT, m.group(1)), text)
    return re.sub(r"\s+", " ", text.replace("{", "").replace("}", "")).strip()


def visit_math(self, node):
    if not self.in_title:
        return LaTeXTranslator.visit_math(self, node)
    tex = node.astext()
    text = "".join(LATEX_SPECIAL.get(c, c) for c in pdf_text(tex))
    self.body.append(r"\texorpdfstring{\protect\(%s\protect\)}{%s}" % (tex, text))
    raise nodes.SkipNode


def setup(app):
    app.add_node(nodes.math, override=True, latex=(visit_math, None))
    return {"parallel_read_safe": True, "parallel_write_safe": True}
