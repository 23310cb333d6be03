"""Training on the CPU with nanoGPT's Shakespeare-char configuration (Chapter 6).

1. The speed: the same training step (forward, backward, clipping, AdamW) for our ``GPT`` and for
   transformers' ``GPT2LMHeadModel`` built with the same configuration and weights, timed in
   alternating rounds in this process; the median step gives tokens/s. Bar: ours / theirs >= 1.0.
2. The loss: ``train`` (the book's loop) runs nanoGPT's CPU recipe (4 layers, 4 heads, 128 dims, block 64,
   batch 12, lr 1e-3 -> 1e-4, dropout 0, no biases and the exact GELU: nanoGPT's defaults) for ``--iters``
   steps (2,000 by default) and reports the validation loss; ``--bias`` trains the book's preset instead
   (GPT-2's biases and tanh GELU). Bar: <= 1.89 after 2,000 steps (nanoGPT reaches 1.8857 there).
3. nanoGPT's run, replayed: our ``GPT``, ``make_optimizer`` and ``lr_at``, but the random numbers drawn in
   the order of nanoGPT's ``train.py`` (seed 1337, the model built first, then every batch, the ones of
   its loss estimates included, from the global generator). The book's loop draws its batches from
   per-step seeds instead (so that a resumed run is exact), hence other batches and a different loss.

With ``--device cuda`` (issue 21): nanoGPT's GPU Shakespeare-char shape (6 layers, 6 heads, 384 dims, block
256, batch 64, dropout 0.2): one training step of ours and of transformers' in fp32 (TF32), bf16 autocast, and
bf16 + ``torch.compile``, same process; the whole ``train`` loop's time per step (batch sampling, no host sync);
and ``--only full``: the ``shakespeare-char-full`` recipe end to end (bf16 + compile), best and final val loss
(bar: best <= 1.47, nanoGPT's 1.4697).

    python -m benchmarks train                      # all three (about six minutes on 2 cores)
    python -m benchmarks train --device cuda        # the GPU speed table, then the full run
    python -m benchmarks.bench_train --iters 200    # a quick look
    python -m benchmarks.bench_train --only loss --seeds 1,2,3,4    # the spread of the loss over seeds
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import torch
import torch.nn.functional as F

from benchmarks import count

PRECISE_SEED = 0  # the 200 validation batches of the precise estimate: the same windows for every run and seed


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iters", type=count, default=2000,
                        help="training steps of the loss run (default 2000)")
    parser.add_argument("--steps", type=count, default=30,
                        help="timed steps per model and round (default 30)")
    parser.add_argument("--rounds", type=count, default=4,
                        help="alternating timing rounds (default 4)")
    parser.add_argument("--threads", type=count, default=None,
                        help="torch threads (default: PyTorch's choice)")
    parser.add_argument("--bias", action="store_true", help="loss runs with the book's preset (biases, tanh GELU)")
    parser.add_argument("--seeds", type=lambda text: [int(x) for x in text.split(",")], default=[1337],
                        help="seeds of the loss runs, comma-separated (default 1337, nanoGPT's); several give a summary")
    parser.add_argument("--only", choices=["speed", "loss", "replay", "full"], help="run one part only")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="cpu (default) or cuda")
    return parser.parse_args(argv)


def model_config(bias: bool):
    """nanoGPT's Shakespeare-char network (no biases, exact GELU), or with ``bias`` the book's preset."""
    from gpt_from_scratch.book.recipes import RECIPES
    from gpt_from_scratch.model import GPTConfig

    nanogpt = {} if bias else {"bias": False, "activation": "gelu"}
    return GPTConfig(**RECIPES["shakespeare-char"].model | nanogpt)


def loss_run(iters: int, bias: bool, seed: int) -> tuple[float, float]:
    from gpt_from_scratch.book.recipes import char_level_data
    from gpt_from_scratch.model import GPT
    from gpt_from_scratch.train import estimate_loss, train
    from gpt_from_scratch.train_config import TrainConfig

    train_ids, val_ids, _ = char_level_data()
    cfg = TrainConfig(max_iters=iters, seed=seed, progress=False)  # the defaults are nanoGPT's
    torch.manual_seed(cfg.seed)
    model = GPT(model_config(bias))
    start = time.perf_counter()
    history = train(model, train_ids, val_ids, cfg)  # nanoGPT's recipe, not the book model's
    seconds = time.perf_counter() - start
    precise = estimate_loss(model, {"val": val_ids}, cfg.batch_size, eval_iters=200, seed=PRECISE_SEED)["val"]
    tokens = iters * cfg.batch_size * model.config.context_length
    print(f"loss run, the book's train(): {iters} steps of nanoGPT's Shakespeare-char CPU recipe, seed {seed}, "
          f"bias={bias}, activation={model.config.activation}, {model.num_parameters():,} parameters")
    print(f"  val loss {history.val_loss[-1]:.4f} (eval_iters={cfg.eval_iters}, as nanoGPT), {precise:.4f} "
          f"(eval_iters=200); train loss {history.train_loss[-1]:.4f}")
    print(f"  {seconds:.1f} s in all, {1000 * seconds / iters:.1f} ms/step with evaluations, "
          f"{tokens / seconds:,.0f} tokens/s")
    verdict(iters, history.val_loss[-1])
    return history.val_loss[-1], precise


def replay_run(iters: int, bias: bool, seed: int, eval_interval: int = 250, eval_iters: int = 20) -> tuple[float, float]:
    """nanoGPT's train.py, step for step, with our model, optimizer and schedule."""
    from gpt_from_scratch.book.recipes import char_level_data
    from gpt_from_scratch.data import get_batch
    from gpt_from_scratch.model import GPT
    from gpt_from_scratch.train import estimate_loss
    from gpt_from_scratch.train_config import TrainConfig, lr_at, make_optimizer

    data = dict(zip(("train", "val"), char_level_data()[:2]))
    cfg = TrainConfig(max_iters=iters)  # nanoGPT's settings (TrainConfig's defaults)

    @torch.no_grad()
    def nanogpt_estimate() -> dict[str, float]:  # eval_iters fresh batches per split, from the global generator
        model.eval()
        out = {split: sum(model(*get_batch(data[split], B, T))[1].item() for _ in range(eval_iters)) / eval_iters
               for split in ("train", "val")}
        model.train()
        return out

    torch.manual_seed(seed)
    model = GPT(model_config(bias)).train()
    B, T = cfg.batch_size, model.config.context_length
    optimizer = make_optimizer(model, cfg)
    start = time.perf_counter()
    x, y = get_batch(data["train"], B, T)  # drawn before the loop, as nanoGPT does
    for step in range(iters + 1):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, cfg)
        if step % eval_interval == 0 or step == iters:
            losses = nanogpt_estimate()
        if step == iters:
            break
        _, loss = model(x, y)
        x, y = get_batch(data["train"], B, T)  # the next batch, drawn before the backward pass
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    seconds = time.perf_counter() - start
    precise = estimate_loss(model, {"val": data["val"]}, B, eval_iters=200, seed=PRECISE_SEED)["val"]
    print(f"nanoGPT's run replayed: {iters} steps, seed {seed}, bias={bias}, random numbers in nanoGPT's order")
    print(f"  val loss {losses['val']:.4f} (eval_iters={eval_iters}, nanoGPT's estimate), {precise:.4f} (eval_iters=200, "
          f"as the loss run's); train loss {losses['train']:.4f}")
    print(f"  {seconds:.1f} s, {1000 * seconds / iters:.1f} ms/step with evaluations")
    verdict(iters, losses["val"])
    return losses["val"], precise


