"""Chapter 15 — what each rank runs: ``python -m gpt_from_scratch.book.parallel_jobs ...``.

Started by ``parallel_runs`` (never by hand): ``JOB RANK N PORT FOLDER`` for the jobs that
``launch`` starts, ``train FOLDER RUN STEPS EVERY KILL_AT`` for the one torchrun starts
(which gives it its rank, world size and meeting point in the environment). Each reads its
settings from ``FOLDER/setup.pt``, written by the chapter, and saves what it measured to
``FOLDER/JOB-rankR.pt``:

- ``pair`` (2 ranks): the collectives timed and their bytes counted; five steps of
  one process, of ``DataParallel`` (per parameter and bucketed), of PyTorch's
  ``DistributedDataParallel``, of ZeRO-1 and ZeRO-3, and of ranks that never average;
  the bytes each scheme keeps; and the time of a step, alone and in pairs;
- ``four`` (4 ranks): the ring's bytes and each scheme's memory at N = 4, then the last
  rank is killed in the middle of a backward pass and the others keep the error they got;
- ``train``: the book's ``train`` under torchrun, checkpointing, one rank killed once.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from ..checkpoint_folder import META_FILE, read_meta
from ..model import GPT, GPTConfig
from ..parallel import DataParallel, ring_all_reduce, start_process_group
from ..sharding import ShardedAdamW, gathered_parameters, shard_model, state_bytes
from ..train import train
from ..train_config import TrainConfig


@contextmanager
def counted_sends():
    """Inside the block, the bytes of every tensor sent with ``dist.isend``, listed."""
    sent, isend = [], dist.isend

    def counting(tensor, dst, *args, **kwargs):
        sent.append(tensor.numel() * tensor.element_size())
        return isend(tensor, dst, *args, **kwargs)

    dist.isend = counting
    try:
        yield sent
    finally:
        dist.isend = isend


def collectives(sizes: list[int], repeats: int) -> list[dict]:
    """Per size (float32 numbers): bytes the ring sends from this rank, its largest
    difference from gloo's all-reduce, and the fewest seconds each took in ``repeats``
    tries (other programs on the machine can only slow one down)."""
    rows, g = [], torch.Generator().manual_seed(dist.get_rank())
    for n in sizes:
        x = torch.randn(n, generator=g)  # (n,)
        with counted_sends() as sent:
            ours = ring_all_reduce(x.clone())
        theirs = x.clone()
        dist.all_reduce(theirs)
        row = dict(numel=n, sent=sum(sent), difference=(ours - theirs).abs().max().item())
        for name, reduce in (("ring", ring_all_reduce), ("gloo", dist.all_reduce)):
            seconds = []
            for _ in range(repeats):
                y = x.clone()
                dist.barrier()  # both ranks start together
                start = time.perf_counter()
                reduce(y)
                seconds.append(time.perf_counter() - start)
            row[name] = min(seconds)
        rows.append(row)
    return rows


def flat(tensors) -> torch.Tensor:
    return torch.cat([t.detach().reshape(-1) for t in tensors])


def nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def held(params, optimizer) -> dict[str, int]:
    """Bytes of the tensors this rank holds: weights, gradients, optimizer state."""
    state = [t for s in optimizer.state.values() for t in s.values() if torch.is_tensor(t)]
    return dict(parameters=nbytes(params), gradients=nbytes(p.grad for p in params),
                optimizer=nbytes(state))


def run_steps(model, optimizer, batches, rows, finish=lambda: None) -> torch.Tensor | None:
    """AdamW steps on ``rows`` of each batch; the first step's gradients, flat (None when
    sharded). The last step's gradients stay, to be counted."""
    grads = None
    for k, (x, y) in enumerate(batches):
        _, loss = model(x[rows], y[rows])
        loss.backward()
        finish()
        if k == 0 and not hasattr(model, "shard_pieces"):
            grads = flat(p.grad for p in model.parameters())
        optimizer.step()
        if k < len(batches) - 1:
            optimizer.zero_grad()
    return grads


def _model(setup: dict, seed_offset: int = 0) -> GPT:
    torch.manual_seed(setup["seed"] + seed_offset)
    return GPT(GPTConfig(**setup["config"]))


RUNS = ("one process", "never averaged", "per parameter", "bucketed", "DDP", "ZeRO-1",
        "ZeRO-3")


