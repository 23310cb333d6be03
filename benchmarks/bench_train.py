"""Training on the CPU with nanoGPT's Shakespeare-char configuration (Chapter 6).

1. The loss: ``train`` runs nanoGPT's CPU recipe (4 layers, 4 heads, 128 dims, block 64, batch 12,
   lr 1e-3 -> 1e-4, dropout 0, and no biases: nanoGPT's default ``bias=False``) for ``--iters`` steps
   (2,000 by default) and reports the validation loss; ``--bias`` trains the book's preset, which keeps
   GPT-2's biases. Bar: <= 1.89 after 2,000 steps (nanoGPT reaches 1.8857 there, in 85 s on a quiet machine).
2. The speed: the same training step (forward, backward, clipping, AdamW) for our ``GPT`` and for
   transformers' ``GPT2LMHeadModel`` built with the same configuration and weights, timed in
   alternating rounds in this process; the median step gives tokens/s. Bar: ours / theirs >= 1.0.

    python -m benchmarks train                      # the full run (about two minutes on 2 cores)
    python -m benchmarks.bench_train --iters 200    # a quick look
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iters", type=int, default=2000, help="training steps of the loss run (default 2000)")
    parser.add_argument("--steps", type=int, default=30, help="timed steps per model and round (default 30)")
    parser.add_argument("--rounds", type=int, default=4, help="alternating timing rounds (default 4)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: PyTorch's choice)")
    parser.add_argument("--bias", action="store_true", help="loss run with biases (the book's preset), not nanoGPT's")
    return parser.parse_known_args(argv)[0]  # `python -m benchmarks train` leaves its own name in argv


def loss_run(iters: int, bias: bool) -> None:
    from gpt_from_scratch.model import GPT, GPTConfig
    from gpt_from_scratch.train import RECIPES, TrainConfig, char_level_data, estimate_loss, train

    recipe = RECIPES["shakespeare-char"]
    train_ids, val_ids, _ = char_level_data()
    cfg = TrainConfig(**recipe.train | {"max_iters": iters, "progress": False})  # the book's model stops at 1,000
    torch.manual_seed(cfg.seed)
    model = GPT(GPTConfig(**recipe.model | {"bias": bias}))
    start = time.perf_counter()
    history = train(model, train_ids, val_ids, cfg)
    seconds = time.perf_counter() - start
    precise = estimate_loss(model, {"val": val_ids}, cfg.batch_size, eval_iters=200, seed=cfg.seed)["val"]
    tokens = iters * cfg.batch_size * model.config.context_length
    print(f"loss run: {iters} steps of nanoGPT's Shakespeare-char CPU recipe, bias={bias}, "
          f"{model.num_parameters():,} parameters")
    print(f"  val loss {history.val_loss[-1]:.4f} (eval_iters={cfg.eval_iters}, as nanoGPT), {precise:.4f} "
          f"(eval_iters=200); train loss {history.train_loss[-1]:.4f}")
    print(f"  {seconds:.1f} s in all, {1000 * seconds / iters:.1f} ms/step with evaluations, "
          f"{tokens / seconds:,.0f} tokens/s")
    if iters == 2000:
        verdict = "met" if history.val_loss[-1] <= 1.89 else f"NOT met by {history.val_loss[-1] - 1.89:.4f}"
        print(f"  bar: val loss <= 1.89 after 2,000 steps: {verdict}")


def speed_run(steps: int, rounds: int) -> None:
    from transformers import GPT2LMHeadModel

    from gpt_from_scratch.data import get_batch
    from gpt_from_scratch.model import GPT, GPTConfig
    from gpt_from_scratch.train import RECIPES, TrainConfig, char_level_data, make_optimizer

    recipe = RECIPES["shakespeare-char"]
    cfg = TrainConfig(**recipe.train)
    train_ids, _, _ = char_level_data()
    torch.manual_seed(0)
    ours = GPT(GPTConfig(**recipe.model)).train()
    theirs = GPT2LMHeadModel(ours.to_hf_config())
    theirs.load_state_dict(ours.to_hf_state_dict())
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


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    speed_run(args.steps, args.rounds)
    loss_run(args.iters, args.bias)


if __name__ == "__main__":
    main()