def verdict(iters: int, val_loss: float) -> None:
    if iters == 2000:
        met = "met" if val_loss <= 1.89 else f"NOT met by {val_loss - 1.89:.4f}"
        print(f"  bar: val loss <= 1.89 after 2,000 steps: {met}")


def speed_run(steps: int, rounds: int) -> None:
    from transformers import GPT2LMHeadModel

    from gpt_from_scratch.book.recipes import RECIPES, char_level_data
    from gpt_from_scratch.data import get_batch
    from gpt_from_scratch.hf_weights import to_hf_config, to_hf_state_dict
    from gpt_from_scratch.model import GPT, GPTConfig
    from gpt_from_scratch.train_config import TrainConfig, make_optimizer

    recipe = RECIPES["shakespeare-char"]
    cfg = TrainConfig(**recipe.train)
    train_ids, _, _ = char_level_data()
    torch.manual_seed(0)
    ours = GPT(GPTConfig(**recipe.model)).train()
    theirs = GPT2LMHeadModel(to_hf_config(ours))
    theirs.load_state_dict(to_hf_state_dict(ours))
    theirs.train()
    print(f"speed: one training step, batch {cfg.batch_size} x block {ours.config.context_length}; "
          f"transformers uses attn_implementation={theirs.config._attn_implementation!r}")

    def make_step(model, logits_of):
        optimizer = make_optimizer(model, cfg)
        generator = torch.Generator().manual_seed(1)

        def step() -> float:
            x, y = get_batch(train_ids, cfg.batch_size, ours.config.context_length, generator)
            t0 = time.perf_counter()
            logits = logits_of(model, x)  # (B, T, V)
            loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            optimizer.step()
            return time.perf_counter() - t0
        return step

    runs = {"ours (GPT)": make_step(ours, lambda m, x: m(x)[0]),
            "transformers (GPT2LMHeadModel)": make_step(theirs, lambda m, x: m(x).logits)}
    times = {name: [] for name in runs}
    for name, step in runs.items():  # warm-up
        for _ in range(5):
            step()
    for _ in range(rounds):  # alternate, so a busy moment of the machine hits both
        for name, step in runs.items():
            times[name] += [step() for _ in range(steps)]
    tokens = cfg.batch_size * ours.config.context_length
    rate = {}
    for name, values in times.items():
        median = statistics.median(values)
        rate[name] = tokens / median
        print(f"  {name:32s} median {1000 * median:6.1f} ms/step over {len(values)} steps, {rate[name]:9,.0f} tokens/s")
    ratio = rate["ours (GPT)"] / rate["transformers (GPT2LMHeadModel)"]
    print(f"  ratio ours / transformers: {ratio:.2f} (bar >= 1.0: {'met' if ratio >= 1.0 else 'NOT met'})")


