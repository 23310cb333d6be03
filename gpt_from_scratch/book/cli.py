"""Chapter 6 — the command line: ``python -m gpt_from_scratch.book.cli``, alone or under ``torchrun``.

    python -m gpt_from_scratch.book.cli --preset shakespeare-char --max-iters 2000 --out runs/char
    torchrun --standalone --nproc_per_node 2 -m gpt_from_scratch.book.cli --preset shakespeare-char
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time

import torch
import torch.distributed as dist
from torch.nn.utils import parameters_to_vector

from ..allocator import reuse_freed_memory
from ..checkpoint import load_checkpoint
from ..model import GPT, GPTConfig
from ..train import BEST_DIR, _world, train
from ..train_config import TrainConfig
from ..utils import default_device
from .recipes import RECIPES, load_data


def _parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m gpt_from_scratch.book.cli",
        description="Train a GPT on Tiny Shakespeare. Any TrainConfig or GPTConfig field can be overridden, "
                    "e.g. --max-iters 500 --lr 3e-4 --n-layers 2; the rest comes from the preset.")
    parser.add_argument("--preset", default="shakespeare-char", choices=sorted(RECIPES))
    parser.add_argument("--out", default=None, help="checkpoint folder (written at the end)")
    parser.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out")
    groups = {"train": parser.add_argument_group("training (TrainConfig fields)"),
              "model": parser.add_argument_group("model (GPTConfig fields)")}
    groups["train"].add_argument("--lr", "--learning-rate", dest="learning_rate", type=float, metavar="LR")
    fields = [(f.name, "train") for f in dataclasses.fields(TrainConfig) if f.name != "learning_rate"]
    # --precision fp32|bf16|fp16|auto, --compile true|false (default: true on a GPU), --keep-best true|false
    fields += [(name, "model") for name in RECIPES["shakespeare-char"].model]
    likes = dataclasses.asdict(TrainConfig()) | RECIPES["shakespeare-char"].model
    for name, kind in fields:
        groups[kind].add_argument("--" + name.replace("_", "-"), dest=name, metavar=name.upper(),
                                  type=_option_type(likes[name]))
    return parser.parse_args(argv)


def _convert(value: str, like):
    """Parse a command-line string as the type of ``like`` (an int when ``like`` is None)."""
    if isinstance(like, bool):
        if value.lower() not in {"true", "false", "1", "0"}:
            raise ValueError(f"expected true or false, got {value!r}")
        return value.lower() in {"true", "1"}
    return type(like)(value) if like is not None else int(value)


def _option_type(like):
    """argparse's ``type=`` for an option whose default is ``like``: a bad value becomes an error that
    argparse prints beside the option's name ("argument --max-iters: 'abc' is not a whole number")."""
    kind = ("true or false" if isinstance(like, bool) else "a number, e.g. 3e-4"
            if isinstance(like, float) else "a whole number, e.g. 500")

    def parse(value: str):
        try:
            return _convert(value, like)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not {kind}") from None

    return parse


def world_size() -> int:
    """How many processes ``torchrun`` started (1 without torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def distributed_setup(device: str | None, local_rank: int, local_world: int, gpus: int) -> tuple[str, str]:
    """``(backend, device)`` for one of ``local_world`` processes on a machine with ``gpus`` GPUs.

    One GPU per process (NCCL, ``cuda:<local rank>``) when there are enough; the CPU (gloo) when
    there is no GPU or ``--device cpu`` was asked for; otherwise a ValueError saying what to do.
    """
    if (device is not None and torch.device(device).type == "cpu") or (device is None and gpus == 0):
        return "gloo", "cpu"
    if device is not None and torch.device(device).type != "cuda":
        raise ValueError(f"--device {device} cannot be shared by several processes: use cuda or cpu")
    if local_world > gpus:
        raise ValueError(
            f"torchrun started {local_world} processes on this machine, which has {gpus} GPU(s): each "
            f"process needs a GPU of its own. Use --nproc_per_node {max(gpus, 1)}, or add --device cpu to "
            f"train on the CPU (gloo)"
        )
    return "nccl", f"cuda:{local_rank}"


def main(argv=None) -> None:
    """``python -m gpt_from_scratch.book.cli``: train a preset with overrides; see ``--help``."""
    args = _parse_args(argv)
    recipe = RECIPES[args.preset]
    defaults = TrainConfig(**recipe.train)
    train_kw, model_kw = dataclasses.asdict(defaults), dict(recipe.model)
    for name, value in vars(args).items():
        if value is None or name in {"preset", "out", "resume"}:
            continue
        target = train_kw if name in train_kw else model_kw
        target[name] = value  # parsed by _option_type
    if world_size() > 1:
        backend, train_kw["device"] = distributed_setup(
            args.device, int(os.environ.get("LOCAL_RANK", "0")),
            int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1"))),
            torch.cuda.device_count() if torch.cuda.is_available() else 0)
        dist.init_process_group(backend)
        if backend == "nccl":
            torch.cuda.set_device(train_kw["device"])
    elif args.device is None:
        train_kw["device"] = default_device()  # the command line uses a GPU when there is one
    if args.compile is None and torch.device(train_kw["device"]).type == "cuda":
        train_kw["compile"] = True  # the fastest setting on a GPU (precision "auto" picks bf16 or fp16 there)
    rank, world = _world()
    cfg = TrainConfig(**train_kw)
    train_ids, val_ids, _ = load_data(recipe.data)
    reuse_freed_memory()  # this process is ours: big freed blocks serve the next step (Chapter 7)
    torch.manual_seed(cfg.seed)  # the same initial weights on every process
    model = GPT(GPTConfig(**model_kw))
    done_before = load_checkpoint(args.out).step if args.resume and args.out else 0
    start = time.perf_counter()
    history = train(model, train_ids, val_ids, cfg, out_dir=args.out, resume=args.resume)
    seconds = time.perf_counter() - start
    if world > 1:  # every process must end with rank 0's weights
        weights = parameters_to_vector(model.parameters()).detach()  # (P,) this process's
        sent = weights.clone()
        dist.broadcast(sent, src=0)  # rank 0's, on every process
        agree = torch.tensor(int(torch.equal(sent, weights)), device=cfg.device)
        dist.all_reduce(agree, op=dist.ReduceOp.MIN)
        if rank == 0:
            print(f"{world} processes, weights identical on every rank: {bool(agree.item())}")
        dist.barrier()  # no process leaves while another still talks to it
        # `sent` and `agree` outlive the next line: a gloo thread may drop its reference to
        # them after the call returned, and were it the last, freeing them would need the
        # GIL, which destroy_process_group holds while it waits for that thread (a hang,
        # torch 2.4).
        dist.destroy_process_group()
    if rank == 0:
        print(f"{args.preset}: {model.num_parameters():,} parameters on {cfg.device}")
        for step, train_loss, val_loss in zip(history.eval_step, history.train_loss, history.val_loss):
            print(f"step {step:6d}: train loss {train_loss:.4f}, val loss {val_loss:.4f}")
        print(history.summary(os.path.join(args.out, BEST_DIR) if args.out else None))
        tokens = (cfg.max_iters - done_before) * cfg.batch_size * (cfg.block_size or model.config.context_length)
        print(f"{seconds:.1f} s, {tokens * world / seconds:,.0f} tokens/s" + (f"; checkpoint in {args.out}" if args.out else ""))


if __name__ == "__main__":
    main()
