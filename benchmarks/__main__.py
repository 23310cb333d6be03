"""Run every benchmark: ``python -m benchmarks [name ...] [--device cuda]`` (names as in ``benchmarks/bench_<name>.py``).

``--device cuda`` runs the training and generation benchmarks on the GPU (mixed precision, torch.compile,
CUDA graphs, ours against transformers in the same process); the default is the CPU.
``--nanogpt=PATH`` (a clone of nanoGPT) lets ``bench_nanogpt`` time nanoGPT's training beside ours.
"""

import argparse
import runpy
from pathlib import Path

here = Path(__file__).parent
parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
parser.add_argument("names", nargs="*", help="benchmarks to run (default: all)")
parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where train and generate run")
parser.add_argument("--nanogpt", help="a clone of nanoGPT, for bench_nanogpt (default: $NANOGPT)")
args, _ = parser.parse_known_args()
names = args.names or sorted(p.stem.removeprefix("bench_") for p in here.glob("bench_*.py"))
for name in names:
    print(f"\n=== benchmarks/bench_{name}.py", flush=True)
    runpy.run_path(str(here / f"bench_{name}.py"), run_name="__main__")
