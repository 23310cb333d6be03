"""Chapter 15's runs and prose: the launcher ends every process it started, even when a rank
fails or the run takes too long, and the sentences and lessons read their numbers right."""

from __future__ import annotations

import math
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gpt_from_scratch.book import lessons, parallel_prose as prose, parallel_runs
from gpt_from_scratch.book import parallel_speed as speed_prose
from gpt_from_scratch.book.parallel_runs import PIDS, _end, job_args, launch, nccl_skipped
from gpt_from_scratch.parallel import free_port


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
    named = r"(?s)nope: rank \d of 2 ended with exit code 1; its last lines:\n.*setup.pt"
    with pytest.raises(RuntimeError, match=named):
        launch("nope", 2, tmp_path, timeout_s=120)  # no setup.pt: every rank fails
    assert running(tmp_path) == []


@needs_proc
def test_a_run_past_its_time_is_ended(tmp_path):
    with pytest.raises(RuntimeError, match=r"the 2 processes did not finish within 0.2 s "
                                           "and were ended"):
        launch("pair", 2, tmp_path, timeout_s=0.2)
    assert running(tmp_path) == []


@needs_proc
def test_a_port_taken_before_rank_0_listens_is_tried_again(tmp_path, monkeypatch):
    torch.save({}, tmp_path / "setup.pt")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        ports = [taken.getsockname()[1]]  # the first port offered is another's
        monkeypatch.setattr(parallel_runs, "free_port",
                            lambda: ports.pop(0) if ports else free_port())
        ranks = launch("meet", 2, tmp_path, timeout_s=120)
    assert [r["ranks"] for r in ranks] == [[0, 1], [0, 1]] and not ports
    assert running(tmp_path) == []


@needs_proc
def test_ending_torchrun_kills_only_this_folders_workers(tmp_path):
    (tmp_path / PIDS).mkdir()
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    ours = subprocess.Popen([*sleep, str(tmp_path)])  # a worker of this folder
    other = subprocess.Popen(sleep)  # a process that got a recorded number again
    try:
        for name, process in (("ours", ours), ("other", other)):
            (tmp_path / PIDS / f"{name}.pid").write_text(str(process.pid))
        agent = subprocess.Popen([sys.executable, "-c", ""], start_new_session=True)
        agent.wait()
        _end(agent, tmp_path)
        assert ours.wait(timeout=10) == -signal.SIGKILL
        assert other.poll() is None  # left alone
    finally:
        for process in (ours, other):
            process.kill()
            process.wait()


def test_the_nccl_track_says_why_it_is_skipped():
    assert nccl_skipped(True, 2) is None
    for full_run, gpus in ((False, 8), (True, 1), (True, 0)):
        reason = nccl_skipped(full_run, gpus)
        assert reason.startswith(f"skipped: this machine has {gpus} GPU(s)")
        assert "FULL_RUN = True and two GPUs or more" in reason


def test_bad_arguments_are_named(tmp_path):
    with pytest.raises(ValueError, match="is not a folder: pass an existing one"):
        launch("pair", 2, tmp_path / "missing")
    with pytest.raises(ValueError, match="world_size=0 must be a whole number >= 1"):
        launch("pair", 0, tmp_path)
    assert job_args(tmp_path, "run", 24, 8)[-5:] == [str(tmp_path), "run", "24", "8", "0"]


def test_the_ring_model_is_fitted_back():
    alpha, beta = 2e-4, 1.5e9  # seconds a step, bytes a second
    volume = [2**10, 2**14, 2**17, 2**20, 2**23]
    seconds = [2 * alpha + v / beta for v in volume]  # N = 2: two steps
    fitted = prose.fit_ring(volume, seconds, N=2)
    assert fitted == pytest.approx((alpha, beta), rel=1e-6)
    latency_only = prose.fit_ring(volume, [1e-3] * 5, N=2)  # no term negative
    assert latency_only[0] > 0 and latency_only[1] > 0
    with pytest.raises(ValueError, match="pass two or more sizes"):
        prose.fit_ring([1], [1e-3], N=2)


