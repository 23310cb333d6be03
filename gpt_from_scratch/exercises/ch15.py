"""Checkers for the exercises of Chapter 15 (training on many devices):
``check_ring_all_reduce``, ``check_zero1``, ``check_data_parallel_step``.

The ranks of the first two are threads of one process, each running the candidate with its
own ``rank``, talking through ``send``/``recv`` (messages in order, per pair of ranks) or
``all_gather``, as processes would through ``torch.distributed``. A rank that waits for a
message no rank sends, or for a rank that stopped, ends with an error naming both.
"""

from __future__ import annotations

import math
import queue
import threading
from collections.abc import Callable

import torch
from torch import nn

from ..model import GPT, GPTConfig
from .core import _Case, _CandidateError, _call, _compare_values, _generator, _Mismatch
from .core import _require_tensor, _run_cases

__all__ = ["check_ring_all_reduce", "check_zero1", "check_data_parallel_step"]

WAIT_S = 5.0  # a rank waits this long for a message before its wait is an error


class _World:
    """``world_size`` threads' messages: a queue per (sender, receiver), a barrier, and
    the bytes each rank sent."""

    def __init__(self, world_size: int):
        self.world_size = world_size
        self.queues = {(a, b): queue.Queue() for a in range(world_size)
                       for b in range(world_size)}
        self.sent = [0] * world_size
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
        return send

    def recv(self, rank: int) -> Callable:
        def recv(tensor, source):
            source = self._rank("source", source, rank)
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
            self.slots[rank] = tensor.detach().clone()
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


def check_ring_all_reduce(candidate) -> bool:
    """Check ``ring_all_reduce(tensor, rank, world_size, send, recv)`` -> the sum of every
    rank's tensor, on every rank, by a ring: each rank sends 2(N - 1)/N of the tensor."""
    specs = [("2 ranks, 8 numbers", 2, 8, 1), ("3 ranks, 9 numbers", 3, 9, 2),
             ("4 ranks, 10 numbers: chunks of 3, 3, 2 and 2", 4, 10, 3),
             ("5 ranks, 3 numbers: some chunks are empty", 5, 3, 4)]

    def make(N: int, n: int, seed: int) -> Callable[[], None]:
        def run() -> None:
            g = _generator(seed)
            tensors = [torch.randn(n, generator=g) for _ in range(N)]
            expected = torch.stack(tensors).sum(0)
            world = _World(N)
            got = world.run(lambda r: candidate(tensors[r].clone(), r, N, world.send(r),
                                                world.recv(r)))
            for rank, result in enumerate(got):
                result = _require_tensor(result, expected, f"rank {rank}'s sum",
                                         shape_hint="return the whole sum: (n,), as given")
                _compare_values(result, expected, atol=1e-5, rtol=1e-5, known_mistakes=[
                    (expected / N, "return the sum of the tensors, not their mean"),
                    (tensors[rank], "add what you receive to your chunk before passing "
                                    "it on"),
                ], default_hint="reduce-scatter: N - 1 steps adding the chunk received; "
                                "then all-gather: N - 1 steps copying it",
                    what=f"rank {rank}'s sum")
            chunks = [c.numel() for c in torch.empty(n).tensor_split(N)]
            for rank, sent in enumerate(world.sent):
                ring = 2 * n - chunks[rank] - chunks[(rank + 1) % N]
                if sent > ring:
                    raise _Mismatch(f"rank {rank} sent {sent} numbers; a ring sends "
                                    f"{ring} (2(N - 1)/N of the {n})",
                                    hint="send one chunk a step, 2(N - 1) steps in all, "
                                         "never the whole tensor")
        return run

    cases = [_Case(label, make(*spec), "tensor is a (n,) float tensor; rank and world_size "
                                       "ints; send(t, to) and recv(t, source) functions")
             for label, *spec in specs]
    return _run_cases("check_ring_all_reduce", cases)


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


