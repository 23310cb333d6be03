"""Chapter 3, exercise 1: LayerNorm as a module, written by hand (weight ones, bias zeros at
the start)."""

import torch
import torch.nn.functional as F
from grading.cases import Case, Step

name = "LayerNormModule"
criteria = ("written by hand: no F.layer_norm or nn.LayerNorm",)
hints = ("layer_norm", "LayerNorm")


def case(label, shape, eps, g, scale=3.0):
    D = shape[-1]
    weight, bias = g.randn(D), g.randn(D)
    x = scale * g.randn(shape) + 2
    return Case(
        label,
        [Step((x,))],
        [torch.ones(D), torch.zeros(D), F.layer_norm(x, (D,), weight, bias, eps)],
        init=Step((D,), {"eps": eps}),
        fresh=("weight", "bias"),
        state={"weight": weight, "bias": bias},
    )


def cases(g):
    return [
        case(
            "batch_of_rows", (3, 5, g.randint(8, 16)), 1e-5, g
        ),
        case("eps_dominates", (4, 6), 0.5, g, scale=0.01),
    ]  # eps inside the root, biased variance
