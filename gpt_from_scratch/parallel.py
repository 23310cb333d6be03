"""Chapter 15 — training on many devices: the process group and the ring, from scratch.

N processes, one per device, talk through ``torch.distributed``'s messages and
collectives (gloo on a CPU: processes on one machine stand in for the devices):

- ``start_process_group`` joins the processes at ``127.0.0.1:port``, with a clear error
  for a port already taken and for a process that never comes (``free_port`` finds one);
- ``ring_reduce_scatter``, ``ring_all_gather`` and ``ring_all_reduce``: the ring
  algorithm from ``isend``/``irecv``, each process sending 2(N - 1)/N of the tensor;
- ``world`` and ``collective``: this rank and the group's size, and a failed collective
  turned into an error that says what to do.

``data_parallel`` (``DataParallel``, the gradients averaged) and ``sharding`` (ZeRO-1,
ZeRO-3, the bytes each scheme keeps) build on it.
``tests/test_parallel.py`` proves each equal to PyTorch's own.
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import Tensor

from .utils import check_float, check_int

HOST = "127.0.0.1"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that no process listens on now (the system picks it).

    Another process may take it before rank 0 listens there: ``start_process_group`` then
    says so, and ``book.parallel_runs.launch`` starts the ranks again on another port."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def start_process_group(rank: int, world_size: int, port: int, timeout_s: float = 60.0):
    """Join ``world_size`` processes (gloo) at ``127.0.0.1:port``, where rank 0 listens.

    Every process calls it with its own ``rank`` and the same ``world_size`` and ``port``.
    Each first reads the ``world_size`` rank 0 was given (rank 0 those of the others) from
    a ``TCPStore`` at the port, so that a process started with another world size ends
    every process it meets with an error naming both sizes, rather than a hang.
    ``timeout_s`` bounds each wait: for the others to join, then every collective, so a
    process that died mid-step ends the others with an error instead of a hang. (A rank
    that never finds rank 0 listening retries its connection for up to about twice it.)
    """
    world_size = check_int("start_process_group", "world_size", world_size, minimum=1)
    rank = check_int("start_process_group", "rank", rank, minimum=0)
    if rank >= world_size:
        raise ValueError(f"rank={rank} must be below world_size={world_size}: number the "
                         f"processes 0 .. {world_size - 1}, each once")
    port = check_int("start_process_group", "port", port, minimum=1)
    timeout_s = check_float("start_process_group", "timeout_s", timeout_s)
    if port > 65535 or not timeout_s > 0:
        raise ValueError(f"port={port} must be at most 65535 and timeout_s={timeout_s} "
                         "positive: take free_port() and a few seconds")
    if dist.is_initialized():
        raise RuntimeError(f"start_process_group: this process is rank {dist.get_rank()} "
                           f"of a group of {dist.get_world_size()} already: use it, or "
                           "end it with torch.distributed.destroy_process_group() first")
    not_joined = (f"rank {rank} of {world_size} waited {timeout_s:g} s at {HOST}:{port} "
                  f"and not every process joined: start all {world_size} processes with "
                  f"the same port and world_size, ranks 0 .. {world_size - 1} each once, "
                  "or raise timeout_s")
    timeout = timedelta(seconds=timeout_s)
    try:
        store = dist.TCPStore(HOST, port, is_master=rank == 0, timeout=timeout,
                              wait_for_workers=False)
    except RuntimeError as err:  # torch's DistNetworkError
        if "EADDRINUSE" in str(err) or "address already in use" in str(err).lower():
            raise RuntimeError(
                f"port {port} on {HOST} is already taken by another process, so rank 0 "
                "cannot listen there: choose a free one (free_port()) or end the process "
                "that holds it") from err
        raise RuntimeError(not_joined) from err
    try:
        _same_world_size(store, rank, world_size, timeout_s)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size,
                                timeout=timeout)
    except RuntimeError as err:  # torch's DistStoreError: a wait timed out
        raise RuntimeError(not_joined) from err


def _same_world_size(store, rank: int, world_size: int, timeout_s: float) -> None:
    """A ValueError naming both sizes when this rank's ``world_size`` is not rank 0's
    (rank 0: when another rank's is not its own, checked as each arrives, all within
    ``timeout_s``). Rank 0 writes its size first; every other rank reads it before writing
    its own, so rank 0 never leaves before the other has read it."""
    deadline = time.monotonic() + timeout_s
    if rank == 0:
        store.set("world_size/0", str(world_size))
        for other in range(1, world_size):
            left = max(deadline - time.monotonic(), 1e-3)
            store.wait([f"world_size/{other}"], timedelta(seconds=left))
            _compare(rank, world_size, other, int(store.get(f"world_size/{other}")))
    else:
        store.wait(["world_size/0"])
        size = int(store.get("world_size/0"))
        store.set(f"world_size/{rank}", str(world_size))
        _compare(rank, world_size, 0, size)


def _compare(rank: int, world_size: int, other: int, size: int) -> None:
    if size != world_size:
        (low, low_size), (high, high_size) = sorted([(rank, world_size), (other, size)])
        raise ValueError(f"rank {high} was started with world_size={high_size}, rank "
                         f"{low} with {low_size}: start every process with the same "
                         "world_size (and ranks 0 .. world_size - 1, each once)")


def world(caller: str) -> tuple[int, int]:
    """This process's rank and the number of processes, or an error saying how to start."""
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(
            f"{caller} needs a process group, and this process has none: call "
            "start_process_group(rank, world_size, port) (or "
            "torch.distributed.init_process_group) in every process first")
    return dist.get_rank(), dist.get_world_size()


