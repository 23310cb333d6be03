"""Checkers for the exercises of Chapter 5 (the GPT model): ``check_parallel_block``."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ..model import Block, GPTConfig
from .core import FAIL_MARK, _Case, _Mismatch, _call, _compare_values, _describe, _print, _require_tensor, _run_cases

__all__ = ["check_parallel_block"]


def check_parallel_block(candidate) -> bool:
    """Check a **parallel** block class (GPT-J, PaLM), built as ``ParallelBlock(config)`` with GPT-2's
    submodules ``ln_1``, ``attn``, ``mlp`` (no ``ln_2``): ``y = x + attn(ln_1(x)) + mlp(ln_1(x))``.

    The checker loads the weights of a random package ``Block`` into ``ln_1``, ``attn`` and ``mlp``, so
    the result can be compared with the formula computed from that block's own modules.
    """
    if not (isinstance(candidate, type) and issubclass(candidate, nn.Module)):
        _print(f"{FAIL_MARK} check_parallel_block: expected a module class, got {_describe(candidate)}.",
               "   hint: pass the class itself (ParallelBlock), built as ParallelBlock(config)")
        return False
    if issubclass(candidate, Block):
        _print(f"{FAIL_MARK} check_parallel_block: your class is the package's sequential Block.",
               "   hint: write your own nn.Module whose forward adds attn and mlp of the same ln_1(x)")
        return False
    specs = [("tiny: D=32, H=2, x of shape (2, 16, 32)", dict(), 2, 1),
             ("D=48, H=4, x of shape (3, 5, 48)", dict(d_model=48, n_heads=4), 3, 2)]

    def make(overrides: dict, B: int, seed: int) -> Callable[[], None]:
        def run() -> None:
            config = GPTConfig.from_preset("tiny", **overrides)
            torch.manual_seed(seed)
            reference = Block(config).eval()
            with torch.no_grad():  # LayerNorm starts at weight 1, bias 0: give it values that show
                reference.ln_1.weight.uniform_(0.5, 1.5)
                reference.ln_1.bias.normal_(0, 0.1)
            x = torch.randn(B, config.context_length if B == 2 else 5, config.d_model)
            module = _call(candidate, config)
            state = {k: v for k, v in reference.state_dict().items() if not k.startswith("ln_2.")}
            missing, _ = _call(module.load_state_dict, state, strict=False)
            if missing or any(hasattr(module, name) is False for name in ("ln_1", "attn", "mlp")):
                raise _Mismatch(f"your module has parameters the block does not: {missing}",
                                hint="name the submodules like GPT-2: self.ln_1 = LayerNorm(D), "
                                     "self.attn = MultiHeadAttention(D, H), self.mlp = FeedForward(config)")
            module.eval()
            with torch.no_grad():
                got = _call(module, x.clone())
                h = reference.ln_1(x)
                expected = x + reference.attn(h) + reference.mlp(h)
                sequential = reference(x)
                no_residual = reference.attn(h) + reference.mlp(h)
                raw_mlp = x + reference.attn(h) + reference.mlp(x)
            got = _require_tensor(got, expected, "y", shape_hint="the output has the shape of x: (B, T, D)")
            _compare_values(got, expected, atol=1e-5, rtol=1e-4, known_mistakes=[
                (sequential, "that is GPT-2's sequential block: here attn and mlp both read the same ln_1(x) "
                             "and their outputs are added to x together"),
                (no_residual, "keep the residual stream: y = x + attn(ln_1(x)) + mlp(ln_1(x))"),
                (raw_mlp, "the mlp reads the normalized input too: mlp(ln_1(x)), not mlp(x)"),
            ], default_hint="h = self.ln_1(x); return x + self.attn(h) + self.mlp(h)", what="y")
        return run

    cases = [_Case(label, make(overrides, B, seed), "the class is built as ParallelBlock(config) and called "
                                                    "as module(x), x of shape (B, T, D)")
             for label, overrides, B, seed in specs]
    return _run_cases("check_parallel_block", cases)
