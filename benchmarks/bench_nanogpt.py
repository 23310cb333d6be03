"""Our training against nanoGPT's, side by side on the same machine (issue 21).

nanoGPT is a folder of scripts, not a package: pass ``--nanogpt`` a clone of
github.com/karpathy/nanoGPT (or set ``NANOGPT``); without one this benchmark says so and stops.

1. The step, in one process: our ``GPT`` and nanoGPT's ``GPT`` (its ``model.py``), built in nanoGPT's
   Shakespeare-char shape with its defaults (no biases, exact GELU): on the CPU its CPU recipe (4 layers,
   4 heads, 128 dims, block 64, batch 12, dropout 0), on a GPU its GPU recipe (6 layers, 6 heads, 384 dims,
   block 256, batch 64, dropout 0.2). Each gets the optimizer its trainer builds (our ``make_optimizer``,
   nanoGPT's ``configure_optimizers``: AdamW, fused on a GPU), and both take nanoGPT's ``train.py`` step:
   forward under autocast, backward, clipping at 1.0, the optimizer step, ``zero_grad``; our model's
   token-id checks off, as ``train`` runs it (it checks the batches on the host). Timed in
   alternating rounds (the GPU synchronised around each round): fp32 and fp32 + ``torch.compile`` on the
   CPU; fp32 (TF32), bf16 autocast and bf16 + ``torch.compile`` on a GPU. Bar: ours / nanoGPT >= 1.0 in
   every setting.
2. The compiled graph: how many kernels Inductor generates for one forward and backward pass of
   each model (fp32, and bf16 autocast), and how many IR nodes it fused into them. Equal counts
   mean the compiled step does the same work, so a gap in part 1 lies outside the model.
3. The whole run, as two programs: nanoGPT's ``train.py`` in a temporary copy of the clone (its own
   ``prepare.py`` on the shared Tiny Shakespeare), and the book's ``train`` with the same recipe: the
   README's CPU command for ``--iters`` steps on the CPU, ``config/train_shakespeare_char.py`` as it is
   (5,000 steps, bf16, compile) on a GPU. Wall time and best and final validation loss of each.

    python -m benchmarks nanogpt --nanogpt=../nanoGPT                 # CPU: about five minutes on 2 cores
    python -m benchmarks nanogpt --nanogpt=../nanoGPT --device cuda   # the table of issue 21
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks import count

NANOGPT_CPU = dict(n_layer=4, n_head=4, n_embd=128, block_size=64, batch_size=12, dropout=0.0)  # its README
NANOGPT_GPU = dict(n_layer=6, n_head=6, n_embd=384, block_size=256, batch_size=64, dropout=0.2)  # its config


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nanogpt", default=os.environ.get("NANOGPT"), help="a clone of nanoGPT")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="cpu (default) or cuda")
    parser.add_argument("--steps", type=count, default=20,
                        help="timed steps per model and round (default 20)")
    parser.add_argument("--rounds", type=count, default=10,
                        help="alternating timing rounds (default 10)")
    parser.add_argument("--iters", type=count, default=2000,
                        help="steps of the CPU runs (default 2000)")
    parser.add_argument("--only", choices=["step", "graph", "run"], help="run one part only")
    return parser.parse_args(argv)


def nanogpt_module(folder: Path):
    """nanoGPT's ``model.py``, imported from the clone under another name (ours is ``model`` too)."""
    spec = importlib.util.spec_from_file_location("nanogpt_model", folder / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def both_models(folder: Path, shape: dict, device: str):
    """Ours and nanoGPT's, same shape, each with its trainer's optimizer: {name: (model, optimizer)}."""
    from gpt_from_scratch.model import GPT, GPTConfig
    from gpt_from_scratch.train_config import TrainConfig, make_optimizer

    nano = nanogpt_module(folder)
    cfg = TrainConfig(device=device)  # its defaults are nanoGPT's Shakespeare-char settings
    torch.manual_seed(0)
    ours = GPT(GPTConfig(vocab_size=65, context_length=shape["block_size"], d_model=shape["n_embd"],
                         n_layers=shape["n_layer"], n_heads=shape["n_head"], dropout=shape["dropout"],
                         bias=False, activation="gelu")).to(device).train()
    ours.check_token_ids = False  # as in train(), which checks each batch on the host instead
    with contextlib.redirect_stdout(io.StringIO()):
        theirs = nano.GPT(nano.GPTConfig(vocab_size=65, bias=False, **{k: shape[k] for k in (
            "n_layer", "n_head", "n_embd", "block_size", "dropout")})).to(device).train()
    if ours.num_parameters() != theirs.get_num_params(non_embedding=False):
        raise AssertionError(f"the two models differ in size: {ours.num_parameters():,} vs "
                             f"{theirs.get_num_params(non_embedding=False):,} parameters")
    with contextlib.redirect_stdout(io.StringIO()):  # its parameter counts and optimizer choice
        their_opt = theirs.configure_optimizers(cfg.weight_decay, cfg.learning_rate, (cfg.beta1, cfg.beta2),
                                                torch.device(device).type)
    return {"ours": (ours, make_optimizer(ours, cfg)), "nanoGPT": (theirs, their_opt)}


def step_run(folder: Path, device: str, steps: int, rounds: int) -> dict[str, float]:
    """Part 1: the median step time of each model in each setting, and the ratios."""
    from gpt_from_scratch.book.recipes import char_level_data
    from gpt_from_scratch.book.timing import synchronize
    from gpt_from_scratch.data import get_batch
    from gpt_from_scratch.precision import autocast, resolve_precision

    shape = NANOGPT_GPU if device == "cuda" else NANOGPT_CPU
    B, T = shape["batch_size"], shape["block_size"]
    half = resolve_precision("auto", device)  # on a GPU bf16, or fp16 where bf16 is only emulated
    settings = [("fp32", False), (half, False), (half, True)] if device == "cuda" else [
        ("fp32", False), ("fp32", True)]
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True  # as nanoGPT
    where = torch.cuda.get_device_name() if device == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    print(f"one training step, ours and nanoGPT's ({folder}), batch {B} x block {T}, "
          f"{shape['n_layer']} layers, {shape['n_embd']} dims, dropout {shape['dropout']}; {where}")
    x, y = get_batch(char_level_data()[0], B, T, torch.Generator().manual_seed(1), device)
    ratios = {}
    for precision, compiled in settings:
        steppers = {}
        for name, (model, optimizer) in both_models(folder, shape, device).items():
            net = torch.compile(model) if compiled else model

            def step(net=net, model=model, optimizer=optimizer):  # nanoGPT's train.py, one micro-step
                with autocast(precision, device):
                    _, loss = net(x, y)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)

            for _ in range(5 if compiled else 3):  # warm-up (and compilation)
                step()
            steppers[name] = step
        times = {name: [] for name in steppers}
        for _ in range(rounds):  # alternate, so that a busy moment of the machine hits both
            for name, step in steppers.items():
                synchronize(device)
                t0 = time.perf_counter()
                for _ in range(steps):
                    step()
                synchronize(device)
                times[name].append((time.perf_counter() - t0) / steps)
        ours, theirs = (statistics.median(times[name]) for name in ("ours", "nanoGPT"))
        label = precision + (" + compile" if compiled else "")
        ratios[label] = theirs / ours
        print(f"  {label:16s} ours {1000 * ours:7.2f} ms, nanoGPT {1000 * theirs:7.2f} ms: ours "
              f"{ratios[label]:.2f}x nanoGPT's speed (bar >= 1.0: "
              f"{'met' if ratios[label] >= 1.0 else 'NOT met'})")
    return ratios


