"""Chapter 3, exercise 1: LayerNorm as a module, written by hand (γ ones, β zeros at the start)."""
import torch
import torch.nn.functional as F
from otter.test_files import test_case
from torch import nn

from gpt_from_scratch.exercises.core import _forbid

name = "LayerNormModule"
points = 1
LIBRARY = ((F, "layer_norm"), (torch, "layer_norm"), (nn.LayerNorm, "forward"))


def compare(cls, shape, eps, seed, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    D = shape[-1]
    module = cls(D, eps=eps)
    assert torch.equal(module.weight.detach(), torch.ones(D)) and torch.equal(module.bias.detach(), torch.zeros(D))
    with torch.no_grad():
        module.weight.copy_(torch.randn(D, generator=g))
        module.bias.copy_(torch.randn(D, generator=g))
    x = scale * torch.randn(shape, generator=g) + 2
    with _forbid("by hand", *LIBRARY):
        got = module(x)
    torch.testing.assert_close(got, F.layer_norm(x, (D,), module.weight, module.bias, eps), atol=1e-5, rtol=1e-4)


@test_case(hidden=True)
def batch_of_rows(LayerNormModule):
    compare(LayerNormModule, (3, 5, 12), 1e-5, 11)


@test_case(hidden=True)
def eps_dominates(LayerNormModule):
    compare(LayerNormModule, (4, 6), 0.5, 12, scale=0.01)  # eps inside the square root, biased variance
