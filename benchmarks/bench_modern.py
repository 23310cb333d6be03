"""The Llama-style model's speed on the CPU (Chapter 10), as ratios measured in one process.

1. Training step (forward, backward, AdamW) of a GPT-2-style and a Llama-style model of about the same
   parameter count (6 layers, 384 dims, 6 heads; the Llama with 2 key/value heads), batch 16 x 256.
   Reported: Llama / GPT time per step. No bar: the chapter reports it, whatever it is.
2. ``generate`` with the book's KV cache against transformers' ``LlamaForCausalLM.generate`` with the
   same weights, greedy: the tokens must be identical. Bar: ours / theirs >= 1.0 in tokens per second.

    python -m benchmarks modern
"""

from __future__ import annotations

import argparse

import torch

from benchmarks import count
from gpt_from_scratch.book.timing import median_time


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=count, default=3,
                        help="alternating timed rounds, median reported")
    parser.add_argument("--threads", type=count, default=None,
                        help="torch threads (default: PyTorch's choice)")
    return parser.parse_args(argv)


def main(argv=None) -> None:
    from transformers import LlamaForCausalLM

    from gpt_from_scratch.generate import generate
    from gpt_from_scratch.model import GPT, GPTConfig
    from gpt_from_scratch.modern import Llama, LlamaConfig

    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    gpt = GPT(GPTConfig(vocab_size=65, context_length=512, d_model=384, n_layers=6, n_heads=6, dropout=0.0))
    llama = Llama(LlamaConfig(vocab_size=65, context_length=512, d_model=384, n_layers=6, n_heads=6,
                              n_kv_heads=2, d_ff=1152))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; GPT {gpt.num_parameters():,} "
          f"parameters, Llama {llama.num_parameters():,}")
    x = torch.randint(65, (16, 257), generator=torch.Generator().manual_seed(1))

    def step(model, optimizer):
        def run():
            _, loss = model(x[:, :-1], x[:, 1:])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        return run

    times = {name: median_time(step(m, torch.optim.AdamW(m.parameters())), args.repeats)
             for name, m in (("GPT", gpt), ("Llama", llama))}
    print(f"training step: GPT {times['GPT'] * 1e3:.0f} ms, Llama {times['Llama'] * 1e3:.0f} ms, "
          f"Llama / GPT = {times['Llama'] / times['GPT']:.2f}")

    llama.eval()
    hf = LlamaForCausalLM(llama.to_hf_config()).eval()
    hf.load_state_dict(llama.to_hf_state_dict())
    hf.generation_config.eos_token_id = None
    prompt, n = x[:1, :256], 128
    with torch.no_grad():
        ours_tokens = generate(llama, prompt, n, greedy=True)
        theirs_tokens = hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n,
                                    do_sample=False, pad_token_id=0)
        assert torch.equal(ours_tokens, theirs_tokens), "greedy tokens differ from transformers'"
        ours = median_time(lambda: generate(llama, prompt, n, greedy=True), args.repeats)
        theirs = median_time(lambda: hf.generate(prompt, attention_mask=torch.ones_like(prompt),
                                                     max_new_tokens=n, do_sample=False, pad_token_id=0),
                                 args.repeats)
    ratio = theirs / ours
    print(f"generate, {n} tokens after 256: ours {n / ours:,.0f} tokens/s, transformers {n / theirs:,.0f} "
          f"tokens/s, ours / theirs = {ratio:.2f} ({'meets' if ratio >= 1.0 else 'misses'} the bar 1.0)")


if __name__ == "__main__":
    main()
