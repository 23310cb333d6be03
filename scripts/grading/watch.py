"""The grader's watch over one case, from outside the sandbox: the student's code cannot
signal it (another pid namespace, another uid), stop it or outlive it.

The sandbox's runner forks a fresh process per case and does nothing else; this process
moves that process into the case's own control group (``cgroup.Case``) before the case is
sent, starts the case's clocks when it has read its inputs, and then, from outside, measures
its CPU time (the group's: every process of the case together) and its wall clock (less the
time it waited for a CPU, ``grading.clock``). A result is kept only if it arrived whole
within both limits; at the first limit passed, or once the result is in or the case's
process is gone, every task of the case is frozen then killed (``cgroup.Case.end``).

Where there is no cgroup v2 (``cgroup.Group.lost`` says so), ``Processes`` stands in: the
case's CPU time is its process's own and its waited-for children's, and its processes are
found by their parents and killed one by one.
"""

from __future__ import annotations

import os
import select
import signal
import time

from grading.clock import Clock

TICKS = os.sysconf("SC_CLK_TCK")
KILL_SECONDS = 2.0


def table() -> dict[int, tuple[int, str]]:
    """Every process of the machine: its parent and its state (R, S, Z...)."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            found[int(entry)] = (int(fields[1]), fields[0])
    return found


def descendants(root: int, processes: dict) -> set[int]:
    """``root``'s descendants (a sandbox's: orphans go to its pid namespace's init)."""
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in processes.items():
        children.setdefault(parent, []).append(pid)
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def alive(pid: int) -> bool:
    """Whether any thread of ``pid`` still runs (a zombie leader's live threads count)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] not in "ZX":
                    return True
        except (OSError, IndexError):
            pass
    return False


class Processes:
    """Without cgroup v2: a case's process, its CPU time and waited-for children's, and its
    end: every process under ``root`` but ``keep`` killed, one by one."""

    def __init__(self, root: int, keep: set[int]):
        self.root, self.keep, self.pid, self.cpu = root, keep, 0, 0.0

    def add(self, pid: int) -> None:
        self.pid = pid

    def cpu_seconds(self) -> float:
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            self.cpu = sum(int(v) for v in fields[11:15]) / TICKS
        except (OSError, IndexError, ValueError):
            pass  # gone: the last count stands
        return self.cpu

    def end(self) -> None:
        deadline = time.monotonic() + KILL_SECONDS
        while time.monotonic() < deadline:
            left = [p for p in descendants(self.root, table()) - self.keep if alive(p)]
            if not left:
                return
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.002)


def child_of(parent: int) -> int | None:
    """The one live child of ``parent`` (the runner's case process), or None: from the
    kernel's list of its main thread's children (the runner forks there), else a scan of
    /proc (a kernel without CONFIG_PROC_CHILDREN)."""
    try:
        with open(f"/proc/{parent}/task/{parent}/children") as f:
            children = [int(p) for p in f.read().split()]
    except OSError:
        children = [p for p, (pp, _) in table().items() if pp == parent]
    found = [p for p in children if alive(p)]
    return found[0] if len(found) == 1 else None


def complete(received: bytearray) -> bool:
    """Whether ``received`` holds a whole result: its length, then that many bytes."""
    return len(received) >= 8 and len(received) - 8 >= int.from_bytes(received[:8], "big")


def watch(stdout: int, tasks, pid: int, cpu: float, wall: float, cap: int) -> tuple:
    """(the result's bytes or b"", why the case ended, the CPU seconds it used) of case
    process ``pid`` in ``tasks``, whose clocks start now: "result" (whole, within both
    limits), "cpu" or "wall" (a limit passed, anything it sent dropped), or "ended" (its
    process gone without a whole result)."""
    clock, first, pause, received = Clock(pid), tasks.cpu_seconds(), 0.001, bytearray()
    why = ""
    while not why:
        if select.select([stdout], [], [], pause)[0]:
            chunk = os.read(stdout, 1 << 20)
            if len(received) <= cap:  # past it: read on, so that the case can end
                received += chunk
        used = tasks.cpu_seconds() - first
        if used > cpu:
            why = "cpu"
        elif clock.seconds() > wall:
            why = "wall"
        elif complete(received):
            why = "result"
        elif not alive(pid):
            why = "ended"
        pause = min(2 * pause, 0.02)  # quick cases answered quickly, long ones polled less
    tasks.end()
    while why == "ended" and select.select([stdout], [], [], 0)[0]:
        chunk = os.read(stdout, 1 << 20)  # written before it ended: within the limits
        if not chunk or len(received) > cap:
            break
        received += chunk
    used = tasks.cpu_seconds() - first
    if why == "ended" and complete(received):
        why = "result" if used <= cpu else "cpu"
    return (bytes(received[8:]) if why == "result" else b""), why, used


def running(pids: set[int], processes: dict, scripts: set[str]) -> int:
    """The one of ``pids`` that runs one of ``scripts`` with Python and whose parent does
    not (its forks run it too), or 0."""
    found = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f.read().decode(errors="replace").split("\0")[1:2][0] in scripts:
                    found.add(pid)
        except (OSError, IndexError):
            pass
    return next((p for p in found if processes[p][0] not in found), 0)


def ended_why(status: str) -> str:
    """Why a case process with the runner's ``exit N`` status ended without a result."""
    code = int(status.split()[1])
    if not os.WIFSIGNALED(code):
        return "no_report"
    sig = os.WTERMSIG(code)
    if sig == signal.SIGXCPU:
        return "cpu"
    return "killed" if sig == signal.SIGKILL else "crashed"
