"""An exercise's stated constraints ("no tril", "einsum only", "a loop over the heads", "B A
never formed"), judged from the solution's syntax tree by the grader, never by patching the
student's process. A case file lists them in ``rules``; each rule counts as one more case,
passed when the code keeps the rule and every value case passes.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

PRODUCTS = {"mm", "matmul", "einsum", "outer", "mul", "multi_dot", "chain_matmul"}
MODULES = {"torch", "np", "F", "linalg"}
LOOPS = (ast.For, ast.While, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def mentioned(tree: ast.AST) -> set[str]:
    """Every name, attribute and string constant of ``tree`` (a captured ``t = torch.tril`` or a
    ``getattr(x, "tril")`` mentions ``tril`` as much as ``x.tril()`` does)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.alias):
            found.add(node.asname or node.name.split(".")[-1])
            found.add(node.name.split(".")[-1])
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and len(node.value) < 40
        ):
            found.add(node.value)
    return found


def _called(call: ast.Call) -> str:
    return getattr(call.func, "attr", getattr(call.func, "id", ""))


@dataclass(frozen=True)
class Forbid:
    """None of ``names`` may appear (``x.tril_()`` is caught by listing ``tril_`` too)."""

    label: str
    names: tuple[str, ...]
    matmul: bool = False  # the ``@`` operator is ruled out as well

    def broken(self, tree: ast.AST) -> str:
        hits = sorted(set(self.names) & mentioned(tree))
        if self.matmul and any(isinstance(n, ast.MatMult) for n in ast.walk(tree)):
            hits.append("@")
        return f"uses {', '.join(hits)}" if hits else ""


@dataclass(frozen=True)
class Loop:
    """A Python loop is required (``inside`` a method of that name, when given; over something
    whose name contains ``over``, e.g. ``range(self.n_heads)``, when given) or ruled out."""

    label: str
    required: bool
    inside: str = ""
    over: str = ""

    def _counts(self, loop: ast.AST) -> bool:
        if not self.over:
            return True
        iters = (
            [loop.iter]
            if isinstance(loop, ast.For)
            else [g.iter for g in getattr(loop, "generators", [])]
        )
        return any(self.over in name.lower() for i in iters for name in mentioned(i))

    def broken(self, tree: ast.AST) -> str:
        scopes = [
            n
            for n in ast.walk(tree)
            if isinstance(n, ast.FunctionDef) and n.name == self.inside
        ]
        loops = any(
            isinstance(n, LOOPS) and self._counts(n)
            for scope in (scopes if self.inside else [tree])
            for n in ast.walk(scope)
        )
        if self.required and not loops:
            over = f" over the {self.over}s" if self.over else ""
            return f"no Python loop{over}{' in ' + self.inside if self.inside else ''}"
        return "a Python loop" if loops and not self.required else ""


@dataclass(frozen=True)
class NoProduct:
    """The matrix product ``left right`` is never formed (LoRA: B A, a d_out x d_in matrix)."""

    label: str
    left: str
    right: str
    through: str = "x"  # a product that involves this input is fine: (x A^T) B^T

    def _names(self, node: ast.AST) -> set[str]:
        return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}

    def _forms(self, a: ast.AST, b: ast.AST) -> bool:
        left, right = self._names(a), self._names(b)
        return (
            self.left in left and self.right in right and self.through not in left | right
        )

    def broken(self, tree: ast.AST) -> str:
        for node in ast.walk(tree):
            pairs = []
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
                pairs.append((node.left, node.right))
            elif isinstance(node, ast.Call) and _called(node) in PRODUCTS:
                func = (
                    node.func
                )  # B.matmul(A) multiplies its object; torch.mm(B, A) does not
                own = (
                    [func.value]
                    if isinstance(func, ast.Attribute)
                    and not (isinstance(func.value, ast.Name) and func.value.id in MODULES)
                    else []
                )
                operands = [a for a in own + node.args if not isinstance(a, ast.Constant)]
                pairs += list(zip(operands, operands[1:]))
            if any(self._forms(a, b) for a, b in pairs):
                return f"forms {self.left} {self.right}"
        return ""


def judge_rules(source: str, rules) -> list[tuple[str, str]]:
    """(rule label, what breaks it) for each rule ``source`` breaks."""
    tree = ast.parse(source)
    return [(rule.label, why) for rule in rules if (why := rule.broken(tree))]
