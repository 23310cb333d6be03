"""Chapter 10, exercise 2: RoPE with neighbouring features (2i, 2i + 1) as pairs."""
import math

import torch
from otter.test_files import test_case

name = "rope_interleaved"
points = 1


def expected(x, positions, theta):
    out = torch.empty_like(x, dtype=torch.float64)
    d = x.size(-1)
    for t, p in enumerate(positions.tolist()):
        for i in range(d // 2):
            phi = p * theta ** (-2 * i / d)
            a, b = x[..., t, 2 * i].double(), x[..., t, 2 * i + 1].double()
            out[..., t, 2 * i] = a * math.cos(phi) - b * math.sin(phi)
            out[..., t, 2 * i + 1] = a * math.sin(phi) + b * math.cos(phi)
    return out


@test_case(hidden=True)
def late_positions(rope_interleaved):
    x = torch.randn(1, 3, 4, 12, generator=torch.Generator().manual_seed(103))
    positions = torch.tensor([100, 101, 102, 103])
    got = rope_interleaved(x.clone(), positions, 10000.0)
    torch.testing.assert_close(got.double(), expected(x, positions, 10000.0), atol=1e-4, rtol=1e-4)


@test_case(hidden=True)
def large_theta_unsorted_positions(rope_interleaved):
    x = torch.randn(2, 1, 3, 6, generator=torch.Generator().manual_seed(104))
    positions = torch.tensor([5, 0, 9])
    got = rope_interleaved(x.clone(), positions, 500000.0)
    torch.testing.assert_close(got.double(), expected(x, positions, 500000.0), atol=1e-4, rtol=1e-4)