def _run(name: str, rank: int, world_size: int, setup: dict):
    """The model, optimizer and ``finish`` of one way to take the steps."""
    adamw = setup["adamw"]
    seed_offset = rank if name in ("per parameter", "bucketed") else 0
    model = _model(setup, seed_offset)  # different weights on each rank: rank 0's win
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
    out, names = {}, [name for name, _ in _model(setup).named_parameters()]
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
        out[f"{name}_buckets"] = (len(getattr(model, "buckets", ())), started[0])
    out["formula"] = {s: vars(state_bytes(_model(setup), s, world_size, rank))
                      for s in ("ddp", "zero1", "zero3")}
    return out


def speed(rank: int, world_size: int, setup: dict) -> dict:
    """Seconds a step, in alternating rounds. "alone": rank 0 runs every rank's share one
    after the other, accumulating the gradients (the others wait); "together": each rank
    its own share, bucketed; "per parameter": the same, one all-reduce per parameter after
    backward. Each step: (forward and backward, the wait in ``finish()``, AdamW)."""
    batches, rounds = setup["speed_batches"], setup["rounds"]
    rows = batches[0][0].shape[0] // world_size
    shares = [slice(r * rows, (r + 1) * rows) for r in range(world_size)]
    models = {"alone": _model(setup), "per parameter": DataParallel(_model(setup), None),
              "together": DataParallel(_model(setup), setup["bucket_bytes"])}
    out = {key: [] for key in models}
    for _ in range(rounds):
        for key, model in models.items():
            optimizer = torch.optim.AdamW(model.parameters(), **setup["adamw"])
            dist.barrier()
            if key == "alone" and rank != 0:
                continue  # waits in the next barrier
            for x, y in batches:
                start = time.perf_counter()
                for part in shares if key == "alone" else shares[rank:rank + 1]:
                    loss = model(x[part], y[part])[1]
                    (loss / world_size if key == "alone" else loss).backward()
                backward = time.perf_counter()
                if key != "alone":
                    model.finish()
                finished = time.perf_counter()
                optimizer.step()
                optimizer.zero_grad()
                end = time.perf_counter()
                out[key].append((backward - start, finished - backward, end - finished))
    dist.barrier()
    return out


def pair(rank: int, world_size: int, setup: dict, folder: Path) -> dict:
    return dict(collectives=collectives(setup["sizes"], setup["repeats"]),
                **equivalence(rank, world_size, setup),
                speed=speed(rank, world_size, setup))


def four(rank: int, world_size: int, setup: dict, folder: Path) -> dict:
    """The ring's bytes, each scheme's memory at N = 4; then the last rank dies mid-step."""
    out = dict(collectives=collectives(setup["sizes"][:1], 1),
               **equivalence(rank, world_size, setup | {"batches": setup["batches"][:1]},
                             ("per parameter", "ZeRO-1", "ZeRO-3")))
    torch.save(out, folder / f"four-rank{rank}.pt")
    model = DataParallel(_model(setup), setup["bucket_bytes"])
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


def nccl(rank: int, world_size: int, port: int, setup: dict) -> dict:
    """FULL_RUN on GPUs: the seconds of NCCL's all-reduce for each of ``gpu_sizes``."""
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world_size, timeout=timedelta(seconds=120))
    rows = []
    for n in setup["gpu_sizes"]:
        x = torch.zeros(n, device="cuda")  # zeros: the sums stay finite
        for _ in range(3):  # NCCL sets up its rings on the first calls
            dist.all_reduce(x)
        torch.cuda.synchronize()
        dist.barrier(device_ids=[rank])
        start = time.perf_counter()
        for _ in range(setup["repeats"]):
            dist.all_reduce(x)
        torch.cuda.synchronize()  # the GPU runs asynchronously: wait for it
        rows.append(dict(numel=n, seconds=(time.perf_counter() - start) / setup["repeats"]))
    return {"nccl": rows}


def train_job(folder: Path, run: str, steps: str, every: str, kill_at: str) -> None:
    """The book's ``train`` under torchrun, resuming from ``FOLDER/RUN``'s checkpoint when
    there is one; rank 1 is killed at its ``kill_at``-th training step, on the first try."""
    dist.init_process_group("gloo")
    rank, restart = dist.get_rank(), int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    (folder / "pids" / f"{run}-{rank}-{restart}.pid").write_text(str(os.getpid()))
    setup = torch.load(folder / "setup.pt", weights_only=False)
    out_dir = folder / run
    resume = (out_dir / META_FILE).is_file()
    resumed_from = read_meta(out_dir)["step"] if resume else None
    model = _model(setup)
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
        results = {"pair": pair, "four": four}[job](rank, world_size, setup, Path(folder))
    torch.save(results, Path(folder) / f"{job}-rank{rank}.pt")
    dist.barrier()  # no rank leaves while another still talks to it
    dist.destroy_process_group()
