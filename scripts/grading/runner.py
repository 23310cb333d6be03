"""Inside the sandbox: run students' solutions on the case inputs, send back plain data.

    python runner.py INPUTS OUT sandboxed|unsafe

A sandbox serves the students of one grading slot one after another, with torch imported
once:
each job (per exercise its set-up, the student's program, its limits and its cases) comes on
stdin and is read by a fresh child, never by this process. That child forks one process per
case from a clean state: it runs the set-up (stand-ins, never the package: the package is
not
in the sandbox), the student's program and the case, and writes
``OUT/<token>/<exercise>.<i>``
(``.json``: plain values or the kind of error; ``.safetensors``: tensors) under a CPU limit
the child enforces from outside it; after each case every other process is killed. After the
job, the serving process kills what is left, empties /tmp and /dev/shm, removes System V IPC
objects, and sends the result files on stdout (``d``, then frames: name, size, bytes; an
empty
name ends), read by the grader, which writes them itself. Nothing here decides a grade. This
file imports only the standard library, torch and safetensors.
"""

import ctypes
import json
import linecache
import os
import re
import resource
import select
import shutil
import signal
import stat
import sys
import time

import torch
from cleanup import clean_up, kill_others, ancestors  # next to this file, in /grader
from safetensors.torch import load_file, save_file

MAX_TEXT = 2000  # characters of a string output kept
MAX_FILE = 128 << 20  # bytes of one result file sent back
MAX_TOTAL = 256 << 20  # bytes of one student's results sent back
RESULT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,80}\.[0-9]{1,3}\.(json|safetensors)")


def decode(value, tensors: dict, names: dict):
    """A JSON argument back to Python: tensors, generators and set-up objects by
    reference."""
    if isinstance(value, list):
        return [decode(v, tensors, names) for v in value]
    if not isinstance(value, dict):
        return value
    if "$tensor" in value:
        return tensors[value["$tensor"]].clone()
    if "$generator" in value:
        return torch.Generator().manual_seed(value["$generator"])
    if "$pairs" in value:
        return {(a, b): c for a, b, c in value["$pairs"]}
    if (
        "$setup" in value
    ):  # e.g. GPTConfig.from_preset, looked up before the student's cell ran
        target = names[value["$setup"].split(".")[0]]
        for attribute in value["$setup"].split(".")[1:]:
            target = getattr(target, attribute)
        return target(
            *decode(value["args"], tensors, names),
            **decode(value["kwargs"], tensors, names),
        )
    return {k: decode(v, tensors, names) for k, v in value.items()}


def encode(value, key: str, out: dict):
    """A returned value as plain data: tensors go to ``out`` under ``key``, the rest to
    JSON."""
    if isinstance(value, torch.Tensor):
        out[key] = value.detach().as_subclass(torch.Tensor).cpu().contiguous().clone()
        return {"$tensor": key}
    if isinstance(value, (tuple, list)):
        return {"$list": [encode(v, f"{key}.{i}", out) for i, v in enumerate(value)]}
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return float(value) if isinstance(value, float) else int(value)
    if isinstance(value, str):
        return value[:MAX_TEXT]
    return {"$type": type(value).__name__[:80]}


def kind(error: BaseException) -> str:
    """The error's class name only: its message may hold anything the student wrote."""
    return type(error).__name__[:80]


def run_case(
    solution, case: dict, tensors: dict, names: dict, out: dict, prefix: str
) -> list:
    target = solution
    if case.get("init") is not None:
        init = case["init"]
        target = solution(
            *decode(init["args"], tensors, names), **decode(init["kwargs"], tensors, names)
        )
    values = [
        encode(getattr(target, name), f"{prefix}.fresh.{name}", out)
        for name in case["fresh"]
    ]
    if case.get("state"):
        state = {k: tensors[v] for k, v in case["state"].items()}
        missing = set(state) - set(target.state_dict())
        if missing:
            raise KeyError(f"the module has no {', '.join(sorted(missing))}")
        target.load_state_dict(state, strict=False)
    if hasattr(target, "eval") and case.get("init") is not None:
        target.eval()
    for i, step in enumerate(case["steps"]):
        if step.get("attr"):
            value = getattr(target, step["attr"])
            value = value() if callable(value) else value
        else:
            function = getattr(target, step["method"]) if step.get("method") else target
            value = function(
                *decode(step["args"], tensors, names),
                **decode(step["kwargs"], tensors, names),
            )
        values.append(encode(value, f"{prefix}.{i}", out))
    return values


def run_source(source: str, filename: str, env: dict) -> None:
    """Run ``source`` as ``filename``, its lines in linecache (TorchScript reads them
    there)."""
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), env)


