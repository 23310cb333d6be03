"""The sandboxes students' code runs in: bubblewrap (``bwrap``), with util-linux's
``prlimit``.

A new sandbox for every student (``Sandbox.run``): no network, no process of the machine in
sight (its own PID and IPC namespaces), no user namespace inside (``--disable-userns``), a
read-only view of Python, the virtual environment, ``runner.py`` and ``ranks.py`` (Chapter
15's threads) only (not the package: the exercises' set-ups get stand-ins,
``grading.standins``; no case file, no case input, no submission, no sheet, no repository),
nothing of the host writable: ``/tmp`` and ``/dev/shm`` are tmpfs of bounded size, new and
empty for each student, and gone with their sandbox. Each case comes over a pipe (its
exercise's set-up, the student's program, its own inputs: never the rest of the job) to a
fresh process, whose result comes back over a pipe to this process, out of the student's
reach (``runner.py``); nothing is read from disk. Limits: a control group per sandbox
(``grading.cgroup``: total memory, tmpfs included, and processes), and per process CPU time,
address space, file size, no POSIX message queues. Run as root (as CI does), the sandbox
switches to a uid of its own (``setpriv``) before bubblewrap makes its user namespace; run
as another user, bubblewrap needs unprivileged user namespaces. Before a class,
``grading.startup`` runs one trivial case through such a sandbox.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from grading import cgroup, watch

RUNNER = Path(__file__).with_name("runner.py")
RANKS = Path(__file__).with_name("ranks.py")  # the runner's one module of its own
FIRST_UID = 64000  # as root, sandbox slot k runs as uid FIRST_UID + k (no account needed)
STARTUP_SECONDS = 60.0  # bwrap, Python and torch imported: once per student
SERVER_CPU_SECONDS = 3600  # the serving process itself (each case has its own limit)
HEADER = 32  # bytes of a case's header to the runner: runner.HEADER
STATUS = 32  # bytes of the runner's status ("forked", "exit N"): runner.STATUS
TRANSFER_SECONDS = 60  # a case's inputs read and made before its clock starts
MAX_RESULT = 132 << 20  # bytes of one case's result kept (judge.MAX_JSON + MAX_TENSORS)
ROOT_LINKS = (
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
)  # a symlink into /usr, or a folder


class SandboxError(RuntimeError):
    """No working sandbox: the message names the fix."""


@dataclass(frozen=True)
class Limits:
    cpu_seconds: float = (
        20.0  # per case (a case may set less); twice that of wall-clock time
    )
    memory_bytes: int = 6 << 30  # address space of each process (torch reserves much of it)
    total_memory_bytes: int = 3 << 30  # the whole sandbox, tmpfs included (a control group)
    processes: int = 32  # per uid (prlimit), and the whole sandbox's (the control group)
    file_bytes: int = 64 << 20  # the largest file it may write
    tmp_bytes: int = 64 << 20  # its /tmp, and its /dev/shm


def readonly_paths() -> list[Path]:
    """What the runner needs: Python (the interpreter and the virtual environment)."""
    paths = {
        Path(sys.base_prefix),
        Path(sys.prefix),
        Path(sys.executable).resolve().parent.parent,
    }
    return sorted(p for p in paths if not str(p).startswith("/usr"))


def hidden_paths(mounted: list[Path]) -> list[Path]:
    """The package's folder where it is installed under a mounted path: masked by an empty
    folder, so that no import inside reaches it."""
    import importlib.util

    spec = importlib.util.find_spec("gpt_from_scratch")
    found = [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    return [p for p in found if any(p.is_relative_to(m) or p == m for m in mounted)]


def userns_flags() -> list[str]:
    """No user namespace inside the sandbox, where this bubblewrap can rule it out."""
    done = subprocess.run(
        [shutil.which("bwrap") or "bwrap", "--help"], capture_output=True, text=True
    )
    help_text = getattr(done, "stdout", "") or ""
    return ["--unshare-user", "--disable-userns"] if "--disable-userns" in help_text else []


def _folders(path: Path, made: set[Path]) -> list[str]:
    """``--dir`` arguments for the parents of ``path`` (bwrap would make them private to
    root)."""
    args = []
    for parent in reversed(path.parents):
        if parent != Path("/") and parent not in made:
            made.add(parent)
            args += ["--perms", "0755", "--dir", str(parent)]
    return args


def command(slot: int, limits: Limits, program: list[str]) -> list[str]:
    """The command line that runs ``program`` in a new sandbox."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SandboxError(
            "bubblewrap is not installed: apt-get install bubblewrap "
            "(make grade installs it), or UNSAFE=1 to grade without a sandbox"
        )
    root = os.geteuid() == 0
    # As root, bubblewrap makes the mounts (it reaches root's Python), then a uid of its own
    # runs an inner, unprivileged bubblewrap that makes a user namespace and rules out more.
    inner = ["setpriv", f"--reuid={FIRST_UID + slot}", f"--regid={FIRST_UID + slot}"]
    inner += ["--clear-groups", "--inh-caps=-all", "--bounding-set=-all", bwrap]
    inner += [*userns_flags(), "--die-with-parent", "--dev-bind", "/", "/", "--"]
    args = [bwrap] + ([] if root else userns_flags())
    args += ["--unshare-ipc", "--unshare-pid", "--unshare-net"]
    args += ["--unshare-uts", "--unshare-cgroup-try", "--die-with-parent", "--new-session"]
    args += ["--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/tmp"]
    args += ["--setenv", "PYTHONDONTWRITEBYTECODE", "1", "--setenv", "OMP_NUM_THREADS", "1"]
    args += ["--ro-bind", "/usr", "/usr"]
    for link in ROOT_LINKS:
        if os.path.islink(link):
            args += ["--symlink", os.readlink(link), link]
        elif os.path.isdir(link):
            args += ["--ro-bind", link, link]
    args += ["--proc", "/proc", "--dev", "/dev"]
    for tmpfs, size in (("/dev/shm", limits.tmp_bytes), ("/tmp", limits.tmp_bytes)):
        args += ["--perms", "1777", "--size", str(size), "--tmpfs", tmpfs]
    made: set[Path] = set()
    mounted = readonly_paths()
    for path in mounted:
        args += _folders(path, made) + ["--ro-bind", str(path), str(path)]
    for path in hidden_paths(mounted):
        args += ["--perms", "0555", "--tmpfs", str(path), "--remount-ro", str(path)]
    args += ["--perms", "0755", "--dir", "/grader"]
    args += ["--ro-bind", str(RUNNER), "/grader/runner.py"]
    args += ["--ro-bind", str(RANKS), "/grader/ranks.py"]
    args += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", "/tmp"]
    rlimits = ["prlimit", f"--cpu={SERVER_CPU_SECONDS}", f"--as={limits.memory_bytes}"]
    rlimits += [f"--nproc={limits.processes}", f"--fsize={limits.file_bytes}", "--core=0"]
    rlimits += ["--msgqueue=0"]
    return args + (inner if root else []) + rlimits + program


