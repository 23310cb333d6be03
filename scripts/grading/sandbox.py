"""The sandboxes students' code runs in: bubblewrap (``bwrap``), with util-linux's
``prlimit``.

A new sandbox for every student (``Sandbox.run``): no network, no process of the machine in
sight (its own PID and IPC namespaces), no user namespace inside (``--disable-userns``), a
read-only view of Python, the virtual environment and ``runner.py`` only (not the package:
the exercises' set-ups get stand-ins, ``grading.standins``; no case file, no case input, no
submission, no sheet, no repository), nothing of the host writable: ``/tmp`` and
``/dev/shm`` are tmpfs of bounded size, new and empty for each student, and gone with their
sandbox. Each case comes over a pipe (its exercise's set-up, the student's program, its own
inputs: never the rest of the job) to a fresh process, whose result comes back over a pipe
to this process, out of the student's reach (``runner.py``); nothing is read from disk.
Limits: a control group per sandbox (``grading.cgroup``: total memory, tmpfs included, and
processes), and per process CPU time, address space, file size, no POSIX message queues. Run
as root (as CI does), the sandbox switches to a uid of its own (``setpriv``) before
bubblewrap makes its user namespace; run as another user, bubblewrap needs unprivileged user
namespaces. Before a class, ``grading.startup`` runs one trivial case through such a
sandbox.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from grading import cgroup

RUNNER = Path(__file__).with_name("runner.py")
CLEANUP = Path(__file__).with_name("cleanup.py")  # the runner imports it
CLOCK = Path(__file__).with_name("clock.py")  # and this
FIRST_UID = 64000  # as root, sandbox slot k runs as uid FIRST_UID + k (no account needed)
STARTUP_SECONDS = 60.0  # bwrap, Python and torch imported: once per student
SERVER_CPU_SECONDS = 3600  # the serving process itself (each case has its own limit)
HEADER = 32  # bytes of a case's header to the runner (its limits): runner.HEADER
STATUS = 32  # bytes of a case's status (why it ended, CPU seconds used): runner.STATUS
TRANSFER_SECONDS = 60  # runner.TRANSFER_SECONDS: a case's inputs read before its clock
LOAD_FACTOR = 20  # a case's clock leaves out its waits for a CPU: the grader waits longer
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


def command(
    slot: int, limits: Limits, program: list[str], usage: Path | None = None
) -> list[str]:
    """The command line that runs ``program`` in a new sandbox; ``usage``, the CPU time of
    its control group, read-only at /grader/cpu."""
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
    args += ["--ro-bind", str(CLEANUP), "/grader/cleanup.py"]
    args += ["--ro-bind", str(CLOCK), "/grader/clock.py"]
    if usage is not None:
        args += ["--ro-bind", str(usage), "/grader/cpu"]
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
        program = [sys.executable, "/grader/runner.py", str(write), "sandboxed"]
        if self.unsafe:  # the teacher's choice (UNSAFE=1): the same runner, not isolated
            args = [sys.executable, str(RUNNER), str(write), "unsafe"]
        else:
            self.group = cgroup.create(
                f"gpt-from-scratch-grade-{os.getpid()}-{self.slot}-{time.monotonic_ns()}",
                self.limits.total_memory_bytes,
                self.limits.processes,
            )
            usage = self.group.usage if self.group else None
            args = (self.group.prefix() if self.group else []) + command(
                self.slot, self.limits, program, usage
            )
        self.process = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            bufsize=0,
            pass_fds=(write,),
        )
        os.close(write)
        self.status = read
        os.set_blocking(self.process.stdin.fileno(), False)

    def run(self, exercises: list[dict]) -> tuple[dict[str, list], str]:
        """One student's cases in a sandbox of their own: per exercise, per case, its result
        (the bytes the case sent) or why it has none (a ``judge.STOPPED`` key); and "" or
        why the sandbox ended early. Each exercise: name, setup, source, cpu_seconds and
        cases (per case its program and its tensors as safetensors bytes)."""
        if self.process is None:
            self._start()
        results, note, extra = {}, "", STARTUP_SECONDS  # the first case waits for the start
        for exercise in exercises:
            got = results[exercise["name"]] = []
            for case in exercise["cases"]:
                if note:
                    got.append("sandbox")
                    continue
                if got and got[-1] in ("wall", "cpu", "skipped"):
                    got.append("skipped")  # the exercise's later cases: not run
                    continue
                cpu = case["program"].get("cpu_seconds") or exercise["cpu_seconds"]
                job = {key: exercise[key] for key in ("name", "setup", "source")}
                data = json.dumps({**job, "case": case["program"]}).encode()
                blob = len(data).to_bytes(8, "big") + data
                blob += len(case["tensors"]).to_bytes(8, "big") + case["tensors"]
                result, note, used = self._case(cpu, blob, 2 * cpu + 2, extra)
                if result == "wall" and not note:
                    # Once more (a stall stalls again), with the CPU time the first try
                    # left: no case gets more than its limit in all.
                    left = max(cpu - used, 0.01)
                    result, note, _ = self._case(left, blob, 2 * cpu + 2, 0.0)
                got.append(result)
                extra = 0.0
        self.stop()
        self._start()  # the next student's, started now
        return results, note

    def _case(self, cpu: float, blob: bytes, wall: float, extra: float) -> tuple:
        """(the case's result or why none, "" or why the sandbox ended, the CPU seconds
        it used) of one case."""
        header = f"{cpu:g} {wall:g}".encode().ljust(HEADER)
        # The runner's clock stops while the case waits for a CPU (``clock``): on a loaded
        # machine a case takes longer than ``wall``. This deadline finds a hung runner.
        deadline = time.monotonic() + LOAD_FACTOR * wall + extra + TRANSFER_SECONDS + 10
        stdin, stdout = self.process.stdin.fileno(), self.process.stdout.fileno()
        pending, received, status = memoryview(header + blob), bytearray(), b""
        while len(status) < STATUS:
            wanted = [stdout, self.status]
            ready = select.select(
                wanted, [stdin] if pending else [], [], max(0, deadline - time.monotonic())
            )
            if not any(ready):
                why = f"the sandbox stopped answering ({LOAD_FACTOR * wall:.0f} s a case)"
                return "sandbox", why, 0
            try:
                if ready[1]:
                    pending = pending[os.write(stdin, pending[: 1 << 16]) :]
            except (BrokenPipeError, BlockingIOError):
                pass  # the runner is gone: its status pipe ends too
            if stdout in ready[0]:
                chunk = os.read(stdout, 1 << 20)
                if len(received) <= MAX_RESULT:  # past it: read on, so the case can end
                    received += chunk
            if self.status in ready[0]:
                chunk = os.read(self.status, STATUS - len(status))
                if not chunk:
                    return "sandbox", "the sandbox ended (the student's code killed it?)", 0
                status += chunk
        while select.select([stdout], [], [], 0)[0]:  # its writers are gone: what is left
            chunk = os.read(stdout, 1 << 20)
            if not chunk:
                break
            received += chunk
        why, used = status.decode("ascii", "replace").split()
        if why == "no_process":
            return why, "the sandbox could not start a process for a case", 0
        if received:  # the case's own result, written before it ended
            return bytes(received), "", float(used)
        return ("no_report" if why == "ended" else why), "", float(used)

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