def ring_rows(alpha: float, beta: float) -> list[dict]:
    return [dict(sent=n, ring=2 * alpha + n / beta, gloo=1e-3) for n in (2**10, 2**23)]


@pytest.mark.parametrize("alpha, beta", [(15e-6, 4e9), (5e-6, 20e9), (200e-6, 1.3e9)])
def test_the_ring_lesson_holds_for_any_plausible_host(alpha, beta):
    """Its bar follows from the model: a quiet fast host (15 µs, 4 GB/s) passes it too."""
    found = prose.ring_lesson(ring_rows(alpha, beta), alpha, beta)
    assert found.holds and found.margin > 0.5, found.margin
    assert "once αβ, the bytes a link moves during one latency, exceeds 4.6 kB" in \
        found.text


def test_the_ring_lesson_calls_its_fit_this_runs_and_says_when_times_are_out_of_order():
    rows = ring_rows(200e-6, 1.3e9)
    ordered = prose.ring_lesson(rows, 200e-6, 1.3e9)
    assert "this run's values, not the machine's constants. " in ordered.text
    middle = dict(sent=2**17, ring=rows[0]["ring"] / 2, gloo=1e-3)  # faster than 1 KiB
    jumbled = prose.ring_lesson([rows[0], middle, rows[1]], 200e-6, 1.3e9)
    assert ("the times are not even in order of size (1 KiB took 0.40 ms, 128 KiB 0.20 ms)"
            ) in jumbled.text


def test_the_ring_lesson_names_both_causes_when_it_fails():
    found = prose.ring_lesson(ring_rows(0.5e-6, 4e9), 0.5e-6, 4e9)  # 2 kB: under the bar
    assert not found.holds
    assert "αβ under 4.6 kB; the fit gives 2.0 kB" in found.text
    assert "smallest tensor (1 KiB) cost 1.2 ns and its largest (8 MiB)" in found.text
    assert "on a busy machine the time of a small message is mostly waiting" in found.text


def test_the_equivalence_lesson_rests_on_the_gradients():
    grads = {"DDP": 3e-8, "ZeRO-3": 2e-8, "never averaged": 2e-2}
    weights = {"DDP": 3e-5, "never averaged": 2e-2}
    good = prose.equivalence_lesson(grads, weights, 3, 3e-3)
    assert good.holds and good.margin == pytest.approx(math.log10(1e-5 / 3e-8))
    assert ("leaves 2.5 decades between the rounding and itself, and 3.3 between itself "
            "and the mistake") in good.text
    assert "the weights differ by at most 3.0e-05" in good.text
    moved = prose.equivalence_lesson(grads, {"DDP": 6e-3, "never averaged": 2e-2}, 3, 3e-3)
    assert moved.holds  # a weight moved by a flipped sign does not decide it
    unseparated = prose.equivalence_lesson(grads | {"never averaged": 5e-6}, weights, 3,
                                           3e-3)
    assert not unseparated.holds  # a mistake below the bar: the bar separates nothing
    with pytest.raises(ValueError, match="'never averaged'"):
        prose.equivalence_lesson({"DDP": 3e-5}, weights, 3, 3e-3)


def test_the_memory_lesson_reads_the_farthest_rank():
    formula = {"zero1": lambda N: 8 + 8 / N, "zero3": lambda N: 16 / N}
    found = prose.memory_lesson({("zero1", 4): [10.121, 9.96], ("zero3", 4): [4.0, 4.0]},
                                formula, exact=True)
    assert found.holds and found.margin == pytest.approx(100 * (0.02 - 0.0121))
    assert "ZeRO-1 at N = 4, 10.121 against 10.000" in found.text
    assert not prose.memory_lesson({("zero3", 2): [8.4]}, formula, exact=False).holds


def test_the_memory_text_says_at_most_for_zero1():
    sizes = {"small": (800_000, 0.013, 0.01, 0.0), "big": (6.7e9, 106.5, 59.8, 13.3)}
    text = prose.memory_text(sizes, 85.9, 8, "an H100's 80 GiB")
    assert "ZeRO-1 leaves at most 59.8 GB on each" in text


