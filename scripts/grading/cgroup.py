"""Control groups, set up and read by the grader (root) from outside the sandbox.

A sandbox's group holds all of its processes: its total memory (tmpfs pages and shared
memory included) and its number of processes are limited there (cgroup v2's ``memory`` and
``pids`` controllers, else the v1 hierarchies beside a v2 one). Each case runs in a child
group of its own (``Case``), a cgroup v2 folder: the grader reads its CPU time
(``cpu.stat``), sees it empty (``cgroup.events``) and ends it, every task at once, by
freezing it then killing it (``cgroup.freeze``, ``cgroup.kill``: zombie leaders' live
threads too), so that no process of a case outlives it or runs unmeasured.

Without root, or without a writable cgroup v2 hierarchy with ``cgroup.kill`` (Linux 5.14),
``create`` says which guarantees are lost (``Group.lost``); the grader prints it and writes
it on the sheet.
"""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
FROZEN_SECONDS = 2.0  # a freeze or a kill is done in microseconds; past this, go on


class Case:
    """One case's cgroup v2 folder: its tasks, their CPU time, and their end."""

    def __init__(self, folder: Path):
        self.folder, self.final = folder, None
        folder.mkdir()

    def add(self, pid: int) -> None:
        (self.folder / "cgroup.procs").write_text(str(pid))

    def cpu_seconds(self) -> float:
        if self.final is not None:  # ended: its folder is gone
            return self.final
        text = (self.folder / "cpu.stat").read_text()
        return int(text.split("usage_usec", 1)[1].split()[0]) / 1e6

    def _event(self, name: str) -> bool:
        text = (self.folder / "cgroup.events").read_text()
        return f"{name} 1" in text

    def populated(self) -> bool:
        return self._event("populated")

    def end(self) -> None:
        """Freeze every task (no fork can race the kill), kill them all, wait until none
        is left, then remove the folder."""
        (self.folder / "cgroup.freeze").write_text("1")
        _wait(lambda: self._event("frozen") or not self.populated())
        (self.folder / "cgroup.kill").write_text("1")
        _wait(lambda: not self.populated())
        self.final = self.cpu_seconds()
        _rmdir(self.folder)


class Group:
    """A sandbox's groups: ``folders`` (a v2 folder and, beside it, v1 ones) and ``cases``,
    the v2 folder its cases' groups go in, or None with ``lost`` saying what that costs."""

    def __init__(self, folders: list[Path], cases: Path | None, lost: str):
        self.folders, self.cases, self.lost = folders, cases, lost
        self.count = 0

    def prefix(self) -> list[str]:
        """A command prefix that moves the command into the groups, then runs it."""
        joins = " && ".join(
            f"echo $$ > {shlex.quote(str(f / 'cgroup.procs'))}" for f in self.folders
        )
        return ["sh", "-c", f'{joins} && exec "$@"', "sh"] if self.folders else []

    def case(self) -> Case | None:
        if self.cases is None:
            return None
        self.count += 1
        return Case(self.cases / f"case-{self.count}")

    def remove(self) -> None:
        """Kill whatever is left of the sandbox (its cases' groups are gone), then remove
        the folders."""
        if self.cases is not None:
            (self.cases / "cgroup.kill").write_text("1")
        for folder in self.folders:
            _rmdir(folder)


def _wait(done) -> None:
    deadline = time.monotonic() + FROZEN_SECONDS
    while not done() and time.monotonic() < deadline:
        time.sleep(0.0005)


def _rmdir(folder: Path) -> None:
    """Remove ``folder`` once its processes are gone (a few tries)."""
    for _ in range(50):
        try:
            folder.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.02)


def v2_root() -> Path | None:
    """The cgroup v2 hierarchy: /sys/fs/cgroup, or its ``unified`` folder (hybrid)."""
    found = (p for p in (ROOT, ROOT / "unified") if (p / "cgroup.controllers").exists())
    return next(found, None)


NO_CASE_GROUPS = (
    "no cgroup v2 control here ({why}): each case's CPU time is each process's own "
    "(RLIMIT_CPU: work split over forked processes is not added up, so rules judged by CPU "
    "are a deterrent only), and a case's processes are killed one by one, not frozen "
    "first. Grade as root on Linux 5.14 or later with /sys/fs/cgroup writable for every "
    "guarantee"
)
NO_LIMITS = "the sandbox as a whole has no memory or process limit (no control group)"


def create(name: str, memory_bytes: int, processes: int) -> Group:
    """New groups ``name`` limited to ``memory_bytes`` (no swap) and ``processes``."""
    if os.geteuid() != 0:
        return Group([], None, _lost("not root", limited=False))
    made: list[Path] = []
    v2 = v2_root()
    cases, why = None, "no cgroup v2 hierarchy with cgroup.kill (Linux 5.14)"
    try:
        if v2 is not None:
            cases = v2 / name
            cases.mkdir()
            made.append(cases)
            why = "" if (cases / "cgroup.kill").exists() else why
        if cases is not None and (cases / "memory.max").exists():
            _write(cases, "memory.max", str(memory_bytes))
            if (cases / "memory.swap.max").exists():
                _write(cases, "memory.swap.max", "0")
            _write(cases, "pids.max", str(processes))
        elif (ROOT / "memory" / "memory.limit_in_bytes").exists():
            memory, pids = ROOT / "memory" / name, ROOT / "pids" / name
            for folder in (memory, pids):
                folder.mkdir()
                made.append(folder)
            _write(memory, "memory.limit_in_bytes", str(memory_bytes))
            if (memory / "memory.memsw.limit_in_bytes").exists():
                _write(memory, "memory.memsw.limit_in_bytes", str(memory_bytes))
            _write(pids, "pids.max", str(processes))
        else:
            return Group(made, None if why else cases, _lost(why, limited=False))
    except OSError as error:
        for folder in made:
            _rmdir(folder)
        why = f"{error.strerror}: {error.filename}"
        return Group([], None, _lost(why, limited=False))
    return Group(made, None if why else cases, _lost(why, limited=True))


def _lost(why: str, limited: bool) -> str:
    """What a sandbox without case groups (``why``) or limits lacks, or ""."""
    lost = [NO_CASE_GROUPS.format(why=why)] if why else []
    return "; ".join(lost + ([] if limited else [NO_LIMITS]))


def _write(folder: Path, name: str, value: str) -> None:
    (folder / name).write_text(value)
