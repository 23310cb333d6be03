"""Chapter 15 — what each rank runs: ``python -m gpt_from_scratch.book.parallel_jobs ...``.

Started by ``parallel_runs`` (never by hand): ``JOB RANK N PORT FOLDER`` for the jobs that
``launch`` starts, ``train FOLDER RUN STEPS EVERY KILL_AT`` for the one torchrun starts
(which gives it its rank, world size and meeting point in the environment). Each reads its
settings from ``FOLDER/setup.pt``, written by the chapter, and saves what it measured to
``FOLDER/JOB-rankR.pt``:

- ``pair`` (2 ranks): the collectives timed and their bytes counted; the same steps of
  one process, of ``DataParallel`` (per parameter and bucketed), of PyTorch's
  ``DistributedDataParallel``, of ZeRO-1 and ZeRO-3, and of ranks that never average;
  the bytes each scheme keeps; and the time of a step, alone and in pairs;
- ``four`` (4 ranks): the ring's bytes, DDP's gradients and each scheme's memory at N =
  4, then the last rank is killed in the middle of a backward pass and the others keep
  the error they got;
- ``train``: the book's ``train`` under torchrun, checkpointing, one rank killed once;
- ``meet``: the ranks join and leave, for the launcher's tests.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from ..checkpoint_folder import META_FILE, read_meta
from ..data_parallel import DataParallel
from ..model import GPT
from ..parallel import start_process_group
from ..sharding import ShardedAdamW, gathered_parameters, shard_model
from ..zero_bytes import state_bytes
from ..train import train
from ..train_config import TrainConfig
from .parallel_timing import collectives, model_of, nccl, speed


def flat(tensors) -> torch.Tensor:
    return torch.cat([t.detach().reshape(-1) for t in tensors])


def nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def held(params, optimizer) -> dict[str, int]:
    """Bytes of the tensors this rank holds: weights, gradients, optimizer state."""
    state = [t for s in optimizer.state.values() for t in s.values() if torch.is_tensor(t)]
    return dict(parameters=nbytes(params), gradients=nbytes(p.grad for p in params),
                optimizer=nbytes(state))


def run_steps(model, optimizer, batches, rows, finish=lambda: None) -> torch.Tensor:
    """AdamW steps on ``rows`` of each batch; the first step's gradients, flat, in the
    model's order (gathered from the shards under ZeRO-3). The last step's gradients
    stay, to be counted."""
    grads = None
    for k, (x, y) in enumerate(batches):
        _, loss = model(x[rows], y[rows])
        loss.backward()
        finish()
        if k == 0:
            grads = (sharded_grads(model) if hasattr(model, "shard_pieces")
                     else flat(p.grad for p in model.parameters()))
        optimizer.step()
        if k < len(batches) - 1:
            optimizer.zero_grad()
    return grads


def sharded_grads(model) -> torch.Tensor:
    """A ``shard_model``'s mean gradients, every shard's gathered, flat in the order of the
    model's parameters before sharding (a collective: every rank calls it)."""
    grads, world_size = {}, dist.get_world_size()
    for prefix, unit in model.named_modules():
        if "flat_shard" in unit._parameters:
            shards = [torch.empty_like(unit.flat_shard) for _ in range(world_size)]
            dist.all_gather(shards, unit.flat_shard.grad)
            full = torch.cat(shards)
            for piece in unit.shard_pieces:
                for name in piece.names:
                    name = f"{prefix}.{name}" if prefix else name
                    grads[name] = full[piece.offset : piece.offset + piece.shape.numel()]
    with torch.device("meta"):  # the names alone: no memory
        names = [name for name, _ in GPT(model.config).named_parameters()]
    return torch.cat([grads[name] for name in names])


RUNS = ("one process", "never averaged", "per parameter", "bucketed", "DDP", "ZeRO-1",
        "ZeRO-3")


def _run(name: str, rank: int, world_size: int, setup: dict):
    """The model, optimizer and ``finish`` of one way to take the steps."""
    adamw = setup["adamw"]
    seed_offset = rank if name in ("per parameter", "bucketed") else 0
    model = model_of(setup, seed_offset)  # different weights on each rank: rank 0's win
    if name in ("per parameter", "bucketed", "ZeRO-1"):
        model = DataParallel(model, setup["bucket_bytes"] if name == "bucketed" else None)
    elif name == "DDP":
        model = torch.nn.parallel.DistributedDataParallel(model)
    elif name == "ZeRO-3":
        model = shard_model(model)
    optimizer = (ShardedAdamW if name == "ZeRO-1" else torch.optim.AdamW)(
        model.parameters(), **adamw)
    return model, optimizer, getattr(model, "finish", lambda: None)


