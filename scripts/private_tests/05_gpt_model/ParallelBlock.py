"""Chapter 5, exercise 2: a parallel block, x + attn(ln_1(x)) + mlp(ln_1(x))."""
import torch
from otter.test_files import test_case

from gpt_from_scratch.model import Block, GPTConfig

name = "ParallelBlock"
points = 1


def compare(cls, config, B, T, seed):
    torch.manual_seed(seed)
    reference = Block(config).eval()
    with torch.no_grad():
        reference.ln_1.weight.uniform_(0.5, 1.5)
        reference.ln_1.bias.normal_(0, 0.2)
    module = cls(config).eval()
    state = {k: v for k, v in reference.state_dict().items() if not k.startswith("ln_2.")}
    missing, _ = module.load_state_dict(state, strict=False)
    assert not missing
    x = torch.randn(B, T, config.d_model)
    with torch.no_grad():
        h = reference.ln_1(x)
        torch.testing.assert_close(module(x), x + reference.attn(h) + reference.mlp(h), atol=1e-5, rtol=1e-4)


@test_case(hidden=True)
def wide(ParallelBlock):
    compare(ParallelBlock, GPTConfig.from_preset("tiny", d_model=40, n_heads=5), 2, 7, 41)


@test_case(hidden=True)
def one_token(ParallelBlock):
    compare(ParallelBlock, GPTConfig.from_preset("tiny"), 3, 1, 42)
