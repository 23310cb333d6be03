"""The sandbox every submission runs in: bubblewrap (``bwrap``), with util-linux's
``prlimit``.

One sandbox per student: no network, no other process of the machine in sight (its own PID
namespace, so every process it starts dies with it), a read-only view of Python, the virtual
environment, the package and ``runner.py`` only (no private tests, no other submission, no
sheet, no repository), the student's job folder read-only, a private output folder, a
private ``/tmp``, and limits on CPU time, address space, processes and file size. Run as
root (as CI does), the sandbox switches to a uid of its own (``setpriv``), so that the
process limit counts its processes only; run as another user, bubblewrap needs unprivileged
user namespaces.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNNER = Path(__file__).with_name("runner.py")
PACKAGE = ROOT / "gpt_from_scratch"
FIRST_UID = 64000  # as root, sandbox slot k runs as uid FIRST_UID + k (no account needed)
STARTUP_SECONDS = (
    60.0  # bwrap, Python and torch's import on a loaded machine, once per student
)
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


def command(job: Path, out: Path, slot: int, limits: Limits, wall: float) -> list[str]:
    """The bwrap command line that runs ``runner.py`` on ``job`` into ``out``."""
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
        "--ro-bind",
        str(job),
        "/in",
        "--bind",
        str(out),
        "/out",
        "--chdir",
        "/tmp",
        "prlimit",
        f"--cpu={int(wall)}",
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
    return args + [sys.executable, "/grader/runner.py", "/in", "/out"]


def run(
    job: Path, out: Path, slot: int, limits: Limits, exercises: int, unsafe: bool = False
) -> str:
    """Run the job; "" when the sandbox ended by itself, else why it was stopped."""
    wall = STARTUP_SECONDS + exercises * limits.wall_seconds
    if unsafe:  # the teacher's choice (UNSAFE=1): the same runner, without any isolation
        args = [sys.executable, str(RUNNER), str(job), str(out)]
    else:
        args = command(job, out, slot, limits, wall)
        if os.geteuid() == 0:
            os.chown(out, FIRST_UID + slot, FIRST_UID + slot)
    try:
        subprocess.run(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=wall,
            check=False,
            env={**os.environ, "PYTHONPATH": str(ROOT)} if unsafe else None,
        )
    except (
        subprocess.TimeoutExpired
    ):  # run() killed bwrap: --die-with-parent takes the rest
        return f"the sandbox ran past its {wall:.0f} s wall-clock limit and was stopped"
    return ""


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
    args = command(job, out, 0, limits, 120)
    args[-3:] = ["-c", "import torch, safetensors"]
    if os.geteuid() == 0:
        os.chown(out, FIRST_UID, FIRST_UID)
    done = subprocess.run(args, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        error = " ".join(done.stderr.split())[-400:] or f"exit code {done.returncode}"
        if "namespace" in error or "uid map" in error or "Operation not permitted" in error:
            raise SandboxError(NO_USERNS.format(error=error))
        raise SandboxError(f"the sandbox does not start: {error}")
