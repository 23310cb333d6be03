"""Train the book's full-size reference runs and write ``reference/``.

    python scripts/reference_runs.py --out reference          # on a GPU: the full recipes
    python scripts/reference_runs.py --out /tmp/ref --tiny    # on a CPU, in seconds: every path

Runs (``RUNS``): nanoGPT's character model and the BPE model of its size (``RECIPES``), Chapter 8's
full offline model (``OFFLINE_RECIPES``), Karpathy's ladder at the lecture's step counts, and
Chapter 9's fine-tuning table on that offline model. Each model run gets a folder of weights
(``save_run``: safetensors shards, float16 when its validation loss moves by at most
``HALF_TOLERANCE``) and an entry in ``manifest.json``: recipe, config, seed, torch version, device,
wall time, best and final validation loss, the loss history, a 500-character sample and its share
of real words, and the SHA-256 of every file. ``--tiny`` shrinks every recipe as
tests/test_full_run.py does, to test the whole path on a CPU.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import time
from pathlib import Path

import torch

from gpt_from_scratch import heads
from gpt_from_scratch.book import ladder, offline_model
from gpt_from_scratch.book.finetune_runs import finetune_table
from gpt_from_scratch.book.recipes import RECIPES, load_data
from gpt_from_scratch.book.reference import reference_dir, save_run, write_manifest
from gpt_from_scratch.book.samples import real_word_share, sample_text
from gpt_from_scratch.checkpoint import load_checkpoint
from gpt_from_scratch.data import load_tiny_shakespeare, split_text
from gpt_from_scratch.finetune import speaker_dataset
from gpt_from_scratch.model import GPT, GPTConfig
from gpt_from_scratch.tokenizer import gpt2_encoding
from gpt_from_scratch.train import estimate_loss, train
from gpt_from_scratch.train_config import TrainConfig
from gpt_from_scratch.utils import default_device

SEED = 1337
HALF_TOLERANCE = 0.005  # nats: float16 weights are kept when the validation loss moves less
LADDER_SEEDS = (0, 1, 2)
FINETUNE_STEPS = 1200  # Chapter 9's FULL_RUN steps
TINY_MODEL = dict(n_layers=1, n_heads=2, d_model=32, d_ff=64, context_length=64, dropout=0.1)
TINY_TRAIN = dict(max_iters=12, batch_size=4, eval_interval=6, eval_iters=2, warmup_iters=2)
TINY_LADDER_STEPS = 4


def shrink() -> None:
    """Every ``-full`` recipe and the ladder's scaled-up rung cut to seconds on a CPU (``--tiny``)."""
    for table in (RECIPES, offline_model.OFFLINE_RECIPES):
        for name in [n for n in table if n.endswith("-full")]:
            recipe = table[name]
            table[name] = dataclasses.replace(recipe, model=recipe.model | TINY_MODEL,
                                              train=recipe.train | TINY_TRAIN)
    ladder.FINAL_CONFIG = dataclasses.replace(ladder.FINAL_CONFIG, batch_size=4, block_size=16,
                                              d_model=48, eval_iters=2)


def common(device: str, seconds: float, history) -> dict:
    return dict(seed=SEED, torch=torch.__version__, device=_device_name(device),
                wall_seconds=round(seconds, 1),
                best_val_loss=history.best_val_loss, final_val_loss=history.final_val_loss,
                history=dict(eval_step=history.eval_step, train_loss=history.train_loss,
                             val_loss=history.val_loss))


def _device_name(device: str) -> str:
    return torch.cuda.get_device_name() if device == "cuda" else device


def half_check(model, reader, val_ids, cfg: TrainConfig) -> dict:
    """The validation loss with float32 weights and with weights rounded to float16."""
    rounded = copy.deepcopy(model).half().float()
    readers = {"float32": reader(model), "float16": reader(rounded)}
    return {k: estimate_loss(r, {"val": val_ids}, cfg.batch_size, cfg.block_size, cfg.eval_iters,
                             seed=SEED)["val"] for k, r in readers.items()}


def book_run(name: str, device: str, out: Path, train_text: str) -> dict:
    """A ``RECIPES`` model trained from seed ``SEED`` with the package's loop (as ``book_model``)."""
    recipe = RECIPES[name]
    train_ids, val_ids, tokenizer = load_data(recipe.data)
    cfg = TrainConfig(**recipe.train, progress=False, device=device, compile=device == "cuda")
    torch.manual_seed(cfg.seed)
    model = GPT(GPTConfig(**recipe.model))
    start = time.perf_counter()
    history = train(model, train_ids, val_ids, cfg)  # ends with the best weights
    seconds = time.perf_counter() - start
    model = model.cpu().eval()
    halves = half_check(model, lambda m: m, val_ids, dataclasses.replace(cfg, device="cpu"))
    text = sample_text(model, tokenizer.encode, tokenizer.decode)
    info = dict(recipe=dataclasses.asdict(recipe)) | common(device, seconds, history) | dict(
        half_check=halves, sample=text, real_words=real_word_share(text, train_text))
    return save_run(out, name, model, info, half=_half_ok(halves))


