"""Chapter 14's rollouts against transformers' sampler: ``sample_groups`` and ``generate``.

GRPO spends most of its time sampling groups of answers (Chapter 14), so the book's sampler
must be at least as fast as the reference it is compared with: transformers'
``GPT2LMHeadModel.generate`` with the same weights and the same settings (sampling at
temperature 1, no top-k or top-p, G answers per prompt: ``num_return_sequences=G``, the KV
cache on). Two shapes with random weights (speed does not depend on what they say): the
book's character model (4 layers, 128 dims) and nanoGPT's GPU Shakespeare-char shape (6
layers, 384 dims), 65 characters plus the chat format's 5 tokens; B prompts of P tokens, G
answers each, at most N new tokens. An answer ends at the end token, as in GRPO; both
samplers go on until every row has ended (the ended rows padded), and each counts every
row's tokens, so both count the same kind of work.

Before timing, the first step's distribution is compared: transformers' processed scores
(``output_scores``) against ``softmax(logits / T)`` of ours, on the same rows, within 1e-5.
The samplers' random streams differ, so their tokens do not; their laws must not. Bar:
tokens per second, ours / transformers >= 1.0 on each shape (alternating timed rounds,
medians).

    python -m benchmarks sampling
    python -m benchmarks sampling --threads 2 --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from benchmarks import count

VOCAB = 70  # 65 characters and the chat format's 5 tokens (Chapter 12)
SHAPES = {"4 layers, 128 dims": dict(d_model=128, n_layers=4, n_heads=4),
          "6 layers, 384 dims": dict(d_model=384, n_layers=6, n_heads=6)}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=count, default=8, help="B prompts (default 8)")
    parser.add_argument("--group", type=count, default=8, help="G answers each (default 8)")
    parser.add_argument("--prompt-tokens", type=count, default=24,
                        help="P tokens a prompt (default 24)")
    parser.add_argument("--new-tokens", type=count, default=40,
                        help="N new tokens an answer (default 40)")
    parser.add_argument("--repeats", type=count, default=5,
                        help="alternating timed rounds, median reported (default 5)")
    parser.add_argument("--threads", type=count, default=None,
                        help="torch threads (default: PyTorch's choice)")
    return parser.parse_args(argv)


def hf_sample(hf, prompts: torch.Tensor, group: int, new_tokens: int, end_id: int, **extra):
    """transformers' ``generate`` with Chapter 14's settings: ``group`` answers of each
    prompt, sampled at temperature 1 with no top-k or top-p, ending at ``end_id``."""
    return hf.generate(prompts, attention_mask=torch.ones_like(prompts), do_sample=True,
                       temperature=1.0, top_k=0, top_p=1.0, num_return_sequences=group,
                       max_new_tokens=new_tokens, eos_token_id=end_id, pad_token_id=end_id,
                       **extra)


def same_law(model, hf, prompts: torch.Tensor, group: int, end_id: int) -> float:
    """The largest gap between the two samplers' first-step probabilities, every row."""
    out = hf_sample(hf, prompts, group, 1, end_id, output_scores=True,
                    return_dict_in_generate=True)
    theirs = torch.softmax(out.scores[0].float(), dim=-1)  # (B * G, V)
    logits, _ = model(prompts.repeat_interleave(group, dim=0))  # (B * G, P, V)
    ours = torch.softmax(logits[:, -1].float(), dim=-1)  # (B * G, V)
    return (ours - theirs).abs().max().item()


@torch.no_grad()
def main(argv=None) -> None:
    from transformers import GPT2LMHeadModel

    from gpt_from_scratch.grpo_sampling import sample_groups
    from gpt_from_scratch.hf_weights import to_hf_config, to_hf_state_dict
    from gpt_from_scratch.model import GPT, GPTConfig

    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    B, G, P, N = args.prompts, args.group, args.prompt_tokens, args.new_tokens
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {B} prompts "
          f"of {P} tokens, {G} answers each, {N} new tokens, temperature 1, no top-k or "
          "top-p")
    end_id = VOCAB - 1
    for name, shape in SHAPES.items():
        torch.manual_seed(0)
        config = GPTConfig(vocab_size=VOCAB, context_length=P + N, dropout=0.0, **shape)
        model = GPT(config).eval()
        hf = GPT2LMHeadModel(to_hf_config(model)).eval()
        hf.load_state_dict(to_hf_state_dict(model))
        drawn = torch.Generator().manual_seed(1)
        prompts = torch.randint(VOCAB - 1, (B, P), generator=drawn)  # (B, P)
        gap = same_law(model, hf, prompts, G, end_id)

        def ours() -> int:
            completions, mask = sample_groups(model, prompts, G, N, end_id,
                                              generator=torch.Generator().manual_seed(2))
            return completions.numel()

        def theirs() -> int:
            return hf_sample(hf, prompts, G, N, end_id)[:, P:].numel()

        runs = {"ours (sample_groups)": ours, "transformers (generate)": theirs}
        for run in runs.values():  # warm-up
            run()
        rates = {label: [] for label in runs}
        for _ in range(args.repeats):  # alternate: a busy moment hits both alike
            for label, run in runs.items():
                start = time.perf_counter()
                tokens = run()
                rates[label].append(tokens / (time.perf_counter() - start))
        rate = {label: statistics.median(values) for label, values in rates.items()}
        ratio = rate["ours (sample_groups)"] / rate["transformers (generate)"]
        print(f"{name}: first-step probabilities within {gap:.1e} "
              f"({'same law' if gap <= 1e-5 else 'NOT the same law'})")
        for label, value in rate.items():
            print(f"  {label:24s} {value:9.0f} tokens/s (median of {args.repeats})")
        print(f"  ours / transformers: {ratio:.2f} "
              f"(bar >= 1.0: {'met' if ratio >= 1.0 else 'NOT met'})")


if __name__ == "__main__":
    main()
