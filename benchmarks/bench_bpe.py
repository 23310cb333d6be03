"""Chapter 1b: encoding all of Tiny Shakespeare with our pure-Python BPE versus tiktoken (Rust).

Bar: ours takes at most 20x tiktoken's time, from a cold chunk cache, in the same process.
Run with ``python -m benchmarks bpe``.
"""

from __future__ import annotations

import argparse
import statistics
import time

from gpt_from_scratch.bpe_tokenizer import BPETokenizer
from gpt_from_scratch.data import load_tiny_shakespeare
from gpt_from_scratch.tokenizer import gpt2_encoding

RUNS = 5
BAR = 20.0


def median_seconds(fn, runs: int = RUNS, setup=None) -> float:
    """Median wall time of ``fn()`` over ``runs`` runs, calling ``setup()`` untimed before each."""
    times = []
    for _ in range(runs):
        if setup is not None:
            setup()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def parse_args(argv=None) -> argparse.Namespace:
    """No options: a misspelt one is a usage error, not ignored."""
    return argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)


def main(argv=None) -> None:
    parse_args(argv)
    text = load_tiny_shakespeare()
    tiktoken_gpt2 = gpt2_encoding()
    ours = BPETokenizer.from_gpt2()
    assert ours.encode(text) == tiktoken_gpt2.encode(text), "the two tokenizers disagree: fix that first"

    t_tiktoken = median_seconds(lambda: tiktoken_gpt2.encode(text))
    t_cold = median_seconds(lambda: ours.encode(text), setup=ours.clear_cache)
    t_warm = median_seconds(lambda: ours.encode(text))
    ratio = t_cold / t_tiktoken
    print(f"encode Tiny Shakespeare ({len(text):,} characters), median of {RUNS} runs")
    print(f"  tiktoken (Rust)                  {t_tiktoken:8.3f} s")
    print(f"  BPETokenizer, cold cache         {t_cold:8.3f} s   ratio {ratio:5.1f}x  (bar <= {BAR:.0f}x)")
    print(f"  BPETokenizer, warm cache         {t_warm:8.3f} s   ratio {t_warm / t_tiktoken:5.1f}x")
    print("PASS" if ratio <= BAR else "FAIL")


if __name__ == "__main__":
    main()