def _half_ok(halves: dict) -> bool:
    return abs(halves["float16"] - halves["float32"]) <= HALF_TOLERANCE


def offline_run(device: str, out: Path, train_text: str) -> dict:
    """Chapter 8's full offline model (``offline_model(full=True)``), with its heads' scores."""
    model, info = offline_model.offline_model(full=True, device=device)
    ckpt = load_checkpoint(offline_model.offline_model_path(full=True, device=device))
    encoding = gpt2_encoding()
    _, val_ids, _ = load_data("bpe")
    cfg = dataclasses.replace(ckpt.train_config, device="cpu")
    halves = half_check(model, offline_model.DocumentStart, val_ids, cfg)
    T = model.config.context_length
    x = torch.from_numpy(val_ids[:16 * (T - 1)].astype("int64")).view(16, T - 1)
    with torch.no_grad():
        maps = torch.stack(model.attention_maps(offline_model.with_document_start(x)))
    text = sample_text(model, encoding.encode, encoding.decode, start=(offline_model.EOT,))
    tables = dict(sink=heads.sink_scores(maps).tolist(),
                  sink_baseline=heads.uniform_share(T, start=heads.SINK_FROM),
                  previous_token=heads.previous_token_scores(maps).tolist(),
                  previous_token_baseline=heads.uniform_share(T))
    entry = dict(recipe=info["settings"]) | common(device, info["train_seconds"], ckpt.history)
    entry |= dict(half_check=halves, sample=text, real_words=real_word_share(text, train_text),
                  tables=tables)
    return save_run(out, "shakespeare-bpe-heads-full", model, entry, half=_half_ok(halves)), model


def ladder_run(device: str, tiny: bool) -> dict:
    """Every rung at the lecture's step count (``LADDER_SEEDS``), the scaled-up one with one seed."""
    train_ids, val_ids, tokenizer = load_data("char")
    V = tokenizer.vocab_size
    rows, start = [], time.perf_counter()
    rungs = [(None, ladder.BIGRAM)] + [(r, ladder.LadderConfig()) for r in ladder.RUNGS]
    for rung, cfg in rungs + [(ladder.FINAL, ladder.FINAL_CONFIG)]:
        steps = TINY_LADDER_STEPS if tiny else cfg.max_iters
        losses = []
        for seed in LADDER_SEEDS[:1] if rung is ladder.FINAL else LADDER_SEEDS:
            torch.manual_seed(seed)
            net = ladder.BigramModel(V) if rung is None else ladder.LadderModel(V, rung, cfg)
            losses.append(ladder.train_rung(net, train_ids, val_ids, cfg, seed, device, steps))
        rows.append(dict(name="bigram (trained)" if rung is None else rung.name, steps=steps,
                         published_steps=cfg.max_iters,
                         published=ladder.BIGRAM_PUBLISHED if rung is None else rung.published,
                         val=losses))
    return dict(seed=SEED, torch=torch.__version__, device=_device_name(device),
                wall_seconds=round(time.perf_counter() - start, 1), files={},
                tables=dict(ladder=rows))


def finetune_run(backbone, device: str, tiny: bool) -> dict:
    """Chapter 9's table (4 speakers, 63 tokens a speech) on the full offline model."""
    data = speaker_dataset(load_tiny_shakespeare(), gpt2_encoding(), n_speakers=4, max_tokens=63,
                           min_tokens=8)
    start = time.perf_counter()
    rows = finetune_table(backbone.to(device), data, 2 if tiny else FINETUNE_STEPS, device)
    return dict(seed=0, torch=torch.__version__, device=_device_name(device), files={},
                wall_seconds=round(time.perf_counter() - start, 1),
                tables=dict(finetune=rows, classes=data.classes, n_test=len(data.test)))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=reference_dir(),
                        help="folder to write (default: where reference_run looks first)")
    parser.add_argument("--tiny", action="store_true", help="tiny recipes, seconds on a CPU")
    args = parser.parse_args(argv)
    if args.tiny:
        shrink()
    device = "cpu" if args.tiny else default_device()
    train_text, _ = split_text(load_tiny_shakespeare(), 0.9)
    runs = {}
    for name in ("shakespeare-char-full", "shakespeare-bpe-full"):
        runs[name] = book_run(name, device, args.out, train_text)
        print(f"{name}: best val loss {runs[name]['best_val_loss']:.4f}", flush=True)
    runs["shakespeare-bpe-heads-full"], backbone = offline_run(device, args.out, train_text)
    runs["ladder"] = ladder_run(device, args.tiny)
    runs["finetune"] = finetune_run(backbone, device, args.tiny)
    print(f"wrote {write_manifest(args.out, runs)}")


if __name__ == "__main__":
    main()
