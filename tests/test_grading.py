"""The grader end to end, in its sandbox, on simulated classes: every chapter's correct
solutions, typical mistakes and untouched stubs; then one class of cheats and honest
students (chapter 7), whose sheet must hold exactly the expected rows, with nothing changed
outside a cheat's own row.
"""

from __future__ import annotations

import csv
import hashlib
import shutil
from pathlib import Path

import nbformat
import pytest

from grading_class import MISTAKES, ROOT, assign, grade, material, solutions, submission

sandbox = pytest.importorskip("grading.sandbox")
LIMITS = sandbox.Limits(cpu_seconds=5.0, wall_seconds=8.0)
needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None,
    reason="grading needs bubblewrap (apt-get install bubblewrap)",
)


@pytest.fixture
def secret(tmp_path) -> Path:
    path = tmp_path / "course_secret"
    path.write_text("a-course-secret-for-the-tests-" + "0" * 32)
    return path


def sheet(out: Path) -> dict[str, dict]:
    with out.open(newline="") as f:
        return {r["student"]: r for r in csv.DictReader(f)}


@needs_bwrap
@pytest.mark.parametrize("chapter", list(assign.ASSIGNMENTS))
def test_every_chapter_grades_correct_solutions_and_typical_mistakes(
    chapter, tmp_path, secret
):
    assignment, autograder, chapter_nb, student_nb = material(chapter, tmp_path / "assign")
    names = [e.name for e in assignment.exercises]
    points = {e.name: e.points for e in assignment.exercises}
    folder = tmp_path / "submissions"
    folder.mkdir()
    expected = {"correct": dict(points), "untouched_stub": dict.fromkeys(names, 0.0)}
    nbformat.write(
        submission(student_nb, solutions(chapter_nb, names)), folder / "correct.ipynb"
    )
    nbformat.write(student_nb, folder / "untouched_stub.ipynb")
    for i in range(3):
        nbformat.write(
            submission(student_nb, {n: MISTAKES[n][i][0] for n in names}),
            folder / f"mistake_{i + 1}.ipynb",
        )
        expected[f"mistake_{i + 1}"] = {
            n: round(MISTAKES[n][i][1] * points[n], 2) for n in names
        }
    out = tmp_path / "grades.csv"
    grade.grade_folder(folder, autograder, out, secret=secret, limits=LIMITS, quiet=True)
    rows = sheet(out)
    assert set(rows) == set(expected)
    for student, want in expected.items():
        got = {n: float(rows[student][n]) for n in names}
        assert got == pytest.approx(want), f"{student}: {rows[student]}"
        assert rows[student]["flags"] == "", f"{student}: {rows[student]}"
    assert "NotImplementedError" in rows["untouched_stub"]["notes"]


MIN_P = '''def min_p_filter(logits, min_p):
    probs = torch.softmax(logits, dim=-1)
    threshold = min_p * probs.max(dim=-1, keepdim=True).values
    return logits.masked_fill(probs < threshold, float("-inf"))'''
TOP_P = '''def top_p_unsorted(logits, p):
    probs = torch.softmax(logits, dim=-1)
    above = probs[..., None, :] > probs[..., :, None]
    mass_above = (above * probs[..., None, :]).sum(dim=-1)
    return logits.masked_fill(mass_above >= p, float("-inf"))'''
