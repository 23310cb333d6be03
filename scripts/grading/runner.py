"""Inside the sandbox (a new one per student): each case in a fresh process that holds only
its own case, its result sent straight to the grader.

    python runner.py STATUS_FD sandboxed|unsafe

This process imports torch, makes itself not dumpable (no ptrace, no /proc/<pid>/mem, no
/proc/<pid>/fd) and waits, holding nothing of the job. Per case the grader writes on stdin a
header of limits (CPU and wall-clock seconds), then the case: its exercise's set-up
(stand-ins, that exercise's withheld names left out), the student's program, the case's
program and its tensors. This process reads the header only and forks; the child reads the
case, draws its random inputs (sent as seeds), closes stdin, runs the set-up, the program
and the case under the CPU limit, and writes its result (JSON, then safetensors bytes) on
stdout, a pipe the grader reads. Then this process kills every other process of the sandbox
and writes why the case ended on STATUS_FD, a pipe no child holds. No file is read or
written; nothing here decides a grade. Standard library, torch and safetensors only.
"""

import ctypes
import json
import linecache
import os
import resource
import select
import signal
import sys
import time

import torch
from cleanup import ancestors, kill_others  # next to this file, in /grader
from clock import Clock
from safetensors.torch import load, save

MAX_TEXT = 2000  # characters of a string output kept
HEADER = 32  # bytes of a case's header: "CPU WALL", in seconds, space-padded
TRANSFER_SECONDS = 60  # to read a case's inputs (MBs of tensors), before its clock starts
STATUS = 32  # bytes of a case's status: why it ended, and the CPU seconds it used
GROUP_CPU = "/grader/cpu"  # the sandbox's control group's CPU time, where it has one


def decode(value, tensors: dict, names: dict):
    """A JSON argument back to Python: tensors, generators and set-up objects by
    reference."""
    if isinstance(value, list):
        return [decode(v, tensors, names) for v in value]
    if not isinstance(value, dict):
        return value
    if "$tensor" in value:
        return tensors[value["$tensor"]].clone()
    if "$randn" in value:  # made by make_random before the clock, used once
        return tensors[value["$randn"]]
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


def make_random(value, tensors: dict) -> None:
    """The case's random inputs (``cases.Randn``: sent as seeds), made into ``tensors``."""
    if isinstance(value, list):
        for v in value:
            make_random(v, tensors)
    elif isinstance(value, dict) and "$randn" in value:
        generator = torch.Generator().manual_seed(value["seed"])
        tensors[value["$randn"]] = torch.randn(value["shape"], generator=generator)
        tensors[value["$randn"]] *= value["scale"]
    elif isinstance(value, dict):
        for v in value.values():
            make_random(v, tensors)


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


def read_exact(fd: int, size: int) -> bytes:
    """``size`` bytes of ``fd``, fewer only at its end."""
    data = bytearray()
    while len(data) < size:
        chunk = os.read(fd, min(size - len(data), 1 << 20))
        if not chunk:
            break
        data += chunk
    return bytes(data)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def case_process(cpu: float, ready: int) -> None:
    """In the fresh child: read this case from stdin, say so on ``ready``, run it, write
    its result on stdout."""
    size = int.from_bytes(read_exact(0, 8), "big")
    job = json.loads(read_exact(0, size))
    size = int.from_bytes(read_exact(0, 8), "big")
    tensors = load(read_exact(0, size)) if size else {}
    make_random(job["case"], tensors)
    os.write(ready, b"r")  # the clocks start now, not while a large case is read or made
    os.close(ready)
    devnull = os.open(os.devnull, os.O_RDWR)
    result = os.dup(1)
    for fd in (0, 1, 2):  # stdin read to its end; prints go nowhere
        os.dup2(devnull, fd)
    used = resource.getrusage(resource.RUSAGE_SELF)
    limit = int(used.ru_utime + used.ru_stime + cpu) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (limit, limit + 1))
    name, case, out, env = job["name"], job["case"], {}, {"__name__": "__main__"}
    try:
        run_source(job["setup"], "<the exercise's set-up>", env)
        names = dict(env)
        run_source(job["source"], f"<your solution of {name}>", env)
        solution = env[name]
    except BaseException as error:  # noqa: BLE001 - SystemExit too: the cell failed
        report = {"error": kind(error), "stage": "cell"}
    else:
        try:
            with torch.no_grad():
                values = run_case(solution, case, tensors, names, out, name)
            report = {"values": values}
        except BaseException as error:  # noqa: BLE001
            report = {"error": kind(error), "stage": "case"}
    data, raw = json.dumps(report).encode(), save(out)
    write_all(result, len(data).to_bytes(8, "big") + data + raw)


def group_cpu() -> float | None:
    """CPU seconds of every process of the sandbox together (its control group's count,
    mounted read-only at GROUP_CPU), or None without one."""
    try:
        with open(GROUP_CPU) as f:
            text = f.read()
    except OSError:
        return None
    if "usage_usec" in text:  # cgroup v2's cpu.stat
        return int(text.split("usage_usec", 1)[1].split()[0]) / 1e6
    return int(text) / 1e9  # v1's cpuacct.usage


def why_ended(pid: int, cpu: float, wall: float) -> tuple[str, float]:
    """Why case process ``pid`` ended, and the CPU seconds it used: its own and its
    children's, or the whole sandbox's where it has a control group (work split over
    processes counts as one). Killed past ``cpu`` of those, or past ``wall`` seconds of its
    clock, which leaves out the time it waited for a CPU that other programs held."""
    clock, first, pause = Clock(pid), group_cpu(), 0.001
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        own = usage.ru_utime + usage.ru_stime if done else 0.0
        used = own if first is None else group_cpu() - first
        if done:
            break
        if used > cpu or clock.seconds() > wall:
            os.kill(pid, signal.SIGKILL)
            _, status, usage = os.wait4(pid, 0)
            return ("cpu" if used > cpu else "wall"), used
        pause = min(2 * pause, 0.02)  # quick cases answered quickly, long ones polled less
        time.sleep(pause)
    used = max(used, own)
    died = os.WIFSIGNALED(status)
    sig = os.WTERMSIG(status) if died else 0
    if sig == signal.SIGXCPU or (died and used >= cpu):
        return "cpu", used
    if died:
        return ("killed" if sig == signal.SIGKILL else "crashed"), used
    return "ended", used


def serve(status: int, sandboxed: bool) -> None:
    """Cases one after another until stdin ends; after each, no other process is left."""
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0, inherited by each child
    torch.set_num_threads(1)
    keep = ancestors()
    while len(header := read_exact(0, HEADER)) == HEADER:
        cpu, wall = (float(v) for v in header.split())
        ready, told = os.pipe()
        try:
            pid = os.fork()
        except OSError:  # the process limit: the grader ends this sandbox
            write_all(status, b"no_process 0".ljust(STATUS))
            return
        if pid == 0:
            try:
                os.close(status)  # the child never holds the grader's status pipe
                os.close(ready)
                case_process(cpu, told)
            finally:
                os._exit(0)
        os.close(told)
        select.select([ready], [], [], TRANSFER_SECONDS)  # the case read (or its end)
        os.close(ready)
        why, used = why_ended(pid, cpu, wall)
        if sandboxed:  # unsafe: this is the teacher's machine, nothing to kill
            kill_others(keep)
        write_all(status, f"{why} {used:.3f}".encode().ljust(STATUS))


if __name__ == "__main__":
    serve(int(sys.argv[1]), sandboxed=sys.argv[2] == "sandboxed")