LOST = ("connection", "timed out", "timeout", "broken pipe", "closed", "peer")  # rank gone


@contextmanager
def collective(what: str) -> Iterator[None]:
    """Turn a failed collective into an error saying which, on which rank, what to do."""
    try:
        yield
    except RuntimeError as err:
        said = (str(err).strip() or type(err).__name__).splitlines()[0].split(". ")[0]
        said = re.sub(r"\[[^\]]*\.(?:cc|cpp|h):\d+\] ", "", said)  # no build machine's path
        lost = any(word in str(err).lower() for word in LOST)
        fix = ("another process ended or stopped answering: end every process and start "
               "them all again from the last checkpoint (torchrun --max-restarts does it)"
               if lost else "the processes disagree about this collective (a tensor's "
               "size, the order of the calls, a model that differs): run the same code on "
               "the same model in every process")
        raise RuntimeError(f"rank {dist.get_rank()} of {dist.get_world_size()}: {what} "
                           f"failed ({said}); {fix}") from err


def _flat_view(caller: str, tensor) -> Tensor:
    """``tensor`` as one flat view of its own memory, for a ring to work on in place."""
    if not isinstance(tensor, Tensor):
        raise ValueError(f"{caller} takes a torch.Tensor, got a {type(tensor).__name__}: "
                         "pass torch.as_tensor(values)")
    if tensor.requires_grad:
        raise ValueError(f"{caller} works in place, and this tensor of shape "
                         f"{tuple(tensor.shape)} requires grad (a parameter?), which "
                         "autograd forbids: pass p.grad, or p.detach() to change p itself")
    if not tensor.is_contiguous():
        raise ValueError(f"{caller} works in place on a contiguous tensor, and this one of "
                         f"shape {tuple(tensor.shape)} is not: pass t = t.contiguous() and "
                         "keep using t")
    return tensor.view(-1)


def _exchange(send: Tensor, recv: Tensor, rank: int, world_size: int) -> None:
    """Send ``send`` to the next rank of the ring while receiving ``recv`` from the last."""
    requests = []
    if send.numel():  # both sides know every chunk's size: an empty one is never sent
        requests.append(dist.isend(send, (rank + 1) % world_size))
    if recv.numel():
        requests.append(dist.irecv(recv, (rank - 1) % world_size))
    with collective("a ring step (isend/irecv)"):
        for request in requests:
            request.wait()


def ring_reduce_scatter(tensor: Tensor) -> Tensor:
    """Sum ``tensor`` across ranks, each rank ending with the total of its own chunk.

    The tensor is cut into N chunks (``tensor_split``: sizes differ by at most one). In
    each of N - 1 steps every rank sends a chunk to the next rank and adds the one it
    receives from the previous rank; rank r ends with the sum of chunk r and returns it (a
    view of ``tensor``; the other chunks hold partial sums). Each sends (N - 1)/N of it.
    """
    rank, world_size = world("ring_reduce_scatter")
    chunks = _flat_view("ring_reduce_scatter", tensor).tensor_split(world_size)
    incoming = torch.empty_like(chunks[0])  # the first chunk is the largest
    for step in range(world_size - 1):
        send = chunks[(rank - step - 1) % world_size]  # what this rank summed last step
        recv = chunks[(rank - step - 2) % world_size]
        _exchange(send, incoming[: recv.numel()], rank, world_size)
        recv += incoming[: recv.numel()]
    return chunks[rank]


def ring_all_gather(tensor: Tensor) -> Tensor:
    """Fill every chunk of ``tensor`` from the rank that holds it: chunk r from rank r.

    The chunks are ``tensor_split``'s N pieces, as in ``ring_reduce_scatter``. In each of
    N - 1 steps every rank passes on the chunk it got last (first its own) and receives the
    next: each sends (N - 1)/N of the tensor. In place; returns ``tensor``.
    """
    rank, world_size = world("ring_all_gather")
    chunks = _flat_view("ring_all_gather", tensor).tensor_split(world_size)
    for step in range(world_size - 1):
        send = chunks[(rank - step) % world_size]
        _exchange(send, chunks[(rank - step - 1) % world_size], rank, world_size)
    return tensor


def ring_all_reduce(tensor: Tensor) -> Tensor:
    """Sum ``tensor`` across ranks in place, as ``dist.all_reduce`` does; returns it.

    A reduce-scatter (rank r sums chunk r), then an all-gather (each chunk copied to every
    rank): 2(N - 1) steps each moving 1/N of the tensor, so each rank sends 2(N - 1)/N of
    it, under twice the tensor however many ranks. Every rank ends with the same bits.
    Every rank must pass a tensor of the same size and dtype, as with ``dist.all_reduce``:
    the ranks compare nothing, and gloo ends a process whose message has another size.
    """
    ring_reduce_scatter(tensor)
    return ring_all_gather(tensor)