PACKAGE_TOP_P = 'top_p_unsorted = {}.top_p_filter'
# Each cheat replaces top_p_unsorted (so its min_p_filter, correct, must keep its 2 points).
CHEATS = {
    "importlib": "import importlib\n"
    + PACKAGE_TOP_P.format('importlib.import_module("gpt_" + "from_scratch.generate")'),
    "dunder_import": PACKAGE_TOP_P.format(
        '__import__("gpt_from_scratch.generate", fromlist=["x"])'
    ),
    "exec_string": 'exec("from gpt_from_scratch.generate import top_p_filter as top_p_unsorted")',
    "eval_string": PACKAGE_TOP_P.format(
        'eval("__imp" + "ort__")("gpt_from_scratch.generate", fromlist=["x"])'
    ),
    "sys_modules": "import sys\n"
    + PACKAGE_TOP_P.format('sys.modules["gpt_from_scratch.generate"]'),
    "globals_of_a_function": PACKAGE_TOP_P.format(
        'torch.nn.functional.softmax.__globals__["torch"]'
    ),
    "frame_inspection": "def top_p_unsorted(logits, p):\n    import inspect\n"
    "    return inspect.currentframe().f_back.f_globals['x'](logits, p)",
    "builtins_dict": "top_p_unsorted = __builtins__['__import__']('gpt_from_scratch.generate', "
    "fromlist=['x']).top_p_filter",
    "os_module": "import os\n" + TOP_P,
    "subprocess_module": "import subprocess\n" + TOP_P,
    "socket_module": "import socket\n" + TOP_P,
    "signal_module": "import signal\nsignal.alarm(0)\n" + TOP_P,
    "patched_assert_close": "torch.testing.assert_close = lambda *a, **k: None\n" + TOP_P,
    "patched_torch_equal": "def top_p_unsorted(logits, p):\n    torch.equal = lambda a, b: True\n"
    "    return logits",
    "patched_builtins": "import builtins\nbuiltins.isinstance = lambda *a: True\n" + TOP_P,
    "lying_tensor": "class Liar(torch.Tensor):\n    def __eq__(self, other):\n        return True\n\n"
    "def top_p_unsorted(logits, p):\n    return Liar(logits)",
    "forged_results": TOP_P
    + "\n\nopen('/out/top_p_unsorted.json', 'w').write('{\"points\": 300}')",
    "computed_sort": "def top_p_unsorted(logits, p):\n    sort = getattr(torch, 'so' + 'rt')\n"
    "    return sort(logits)[0]",
    "import_package": "from gpt_from_scratch.generate import top_p_filter\n\n"
    "def top_p_unsorted(logits, p):\n    return top_p_filter(logits, p)",
}


def pasted_package_source() -> str:
    """The package's top_p_filter, pasted with its arguments and local variables renamed."""
    import ast
    import inspect

    from gpt_from_scratch import generate

    tree = ast.parse(inspect.getsource(generate.top_p_filter))
    function = tree.body[0]
    local = {a.arg for a in function.args.args} | {
        n.id
        for n in ast.walk(function)
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }
    renames = {name: f"my_{i}" for i, name in enumerate(sorted(local))}
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and node.id in renames:
            node.id = renames[node.id]
        elif isinstance(node, ast.arg) and node.arg in renames:
            node.arg = renames[node.arg]
    function.name = "top_p_unsorted"
    function.body = function.body[1:]  # its docstring
    return ast.unparse(tree)


def honest_class(student_nb) -> dict[str, tuple[object, dict, str]]:
    """File name -> (notebook or text, expected points, a phrase the notes must hold)."""
    full = {"min_p_filter": 2.0, "top_p_unsorted": 3.0}
    check = "\n\nfrom gpt_from_scratch.exercises import check_min_p_filter\ncheck_min_p_filter(min_p_filter)"
    documented = MIN_P.replace(
        "):\n",
        '):\n    """Same maths as gpt_from_scratch.generate (min-p, '
        'relative to the top token)."""\n    # see gpt_from_scratch.generate\n',
        1,
    )
    own_import = nbformat.v4.new_code_cell("import torch.nn.functional as F")
    uses_f = MIN_P.replace("torch.softmax", "F.softmax")
    percent = (
        "# %%\nimport torch\n\n# %% [markdown]\n# My answers\n\n# %%\n"
        + MIN_P
        + "\n\n# %%\n"
        + TOP_P
        + "\n"
    )
    both = {"min_p_filter": MIN_P, "top_p_unsorted": TOP_P}
    return {
        "correct.ipynb": (submission(student_nb, both), full, ""),
        "pasted_check.ipynb": (
            submission(student_nb, {**both, "min_p_filter": MIN_P + check}),
            full,
            "",
        ),
        "docstring_names_package.ipynb": (
            submission(student_nb, {**both, "min_p_filter": documented}),
            full,
            "",
        ),
        "import_in_own_cell.ipynb": (
            submission(student_nb, {**both, "min_p_filter": uses_f}, [own_import]),
            {**full, "min_p_filter": 0.0},
            "NameError: name 'F' is not defined",
        ),
        "percent_time.ipynb": (
            submission(student_nb, {**both, "min_p_filter": "%%time\n" + MIN_P}),
            full,
            "",
        ),
        "script.py": (percent, full, ""),
        "SHOUTING.IPYNB": (submission(student_nb, both), full, ""),
        "Jane Doe_4711_assignsubmission_file_/07_generation_assignment.ipynb": (
            submission(student_nb, both),
            full,
            "",
        ),
        "week7/late/bob.ipynb": (submission(student_nb, both), full, ""),
        "=2+3.ipynb": (submission(student_nb, both), full, ""),
        "notes.docx": (b"PK\x03\x04 not a notebook", {}, "skipped"),
        "broken.ipynb": ("{ this is not json", {}, "unreadable"),
        "huge_error.ipynb": (
            submission(
                student_nb,
                {
                    **both,
                    "min_p_filter": MIN_P.replace(
                        "    probs =", "    raise ValueError('x' * 1_000_000)\n    probs ="
                    ),
                },
            ),
            {**full, "min_p_filter": 0.0},
            "ValueError",
        ),
    }


