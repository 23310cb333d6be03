"""Where the time goes: each chapter's wall time and its cells over 10 s, and CI's phases.

1. The chapters: by default as their committed run recorded them (nbclient writes each cell's start
   and end into the notebook), at no cost; with ``--run``, executed now on this machine, top to
   bottom in a fresh kernel each, ``--threads`` threads (the model cache as it is: empty it, or set
   ``GPT_FROM_SCRATCH_CACHE`` to a new folder, to count the training of the book's models).
   Bars: 5 minutes for a training chapter (6, 7, 9, 12), 2 for the others, on 2 idle cores.
2. CI's phases, from ``.ci/run``'s own log (``--ci-log``, by default ``_build/ci.log`` when it is
   there): each phase's wall time and the minute of CI at which it ended.

    python -m benchmarks chapters                          # the committed runs, and CI's last log
    python -m benchmarks.bench_chapters --run 06 12        # run two chapters now
    python -m benchmarks.bench_chapters --run --threads 1  # every chapter, one thread
    python -m benchmarks.bench_chapters --ci-log ci.log    # a log saved from CI

Nothing here is compared with a fixed time: the numbers are this machine's, for a closing note.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

from gpt_from_scratch.book.timing import cell_seconds

ROOT = Path(__file__).resolve().parent.parent
TRAINING_CHAPTERS = ("06", "07", "09", "12")  # the 5-minute bar; 2 minutes for the others
LONG_CELL = 10.0  # seconds: cells at least this long are listed
PHASE = re.compile(r"^::: (?P<name>\S+) took (?P<seconds>\d+) s \(exit (?P<exit>\d+), "
                   r"(?P<minute>\d+) min into CI\)$", re.MULTILINE)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", nargs="*", metavar="CHAPTER",
                        help="execute these chapters now (numbers such as 06 or 1b; none: all)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads of --run (default: torch's)")
    parser.add_argument("--ci-log", type=Path, default=ROOT / "_build" / "ci.log", help="CI's log")
    args, _ = parser.parse_known_args(argv)  # `python -m benchmarks chapters` passes its own words
    if args.threads is not None and args.threads < 1:
        parser.error(f"--threads must be at least 1, got {args.threads}")
    return args


def chapters(numbers: list[str] | None = None) -> list[Path]:
    """The chapter notebooks, all or those whose names start with one of ``numbers``."""
    paths = sorted((ROOT / "notebooks").glob("*.ipynb"))
    if numbers:
        paths = [p for p in paths if any(p.name.startswith(f"{n.zfill(2)}_") for n in numbers)]
        if not paths:
            raise SystemExit(f"no chapter matches {' '.join(numbers)}: use numbers such as 06 or 1b")
    return paths


def long_cells(nb: dict) -> list[tuple[int, float, str]]:
    """(index, seconds, first line) of each code cell that recorded its times."""
    out = []
    for index, seconds in cell_seconds(nb).items():
        source = "".join(nb["cells"][index]["source"])
        first = next((line for line in source.splitlines() if line.strip()), "")
        out.append((index, seconds, first[:60]))
    return out


def executed(path: Path, threads: int | None) -> dict:
    """The notebook at ``path``, executed now in a fresh kernel from its own folder."""
    import nbclient
    import nbformat

    if threads is not None:
        os.environ["OMP_NUM_THREADS"] = str(threads)  # the kernel inherits it
    nb = nbformat.read(path, as_version=4)
    nbclient.NotebookClient(nb, timeout=3600, kernel_name="python3", record_timing=True,
                            resources={"metadata": {"path": str(path.parent)}}).execute()
    return json.loads(nbformat.writes(nb))


def chapter_table(paths: list[Path], run: bool, threads: int | None) -> None:
    source = f"run now, {threads or 'default'} thread(s)" if run else "the committed runs"
    print(f"chapters ({source}):")
    print(f"{'chapter':<30} {'minutes':>7} {'bar':>4}  cells over {LONG_CELL:.0f} s (index: seconds, first line)")
    total = 0.0
    for path in paths:
        nb = executed(path, threads) if run else json.loads(path.read_text(encoding="utf-8"))
        cells = long_cells(nb)
        seconds = sum(s for _, s, _ in cells)
        total += seconds
        bar = 5 if path.name[:2] in TRAINING_CHAPTERS else 2
        flag = " " if seconds <= 60 * bar else "!"
        print(f"{path.stem:<30} {seconds / 60:>7.1f} {bar:>3}{flag}")
        for index, s, first in cells:
            if s >= LONG_CELL:
                print(f"{'':<44}{index:>3}: {s:5.0f} s  {first}")
    print(f"{'all':<30} {total / 60:>7.1f}")


def ci_phases(log: Path) -> None:
    if not log.is_file():
        print(f"\nCI's phases: no log at {log} (bash .ci/run writes _build/ci.log)")
        return
    text = log.read_text(encoding="utf-8", errors="replace")
    phases = list(PHASE.finditer(text))
    print(f"\nCI's phases ({log}):")
    for m in phases:
        print(f"  {m['name']:<16} {int(m['seconds']) / 60:6.1f} min   exit {m['exit']}, ended at minute "
              f"{m['minute']}")
    end = re.search(r"^CI took (\d+) min", text, re.MULTILINE)
    print(f"  CI took {end[1]} min" if end else "  (the log has no closing line: CI did not finish)")


def main(argv=None) -> int:
    args = parse_args(argv)
    run = args.run is not None
    chapter_table(chapters(args.run), run, args.threads)
    ci_phases(args.ci_log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
