"""Generation speed on the CPU with and without the KV cache, and against transformers (Chapter 7).

The model: nanoGPT's GPU Shakespeare-char shape (6 layers, 6 heads, 384 dims, 65 characters) with a
512-token context, random weights (speed does not depend on what the weights say). Batch 1, greedy.

1. ``generate`` with and without the cache: 256 new tokens after a 256-token prompt. Bar: >= 3x.
2. ``generate`` (cache on) against transformers' ``GPT2LMHeadModel.generate`` with the same weights,
   greedy, cache on; the two must produce the same tokens. Bar: ours / theirs >= 1.0.

3. ``generate(..., static_cache=True)``: the fixed-size cache of ``gpt_from_scratch.fast``, eager.

With ``--device cuda`` (Chapter 7's last section; issue 21): GPT-2 small's shape (124M parameters,
50,257 tokens, context 1,024, random weights), 256 new tokens after 512, batch 1, greedy, in fp32 (TF32)
and bf16: ours eager with the cache, ours with the compiled decoding step (CUDA graphs), transformers'
``generate``. Bars: compiled >= 600 tokens/s in fp32 and >= 1,500 in bf16, >= 5x transformers. The
memory-bandwidth limit of batch-1 decoding: every token reads every weight once, so tokens/s <= bandwidth /
bytes of weights; the fraction reached is printed against the GPU's peak (from its memory clock and bus
width) and against a measured device-to-device copy.

    python -m benchmarks generate
    python -m benchmarks.bench_generate --new-tokens 64 --repeats 1    # a quick look
    python -m benchmarks generate --device cuda
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from benchmarks import count


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompt", type=count, default=256,
                        help="prompt tokens (default 256)")
    parser.add_argument("--new-tokens", type=count, default=256,
                        help="tokens to generate (default 256)")
    parser.add_argument("--repeats", type=count, default=3,
                        help="alternating timed rounds, median reported (default 3)")
    parser.add_argument("--threads", type=count, default=None,
                        help="torch threads (default: PyTorch's choice)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="cpu (default) or cuda")
    return parser.parse_args(argv)


@torch.no_grad()
def main(argv=None) -> None:
    from transformers import GPT2LMHeadModel

    from gpt_from_scratch.generate import generate
    from gpt_from_scratch.hf_weights import to_hf_config, to_hf_state_dict
    from gpt_from_scratch.model import GPT, GPTConfig

    args = parse_args(argv)
    if args.device == "cuda":
        return cuda_main(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=65, context_length=args.prompt + args.new_tokens, d_model=384, n_layers=6,
                       n_heads=6, dropout=0.0)
    model = GPT(config).eval()
    hf = GPT2LMHeadModel(to_hf_config(model))
    hf.load_state_dict(to_hf_state_dict(model))
    hf.eval()
    prompt = torch.randint(config.vocab_size, (1, args.prompt), generator=torch.Generator().manual_seed(1))
    n = args.new_tokens
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; model {config.n_layers} layers, "
          f"{config.d_model} dims, context {config.context_length}, {model.num_parameters():,} parameters; "
          f"{n} new tokens after {args.prompt}, greedy, batch 1")

    runs = {
        "ours, KV cache": lambda k: generate(model, prompt, k, greedy=True, use_cache=True),
        "ours, no cache": lambda k: generate(model, prompt, k, greedy=True, use_cache=False),
        "ours, static cache": lambda k: generate(model, prompt, k, greedy=True, static_cache=True),
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
    same_static = torch.equal(outputs["ours, KV cache"], outputs["ours, static cache"])
    print(f"  identical tokens: cache vs no cache {same}, static cache {same_static}, ours vs transformers {same_hf}")
    speedup = rate["ours, KV cache"] / rate["ours, no cache"]
    ratio = rate["ours, KV cache"] / rate["transformers, KV cache"]
    print(f"  KV cache speed-up: {speedup:.1f}x (bar >= 3x: {'met' if speedup >= 3 else 'NOT met'})")
    print(f"  ours / transformers (cache on): {ratio:.2f} (bar >= 1.0: {'met' if ratio >= 1.0 else 'NOT met'})")


def peak_bandwidth() -> float | None:
    """The GPU's peak memory bandwidth in bytes/s from its memory clock and bus width (DDR: 2 per clock)."""
    props = torch.cuda.get_device_properties(0)
    clock_khz, bus_bits = getattr(props, "memory_clock_rate", 0), getattr(props, "memory_bus_width", 0)
    return 2 * clock_khz * 1e3 * bus_bits / 8 if clock_khz and bus_bits else None


