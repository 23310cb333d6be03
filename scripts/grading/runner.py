"""Inside the sandbox (a new one per student): each case in a fresh process that holds only
its own case, its result sent straight to the grader.

    python runner.py STATUS_FD

This process imports torch, makes itself not dumpable (no ptrace, no /proc/<pid>/mem, no
/proc/<pid>/fd) and waits, holding nothing of the job. Per case the grader writes on stdin a
header (a CPU limit, only where no control group counts the case's CPU time), then the case:
its exercise's set-up (stand-ins, that exercise's withheld names left out), the student's
program, the case's program and its tensors (no case name, no limit). This process reads the
header only, forks, and says so on STATUS_FD, a pipe no child holds; the grader, outside the
sandbox, moves the child into the case's control group. The child reads the case, draws its
random inputs (sent as seeds), says so on stdout, runs the set-up, the program and the case,
and writes its result (JSON, then safetensors bytes) on stdout, a pipe the grader reads. The
grader times the case and ends it, every process of it; this process only reports the
child's wait status. No file is read or written; nothing here decides a grade. A case on
ranks (Chapter 15) runs its program in a thread per rank of the case's process, a case on
replicas on models of the set-up (``ranks.py``, beside this file). Standard library, torch,
safetensors and ``ranks.py`` only.
"""

import ctypes
import json
import linecache
import numbers
import os
import resource
import sys
from collections.abc import Callable

import torch
from safetensors.torch import load, save

import ranks  # Chapter 15's worlds: /grader/ranks.py, beside this file

MAX_TEXT = 2000  # characters of a string output kept
HEADER = 32  # bytes of a case's header: its CPU seconds where no control group counts them
STATUS = 32  # bytes of a status: "forked", then "exit" and the case process's wait status


def decode(value, tensors: dict, names: dict, given: dict | None = None):
    """A JSON argument back to Python: tensors, generators and set-up objects by
    reference; what the case's world gives (``given``: a rank's ``send``, the replicas)."""
    if isinstance(value, list):
        return [decode(v, tensors, names, given) for v in value]
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
    if "$world" in value:
        return given[value["$world"]]
    if "$per_rank" in value:
        return decode(value["$per_rank"][given["rank"]], tensors, names, given)
    if "$setup" in value:  # e.g. GPTConfig.from_preset, made from the set-up's names
        return setup(value, tensors, names)
    return {k: decode(v, tensors, names, given) for k, v in value.items()}


def setup(value: dict, tensors: dict, names: dict, *first):
    """A set-up object: ``name(*first, *args, **kwargs)``, its name looked up in the set-up
    (dotted: ``torch.optim.SGD``)."""
    target = names[value["$setup"].split(".")[0]]
    for attribute in value["$setup"].split(".")[1:]:
        target = getattr(target, attribute)
    return target(*first, *decode(value["args"], tensors, names),
                  **decode(value["kwargs"], tensors, names))


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
    if isinstance(value, numbers.Integral):  # a NumPy integer too
        return int(value)
    if isinstance(value, numbers.Real):  # a NumPy float too
        return float(value)
    if isinstance(value, str):
        return value[:MAX_TEXT]
    return {"$type": type(value).__name__[:80]}


def kind(error: BaseException) -> str:
    """The error's class name only: its message may hold anything the student wrote."""
    return type(error).__name__[:80]


def run_program(solution, case: dict, tensors: dict, names: dict, out: dict, prefix: str,
                given: dict, after_step: Callable[[], None]) -> tuple:
    """The case's program on ``solution``: (its values, the object it made, the
    constructor's arguments); ``after_step`` runs after each step."""
    target, init_args = solution, []
    if case.get("init") is not None:
        init = case["init"]
        init_args = decode(init["args"], tensors, names, given)
        target = solution(*init_args, **decode(init["kwargs"], tensors, names, given))
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
            values.append(encode(value, f"{prefix}.{i}", out))
        else:
            function = getattr(target, step["method"]) if step.get("method") else target
            values.append(call(function, step, tensors, names, out, f"{prefix}.{i}", given))
        after_step()
    return values, target, init_args


def run_ranks(solution, case: dict, tensors: dict, names: dict, out: dict, prefix: str):
    """The program on every rank at once (``ranks.run``): each rank's values, then the
    world's record (``ranks.RECORD``)."""
    world = ranks.World(case["world"]["ranks"])
    inputs, kept = [None] * world.world_size, [None] * world.world_size

    def program(rank: int) -> dict:
        gathers = world.gathered[rank]
        values, target, init_args = run_program(
            solution, case, tensors, names, out, f"{prefix}.{rank}", world.given(rank),
            lambda: world.steps[rank].append(len(gathers)))
        inputs[rank] = [a for a in init_args if isinstance(a, torch.Tensor)]
        kept[rank] = ranks.kept(target, inputs[rank]) if case.get("init") else []
        return {"$list": values}

    with ranks.optimizers_built() as built:
        values = ranks.run(world, program)
    record = [world.sent, world.sends, world.recvs, world.gathered, world.steps, inputs,
              kept, built]
    return values + [encode(record, f"{prefix}.record", out)]


