"""Generation speed on the CPU with and without the KV cache, and against transformers (Chapter 7).

The model: nanoGPT's GPU Shakespeare-char shape (6 layers, 6 heads, 384 dims, 65 characters) with a
512-token context, random weights (speed does not depend on what the weights say). Batch 1, greedy.

1. ``generate`` with and without the cache: 256 new tokens after a 256-token prompt. Bar: >= 3x.
2. ``generate`` (cache on) against transformers' ``GPT2LMHeadModel.generate`` with the same weights,
   greedy, cache on; the two must produce the same tokens. Bar: ours / theirs >= 1.0.

    python -m benchmarks generate
    python -m benchmarks.bench_generate --new-tokens 64 --repeats 1    # a quick look
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompt", type=int, default=256, help="prompt tokens (default 256)")
    parser.add_argument("--new-tokens", type=int, default=256, help="tokens to generate (default 256)")
    parser.add_argument("--repeats", type=int, default=3, help="alternating timed rounds, median reported (default 3)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: PyTorch's choice)")
    return parser.parse_known_args(argv)[0]  # `python -m benchmarks generate` leaves its own name in argv


@torch.no_grad()
def main(argv=None) -> None:
    from transformers import GPT2LMHeadModel

    from gpt_from_scratch.generate import generate
    from gpt_from_scratch.model import GPT, GPTConfig

    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=65, context_length=args.prompt + args.new_tokens, d_model=384, n_layers=6,
                       n_heads=6, dropout=0.0)
    model = GPT(config).eval()
    hf = GPT2LMHeadModel(model.to_hf_config())
    hf.load_state_dict(model.to_hf_state_dict())
    hf.eval()
    prompt = torch.randint(config.vocab_size, (1, args.prompt), generator=torch.Generator().manual_seed(1))
    n = args.new_tokens
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; model {config.n_layers} layers, "
          f"{config.d_model} dims, context {config.context_length}, {model.num_parameters():,} parameters; "
          f"{n} new tokens after {args.prompt}, greedy, batch 1")

    runs = {
        "ours, KV cache": lambda k: generate(model, prompt, k, greedy=True, use_cache=True),
        "ours, no cache": lambda k: generate(model, prompt, k, greedy=True, use_cache=False),
        "transformers, KV cache": lambda k: hf.generate(prompt, attention_mask=torch.ones_like(prompt),
                                                        max_new_tokens=k, min_new_tokens=k, do_sample=False,
                                                        use_cache=True, pad_token_id=0),
    }
    outputs = {name: fn(8) for name, fn in runs.items()}  # warm-up
    seconds = {name: [] for name in runs}
    for _ in range(args.repeats):  # alternate, so a busy moment of the machine hits every run alike
        for name, fn in runs.items():
            t0 = time.perf_counter()
            outputs[name] = fn(n)
            seconds[name].append(time.perf_counter() - t0)
    rate = {}
    for name, values in seconds.items():
        median = statistics.median(values)
        rate[name] = n / median
        print(f"  {name:24s} median {median:6.2f} s over {len(values)} runs  {rate[name]:8.1f} tokens/s")
    same = torch.equal(outputs["ours, KV cache"], outputs["ours, no cache"])
    same_hf = torch.equal(outputs["ours, KV cache"], outputs["transformers, KV cache"])
    print(f"  identical tokens: cache vs no cache {same}, ours vs transformers {same_hf}")
    speedup = rate["ours, KV cache"] / rate["ours, no cache"]
    ratio = rate["ours, KV cache"] / rate["transformers, KV cache"]
    print(f"  KV cache speed-up: {speedup:.1f}x (bar >= 3x: {'met' if speedup >= 3 else 'NOT met'})")
    print(f"  ours / transformers (cache on): {ratio:.2f} (bar >= 1.0: {'met' if ratio >= 1.0 else 'NOT met'})")


if __name__ == "__main__":
    main()
