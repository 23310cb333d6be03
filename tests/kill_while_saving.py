"""Kill a process at random moments while it saves checkpoints; check the folder after every kill.

Run by tests/test_faults.py: ``python tests/kill_while_saving.py FOLDER KILLS SEED``. One process
imports everything once, then forks a child per round: the child saves checkpoints 1, 2, 3, ... past
the last one on disk (every weight and every optimizer value set to the step number, so a load shows
which checkpoint it got) and reports each finished save on a pipe. The parent waits for the child's
first save, which times a save on this machine as loaded as it is now, then SIGKILLs the child after a
random delay of up to 2.5 such saves and loads the folder. It must load as the last reported checkpoint
or the one after it (the save in flight, if it got past its commit point). The delay follows the
child's own pace, so a busy machine (CI trains models beside the tests) still sees kills on both sides
of the commit. Prints one JSON line: kills, outcomes, seconds.
"""

from __future__ import annotations

import json
import os
import random
import signal
import statistics
import sys
import time

import torch

from gpt_from_scratch.checkpoint import load_checkpoint, save_checkpoint
from gpt_from_scratch.model import GPT, GPTConfig
from gpt_from_scratch.train_config import TrainConfig, make_optimizer


def fill(model, optimizer, step: int) -> None:
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(step)
            for value in optimizer.state[p].values():
                value.fill_(step)


def value_of(ckpt) -> int:
    """The step number stored everywhere in a loaded checkpoint (every value must agree)."""
    values = {float(t.unique().item()) for t in ckpt.model.state_dict().values()}
    values |= {float(t.unique().item()) for s in ckpt.optimizer_state["state"].values() for t in s.values()}
    assert len(values) == 1, f"a mixed checkpoint: {sorted(values)}"
    return int(values.pop())


def main(folder: str, kills: int, seed: int) -> None:
    torch.set_num_threads(1)  # no thread pool: safe to fork
    rng = random.Random(seed)
    model = GPT(GPTConfig.from_preset("tiny", vocab_size=64, n_layers=1))
    optimizer = make_optimizer(model, TrainConfig())
    model(torch.zeros(1, 4, dtype=torch.long), torch.zeros(1, 4, dtype=torch.long))[1].backward()
    optimizer.step()  # AdamW state exists
    fill(model, optimizer, 0)
    save_checkpoint(folder, model, 0, optimizer=optimizer)
    start = time.perf_counter()
    last, outcomes, save_seconds = 0, {"previous": 0, "new": 0}, []
    for _ in range(kills):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: save last + 1, last + 2, ... until killed
            os.close(read)
            step = last
            while True:
                step += 1
                fill(model, optimizer, step)
                save_checkpoint(folder, model, step, optimizer=optimizer)
                os.write(write, step.to_bytes(8, "little"))
        os.close(write)
        t0 = time.perf_counter()
        first = os.read(read, 8)  # the child's first save, timed at today's load
        save_seconds.append(time.perf_counter() - t0)
        assert len(first) == 8, f"the child died before its first save ({first!r})"
        time.sleep(rng.uniform(0, 2.5 * save_seconds[-1]))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        with os.fdopen(read, "rb") as pipe:
            reported = first + pipe.read()
        done = int.from_bytes(reported[-8:], "little") if reported else last  # last save reported finished
        ckpt = load_checkpoint(folder)
        got = value_of(ckpt)
        assert got == ckpt.step, (got, ckpt.step)
        assert got in (done, done + 1), f"loaded checkpoint {got}, expected {done} or {done + 1}"
        outcomes["previous" if got == done else "new"] += 1
        last = got
    leftovers = sorted(p.name for p in os.scandir(folder))
    save_ms = 1000 * statistics.median(save_seconds)
    print(json.dumps({"kills": kills, "saves": last, "outcomes": outcomes, "save_ms": save_ms,
                      "seconds": time.perf_counter() - start, "files_after_last_kill": leftovers}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
