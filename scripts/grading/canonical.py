"""Light edits undone before a program is fingerprinted (``grading.integrity``), so that a
classmate's file lightly edited still resembles it: a helper used once put back where it is
used (its statements before the one that calls it), dead code dropped (a branch that never
runs, what follows a ``return``, an assignment no code reads, an expression with no call),
a loop that appends to a new list written as a list comprehension (its other statements
before it, as a helper's), ``x += y`` as ``x = x + y``, the operands of ``+``, ``*``,
``&``, ``|``, ``^``, ``==`` and ``!=`` put in one order, and ``a > b`` written ``b < a``.
The order is chosen on the operands' shapes with every name alike, so that renaming cannot
change it. The result is for fingerprints, not a program with the same meaning. Each step
undoes only what two programs written the same way could differ by: independent solutions
stay apart (tests/test_grading_fingerprints.py). A helper that returns from more than one
place is not put back.
"""

from __future__ import annotations

import ast
import copy

COMMUTATIVE = (ast.Add, ast.Mult, ast.BitAnd, ast.BitOr, ast.BitXor)
TURNED = {ast.Gt: ast.Lt, ast.GtE: ast.LtE}
SIDE_EFFECTS = (ast.Call, ast.Await, ast.Yield, ast.YieldFrom, ast.NamedExpr)
ENDS = (ast.Return, ast.Raise, ast.Continue, ast.Break)
HELPERS = 8  # helpers put back at most: a light edit adds a few (each costs a pass)


def shape(node: ast.AST) -> str:
    """``node`` with every name and string alike: an order no renaming changes."""
    plain = copy.deepcopy(node)
    for n in ast.walk(plain):
        if isinstance(n, ast.Name):
            n.id = "v"
        elif isinstance(n, ast.arg):
            n.arg = "v"
        elif isinstance(n, ast.Constant) and isinstance(n.value, str):
            n.value = "s"
    return ast.dump(plain, annotate_fields=False)


class _Order(ast.NodeTransformer):
    """Commutative operands in one order, ``>`` and ``>=`` turned, ``x op= y`` spelled
    out; children first, so that an operand's shape is its own canonical one."""

    def visit_BinOp(self, node):
        if not isinstance(node.op, COMMUTATIVE):
            return self.generic_visit(node)
        operands, stack = [], [node]
        while stack:  # a chain of the same operator: a + b + c in any grouping
            n = stack.pop()
            if isinstance(n, ast.BinOp) and type(n.op) is type(node.op):
                stack += [n.right, n.left]
            else:
                operands.append(self.visit(n))
        operands.sort(key=shape)
        chain = operands[0]
        for operand in operands[1:]:
            chain = ast.BinOp(chain, type(node.op)(), operand)
        return chain

    def visit_Compare(self, node):
        self.generic_visit(node)
        if len(node.ops) != 1:
            return node
        op, left, right = node.ops[0], node.left, node.comparators[0]
        if type(op) in TURNED:
            return ast.Compare(right, [TURNED[type(op)]()], [left])
        if isinstance(op, (ast.Eq, ast.NotEq)) and shape(right) < shape(left):
            return ast.Compare(right, [op], [left])
        return node

    def visit_AugAssign(self, node):
        read = copy.deepcopy(node.target)
        read.ctx = ast.Load()
        value = self.visit_BinOp(ast.BinOp(read, node.op, node.value))
        return ast.Assign([node.target], value)


def appended(loop: ast.stmt) -> tuple[str, list, ast.expr] | None:
    """(the list's name, the statements before, the list comprehension) of a ``for`` loop
    whose last statement appends to a list (under an ``if``, or not), else None. The
    statements before go before the comprehension, as an inlined helper's do."""
    if not (isinstance(loop, ast.For) and loop.body and not loop.orelse):
        return None
    *before, statement = loop.body
    tests = []
    if isinstance(statement, ast.If) and len(statement.body) == 1 and not statement.orelse:
        statement, tests = statement.body[0], [statement.test]
    call = statement.value if isinstance(statement, ast.Expr) else None
    if not (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr == "append"
        and isinstance(call.func.value, ast.Name)
        and len(call.args) == 1
        and not call.keywords
        and not any(isinstance(n, (ast.Break, ast.Continue)) for s in before
                    for n in ast.walk(s))
    ):
        return None
    generator = ast.comprehension(loop.target, loop.iter, tests, 0)
    return call.func.value.id, before, ast.ListComp(call.args[0], [generator])


def empty_list(statement: ast.stmt) -> str | None:
    """The name ``statement`` binds to a new empty list (``[]``, ``list()``), else None."""
    if not (
        isinstance(statement, ast.Assign)
        and len(statement.targets) == 1
        and isinstance(statement.targets[0], ast.Name)
    ):
        return None
    value = statement.value
    empty = isinstance(value, ast.List) and not value.elts
    empty |= (
        isinstance(value, ast.Call)
        and getattr(value.func, "id", "") == "list"
        and not value.args
        and not value.keywords
    )
    return statement.targets[0].id if empty else None


def created(done: list[ast.stmt], name: str) -> int | None:
    """The index in ``done`` of the statement that made ``name`` a new empty list, if no
    later one uses ``name``; else None."""
    for i in range(len(done) - 1, -1, -1):
        if empty_list(done[i]) == name:
            return i
        if any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(done[i])):
            return None
    return None


