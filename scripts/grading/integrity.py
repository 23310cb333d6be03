"""Flags for the teacher, never a gate: a program that is a near copy of the package's code,
or that reaches for the package. Points come from behaviour only (the package is not in the
sandbox: reaching for it fails there, and a copy of its code is the book's own, public,
solution): a flag says where to look, and costs nothing by itself.

Near copies are found by fingerprints: the syntax tree with light edits undone
(``grading.canonical``), every local name replaced by one placeholder, strings by another,
and docstrings removed, cut into overlapping runs of
``GRAM`` tokens, of
which the ``SKETCH`` smallest hashes are kept (a bottom-k sketch: the resemblance of two
sketches estimates that of the whole programs, at a bounded cost per pair). Docstrings,
comments and pasted check calls (``grading.cells``) never count.
"""

from __future__ import annotations

import ast
import re
import zlib
from functools import lru_cache
from pathlib import Path

from grading.canonical import canonical

PACKAGE = "gpt_from_scratch"
PACKAGE_DIR = Path(__file__).resolve().parents[2] / PACKAGE
MIN_NODES = 40  # smaller functions may be written alike by anyone
GRAM = 8  # tokens per run
SKETCH = 400  # hashes kept per fingerprint
NEAR = 0.8  # resemblance of a near copy


class _Normalize(ast.NodeTransformer):
    """Local names become v0, v1, … in order of appearance; docstrings go, strings become
    one placeholder; attributes stay."""

    def __init__(self, one_name: bool = False):
        self.names: dict[str, str] = {}
        self.one_name = one_name  # every local name the same: robust to an inserted line

    def rename(self, name: str) -> str:
        return "v" if self.one_name else self.names.setdefault(name, f"v{len(self.names)}")

    def visit_Name(self, node):
        return ast.copy_location(ast.Name(self.rename(node.id), node.ctx), node)

    def visit_arg(self, node):
        return ast.copy_location(ast.arg(self.rename(node.arg)), node)

    def visit_Constant(self, node):
        if isinstance(node.value, str):  # a string's words are not code
            return ast.copy_location(ast.Constant("s"), node)
        return node

    def generic_visit(self, node):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            node.name = self.rename(node.name)
            if hasattr(node, "returns"):
                node.returns = None
        if isinstance(getattr(node, "body", None), list):  # docstrings, wherever they are
            bare = [n for n in node.body if isinstance(n, ast.Expr)]
            bare = [n for n in bare if isinstance(n.value, ast.Constant)]
            node.body = [n for n in node.body if n not in bare] or [ast.Pass()]
        return super().generic_visit(node)


def normalized(node: ast.AST, one_name: bool = False) -> str:
    tree = canonical(ast.parse(ast.unparse(node)))  # light edits undone
    return ast.dump(_Normalize(one_name).visit(tree), annotate_fields=False)


def fingerprint(node: ast.AST) -> list[int]:
    """The bottom-k sketch of ``node``'s normalized token runs (sorted hashes)."""
    tokens = re.findall(r"[A-Za-z_]\w*|\S", normalized(node, one_name=True))
    runs = {
        zlib.crc32(" ".join(tokens[i : i + GRAM]).encode())
        for i in range(max(len(tokens) - GRAM + 1, 1))
    }
    return sorted(runs)[:SKETCH]


def resemblance(a: list[int], b: list[int], floor: float = 0.0) -> float:
    """Estimated Jaccard resemblance of two sketches (Broder's bottom-k estimate); 0.0 at
    once when it cannot reach ``floor`` (the shared hashes bound it)."""
    if not a or not b:
        return 0.0
    both = set(a).intersection(b)
    if len(both) < floor * max(len(a), len(b)):
        return 0.0
    union = sorted(set(a).union(b))[:SKETCH]
    return sum(1 for h in union if h in both) / len(union)


def size(node: ast.AST) -> int:
    return sum(1 for _ in ast.walk(node))


@lru_cache(maxsize=1)
def package_index() -> list[tuple[str, list[int]]]:
    """(qualified name, fingerprint) of every large enough function and class of the
    package,
    but for the public checks' references (``exercises/``): written as the natural solution,
    a natural solution resembles them."""
    index = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        if "exercises" in path.relative_to(PACKAGE_DIR).parts:
            continue
        tree = ast.parse(path.read_text())
        module = ".".join(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
        for node in ast.walk(tree):
            if (
                isinstance(node, (ast.FunctionDef, ast.ClassDef))
                and size(node) >= MIN_NODES
            ):
                index.append((f"{module}.{node.name}", fingerprint(node)))
    return index


def package_match(tree: ast.Module) -> str:
    """``"<the package's object> (N% alike)"`` for a top-level def or class of ``tree`` that
    is a near copy of one of the package's, else ""."""
    best, where = 0.0, ""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and size(node) >= MIN_NODES:
            mine = fingerprint(node)
            for qualified, theirs in package_index():
                alike = resemblance(mine, theirs, floor=max(best, NEAR))
                if alike > best:
                    best, where = alike, qualified
    return f"{where} ({best:.0%} alike)" if best >= NEAR else ""


def reaches_for_package(tree: ast.Module) -> bool:
    """An import of the package, or a string naming it (docstrings aside)."""
    docstrings = {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        and n.body
        and isinstance(n.body[0], ast.Expr)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(
            a.name.split(".")[0] == PACKAGE for a in node.names
        ):
            return True
        if (
            isinstance(node, ast.ImportFrom)
            and (node.module or "").split(".")[0] == PACKAGE
        ):
            return True
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
            and re.search(r"gpt.{0,3}from.{0,3}scratch", node.value)
        ):
            return True
    return False


EVERYWHERE = ("exec", "eval", "compile", "__import__")  # code this reading cannot see into
MATMUL = "@"  # in a case file's ``hints``: the matrix-product operator


def used_names(tree: ast.AST) -> set[str]:
    """The names ``tree``'s code uses: names, attributes, what imports bind, a
    ``getattr``'s constant name, and ``@`` for the operator. Comments are not in the tree
    and other strings are words, not code: neither counts."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.alias):
            found |= {node.name.split(".")[-1], node.asname or ""}
        elif isinstance(node, ast.MatMult):
            found.add(MATMUL)
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "id", "") in {"getattr", "hasattr"}
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
        ):
            found.add(str(node.args[1].value))
    return found - {""}


def hints(tree: ast.AST, names: tuple[str, ...]) -> list[str]:
    """Which of ``names`` (a case file's ``hints``) and of ``EVERYWHERE`` the code uses, in
    that order: where the teacher reads a written criterion first. Never points."""
    used = used_names(tree)
    return [n for n in dict.fromkeys((*names, *EVERYWHERE)) if n in used]


def flags(source: str) -> list[str]:
    """What the teacher should look at in a program (plain Python), in the grader's
    words."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found = []
    if reaches_for_package(tree):
        found.append(f"reaches for {PACKAGE} (not in the sandbox: it fails there)")
    if match := package_match(tree):
        found.append(f"a near copy of the package's {match}")
    return found
