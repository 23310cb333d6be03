"""Chapter 15 — the worlds of its cases: ranks as threads of the case's process, replicas
recorded, as the in-notebook checkers run them (``gpt_from_scratch.exercises.ranks``).

Inside the sandbox the runner imports this file (``/grader/ranks.py``; standard library and
torch only, no process, no socket): ``World`` gives each rank ``send``/``recv`` (messages in
order per pair of ranks) and ``all_gather``, and records every message; ``run`` runs a
program on every rank at once; ``kept`` and ``optimizers_built`` report, as numbers, what an
object keeps; ``Seen`` records the rows each replica's forward receives and each optimizer's
steps. A rank that waits when every rank waits or has ended, none able to go on, is a
deadlock, found at once (``Deadlock``); a wait past ``WAIT_S`` is a ``TimeoutError`` naming
the rank. Outside, the case files read the record (``read``). The record is kept in the
case's own process, so code that reaches into the world could forge it: the teacher reads
such code.
"""

from __future__ import annotations

import collections
import dis
import functools
import threading
import time
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

WAIT_S = 5.0  # a rank waits this long for a message; the ranks end within twice that
RECORD = ("sent", "sends", "recvs", "gathered", "steps", "inputs", "kept", "built")


class Deadlock(RuntimeError):
    """Every rank waits or has ended, and none can go on."""


class Stopped(RuntimeError):
    """Another rank raised: this one stops waiting."""


class World:
    """``world_size`` ranks' messages: a queue per (sender, receiver), one lock, and the
    record: numbers each rank sent, each send (from, to) and recv (rank, source), the
    tensors each rank gave ``all_gather``, its calls after each step (``steps``)."""

    def __init__(self, world_size: int):
        N = self.world_size = world_size
        self.lock = threading.Condition()
        self.queues = {(a, b): collections.deque() for a in range(N) for b in range(N)}
        self.waiting: dict[int, Callable[[], bool]] = {}  # rank -> can it go on?
        self.ended, self.failed, self.deadlock = 0, False, False
        self.sent, self.sends, self.recvs = [0] * N, [], []
        self.gathered: list[list[torch.Tensor]] = [[] for _ in range(N)]
        self.steps: list[list[int]] = [[] for _ in range(N)]
        self.slots, self.arrived, self.rounds, self.result = [None] * N, 0, 0, []

    def given(self, rank: int) -> dict:
        """What a case's ``World(name)`` arguments are on ``rank``."""
        return {"rank": rank, "send": functools.partial(self.send, rank),
                "recv": functools.partial(self.recv, rank),
                "all_gather": functools.partial(self.all_gather, rank)}

    def _other(self, what: str, value, rank: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not (
                0 <= value < self.world_size) or value == rank:
            raise ValueError(f"{what}={value!r} must be another rank, an int from 0 to "
                             f"{self.world_size - 1}: rank {rank} cannot message itself")
        return value

    def _wait(self, rank: int, ready: Callable[[], bool], what: str) -> None:
        """Holding the lock, wait until ``ready()``."""
        self.waiting[rank] = ready
        deadline = time.monotonic() + WAIT_S
        try:
            while not ready():
                if self.failed:
                    raise Stopped("another rank stopped with an error")
                stuck = self.ended + len(self.waiting) == self.world_size
                if stuck and not any(can() for can in self.waiting.values()):
                    self.deadlock = True
                    raise Deadlock(f"rank {rank} waits for {what}, and so does every rank "
                                   "that has not ended: a deadlock")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"rank {rank} waited {WAIT_S:g} s for {what}")
                self.lock.wait(left)
        finally:
            del self.waiting[rank]

    def send(self, rank: int, tensor, to) -> None:
        if not isinstance(tensor, torch.Tensor):
            raise ValueError(f"send takes a tensor, got a {type(tensor).__name__}")
        with self.lock:
            self.queues[rank, self._other("to", to, rank)].append(tensor.detach().clone())
            self.sent[rank] += tensor.numel()
            self.sends.append((rank, to))
            self.lock.notify_all()

    def recv(self, rank: int, tensor, source) -> None:
        with self.lock:
            queue = self.queues[self._other("source", source, rank), rank]
            self.recvs.append((rank, source))
            self._wait(rank, lambda: bool(queue), f"a message from rank {source}")
            message = queue.popleft()
        if not isinstance(tensor, torch.Tensor) or message.shape != tensor.shape:
            shape = tuple(getattr(tensor, "shape", ()))
            raise ValueError(f"rank {rank} received a tensor of shape "
                             f"{tuple(message.shape)} from rank {source} into one of shape "
                             f"{shape}: receive into a tensor the size of the chunk sent")
        with torch.no_grad():
            tensor.copy_(message)

    def all_gather(self, rank: int, tensor) -> list[torch.Tensor]:
        if not isinstance(tensor, torch.Tensor):
            raise ValueError(f"all_gather takes a tensor, got a {type(tensor).__name__}")
        with self.lock:
            self.slots[rank] = tensor.detach().clone()
            self.gathered[rank].append(self.slots[rank])
            self.sent[rank] += tensor.numel() * (self.world_size - 1)
            self.arrived, round_ = self.arrived + 1, self.rounds
            if self.arrived == self.world_size:  # the last to arrive: every slot filled
                self.result, self.arrived, self.rounds = list(self.slots), 0, round_ + 1
                self.lock.notify_all()
            self._wait(rank, lambda: self.rounds != round_, "every rank's all_gather")
            return [t.clone() for t in self.result]


