"""The sandboxes students' code runs in: bubblewrap (``bwrap``), with util-linux's
``prlimit``.

One sandbox per grading slot (a core), serving students one after another
(``runner.serve``):
no network, no process of the machine in sight (its own PID and IPC namespaces), no user
namespace inside (``--disable-userns``), a read-only view of Python, the virtual
environment,
``runner.py`` and the case inputs only (not the package: the exercises' set-ups get
stand-ins,
``grading.standins``; no case file, no submission, no sheet, no repository), nothing of the
host writable: ``/tmp``, ``/dev/shm`` and the results folder are tmpfs of bounded size, and
the results come back over a pipe (``Sandbox.run`` writes them itself). Limits: a control
group per sandbox (``grading.cgroup``: total memory, tmpfs included, and processes), and per
process CPU time, address space, file size, no POSIX message queues. Run as root (as CI
does),
the sandbox switches to a uid of its own (``setpriv``) before bubblewrap makes its user
namespace; run as another user, bubblewrap needs unprivileged user namespaces. Before a
class, ``grading.startup`` runs one trivial case through such a sandbox.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from grading import cgroup
from grading.results import receive

RUNNER = Path(__file__).with_name("runner.py")
CLEANUP = Path(__file__).with_name("cleanup.py")  # the runner imports it
FIRST_UID = 64000  # as root, sandbox slot k runs as uid FIRST_UID + k (no account needed)
STARTUP_SECONDS = 60.0  # bwrap, Python and torch imported: once per sandbox
SERVER_CPU_SECONDS = 3600  # the serving process itself (each case has its own limit)
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
    out_bytes: int = 512 << 20  # its results folder


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


def command(inputs: Path, slot: int, limits: Limits, program: list[str]) -> list[str]:
    """The command line that runs ``program`` in a sandbox with ``inputs`` at /in."""
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
    args += ["--perms", "1777", "--size", str(limits.out_bytes), "--tmpfs", "/out"]
    made: set[Path] = set()
    mounted = readonly_paths()
    for path in mounted:
        args += _folders(path, made) + ["--ro-bind", str(path), str(path)]
    for path in hidden_paths(mounted):
        args += ["--perms", "0555", "--tmpfs", str(path), "--remount-ro", str(path)]
    args += ["--perms", "0755", "--dir", "/grader"]
    args += ["--ro-bind", str(RUNNER), "/grader/runner.py"]
    args += ["--ro-bind", str(CLEANUP), "/grader/cleanup.py"]
    args += ["--perms", "0755", "--dir", "/in"]
    args += ["--ro-bind", str(inputs), "/in/inputs.safetensors"]
    args += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", "/tmp"]
    rlimits = ["prlimit", f"--cpu={SERVER_CPU_SECONDS}", f"--as={limits.memory_bytes}"]
    rlimits += [f"--nproc={limits.processes}", f"--fsize={limits.file_bytes}", "--core=0"]
    rlimits += ["--msgqueue=0"]
    return args + (inner if root else []) + rlimits + program


class Sandbox:
    """One grading slot's sandbox: started on first use, serving students one after another
    (``runner.serve``), and started afresh whenever a student stopped it or ran out of
    time."""

    def __init__(
        self,
        slot: int,
        limits: Limits,
        inputs: Path,
        scratch: Path,
        unsafe: bool,
        stderr=subprocess.DEVNULL,  # the start-up check keeps the runner's errors
    ):
        self.slot, self.limits, self.inputs, self.unsafe = slot, limits, inputs, unsafe
        self.scratch, self.stderr = scratch, stderr
        self.process: subprocess.Popen | None = None
        self.group: cgroup.Cgroup | None = None

    def _start(self) -> None:
        if (
            self.unsafe
        ):  # the teacher's choice (UNSAFE=1): the same runner, without isolation
            out = tempfile.mkdtemp(prefix=f"unsafe-{self.slot}-", dir=self.scratch)
            args = [sys.executable, str(RUNNER), str(self.inputs), out, "unsafe"]
        else:
            self.group = cgroup.create(
                f"gpt-from-scratch-grade-{os.getpid()}-{self.slot}",
                self.limits.total_memory_bytes,
                self.limits.processes,
            )
            program = [sys.executable, "/grader/runner.py", "/in/inputs.safetensors"]
            args = command(
                self.inputs, self.slot, self.limits, program + ["/out", "sandboxed"]
            )
            args = (self.group.prefix() if self.group else []) + args
        self.process = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            bufsize=0,
        )

    def run(self, job: dict, seconds: float) -> tuple[Path, str]:
        """Run one student's job: (the folder of their results, "" or why the sandbox was
        stopped). ``seconds``: the job's wall-clock limit, the sandbox's start aside."""
        folder = Path(tempfile.mkdtemp(prefix="results-", dir=self.scratch))
        wall = seconds + 10
        if self.process is None or self.process.poll() is not None:
            self._start()
            wall += STARTUP_SECONDS
        data = json.dumps(job).encode()
        try:
            self.process.stdin.write(len(data).to_bytes(8, "big") + data)
        except BrokenPipeError:
            self.stop()
            return folder, "the sandbox ended before it could start"
        out = self.process.stdout.fileno()
        ready = select.select([out], [], [], wall)[0]
        if not ready or os.read(out, 1) != b"d" or not receive(out, folder):
            self.stop()
            why = (
                f"ran past its {wall:.0f} s wall-clock limit"
                if not ready
                else "ended before the student's last case (its code killed a process "
                "it needs)"
            )
            return folder, f"the sandbox {why}; the next student gets a new one"
        return folder, ""

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()  # bwrap: --die-with-parent takes every process inside
            self.process.wait()
            self.process = None
        if self.group is not None:
            self.group.remove()
            self.group = None

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.stdin.close()  # the end of the jobs: the runner leaves
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.stop()
