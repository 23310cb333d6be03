"""The sandbox and the judge hold on their own: with the syntax checks switched off, code
that reads or writes outside, uses the network, forks, crashes, kills its parent, stalls or
forges its output runs, and still earns nothing, changes nothing outside its row and leaves
no process behind; and a sandbox, runner or set-up that does not work stops the grader
once, at its start-up check, with its own error."""

from __future__ import annotations

import csv
import hashlib
import os
import socket
import threading
from pathlib import Path

import nbformat
import pytest

from grading_class import ROOT, assign, grade, material, submission

sandbox = pytest.importorskip("grading.sandbox")
from grading import standins, startup  # noqa: E402  (grading_class puts scripts/ on the path)
LIMITS = sandbox.Limits(cpu_seconds=3.0)
pytestmark = pytest.mark.usefixtures("grading_sandbox")  # skips, or fails: conftest.py
MARKER = "gradingsandboxtestmarker"
RIGHT = '''    probs = torch.softmax(logits, dim=-1)
    return logits.masked_fill(probs < min_p * probs.max(dim=-1, keepdim=True).values, float("-inf"))'''


def cheat(body: str, before: str = "") -> str:
    """A min_p_filter that runs ``body`` and is right only when ``body`` sets ``won``: a cheat that
    gets through the sandbox scores, so a score of 0 shows that it did not."""
    indented = "\n".join("    " + line for line in body.splitlines())
    return (
        f"import os, sys, socket, subprocess, time\n{before}\n\ndef min_p_filter(logits, min_p):\n"
        f"    won = False\n{indented}\n    if not won:\n        return logits\n{RIGHT}"
    )


def hostile(paths: dict[str, Path], port: int) -> dict[str, str]:
    return {
        "read_private_tests": cheat(f"won = len(open({str(paths['tests'])!r}).read()) > 0"),
        "read_canary": cheat(f"won = open({str(paths['canary'])!r}).read() == 'secret'"),
        "read_secret": cheat(f"won = len(open({str(paths['secret'])!r}).read()) > 0"),
        "list_classmates": cheat(f"won = len(os.listdir({str(paths['folder'])!r})) > 0"),
        "write_outside": cheat(
            "\n".join(
                f"try:\n    open({str(p)!r}, 'a').write('x')\nexcept OSError:\n    pass"
                for p in (
                    paths['sheet'],
                    paths['classmate'],
                    paths['tests'],
                    paths['canary'],
                )
            )
        ),
        "network": cheat(
            f"try:\n    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
            "    won = True\nexcept OSError:\n    pass"
        ),
        "leaves_processes": cheat(
            f"subprocess.Popen(['sleep', '300', '{MARKER}'])\n"
            f"if os.fork() == 0:\n    os.execvp('sleep', ['sleep', '301', '{MARKER}'])"
        ),
        "fork_bomb": cheat(
            "while True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
        ),
        "kills_parent": cheat("os.kill(os.getppid(), 9)\nos.kill(1, 9)"),
        "kills_everything": cheat(
            "for pid in os.listdir('/proc'):\n    if pid.isdigit():\n"
            "        try:\n            os.kill(int(pid), 9)\n"
            "        except OSError:\n            pass"
        ),
        "crashes": cheat("import ctypes\nctypes.string_at(0)"),
        "stalls": cheat("time.sleep(300)"),
        "endless_loop": cheat("while True:\n    pass"),
        "huge_memory": cheat("x = torch.empty(2 ** 40)"),
        "forges_output": cheat(
            "",
            before="open('/out/min_p_filter.json', 'w').write("
            "'{\"points\": 300, \"cases\": {}}')\nos._exit(0)",
        ),
        "patches_torch": cheat(
            "torch.testing.assert_close = lambda *a, **k: None\n"
            "torch.equal = lambda *a, **k: True\ntorch.allclose = torch.equal"
        ),
        "lying_tensor": "class Liar(torch.Tensor):\n    def __eq__(self, other):\n        return True\n"
        "    __torch_function__ = torch._C._disabled_torch_function_impl\n\n"
        "def min_p_filter(logits, min_p):\n    return Liar(torch.zeros_like(logits))",
    }


def digest(*paths: Path) -> dict[str, str]:
    files = [
        p for path in paths for p in ([path] if path.is_file() else sorted(path.rglob("*")))
    ]
    return {
        str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files if p.is_file()
    }


def leftover_processes() -> list[str]:
    found = []
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and MARKER in Path(f"/proc/{pid}/cmdline").read_text():
                found.append(pid)
        except OSError:
            pass
    return found


