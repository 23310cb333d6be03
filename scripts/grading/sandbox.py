"""The sandboxes students' code runs in: bubblewrap (``bwrap``), with util-linux's ``prlimit``.

One sandbox per grading slot (a core), serving students one after another (``runner.serve``):
no network, no process of the machine in sight (its own PID namespace; every process a student
starts is killed before the next student, and all die with the sandbox), a read-only view of
Python, the virtual environment, the package, ``runner.py`` and the case inputs only (no case
file, no submission file, no sheet, no repository), a private output folder and ``/tmp``, and
limits on CPU time, address space, processes and file size. Run as root (as CI does), the
sandbox switches to a uid of its own (``setpriv``), so that the process limit counts its
processes only; run as another user, bubblewrap needs unprivileged user namespaces.
"""

from __future__ import annotations

import json
import os
import secrets
import select
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNNER = Path(__file__).with_name("runner.py")
PACKAGE = ROOT / "gpt_from_scratch"
FIRST_UID = 64000  # as root, sandbox slot k runs as uid FIRST_UID + k (no account needed)
STARTUP_SECONDS = 60.0  # bwrap, Python, torch and the package imported: once per sandbox
SERVER_CPU_SECONDS = 3600  # the serving process itself (each exercise has its own limit)
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
    cpu_seconds: float = 30.0  # per exercise
    wall_seconds: float = 60.0  # per exercise: a stall (sleep, a blocked read) ends here
    memory_bytes: int = 6 << 30  # address space of each process (torch reserves much of it)
    processes: int = 32
    file_bytes: int = 64 << 20  # the largest file it may write
    tmp_bytes: int = 64 << 20  # its private /tmp


def readonly_paths() -> list[Path]:
    """What the runner needs: Python (the interpreter and the venv) and the package."""
    paths = {
        Path(sys.base_prefix),
        Path(sys.prefix),
        Path(sys.executable).resolve().parent.parent,
    }
    return sorted(p for p in paths if not str(p).startswith("/usr")) + [PACKAGE]


def _folders(path: Path, made: set[Path]) -> list[str]:
    """``--dir`` arguments for the parents of ``path`` (bwrap would make them private to root)."""
    args = []
    for parent in reversed(path.parents):
        if parent != Path("/") and parent not in made:
            made.add(parent)
            args += ["--perms", "0755", "--dir", str(parent)]
    return args


