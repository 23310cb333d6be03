"""Chapter 13, exercise 1: residual streams read out through the final LayerNorm and the output layer."""

import torch
from grading.cases import Case, Step

name = "logit_lens"


def case(label, L, B, T, D, V, eps, scale, g):
    resid = scale * g.randn(L, B, T, D) + g.randn(D)
    weight, bias, W_U = 1 + g.randn(D), g.randn(D), g.randn(V, D)
    expected = torch.nn.functional.layer_norm(resid.double(), (D,), weight.double(), bias.double(), eps)
    # no dtype is stated: any, compared in float64
    logits = (expected @ W_U.double().T).float()
    return Case(label, [Step((resid, weight, bias, W_U, eps))], [logits], atol=1e-4,
                rtol=1e-4, exact_dtype=False)


def cases(g):
    return [
        case("several_layers_and_positions", 3, 2, 7, 12, 9, 1e-5, 1.0, g),
        case("eps_that_matters", 2, 1, 3, 6, 4, 0.5, 0.1, g),
    ]
