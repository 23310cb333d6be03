"""Rules judged by behaviour (book/instructors.md, "Rules judged by behaviour"): where
breaking an exercise's rule shows from outside the student's process, a submission that
breaks it fails that case alone, with the case's behaviour named in its note (split over
processes too: the CPU of the sandbox's whole process tree counts), and honest ones, written
in any way the rule allows, pass every case. Chapter 2's long table is in
test_grading.py (its loop per entry among the typical mistakes); here Chapter 9's B A."""

from __future__ import annotations

import csv
import shutil

import nbformat
import pytest

from grading_class import grade, material, submission

sandbox = pytest.importorskip("grading.sandbox")
pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
HEAD = "def lora_forward(x, weight, bias, A, B, scaling):\n"
HONEST = {  # the update through the r-dimensional bottleneck
    "bottleneck": "    return x @ weight.T + bias + scaling * (x @ A.T) @ B.T",
    "linear_layers": "    linear = torch.nn.functional.linear\n"
    "    return linear(x, weight, bias) + scaling * linear(linear(x, A), B)",
    "einsum": "    low = torch.einsum('...i,ri->...r', x, A)\n"
    "    update = torch.einsum('...r,or->...o', low, B)\n"
    "    return torch.einsum('...i,oi->...o', x, weight) + bias + scaling * update",
}
FORMS_BA = {  # right values, each through the (d_out, d_in) matrix B A or its transpose
    "merged_weight": "    return torch.nn.functional.linear(x, weight + scaling * B @ A, bias)",
    "delta_then_x": "    delta = B @ A\n    return x @ weight.T + bias + scaling * x @ delta.T",
    "transposed_factors": "    return x @ weight.T + bias + scaling * x @ (A.T @ B.T)",
    # B A formed an eighth at a time in 8 processes, each under its own CPU limit: the
    # sandbox's control group counts them as one
    "split_over_processes": "    import os\n"
    "    parts = torch.arange(B.shape[0]).chunk(8)\n"
    "    for i, rows in enumerate(parts):\n"
    "        if os.fork() == 0:\n"
    "            torch.save(x @ (B[rows] @ A).T, f'/tmp/part{i}')\n"
    "            os._exit(0)\n"
    "    for _ in parts:\n"
    "        os.wait()\n"
    "    update = torch.cat([torch.load(f'/tmp/part{i}') for i in range(len(parts))], -1)\n"
    "    return x @ weight.T + bias + scaling * update",
}
WIDE = "wide_layer_of_high_rank_under_1.5_cpu_seconds"


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rules")
    secret = tmp / "course_secret"
    secret.write_text("a-course-secret-for-the-rules-" + "9" * 32)
    _, autograder, _, student_nb = material("09_finetuning", tmp / "assign")
    folder = tmp / "submissions"
    folder.mkdir()
    for name, body in {**HONEST, **FORMS_BA}.items():
        program = {"lora_forward": HEAD + body}
        nbformat.write(submission(student_nb, program), folder / f"{name}.ipynb")
    out = tmp / "grades.csv"
    grade.grade_folder(folder, autograder, out, secret=secret, quiet=True)
    with out.open(newline="") as f:
        return {r["student"]: r for r in csv.DictReader(f)}


@pytest.mark.parametrize("name", sorted(FORMS_BA))
def test_forming_b_a_fails_the_wide_case_alone(rows, name):
    row = rows[name]
    assert float(row["lora_forward"]) == round(2 * 2 / 3, 2), row  # the two other cases
    assert f"lora_forward: case {WIDE} (" in row["notes"] and "forming B A" in row["notes"]
    assert "): ran past its " in row["notes"], row  # CPU limit, or under load its wall clock


@pytest.mark.parametrize("name", sorted(HONEST))
def test_the_bottleneck_passes_every_case(rows, name):
    row = rows[name]
    assert (float(row["lora_forward"]), row["notes"]) == (2.0, ""), row
