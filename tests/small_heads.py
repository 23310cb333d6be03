"""A small GPT whose heads matter and differ, and token ids for it: the models that
tests/test_interp.py and tests/test_patching.py look inside."""

from __future__ import annotations

import torch

from gpt_from_scratch.model import GPT, GPTConfig


def small_model(seed=0, **overrides) -> GPT:
    torch.manual_seed(seed)
    cfg = dict(vocab_size=50, context_length=16, d_model=32, n_layers=3, n_heads=4, dropout=0.0)
    model = GPT(GPTConfig(**(cfg | overrides))).eval()
    with torch.no_grad():  # larger than GPT-2's initialisation, so that heads matter and differ
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return model


def small_idx(seed=1, B=3, T=10, V=50) -> torch.Tensor:
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))
