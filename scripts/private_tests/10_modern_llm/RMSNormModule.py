"""Chapter 10, exercise 1: RMSNorm as a module, written out (no F.rms_norm, no nn.RMSNorm)."""
import torch
import torch.nn.functional as F
from torch import nn
from otter.test_files import test_case

from gpt_from_scratch.exercises.core import _forbid

name = "RMSNormModule"
points = 1
NO_LIBRARY = ((F, "rms_norm"), (torch, "rms_norm"), (nn.RMSNorm, "forward"))


def run(RMSNormModule, shape, eps, seed, mean=0.0):
    g = torch.Generator().manual_seed(seed)
    D = shape[-1]
    x = mean + torch.randn(shape, generator=g)
    weight = 1 + 0.3 * torch.randn(D, generator=g)
    module = RMSNormModule(D, eps=eps)
    assert torch.equal(module.weight.detach(), torch.ones(D)), "weight must start at ones"
    with torch.no_grad():
        module.weight.copy_(weight)
    with _forbid("write RMSNorm yourself", *NO_LIBRARY):
        got = module(x)
    expected = x.double() / torch.sqrt(x.double().pow(2).mean(-1, keepdim=True) + eps) * weight.double()
    torch.testing.assert_close(got.double(), expected, atol=1e-5, rtol=1e-5)


@test_case(hidden=True)
def wide_tokens(RMSNormModule):
    run(RMSNormModule, (3, 4, 48), 1e-6, 101)


@test_case(hidden=True)
def shifted_rows_and_large_eps(RMSNormModule):
    run(RMSNormModule, (5, 12), 0.5, 102, mean=4.0)
