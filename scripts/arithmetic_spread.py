"""How far the chapters' numbers move under another arithmetic: the measurement behind nbval's
tolerances and the lessons' margins.

Runs chapters top to bottom from their text twins under each variant (PyTorch's CPU kernel set
and a thread count), each from an empty model cache so that every model is trained under that
arithmetic, then compares every compared cell (tag ``nbval-check-output``) with the committed
notebook, number by number, and lists every lesson's margin (``gpt_from_scratch.book.lessons``).
Run it after ``make notebooks``, so that twins and notebooks have the same cells::

    python scripts/arithmetic_spread.py 06 07 --variant avx2:1 --variant default:4

A variant is ``CAPABILITY:THREADS``; ``native`` leaves PyTorch's choice of kernels. The executed
notebooks and a JSON report go to ``_build/spread/<variant>/``; the tables go to standard output.
"""

from __future__ import annotations

import argparse
import configparser
import functools
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "notebooks"))
from conftest import within  # noqa: E402  (nbval's tolerance, as make test applies it)

NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
CAPABILITIES = ("native", "default", "avx2", "avx512")
# torch.compile's C++ built for the CPU the forced kernels stand for (the Makefile's CPP_MARCH_*):
# inductor's -march=native with AVX2 vectors on an AVX-512 CPU computes wrong numbers.
CPP_MARCH = {"avx2": "x86-64-v3", "default": "x86-64"}


def variant(text: str) -> tuple[str, int]:
    """``avx2:1`` -> ("avx2", 1), with an error that names the value and the form."""
    cap, _, threads = text.partition(":")
    if cap not in CAPABILITIES or not threads.isdigit() or int(threads) < 1:
        raise argparse.ArgumentTypeError(
            f"variant {text!r} must be CAPABILITY:THREADS with CAPABILITY one of "
            f"{', '.join(CAPABILITIES)} and THREADS a whole number >= 1, e.g. avx2:1")
    return cap, int(threads)


@functools.lru_cache(maxsize=1)
def sanitizers() -> tuple[tuple[str, str], ...]:
    """nbval_sanitize.cfg's patterns (timings, addresses), applied as ``make test`` applies them."""
    config = configparser.ConfigParser(interpolation=None)
    config.read(ROOT / "nbval_sanitize.cfg")
    return tuple((config[s]["regex"], config[s]["replace"]) for s in config.sections())


def sanitize(text: str) -> str:
    for regex, replace in sanitizers():
        text = re.sub(regex, replace, text)
    return text


def texts(cell) -> list[str]:
    """The text a cell's outputs show, in order (what nbval compares of it)."""
    found = []
    for out in cell.get("outputs", []):
        if "text" in out:
            found.append(out["text"])
        for key in ("text/plain", "text/markdown", "text/html"):
            if key in out.get("data", {}):
                found.append(out["data"][key])
    return found


def compare(committed, executed) -> list[dict]:
    """Per compared cell: the largest absolute and relative change of its numbers, or a note
    that its text (not only its numbers) changed."""
    rows = []
    for i, (old, new) in enumerate(zip(committed.cells, executed.cells)):
        if old.cell_type != "code" or "nbval-check-output" not in old.metadata.get("tags", []):
            continue
        a, b = (sanitize("".join(texts(c))) for c in (old, new))
        row = dict(cell=i, first_line=old.source.splitlines()[0][:60] if old.source else "",
                   tolerance=old.metadata.get("tolerance"))
        row["passes"] = a == b or bool(row["tolerance"]) and within(b, a, row["tolerance"]) == a
        if NUMBER.split(a) != NUMBER.split(b):
            row["text_changed"] = True
        else:
            pairs = [(float(x), float(y)) for x, y in zip(NUMBER.findall(a), NUMBER.findall(b))]
            row["abs"] = max((abs(x - y) for x, y in pairs), default=0.0)
            row["rel"] = max((abs(x - y) / abs(x) for x, y in pairs if x), default=0.0)
        rows.append(row)
    return rows


