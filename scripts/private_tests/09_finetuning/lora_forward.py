"""Chapter 9, exercise 1: a frozen linear layer plus the scaled low-rank update, B A never
formed."""

import torch
from grading.cases import Case, Step

name = "lora_forward"
criteria = ("B A never formed: the update goes through the r-dimensional bottleneck",)


def case(label, shape, out, r, scaling, g):
    x, weight = (
        g.randn(shape),
        g.randn(out, shape[-1]) * 0.2,
    )
    bias, A = g.randn(out), g.randn(r, shape[-1]) * 0.3
    B = g.randn(out, r) * 0.3
    delta = torch.stack([torch.outer(B[:, i], A[i]) for i in range(r)]).sum(
        0
    )  # B A, rank by rank
    expected = torch.nn.functional.linear(x, weight + scaling * delta, bias)
    return Case(
        label, [Step((x, weight, bias, A, B, scaling))], [expected], atol=1e-4, rtol=1e-4
    )


def cases(g):
    return [
        case("batch_of_sequences", (3, 4, 10), 7, 3, 1.5, g),
        case("rank_one_small_scaling", (5, 9), 9, 1, 0.25, g),
    ]