def cleaned(body: list[ast.stmt], unread: set[str], local: bool) -> list[ast.stmt]:
    """``body`` without dead code (assignments to ``unread`` names only where ``local``:
    a function's), its append loops as comprehensions."""
    out: list[ast.stmt] = []
    for statement in body:
        test = getattr(statement, "test", None)
        if isinstance(test, ast.Constant) and isinstance(statement, ast.If):
            taken = statement.body if test.value else statement.orelse
            out += cleaned(taken, unread, local)
            continue
        if isinstance(test, ast.Constant) and isinstance(statement, ast.While) and (
            not test.value
        ):
            out += cleaned(statement.orelse, unread, local)
            continue
        if isinstance(statement, ast.Expr) and not any(
            isinstance(n, SIDE_EFFECTS) for n in ast.walk(statement)
        ):
            continue
        if local and isinstance(statement, (ast.Assign, ast.AnnAssign)) and all(
            isinstance(t, ast.Name) and t.id in unread
            for t in getattr(statement, "targets", [getattr(statement, "target", None)])
        ):
            continue
        if isinstance(statement, ast.Pass):
            continue
        built = appended(statement)
        start = built and created(out, built[0])
        if start is not None:
            name, before, comprehension = built
            del out[start]
            out += [*before, ast.Assign([ast.Name(name, ast.Store())], comprehension)]
            continue
        out.append(statement)
        if isinstance(statement, ENDS):
            break
    return out


class _Clean(ast.NodeTransformer):
    """Every block of statements ``cleaned``, a function's with its unread names."""

    def __init__(self, unread: set[str]):
        self.unread, self.local = unread, False

    def generic_visit(self, node):
        if isinstance(node, ast.expr):  # no statement inside
            return node
        local = self.local
        self.local = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or (
            local and not isinstance(node, ast.ClassDef)
        )
        super().generic_visit(node)
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                kept = cleaned(body, self.unread, self.local)
                setattr(node, field, kept or ([ast.Pass()] if field == "body" else []))
        self.local = local
        return node


def helper(tree: ast.Module) -> tuple | None:
    """(its def, the one call, the statement that makes it) of a function of ``tree`` used
    once, by a call from outside itself, that returns once, at its end; else None."""
    defs, uses, calls = {}, {}, {}
    for n in ast.walk(tree):
        if isinstance(n, (ast.Module, ast.ClassDef)):
            defs |= {d.name: d for d in n.body if isinstance(d, ast.FunctionDef)}
        elif isinstance(n, ast.Call):
            calls[id(n.func)] = n
        name = n.id if isinstance(n, ast.Name) else getattr(n, "attr", None)
        if name and not isinstance(getattr(n, "ctx", None), ast.Store):
            uses.setdefault(name, []).append(n)
    for name in defs.keys() & uses.keys():
        found, body = uses[name], defs[name].body
        inside = list(ast.walk(defs[name]))
        returns = [n for n in inside if isinstance(n, (ast.Return, ast.Yield))]
        call = calls.get(id(found[0]))
        if len(found) == 1 and call and returns == [body[-1]] and not any(
            n is call for n in inside
        ):
            owner = next(
                s for s in ast.walk(tree) if isinstance(s, ast.stmt)
                and any(n is call for f in own_expressions(s) for n in ast.walk(f))
            )
            return defs[name], call, owner
    return None


def own_expressions(statement: ast.stmt) -> list[ast.AST]:
    """The expressions of ``statement`` itself, not of the statements it holds."""
    values = [v for _, v in ast.iter_fields(statement)]
    values = [x for v in values for x in (v if isinstance(v, list) else [v])]
    return [v for v in values if isinstance(v, ast.AST) and not isinstance(v, ast.stmt)]


class _Inline(ast.NodeTransformer):
    """A helper used once put where it is used: its statements before the statement that
    calls it, the call replaced by what it returns, its def gone (fingerprints only: this
    is not the program's meaning)."""

    def __init__(self, found: tuple):
        self.definition, self.call, self.owner = found

    def visit_Call(self, node):
        if node is self.call:
            return copy.deepcopy(self.definition.body[-1].value) or ast.Constant(None)
        return self.generic_visit(node)

    def generic_visit(self, node):
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if isinstance(body, list):
                setattr(node, field, [x for s in body for x in self.spliced(s)])
        return super().generic_visit(node)

    def spliced(self, statement: ast.stmt) -> list[ast.stmt]:
        if statement is self.definition:
            return []
        before = self.definition.body[:-1] if statement is self.owner else []
        return copy.deepcopy(before) + [statement]


def canonical(tree: ast.Module) -> ast.Module:
    """``tree`` (changed in place) with the light edits above undone."""
    for _ in range(HELPERS):
        if (found := helper(tree)) is None:
            break
        tree = _Inline(found).visit(tree)
    unread: set[str] | None = None
    for _ in range(3):  # an assignment read only by one that goes is unread in turn
        read, stored = set(), set()
        for n in ast.walk(tree):
            if isinstance(n, ast.Name):
                (stored if isinstance(n.ctx, ast.Store) else read).add(n.id)
            elif isinstance(n, (ast.Global, ast.Nonlocal)):
                read.update(n.names)
        if stored - read == unread:
            break
        unread = stored - read
        tree = _Clean(unread).visit(tree)
    return _Order().visit(tree)  # for ast.dump: no locations needed
