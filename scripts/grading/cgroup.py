"""Limits on a sandbox as a whole: its total memory (tmpfs pages and shared memory included,
so the sandbox's /tmp, /dev/shm and results count too) and its number of processes, from a
control group of its own, set up by the grader (root) before the sandbox starts; and the CPU
time of all its processes together (``usage``: the runner reads it, so that work split over
several processes counts as one).

cgroup v2 where its ``memory`` and ``pids`` controllers are enabled (its ``cpu.stat``), else
the v1 ``memory``, ``pids`` and ``cpuacct`` hierarchies. Without root, or without either,
there is none (``create`` returns None) and the per-process limits (``prlimit``) and the
tmpfs sizes are what is left; the grader says so when it starts.
"""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")


class Cgroup:
    def __init__(self, folders: list[Path], usage: Path | None = None):
        self.folders = folders
        self.usage = usage  # the group's CPU time: cpu.stat (v2) or cpuacct.usage (v1)

    def prefix(self) -> list[str]:
        """A command prefix that moves the command into the group, then runs it."""
        joins = " && ".join(
            f"echo $$ > {shlex.quote(str(f / 'cgroup.procs'))}" for f in self.folders
        )
        return ["sh", "-c", f'{joins} && exec "$@"', "sh"]

    def remove(self) -> None:
        """Remove the group's folders once its processes are gone (a few tries)."""
        for folder in self.folders:
            for _ in range(50):
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


def _write(folder: Path, name: str, value: str) -> None:
    (folder / name).write_text(value)


def create(name: str, memory_bytes: int, processes: int) -> Cgroup | None:
    """A new group ``name`` limited to ``memory_bytes`` (no swap) and ``processes``, or
    None."""
    if os.geteuid() != 0:
        return None
    made: list[Path] = []
    try:
        controllers = ROOT / "cgroup.controllers"
        if controllers.exists() and {"memory", "pids"} <= set(
            controllers.read_text().split()
        ):
            folder = ROOT / name
            folder.mkdir()
            made.append(folder)
            _write(folder, "memory.max", str(memory_bytes))
            if (folder / "memory.swap.max").exists():
                _write(folder, "memory.swap.max", "0")
            _write(folder, "pids.max", str(processes))
            return Cgroup(made, folder / "cpu.stat")
        memory, pids = ROOT / "memory" / name, ROOT / "pids" / name
        if (
            not (memory.parent / "memory.limit_in_bytes").exists()
            or not pids.parent.is_dir()
        ):
            return None
        memory.mkdir()
        made.append(memory)
        pids.mkdir()
        made.append(pids)
        _write(memory, "memory.limit_in_bytes", str(memory_bytes))
        if (memory / "memory.memsw.limit_in_bytes").exists():
            _write(memory, "memory.memsw.limit_in_bytes", str(memory_bytes))
        _write(pids, "pids.max", str(processes))
        cpu = ROOT / "cpuacct" / name
        if not (cpu.parent / "cpuacct.usage").exists():
            return Cgroup(made)
        cpu.mkdir()
        made.append(cpu)
        return Cgroup(made, cpu / "cpuacct.usage")
    except OSError:
        Cgroup(made).remove()
        return None
