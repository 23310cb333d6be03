"""Chapter 12, exercise 3: the sigmoid DPO loss from summed log-probabilities, averaged over
the pairs."""

import torch
from grading.cases import Case, Step

name = "dpo_loss"


def case(label, n, beta, g):
    pc, pr, rc, rr = (-40 * g.rand(n) for _ in range(4))
    z = beta * ((pc.double() - rc.double()) - (pr.double() - rr.double()))
    expected = torch.nn.functional.softplus(-z).mean().float()  # -log sigmoid(z) = log(1 + e^-z)
    # no dtype is stated: any, compared in float64
    return Case(label, [Step((pc, pr, rc, rr, beta))], [expected], atol=1e-5, rtol=1e-4,
                exact_dtype=False)


def cases(g):
    return [
        case("eight_pairs_beta_0.1", 8, 0.1, g),
        case("three_pairs_beta_1", 3, 1.0, g),
    ]
