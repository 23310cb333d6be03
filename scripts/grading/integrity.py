"""Integrity, judged from the solution cell's syntax tree: reuse of the package, and every
route around the grader (dynamic imports, exec, frames, patching libraries, lying tensors,
the system).

Only code counts: docstrings, comments and strings that are not used as a name are never
read (a docstring saying "same maths as gpt_from_scratch.layernorm.RMSNorm" is fine), and
pasted check calls were removed before (``grading.cells``). A flagged exercise scores 0,
with the reason.
"""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

PACKAGE = "gpt_from_scratch"
PACKAGE_DIR = Path(__file__).resolve().parents[2] / PACKAGE
SYSTEM_MODULES = {
    "importlib",
    "builtins",
    "sys",
    "os",
    "subprocess",
    "socket",
    "signal",
    "ctypes",
    "inspect",
    "gc",
    "pickle",
    "marshal",
    "shutil",
    "pathlib",
    "multiprocessing",
    "threading",
    "urllib",
    "http",
    "requests",
    "runpy",
    "code",
    "codeop",
    "io",
    "posix",
    "pty",
    "resource",
    "mmap",
    "tempfile",
    "glob",
    "types",
    "safetensors",
    "dill",
    "cloudpickle",
    "ftplib",
    "smtplib",
    "asyncio",
    "selectors",
    "atexit",
}
DYNAMIC_CALLS = {
    "__import__",
    "exec",
    "eval",
    "compile",
    "globals",
    "locals",
    "vars",
    "open",
    "breakpoint",
    "input",
    "memoryview",
}
DUNDERS = {
    "__globals__",
    "__builtins__",
    "__code__",
    "__closure__",
    "__subclasses__",
    "__import__",
    "__loader__",
    "__spec__",
    "__dict__",
    "__class__",
    "__bases__",
    "__mro__",
    "__self__",
    "__func__",
    "__wrapped__",
    "__reduce__",
    "__reduce_ex__",
    "__torch_function__",
    "__torch_dispatch__",
    "__eq__",
    "__getattribute__",
    "__getattr__",
    "__setattr__",
}
FRAMES = {
    "f_back",
    "f_globals",
    "f_locals",
    "f_builtins",
    "gi_frame",
    "cr_frame",
    "tb_frame",
    "_getframe",
    "currentframe",
}
MIN_MATCH_NODES = 40  # smaller functions may be written alike by anyone


def setup_names(setup: str) -> dict[str, str]:
    """Names the set-up binds to the package's objects: {name: "module.object"}."""
    names = {}
    for node in ast.walk(ast.parse(setup)):
        if (
            isinstance(node, ast.ImportFrom)
            and (node.module or "").split(".")[0] == PACKAGE
        ):
            names |= {(a.asname or a.name): f"{node.module}.{a.name}" for a in node.names}
    return names


def module_names(setup: str) -> set[str]:
    """Names the set-up binds to modules (torch, F, nn, np, math, regex): patching them is flagged."""
    names = set()
    for node in ast.walk(ast.parse(setup)):
        if isinstance(node, ast.Import):
            names |= {a.asname or a.name.split(".")[0] for a in node.names}
        elif (
            isinstance(node, ast.ImportFrom)
            and (node.module or "").split(".")[0] != PACKAGE
        ):
            names |= {a.asname or a.name for a in node.names}
    return names | {"torch"}


def _root(node: ast.AST) -> str:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else ""


