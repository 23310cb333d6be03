"""What the grader decides from the syntax tree and the files alone (no sandbox, fast):
cells through IPython's transformer, integrity flags, the exercises' rules, the sheet, the
secret."""

from __future__ import annotations

import csv
import inspect

import pytest

from grading_class import assign, grade  # noqa: F401  (puts scripts/ on the path)
from grading import cells, integrity, rules, secret, sheet
from grading.cases import seed_for

SETUP = (
    "import math\n\nimport torch\nimport torch.nn.functional as F\nfrom torch import nn\n\n"
    "from gpt_from_scratch.attention import causal_mask, scaled_dot_product_attention"
)
MASK = "def causal_mask_arange(T):\n    return torch.arange(T)[None, :] <= torch.arange(T)[:, None]"


def flags(source: str, name: str = "causal_mask_arange") -> list[str]:
    return integrity.flags(cells.solution_cell([source], name), name, SETUP)


@pytest.mark.parametrize(
    "source, reason",
    [
        (
            "import importlib\ncausal_mask_arange = importlib.import_module('x').f",
            "imports importlib",
        ),
        ("causal_mask_arange = __import__('x').f", "uses __import__"),
        ("exec('def causal_mask_arange(T): pass')", "uses exec"),
        ("causal_mask_arange = eval('lambda T: T')", "uses eval"),
        ("import sys\ncausal_mask_arange = sys.modules['x'].f", "imports sys"),
        ("causal_mask_arange = torch.ones.__globals__['x']", "uses .__globals__"),
        ("def causal_mask_arange(T):\n    return (lambda: 0).__code__", "uses .__code__"),
        (
            "import inspect\ncausal_mask_arange = inspect.currentframe().f_back.f_globals['f']",
            "inspect",
        ),
        ("causal_mask_arange = __builtins__['__import__']('x').f", "uses __builtins__"),
        (
            "import builtins\nbuiltins.isinstance = lambda *a: True\n" + MASK,
            "imports builtins",
        ),
        ("import os\n" + MASK, "imports os"),
        ("from subprocess import run\n" + MASK, "imports subprocess"),
        ("import socket\n" + MASK, "imports socket"),
        ("import signal\n" + MASK, "imports signal"),
        ("import gpt_from_scratch\n" + MASK, "imports gpt_from_scratch"),
        ("torch.testing.assert_close = lambda *a, **k: None\n" + MASK, "patches a library"),
        ("setattr(torch, 'equal', lambda *a: True)\n" + MASK, "patches a library"),
        ("class Liar(torch.Tensor):\n    pass\n" + MASK, "derives from torch.Tensor"),
        ("causal_mask_arange = causal_mask", "the package's causal_mask"),
        (
            "def causal_mask_arange(T):\n    return getattr(torch, 'tr' + 'il')(torch.ones(T, T))",
            "getattr",
        ),
    ],
)
def test_every_route_around_the_grader_is_flagged_with_its_reason(source, reason):
    found = flags(source)
    assert any(reason in f for f in found), found


def test_pasted_package_source_is_flagged_even_renamed():
    from gpt_from_scratch import generate

    source = inspect.getsource(generate.top_p_filter).replace(
        "top_p_filter", "top_p_unsorted"
    )
    source = source.replace("logits", "scores").replace("probs", "p_sorted")
    assert any(
        "the same code as the package's gpt_from_scratch.generate.top_p_filter" in f
        for f in integrity.flags(source, "top_p_unsorted", "import torch")
    )


@pytest.mark.parametrize(
    "source",
    [
        '"""Same maths as gpt_from_scratch.attention.causal_mask."""\n' + MASK,
        MASK.replace(
            "):\n",
            '):\n    """Like gpt_from_scratch.attention.causal_mask."""\n    # gpt_from_scratch\n',
        ),
        MASK
        + "\n\nfrom gpt_from_scratch.exercises import check_causal_mask\ncheck_causal_mask(causal_mask_arange)",
        MASK
        + "\n\nimport gpt_from_scratch.exercises as ex\nex.check_causal_mask(causal_mask_arange)",
        "%%time\n" + MASK,
        "%matplotlib inline\n!pip list\n" + MASK,
    ],
)
def test_honest_cells_are_not_flagged_and_still_define_the_name(source):
    assert cells.solution_cell([source], "causal_mask_arange") is not None
    assert flags(source) == []


def test_a_timing_magic_keeps_its_body_as_the_solution():
    assert cells.python_source("%%time\n" + MASK).strip() == MASK
    assert "causal_mask_arange" in cells.defined_names(
        cells.python_source("%time " + MASK.split("\n")[0] + " pass")
    )


