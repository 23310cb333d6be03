"""Chapter 15 — data parallelism from scratch: one model everywhere, gradients averaged.

Each of N processes holds the whole model and trains on its own share of the batch;
averaging the gradients keeps the weights the same in every process. ``DataParallel``
does it with the collectives of ``parallel``: one all-reduce per parameter after the
backward pass, or in buckets sent during it, as ``DistributedDataParallel`` does.
``check_same_model`` stops every rank with one message when their models differ.
``tests/test_parallel.py`` proves both equal to PyTorch's DDP and to one process.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import Tensor, nn

from .parallel import collective, world
from .utils import check_int

MARK = "_data_parallel_wrapped"  # set on a module while a DataParallel wraps it


def check_same_model(module: nn.Module) -> None:
    """A ValueError on every rank when the ranks' models differ in names, shapes, dtypes or
    which parameters train.

    Each rank sends the others its list of (name, shape, dtype, trains), so every rank sees
    the difference and stops with the same message, rather than waiting in a collective
    that the others never join.
    """
    _, world_size = world("check_same_model")
    tensors = itertools.chain(module.named_parameters(), module.named_buffers())
    mine = [(name, tuple(t.shape), str(t.dtype), "trains" if t.requires_grad else "frozen")
            for name, t in tensors]
    everyone: list = [None] * world_size
    with collective("comparing the models' shapes"):
        dist.all_gather_object(everyone, mine)
    for other, theirs in enumerate(everyone):
        if theirs != everyone[0]:
            first, here = next((a, b) for a, b in itertools.zip_longest(everyone[0], theirs)
                               if a != b)
            raise ValueError(
                f"rank {other}'s model differs from rank 0's: {_entry(here)} on rank "
                f"{other}, {_entry(first)} on rank 0 (name, shape, dtype, trains): every "
                "process must build the same model (the same GPTConfig, the same frozen "
                "parameters) before it is wrapped")


def _entry(entry: tuple | None) -> str:
    return "nothing" if entry is None else " ".join(map(str, entry))


@dataclass
class _Bucket:
    """Gradients sent in one all-reduce: those of ``params``, side by side in ``flat``."""

    params: list[nn.Parameter]
    flat: Tensor  # (numel of params,), on the parameters' device, in their dtype
    views: list[Tensor]  # each parameter's place in flat, in its shape
    ready: set[int] = field(default_factory=set)  # the params whose gradient is in flat
    work: dist.Work | None = None  # its all-reduce, once started


def _check_unwrapped(module) -> None:
    if isinstance(module, DataParallel):
        raise ValueError("this module is a DataParallel already: use it as it is, or wrap "
                         "its .module again after calling its remove()")
    if not isinstance(module, nn.Module):
        raise ValueError(f"DataParallel wraps an nn.Module, got a {type(module).__name__}: "
                         "pass the model")
    if any(getattr(m, MARK, False) for m in module.modules()):
        raise ValueError(
            f"this {type(module).__name__} (or a part of it) is wrapped by a DataParallel "
            "already (a cell run twice?): both wrappers' gradient hooks would fire. Keep "
            "using the first wrapper, or call its remove() before wrapping again")


class DataParallel(nn.Module):
    """Data parallelism from scratch: the same model on every rank, gradients averaged.

    At construction the ranks check that their models match (``check_same_model``) and
    take rank 0's weights and buffers. Each rank then runs forward and backward on its own
    share of the batch; ``finish()``, once after each backward, leaves every rank the mean
    of the gradients, so with equal shares a step equals one process on the whole batch.

    ``bucket_bytes=None``: ``finish()`` all-reduces the gradients one parameter at a time.
    ``bucket_bytes=n``: the parameters are grouped in buckets of at most n bytes (a larger
    parameter alone; a new bucket where the dtype or device changes), filled in reverse
    order, the order backward makes their gradients. A hook copies each gradient into its
    bucket once accumulated (``register_post_accumulate_grad_hook``) and a full bucket's
    all-reduce starts at once (``async_op=True``) while backward computes the rest;
    ``finish()`` waits for them and divides by N. Buckets start in order: every rank
    issues the same collectives in turn. ``overlap=False`` keeps the buckets and starts
    them all in ``finish()``, after backward: the same messages without the overlap, so
    that section 15.7 can time each apart.

    Memory: the buckets are a second copy of the gradients, kept from step to step, 4
    bytes a float32 parameter, as ``DistributedDataParallel``'s are by default
    (``gradient_as_bucket_view=False``). After ``finish()`` each ``.grad`` is a view of its
    bucket (as with ``gradient_as_bucket_view=True``): ``zero_grad(set_to_none=False)``
    keeps it so, and backward then accumulates into the buckets themselves; with
    ``set_to_none=True`` (the default) the next backward makes new gradients beside them.

    A parameter with no gradient on a rank (unused by its batch) counts as zero there. Its
    bucket cannot fill during backward, so ``finish()`` starts every bucket not yet started:
    no rank waits for a gradient that never comes. Afterwards every parameter has a
    gradient, the mean (zero where no rank had one). ``remove()`` takes the hooks off and
    returns the module, which can then be wrapped again.
    """

    def __init__(self, module: nn.Module, bucket_bytes: int | None = 25 * 2**20,
                 overlap: bool = True):
        super().__init__()
        if not isinstance(overlap, bool):
            raise ValueError(f"DataParallel: overlap={overlap!r} must be True (buckets "
                             "sent during backward) or False (all sent in finish())")
        _check_unwrapped(module)
        _, self.world_size = world("DataParallel")
        bucket_bytes = check_int("DataParallel", "bucket_bytes", bucket_bytes, minimum=1,
                                 optional=True)
        check_same_model(module)
        with torch.no_grad(), collective("broadcasting rank 0's weights"):
            for t in itertools.chain(module.parameters(), module.buffers()):
                dist.broadcast(t, src=0)
        self.module = module
        self.params = [p for p in module.parameters() if p.requires_grad]
        self.buckets: list[_Bucket] = []
        self._hooks: list = []  # the gradient hooks' handles, for remove()
        self._started = 0  # buckets whose all-reduce has started this step
        self._finished = False  # finish() ran, and no gradient has arrived since
        self.overlap = overlap  # start full buckets during backward, or only in finish()
        if bucket_bytes is not None:
            self._make_buckets(bucket_bytes)
        object.__setattr__(module, MARK, True)

    def _make_buckets(self, bucket_bytes: int) -> None:
        groups, size = [[]], 0
        for p in reversed(self.params):
            nbytes = p.numel() * p.element_size()
            last = groups[-1][-1] if groups[-1] else None
            if last is not None and (size + nbytes > bucket_bytes or (
                    last.dtype, last.device) != (p.dtype, p.device)):
                groups.append([])
                size = 0
            groups[-1].append(p)
            size += nbytes
        for group in groups if groups[0] else []:
            flat = torch.zeros(sum(p.numel() for p in group), dtype=group[0].dtype,
                               device=group[0].device)
            pieces = flat.split([p.numel() for p in group])
            views = [piece.view_as(p) for piece, p in zip(pieces, group)]
            self.buckets.append(_Bucket(group, flat, views))
            for i, p in enumerate(group):
                hook = functools.partial(self._gradient_ready, self.buckets[-1], i)
                self._hooks.append(p.register_post_accumulate_grad_hook(hook))

    def forward(self, *args, **kwargs):
        """The wrapped model's forward, unchanged."""
        return self.module(*args, **kwargs)

    def remove(self) -> nn.Module:
        """Take the gradient hooks off the wrapped module and return it, unwrapped."""
        for handle in self._hooks:
            handle.remove()
        self._hooks, self.buckets = [], []
        self.module.__dict__.pop(MARK, None)
        return self.module

    def _gradient_ready(self, bucket: _Bucket, i: int, param: nn.Parameter) -> None:
        self._finished = False
        if bucket.work is not None:
            raise RuntimeError("a gradient arrived after its bucket was sent: call "
                               "finish() after each backward (to accumulate, run one "
                               "backward on a larger batch)")
        bucket.views[i].copy_(param.grad)  # nothing to copy once .grad is the view
        bucket.ready.add(i)
        if self.overlap:
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
        """Average the gradients across ranks: each ``.grad`` becomes the mean. With
        buckets, once after each backward: a second call would zero the means (its buckets
        would count as never filled), so it is refused."""
        if not self.buckets:
            for p in self.params:
                grad = p.grad if p.grad is not None else torch.zeros_like(p)
                with collective("the all-reduce of a gradient"):
                    dist.all_reduce(grad)
                p.grad = grad.div_(self.world_size)
            return
        if self._finished:
            raise RuntimeError("DataParallel.finish() called twice with no backward "
                               "between: the gradients are averaged already; call "
                               "finish() once after each backward")
        self._finished = True
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
                p.grad = view  # no copy: the bucket is the gradient
            bucket.ready, bucket.work = set(), None
        self._started = 0