def timings(fb_alone, share, fb, wait, adam=0.005, wait_p=0.03, cpu=None, rounds=4,
            fb_p=None, wait_b=0.01, fb_b=None):
    """Rounds of 3 identical steps each (seconds), as ``parallel_timing.speed`` saves;
    ``cpu``: a share's forward and backward on a core, together (all of it if None)."""
    fb_p, fb_b = fb_p or fb, fb_b or fb
    steps = 3 * rounds
    return {"alone": [[(fb_alone, 0.0, adam)] * 3] * rounds,
            "together": [[(fb, wait, adam)] * 3] * rounds,
            "buckets after": [[(fb_b, wait_b, adam)] * 3] * rounds,
            "per parameter": [[(fb_p, wait_p, adam)] * 3] * rounds,
            "alone shares": [share] * 2 * steps, "alone shares cpu": [share] * 2 * steps,
            "cpu": {"alone": [fb_alone] * steps, "together": [cpu or fb] * steps,
                    "buckets after": [fb_b] * steps, "per parameter": [fb_p] * steps},
            "messages": {"together": 22, "per parameter": 52},
            "all-reduces alone": {"together": 0.009, "per parameter": 0.028}}


def test_the_speed_lesson_accounts_for_every_millisecond_it_names():
    quiet = speed_prose.speed_lesson(timings(0.100, 0.050, 0.052, 0.004), 20e-6, 4e9,
                                     3_239_424)
    assert quiet.holds and quiet.margin == pytest.approx(0.030 / 0.010 - 1)
    assert quiet.text.startswith(
        "Beside the other process, a share's forward and backward ran 52.0 ms on a core "
        "(its thread's CPU time) of the 52.0 ms it took: 0.0 ms, 0%, waiting for a core. "
        "Over 4 rounds")
    assert "two processes were 1.7 times as fast (1.7 to 1.7 round by round)" in quiet.text
    assert ("half the step alone, 52.5 ms, falls short of it by 8.5 ms. Of that, AdamW run "
            "whole in every process took +2.5 ms") in quiet.text
    assert "+4.0 ms; one share's forward and backward +2.0 ms" in quiet.text
    assert ("Alone, one share took 50.0 ms, 50.0 ms of it on a core; together, 2.0 ms more "
            "on a core") in quiet.text
    assert ("the 22 bucketed all-reduces took 9.0 ms and the 52 per-parameter ones 28.0 "
            "ms. The ring's model of section 15.2 gives 1.7 ms and 2.9 ms") in quiet.text
    assert "which the medians here exceed 5.3 and 9.7 times" in quiet.text
    assert ("Both after backward, the wait in `finish()` took 10.0 ms for the 22 buckets "
            "and 30.0 ms for the 52 per-parameter all-reduces, 3.0 times as long (the "
            "median of the rounds; 3.0 to 3.0); a whole step 67.0 ms against 87.0 ms, 1.3 "
            "times as long") in quiet.text
    busy = speed_prose.speed_lesson(timings(0.100, 0.050, 0.080, 0.02, cpu=0.055), 20e-6,
                                    4e9, 10)
    assert busy.text.startswith("Beside the other process, a share's forward and backward "
                                "ran 55.0 ms on a core (its thread's CPU time) of the 80.0 "
                                "ms it took: 25.0 ms, 31%, waiting for a core, so the pair "
                                "did not have two free cores.")
    assert "5.0 ms more on a core (copying the gradients" in busy.text
    assert "and 25.0 ms waiting for one" in busy.text
    level = speed_prose.speed_lesson(timings(0.200, 0.100, 0.050, 0.001, wait_p=0.0), 20e-6,
                               4e9, 10)  # per parameter as fast: the buckets saved nothing
    assert not level.holds and "The buckets saved no wait here" in level.text
    with pytest.raises(ValueError, match="no steps were timed"):
        speed_prose.step_parts([])