def _check(node: ast.AST, name: str, package: dict, modules: set[str]) -> str:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        roots = (
            {a.name.split(".")[0] for a in node.names}
            if isinstance(node, ast.Import)
            else {(node.module or "").split(".")[0]}
        )
        if PACKAGE in roots:
            return f"imports {PACKAGE} (the package holds every reference solution)"
        if roots & SYSTEM_MODULES:
            return f"imports {', '.join(sorted(roots & SYSTEM_MODULES))}"
    if isinstance(node, ast.Name) and node.id in DYNAMIC_CALLS | {"__builtins__"}:
        return f"uses {node.id}"
    if (
        isinstance(node, ast.Call)
        and getattr(node.func, "id", "") == "getattr"
        and (
            len(node.args) < 2
            or not isinstance(node.args[1], ast.Constant)
            or str(node.args[1].value).startswith("__")
        )
    ):
        return "uses getattr with a computed or hidden name"
    if (
        isinstance(node, ast.Call)
        and getattr(node.func, "id", "") in ("setattr", "delattr")
        and node.args
        and _root(node.args[0]) in modules | set(package)
    ):
        return f"uses {node.func.id} on {_root(node.args[0])} (patches a library)"
    if isinstance(node, ast.Attribute) and (node.attr in DUNDERS or node.attr in FRAMES):
        return f"uses .{node.attr}"
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and PACKAGE in node.value
        and not node.value.strip().startswith(("\"", "'"))
        and len(node.value) < 200
        and " " not in node.value.strip()
    ):
        return f"names {PACKAGE} in a string"
    targets = (
        node.targets
        if isinstance(node, ast.Assign)
        else [node.target]
        if isinstance(node, (ast.AugAssign, ast.AnnAssign))
        else []
    )
    for target in targets:
        if isinstance(target, (ast.Attribute, ast.Subscript)) and _root(target) in modules:
            return f"changes {ast.unparse(target)[:60]} (patches a library)"
        if isinstance(target, ast.Name) and target.id in modules | set(package):
            return f"rebinds {target.id}"
    if isinstance(node, ast.ClassDef):
        for base in node.bases:
            text = ast.unparse(base)
            if (
                text in ("torch.Tensor", "Tensor", "torch._C.TensorBase")
                or _root(base) in package
            ):
                return f"class {node.name} derives from {text}"
    if (
        isinstance(node, ast.Assign)
        and any(getattr(t, "id", "") == name for t in node.targets)
        and isinstance(node.value, (ast.Name, ast.Attribute))
        and _root(node.value) in package
    ):
        return f"{name} is the package's {ast.unparse(node.value)}"
    return ""


def flags(source: str, name: str, setup: str) -> list[str]:
    """Why ``source`` (a solution cell, plain Python) is not the student's own work, if it is not."""
    tree = ast.parse(source)
    docstrings = {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
    }
    package, modules = setup_names(setup), module_names(setup)
    found = []
    for node in ast.walk(tree):
        if id(node) in docstrings:
            continue
        why = _check(node, name, package, modules)
        if why and why not in found:
            found.append(why)
    match = package_match(source)
    if match:
        found.append(f"the same code as the package's {match}, renamed")
    return found


class _Normalize(ast.NodeTransformer):
    """Local names become v0, v1, … in order of appearance; docstrings go; attributes stay."""

    def __init__(self):
        self.names: dict[str, str] = {}

    def rename(self, name: str) -> str:
        return self.names.setdefault(name, f"v{len(self.names)}")

    def visit_Name(self, node):
        return ast.copy_location(ast.Name(self.rename(node.id), node.ctx), node)

    def visit_arg(self, node):
        return ast.copy_location(ast.arg(self.rename(node.arg)), node)

    def generic_visit(self, node):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            node.name = self.rename(node.name)
            if (
                node.body
                and isinstance(node.body[0], ast.Expr)
                and isinstance(getattr(node.body[0], "value", None), ast.Constant)
                and len(node.body) > 1
            ):
                node.body = node.body[1:]
            if hasattr(node, "returns"):
                node.returns = None
        return super().generic_visit(node)


def normalized(node: ast.AST) -> str:
    return ast.dump(_Normalize().visit(ast.parse(ast.unparse(node))), annotate_fields=False)


@lru_cache(maxsize=1)
def package_index() -> dict[str, str]:
    """Normalized form -> qualified name, for every large enough function and class of the package."""
    index = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        tree = ast.parse(path.read_text())
        module = ".".join(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
        for node in ast.walk(tree):
            if (
                isinstance(node, (ast.FunctionDef, ast.ClassDef))
                and sum(1 for _ in ast.walk(node)) >= MIN_MATCH_NODES
            ):
                index.setdefault(normalized(node), f"{module}.{node.name}")
    return index


def package_match(source: str) -> str:
    """The package object a top-level def or class of ``source`` copies, renamed, if any."""
    index = package_index()
    for node in ast.parse(source).body:
        if (
            isinstance(node, (ast.FunctionDef, ast.ClassDef))
            and sum(1 for _ in ast.walk(node)) >= MIN_MATCH_NODES
        ):
            if match := index.get(normalized(node)):
                return match
    return ""