@pytest.mark.parametrize(
    "source, rule, broken",
    [
        (
            "def f(T):\n    return torch.ones(T, T).tril()",
            rules.Forbid("no tril", ("tril", "tril_")),
            True,
        ),
        (
            "t = torch.tril\ndef f(T):\n    return t(torch.ones(T, T))",
            rules.Forbid("no tril", ("tril",)),
            True,
        ),
        (
            "def f(T):\n    return torch.ones(T, T).tril_()",
            rules.Forbid("no tril", ("tril", "tril_")),
            True,
        ),
        (MASK, rules.Forbid("no tril", ("tril", "tril_")), False),
        (
            "def f(q, k):\n    return q @ k",
            rules.Forbid("einsum only", ("matmul",), matmul=True),
            True,
        ),
        (
            "def f(q, k):\n    return torch.einsum('qd,kd->qk', q, k)",
            rules.Forbid("e", ("matmul",), matmul=True),
            False,
        ),
        (
            "class M:\n    def forward(self, x):\n        return x",
            rules.Loop("heads", True, "forward", "head"),
            True,
        ),
        (
            "class M:\n    def forward(self, x):\n        return [h for h in range(self.n_heads)]",
            rules.Loop("heads", True, "forward", "head"),
            False,
        ),
        ("def f(T):\n    return [i for i in range(T)]", rules.Loop("no loop", False), True),
    ],
)
def test_rules_are_judged_from_the_syntax_tree(source, rule, broken):
    assert bool(rules.judge_rules(source, [rule])) == broken


NO_BA = rules.NoProduct("B A never formed", "B", "A")


@pytest.mark.parametrize(
    "body, formed",
    [
        ("x @ weight.T + bias + (x @ A.T @ B.T) * scaling", False),
        ("x @ (weight + scaling * B @ A).T + bias", True),
        ("x @ (weight + scaling * (B @ A)).T + bias", True),
        ("F.linear(x, weight + scaling * torch.mm(B, A), bias)", True),
        ("F.linear(x, weight + scaling * B.matmul(A), bias)", True),
        (
            "x @ weight.T + bias + scaling * torch.einsum('...i,ri,or->...o', x, A, B)",
            False,
        ),
    ],
)
def test_the_lora_rule_catches_b_a_formed(body, formed):
    assert (
        bool(
            rules.judge_rules(
                f"def lora_forward(x, weight, bias, A, B, scaling):\n    return {body}",
                [NO_BA],
            )
        )
        == formed
    )


def test_the_sheet_escapes_formulas_cuts_notes_and_keeps_other_rows(tmp_path):
    out = tmp_path / "grades.csv"
    first = sheet.Grade(
        "=2+3", "x.ipynb", {"f": sheet.Result(1.0, note="@SUM(A1)" + "x" * 10_000)}
    )
    other = sheet.Grade("bob", "bob.ipynb", {"f": sheet.Result(2.0)})
    sheet.write([first, other], ["f"], out)
    rows = list(csv.DictReader(out.open(newline="")))
    assert [r["student"] for r in rows] == ["'=2+3", "bob"]
    assert len(rows[0]["notes"]) <= sheet.MAX_NOTE and not rows[0]["notes"].startswith(
        ("=", "+", "-", "@")
    )
    with out.open(newline="") as f:
        table = list(csv.reader(f))
    table[2][table[0].index("written")] = (
        "4"  # the teacher's points for bob's written answers
    )
    with out.open("w", newline="") as f:
        csv.writer(f).writerows(table)
    regraded = sheet.Grade(
        "bob", "bob.ipynb", {"f": sheet.Result(1.0)}, written=sheet.read_written(out)["bob"]
    )
    sheet.write([regraded], ["f"], out)  # one student regraded: the others stay
    rows = {r["student"]: r for r in csv.DictReader(out.open(newline=""))}
    assert (
        set(rows) == {"'=2+3", "bob"}
        and rows["bob"]["written"] == "4"
        and rows["bob"]["total"] == "5"
    )


def test_inputs_come_from_the_course_secret(tmp_path):
    path = tmp_path / "s" / "course_secret"
    assert secret.create_secret(path) and not secret.create_secret(path)
    first = path.read_text()
    assert secret.create_secret(path, rotate=True) and path.read_text() != first
    assert oct(path.stat().st_mode)[-3:] == "600"
    assert seed_for(b"a" * 32, "04", "f") != seed_for(b"b" * 32, "04", "f")
    with pytest.raises(SystemExit, match="make assign"):
        secret.read_secret(tmp_path / "missing")


def test_assign_keeps_the_teachers_folders(tmp_path, monkeypatch):
    monkeypatch.setenv(secret.ENV, str(tmp_path / "course_secret"))
    course = tmp_path / "assign" / "07_generation" / "autograder" / "mine.py"
    course.parent.mkdir(parents=True)
    course.write_text("# the teacher's")
    assign.main(["07", "--out", str(tmp_path / "assign")])
    assert course.read_text() == "# the teacher's" and (tmp_path / "course_secret").exists()