class Sandbox:
    """One grading slot's sandboxes: a new one for every student (``run``), started while
    the grader judges the student before, so that its start (Python, torch) overlaps that
    work.
    Nothing a student leaves (files in /tmp or /dev/shm, System V objects, processes, a full
    tmpfs) outlives their sandbox."""

    def __init__(
        self,
        slot: int,
        limits: Limits,
        unsafe: bool,
        stderr=subprocess.DEVNULL,  # the start-up check keeps the runner's errors
    ):
        self.slot, self.limits, self.unsafe, self.stderr = slot, limits, unsafe, stderr
        self.process: subprocess.Popen | None = None
        self.group: cgroup.Cgroup | None = None
        self.status = -1  # the pipe on which the runner says why each case ended

    def _start(self) -> None:
        read, write = os.pipe()
        program = [sys.executable, "/grader/runner.py", str(write)]
        if self.unsafe:  # the teacher's choice (UNSAFE=1): the same runner, not isolated
            self.group = cgroup.Group([], None, "")
            args = [sys.executable, str(RUNNER), str(write)]
        else:
            self.group = cgroup.create(
                f"gpt-from-scratch-grade-{os.getpid()}-{self.slot}-{time.monotonic_ns()}",
                self.limits.total_memory_bytes,
                self.limits.processes,
            )
            args = self.group.prefix() + command(self.slot, self.limits, program)
        self.process = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            bufsize=0,
            pass_fds=(write,),
        )
        os.close(write)
        self.status, self.runner, self.keep = read, 0, set()
        os.set_blocking(self.process.stdin.fileno(), False)

    def run(self, exercises: list[dict]) -> tuple[dict[str, list], str]:
        """One student's cases in a sandbox of their own: per exercise, per case, its result
        (the bytes the case sent) or why it has none (a ``judge.STOPPED`` key); and "" or
        why the sandbox ended early. Each exercise: name, setup, source, cpu_seconds and
        cases (per case its program, its tensors as safetensors bytes, and its cpu)."""
        if self.process is None:
            self._start()
        results, note = {}, ""
        for exercise in exercises:
            got = results[exercise["name"]] = []
            for case in exercise["cases"]:
                if note:
                    got.append("sandbox")
                    continue
                if got and got[-1] in ("wall", "cpu", "skipped"):
                    got.append("skipped")  # the exercise's later cases: not run
                    continue
                cpu = case["cpu"] or exercise["cpu_seconds"]
                job = {key: exercise[key] for key in ("name", "setup", "source")}
                data = json.dumps({**job, "case": case["program"]}).encode()
                blob = len(data).to_bytes(8, "big") + data
                blob += len(case["tensors"]).to_bytes(8, "big") + case["tensors"]
                result, note, used = self._case(cpu, blob, 2 * cpu + 2)
                if result == "wall" and not note:
                    # Once more (a stall stalls again), with the CPU time the first try
                    # left: no case gets more than its limit in all.
                    left = max(cpu - used, 0.01)
                    result, note, _ = self._case(left, blob, 2 * cpu + 2)
                got.append(result)
        self.stop()
        self._start()  # the next student's, started now
        return results, note

    def _status(self, seconds: float) -> str:
        """The runner's next status, or "" if it ended or said nothing for ``seconds``."""
        got = b""
        while len(got) < STATUS:
            if not select.select([self.status], [], [], seconds)[0]:
                return ""
            chunk = os.read(self.status, STATUS - len(got))
            if not chunk:
                return ""
            got += chunk
        return got.decode("ascii", "replace").strip()

    def _case(self, cpu: float, blob: bytes, wall: float) -> tuple:
        """(the case's result or why none, "" or why the sandbox ended, the CPU seconds
        it used) of one case, timed and ended from here."""
        counted = self.group.cases is not None
        header = (b"0" if counted else f"{cpu:g}".encode()).ljust(HEADER)
        try:
            os.write(self.process.stdin.fileno(), header)
        except OSError:
            return "sandbox", "the sandbox ended (the student's code killed it?)", 0
        first = not self.runner
        forked = self._status(STARTUP_SECONDS if first else TRANSFER_SECONDS)
        if forked != "forked":
            why = {"no_process": "the sandbox could not start a process for a case"}
            return "sandbox", why.get(forked, "the sandbox stopped answering"), 0
        if first:  # before any student's code ran: the sandbox's processes are its own
            processes = watch.table()
            self.keep = watch.descendants(self.process.pid, processes) | {self.process.pid}
            scripts = {"/grader/runner.py", str(RUNNER)}
            self.runner = watch.running(self.keep, processes, scripts)
        pid = watch.child_of(self.runner)
        self.keep.discard(pid)
        tasks = self.group.case() or watch.Processes(self.process.pid, self.keep)
        if pid is None:
            tasks.end()
            return "sandbox", "the sandbox's runner forked no case process", 0
        tasks.add(pid)
        stdout = self.process.stdout.fileno()
        if not self._send(blob, stdout):
            tasks.end()
            return "sandbox", "the case did not read its inputs", 0
        result, why, used = watch.watch(stdout, tasks, pid, cpu, wall, MAX_RESULT)
        try:
            os.kill(self.runner, signal.SIGCONT)  # stopped by the case? it is over now
        except OSError:
            pass
        ended = self._status(TRANSFER_SECONDS)
        note = "" if ended.startswith("exit ") else "the sandbox ended during a case"
        if why == "result":
            return result, note, used
        if note:  # the runner gone: by the student's code, or the grader's fault
            return "sandbox", note, used
        return (watch.ended_why(ended) if why == "ended" else why), note, used

    def _send(self, blob: bytes, stdout: int) -> bool:
        """Send the case; True once its process said it has read it (its first byte)."""
        stdin, pending = self.process.stdin.fileno(), memoryview(blob)
        deadline = time.monotonic() + TRANSFER_SECONDS
        while time.monotonic() < deadline:
            ready = select.select(
                [stdout], [stdin] if pending else [], [], deadline - time.monotonic()
            )
            try:
                if ready[1]:
                    pending = pending[os.write(stdin, pending[: 1 << 16]) :]
            except (BrokenPipeError, BlockingIOError):
                return False
            if ready[0]:
                return os.read(stdout, 1) == b"r"
        return False

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()  # bwrap: --die-with-parent takes every process inside
            self.process.wait()
            for pipe in (self.process.stdin, self.process.stdout):
                pipe.close()
            os.close(self.status)
            self.process = None
        if self.group is not None:
            self.group.remove()
            self.group = None

    def close(self) -> None:
        self.stop()