def run_replicas(solution, case: dict, tensors: dict, names: dict, out: dict, prefix: str):
    """The program given replicas of a set-up model, each with its optimizer: its values,
    then [per step, the rows each replica's forward received and each optimizer's steps
    (``ranks.Seen``); each replica's state (the case's keys, flattened) after the steps]."""
    spec = case["world"]
    state = decode(spec["state"], tensors, names)
    replicas = [setup(spec["model"], tensors, names) for _ in range(spec["replicas"])]
    for replica in replicas:
        replica.load_state_dict(state)
    optimizers = [setup(spec["optimizer"], tensors, names, replica.parameters())
                  for replica in replicas]
    watch, seen = ranks.Seen(replicas, optimizers), []
    given = {"replicas": replicas, "optimizers": optimizers}
    with torch.enable_grad():
        values, _, _ = run_program(solution, case, tensors, names, out, prefix, given,
                                   lambda: seen.append(watch.take()))
    weights = [torch.cat([r.state_dict()[k].reshape(-1) for k in state]) for r in replicas]
    return values + [encode([seen, weights], f"{prefix}.record", out)]


def run_case(
    solution, case: dict, tensors: dict, names: dict, out: dict, prefix: str
) -> list:
    world = case.get("world") or {}
    if "ranks" in world:
        return run_ranks(solution, case, tensors, names, out, prefix)
    if "replicas" in world:
        return run_replicas(solution, case, tensors, names, out, prefix)
    return run_program(solution, case, tensors, names, out, prefix, {}, lambda: None)[0]


def call(function, step: dict, tensors: dict, names: dict, out: dict, key: str,
         given: dict | None = None):
    """One step's call, reported: its value; with ``grad``, [value, its gradient with
    respect to that argument] (autograd on for this call only, unless a world's program
    runs with it on); with ``unchanged``, [that, the arguments after the call]."""
    args = decode(step["args"], tensors, names, given)
    wrt = step.get("grad")
    if wrt is not None:
        args[wrt].requires_grad_(True)
    with torch.set_grad_enabled(wrt is not None or torch.is_grad_enabled()):
        value = function(*args, **decode(step["kwargs"], tensors, names, given))
        reported = encode(value, key, out)
        if wrt is not None:
            grad = gradient(value, args[wrt])
            reported = {"$list": [reported, encode(grad, key + ".grad", out)]}
    if step.get("unchanged"):
        reported = {"$list": [reported, encode(args, key + ".args", out)]}
    return reported


def gradient(value, wrt: torch.Tensor):
    """The gradient of ``value`` with respect to ``wrt``; None unless ``value`` is a
    one-element tensor whose graph reaches ``wrt``."""
    if not (isinstance(value, torch.Tensor) and value.requires_grad and value.numel() == 1):
        return None
    (grad,) = torch.autograd.grad(value.sum(), wrt, allow_unused=True)
    return grad


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


def case_process(cpu: float) -> None:
    """In the fresh child: read this case from stdin, say so on stdout (the grader starts
    its clocks), run it, write its result on stdout: its length, then the result."""
    size = int.from_bytes(read_exact(0, 8), "big")
    job = json.loads(read_exact(0, size))
    size = int.from_bytes(read_exact(0, 8), "big")
    tensors = load(read_exact(0, size)) if size else {}
    make_random(job["case"], tensors)
    write_all(1, b"r")  # the clocks start now, not while a large case is read or made
    devnull = os.open(os.devnull, os.O_RDWR)
    result = os.dup(1)
    for fd in (0, 1, 2):  # stdin read to its end; prints go nowhere
        os.dup2(devnull, fd)
    if cpu:  # no control group: each process's own limit is all there is
        used = resource.getrusage(resource.RUSAGE_SELF)
        limit = int(used.ru_utime + used.ru_stime + cpu) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (limit, limit + 1))
    name, case, out, env = job["name"], job["case"], {}, {"__name__": "__main__"}
    try:
        run_source(job["setup"], "<the exercise's set-up>", env)
        names = dict(env)
        run_source(job["source"], "<your solution>", env)
        solution = env[name]
    except BaseException as error:  # noqa: BLE001 - SystemExit too: the cell failed
        report = {"error": kind(error), "stage": "cell"}
    else:
        try:
            with torch.no_grad():
                values = run_case(solution, case, tensors, names, out, "out")
            report = {"values": values}
        except ranks.Deadlock:
            report = {"stopped": "deadlock"}
        except BaseException as error:  # noqa: BLE001
            report = {"error": kind(error), "stage": "case"}
    data, raw = json.dumps(report).encode(), save(out)
    whole = len(data).to_bytes(8, "big") + data + raw
    write_all(result, len(whole).to_bytes(8, "big") + whole)


def serve(status: int) -> None:
    """A fresh process per case, until stdin ends; on STATUS_FD, that it was forked, then
    how it ended (its wait status). The grader, outside, times it and ends it."""
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0, inherited by each child
    torch.set_num_threads(1)
    while len(header := read_exact(0, HEADER)) == HEADER:
        try:
            pid = os.fork()
        except OSError:  # the process limit: the grader ends this sandbox
            write_all(status, b"no_process".ljust(STATUS))
            return
        if pid == 0:
            try:
                os.close(status)  # the child never holds the grader's status pipe
                case_process(float(header))
            finally:
                os._exit(0)
        write_all(status, b"forked".ljust(STATUS))
        _, code = os.waitpid(pid, 0)
        write_all(status, f"exit {code}".encode().ljust(STATUS))


if __name__ == "__main__":
    serve(int(sys.argv[1]))
