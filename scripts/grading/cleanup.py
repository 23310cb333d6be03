"""Inside the sandbox, between cases and between students: every other process killed, /tmp
and /dev/shm emptied, System V IPC objects removed. Standard library only (``runner.py``
imports it from the same folder, mounted read-only at /grader)."""

import ctypes
import os
import shutil
import signal
import time


def ancestors() -> set[int]:
    """This process and its ancestors (the sandbox's own processes among them)."""
    found, pid = set(), os.getpid()
    while pid > 0 and pid not in found:
        found.add(pid)
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
    return found


def kill_others(keep: set[int]) -> None:
    """Kill every process of the sandbox but ``keep``, until none is left (zombies
    aside)."""
    for _ in range(2000):
        alive = []
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) not in keep:
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                            alive.append(int(entry))
                except (OSError, IndexError):
                    pass
        if not alive:
            break
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass
        time.sleep(0.002)


def remove_ipc() -> None:
    """Remove every System V shared-memory segment, message queue and semaphore set of the
    sandbox's IPC namespace: none outlives its student."""
    libc = ctypes.CDLL(None, use_errno=True)
    for kind_name, remove in (
        ("shm", lambda i: libc.shmctl(i, 0, None)),  # IPC_RMID = 0
        ("msg", lambda i: libc.msgctl(i, 0, None)),
        ("sem", lambda i: libc.semctl(i, 0, 0)),
    ):
        try:
            with open(f"/proc/sysvipc/{kind_name}") as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 1 and fields[1].isdigit():
                remove(int(fields[1]))


def empty(folder: str) -> None:
    for entry in os.listdir(folder):
        path = os.path.join(folder, entry)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)


def clean_up(sandboxed: bool) -> None:
    """After a student: no process of theirs left, empty /tmp and /dev/shm, no IPC
    object."""
    if not sandboxed:
        return
    kill_others(ancestors())
    for folder in ("/tmp", "/dev/shm"):
        empty(folder)
    remove_ipc()
