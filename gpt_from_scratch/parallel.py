"""Chapter 15 — training on many devices: collectives and data parallelism from scratch.

N processes, one per device, each hold the whole model and train on their own share of
the batch; averaging the gradients keeps the weights the same in every process. This
module builds that on ``torch.distributed``'s messages and collectives (gloo on a CPU:
processes on one machine stand in for the devices):

- ``start_process_group`` joins the processes at ``127.0.0.1:port``, with a clear error
  for a port already taken and for a process that never comes (``free_port`` finds one);
- ``ring_reduce_scatter``, ``ring_all_gather`` and ``ring_all_reduce``: the ring
  algorithm from ``isend``/``irecv``, each process sending 2(N - 1)/N of the tensor;
- ``DataParallel`` averages the gradients after backward: one all-reduce per parameter,
  or in buckets sent during the backward pass, as ``DistributedDataParallel`` does.

``sharding`` (ZeRO-1, ZeRO-3, the bytes each scheme keeps) builds on it.
``tests/test_parallel.py`` proves each equal to PyTorch's own.
"""

from __future__ import annotations

import functools
import itertools
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import Tensor, nn

from .utils import check_int

HOST = "127.0.0.1"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that no process listens on now (the system picks it)."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def start_process_group(rank: int, world_size: int, port: int, timeout_s: float = 60.0):
    """Join ``world_size`` processes (gloo) at ``127.0.0.1:port``, where rank 0 listens.

    Every process calls it with its own ``rank`` and the same ``world_size`` and ``port``.
    ``timeout_s`` bounds each wait: for the others to join, then every collective, so a
    process that died mid-step ends the others with an error instead of a hang.
    """
    world_size = check_int("start_process_group", "world_size", world_size, minimum=1)
    rank = check_int("start_process_group", "rank", rank, minimum=0)
    if rank >= world_size:
        raise ValueError(f"rank={rank} must be below world_size={world_size}: number the "
                         f"processes 0 .. {world_size - 1}, each once")
    port = check_int("start_process_group", "port", port, minimum=1)
    if port > 65535 or not timeout_s > 0:
        raise ValueError(f"port={port} must be at most 65535 and timeout_s={timeout_s} "
                         "positive: take free_port() and a few seconds")
    try:
        dist.init_process_group("gloo", init_method=f"tcp://{HOST}:{port}", rank=rank,
                                world_size=world_size, timeout=timedelta(seconds=timeout_s))
    except RuntimeError as err:  # torch's DistNetworkError, DistStoreError
        if "EADDRINUSE" in str(err) or "address already in use" in str(err).lower():
            raise RuntimeError(
                f"port {port} on {HOST} is already taken by another process, so rank 0 "
                "cannot listen there: choose a free one (free_port()) or end the process "
                "that holds it") from err
        raise RuntimeError(
            f"rank {rank} of {world_size} waited {timeout_s:g} s at {HOST}:{port} and not "
            f"every process joined: start all {world_size} processes with the same port "
            f"and world_size, ranks 0 .. {world_size - 1} each once, or raise timeout_s"
        ) from err


def world(caller: str) -> tuple[int, int]:
    """This process's rank and the number of processes, or an error saying how to start."""
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(
            f"{caller} needs a process group, and this process has none: call "
            "start_process_group(rank, world_size, port) (or "
            "torch.distributed.init_process_group) in every process first")
    return dist.get_rank(), dist.get_world_size()


@contextmanager
def collective(what: str) -> Iterator[None]:
    """Turn a failed collective into an error saying which, on which rank, what to do."""
    try:
        yield
    except RuntimeError as err:
        said = (str(err).strip() or type(err).__name__).splitlines()[0].split(". ")[0]
        raise RuntimeError(
            f"rank {dist.get_rank()} of {dist.get_world_size()}: {what} failed ({said}). "
            "If another process ended or stopped answering, end every process and start "
            "them all again from the last checkpoint (torchrun --max-restarts does it)"
        ) from err


