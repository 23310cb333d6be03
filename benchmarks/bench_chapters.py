"""Where the time goes: each chapter's wall time and its cells over 10 s, each chapter's share of
``make test`` against its budget, and CI's phases.

1. The chapters: by default as their committed run recorded them (nbclient writes each cell's start
   and end into the notebook), at no cost; with ``--run``, executed now on this machine, top to
   bottom in a fresh kernel each, ``--threads`` threads (the model cache as it is: empty it, or set
   ``GPT_FROM_SCRATCH_CACHE`` to a new folder, to count the training of the book's models).
   Bars: 5 minutes for a training chapter (6, 7, 9, 12), 2 for the others, on 2 idle cores.
2. Each chapter's share of ``make test`` and of CI, from the last runs' own records: its cells
   under nbval (``_build/nbval.xml``; ``make test-arithmetic``'s ``_build/nbval-avx2.xml``) and
   the models it is first to need, trained by ``scripts/book_models.py`` (CPU seconds, from
   ``_build/book-models.json`` and ``_build/book-models-avx2.json``; none when a run read them
   from the model cache). The budget is a chapter's share of ``make test`` from nothing (nbval
   plus its models' training): 5 minutes for a training chapter, 2 for the others. ``--check``
   exits 1 when a chapter is over it.
3. CI's phases, from ``.ci/run``'s own log (``--ci-log``, by default ``_build/ci.log`` when it is
   there): each phase's wall time and the minute of CI at which it ended.

    python -m benchmarks chapters                          # the committed runs, and CI's last log
    python -m benchmarks.bench_chapters --run 06 12        # run two chapters now
    python -m benchmarks.bench_chapters --run --threads 1  # every chapter, one thread
    python -m benchmarks.bench_chapters --ci-log ci.log    # a log saved from CI
    python -m benchmarks.bench_chapters --check            # exit 1 if a chapter is over budget

Only ``--check`` compares with a bar, and only when asked: the numbers are this machine's, for a
closing note and for a new chapter's author, never a timed test.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

from gpt_from_scratch.book.timing import cell_seconds

ROOT = Path(__file__).resolve().parent.parent
TRAINING_CHAPTERS = ("06", "07", "08", "09", "12", "14")  # a 5-minute bar; 2 for the others
LONG_CELL = 10.0  # seconds: cells at least this long are listed
PHASE = re.compile(r"^::: (?P<name>\S+) took (?P<seconds>\d+) s \(exit (?P<exit>\d+), "
                   r"(?P<minute>\d+) min into CI\)$", re.MULTILINE)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", nargs="*", metavar="CHAPTER",
                        help="execute these chapters now (numbers such as 06 or 1b; none: all)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads of --run (default: torch's)")
    parser.add_argument("--ci-log", type=Path, default=ROOT / "_build" / "ci.log", help="CI's log")
    parser.add_argument("--records", type=Path, default=ROOT / "_build",
                        help="where make test left nbval.xml and book-models.json (_build)")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when a chapter's share of make test is over its budget")
    args = parser.parse_args(argv)
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


def budget(chapter: str) -> float:
    """A chapter's bar in seconds: 5 minutes for a training chapter, 2 for the others."""
    return 60.0 * (5 if chapter in TRAINING_CHAPTERS else 2)


def nbval_seconds(xml: Path) -> dict[str, float]:
    """``{chapter: seconds}`` of its cells in a junit file that nbval wrote."""
    found: dict[str, float] = defaultdict(float)
    if xml.is_file():
        for case in ET.parse(xml).getroot().iter("testcase"):
            if m := re.search(r"(?:^|\.)(\d+b?)_\w+\.ipynb", case.get("classname", "")):
                found[m[1]] += float(case.get("time", 0))
    return dict(found)


def training_seconds(record: Path) -> dict[str, float]:
    """``{chapter: CPU seconds}`` of the models it is first to need, from book_models.py's record
    (a model already in the cache counts 0: no process is started for it)."""
    found: dict[str, float] = defaultdict(float)
    if record.is_file():
        for model in json.loads(record.read_text(encoding="utf-8")).values():
            found[model["chapter"]] += model["cpu_s"]
    return dict(found)


def shares(records: Path) -> list[tuple[str, float, float, float, float]]:
    """``(chapter, nbval s, models s, share of make test, share of CI)`` for each chapter that
    the records name: CI runs make test and then, for the training chapters, test-arithmetic."""
    nbval, models = nbval_seconds(records / "nbval.xml"), training_seconds(
        records / "book-models.json")
    again = {c: s + training_seconds(records / "book-models-avx2.json").get(c, 0.0)
             for c, s in nbval_seconds(records / "nbval-avx2.xml").items()}
    rows = []
    for chapter in sorted(set(nbval) | set(models)):
        share = nbval.get(chapter, 0.0) + models.get(chapter, 0.0)
        rows.append((chapter, nbval.get(chapter, 0.0), models.get(chapter, 0.0), share,
                     share + again.get(chapter, 0.0)))
    return rows


def budget_table(records: Path) -> list[str]:
    """Print each chapter's share of make test and of CI; return the chapters over budget."""
    rows = shares(records)
    if not rows:
        print(f"\nshares of make test: no records in {records} (make test writes nbval.xml and "
              "book-models.json there)")
        return []
    print(f"\neach chapter's share of make test and of CI ({records}; seconds; models in CPU s):")
    print(f"{'chapter':<8} {'nbval':>7} {'models':>7} {'make test':>9} {'budget':>7} {'CI':>7}")
    over = []
    for chapter, cells, models, share, ci in rows:
        bar = budget(chapter)
        flag = "" if share <= bar else "  over budget"
        if flag:
            over.append(chapter)
        print(f"{chapter:<8} {cells:>7.0f} {models:>7.0f} {share:>9.0f} {bar:>7.0f} {ci:>7.0f}{flag}")
    total = [sum(r[i] for r in rows) for i in (1, 2, 3, 4)]
    print(f"{'all':<8} {total[0]:>7.0f} {total[1]:>7.0f} {total[2]:>9.0f} {'':>7} {total[3]:>7.0f}")
    return over


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
    over = budget_table(args.records)
    ci_phases(args.ci_log)
    if args.check and over:
        print(f"\nover budget: chapter {', '.join(over)}: train less, or move work out of the "
              "chapter's run (a cached model, a smaller check)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
