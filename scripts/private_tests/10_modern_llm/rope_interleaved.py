"""Chapter 10, exercise 2: RoPE with neighbouring features (2i, 2i + 1) as pairs."""

import torch
import math
from grading.cases import Case, Step

name = "rope_interleaved"


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


def case(label, shape, positions, theta, g):
    x = g.randn(shape)
    return Case(
        label,
        [Step((x, positions, theta))],
        [expected(x, positions, theta)],
        atol=1e-4,
        rtol=1e-4,
        exact_dtype=False,
    )


def cases(g):
    late = 100 + torch.arange(4) + g.randint(0, 50)
    return [
        case("late_positions", (1, 3, 4, 12), late, 10000.0, g),
        case(
            "large_theta_unsorted_positions",
            (2, 1, 3, 6),
            g.randperm(12)[:3],
            500000.0,
            g,
        ),
    ]
