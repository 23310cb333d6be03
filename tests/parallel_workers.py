"""One process of tests/test_parallel.py: python parallel_workers.py GROUP RANK N PORT OUT.

GROUP "pair" (N = 2) runs every parity check in one process group and saves what it
measured to OUT/pair-rank{RANK}.pt; GROUP "ring3" (N = 3) checks the ring, then rank 2
dies in the middle of a backward pass and ranks 0 and 1 save the error they got.
"""

from __future__ import annotations

import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn

from gpt_from_scratch.model import GPT, GPTConfig
from gpt_from_scratch.data_parallel import DataParallel
from gpt_from_scratch.parallel import ring_all_reduce, start_process_group
from gpt_from_scratch.sharding import ShardedAdamW, gathered_parameters, shard_model
from gpt_from_scratch.zero_bytes import state_bytes

CONFIG = dict(vocab_size=65, context_length=8, d_model=16, n_layers=2, n_heads=2,
              dropout=0.0)
B, T, STEPS = 2, 8, 3  # each rank's batch rows, sequence length, AdamW steps
ADAMW = dict(lr=1e-2, weight_decay=0.1)
BUCKET_BYTES = 2048  # small: the tiny GPT fills about a dozen buckets


def tiny_gpt(seed: int, **changes) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig(**(CONFIG | changes)))


def global_batches(world_size: int) -> list[torch.Tensor]:
    """The same batches on every rank: STEPS of (N * B, T + 1) token ids."""
    g = torch.Generator().manual_seed(1)
    shape = (world_size * B, T + 1)
    return [torch.randint(0, 65, shape, generator=g) for _ in range(STEPS)]


def run(model, optimizer, batches, rows, finish=lambda: None, after_backward=lambda: None,
        sharded=False):
    """STEPS of AdamW; returns the first step's gradients, flat, in the model's order."""
    grads = None
    for step, batch in enumerate(batches):
        part = batch[rows]
        _, loss = model(part[:, :-1], part[:, 1:])
        loss.backward()
        after_backward()
        finish()
        if step == 0 and not sharded:
            grads = torch.cat([p.grad.flatten() for p in model.parameters()])
        optimizer.step()
        if step < STEPS - 1:
            optimizer.zero_grad()  # the last step's gradients stay, to be counted
    return grads


def flat(params) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in params])


def held_bytes(params, optimizer) -> dict[str, int]:
    """Bytes of the tensors this rank holds: weights, gradients, optimizer state."""
    state = [t for s in optimizer.state.values() for t in s.values() if torch.is_tensor(t)]
    return dict(parameters=nbytes(params), gradients=nbytes(p.grad for p in params),
                optimizer=nbytes(state))


def nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def pair(rank: int, world_size: int) -> dict:
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel

    out, batches = {}, global_batches(world_size)
    mine = slice(rank * B, (rank + 1) * B)
    reference = tiny_gpt(0)  # one process, the whole batch
    optimizer = torch.optim.AdamW(reference.parameters(), **ADAMW)
    out["reference_grads"] = run(reference, optimizer, batches, slice(None))
    out["reference"] = flat(reference.parameters())

    for name, bucket_bytes, overlap in (("per_parameter", None, True),
                                        ("bucketed", BUCKET_BYTES, True),
                                        ("buckets_after", BUCKET_BYTES, False)):
        model = DataParallel(tiny_gpt(rank), bucket_bytes, overlap)  # rank 0's weights win
        optimizer = torch.optim.AdamW(model.parameters(), **ADAMW)
        started = []
        out[f"{name}_grads"] = run(model, optimizer, batches, mine, model.finish,
                                   lambda: started.append(model._started))
        out[name] = flat(model.parameters())
        out[f"{name}_buckets"] = (len(model.buckets), started[0])
        out[f"{name}_held"] = held_bytes(list(model.parameters()), optimizer)

    model = DistributedDataParallel(tiny_gpt(rank))
    optimizer = torch.optim.AdamW(model.parameters(), **ADAMW)
    out["ddp_grads"] = run(model, optimizer, batches, mine)
    out["ddp"] = flat(model.parameters())

    model = DataParallel(tiny_gpt(0), None)
    optimizer = ShardedAdamW(model.parameters(), **ADAMW)
    run(model, optimizer, batches, mine, model.finish)
    out["zero1"] = flat(model.parameters())
    out["zero1_held"] = held_bytes(list(model.parameters()), optimizer.local)
    model = DataParallel(tiny_gpt(0), None)
    optimizer = ZeroRedundancyOptimizer(model.parameters(), torch.optim.AdamW, **ADAMW)
    run(model, optimizer, batches, mine, model.finish)
    out["zero_redundancy"] = flat(model.parameters())

    model = shard_model(tiny_gpt(0))
    optimizer = torch.optim.AdamW(model.parameters(), **ADAMW)
    run(model, optimizer, batches, mine, sharded=True)
    names = [name for name, _ in tiny_gpt(0).named_parameters()]
    out["zero3"] = flat(gathered_parameters(model)[name] for name in names)
    out["zero3_held"] = held_bytes(list(model.parameters()), optimizer)
    out["fsdp2"] = fsdp2(batches, mine, names)

    out["expected_bytes"] = {
        scheme: vars(state_bytes(tiny_gpt(0), scheme, world_size, rank))
        for scheme in ("ddp", "zero1", "zero3")}
    out["unused"] = unused_parameters(rank)
    out["ring"] = ring_against_all_reduce(rank)
    try:
        DataParallel(tiny_gpt(0, vocab_size=65 + rank))
    except ValueError as err:
        out["mismatch"] = str(err)
    half_frozen = tiny_gpt(0)
    half_frozen.lm_head.weight.requires_grad_(rank == 0)  # tied: wte trains on rank 0 only
    out["frozen on one rank"] = error_of(lambda: DataParallel(half_frozen))
    out["odd"] = odd_inputs(rank)
    return out


def error_of(call) -> str:
    try:
        call()
    except (ValueError, RuntimeError) as err:
        return str(err)
    return "no error"


class Mixed(nn.Module):
    """A float32 and a float64 parameter: two buckets, each in its own dtype."""

    def __init__(self):
        super().__init__()
        self.a = nn.Parameter(torch.zeros(3))
        self.b = nn.Parameter(torch.zeros(2, dtype=torch.float64))

    def forward(self, scale: float):
        return self.a.double().sum() * scale + self.b.sum()


def odd_inputs(rank: int) -> dict:
    """A module wrapped twice, then unwrapped; mixed dtypes in buckets; gradients that are
    views of the buckets; a frozen parameter given to the sharded schemes."""
    out, model = {}, tiny_gpt(0)
    first = DataParallel(model, BUCKET_BYTES)
    out["twice"] = error_of(lambda: DataParallel(model, BUCKET_BYTES))
    out["wrapper"] = error_of(lambda: DataParallel(first))
    again = DataParallel(first.remove(), BUCKET_BYTES)  # allowed once the hooks are off
    ids = global_batches(2)[0][rank * B:(rank + 1) * B]
    again(ids[:, :-1], ids[:, 1:])[1].backward()
    again.finish()
    out["finish twice"] = error_of(again.finish)
    flats = {b.flat.untyped_storage().data_ptr() for b in again.buckets}
    out["views"] = all(p.grad.untyped_storage().data_ptr() in flats
                       for p in model.parameters())
    mixed = DataParallel(Mixed(), BUCKET_BYTES)
    mixed(scale=rank + 1.0).backward()
    mixed.finish()
    out["mixed"] = ([str(b.flat.dtype) for b in mixed.buckets], mixed.module.a.grad,
                    mixed.module.b.grad)
    frozen = tiny_gpt(0)
    frozen.blocks[0].ln_1.weight.requires_grad_(False)
    out["frozen zero1"] = error_of(lambda: ShardedAdamW(frozen.parameters()))
    out["frozen zero3"] = error_of(lambda: shard_model(frozen))
    return out


