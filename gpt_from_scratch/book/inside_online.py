"""Chapter 13's Colab track: GPT-2 small's induction heads on repeated random tokens, found by
attention and by activation patching; offline, a sentence that says what it does."""

from __future__ import annotations

import torch

from .. import interp
from ..hf_weights import WeightsUnavailableError, from_pretrained
from .inside import rank_correlation, top_heads


def online_run(n: int = 20, half: int = 50, seed: int = 0, model=None) -> str:
    """Rows ``[<|endoftext|>, s, s]`` of ``half`` random tokens, and corrupted rows whose first ``s``
    is other tokens: each head's induction score (attention from position t of the second copy
    to the token after t's earlier copy) and its patching share of the second copy's
    log-probability. ``model`` defaults to GPT-2 small's weights."""
    if model is None:
        try:
            model = from_pretrained("gpt2")
        except (WeightsUnavailableError, OSError):
            return ("*Not run here*: GPT-2's weights cannot be reached. With them, this cell makes "
                    f"{n} sequences of {half} random tokens repeated, finds each of the 144 heads' "
                    "induction score and patching share, and names the heads both rankings put first "
                    "(Olsson et al. found 5.1, 5.5, 6.9, 7.2 and 7.10).")
    model.eval()
    g = torch.Generator().manual_seed(seed)
    V, L = model.config.vocab_size, len(model.blocks)
    first, other = (torch.randint(0, V - 1, (n, half), generator=g) for _ in range(2))
    bos = torch.full((n, 1), V - 1)  # <|endoftext|> is GPT-2's last id
    clean = torch.cat([bos, first, first], 1)  # (n, 2 half + 1)
    corrupted = torch.cat([bos, other, first], 1)
    mask = torch.zeros_like(clean, dtype=torch.bool)
    mask[:, half + 1:-1] = True  # the second copy, each position predicting the next token

    def metric(logits):
        return interp.mean_logprob(logits, clean.roll(-1, 1), mask)
    shares = interp.patching_shares(model, clean, corrupted, metric)
    _, cache = interp.run_with_hooks(model, clean, read=[f"blocks.{l}.attn.pattern" for l in range(L)])
    t = torch.arange(half + 1, 2 * half + 1)  # queries in the second copy
    scores = torch.stack([cache[f"blocks.{l}.attn.pattern"][:, :, t, t - half + 1].mean((0, 2))
                          for l in range(L)])  # (L, H)
    return (f"On {n} rows of {half} random tokens repeated: the heads with the highest induction "
            f"score are {top_heads(scores, 5)}; patching picks {top_heads(shares, 5)} (shares of "
            f"the gap restored, summing to {float(shares.sum()):.2f}); Spearman's rank correlation "
            f"between the two rankings over {shares.numel()} heads is "
            f"{rank_correlation(shares, scores):.2f}.")