def test_hostile_code_earns_nothing_and_changes_nothing(tmp_path):
    secret = tmp_path / "course_secret"
    secret.write_text("another-course-secret-for-the-tests-" + "1" * 32)
    canary = tmp_path / "canary.txt"
    canary.write_text("secret")
    canary.chmod(0o644)
    _, autograder, _, student_nb = material("07_generation", tmp_path / "assign")
    folder, out = tmp_path / "submissions", tmp_path / "grades.csv"
    folder.mkdir()
    out.write_text("student\n")
    paths = {
        "tests": ROOT / "scripts" / "private_tests" / "07_generation" / "min_p_filter.py",
        "canary": canary,
        "secret": secret,
        "folder": folder,
        "sheet": out,
        "classmate": folder / "honest.ipynb",
    }
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.5)
    connections = []

    def accept():
        while not stop.is_set():
            try:
                connections.append(server.accept())
            except OSError:
                pass

    stop = threading.Event()
    listener = threading.Thread(target=accept, daemon=True)
    listener.start()
    cheats = hostile(paths, server.getsockname()[1])
    nbformat.write(
        submission(
            student_nb, {"min_p_filter": "def min_p_filter(logits, min_p):\n" + RIGHT}
        ),
        folder / "honest.ipynb",
    )
    for name, source in cheats.items():
        nbformat.write(
            submission(student_nb, {"min_p_filter": source}), folder / f"{name}.ipynb"
        )
    before = digest(folder, paths["tests"].parent, canary, secret)
    try:
        grade.grade_folder(
            folder, autograder, out, secret=secret, limits=LIMITS, quiet=True
        )
    finally:
        stop.set()
        listener.join()
        server.close()
    with out.open(newline="") as f:
        rows = {r["student"]: r for r in csv.DictReader(f)}
    assert set(rows) == set(cheats) | {"honest"}
    assert float(rows["honest"]["min_p_filter"]) == 2.0
    for name in cheats:
        assert float(rows[name]["min_p_filter"]) == 0.0, f"{name}: {rows[name]}"
        assert float(rows[name]["top_p_unsorted"]) == 0.0  # an untouched stub, as written
    assert "limit" in rows["stalls"]["notes"] and "limit" in rows["endless_loop"]["notes"]
    # The runner killed: no case answers, in its new sandbox either; said, never a silent 0
    assert "grader error (sandbox)" in rows["kills_everything"]["notes"]
    assert digest(folder, paths["tests"].parent, canary, secret) == before
    assert not connections
    assert not leftover_processes()


def test_without_bubblewrap_the_grader_refuses_and_names_the_fix(tmp_path, monkeypatch):
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    with pytest.raises(sandbox.SandboxError, match="apt-get install bubblewrap.*UNSAFE=1"):
        startup.check(LIMITS)


def test_without_user_namespaces_the_error_names_the_sysctl(tmp_path, monkeypatch):
    refused = "bwrap: No permissions to creating new namespace, likely because the kernel"
    refusing = ["sh", "-c", f"echo '{refused} does not allow' >&2; exit 1"]
    monkeypatch.setattr(sandbox, "command", lambda *a: refusing)
    with pytest.raises(sandbox.SandboxError,
                       match="unprivileged_userns_clone.*container.*--privileged"):
        startup.check(LIMITS)


@pytest.mark.parametrize("unsafe", [False, True])
def test_a_broken_runner_is_reported_once_before_any_student(
    tmp_path, monkeypatch, capsys, unsafe
):
    """The start-up check runs the runner itself: a runner that cannot start stops the
    grader with the runner's own error, once, before a sheet exists."""
    _, autograder, _, student_nb = material("07_generation", tmp_path / "assign")
    folder = tmp_path / "submissions"
    folder.mkdir()
    right = {"min_p_filter": "def min_p_filter(logits, min_p):\n" + RIGHT}
    for name in ("jane", "john"):
        nbformat.write(submission(student_nb, right), folder / f"{name}.ipynb")
    secret = tmp_path / "course_secret"
    secret.write_text("a-course-secret-for-the-start-up-check-" + "2" * 32)
    broken = tmp_path / "runner.py"
    broken.write_text("import a_module_the_runner_lacks\n")
    broken.chmod(0o644)
    monkeypatch.setattr(sandbox, "RUNNER", broken)
    argv = [str(folder), "--autograder", str(autograder), "--secret", str(secret)]
    argv += ["--out", str(tmp_path / "grades.csv")] + (["--unsafe"] if unsafe else [])
    assert grade.main(argv) == 2
    printed = capsys.readouterr()
    assert printed.out == "" and printed.err.count("\n") == 1, printed
    assert "nothing graded: the start-up check failed" in printed.err
    assert "No module named 'a_module_the_runner_lacks'" in printed.err
    assert not (tmp_path / "grades.csv").exists()


def test_the_start_up_check_runs_the_chapters_set_up_and_finds_the_package(
    tmp_path, monkeypatch
):
    setup = standins.setup_source(assign.ASSIGNMENTS["04_attention"].setup)
    assert startup.check(LIMITS, setup) == startup.check(LIMITS)
    with pytest.raises(sandbox.SandboxError, match="set-up raised ImportError"):
        startup.check(LIMITS, setup + "\nfrom torch import a_name_torch_lacks")
    monkeypatch.setattr(startup, "PROBE", "def probe(x):\n    return x + 1, True\n")
    with pytest.raises(sandbox.SandboxError, match="package is importable in the sandbox"):
        startup.check(LIMITS)
    assert startup.check(LIMITS, unsafe=True) == ""  # the teacher's choice


def test_without_cgroup_v2_the_grader_says_which_guarantees_are_lost(monkeypatch):
    """Where no case can have a control group of its own, the start-up check still runs a
    case (its processes found by their parents) and says what is lost, never silently."""
    if os.geteuid() != 0:
        pytest.skip("as a user other than root there is never a control group")
    monkeypatch.setattr(sandbox.cgroup, "v2_root", lambda: None)
    lost = startup.check(LIMITS)
    assert "no cgroup v2 control here" in lost and "not added up" in lost
