"""Chapter 15 — the timings each rank takes: collectives, training steps, NCCL.

Called by ``parallel_jobs`` inside a rank's process (never by hand): ``collectives``
times the book's ring against gloo's all-reduce and counts its bytes, ``speed`` times a
training step of one process against two, ``nccl`` times NCCL's all-reduce on GPUs
(FULL_RUN). Timings alternate between the things compared, so that a slow spell of the
machine falls on each alike.
"""

from __future__ import annotations

import statistics
import time
from contextlib import contextmanager
from datetime import timedelta

import torch
import torch.distributed as dist

from ..data_parallel import DataParallel
from ..model import GPT, GPTConfig
from ..parallel import ring_all_reduce


def model_of(setup: dict, seed_offset: int = 0) -> GPT:
    """The chapter's model, from ``setup``'s config and seed (plus ``seed_offset``)."""
    torch.manual_seed(setup["seed"] + seed_offset)
    return GPT(GPTConfig(**setup["config"]))


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
    tries, the ring's and gloo's in turn (a slow spell of the machine falls on both alike;
    other programs can only slow one down). ``repeats=0``: the bytes alone, untimed."""
    rows, g = [], torch.Generator().manual_seed(dist.get_rank())
    for n in sizes:
        x = torch.randn(n, generator=g)  # (n,)
        with counted_sends() as sent:
            ours = ring_all_reduce(x.clone())
        theirs = x.clone()
        dist.all_reduce(theirs)
        row = dict(numel=n, sent=sum(sent), difference=(ours - theirs).abs().max().item())
        seconds = {"ring": [], "gloo": []}
        for _ in range(repeats):
            for name, reduce in (("ring", ring_all_reduce), ("gloo", dist.all_reduce)):
                y = x.clone()
                dist.barrier()  # both ranks start together
                start = time.perf_counter()
                reduce(y)
                seconds[name].append(time.perf_counter() - start)
        rows.append(row | {name: min(times) for name, times in seconds.items() if times})
    return rows


def speed(rank: int, world_size: int, setup: dict) -> dict:
    """Seconds a step, ``rounds`` rounds of each kind in turn, the order reversed every
    other round (a slow spell of the machine falls on every kind alike), after one round
    untimed. "alone": rank 0 runs every rank's share one after the other, accumulating the
    gradients (the others wait); "together": each rank its own share, bucketed, the
    buckets sent during backward; "buckets after": the same buckets, all sent in
    ``finish()``; "per parameter": one all-reduce per parameter after backward.
    ``out[kind]``: a list per round of (forward and backward, the wait in ``finish()``,
    AdamW) per step; ``out["cpu"][kind]``: the forward and backward's CPU time, per step
    (this thread's: what it ran on a core; the rest of the wall time it waited for one);
    "alone shares" and "alone shares cpu": each share's forward and backward, alone;
    "messages": all-reduces a step; "all-reduces alone": the seconds of a step's
    all-reduces with nothing beside them."""
    batches, rounds = setup["speed_batches"], setup["rounds"]
    rows = batches[0][0].shape[0] // world_size
    shares = [slice(r * rows, (r + 1) * rows) for r in range(world_size)]
    models = {"alone": model_of(setup),
              "per parameter": DataParallel(model_of(setup), None),
              "buckets after": DataParallel(model_of(setup), setup["bucket_bytes"],
                                            overlap=False),
              "together": DataParallel(model_of(setup), setup["bucket_bytes"])}
    optimizers = {key: torch.optim.AdamW(m.parameters(), **setup["adamw"])
                  for key, m in models.items()}
    out = {key: [] for key in models} | {"alone shares": [], "alone shares cpu": [],
                                         "cpu": {key: [] for key in models}}
    for round_ in range(-1, rounds):  # round -1: untimed, AdamW makes its moments
        order = list(models) if round_ % 2 == 0 else list(models)[::-1]
        for key in order:
            model, optimizer, steps, cpu = models[key], optimizers[key], [], []
            dist.barrier()
            if key == "alone" and rank != 0:
                continue  # waits in the next barrier
            for x, y in batches:
                parts, cpus = [time.perf_counter()], [time.thread_time()]
                start, cpu_start = parts[0], cpus[0]
                for part in shares if key == "alone" else shares[rank:rank + 1]:
                    loss = model(x[part], y[part])[1]
                    (loss / world_size if key == "alone" else loss).backward()
                    parts.append(time.perf_counter())
                    cpus.append(time.thread_time())
                backward = time.perf_counter()
                cpu.append(time.thread_time() - cpu_start)
                if key != "alone":
                    model.finish()
                finished = time.perf_counter()
                optimizer.step()
                optimizer.zero_grad()
                steps.append((backward - start, finished - backward,
                              time.perf_counter() - finished))
                if key == "alone" and round_ >= 0:
                    out["alone shares"] += [b - a for a, b in zip(parts, parts[1:])]
                    out["alone shares cpu"] += [b - a for a, b in zip(cpus, cpus[1:])]
            if round_ >= 0:
                out[key].append(steps)
                out["cpu"][key] += cpu
    dist.barrier()
    out["messages"] = {"together": len(models["together"].buckets),
                       "per parameter": len(models["per parameter"].params)}
    out["all-reduces alone"] = _all_reduces_alone({
        "together": [b.flat for b in models["together"].buckets],
        "per parameter": models["per parameter"].params}, setup["repeats"])
    return out


def _all_reduces_alone(kinds: dict[str, list], repeats: int) -> dict[str, float]:
    """Seconds of each kind's all-reduces, one per tensor the shape of ``kinds[kind]``'s,
    between two barriers, with no backward beside them: the median of ``repeats``, the
    kinds in turn."""
    tensors = {kind: [torch.zeros_like(t) for t in ts] for kind, ts in kinds.items()}
    seconds = {kind: [] for kind in kinds}
    for _ in range(repeats):
        for kind, ts in tensors.items():
            dist.barrier()
            start = time.perf_counter()
            for t in ts:
                dist.all_reduce(t)
            seconds[kind].append(time.perf_counter() - start)
    return {kind: statistics.median(s) for kind, s in seconds.items()}


def nccl(rank: int, world_size: int, port: int, setup: dict) -> dict:
    """FULL_RUN on GPUs: the seconds of NCCL's all-reduce for each of ``gpu_sizes``, the
    mean of ``repeats`` calls run back to back after 3 untimed ones (the GPU queues them:
    one call's end cannot be timed alone without a synchronisation that costs more)."""
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