def tree_digest(*folders: Path) -> dict[str, str]:
    return {
        str(p): hashlib.sha256(p.read_bytes()).hexdigest()
        for folder in folders
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@needs_bwrap
def test_a_class_of_cheats_and_honest_students_gets_the_expected_sheet(tmp_path, secret):
    chapter = "07_generation"
    assignment, autograder, chapter_nb, student_nb = material(chapter, tmp_path / "assign")
    folder = tmp_path / "submissions"
    students = honest_class(student_nb)
    for cheat, source in {
        **CHEATS,
        "pasted_package_source": pasted_package_source(),
    }.items():
        students[f"cheat_{cheat}.ipynb"] = (
            submission(student_nb, {"min_p_filter": MIN_P, "top_p_unsorted": source}),
            {"min_p_filter": 2.0, "top_p_unsorted": 0.0},
            "flag",
        )
    for name, (content, _, _) in students.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            (folder / name).write_bytes(content)
        elif isinstance(content, str):
            (folder / name).write_text(content)
        else:
            nbformat.write(content, folder / name)
    before = tree_digest(folder, ROOT / "scripts" / "private_tests")
    out = tmp_path / "grades.csv"
    grade.grade_folder(
        folder,
        autograder,
        out,
        secret=secret,
        limits=LIMITS,
        quiet=True,
        feedback=tmp_path / "feedback",
        canvas=tmp_path / "canvas.csv",
    )
    rows = sheet(out)
    ids = {
        name: name.rsplit(".", 1)[0] if name.lower().endswith((".ipynb", ".py")) else name
        for name in students
    }
    ids["Jane Doe_4711_assignsubmission_file_/07_generation_assignment.ipynb"] = (
        "Jane Doe_4711"
    )
    ids["=2+3.ipynb"] = "'=2+3"
    assert set(rows) == set(ids.values())
    for name, (_, expected, phrase) in students.items():
        row = rows[ids[name]]
        for exercise, points in expected.items():
            assert float(row[exercise]) == points, f"{name}: {row}"
        if phrase == "flag":
            assert row["flags"].startswith("top_p_unsorted:"), f"{name}: {row}"
        else:
            assert row["flags"] == "", f"{name}: {row}"
            assert phrase in row["notes"], f"{name}: {row}"
        assert len(row["notes"]) <= 600 and len(row["flags"]) <= 600
    assert tree_digest(folder, ROOT / "scripts" / "private_tests") == before
    feedback = (tmp_path / "feedback" / "correct" / "feedback.txt").read_text()
    assert "top_p_unsorted: 3 of 3" in feedback and "✅" in feedback
    canvas = list(csv.reader((tmp_path / "canvas.csv").open()))
    assert canvas[0][:5] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
    assert ["correct", "", "", "correct", "", "5"] in canvas
    report = (tmp_path / "grades_similarity.csv").read_text()
    assert "identical files" in report and "correct" in report


def test_untouched_hand_in_notebooks_run_top_to_bottom(tmp_path):
    """Every chapter's hand-in notebook, as handed out, in a fresh kernel: no cell raises, and
    each check says "not implemented yet"."""
    from nbclient import NotebookClient

    for chapter, assignment in assign.ASSIGNMENTS.items():
        folder = assign.write_assignment(assignment, tmp_path)
        nb = nbformat.read(folder / "student" / f"{chapter}_assignment.ipynb", as_version=4)
        NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=False).execute()
        printed = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
        assert printed.count("not implemented yet") == len(assignment.exercises), (
            f"{chapter}:\n{printed}"
        )
        assert "✅" not in printed and "Traceback" not in printed


def test_the_quiz_after_the_exercises_is_in_no_exercise_block():
    cells = [nbformat.v4.new_markdown_cell("## Exercises\n\n### Exercise 1. Why (explain)\n\nWhy?"),
             nbformat.v4.new_code_cell("print(42)"),
             nbformat.v4.new_markdown_cell("## Check yourself", metadata={"tags": ["quiz"]}),
             nbformat.v4.new_code_cell("show_quiz([])", metadata={"tags": ["quiz"]})]
    blocks = assign.exercise_blocks(nbformat.v4.new_notebook(cells=cells))
    assert [[c.source for c in block] for block in blocks] == [[cells[0].source, "print(42)"]]