def graph_counts(folder: Path, device: str) -> dict[str, dict[str, int]]:
    """Part 2: Inductor's kernels (and IR nodes before fusion) for one compiled forward and backward
    pass of each model, in fp32 and under bf16 autocast (fp16 on a GPU that only emulates bf16):
    {setting: {name: kernels}}."""
    import torch._inductor.metrics as inductor

    from gpt_from_scratch.precision import autocast, resolve_precision

    shape = dict(NANOGPT_GPU if device == "cuda" else NANOGPT_CPU, batch_size=2)  # counts: any B
    x, y = (torch.randint(0, 65, (2, shape["block_size"]), device=device) for _ in range(2))
    print(f"Inductor's kernels for one compiled forward + backward, {shape['n_layer']} layers, "
          f"{shape['n_embd']} dims, block {shape['block_size']}, on {device}:")
    counts = {}
    half = resolve_precision("auto", device) if device == "cuda" else "bf16"
    for precision in ("fp32", half):
        counts[precision] = {}
        for name, (model, _) in both_models(folder, shape, device).items():
            torch._dynamo.reset()
            inductor.reset()
            with autocast(precision, device):
                _, loss = torch.compile(model)(x, y)
            loss.backward()
            counts[precision][name] = inductor.generated_kernel_count
            print(f"  {precision} {name:8s} {inductor.generated_kernel_count:4d} kernels "
                  f"({inductor.ir_nodes_pre_fusion} IR nodes before fusion)")
    return counts