def copy_bandwidth(n_bytes: int = 1 << 30) -> float:
    """Measured device-to-device copy bandwidth in bytes/s (each byte read once and written once)."""
    src = torch.empty(n_bytes // 4, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    torch.cuda.synchronize()
    times = []
    for _ in range(10):
        t0 = time.perf_counter()
        dst.copy_(src)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return 2 * n_bytes / statistics.median(times)


@torch.no_grad()
def cuda_main(args) -> None:
    """GPT-2 small's shape on the GPU, batch 1: eager, compiled (CUDA graphs), transformers; fp32 and bf16."""
    from transformers import GPT2LMHeadModel

    from gpt_from_scratch.generate import generate
    from gpt_from_scratch.hf_weights import to_hf_config, to_hf_state_dict
    from gpt_from_scratch.model import GPT, GPTConfig
    from gpt_from_scratch.precision import DTYPES, resolve_precision

    torch.set_float32_matmul_precision("high")  # TF32, as train() sets on a GPU
    prompt_len, n = (512, 256) if (args.prompt, args.new_tokens) == (256, 256) else (args.prompt, args.new_tokens)
    torch.manual_seed(0)
    config = GPTConfig(context_length=1024, dropout=0.0)  # GPT-2 small
    prompt = torch.randint(config.vocab_size, (1, prompt_len), generator=torch.Generator().manual_seed(1)).cuda()
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}; GPT-2 small shape, {n} new tokens after "
          f"{prompt_len}, greedy, batch 1")
    peak, copy = peak_bandwidth(), copy_bandwidth()
    print(f"  memory bandwidth: peak {peak / 1e12 if peak else float('nan'):.2f} TB/s (clock x bus width), "
          f"measured copy {copy / 1e12:.2f} TB/s")
    half = DTYPES[resolve_precision("auto", "cuda")]  # bfloat16, or float16 where it is only emulated
    for dtype, bar in ((torch.float32, 600), (half, 1500)):
        model = GPT(config).eval()
        hf = GPT2LMHeadModel(to_hf_config(model))
        hf.load_state_dict(to_hf_state_dict(model))
        model, hf = model.to("cuda", dtype), hf.to("cuda", dtype).eval()
        runs = {
            "ours, KV cache (eager)": lambda k: generate(model, prompt, k, greedy=True),
            "ours, compiled step": lambda k: generate(model, prompt, k, greedy=True, compile=True),
            "transformers generate": lambda k: hf.generate(prompt, attention_mask=torch.ones_like(prompt),
                                                           max_new_tokens=k, min_new_tokens=k, do_sample=False,
                                                           use_cache=True, pad_token_id=0),
        }
        outputs = {name: fn(n) for name, fn in runs.items()}  # warm-up (and compilation)
        seconds = {name: [] for name in runs}
        for _ in range(args.repeats):
            for name, fn in runs.items():
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                outputs[name] = fn(n)
                torch.cuda.synchronize()
                seconds[name].append(time.perf_counter() - t0)
        weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())  # tied: counted once
        print(f"  {str(dtype).removeprefix('torch.')}: {weight_bytes / 1e6:.0f} MB of weights read per token")
        rate = {}
        for name, values in seconds.items():
            rate[name] = n / statistics.median(values)
            fractions = ", ".join(f"{rate[name] * weight_bytes / b:.0%} of {label}"
                                  for label, b in (("peak", peak), ("copy", copy)) if b)
            print(f"    {name:26s} {rate[name]:8.1f} tokens/s  ({fractions} bandwidth)")
        same = torch.equal(outputs["ours, compiled step"], outputs["ours, KV cache (eager)"])
        same_hf = torch.equal(outputs["ours, compiled step"], outputs["transformers generate"])
        ratio = rate["ours, compiled step"] / rate["transformers generate"]
        print(f"    identical tokens: compiled vs eager {same}, ours vs transformers {same_hf}")
        print(f"    compiled >= {bar} tokens/s: {'met' if rate['ours, compiled step'] >= bar else 'NOT met'}; "
              f"ours / transformers {ratio:.1f}x (bar >= 5x: {'met' if ratio >= 5 else 'NOT met'})")


if __name__ == "__main__":
    main()