def run(world: World, program: Callable[[int], object]) -> list:
    """``program(rank)`` on every rank at once, each a thread; the results, or an error: a
    deadlock first, then ranks still running after ``2 * WAIT_S``, then the lowest rank's
    own error (not one that only stopped because another raised)."""
    N = world.world_size
    results, errors = [None] * N, [None] * N

    def thread(rank: int) -> None:
        try:
            results[rank] = program(rank)
        except BaseException as error:  # noqa: BLE001 - SystemExit in a rank too
            errors[rank] = error
            with world.lock:
                world.failed = True
        finally:
            with world.lock:
                world.ended += 1
                world.lock.notify_all()

    threads = [threading.Thread(target=thread, args=(r,), daemon=True) for r in range(N)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 2 * WAIT_S
    for t in threads:
        t.join(max(deadline - time.monotonic(), 0.0))
    if world.deadlock:
        raise Deadlock("the ranks deadlocked")
    if any(t.is_alive() for t in threads):
        raise TimeoutError(f"the ranks did not end within {2 * WAIT_S:g} s")
    raised = [e for e in errors if e is not None]
    if raised:
        raise next((e for e in raised if not isinstance(e, Stopped)), raised[0])
    return results


def _reachable(obj, seen: set[int]) -> Iterator:
    """Every object ``obj`` keeps: attributes, containers, optimizer state, its class's
    attributes, what its functions close over (closures, bound methods, partials) and the
    globals their code names; not modules, nor classes of libraries."""
    if id(obj) in seen or isinstance(obj, types.ModuleType) or (
            isinstance(obj, type) and obj.__module__.split(".")[0] in LIBRARIES):
        return
    seen.add(id(obj))
    yield obj
    if isinstance(obj, torch.Tensor):
        return
    if isinstance(obj, torch.optim.Optimizer):
        parts = [obj.state, obj.param_groups]
    elif isinstance(obj, dict):
        parts = list(obj.values())
    elif isinstance(obj, (list, tuple, set, frozenset)):
        parts = list(obj)
    elif isinstance(obj, types.MethodType):
        parts = [obj.__self__, obj.__func__]
    elif isinstance(obj, types.FunctionType):
        cells = [c.cell_contents for c in obj.__closure__ or () if _filled(c)]
        named = [obj.__globals__[n] for n in _names(obj.__code__) if n in obj.__globals__]
        parts = cells + named + list(obj.__defaults__ or ()) + [obj.__kwdefaults__ or {}]
    elif isinstance(obj, functools.partial):
        parts = [obj.func, obj.args, obj.keywords]
    elif isinstance(obj, type):  # the candidate's own class: its attributes
        parts = [dict(vars(obj))]
    else:
        parts = ([vars(obj)] if hasattr(obj, "__dict__") else []) + [type(obj)]
    for part in parts:
        yield from _reachable(part, seen)


LIBRARIES = {"builtins", "torch", "typing", "abc", "collections", "functools", "enum",
             "numpy"}  # classes whose attributes are no candidate's


def _names(code: types.CodeType) -> set[str]:
    """The global names a function's code loads, its inner functions' too: not the
    attributes it reads (``self.optimizer`` is no global ``optimizer``)."""
    loads = {i.argval for i in dis.get_instructions(code)
             if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    inner = [c for c in code.co_consts if isinstance(c, types.CodeType)]
    return loads.union(*(_names(c) for c in inner))


def _filled(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:  # a closure's variable not yet assigned
        return False
    return True


def kept(obj, own: list[torch.Tensor]) -> list[int]:
    """What ``obj`` keeps besides the storage of the tensors ``own``, counted by storage (a
    view keeps all of its storage alive): [the largest storage's numbers, all storages'
    numbers, its optimizers' state numbers, their states (one per parameter)]."""
    found = list(_reachable(obj, set()))
    owned = {t.untyped_storage().data_ptr() for t in own}
    storages = {o.untyped_storage().data_ptr(): o.untyped_storage().nbytes() // o.itemsize
                for o in found if isinstance(o, torch.Tensor)}
    numbers = [n for ptr, n in storages.items() if ptr not in owned]
    states = [s for o in found if isinstance(o, torch.optim.Optimizer)
              for s in o.state.values()]
    state = sum(t.numel() for s in states for t in s.values() if torch.is_tensor(t))
    return [max(numbers, default=0), sum(numbers), state, len(states)]


@contextmanager
def optimizers_built() -> Iterator[list[int]]:
    """The numbers of parameters each optimizer built in the block holds, wherever it is
    kept (``torch.optim.Optimizer.__init__`` records each)."""
    built: list[int] = []
    init = torch.optim.Optimizer.__init__

    def recording(self, *args, **kwargs):
        init(self, *args, **kwargs)
        built.append(sum(p.numel() for g in self.param_groups for p in g["params"]))
    torch.optim.Optimizer.__init__ = recording
    try:
        yield built
    finally:
        torch.optim.Optimizer.__init__ = init


class Seen:
    """What replicas and their optimizers did, step by step: the token ids each replica's
    forward received (``idx``, by position or by name; a forward pre-hook on each) and how
    many times each optimizer stepped (a step post-hook on each). ``take`` returns both
    since the last take."""

    def __init__(self, replicas: list[torch.nn.Module], optimizers: list):
        self.rows: list[list[torch.Tensor]] = [[] for _ in replicas]
        self.steps = [0] * len(optimizers)
        for r, replica in enumerate(replicas):
            replica.register_forward_pre_hook(functools.partial(self._forward, r),
                                              with_kwargs=True)
        for r, optimizer in enumerate(optimizers):
            optimizer.register_step_post_hook(functools.partial(self._step, r))

    def _forward(self, r: int, module, args, kwargs) -> None:
        idx = args[0] if args else kwargs.get("idx")
        if isinstance(idx, torch.Tensor):
            self.rows[r].append(idx.detach().clone())

    def _step(self, r: int, optimizer, args, kwargs) -> None:
        self.steps[r] += 1

    def take(self) -> list:
        """[per replica, its rows concatenated; per optimizer, its steps]."""
        rows = [torch.cat(s) if s else torch.zeros(0, dtype=torch.long) for s in self.rows]
        steps, self.steps = self.steps, [0] * len(self.steps)
        for s in self.rows:
            s.clear()
        return [rows, steps]


def read(got: list) -> tuple[list, dict]:
    """A ranks case's values as the judge decodes them: each rank's values, and the
    world's record by name (``RECORD``)."""
    *values, record = got
    if len(record) != len(RECORD):
        raise ValueError(f"a ranks record has {len(RECORD)} fields, got {len(record)}")
    return values, dict(zip(RECORD, record))
