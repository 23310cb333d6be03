"""Training on a busy machine: one step of Chapter 6's character model while other programs keep
every core busy, with torch imported before the package and after it.

Each run is a fresh process that trains the ``shakespeare-char`` model (4 layers, 128 dims, batch
12 x 64) for ``--steps`` steps with ``train`` and reports the median step, first on quiet cores,
then with ``--busy`` processes per core spinning beside it. Bar: busy within 4x of quiet, in
every run, whatever the import order (torch imported first gets OpenMP threads that spin while
they wait, which the package cannot change once torch is loaded; ``train`` then takes the cores
that are free, see ``utils.free_threads``).

    python -m benchmarks busy                         # 3 runs of each order, one busy process a core
    python -m benchmarks.bench_busy --runs 5 --busy 1.5
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys

from benchmarks import count

MIN_STEPS = 6  # the median of CHILD leaves out its first 4 steps and its last
CHILD = """
import json, sys, time
if sys.argv[1] == "torch-first":
    import torch
import gpt_from_scratch
import torch
from gpt_from_scratch.book.recipes import RECIPES, char_level_data
from gpt_from_scratch.model import GPT, GPTConfig
from gpt_from_scratch.train import train
from gpt_from_scratch.train_config import TrainConfig

steps = int(sys.argv[2])
train_ids, val_ids, _ = char_level_data()
recipe = RECIPES["shakespeare-char"]
torch.manual_seed(0)
model = GPT(GPTConfig(**recipe.model))
times, used = [], set()
class Timed(torch.nn.Module):  # the model, with the wall time of each training step's forward pass
    def __init__(self, inner):
        super().__init__()
        self.inner, self.config = inner, inner.config
    def forward(self, x, y):
        times.append(time.perf_counter())
        used.add(torch.get_num_threads())
        return self.inner(x, y)
cfg = TrainConfig(**(recipe.train | dict(max_iters=steps, eval_interval=10 * steps, eval_iters=1)),
                  progress=False)
train(Timed(model), train_ids, val_ids, cfg)
steps = [b - a for a, b in zip(times[1:], times[2:])][5:-2]  # between forward passes: whole steps
print(json.dumps({"median_ms": 1000 * statistics.median(steps), "threads": max(used)}))
"""


def spin() -> None:
    while True:
        pass


def one_run(order: str, steps: int) -> dict:
    out = subprocess.run([sys.executable, "-c", "import statistics\n" + CHILD, order, str(steps)],
                         capture_output=True, text=True, check=True, env=os.environ.copy())
    return json.loads(out.stdout.strip().splitlines()[-1])


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=count, default=3,
                        help="runs of each order (default 3)")
    parser.add_argument("--steps", type=count, default=60,
                        help=f"training steps a run, at least {MIN_STEPS} (default 60)")
    parser.add_argument("--busy", type=float, default=1.0, help="busy processes per core (default 1)")
    args = parser.parse_args(argv)
    if args.steps < MIN_STEPS:
        parser.error(f"argument --steps: {args.steps} must be at least {MIN_STEPS}: a "
                     "run's median leaves out its first 4 steps (warm-up) and its last "
                     "(evaluation)")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    n_busy = max(1, round(args.busy * cores))
    print(f"{cores} cores; busy runs beside {n_busy} spinning process(es); {args.steps} steps a run")
    print(f"{'order':<14} {'quiet ms':>9} {'busy ms (each run)':>30} {'worst':>7}  threads busy")
    worst_all = 0.0
    for order in ("package-first", "torch-first"):
        quiet = statistics.median(one_run(order, args.steps)["median_ms"] for _ in range(2))
        busy = []
        spinners = [multiprocessing.Process(target=spin, daemon=True) for _ in range(n_busy)]
        for p in spinners:
            p.start()
        try:
            busy = [one_run(order, args.steps) for _ in range(args.runs)]
        finally:
            for p in spinners:
                p.terminate()
        worst = max(r["median_ms"] for r in busy) / quiet
        worst_all = max(worst_all, worst)
        each = " ".join(f"{r['median_ms']:.0f}" for r in busy)
        print(f"{order:<14} {quiet:>9.1f} {each:>30} {worst:>6.1f}x  "
              f"{' '.join(str(r['threads']) for r in busy)}")
    print(f"worst busy step / quiet step: {worst_all:.1f}x (bar: 4x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