def cuda_speed_run(steps: int) -> None:
    """One training step on the GPU: ours vs transformers, fp32 (TF32) / bf16 / bf16 + compile (fp16 for
    bf16 on a GPU that only emulates bfloat16, such as a T4)."""
    from transformers import GPT2LMHeadModel

    from gpt_from_scratch.book.recipes import RECIPES, char_level_data
    from gpt_from_scratch.data import get_batch
    from gpt_from_scratch.hf_weights import to_hf_config, to_hf_state_dict
    from gpt_from_scratch.model import GPT, GPTConfig
    from gpt_from_scratch.precision import autocast, resolve_precision
    from gpt_from_scratch.train_config import TrainConfig, make_optimizer

    torch.set_float32_matmul_precision("high")
    recipe = RECIPES["shakespeare-char-full"]
    cfg = TrainConfig(**recipe.train, device="cuda")
    train_ids, _, _ = char_level_data()
    T = recipe.model["context_length"]
    print(f"GPU speed, {torch.cuda.get_device_name()}: one training step, batch {cfg.batch_size} x block {T}, "
          f"6 layers, 384 dims (nanoGPT's Shakespeare-char GPU run); median of 3 rounds of {steps} steps")
    x, y = get_batch(train_ids, cfg.batch_size, T, torch.Generator().manual_seed(1), "cuda")
    results = {}
    half = resolve_precision("auto", "cuda")  # bf16, or fp16 where bfloat16 is only emulated
    for precision, compiled in (("fp32", False), (half, False), (half, True)):
        torch.manual_seed(0)
        ours = GPT(GPTConfig(**recipe.model)).cuda().train()
        ours.check_token_ids = False  # as in train(), which checks each batch on the host instead
        theirs = GPT2LMHeadModel(to_hf_config(ours))
        theirs.load_state_dict(to_hf_state_dict(ours))
        theirs = theirs.cuda().train()
        label = precision + (" + compile" if compiled else "")
        for name, model, logits_of in (("ours", ours, lambda m, x: m(x)[0]),
                                       ("transformers", theirs, lambda m, x: m(x).logits)):
            optimizer = make_optimizer(model, cfg)
            net = torch.compile(model) if compiled else model

            def step():
                with autocast(precision, "cuda"):
                    logits = logits_of(net, x)  # (B, T, V)
                loss = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten())
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
                optimizer.step()

            for _ in range(10):  # warm-up (and compilation)
                step()
            rounds = []
            for _ in range(3):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(steps):
                    step()
                torch.cuda.synchronize()
                rounds.append((time.perf_counter() - t0) / steps)
            results[label, name] = statistics.median(rounds)
        print(f"  {label:16s} ours {1000 * results[label, 'ours']:6.2f} ms, transformers "
              f"{1000 * results[label, 'transformers']:6.2f} ms: ours {results[label, 'transformers'] / results[label, 'ours']:.2f}x "
              "as fast (bar >= 1.0)")


