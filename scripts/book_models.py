"""Train the book's cached models before the chapters that load them run side by side.

    python scripts/book_models.py            # Chapter 6's two, Chapter 8's offline one (and Chapter 9's
                                             # two more seeds), Chapter 12's fine-tuning runs,
                                             # Chapter 14's GRPO runs
    python scripts/book_models.py --jobs 1   # one at a time

Each model is trained (or read from the model cache: ``book.model_cache``) by a process of its own on
one thread (``--threads``), the longest first, ``--jobs`` at a time: on two cores the character model's run takes
one core while the other trains the rest. ``make test`` and ``make test-arithmetic`` run this
before the chapters, so that no chapter waits for another to finish training a model it needs
(``book.model_cache.trained_once`` makes such a chapter wait rather than train it a second time).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from gpt_from_scratch.utils import atomic_path

# The longest first, each the call a chapter makes. A model that needs another (Chapter 12's
# assistants start from the character model) waits for it; one process per model, so that the
# last ones share the cores rather than train one after the other.
BOOK = "from gpt_from_scratch.book.recipes import book_model\n" \
       "book_model('{}', progress=False)"
OFFLINE = "from gpt_from_scratch.book.offline_model import offline_model\n" \
          "offline_model(progress=False, seed={})"
SFT = "from gpt_from_scratch.book.assistant_runs import SFTRecipe, sft_run\n" \
      "sft_run(SFTRecipe(seed={}))"
GRPO = "from gpt_from_scratch.book.verifier import GRPORecipe, grpo_model\n" \
       "grpo_model(GRPORecipe('Last word', {}, {}, {}, seed={}))"
MODELS = {  # name: (the chapter that first needs it, the call)
    "shakespeare-char": ("06", BOOK.format("shakespeare-char")),
    "shakespeare-bpe": ("06", BOOK.format("shakespeare-bpe")),
    "shakespeare-bpe-heads": ("08", "from gpt_from_scratch.book.offline_model import offline_model\n"
                                    "offline_model(progress=False)"),  # Chapter 8's offline model
    # the same recipe from two more seeds: Chapter 9 averages its pretraining lesson over three
    "shakespeare-bpe-heads-seed0": ("09", OFFLINE.format(0)),
    "shakespeare-bpe-heads-seed1": ("09", OFFLINE.format(1)),
    # Chapter 12's three fine-tuning runs, which Chapter 13 reads too, and three more seeds
    # of them for Chapter 14's gain (six paired seeds)
    **{f"assistant-sft-{seed}": ("12", SFT.format(seed)) for seed in (0, 1, 2)},
    **{f"assistant-sft-{seed}": ("14", SFT.format(seed)) for seed in (3, 4, 5)},
    # Chapter 14's GRPO runs from them: six of 200 steps, three collapsing at a large step,
    # one of those braked by a KL penalty
    **{f"grpo-{seed}": ("14", GRPO.format(200, 2e-4, 0.0, seed)) for seed in range(6)},
    **{f"grpo-collapse-{seed}": ("14", GRPO.format(60, 1e-3, 0.0, seed)) for seed in (0, 1, 2)},
    "grpo-brake-0": ("14", GRPO.format(60, 1e-3, 0.1, 0)),
}


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
    waiting, running, failed, times = list(MODELS), {}, [], {}
    while waiting or running:
        while waiting and len(running) < args.jobs:
            name = waiting.pop(0)
            process = subprocess.Popen([sys.executable, "-c", MODELS[name][1]], env=env)
            running[process.pid] = (name, time.perf_counter())
        time.sleep(0.5)
        for pid, (name, started) in list(running.items()):
            done, status, usage = os.wait4(pid, os.WNOHANG)  # its own CPU time, not the others'
            if done:
                del running[pid]
                seconds, code = time.perf_counter() - started, os.waitstatus_to_exitcode(status)
                print(f"{name}: {'ready' if code == 0 else 'FAILED'} after {seconds:.0f} s",
                      flush=True)
                times[name] = dict(chapter=MODELS[name][0], wall_s=round(seconds, 1),
                                   cpu_s=round(usage.ru_utime + usage.ru_stime, 1))
                if code != 0:
                    failed.append(name)
    if args.times:
        with atomic_path(args.times) as tmp:
            tmp.write_text(json.dumps(times, indent=1), encoding="utf-8")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
