"""Wall clocks a loaded machine cannot run out: the seconds a process waited for a CPU that
other programs held (its run-queue wait, the second field of ``/proc/<pid>/schedstat``) do
not count. A stall (a sleep, a blocked read) counts in full; CPU time has limits of its own.
Standard library only (the runner imports it inside the sandbox, from /grader)."""

import time


def run_queue_seconds(pid: int) -> float | None:
    """Seconds process ``pid`` has waited, runnable, for a CPU; None once it is gone (or
    where the kernel keeps no such count)."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


class Clock:
    """The seconds since ``pid`` started being timed, less those it waited for a CPU."""

    def __init__(self, pid: int):
        self.pid, self.start = pid, time.monotonic()
        self.first = self.last = run_queue_seconds(pid) or 0.0

    def seconds(self) -> float:
        waited = run_queue_seconds(self.pid)
        if waited is not None:  # gone: the last count read stands
            self.last = waited
        return time.monotonic() - self.start - (self.last - self.first)