def command(
    inputs: Path, out: Path, slot: int, limits: Limits, program: list[str]
) -> list[str]:
    """The bwrap command line that runs ``program`` with ``inputs`` at /in and ``out`` at /out."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SandboxError(
            "bubblewrap is not installed: apt-get install bubblewrap "
            "(make grade installs it), or UNSAFE=1 to grade without a sandbox"
        )
    root = os.geteuid() == 0
    args = [
        bwrap,
        "--unshare-ipc",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        "--setenv",
        "PATH",
        "/usr/bin:/bin",
        "--setenv",
        "HOME",
        "/tmp",
        "--setenv",
        "PYTHONPATH",
        "/pkg",
        "--setenv",
        "PYTHONDONTWRITEBYTECODE",
        "1",
        "--setenv",
        "OMP_NUM_THREADS",
        "1",
        "--ro-bind",
        "/usr",
        "/usr",
    ]
    if not root:
        args.append("--unshare-user")
    for link in ROOT_LINKS:
        if os.path.islink(link):
            args += ["--symlink", os.readlink(link), link]
        elif os.path.isdir(link):
            args += ["--ro-bind", link, link]
    args += [
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--perms",
        "1777",
        "--size",
        str(limits.tmp_bytes),
        "--tmpfs",
        "/tmp",
    ]
    made: set[Path] = set()
    for path in readonly_paths()[:-1]:
        args += _folders(path, made) + ["--ro-bind", str(path), str(path)]
    args += [
        "--perms",
        "0755",
        "--dir",
        "/pkg",
        "--ro-bind",
        str(PACKAGE),
        "/pkg/gpt_from_scratch",
        "--perms",
        "0755",
        "--dir",
        "/grader",
        "--ro-bind",
        str(RUNNER),
        "/grader/runner.py",
        "--perms",
        "0755",
        "--dir",
        "/in",
        "--ro-bind",
        str(inputs),
        "/in/inputs.safetensors",
        "--bind",
        str(out),
        "/out",
        "--chdir",
        "/tmp",
        "prlimit",
        f"--cpu={SERVER_CPU_SECONDS}",
        f"--as={limits.memory_bytes}",
        f"--nproc={limits.processes}",
        f"--fsize={limits.file_bytes}",
        "--core=0",
    ]
    if root:
        uid = str(FIRST_UID + slot)
        args += [
            "setpriv",
            f"--reuid={uid}",
            f"--regid={uid}",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
        ]
    return args + program


class Sandbox:
    """One grading slot's sandbox: started on first use, serving students one after another
    (``runner.serve``), and started afresh whenever a student stopped it or ran out of time."""

    def __init__(
        self, slot: int, limits: Limits, inputs: Path, scratch: Path, unsafe: bool
    ):
        self.slot, self.limits, self.inputs, self.unsafe = slot, limits, inputs, unsafe
        self.out = scratch / f"out-{slot}"
        self.out.mkdir()
        if os.geteuid() == 0 and not unsafe:
            os.chown(self.out, FIRST_UID + slot, FIRST_UID + slot)
        self.process: subprocess.Popen | None = None

    def _start(self) -> None:
        if (
            self.unsafe
        ):  # the teacher's choice (UNSAFE=1): the same runner, without isolation
            args = [sys.executable, str(RUNNER), str(self.inputs), str(self.out), "unsafe"]
        else:
            args = command(
                self.inputs,
                self.out,
                self.slot,
                self.limits,
                [
                    sys.executable,
                    "/grader/runner.py",
                    "/in/inputs.safetensors",
                    "/out",
                    "sandboxed",
                ],
            )
        self.process = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            bufsize=0,
            env={**os.environ, "PYTHONPATH": str(ROOT)} if self.unsafe else None,
        )

    def run(self, job: dict, exercises: int) -> tuple[Path, str]:
        """Run one student's job: (their output folder, "" or why the sandbox was stopped)."""
        wall = exercises * self.limits.wall_seconds + 10
        if self.process is None or self.process.poll() is not None:
            self._start()
            wall += STARTUP_SECONDS
        token = secrets.token_hex(8)
        data = json.dumps({**job, "token": token}).encode()
        try:
            self.process.stdin.write(len(data).to_bytes(8, "big") + data)
        except BrokenPipeError:
            self.stop()
            return self.out / token, "the sandbox ended before it could start"
        ready = select.select([self.process.stdout], [], [], wall)[0]
        if not ready or os.read(self.process.stdout.fileno(), 1) != b"d":
            self.stop()
            why = (
                f"ran past its {wall:.0f} s wall-clock limit"
                if not ready
                else "ended before the student's last exercise (its code killed a process it needs)"
            )
            return self.out / token, f"the sandbox {why}; the next student gets a new one"
        return self.out / token, ""

    def clear(self) -> None:
        """Remove everything the last student left in the output folder."""
        for entry in self.out.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink()

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()  # bwrap: --die-with-parent takes every process inside with it
            self.process.wait()
            self.process = None

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.stdin.close()  # the end of the jobs: the runner leaves
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.stop()


NO_USERNS = (
    "bubblewrap cannot create its namespaces here ({error}). As a user other than root "
    "it needs unprivileged user namespaces: enable them (Debian: sysctl -w "
    "kernel.unprivileged_userns_clone=1; Ubuntu 24.04: sysctl -w "
    "kernel.apparmor_restrict_unprivileged_userns=0; any: sysctl -w "
    "user.max_user_namespaces=15000), grade as root, or grade without a sandbox with "
    "UNSAFE=1 (make) / --unsafe, on a machine you can throw away."
)


def check(limits: Limits, scratch: Path) -> None:
    """Raise SandboxError unless a sandbox starts here and runs Python with torch."""
    job, out = scratch / "probe-in", scratch / "probe-out"
    job.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    (job / "inputs").write_bytes(b"")
    args = command(
        job / "inputs",
        out,
        0,
        limits,
        [sys.executable, "-c", "import torch, safetensors, gpt_from_scratch"],
    )
    if os.geteuid() == 0:
        os.chown(out, FIRST_UID, FIRST_UID)
    done = subprocess.run(args, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        error = " ".join(done.stderr.split())[-400:] or f"exit code {done.returncode}"
        if "namespace" in error or "uid map" in error or "Operation not permitted" in error:
            raise SandboxError(NO_USERNS.format(error=error))
        raise SandboxError(f"the sandbox does not start: {error}")
