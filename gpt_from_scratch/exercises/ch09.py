"""Checkers for the exercises of Chapter 9 (fine-tuning): ``check_lora_forward``."""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable

import torch

from .core import _Case, _call, _compare_values, _generator, _Mismatch, _require_tensor, _run_cases

__all__ = ["check_lora_forward"]


def _reference(x, weight, bias, A, B, scaling):
    x, weight, bias, A, B = (t.double() for t in (x, weight, bias, A, B))
    return x @ weight.T + bias + scaling * (x @ A.T @ B.T)


def _forms_product(function) -> bool:
    """Whether ``function``'s source multiplies B by A (forming the (out, in) matrix B A) without x:
    ``B @ A``, ``torch.mm(B, A)``, ``B.matmul(A)``; False when the source cannot be read."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError, SyntaxError):
        return False
    params = [a.arg for a in tree.body[0].args.args] if isinstance(tree.body[0], ast.FunctionDef) else []
    x, A, B = (params[0], params[3], params[4]) if len(params) >= 5 else ("x", "A", "B")

    def names(node: ast.AST) -> set[str]:
        return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}

    for node in ast.walk(tree):
        pairs = []
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            pairs.append((node.left, node.right))
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") in ("mm", "matmul"):
            own = [] if getattr(node.func.value, "id", "") == "torch" else [node.func.value]
            operands = own + list(node.args)
            pairs += list(zip(operands, operands[1:]))
        if any(B in names(a) and A in names(b) and x not in names(a) | names(b) for a, b in pairs):
            return True
    return False


def check_lora_forward(candidate) -> bool:
    """Check ``lora_forward(x, weight, bias, A, B, scaling)`` -> (..., out): a frozen linear layer plus
    the LoRA update ``scaling * B A x``, for ``x`` (..., in), ``A`` (r, in) and ``B`` (out, r), applied
    as A then B: a solution that forms the (out, in) matrix ``B A`` fails."""
    specs = [("x (2, 5, 8), weight (6, 8), r=2, scaling=2.0", (2, 5, 8), 6, 2, 2.0, 1),
             ("x (3, 16), weight (4, 16), r=1, scaling=0.5", (3, 16), 4, 1, 0.5, 2),
             ("x (1, 3, 12), weight (12, 12), r=4, scaling=4.0", (1, 3, 12), 12, 4, 4.0, 3)]

    def make(shape, out: int, r: int, scaling: float, seed: int) -> Callable[[], None]:
        def run() -> None:
            g = _generator(seed)
            d_in = shape[-1]
            x, weight = torch.randn(shape, generator=g), torch.randn(out, d_in, generator=g) * 0.2
            bias, A = torch.randn(out, generator=g), torch.randn(r, d_in, generator=g) * 0.3
            B = torch.randn(out, r, generator=g) * 0.3
            expected = _reference(x, weight, bias, A, B, scaling)
            got = _call(candidate, x.clone(), weight.clone(), bias.clone(), A.clone(), B.clone(), scaling)
            got = _require_tensor(got, expected.float(), "output", dtype=False,
                                  shape_hint="the output has the input's leading dimensions and out features: "
                                             "(..., out)")
            _compare_values(got, expected, atol=1e-4, rtol=1e-4, known_mistakes=[
                (_reference(x, weight, bias, A, B, 1.0), "multiply the update by scaling (alpha / r)"),
                (_reference(x, weight, bias * 0, A, B, scaling), "add the frozen layer's bias"),
                (_reference(x, weight, bias, A, B, 0.0), "add the low-rank update: scaling * (x A^T) B^T"),
                (_reference(x, weight, bias, A, B, scaling * scaling), "scale the update once, by scaling"),
            ], default_hint="x @ weight.T + bias + (x @ A.T @ B.T) * scaling", what="output")
        return run

    def never_formed() -> None:
        if _forms_product(candidate):
            raise _Mismatch("your code forms B A, an (out, in) matrix, which this exercise rules out",
                            hint="apply the factors to x one after the other: (x @ A.T) @ B.T costs r "
                                 "(in + out) per token and never builds B A")

    cases = [_Case(label, make(*spec), "x is (..., in), weight (out, in), A (r, in) and B (out, r): "
                                       "x @ A.T is (..., r), then @ B.T gives (..., out)")
             for label, *spec in specs] + [_Case("the update applied as A, then B", never_formed)]
    return _run_cases("check_lora_forward", cases)
