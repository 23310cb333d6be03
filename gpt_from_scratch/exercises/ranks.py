"""Ranks as threads, for Chapter 15's checkers: each thread runs a candidate with its own
``rank`` and talks to the others through ``send``/``recv`` (messages in order, per pair of
ranks) or ``all_gather``, as processes would through ``torch.distributed``. ``_World``
records every message, so that a checker can tell how the ranks talked, not only what
they computed. A rank that waits for a message no rank sends, or for a rank that
stopped, ends with an error naming both.
"""

from __future__ import annotations

import dis
import functools
import queue
import threading
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from .core import _CandidateError, _call, _Mismatch

WAIT_S = 5.0  # a rank waits this long for a message before its wait is an error


class _World:
    """``world_size`` threads' messages: a queue per (sender, receiver), a barrier, the
    numbers each rank sent, every (sender, receiver) of ``send`` and (receiver, source) of
    ``recv``, and what each rank gave ``all_gather``, call by call."""

    def __init__(self, world_size: int):
        self.world_size = world_size
        self.queues = {(a, b): queue.Queue() for a in range(world_size)
                       for b in range(world_size)}
        self.sent = [0] * world_size
        self.sends: list[tuple[int, int]] = []  # (from, to), each send
        self.recvs: list[tuple[int, int]] = []  # (rank, source), each recv
        self.gathered: list[list[torch.Tensor]] = [[] for _ in range(world_size)]
        self.barrier = threading.Barrier(world_size, timeout=WAIT_S)
        self.slots: list = [None] * world_size
        self.failed = threading.Event()  # a rank raised: the others stop waiting

    def _rank(self, what: str, value, rank: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not (
                0 <= value < self.world_size) or value == rank:
            raise ValueError(f"{what}={value!r} must be another rank, an int from 0 to "
                             f"{self.world_size - 1}: rank {rank} cannot message itself")
        return value

    def send(self, rank: int) -> Callable:
        def send(tensor, to):
            if not isinstance(tensor, torch.Tensor):
                raise ValueError(f"send takes a tensor, got a {type(tensor).__name__}")
            self.queues[rank, self._rank("to", to, rank)].put(tensor.detach().clone())
            self.sent[rank] += tensor.numel()
            self.sends.append((rank, to))
        return send

    def recv(self, rank: int) -> Callable:
        def recv(tensor, source):
            source = self._rank("source", source, rank)
            self.recvs.append((rank, source))
            waited = 0.0
            while True:
                try:
                    message = self.queues[source, rank].get(timeout=0.05)
                    break
                except queue.Empty:
                    waited += 0.05
                    if self.failed.is_set():
                        raise RuntimeError("another rank stopped with an error") from None
                    if waited >= WAIT_S:
                        raise RuntimeError(
                            f"rank {rank} waited {WAIT_S:g} s for a message from rank "
                            f"{source} that never came") from None
            if message.shape != tensor.shape:
                raise ValueError(f"rank {rank} received a tensor of shape "
                                 f"{tuple(message.shape)} from rank {source} into one of "
                                 f"shape {tuple(tensor.shape)}: receive into a tensor the "
                                 "size of the chunk sent")
            with torch.no_grad():
                tensor.copy_(message)
        return recv

    def all_gather(self, rank: int) -> Callable:
        def all_gather(tensor):
            if not isinstance(tensor, torch.Tensor):
                raise ValueError("all_gather takes a tensor, got a "
                                 f"{type(tensor).__name__}: pass your chunk")
            self.slots[rank] = tensor.detach().clone()
            self.gathered[rank].append(self.slots[rank])
            self.sent[rank] += tensor.numel() * (self.world_size - 1)
            self.barrier.wait()
            gathered = [t.clone() for t in self.slots]
            self.barrier.wait()  # nobody overwrites a slot before all have read
            return gathered
        return all_gather

    def run(self, body: Callable[[int], object]) -> list:
        """``body(rank)`` on every rank at once; the results, or the first rank's error."""
        results, errors = [None] * self.world_size, [None] * self.world_size

        def thread(rank):
            try:
                results[rank] = _call(body, rank)
            except _CandidateError as err:
                errors[rank] = err
                self.failed.set()
                self.barrier.abort()
        threads = [threading.Thread(target=thread, args=(r,), daemon=True)
                   for r in range(self.world_size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(WAIT_S * 4)
        if any(t.is_alive() for t in threads):
            raise _Mismatch(f"the ranks did not finish within {4 * WAIT_S:g} s",
                            hint="look for a loop that never ends on some rank")
        raised = [e for e in errors if e is not None]
        first = next((e for e in raised if not isinstance(
            e.error, threading.BrokenBarrierError) and "another rank stopped" not in
            str(e.error)), raised[0] if raised else None)
        if first is not None and "that never came" in str(first.error):
            raise _Mismatch(str(first.error), hint="in each step, send before you receive: "
                            "if every rank first waits for a message, none is ever sent")
        if first is not None:
            raise first
        return results


def _neighbours_only(world: _World, N: int) -> None:
    """A _Mismatch at the first message that does not go round the ring."""
    for rank, to in sorted(world.sends):  # the lowest rank's first: the same every run
        if to != (rank + 1) % N:
            raise _Mismatch(f"rank {rank} sent a message to rank {to}; in a ring each rank "
                            f"sends only to the next, rank {(rank + 1) % N}",
                            hint="send to (rank + 1) % world_size, receive from "
                                 "(rank - 1) % world_size: each chunk's sum travels round "
                                 "the ring, not straight to the rank that owns it")
    for rank, source in sorted(world.recvs):
        if source != (rank - 1) % N:
            raise _Mismatch(f"rank {rank} received from rank {source}; in a ring each rank "
                            f"receives only from the previous, rank {(rank - 1) % N}",
                            hint="receive from (rank - 1) % world_size")


def _reachable(obj, seen: set[int] | None = None) -> Iterator:
    """Every object a candidate's object keeps: attributes, their lists and dicts, optimizer
    state, its class's attributes, what its functions close over (closures, bound methods,
    partials) and the globals their code names: a tensor hidden in any of those is kept all
    the same. Modules, and classes of libraries, are not followed."""
    seen = set() if seen is None else seen
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
        parts = [vars(obj)] if hasattr(obj, "__dict__") else []
        parts.append(type(obj))
    for part in parts:
        yield from _reachable(part, seen)


LIBRARIES = {"builtins", "torch", "typing", "abc", "collections", "functools", "enum",
             "numpy", "gpt_from_scratch"}  # classes whose attributes are no candidate's


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


def _tensors(obj) -> list[torch.Tensor]:
    """Every tensor an object keeps (``_reachable``)."""
    return [o for o in _reachable(obj) if isinstance(o, torch.Tensor)]


def _optimizers(obj) -> list[torch.optim.Optimizer]:
    """Every optimizer an object keeps (``_reachable``)."""
    return [o for o in _reachable(obj) if isinstance(o, torch.optim.Optimizer)]


@contextmanager
def _optimizers_built() -> Iterator[list[torch.optim.Optimizer]]:
    """Every optimizer built while the block runs, wherever the candidate keeps it (a
    global, a closure): ``torch.optim.Optimizer.__init__`` records each."""
    built: list[torch.optim.Optimizer] = []
    init = torch.optim.Optimizer.__init__

    def recording(self, *args, **kwargs):
        built.append(self)
        init(self, *args, **kwargs)
    torch.optim.Optimizer.__init__ = recording
    try:
        yield built
    finally:
        torch.optim.Optimizer.__init__ = init
