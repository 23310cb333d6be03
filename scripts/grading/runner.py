"""Inside the sandbox: run students' solution cells on the case inputs, write plain data.

    python runner.py INPUTS OUT sandboxed

A sandbox serves the students of one grading slot one after another, with torch imported once:
each job (the set-up code, per exercise its cell, its limits and its cases' programs) comes on
stdin and is read by a fresh child, never by this process. For each exercise a forked grandchild
runs the set-up and the cell, then each case's program, and writes ``OUT/<token>/<exercise>.json``
(plain values, errors) and ``<exercise>.safetensors`` (tensors). Then every process of that
student is killed and /tmp emptied before the next job. Nothing here decides a grade: the judge
(``grading.judge``) reads these files outside the sandbox. This file imports only the standard
library, torch, safetensors and the package: nothing of the grader is in the sandbox.
"""

import contextlib
import ctypes
import importlib
import io
import json
import os
import resource
import select
import signal
import shutil
import sys
import time

import torch
from safetensors.torch import load_file, save_file

MAX_TEXT = 2000  # characters of a string output or error message kept


def decode(value, tensors: dict, names: dict):
    """A JSON argument back to Python: tensors, generators and set-up objects by reference."""
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
    if "$setup" in value:  # e.g. GPTConfig.from_preset, looked up before the student's cell ran
        target = names[value["$setup"].split(".")[0]]
        for attribute in value["$setup"].split(".")[1:]:
            target = getattr(target, attribute)
        return target(
            *decode(value["args"], tensors, names),
            **decode(value["kwargs"], tensors, names),
        )
    return {k: decode(v, tensors, names) for k, v in value.items()}


def encode(value, key: str, out: dict):
    """A returned value as plain data: tensors go to ``out`` under ``key``, the rest to JSON."""
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


def describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"[:MAX_TEXT]


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


def public_check(check: str, solution) -> str:
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            getattr(importlib.import_module("gpt_from_scratch.exercises"), check)(solution)
    except BaseException as error:  # noqa: BLE001 - feedback only
        return describe(error)
    return printed.getvalue()[:MAX_TEXT]


def run_exercise(job: dict, exercise: dict, tensors: dict, folder: str) -> None:
    """In the forked child: the set-up, the cell, every case; the results into ``folder``."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    limit = int(used.ru_utime + used.ru_stime + exercise["cpu_seconds"]) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (limit, limit + 1))
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # prints go nowhere
    os.dup2(devnull, 2)
    name, report, out = exercise["name"], {"cases": {}}, {}
    env = {"__name__": "__main__"}
    try:
        exec(compile(job["setup"], "<assignment set-up>", "exec"), env)
        names = dict(env)
        exec(compile(exercise["source"], "<your solution cell>", "exec"), env)
        solution = env[name]
    except BaseException as error:  # noqa: BLE001 - SystemExit too: the exercise scores 0
        report["error"] = describe(error)
    else:
        with torch.no_grad():
            for index, case in enumerate(exercise["cases"]):
                try:
                    report["cases"][case["name"]] = {
                        "values": run_case(
                            solution, case, tensors, names, out, f"{name}.{index}"
                        )
                    }
                except BaseException as error:  # noqa: BLE001
                    report["cases"][case["name"]] = {"error": describe(error)}
        if exercise.get(
            "check"
        ):  # the public check's words, for the student's feedback file
            report["check"] = public_check(exercise["check"], solution)
    save_file(out, os.path.join(folder, f"{name}.safetensors"))
    with open(os.path.join(folder, f"{name}.json"), "w") as f:
        json.dump(report, f)


def run_job(job: dict, tensors: dict, folder: str) -> None:
    """Each exercise in a forked child, under its CPU and wall-clock limits."""
    os.makedirs(folder)
    for exercise in job["exercises"]:
        try:
            pid = os.fork()
        except (
            OSError
        ) as error:  # processes an earlier exercise left running fill the limit
            stopped(folder, exercise["name"], f"could not start ({describe(error)})")
            continue
        if pid == 0:
            try:
                run_exercise(job, exercise, tensors, folder)
            finally:
                os._exit(0)
        deadline, status = time.monotonic() + exercise["wall_seconds"], None
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.01)
        else:  # a stall (sleep, a blocked read): the wall-clock limit
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            stopped(
                folder,
                exercise["name"],
                f"stopped after {exercise['wall_seconds']:g} s "
                "of wall-clock time (the wall-clock limit: a stall?)",
            )
            continue
        if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGXCPU:
            why = (
                f"stopped after {exercise['cpu_seconds']:g} s of CPU time "
                "(the CPU limit: an endless loop?)"
            )
        elif os.WIFSIGNALED(status):
            why = f"its process died ({signal.Signals(os.WTERMSIG(status)).name})"
        else:
            why = f"its process ended without a report (exit code {os.WEXITSTATUS(status)})"
        stopped(folder, exercise["name"], why)


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


def clean_up(sandboxed: bool) -> None:
    """After a student: no process of theirs left (every process but init and this one killed,
    until none is left), and an empty /tmp."""
    if not sandboxed:
        return
    me = os.getpid()
    while any(p.isdigit() and int(p) not in (1, me) for p in os.listdir("/proc")):
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        time.sleep(0.005)
    for entry in os.listdir("/tmp"):
        path = os.path.join("/tmp", entry)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)


def serve(inputs: str, out_root: str, sandboxed: bool) -> None:
    """Students one after another, torch imported once: for each job on stdin a child reads it
    and runs it; then every process of that student is killed before ``d`` goes to stdout.
    This process is not dumpable (no ptrace, no /proc/<pid>/mem) and never reads a job."""
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0
    tensors = load_file(inputs)
    torch.set_num_threads(1)
    importlib.import_module(
        "gpt_from_scratch.exercises"
    )  # the checks and the set-ups' imports
    status = os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)
    while True:
        select.select([0], [], [])
        pid = os.fork()
        if pid == 0:
            os.close(status)
            job = read_job()
            os.dup2(devnull, 0)
            if job is None:
                os._exit(3)
            try:
                run_job(job, tensors, os.path.join(out_root, job["token"]))
            finally:
                os._exit(0)
        _, code = os.waitpid(pid, 0)
        clean_up(sandboxed)
        if os.WIFEXITED(code) and os.WEXITSTATUS(code) == 3:
            return
        os.write(status, b"d")


def stopped(folder: str, name: str, why: str) -> None:
    """Say why an exercise has no report (a report it wrote itself is kept as it is)."""
    path = os.path.join(folder, f"{name}.json")
    if not os.path.exists(path):
        save_file({}, os.path.join(folder, f"{name}.safetensors"))
        with open(path, "w") as f:
            json.dump({"error": why, "stopped": True}, f)


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2], sandboxed=sys.argv[3] == "sandboxed")
