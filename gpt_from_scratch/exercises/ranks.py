"""Ranks as threads, for Chapter 15's checkers: each thread runs a candidate with its own
``rank`` and talks to the others through ``send``/``recv`` (messages in order, per pair of
ranks) or ``all_gather``, as processes would through ``torch.distributed``. ``_World``
records every message, so that a checker can tell how the ranks talked, not only what
they computed. A rank that waits for a message no rank sends, or for a rank that
stopped, ends with an error naming both.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

import torch
from torch import nn

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


def _tensors(obj, seen=None) -> list[torch.Tensor]:
    """Every tensor an object keeps: attributes, their lists and dicts, optimizer state."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return []
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, torch.optim.Optimizer):
        return _tensors(obj.state, seen) + _tensors(obj.param_groups, seen)
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in _tensors(v, seen)]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in _tensors(v, seen)]
    if isinstance(obj, nn.Module) or hasattr(obj, "__dict__"):
        return _tensors(vars(obj), seen)
    return []


def _optimizers(obj, seen=None) -> list[torch.optim.Optimizer]:
    """Every optimizer an object keeps, in its attributes, lists and dicts."""
    seen = set() if seen is None else seen
    if id(obj) in seen or isinstance(obj, torch.Tensor):
        return []
    seen.add(id(obj))
    if isinstance(obj, torch.optim.Optimizer):
        return [obj]
    if isinstance(obj, dict):
        return [o for v in obj.values() for o in _optimizers(v, seen)]
    if isinstance(obj, (list, tuple)):
        return [o for v in obj for o in _optimizers(v, seen)]
    return _optimizers(vars(obj), seen) if hasattr(obj, "__dict__") else []