def check_zero1(candidate) -> bool:
    """Check a class ``ZeRO1(weights, rank, world_size, **adamw)`` with ``step(grad,
    all_gather)``: AdamW on the rank's chunk only, then every chunk gathered into weights;
    after each step every rank's weights equal AdamW's on the whole vector."""
    specs = [("2 ranks, 40 weights, 3 steps", 2, 40, 1), ("3 ranks, 50 weights: chunks of "
             "17, 17 and 16", 3, 50, 2), ("4 ranks, 42 weights, weight decay 0", 4, 42, 3)]

    def make(N: int, P: int, seed: int) -> Callable[[], None]:
        def run() -> None:
            g = _generator(seed)
            start = torch.randn(P, generator=g)
            grads = [torch.randn(P, generator=g) for _ in range(3)]
            adamw = dict(lr=0.1, weight_decay=0.0 if seed == 3 else 0.1)
            reference = nn.Parameter(start.clone())
            optimizer = torch.optim.AdamW([reference], **adamw)
            for grad in grads:
                reference.grad = grad.clone()
                optimizer.step()
            world = _World(N)
            weights = [start.clone() for _ in range(N)]

            def rank_body(rank):
                zero = candidate(weights[rank], rank, N, **adamw)
                for grad in grads:
                    zero.step(grad.clone(), world.all_gather(rank))
                return zero
            ranks = world.run(rank_body)
            chunk = math.ceil(P / N)
            for rank, zero in enumerate(ranks):
                _compare_values(weights[rank], reference.detach(), atol=1e-5, rtol=1e-5,
                                known_mistakes=[(start, "step() must change weights in "
                                                        "place: weights.copy_(...)")],
                                default_hint="step your chunk with AdamW, then write "
                                             "torch.cat(all_gather(chunk)) into weights",
                                what=f"rank {rank}'s weights after 3 steps")
                own = weights[rank].untyped_storage().data_ptr()
                kept = [t for t in _tensors(zero) if t.numel() > chunk
                        and t.untyped_storage().data_ptr() != own]
                if kept:
                    raise _Mismatch(f"rank {rank} keeps a tensor of {kept[0].numel()} "
                                    f"numbers besides the weights; a chunk is {chunk}",
                                    hint="keep AdamW's state for your own chunk only: give "
                                         "the optimizer a parameter of the chunk's size")
        return run

    cases = [_Case(label, make(*spec), "weights is a (P,) float tensor, the same on every "
                                       "rank; step(grad, all_gather) with grad (P,)")
             for label, *spec in specs]
    return _run_cases("check_zero1", cases)


def _tiny(seed: int) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=11, context_length=8, d_model=16, n_layers=1, n_heads=2,
                         dropout=0.0))


def _flat(model) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def check_data_parallel_step(candidate) -> bool:
    """Check ``data_parallel_step(replicas, optimizers, x, y)``: after 3 steps every replica
    equals one model trained on the whole batch, and all replicas are equal."""
    specs = [("2 replicas, 8 rows, SGD", 2, "sgd", 1),
             ("4 replicas, 8 rows, SGD", 4, "sgd", 2),
             ("2 replicas, 6 rows, AdamW", 2, "adamw", 3)]

    def optimizer_of(kind, model):
        if kind == "sgd":
            return torch.optim.SGD(model.parameters(), lr=0.5)
        return torch.optim.AdamW(model.parameters(), lr=1e-2)

    def make(N: int, kind: str, seed: int) -> Callable[[], None]:
        def run() -> None:
            g = _generator(seed)
            B = 6 if kind == "adamw" else 8
            batches = [torch.randint(0, 11, (B, 9), generator=g) for _ in range(3)]
            one = _tiny(seed)
            optimizer = optimizer_of(kind, one)
            summed, sum_opt = _tiny(seed), None
            sum_opt = optimizer_of(kind, summed)
            for batch in batches:
                one(batch[:, :-1], batch[:, 1:])[1].backward()
                optimizer.step()
                optimizer.zero_grad()
                (N * summed(batch[:, :-1], batch[:, 1:])[1]).backward()
                sum_opt.step()
                sum_opt.zero_grad()
            replicas = [_tiny(seed) for _ in range(N)]
            optimizers = [optimizer_of(kind, r) for r in replicas]
            for batch in batches:
                _call(candidate, replicas, optimizers, batch[:, :-1], batch[:, 1:])
            first = _flat(replicas[0])
            for rank, replica in enumerate(replicas[1:], 1):
                if not torch.equal(_flat(replica), first):
                    raise _Mismatch(f"replica {rank}'s weights differ from replica 0's "
                                    "after 3 steps",
                                    hint="give every replica the same gradient, the mean "
                                         "over the replicas, before any optimizer steps")
            # AdamW divides each gradient by its running size: rounding in a gradient near
            # its eps moves a step by a part of lr (1e-2); a real mistake moves it by lr.
            atol = 1e-3 if kind == "adamw" else 1e-5
            _compare_values(first, _flat(one), atol=atol, rtol=1e-4, known_mistakes=[
                (_flat(summed), "divide the summed gradients by the number of replicas: "
                                "the mean, not the sum"),
            ], default_hint="replica r takes rows r * B/N to (r + 1) * B/N; average each "
                            "parameter's gradient over the replicas; step; zero_grad",
                what="the replicas' weights against one model on the whole batch")
        return run

    cases = [_Case(label, make(*spec), "replicas: N GPT models returning (logits, loss); x "
                                       "and y (B, T) token ids")
             for label, *spec in specs]
    return _run_cases("check_data_parallel_step", cases)
