"""Checkers for the exercises of Chapter 15 (training on many devices):
``check_ring_all_reduce``, ``check_zero1``, ``check_data_parallel_step``.

The ranks of the first two are threads of one process (``ranks._World``), each running the
candidate with its own ``rank``, talking through ``send``/``recv`` or ``all_gather`` as
processes would through ``torch.distributed``; the checks read how they talked too.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import torch
from torch import nn

from ..model import GPT, GPTConfig
from .core import _Case, _call, _compare_values, _generator, _Mismatch, _require_tensor
from .core import _run_cases
from .ranks import _World, _neighbours_only, _optimizers, _optimizers_built, _tensors

__all__ = ["check_ring_all_reduce", "check_zero1", "check_data_parallel_step"]


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
            _check_ring_sends(world.sent, n, N)
            for rank in range(N):
                received = sum(1 for r, _ in world.recvs if r == rank)
                if received != 2 * (N - 1):
                    raise _Mismatch(f"rank {rank} received {received} message"
                                    f"{'s' if received != 1 else ''}; a ring of {N} "
                                    f"receives 2(N - 1) = {2 * (N - 1)}",
                                    hint="receive one chunk in each step of the "
                                         "reduce-scatter and of the all-gather")
            _neighbours_only(world, N)
            for rank, result in enumerate(got[1:], 1):
                if not torch.equal(result, got[0]):
                    gap = (result - got[0]).abs().max().item()
                    raise _Mismatch(f"rank {rank}'s sum differs from rank 0's by up to "
                                    f"{gap:.1e}: every rank must end with the same bits",
                                    hint="sum each chunk once, on the rank that finishes "
                                         "it, then pass the finished chunk round the ring "
                                         "as it is: copy it, never add it again")
        return run

    cases = [_Case(label, make(*spec), "tensor is a (n,) float tensor; rank and world_size "
                                       "ints; send(t, to) and recv(t, source) functions")
             for label, *spec in specs]
    return _run_cases("check_ring_all_reduce", cases)


def _ring_sends(n: int, N: int, ends: tuple[int, ...]) -> list[int]:
    """The numbers each rank of a ring sends when rank r ends the reduce-scatter with the
    sum of chunk ``ends[r]``: every chunk but that one in the reduce-scatter, and in the
    all-gather every chunk but the one it receives last, the next rank's."""
    chunks = [c.numel() for c in torch.empty(n).tensor_split(N)]
    return [2 * n - chunks[ends[r]] - chunks[ends[(r + 1) % N]] for r in range(N)]


def _check_ring_sends(sent: list[int], n: int, N: int) -> None:
    """A _Mismatch unless the ranks sent what a ring sends, for some chunk each rank ends
    the reduce-scatter with: section 15.2's (chunk r on rank r), the common textbook's
    (chunk r + 1 on rank r), or any other."""
    if any(sent == _ring_sends(n, N, ends) for ends in itertools.permutations(range(N))):
        return
    book = _ring_sends(n, N, tuple(range(N)))
    rank = next(r for r in range(N) if sent[r] != book[r])
    raise _Mismatch(f"rank {rank} sent {sent[rank]} numbers; section 15.2's ring (chunk "
                    f"r's sum ends on rank r) sends {book[rank]} from rank {rank}, any "
                    f"ring 2n less the chunks this rank and the next end with: "
                    f"2(N - 1)/N of the {n}, {2 * (N - 1) * n / N:g}, on average",
                    hint="send one chunk a step, 2(N - 1) steps in all, never the whole "
                         "tensor: the ranks share nothing but their messages")


def _check_kept(zero, weights: torch.Tensor, rank: int, chunk: int) -> None:
    """A _Mismatch when a rank keeps more than ZeRO-1 allows: AdamW's state for its own
    chunk (two moments and a step count), and besides the weights at most a chunk's copy,
    its gradient and that state."""
    own = weights.untyped_storage().data_ptr()
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() // t.itemsize
                for t in _tensors(zero) if t.untyped_storage().data_ptr() != own}
    for numbers in storages.values():  # a view keeps all of its storage alive
        if numbers > chunk:
            raise _Mismatch(f"rank {rank} keeps a tensor whose memory holds {numbers} "
                            f"numbers besides the weights; a chunk is {chunk}",
                            hint="keep your own chunk only, as a copy: a slice of a "
                                 "larger tensor (tensor_split without clone()) keeps the "
                                 "whole of it alive")
    states = [st for opt in _optimizers(zero) for st in opt.state.values()]
    state = sum(t.numel() for st in states for t in st.values() if torch.is_tensor(t))
    if state > 2 * chunk + len(states):
        raise _Mismatch(f"rank {rank}'s optimizers keep {state} numbers of state; AdamW on "
                        f"one chunk of {chunk} keeps 2 x {chunk} and a step count",
                        hint="one optimizer over this rank's chunk alone: ZeRO-1 keeps no "
                             "moments for the other ranks' chunks")
    total = sum(storages.values())
    if total > 4 * chunk + 8:
        raise _Mismatch(f"rank {rank} keeps {total} numbers besides the weights; its "
                        f"chunk, the chunk's gradient and AdamW's two moments are 4 x "
                        f"{chunk}",
                        hint="keep one chunk and its optimizer; leave every other chunk to "
                             "its rank")


def _check_built(built: list[torch.optim.Optimizer], chunk: int) -> None:
    """A _Mismatch when an optimizer built during the steps holds more than a chunk, kept
    where the other checks cannot see it or not."""
    for optimizer in built:
        held = sum(p.numel() for group in optimizer.param_groups for p in group["params"])
        if held > chunk:
            raise _Mismatch(f"an optimizer built during the steps holds {held} numbers; a "
                            f"rank's chunk is {chunk}",
                            hint="give AdamW your own chunk only: ZeRO-1 keeps no moments "
                                 "for the other ranks' chunks")