def fsdp2(batches, rows, names):
    """FSDP2: fully_shard on each block, then the model; or why this torch cannot."""
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:
        return f"torch {torch.__version__} has no public FSDP2 (torch.distributed.fsdp)"
    model = tiny_gpt(0)
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), **ADAMW)
    try:
        run(model, optimizer, batches, rows, sharded=True)
    except RuntimeError as err:  # FSDP2 before CPU support makes CUDA streams
        if "CUDA" not in str(err):
            raise
        return f"torch {torch.__version__}'s FSDP2 needs CUDA: {str(err).splitlines()[0]}"
    full = dict(model.named_parameters())
    return flat(full[name].full_tensor() for name in names)


class WithUnused(nn.Module):
    """A GPT with two more parameters: ``extra`` used on rank 0 only, ``never`` never."""

    def __init__(self):
        super().__init__()
        self.gpt = tiny_gpt(0)
        self.extra, self.never = nn.Parameter(torch.zeros(3)), nn.Parameter(torch.zeros(2))

    def forward(self, idx, targets, use_extra: bool):
        loss = self.gpt(idx, targets)[1]
        return loss + self.extra.sum() if use_extra else loss


def unused_parameters(rank: int) -> dict:
    out = {}
    for bucket_bytes in (None, BUCKET_BYTES):
        model = DataParallel(WithUnused(), bucket_bytes)
        ids = global_batches(2)[0][rank * B:(rank + 1) * B]
        start = time.perf_counter()
        model(ids[:, :-1], ids[:, 1:], use_extra=rank == 0).backward()
        model.finish()
        out[bucket_bytes] = dict(seconds=time.perf_counter() - start,
                                 extra=model.module.extra.grad,
                                 never=model.module.never.grad)
    return out


def ring_against_all_reduce(rank: int) -> dict:
    """For each shape: the ring's sum and its largest difference from dist.all_reduce;
    under "sent", how many numbers this rank sent in all."""
    out, sent, isend = {}, [], dist.isend
    dist.isend = lambda tensor, dst: sent.append(tensor.numel()) or isend(tensor, dst)
    g = torch.Generator().manual_seed(rank)
    for shape in ((1,), (2,), (7,), (10,), (3, 5)):
        for dtype in (torch.float32, torch.int64):
            x = torch.randn(shape, generator=g).mul(100).to(dtype)
            ours, theirs = ring_all_reduce(x.clone()), x.clone()
            dist.all_reduce(theirs)
            out[shape, dtype] = (ours, (ours - theirs).abs().max().item())
    dist.isend = isend
    out["sent"] = sum(sent)
    return out


def ring3(rank: int, world_size: int, out_dir: str) -> None:
    torch.save({"ring": ring_against_all_reduce(rank)}, f"{out_dir}/ring3-rank{rank}.pt")
    model = DataParallel(tiny_gpt(0), BUCKET_BYTES)
    if rank == 2:  # dies once backward reaches the first block: some buckets are in flight
        model.module.blocks[0].mlp.c_fc.weight.register_post_accumulate_grad_hook(
            lambda p: os._exit(17))
    ids = global_batches(world_size)[0][rank * B:(rank + 1) * B]
    start = time.perf_counter()
    try:
        model(ids[:, :-1], ids[:, 1:])[1].backward()
        model.finish()
        error = None
    except RuntimeError as err:
        error = str(err)
    killed = {"error": error, "seconds": time.perf_counter() - start}
    torch.save(killed, f"{out_dir}/killed-rank{rank}.pt")
    os._exit(0)  # the group is broken: leave without waiting for the dead rank


if __name__ == "__main__":
    group, out_dir = sys.argv[1], sys.argv[5]
    rank, world_size, port = map(int, sys.argv[2:5])
    start_process_group(rank, world_size, port, timeout_s=30 if group == "pair" else 10)
    if group == "ring3":
        ring3(rank, world_size, out_dir)
    results = pair(rank, world_size)
    torch.save(results, f"{out_dir}/pair-rank{rank}.pt")
    dist.barrier()  # no rank leaves while another still talks to it
    dist.destroy_process_group()
