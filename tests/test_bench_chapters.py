"""The per-chapter budget of ``python -m benchmarks chapters``: each chapter's share of ``make
test`` from the runs' own records (nbval's junit file, book_models.py's times), and ``--check``
failing when a chapter is over its bar (a benchmark's check, never a timed test)."""

from __future__ import annotations

import json

from benchmarks import bench_chapters

CELLS = ('<testsuites><testsuite>'
         '<testcase classname="02_embeddings_and_position.ipynb" name="Cell 0" time="100.5"/>'
         '<testcase classname="02_embeddings_and_position.ipynb" name="Cell 1" time="30"/>'
         '<testcase classname="notebooks.14_verifier.ipynb" name="Cell 3" time="40"/>'
         '</testsuite></testsuites>')


def records(tmp_path, grpo_cpu_s: float):
    (tmp_path / "nbval.xml").write_text(CELLS)
    (tmp_path / "book-models.json").write_text(json.dumps({
        "grpo-0": {"chapter": "14", "wall_s": 1.0, "cpu_s": grpo_cpu_s},
        "grpo-1": {"chapter": "14", "wall_s": 1.0, "cpu_s": 10.0}}))
    (tmp_path / "nbval-avx2.xml").write_text(CELLS)
    return tmp_path


def test_each_chapters_share_adds_its_cells_and_its_models(tmp_path):
    rows = {r[0]: r[1:] for r in bench_chapters.shares(records(tmp_path, 100.0))}
    assert rows["02"] == (130.5, 0.0, 130.5, 261.0)  # over 2 minutes: make test's and CI's
    assert rows["14"] == (40.0, 110.0, 150.0, 190.0)  # CI: the cells again, no AVX2 record


def test_check_fails_only_when_a_chapter_is_over_its_bar(tmp_path, capsys):
    argv = ["--records", str(records(tmp_path, 100.0)), "--ci-log", str(tmp_path / "none")]
    assert bench_chapters.main(argv) == 0  # no --check: a table, whatever it says
    assert bench_chapters.main(argv + ["--check"]) == 1  # chapter 2: 130.5 s > 120 s
    assert "over budget: chapter 02" in capsys.readouterr().out
    (tmp_path / "nbval.xml").write_text(CELLS.replace('time="100.5"', 'time="80"'))
    assert bench_chapters.main(argv + ["--check"]) == 0  # 110 s, and 14's 150 s < 300 s
    records(tmp_path, 300.0)
    (tmp_path / "nbval.xml").write_text(CELLS.replace('time="100.5"', 'time="80"'))
    assert bench_chapters.main(argv + ["--check"]) == 1  # chapter 14: 40 + 310 s > 300 s