def nanogpt_run(folder: Path, device: str, iters: int) -> tuple[float, float, float]:
    """Part 3, nanoGPT's side: its train.py on its prepared Shakespeare-char; (seconds, best, final val)."""
    from gpt_from_scratch.data import tiny_shakespeare_path

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name in ("train.py", "model.py", "configurator.py"):
            shutil.copy(folder / name, work / name)
        shutil.copytree(folder / "config", work / "config")
        data = work / "data" / "shakespeare_char"
        data.mkdir(parents=True)
        shutil.copy(folder / "data" / "shakespeare_char" / "prepare.py", data / "prepare.py")
        shutil.copy(tiny_shakespeare_path(), data / "input.txt")  # its prepare.py downloads only when missing
        subprocess.run([sys.executable, "prepare.py"], cwd=data, check=True, capture_output=True)
        args = ["config/train_shakespeare_char.py", f"--out_dir={work / 'out'}"]
        if device == "cpu":  # the command of nanoGPT's README for a CPU
            args += ["--device=cpu", "--compile=False", "--dtype=float32", "--eval_iters=20",
                     f"--max_iters={iters}", f"--lr_decay_iters={iters}"]
            args += [f"--{k}={v}" for k, v in NANOGPT_CPU.items()]
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "train.py", *args], cwd=work, capture_output=True, text=True)
        seconds = time.perf_counter() - t0
    if done.returncode:
        raise RuntimeError(f"nanoGPT's train.py failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    val = [float(v) for v in re.findall(r"^step \d+: train loss [\d.]+, val loss ([\d.]+)", done.stdout, re.M)]
    return seconds, min(val), val[-1]


def ours_run(device: str, iters: int) -> tuple[float, float, float]:
    """Part 3, our side: the book's ``train`` with the same recipe; (seconds, best, final val)."""
    from gpt_from_scratch.book.recipes import RECIPES, char_level_data
    from gpt_from_scratch.model import GPT, GPTConfig
    from gpt_from_scratch.train import train
    from gpt_from_scratch.train_config import TrainConfig

    name = "shakespeare-char-full" if device == "cuda" else "shakespeare-char"
    recipe = RECIPES[name]
    overrides = dict(device=device, progress=False) | (
        dict(compile=True) if device == "cuda" else dict(max_iters=iters))
    train_ids, val_ids, _ = char_level_data()
    torch.manual_seed(1337)
    model = GPT(GPTConfig(**recipe.model | dict(bias=False, activation="gelu")))  # nanoGPT's defaults
    t0 = time.perf_counter()
    history = train(model, train_ids, val_ids, TrainConfig(**recipe.train | overrides))
    return time.perf_counter() - t0, history.best_val_loss, history.final_val_loss


def main(argv=None) -> None:
    args = parse_args(argv)
    if not args.nanogpt:
        print("skipped: pass --nanogpt=PATH, a clone of github.com/karpathy/nanoGPT (or set NANOGPT)")
        return
    folder = Path(args.nanogpt).resolve()
    if not (folder / "model.py").is_file() or not (folder / "train.py").is_file():
        raise SystemExit(f"--nanogpt={args.nanogpt} has no model.py and train.py: give a clone of nanoGPT")
    print(f"torch {torch.__version__}")
    if args.only in (None, "step"):
        step_run(folder, args.device, args.steps, args.rounds)
    if args.only in (None, "graph"):
        graph_counts(folder, args.device)
    if args.only in (None, "run"):
        what = "config/train_shakespeare_char.py" if args.device == "cuda" else f"CPU recipe, {args.iters} steps"
        print(f"the whole run, nanoGPT's network in both, each trainer with its own loop ({what}):")
        runs = {"nanoGPT train.py": lambda: nanogpt_run(folder, args.device, args.iters),
                "ours train()": lambda: ours_run(args.device, args.iters)}
        for name, run in runs.items():
            seconds, best, final = run()
            print(f"  {name:17s} {seconds:6.0f} s, best val loss {best:.4f}, final {final:.4f}")
        print("  the losses differ by the batches each loop draws (ours: from per-step seeds, so that a "
              "resumed run is exact);\n  `python -m benchmarks.bench_train --only replay` trains ours on "
              "nanoGPT's batches, in its order")


if __name__ == "__main__":
    main()