def equivalence(rank: int, world_size: int, setup: dict, runs=RUNS) -> dict:
    """The same steps taken each way of ``runs``: the first step's gradients, the weights
    each ends with (flat), the bytes it holds, and ``state_bytes``' formula."""
    rows = setup["batches"][0][0].shape[0] // world_size
    mine = slice(rank * rows, (rank + 1) * rows)
    out, names = {}, [name for name, _ in model_of(setup).named_parameters()]
    for name in runs:
        model, optimizer, finish = _run(name, rank, world_size, setup)
        started = []
        out[f"{name}_grads"] = run_steps(
            model, optimizer, setup["batches"],
            slice(None) if name == "one process" else mine,
            lambda: (started.append(getattr(model, "_started", 0)), finish()))
        params = (gathered_parameters(model) if hasattr(model, "shard_pieces")
                  else dict(getattr(model, "module", model).named_parameters()))
        out[name] = flat(params[n] for n in names)
        out[f"{name}_held"] = held(list(model.parameters()),
                                   getattr(optimizer, "local", None) or optimizer)
        buckets = getattr(model, "buckets", ())
        out[f"{name}_buckets"] = (len(buckets), started[0])
        out[f"{name}_bucket_bytes"] = sum(b.flat.numel() * b.flat.element_size()
                                          for b in buckets)
    out["formula"] = {s: vars(state_bytes(model_of(setup), s, world_size, rank))
                      for s in ("ddp", "zero1", "zero3")}
    return out


def pair(rank: int, world_size: int, setup: dict, folder: Path) -> dict:
    return dict(collectives=collectives(setup["sizes"], setup["repeats"]),
                **equivalence(rank, world_size, setup),
                speed=speed(rank, world_size, setup))


def four(rank: int, world_size: int, setup: dict, folder: Path) -> dict:
    """The ring's bytes (untimed: 4 processes would share fewer cores), DDP against the
    book's gradients and each scheme's memory at N = 4; then the last rank dies mid-step."""
    out = dict(collectives=collectives(setup["sizes"][:2], 0),  # 4 ranks: bytes, no times
               **equivalence(rank, world_size, setup | {"batches": setup["batches"][:1]},
                             ("per parameter", "DDP", "ZeRO-1", "ZeRO-3")))
    torch.save(out, folder / f"four-rank{rank}.pt")
    model = DataParallel(model_of(setup), setup["bucket_bytes"])
    if rank == world_size - 1:  # killed once backward reaches the first block
        model.module.blocks[0].mlp.c_fc.weight.register_post_accumulate_grad_hook(
            lambda p: os.kill(os.getpid(), signal.SIGKILL))
    x, y = setup["batches"][0]
    rows = x.shape[0] // world_size
    mine = slice(rank * rows, (rank + 1) * rows)
    start, error = time.perf_counter(), None
    try:
        model(x[mine], y[mine])[1].backward()
        model.finish()
    except RuntimeError as err:
        error = str(err)
    out["lost"] = dict(error=error, seconds=time.perf_counter() - start)
    torch.save(out, folder / f"four-rank{rank}.pt")
    sys.stdout.flush()
    os._exit(0)  # the group is broken: leave without waiting for the dead rank


def meet(rank: int, world_size: int, setup: dict, folder: Path) -> dict:
    """The ranks join, exchange their ranks and leave (tests/test_parallel_runs.py)."""
    ranks = [None] * world_size
    dist.all_gather_object(ranks, rank)
    return {"ranks": ranks}


JOBS = {"pair": pair, "four": four, "meet": meet}


def train_job(folder: Path, run: str, steps: str, every: str, kill_at: str) -> None:
    """The book's ``train`` under torchrun, resuming from ``FOLDER/RUN``'s checkpoint when
    there is one; rank 1 is killed at its ``kill_at``-th training step, on the first try."""
    rank, restart = int(os.environ["RANK"]), int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    (folder / "pids" / f"{run}-{rank}-{restart}.pid").write_text(str(os.getpid()))  # first:
    dist.init_process_group("gloo")  # a rank stuck here is found and ended all the same
    setup = torch.load(folder / "setup.pt", weights_only=False)
    out_dir = folder / run
    resume = (out_dir / META_FILE).is_file()
    resumed_from = read_meta(out_dir)["step"] if resume else None
    model = model_of(setup)
    if int(kill_at) and rank == 1 and restart == 0:
        calls = []

        def kill(module, args):
            calls.extend([None] if module.training else [])
            if len(calls) == int(kill_at):
                os.kill(os.getpid(), signal.SIGKILL)
        model.register_forward_pre_hook(kill)
    train_ids, val_ids = (np.load(folder / f"{split}.npy") for split in ("train", "val"))
    cfg = TrainConfig(**setup["train"], max_iters=int(steps),
                      checkpoint_interval=int(every))
    history = train(model, train_ids, val_ids, cfg, out_dir, resume=resume)
    if rank == 0:
        torch.save(dict(weights=flat(model.parameters()), losses=history.loss,
                        restart=restart, world_size=dist.get_world_size(),
                        resumed_from=resumed_from), folder / f"{run}.pt")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    if sys.argv[1] == "train":
        train_job(Path(sys.argv[2]), *sys.argv[3:])
        sys.exit(0)
    job, rank, world_size, port, folder = sys.argv[1:]
    rank, world_size, setup = int(rank), int(world_size), torch.load(
        Path(folder) / "setup.pt", weights_only=False)
    if job == "nccl":
        results = nccl(rank, world_size, int(port), setup)
    else:
        start_process_group(rank, world_size, int(port), timeout_s=60)
        results = JOBS[job](rank, world_size, setup, Path(folder))
    torch.save(results, Path(folder) / f"{job}-rank{rank}.pt")
    dist.barrier()  # no rank leaves while another still talks to it
    dist.destroy_process_group()
