"""Chapter 15's runs and prose: the launcher ends every process it started, even when a rank
fails or the run takes too long, and the sentences and lessons read their numbers right."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from gpt_from_scratch.book import lessons, parallel_prose as prose
from gpt_from_scratch.book.parallel_runs import job_args, launch


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    monkeypatch.setattr(lessons, "_LESSONS", {})


def running(folder: Path) -> list[int]:
    """The processes whose command line names ``folder`` (Linux's /proc)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if str(folder).encode() in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return found


needs_proc = pytest.mark.skipif(not Path("/proc/self/cmdline").exists(),
                                reason="counts processes through Linux's /proc")


@needs_proc
def test_a_failing_rank_is_named_and_no_process_is_left(tmp_path):
    with pytest.raises(RuntimeError, match=r"(?s)nope: rank 0 of 2 ended with exit code 1; its "
                                           r"last lines:\n.*setup.pt"):
        launch("nope", 2, tmp_path, timeout_s=120)  # no setup.pt: every rank fails
    assert running(tmp_path) == []


@needs_proc
def test_a_run_past_its_time_is_ended(tmp_path):
    with pytest.raises(RuntimeError, match=r"the 2 processes did not finish within 0.2 s "
                                           "and were ended"):
        launch("pair", 2, tmp_path, timeout_s=0.2)
    assert running(tmp_path) == []


def test_bad_arguments_are_named(tmp_path):
    with pytest.raises(ValueError, match="is not a folder: pass an existing one"):
        launch("pair", 2, tmp_path / "missing")
    with pytest.raises(ValueError, match="world_size=0 must be a whole number >= 1"):
        launch("pair", 0, tmp_path)
    assert job_args(tmp_path, "run", 24, 8)[-5:] == [str(tmp_path), "run", "24", "8", "0"]


def test_the_ring_model_is_fitted_back():
    alpha, beta = 2e-4, 1.5e9  # seconds a step, bytes a second
    volume = [2**14, 2**17, 2**20, 2**23]
    seconds = [2 * alpha + v / beta for v in volume]  # N = 2: two steps
    fitted = prose.fit_ring(volume, seconds, N=2)
    assert fitted == pytest.approx((alpha, beta), rel=1e-6)
    latency_only = prose.fit_ring(volume, [1e-3] * 4, N=2)  # no term negative
    assert latency_only[0] > 0 and latency_only[1] > 0
    with pytest.raises(ValueError, match="pass two or more sizes"):
        prose.fit_ring([1], [1e-3], N=2)


def test_the_equivalence_lesson_needs_both_sides_of_its_bar():
    good = prose.equivalence_lesson({"DDP": 3e-5, "never averaged": 2e-2}, 2e-8, 3, 3e-3)
    assert good.holds and good.margin == pytest.approx(math.log10(2e-2 / 1e-3))
    assert "1.5 decades above the one and 1.3 below the other" in good.text
    unseparated = prose.equivalence_lesson({"DDP": 3e-5, "never averaged": 5e-4}, 2e-8, 3,
                                           3e-3)
    assert not unseparated.holds  # a mistake below the bar: the bar separates nothing
    with pytest.raises(ValueError, match="'never averaged'"):
        prose.equivalence_lesson({"DDP": 3e-5}, 2e-8, 3, 3e-3)


def test_the_memory_lesson_reads_the_farthest_rank():
    formula = {"zero1": lambda N: 8 + 8 / N, "zero3": lambda N: 16 / N}
    found = prose.memory_lesson({("zero1", 4): [10.121, 9.96], ("zero3", 4): [4.0, 4.0]},
                                formula, exact=True)
    assert found.holds and found.margin == pytest.approx(100 * (0.02 - 0.0121))
    assert "ZeRO-1 at N = 4, 10.121 against 10.000" in found.text
    assert not prose.memory_lesson({("zero3", 2): [8.4]}, formula, exact=False).holds


def test_the_speed_lesson_says_what_kept_it_under_two():
    quiet = prose.speed_lesson([0.100, 0.0, 0.005], [0.060, 0.004, 0.005],
                               [0.050, 0.090, 0.005], 3e-4, 1e9, 800_000, (0.5, 2))
    assert quiet.holds and quiet.margin == pytest.approx(2 - 0.105 / 0.069)
    assert "one share took 60% of the two shares' time alone, not half" in quiet.text
    busy = prose.speed_lesson([0.100, 0.0, 0.005], [0.120, 0.004, 0.005],
                              [0.1, 0.1, 0.005], 3e-4, 1e9, 800_000, (7.8, 2))
    assert "a load of 7.8 on 2 cores" in busy.text
    halved = prose.speed_lesson([0.100, 0.0, 0.005], [0.050, 0.001, 0.005],
                                [0.1, 0.1, 0.005], 3e-4, 1e9, 800_000, (0.1, 2))
    assert "not half" not in halved.text  # a share that took half is not a reason
    assert prose.fastest([(0.2, 0.0, 0.01), (0.1, 0.0, 0.01)]) == [0.1, 0.0, 0.01]


def test_torchruns_account_leaves_out_process_ids_and_paths():
    log = ("I1207 03:58:21.908000 22379 /home/someone/.venv/lib/torch/api.py:942] [default] "
           "Worker group FAILED. 1/1 attempts left; will restart worker group\n"
           "E1207 03:58:21.908000 22379 /home/someone/x.py:1002] failed (exitcode: -9) "
           "local_rank: 1 (pid: 22391) of binary: /home/someone/.venv/bin/python\n"
           "[rank0]: RuntimeError: [/a/gloo/pair.cc:537] Read error: Connection reset by "
           "peer. This is typically caused by a remote worker\n"
           "I1207 03:58:07.597000 22379 /x/api.py:707] [default] Rendezvous'ing worker group")
    assert prose.torchrun_lines(log) == [
        "torchrun: Worker group FAILED. 1/1 attempts left; will restart worker group",
        "torchrun: failed (exitcode: -9) local_rank: 1",
        "[rank0]: RuntimeError: Read error: Connection reset by peer."]


def test_the_restart_text_compares_weights_and_losses():
    same = dict(weights=torch.ones(3), losses=[3.0, 2.0], resumed_from=8)
    text = prose.restart_text(same, dict(weights=torch.ones(3), losses=[3.0, 2.0]), 8, 13)
    assert "the 4 steps after it, and the one in progress" in text and "to the bit" in text
    moved = prose.restart_text(same, dict(weights=torch.zeros(3), losses=[3.0, 2.0]), 8, 13)
    assert "differ from the uninterrupted run's by up to 1.0e+00" in moved