def test_the_overlap_is_claimed_only_when_every_round_shows_it():
    hid = speed_prose.overlap_text(timings(0.100, 0.050, 0.052, 0.001, wait_b=0.010))
    assert ("a step took 58.0 ms against 67.0 ms: with the buckets after backward, 1.2 "
            "times as long (the median of the rounds; 1.2 to 1.2)") in hid
    assert "The overlap hid 9.0 ms a step, in every round" in hid
    same = timings(0.100, 0.050, 0.060, 0.001, wait_b=0.010, fb_b=0.051, cpu=0.040)
    nothing = speed_prose.overlap_text(same)
    assert "The overlap hid nothing measurable here" in nothing
    assert "Backward already spent 33% of its time waiting for a core" in nothing


def test_the_cluster_text_says_small_only_when_every_share_is():
    small = speed_prose.cluster_text({"8 GPUs": 1.9, "64 GPUs": 2.5}, 33.0)
    assert "takes at least 6% of it on 8 GPUs, 8% of it on 64 GPUs" in small
    assert "A small part in both" in small
    large = speed_prose.cluster_text({"8 GPUs": 1.9, "64 GPUs": 19.6}, 33.0)
    assert "A small part" not in large and "only the overlap" in large


def test_torchruns_account_leaves_out_process_ids_and_paths():
    log = ("I1207 03:58:21.908000 22379 /home/someone/.venv/lib/torch/api.py:942] "
           "[default] "
           "Worker group FAILED. 1/1 attempts left; will restart worker group\n"
           "E1207 03:58:21.908000 22379 /home/someone/x.py:1002] failed (exitcode: -9) "
           "local_rank: 1 (pid: 22391) of binary: /home/someone/.venv/bin/python\n"
           "[rank0]: RuntimeError: [/a/gloo/pair.cc:537] Read error: Connection reset by "
           "peer. This is typically caused by a remote worker\n"
           "I1207 03:58:07.597000 22379 /x/api.py:707] [default] Rendezvous'ing worker "
           "group\n"
           "I1207 03:58:39.001000 22379 /x/api.py:946] [default] worker group successfully "
           "finished. Waiting 300 seconds for other agents to finish.")
    assert prose.torchrun_lines(log) == [
        "torchrun: Worker group FAILED. 1/1 attempts left; will restart worker group",
        "torchrun: failed (exitcode: -9) local_rank: 1",
        "[rank0]: RuntimeError: Read error: Connection reset by peer.",
        "torchrun: worker group successfully finished."]  # no wait of 300 s is meant


RESET = "[rank0]: RuntimeError: Read error [127.0.0.1]:1: Connection reset by peer.\n"


def test_the_restart_text_compares_weights_and_losses():
    same = dict(weights=torch.ones(3), losses=[3.0, 2.0], resumed_from=8, restart=1)
    reference = dict(weights=torch.ones(3), losses=[3.0, 2.0])
    text = prose.restart_text(same, reference, 8, 13, RESET)
    assert "the 4 steps after it, and the one in progress" in text and "to the bit" in text
    assert "failed on its own (its connection to rank 1 was reset)" in text
    closed = RESET.replace("Connection reset by peer", "Connection closed by peer")
    assert "(its connection to rank 1 was closed by rank 1)" in prose.restart_text(
        same, reference, 8, 13, closed)
    quiet = prose.restart_text(same, reference, 8, 13, "")  # the log says nothing of it
    assert "failed on its own" not in quiet and "started both again" in quiet
    never = prose.restart_text(same | dict(restart=0, resumed_from=None), reference, 8, 13,
                               RESET)
    assert "torchrun did not restart them (restarts: 0)" in never
    moved = prose.restart_text(same, dict(weights=torch.zeros(3), losses=[3.0, 2.0]), 8, 13,
                               RESET)
    assert "differ from the uninterrupted run's by up to 1.0e+00" in moved
    losses = prose.restart_text(same, dict(weights=torch.ones(3), losses=[3.0, 2.5]), 8, 13,
                                RESET)
    assert "the losses differ by up to 5.0e-01" in losses and "0.0e+00" not in losses


def test_launch_names_a_rank_to_kill_that_does_not_exist(tmp_path):
    with pytest.raises(ValueError, match=r"dies=7 must be one of the ranks 0 \.\. 3"):
        launch("pair", 4, tmp_path, dies=7)