def case_process(exercise: dict, index: int, tensors: dict, folder: str) -> None:
    """In a fresh child: the set-up, the student's program, one case; its report into
    ``folder``."""
    case = exercise["cases"][index]
    cpu = case.get("cpu_seconds") or exercise["cpu_seconds"]
    used = resource.getrusage(resource.RUSAGE_SELF)
    limit = int(used.ru_utime + used.ru_stime + cpu) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (limit, limit + 1))
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # prints go nowhere
    os.dup2(devnull, 2)
    name, out, env = exercise["name"], {}, {"__name__": "__main__"}
    try:
        run_source(exercise["setup"], "<the exercise's set-up>", env)
        names = dict(env)
        run_source(exercise["source"], f"<your solution of {name}>", env)
        solution = env[name]
    except BaseException as error:  # noqa: BLE001 - SystemExit too: the cell failed
        report = {"error": kind(error), "stage": "cell"}
    else:
        try:
            with torch.no_grad():
                values = run_case(solution, case, tensors, names, out, f"{name}.{index}")
            report = {"values": values}
        except BaseException as error:  # noqa: BLE001
            report = {"error": kind(error), "stage": "case"}
    save_file(out, os.path.join(folder, f"{name}.{index}.safetensors"))
    with open(os.path.join(folder, f"{name}.{index}.json"), "w") as f:
        json.dump(report, f)


def wait(pid: int, seconds: float):
    """(status, CPU seconds used) of child ``pid``, or None once ``seconds`` have passed."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            return status, usage.ru_utime + usage.ru_stime
        time.sleep(0.005)
    return None


def run_job(job: dict, tensors: dict, folder: str, sandboxed: bool) -> None:
    """Each case of each exercise in its own process, under its CPU and wall-clock limits;
    after a case runs past a limit, that exercise's later cases are not run."""
    os.makedirs(folder)
    keep = ancestors()
    for exercise in job["exercises"]:
        name, stopped_early = exercise["name"], False
        for index, case in enumerate(exercise["cases"]):
            if stopped_early:
                stopped(folder, name, index, "skipped")
                continue
            cpu = case.get("cpu_seconds") or exercise["cpu_seconds"]
            try:
                pid = os.fork()
            except OSError:  # processes of an earlier case fill the limit
                stopped(folder, name, index, "no_process")
                continue
            if pid == 0:
                try:
                    case_process(exercise, index, tensors, folder)
                finally:
                    os._exit(0)
            result = wait(pid, 2 * cpu + 2)
            if result is None:  # a stall (sleep, a blocked read): the wall-clock limit
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                why = "wall"
            else:
                status, used = result
                died = os.WIFSIGNALED(status)
                sig = os.WTERMSIG(status) if died else 0
                if sig == signal.SIGXCPU or (died and used >= cpu):
                    why = "cpu"
                elif died:
                    why = "killed" if sig == signal.SIGKILL else "crashed"
                else:
                    why = "no_report"
            stopped_early = why in ("wall", "cpu")
            stopped(folder, name, index, why)
            if sandboxed:
                kill_others(keep)


def stopped(folder: str, name: str, index: int, why: str) -> None:
    """Say why a case has no report (a report the case wrote is kept as it is)."""
    path = os.path.join(folder, f"{name}.{index}.json")
    if not os.path.exists(path):
        save_file({}, os.path.join(folder, f"{name}.{index}.safetensors"))
        with open(path, "w") as f:
            json.dump({"stopped": why}, f)


def read_job() -> dict | None:
    """One job from stdin: 8 bytes of length, then JSON; None at the end of the input."""
    header = os.read(0, 8)
    if len(header) < 8:
        return None
    size, data = int.from_bytes(header, "big"), b""
    while len(data) < size:
        chunk = os.read(0, size - len(data))
        if not chunk:
            return None
        data += chunk
    return json.loads(data)


def send(status: int, folder: str) -> None:
    """The result files on ``status``: per file its name, size and bytes, then an empty
    name.
    Only regular files with a result's name, opened without following links, size-capped."""
    total = 0
    names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    for entry in names[:4096]:
        if not RESULT.fullmatch(entry):
            continue
        try:
            fd = os.open(os.path.join(folder, entry), os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue
        with os.fdopen(fd, "rb") as f:
            size = os.fstat(fd).st_size
            if not stat.S_ISREG(os.fstat(fd).st_mode) or size > MAX_FILE:
                continue
            if total + size > MAX_TOTAL:
                break
            data = f.read(size)
        total += len(data)
        frame = (
            len(entry).to_bytes(2, "big") + entry.encode() + len(data).to_bytes(8, "big")
        )
        write_all(status, frame + data)
    write_all(status, (0).to_bytes(2, "big"))


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def serve(inputs: str, out_root: str, sandboxed: bool) -> None:
    """Students one after another, torch imported once: for each job on stdin a child reads
    it
    and runs it; then every process of that student is killed and the results are sent.
    This process is not dumpable (no ptrace, no /proc/<pid>/mem) and never reads a job."""
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0
    tensors = load_file(inputs)
    torch.set_num_threads(1)
    status = os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)
    while True:
        select.select([0], [], [])
        token = os.urandom(8).hex()
        pid = os.fork()
        if pid == 0:
            os.close(status)
            job = read_job()
            os.dup2(devnull, 0)
            if job is None:
                os._exit(3)
            try:
                run_job(job, tensors, os.path.join(out_root, token), sandboxed)
            finally:
                os._exit(0)
        _, code = os.waitpid(pid, 0)
        clean_up(sandboxed)
        if os.WIFEXITED(code) and os.WEXITSTATUS(code) == 3:
            return
        write_all(status, b"d")
        send(status, os.path.join(out_root, token))
        shutil.rmtree(os.path.join(out_root, token), ignore_errors=True)


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2], sandboxed=sys.argv[3] == "sandboxed")