def run(chapters: list[Path], cap: str, threads: int, out: Path, execute: bool = True) -> dict:
    """Execute ``chapters`` in one variant (or, with ``execute=False``, take the notebooks an
    earlier run left in ``out``) and compare them with the committed ones; return the report."""
    out.mkdir(parents=True, exist_ok=True)
    lessons_file = out / "lessons.jsonl"
    if execute:
        lessons_file.unlink(missing_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONHASHSEED="0",
               MKL_DYNAMIC="FALSE",  # else MKL holds torch to one thread a core
               GPT_FROM_SCRATCH_CACHE=str(out / "cache"),
               GPT_FROM_SCRATCH_LESSONS=str(lessons_file))
    for name in ("ATEN_CPU_CAPABILITY", "TORCHINDUCTOR_CPP_MARCH"):
        env.pop(name, None)
    if cap != "native":
        env["ATEN_CPU_CAPABILITY"] = cap
    if cap in CPP_MARCH:
        env["TORCHINDUCTOR_CPP_MARCH"] = CPP_MARCH[cap]
    report = dict(capability=cap, threads=threads, chapters={})
    earlier = {} if execute or not (out / "report.json").exists() else \
        json.loads((out / "report.json").read_text())["chapters"]
    for path in chapters:
        start = time.perf_counter()
        target = out / path.name
        twin = path.parent / "text" / f"{path.stem}.py"
        if execute:
            subprocess.run([sys.executable, "-m", "jupytext", "--to", "notebook", "--execute",
                            "--set-kernel", "python3", "--output", str(target), str(twin)],
                           env=env, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
        report["chapters"][path.stem] = dict(
            seconds=(round(time.perf_counter() - start, 1) if execute else
                     earlier.get(path.stem, {}).get("seconds", 0.0)),
            cells=compare(nbformat.read(path, 4), nbformat.read(target, 4)))
    if lessons_file.exists():
        report["lessons"] = [json.loads(line) for line in lessons_file.read_text().splitlines()]
    (out / "report.json").write_text(json.dumps(report, indent=1))
    return report


def show(report: dict) -> None:
    print(f"\n## {report['capability']}, {report['threads']} thread(s)")
    for name, chapter in report["chapters"].items():
        print(f"{name}: {chapter['seconds']:.0f} s")
        for row in chapter["cells"]:
            moved = ("text changed" if "text_changed" in row else
                     f"abs {row.get('abs', 0):.4g}  rel {row.get('rel', 0):.3g}")
            if "text_changed" in row or row.get("abs", 0) > 0:
                verdict = "passes" if row["passes"] else "FAILS"
                print(f"  cell {row['cell']:3d} {verdict:6} {moved:<30} tolerance "
                      f"{row['tolerance']} | {row['first_line']}")
    for x in report.get("lessons", []):
        print(f"  lesson {'holds' if x['holds'] else 'FAILS'}: {x['name']}: margin "
              f"{x['margin']:.4g} {x['unit']}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("chapters", nargs="+", help="chapter numbers, e.g. 06 07")
    parser.add_argument("--variant", type=variant, action="append", required=True)
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "spread")
    parser.add_argument("--compare-only", action="store_true",
                        help="compare the notebooks an earlier run left in --out, run nothing")
    args = parser.parse_args(argv)
    chapters = []
    for number in args.chapters:
        found = sorted((ROOT / "notebooks").glob(f"{number}_*.ipynb"))
        if not found:
            parser.error(f"no chapter notebook notebooks/{number}_*.ipynb: pass a chapter's "
                         "number as its file name starts, e.g. 06")
        chapters += found
    for cap, threads in args.variant:
        show(run(chapters, cap, threads, args.out / f"{cap}-{threads}", not args.compare_only))


if __name__ == "__main__":
    main()
