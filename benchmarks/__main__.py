"""Run every benchmark: ``python -m benchmarks [name ...] [--option value ...]`` (names as
in ``benchmarks/bench_<name>.py``; default: all).

Each option goes to the named benchmarks that take it (``python -m benchmarks.bench_<name>
-h`` lists a benchmark's own). An unknown name, an option that none of them takes or a value
that one refuses is a usage error, before any benchmark runs. ``--device cuda`` runs the
training and generation benchmarks on the GPU (mixed precision, torch.compile, CUDA graphs,
ours against transformers in the same process); the default is the CPU. ``--nanogpt=PATH``
(a clone of nanoGPT) lets ``bench_nanogpt`` time nanoGPT's training beside ours.
"""

import argparse
import importlib
import runpy
import sys
from pathlib import Path

HERE = Path(__file__).parent
NAMES = sorted(p.stem.removeprefix("bench_") for p in HERE.glob("bench_*.py"))


def groups(options: list[str]) -> list[tuple[str, list[str]]]:
    """Each option with the values that follow it: ``["--a=1", "--b", "2", "3"]`` ->
    ``[("--a", ["--a=1"]), ("--b", ["--b", "2", "3"])]``."""
    found: list[tuple[str, list[str]]] = []
    for word in options:
        if word.startswith("-"):
            found.append((word.split("=", 1)[0], [word]))
        else:
            found[-1][1].append(word)
    return found


def arguments(argv: list[str]) -> dict[str, list[str]]:
    """``{name: its arguments}`` of the benchmarks to run, in order; a usage error for an
    unknown name, an option none of them takes (each takes one per field of its
    ``parse_args([])``) and a value one of them refuses."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", metavar="name", help=f"of {', '.join(NAMES)}")
    first = next((i for i, word in enumerate(argv) if word.startswith("-")), len(argv))
    names, options = argv[:first], groups(argv[first:])
    if any(option in ("-h", "--help") for option, _ in options):
        parser.print_help()
        parser.exit()
    for name in names:
        if name not in NAMES:
            parser.error(f"unknown benchmark {name!r}: choose from {', '.join(NAMES)}")
    modules = {name: importlib.import_module(f"benchmarks.bench_{name}")
               for name in names or NAMES}
    takes = {name: {"--" + field.replace("_", "-") for field in vars(m.parse_args([]))}
             for name, m in modules.items()}
    for option, _ in options:
        if not any(option in known for known in takes.values()):
            offered = ", ".join(sorted(set().union(*takes.values()))) or "none"
            parser.error(f"unrecognized option {option!r}: the options of "
                         f"{', '.join(modules)} are: {offered}")
    chosen = {name: [word for option, words in options if option in takes[name]
                     for word in words] for name in modules}
    program = sys.argv[0]
    try:
        for name, args in chosen.items():  # a refused value: a usage error, before any run
            sys.argv[0] = f"benchmarks/bench_{name}.py"  # the program its usage names
            modules[name].parse_args(args)
    finally:
        sys.argv[0] = program
    return chosen


def main(argv: list[str]) -> None:
    for name, args in arguments(argv).items():
        print(f"\n=== benchmarks/bench_{name}.py {' '.join(args)}".rstrip(), flush=True)
        sys.argv = [str(HERE / f"bench_{name}.py"), *args]
        try:
            runpy.run_path(sys.argv[0], run_name="__main__")
        except SystemExit as done:  # a benchmark that ends with sys.exit(0): run the next
            if done.code:
                raise


if __name__ == "__main__":
    main(sys.argv[1:])