def _flat_view(caller: str, tensor) -> Tensor:
    """``tensor`` as one flat view of its own memory, for a ring to work on in place."""
    if not isinstance(tensor, Tensor):
        raise ValueError(f"{caller} takes a torch.Tensor, got a {type(tensor).__name__}: "
                         "pass torch.as_tensor(values)")
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
    """
    ring_reduce_scatter(tensor)
    return ring_all_gather(tensor)


def check_same_model(module: nn.Module) -> None:
    """A ValueError on every rank when the ranks' models differ in names, shapes or dtypes.

    Each rank sends the others its list of (name, shape, dtype), so every rank sees the
    difference and stops with the same message, rather than waiting in a collective that
    the others never join.
    """
    _, world_size = world("check_same_model")
    tensors = itertools.chain(module.named_parameters(), module.named_buffers())
    mine = [(name, tuple(t.shape), str(t.dtype)) for name, t in tensors]
    everyone: list = [None] * world_size
    with collective("comparing the models' shapes"):
        dist.all_gather_object(everyone, mine)
    for other, theirs in enumerate(everyone):
        if theirs != everyone[0]:
            first, here = next((a, b) for a, b in itertools.zip_longest(everyone[0], theirs)
                               if a != b)
            raise ValueError(
                f"rank {other}'s model differs from rank 0's: {_entry(here)} on rank "
                f"{other}, {_entry(first)} on rank 0 (name, shape, dtype): every process "
                "must build the same model (the same GPTConfig) before it is wrapped")


def _entry(entry: tuple | None) -> str:
    return "nothing" if entry is None else " ".join(map(str, entry))


@dataclass
class _Bucket:
    """Gradients sent in one all-reduce: those of ``params``, side by side in ``flat``."""

    params: list[nn.Parameter]
    flat: Tensor  # (numel of params,)
    views: list[Tensor]  # each parameter's place in flat, in its shape
    ready: set[int] = field(default_factory=set)  # the params whose gradient is in flat
    work: dist.Work | None = None  # its all-reduce, once started


class DataParallel(nn.Module):
    """Data parallelism from scratch: the same model on every rank, gradients averaged.

    At construction the ranks check that their models match (``check_same_model``) and
    take rank 0's weights and buffers. Each rank then runs forward and backward on its own
    share of the batch; ``finish()``, once after each backward, leaves every rank the mean
    of the gradients, so with equal shares a step equals one process on the whole batch.

    ``bucket_bytes=None``: ``finish()`` all-reduces the gradients one parameter at a time.
    ``bucket_bytes=n``: the parameters are grouped in buckets of at most n bytes (a larger
    parameter alone), filled in reverse order, the order backward makes their gradients. A
    hook copies each gradient into its bucket once accumulated
    (``register_post_accumulate_grad_hook``) and a full bucket's all-reduce starts at once
    (``async_op=True``) while backward computes the rest; ``finish()`` waits for them and
    divides by N. Buckets start in order: every rank issues the same collectives in turn.

    A parameter with no gradient on a rank (unused by its batch) counts as zero there. Its
    bucket cannot fill during backward, so ``finish()`` starts every bucket not yet started:
    no rank waits for a gradient that never comes. Afterwards every parameter has a
    gradient, the mean (zero where no rank had one).
    """

    def __init__(self, module: nn.Module, bucket_bytes: int | None = 25 * 2**20):
        super().__init__()
        _, self.world_size = world("DataParallel")
        if not isinstance(module, nn.Module):
            raise ValueError(f"DataParallel wraps an nn.Module, got a "
                             f"{type(module).__name__}: pass the model")
        bucket_bytes = check_int("DataParallel", "bucket_bytes", bucket_bytes, minimum=1,
                                 optional=True)
        check_same_model(module)
        with torch.no_grad(), collective("broadcasting rank 0's weights"):
            for t in itertools.chain(module.parameters(), module.buffers()):
                dist.broadcast(t, src=0)
        self.module = module
        self.params = [p for p in module.parameters() if p.requires_grad]
        self.buckets: list[_Bucket] = []
        self._started = 0  # buckets whose all-reduce has started this step
        if bucket_bytes is not None:
            self._make_buckets(bucket_bytes)

    def _make_buckets(self, bucket_bytes: int) -> None:
        groups, size = [[]], 0
        for p in reversed(self.params):
            nbytes = p.numel() * p.element_size()
            if groups[-1] and size + nbytes > bucket_bytes:
                groups.append([])
                size = 0
            groups[-1].append(p)
            size += nbytes
        for group in groups:
            flat = torch.zeros(sum(p.numel() for p in group), dtype=group[0].dtype)
            pieces = flat.split([p.numel() for p in group])
            views = [piece.view_as(p) for piece, p in zip(pieces, group)]
            self.buckets.append(_Bucket(group, flat, views))
            for i, p in enumerate(group):
                hook = functools.partial(self._gradient_ready, self.buckets[-1], i)
                p.register_post_accumulate_grad_hook(hook)

    def forward(self, *args, **kwargs):
        """The wrapped model's forward, unchanged."""
        return self.module(*args, **kwargs)

    def _gradient_ready(self, bucket: _Bucket, i: int, param: nn.Parameter) -> None:
        if bucket.work is not None:
            raise RuntimeError("a gradient arrived after its bucket was sent: call "
                               "finish() after each backward (to accumulate, run one "
                               "backward on a larger batch)")
        bucket.views[i].copy_(param.grad)
        bucket.ready.add(i)
        self._start_full_buckets()

    def _start_full_buckets(self) -> None:
        while self._started < len(self.buckets):
            bucket = self.buckets[self._started]
            if len(bucket.ready) < len(bucket.params):
                return
            with collective(f"starting the all-reduce of gradient bucket {self._started}"):
                bucket.work = dist.all_reduce(bucket.flat, async_op=True)
            self._started += 1

    @torch.no_grad()
    def finish(self) -> None:
        """Average the gradients across ranks: each ``.grad`` becomes the mean."""
        if not self.buckets:
            for p in self.params:
                grad = p.grad if p.grad is not None else torch.zeros_like(p)
                with collective("the all-reduce of a gradient"):
                    dist.all_reduce(grad)
                p.grad = grad.div_(self.world_size)
            return
        for bucket in self.buckets[self._started:]:  # a gradient that never came is zero
            for i in set(range(len(bucket.params))) - bucket.ready:
                bucket.views[i].zero_()
            bucket.ready = set(range(len(bucket.params)))
        self._start_full_buckets()
        for k, bucket in enumerate(self.buckets):
            with collective(f"the all-reduce of gradient bucket {k}"):
                bucket.work.wait()
            bucket.flat.div_(self.world_size)
            for p, view in zip(bucket.params, bucket.views):
                p.grad = view.clone()
            bucket.ready, bucket.work = set(), None
        self._started = 0
