"""Run every benchmark: ``python -m benchmarks [name ...]`` (names as in ``benchmarks/bench_<name>.py``)."""

import runpy
import sys
from pathlib import Path

here = Path(__file__).parent
names = sys.argv[1:] or sorted(p.stem.removeprefix("bench_") for p in here.glob("bench_*.py"))
for name in names:
    print(f"\n=== benchmarks/bench_{name}.py", flush=True)
    runpy.run_path(str(here / f"bench_{name}.py"), run_name="__main__")
