"""Train the book's cached models before the chapters that load them run side by side.

    python scripts/book_models.py            # Chapter 6's two, Chapter 8's offline one (and Chapter 9's
                                             # two more seeds), Chapter 12's fine-tuning runs,
                                             # Chapter 14's GRPO runs
    python scripts/book_models.py --jobs 1   # one at a time

Each model not yet in the model cache (``book.model_cache``) is trained by a process of its
own on one thread (``--threads``), the longest first, ``--jobs`` at a time: on two cores the
character model's run takes one core while the other trains the rest. ``make test`` and
``make test-arithmetic`` run this before the chapters, so that no chapter waits for another
to finish training a model it needs (``book.model_cache.trained_once`` makes such a chapter
wait rather than train it a second time).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from gpt_from_scratch.book.assistant_runs import SFTRecipe, sft_entries
from gpt_from_scratch.book.model_cache import META_FILE, Entry, model_entry
from gpt_from_scratch.book.offline_model import SEED, offline_model_entry
from gpt_from_scratch.book.recipes import book_model_entry
from gpt_from_scratch.book.verifier import GRPORecipe
from gpt_from_scratch.utils import atomic_path, default_device


@dataclass(frozen=True)
class Model:
    """One model: the chapter that first needs it, the ``call`` that chapter makes (run by
    a process of its own) and the cache ``entries`` that call reads or writes, computed
    here."""

    chapter: str
    call: str
    entries: Callable[[], list[Entry]]


def book(chapter: str, name: str) -> Model:
    return Model(chapter, "from gpt_from_scratch.book.recipes import book_model\n"
                 f"book_model({name!r}, progress=False)", lambda: [book_model_entry(name)])


def offline(chapter: str, seed: int = SEED) -> Model:
    return Model(chapter, "from gpt_from_scratch.book.offline_model import offline_model\n"
                 f"offline_model(progress=False, seed={seed})",
                 lambda: [offline_model_entry(seed=seed, device=default_device())])


def sft(chapter: str, seed: int) -> Model:
    return Model(chapter, "from gpt_from_scratch.book.assistant_runs import SFTRecipe, "
                 f"sft_run\nsft_run(SFTRecipe(seed={seed}))",
                 lambda: list(sft_entries(SFTRecipe(seed=seed))))


def grpo(chapter: str, steps: int, lr: float, beta: float, seed: int) -> Model:
    recipe = GRPORecipe("Last word", steps, lr, beta, seed=seed)
    trainer = "gpt_from_scratch.book.verifier"
    return Model(chapter, f"from {trainer} import GRPORecipe, grpo_model\n"
                 f"grpo_model({recipe!r})", lambda: [model_entry(  # as grpo_model keys it
                     recipe.name, dataclasses.asdict(recipe), trainer,
                     parents=sft_entries(SFTRecipe(seed=seed))[:1])])


# The longest first. A model that needs another (Chapter 12's assistants start from the
# character model) waits for it; one process per model, so that the last ones share the
# cores rather than train one after the other.
MODELS = {
    "shakespeare-char": book("06", "shakespeare-char"),
    "shakespeare-bpe": book("06", "shakespeare-bpe"),
    "shakespeare-bpe-heads": offline("08"),  # Chapter 8's offline model
    # the same recipe from two more seeds: Chapter 9 averages its pretraining lesson over three
    "shakespeare-bpe-heads-seed0": offline("09", 0),
    "shakespeare-bpe-heads-seed1": offline("09", 1),
    # Chapter 12's three fine-tuning runs, which Chapter 13 reads too, and three more seeds
    # of them for Chapter 14's gain (six paired seeds)
    **{f"assistant-sft-{seed}": sft("12", seed) for seed in (0, 1, 2)},
    **{f"assistant-sft-{seed}": sft("14", seed) for seed in (3, 4, 5)},
    # Chapter 14's GRPO runs from them: six of 200 steps, three collapsing at a large step,
    # one of those braked by a KL penalty
    **{f"grpo-{seed}": grpo("14", 200, 2e-4, 0.0, seed) for seed in range(6)},
    **{f"grpo-collapse-{seed}": grpo("14", 60, 1e-3, 0.0, seed) for seed in (0, 1, 2)},
    "grpo-brake-0": grpo("14", 60, 1e-3, 0.1, 0),
}


def in_cache(name: str) -> bool:
    """Whether every entry of ``name``'s call is saved: then no process is started for it
    (importing torch takes seconds, only to read it); the chapters read and verify it. An
    entry keyed here otherwise than by the call only makes a process start for nothing."""
    return all((entry.path / META_FILE).is_file() for entry in MODELS[name].entries())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2, help="models trained at once (default 2)")
    parser.add_argument("--threads", type=int, default=1, help="threads of each process (default 1)")
    parser.add_argument("--times", type=Path, help="write each model's chapter, wall and CPU "
                        "seconds to this JSON file (python -m benchmarks chapters reads it)")
    args = parser.parse_args(argv)
    for option in ("jobs", "threads"):
        if getattr(args, option) < 1:
            parser.error(f"--{option} must be at least 1, got {getattr(args, option)}")
    env = os.environ | {"OMP_NUM_THREADS": str(args.threads)}
    torch.set_num_threads(args.threads)  # the arithmetic the calls are keyed by
    waiting, running, failed, times = [], {}, [], {}
    for name in MODELS:
        if in_cache(name):
            times[name] = dict(chapter=MODELS[name].chapter, wall_s=0.0, cpu_s=0.0)
        else:
            waiting.append(name)
    print(f"{len(MODELS) - len(waiting)} of {len(MODELS)} models in the cache; "
          f"{len(waiting)} to train", flush=True)
    while waiting or running:
        while waiting and len(running) < args.jobs:
            name = waiting.pop(0)
            process = subprocess.Popen([sys.executable, "-c", MODELS[name].call], env=env)
            running[process.pid] = (name, time.perf_counter())
        time.sleep(0.5)
        for pid, (name, started) in list(running.items()):
            done, status, usage = os.wait4(pid, os.WNOHANG)  # its own CPU time, not the others'
            if done:
                del running[pid]
                seconds, code = time.perf_counter() - started, os.waitstatus_to_exitcode(status)
                print(f"{name}: {'ready' if code == 0 else 'FAILED'} after {seconds:.0f} s",
                      flush=True)
                times[name] = dict(chapter=MODELS[name].chapter, wall_s=round(seconds, 1),
                                   cpu_s=round(usage.ru_utime + usage.ru_stime, 1))
                if code != 0:
                    failed.append(name)
    if args.times:
        with atomic_path(args.times) as tmp:
            tmp.write_text(json.dumps(times, indent=1), encoding="utf-8")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
