"""Chapter 10, exercise 1: RMSNorm as a module, written out (no F.rms_norm, no
nn.RMSNorm)."""

import torch
from grading.cases import Case, Step

name = "RMSNormModule"
criteria = ("written out: no F.rms_norm or nn.RMSNorm",)
hints = ("rms_norm", "RMSNorm")


def case(label, shape, eps, g, mean=0.0):
    D = shape[-1]
    x = mean + g.randn(shape)
    weight = 1 + 0.3 * g.randn(D)
    expected = (
        x.double()
        / torch.sqrt(x.double().pow(2).mean(-1, keepdim=True) + eps)
        * weight.double()
    )
    return Case(
        label,
        [Step((x,))],
        [torch.ones(D), expected],
        init=Step((D,), {"eps": eps}),
        fresh=("weight",),
        state={"weight": weight},
        exact_dtype=False,
    )


def cases(g):
    return [
        case("wide_tokens", (3, 4, 48), 1e-6, g),
        case("shifted_rows_and_large_eps", (5, 12), 0.5, g, mean=4.0),
    ]