def _check_gathers(world: _World, rank: int, counts: list[int], expected: list) -> None:
    """One ``all_gather`` a step, given this rank's chunk just stepped (``expected``)."""
    for step, (count, chunk) in enumerate(zip(counts, expected), 1):
        calls = count - (counts[step - 2] if step > 1 else 0)
        if calls != 1:
            raise _Mismatch(f"rank {rank} called all_gather {calls} times in step {step}; "
                            "ZeRO-1 calls it once a step",
                            hint="after stepping your chunk, write torch.cat(all_gather("
                                 "chunk)) into weights: each rank updates only its chunk")
        given = world.gathered[rank][count - 1]
        if given.shape != chunk.shape or not torch.allclose(given, chunk, 1e-5, 1e-5):
            raise _Mismatch(f"rank {rank} gave all_gather a tensor of shape "
                            f"{tuple(given.shape)} in step {step}; its chunk, just stepped,"
                            f" is {tuple(chunk.shape)}",
                            hint="give all_gather this rank's updated chunk only: "
                                 "weights.tensor_split(world_size)[rank], after AdamW")


def check_zero1(candidate) -> bool:
    """Check a class ``ZeRO1(weights, rank, world_size, **adamw)`` with ``step(grad,
    all_gather)``: AdamW on the rank's chunk only, then every chunk gathered into weights,
    one ``all_gather`` a step of the rank's chunk; after each step every rank's weights
    equal AdamW's on the whole vector, and no rank keeps another's optimizer state."""
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
            after = []  # the whole vector after each step
            for grad in grads:
                reference.grad = grad.clone()
                optimizer.step()
                after.append(reference.detach().clone())
            world = _World(N)
            weights = [start.clone() for _ in range(N)]
            counts: list[list[int]] = [[] for _ in range(N)]

            def rank_body(rank):
                zero = candidate(weights[rank], rank, N, **adamw)
                for grad in grads:
                    zero.step(grad.clone(), world.all_gather(rank))
                    counts[rank].append(len(world.gathered[rank]))
                return zero
            with _optimizers_built() as built:
                ranks = world.run(rank_body)
            _check_built(built, math.ceil(P / N))
            for rank, zero in enumerate(ranks):
                _compare_values(weights[rank], reference.detach(), atol=1e-5, rtol=1e-5,
                                known_mistakes=[(start, "step() must change weights in "
                                                        "place: weights.copy_(...)")],
                                default_hint="step your chunk with AdamW, then write "
                                             "torch.cat(all_gather(chunk)) into weights",
                                what=f"rank {rank}'s weights after 3 steps")
                _check_kept(zero, weights[rank], rank, math.ceil(P / N))
                _check_gathers(world, rank, counts[rank],
                               [w.tensor_split(N)[rank] for w in after])
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


def _record_rows(replicas) -> list[list[torch.Tensor]]:
    """Each replica's inputs, forward by forward (a hook on each; idx given by position or
    by name)."""
    seen: list[list[torch.Tensor]] = [[] for _ in replicas]

    def recorder(r: int):
        def hook(module, args, kwargs):
            idx = args[0] if args else kwargs.get("idx")
            if isinstance(idx, torch.Tensor):
                seen[r].append(idx.detach().clone())
        return hook
    for r, replica in enumerate(replicas):
        replica.register_forward_pre_hook(recorder(r), with_kwargs=True)
    return seen


def _check_rows(seen: list[list[torch.Tensor]], x: torch.Tensor, step: int) -> None:
    """Replica r's forwards saw every row from r * B/N to (r + 1) * B/N of ``x``, and no
    other (a second forward of the same rows, to print the loss, is allowed)."""
    N, B = len(seen), x.shape[0]
    for r, inputs in enumerate(seen):
        share = x[r * B // N:(r + 1) * B // N]
        got = torch.cat(inputs) if inputs else x[:0]
        if {tuple(row) for row in got.tolist()} != {tuple(row) for row in share.tolist()}:
            what = ("the whole batch" if torch.equal(got, x) else
                    f"{got.shape[0]} rows" if got.shape[0] != share.shape[0] else
                    "other rows")
            raise _Mismatch(f"in step {step}, replica {r}'s forward received {what}; its "
                            f"share is rows {r * B // N} to {(r + 1) * B // N - 1} of the "
                            f"{B}, {B // N} rows",
                            hint="replica r computes its loss on x[r * B // N:(r + 1) * B "
                                 "// N] alone, as process r would: the batch is split, "
                                 "then the gradients averaged")
        inputs.clear()


def check_data_parallel_step(candidate) -> bool:
    """Check ``data_parallel_step(replicas, optimizers, x, y)``: replica r's forward sees
    only its share of the rows, and after 3 steps every replica equals one model trained
    on the whole batch (the gradients averaged), all replicas alike."""
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
            seen = _record_rows(replicas)
            stepped = [0] * N
            for r, opt in enumerate(optimizers):
                opt.register_step_post_hook(
                    lambda *_, r=r: stepped.__setitem__(r, stepped[r] + 1))
            for step, batch in enumerate(batches, 1):
                _call(candidate, replicas, optimizers, batch[:, :-1], batch[:, 1:])
                _check_rows(seen, batch[:, :-1], step)
                for r, count in enumerate(stepped):
                    if count != step:
                        raise _Mismatch(f"after step {step}, optimizer {r} has stepped "
                                        f"{count} times",
                                        hint="every process steps its own optimizer once "
                                             "a step: no process copies another's weights")
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