def cuda_loop_run(steps: int = 300) -> None:
    """The whole ``train`` loop per step on the GPU (batches drawn on the host, losses read every 250 steps)."""
    from gpt_from_scratch.book.recipes import RECIPES, char_level_data
    from gpt_from_scratch.model import GPT, GPTConfig
    from gpt_from_scratch.precision import resolve_precision
    from gpt_from_scratch.train import train
    from gpt_from_scratch.train_config import TrainConfig

    recipe = RECIPES["shakespeare-char-full"]
    train_ids, val_ids, _ = char_level_data()
    half = resolve_precision("auto", "cuda")  # bf16, or fp16 where bfloat16 is only emulated
    for precision, compiled in (("fp32", False), (half, False), (half, True)):
        torch.manual_seed(0)
        model = GPT(GPTConfig(**recipe.model))
        cfg = TrainConfig(**recipe.train | dict(max_iters=steps + 20, eval_interval=10_000, eval_iters=1),
                          device="cuda", precision=precision, compile=compiled, progress=False)
        train(model, train_ids, val_ids, TrainConfig(**dataclasses.asdict(cfg) | dict(max_iters=20)))  # warm-up
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        train(model, train_ids, val_ids, cfg)
        torch.cuda.synchronize()
        print(f"  train() loop, {precision}{' + compile' if compiled else ''}: "
              f"{1000 * (time.perf_counter() - t0) / cfg.max_iters:.2f} ms/step (compilation included once)")


def cuda_full_run() -> None:
    """The ``shakespeare-char-full`` recipe end to end on the GPU, bf16 + compile: time, best and final loss."""
    from gpt_from_scratch.book.recipes import RECIPES, char_level_data
    from gpt_from_scratch.model import GPT, GPTConfig
    from gpt_from_scratch.train import train
    from gpt_from_scratch.train_config import TrainConfig

    recipe = RECIPES["shakespeare-char-full"]
    train_ids, val_ids, _ = char_level_data()
    torch.manual_seed(1337)
    model = GPT(GPTConfig(**recipe.model))
    cfg = TrainConfig(**recipe.train, device="cuda", compile=True, progress=False)
    t0 = time.perf_counter()
    history = train(model, train_ids, val_ids, cfg)
    print(f"full run ({cfg.max_iters} steps, precision {cfg.precision}, compile): {time.perf_counter() - t0:.0f} s "
          f"with compilation; {history.summary()}")
    print(f"  bar: best val loss <= 1.47 (nanoGPT 1.4697): {'met' if history.best_val_loss <= 1.47 else 'NOT met'}")


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.device == "cuda":
        print(f"torch {torch.__version__}")
        if args.only in (None, "speed"):
            cuda_speed_run(args.steps)
            cuda_loop_run()
        if args.only in (None, "full"):
            cuda_full_run()
        return
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    if args.only in (None, "speed"):
        speed_run(args.steps, args.rounds)
    runs = {name: run for name, run in [("loss", loss_run), ("replay", replay_run)] if args.only in (None, name)}
    results = {name: [run(args.iters, args.bias, seed) for seed in args.seeds] for name, run in runs.items()}
    if len(args.seeds) > 1:
        print(f"summary over seeds {args.seeds}: mean ± standard deviation, [min, max]")
        for name, values in results.items():
            for label, column in (("eval_iters=20 ", [v[0] for v in values]), ("eval_iters=200", [v[1] for v in values])):
                print(f"  {name:6s} {label}: {statistics.mean(column):.4f} ± {statistics.stdev(column):.4f}, "
                      f"[{min(column):.4f}, {max(column):.4f}]")


if __name__ == "__main__":
    main()
