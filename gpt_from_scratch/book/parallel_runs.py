"""Chapter 15 — starting the chapter's processes from a notebook, and always ending them.

A notebook's kernel cannot be one of the ranks (it runs the reader's cells), so every run
starts its processes with ``subprocess``, which works alike in Jupyter, Colab and nbval:

- ``launch(job, world_size, folder)`` starts one process per rank, ``python -m
  gpt_from_scratch.book.parallel_jobs JOB RANK N PORT FOLDER`` (rank 0 listens on a free
  port of 127.0.0.1), as ``tests/test_parallel.py`` does, and returns what each rank saved;
- ``torchrun(args, folder)`` starts PyTorch's launcher, ``python -m torch.distributed.run``,
  which starts the ranks itself (and restarts them, with ``--max-restarts``);
  ``torchrun_pair`` starts two at once, two "machines" meeting at 127.0.0.1;
- ``nccl_skipped``: why section 15.8's GPU timing does not run on this machine.

Each waits with a time limit and ends every process it started, on success, failure or an
interrupted cell, then raises an error quoting the ranks' last lines if one failed. The
processes import the very package the notebook imported (its folder leads their
``PYTHONPATH``) and compute on one thread each (``OMP_NUM_THREADS=1``): one core a rank.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

from ..parallel import free_port

JOBS_MODULE = "gpt_from_scratch.book.parallel_jobs"
PIDS = "pids"  # the folder where each torchrun worker writes its process id


def environment(torchrun: bool = False) -> dict[str, str]:
    """The processes' environment: this package first on the path, one thread each.

    For torchrun, also: its log at INFO level (what it restarts, and why), and a store of
    their own for each attempt's processes (``TORCH_DISABLE_SHARE_RDZV_TCP_STORE``): in
    torchrun's shared store, a restarted rank can read the address its dead predecessor
    left there and fail to connect (pytorch/pytorch#135712, closed; still seen with gloo
    in torch 2.13).
    """
    package_root = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)
    env = os.environ | {"PYTHONPATH": path, "OMP_NUM_THREADS": "1"}
    if torchrun:
        env |= {"LOGLEVEL": "INFO", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    return env


def _check_folder(folder) -> Path:
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"folder={str(folder)!r} is not a folder: pass an existing one, "
                         "e.g. tempfile.mkdtemp(), where the processes write their results")
    return folder


def _tail(log: Path, lines: int = 12) -> str:
    text = log.read_text(errors="replace").splitlines() if log.is_file() else []
    return "\n".join(text[-lines:]) or "(nothing written)"


def launch(job: str, world_size: int, folder, timeout_s: float = 120.0,
           dies: int | None = None, tries: int = 3) -> list[dict]:
    """Run ``job`` on ``world_size`` processes, one per rank; each rank's saved results.

    Waits at most ``timeout_s`` seconds for all of them; whatever happens, every process
    still running is killed before this returns or raises, and as soon as one rank fails
    (the others would only wait for it). ``dies``: the rank the job kills on purpose, whose
    exit code is not an error. A port taken between ``free_port()`` and rank 0's listening
    is no error: the ranks start again on another, up to ``tries`` times in all.
    """
    folder = _check_folder(folder)
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size={world_size!r} must be a whole number >= 1, the "
                         "number of processes to start")
    if dies is not None and (isinstance(dies, bool) or not isinstance(dies, int)
                             or not 0 <= dies < world_size):
        raise ValueError(f"dies={dies!r} must be one of the ranks 0 .. {world_size - 1}, "
                         "or None when no rank is killed on purpose")
    for attempt in range(1, tries + 1):
        failed = _run_ranks(job, world_size, folder, timeout_s, dies)
        if failed is None:
            return [torch.load(folder / f"{job}-rank{rank}.pt", weights_only=False)
                    for rank in range(world_size)]
        rank, code = failed
        if attempt < tries and TAKEN in _tail(folder / f"{job}-rank{rank}.log"):
            continue  # another process took the port first: another port
        raise RuntimeError(f"{job}: rank {rank} of {world_size} ended with exit code "
                           f"{code}; its last lines:\n"
                           + _tail(folder / f"{job}-rank{rank}.log"))


TAKEN = "is already taken by another process"  # start_process_group's words for the port


def _run_ranks(job: str, world_size: int, folder: Path, timeout_s: float,
               dies: int | None) -> tuple[int, int] | None:
    """Start the ranks on a free port and wait; the first failed (rank, exit code)."""
    port, processes = str(free_port()), []
    try:
        for rank in range(world_size):
            command = [sys.executable, "-m", JOBS_MODULE, job, str(rank), str(world_size),
                       port, str(folder)]
            with open(folder / f"{job}-rank{rank}.log", "w") as log:
                processes.append(subprocess.Popen(command, env=environment(), stdout=log,
                                                  stderr=subprocess.STDOUT))
        deadline = time.monotonic() + timeout_s
        while any(p.poll() is None for p in processes):
            failed = [(r, p.returncode) for r, p in enumerate(processes)
                      if p.returncode not in (None, 0) and r != dies]
            if failed:
                return failed[0]
            if time.monotonic() > deadline:
                raise RuntimeError(f"{job}: the {world_size} processes did not finish "
                                   f"within {timeout_s:g} s and were ended; rank 0's last "
                                   "lines:\n" + _tail(folder / f"{job}-rank0.log"))
            time.sleep(0.05)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.wait()
    return next(((r, p.returncode) for r, p in enumerate(processes)
                 if p.returncode != 0 and r != dies), None)


def _end(agent: subprocess.Popen, folder: Path) -> None:
    """End a torchrun agent and every worker it started, whatever state they are in.

    The agent ends its workers on SIGTERM; if it does not end, it and its process group
    (its own session: ``start_new_session``) are killed. torch starts each worker in a
    session of its own, so the workers are found by the process ids they wrote in
    ``FOLDER/pids`` (before joining the group), and killed only if that process still runs
    this folder's job (a number the system gave again to another process is left alone;
    Linux's /proc tells, elsewhere the agent's SIGTERM alone ends them).
    """
    if agent.poll() is None:
        agent.send_signal(signal.SIGTERM)
        try:
            agent.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(agent.pid, signal.SIGKILL)
            agent.wait()
    for record in sorted((folder / PIDS).glob("*.pid")):
        pid = int(record.read_text())
        try:
            if str(folder).encode() not in Path(f"/proc/{pid}/cmdline").read_bytes():
                continue  # that number belongs to another process now
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError, FileNotFoundError):
            pass  # already gone


def torchrun_pair(commands: list[list[str]], folder, timeout_s: float = 120.0) -> list[str]:
    """Start one torchrun agent per entry of ``commands`` (the arguments after
    ``python -m torch.distributed.run``), wait for all, end every process they started.

    Returns each agent's log. A failed agent raises an error quoting its last lines.
    """
    folder = _check_folder(folder)
    (folder / PIDS).mkdir(exist_ok=True)
    agents, logs = [], [folder / f"torchrun-{i}.log" for i in range(len(commands))]
    try:
        for args, log in zip(commands, logs):
            with open(log, "w") as out:
                agents.append(subprocess.Popen(
                    [sys.executable, "-m", "torch.distributed.run", *args],
                    env=environment(torchrun=True), stdout=out, stderr=subprocess.STDOUT,
                    start_new_session=True))
        deadline = time.monotonic() + timeout_s
        for agent in agents:
            agent.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"torchrun did not finish within {timeout_s:g} s and was ended; "
                           "its last lines:\n" + _tail(logs[0])) from None
    finally:
        for agent in agents:
            _end(agent, folder)
    for agent, log in zip(agents, logs):
        if agent.returncode != 0:
            raise RuntimeError(f"torchrun ended with exit code {agent.returncode}; its "
                               "last lines:\n" + _tail(log, 25))
    return [log.read_text(errors="replace") for log in logs]


def torchrun(args: list[str], folder, timeout_s: float = 120.0) -> str:
    """``python -m torch.distributed.run ARGS``: one agent; its log (``torchrun_pair``)."""
    return torchrun_pair([args], folder, timeout_s)[0]


def nccl_skipped(full_run: bool, gpus: int) -> str | None:
    """Why section 15.8 does not time NCCL here, or None when it does."""
    if full_run and gpus >= 2:
        return None
    return (f"skipped: this machine has {gpus} GPU(s), and the NCCL track needs "
            "FULL_RUN = True and two GPUs or more")


def job_args(folder, run: str, steps: int, every: int, kill_at: int = 0) -> list[str]:
    """The end of a torchrun command: the book's ``train`` for ``steps`` steps, a checkpoint
    in ``FOLDER/RUN`` every ``every``; rank 1 killed at its step ``kill_at`` (0: never),
    on the first attempt only (``parallel_jobs.train_job``)."""
    numbers = map(str, (steps, every, kill_at))
    return ["-m", JOBS_MODULE, "train", str(folder), run, *numbers]
