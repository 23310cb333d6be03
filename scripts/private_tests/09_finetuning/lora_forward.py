"""Chapter 9, exercise 1: a frozen linear layer plus the scaled low-rank update, B A never
formed. Every case is a wide layer of high rank, fed a few tokens, under the same CPU limit
(observed from outside the student's process): forming the (d_out, d_in) matrix B A costs
d_out d_in r multiply-adds, far past the limit, while the bottleneck, x Aᵀ then Bᵀ, costs a
thousandth of that. No case is small enough for B A, so a submission that recognises the
rule's case (by its shape, its size, its values) has no other case to form it on."""

import torch.nn.functional as F
from grading.cases import Case, Randn, Step

name = "lora_forward"
# d_out, d_in, r: B A is 2.7e11 multiply-adds, 5.5 s of CPU on a core of the 2-core test
# machine and over 1.5 s (where the limit kills) on one 3 times as fast, about the fastest
# single core's float32 peak; the honest run applies the inputs (512 MiB, made in the
# sandbox from their seeds before the case's clock starts) in 0.07 s. The matrices are
# random through and through: no structure (repeated rows, low rank) makes B A cheaper
WIDE = (8192, 8192, 4096)
CPU_SECONDS = 1.5
BEHAVIOUR = (
    "the update through the r-dimensional bottleneck: forming B A runs past 1.5 s of CPU"
)


def reference(x, weight, bias, A, B, scaling):
    """The output in float64, through the bottleneck (the grader never forms B A either)."""
    x, weight, bias, A, B = (t.double() for t in (x, weight, bias, A, B))
    return (F.linear(x, weight, bias) + scaling * (x @ A.T @ B.T)).float()


def wide_case(label, leading, scaling, g):
    """A case of ``leading`` tokens (x is (*leading, d_in)) through the wide layer."""
    d_out, d_in, r = WIDE
    x, bias = g.randn(*leading, d_in), g.randn(d_out)
    # values of order one in the output; each matrix sent as its seed, made in the sandbox
    shapes = {"weight": (d_out, d_in), "A": (r, d_in), "B": (d_out, r)}
    weight, A, B = (Randn(s, g.seed(), s[1] ** -0.5) for s in shapes.values())
    return Case(
        label,
        [Step((x, weight, bias, A, B, scaling))],
        [reference(x, weight.tensor(), bias, A.tensor(), B.tensor(), scaling)],
        atol=1e-4,
        rtol=1e-4,
        cpu_seconds=CPU_SECONDS,
        behaviour=BEHAVIOUR,
    )


def cases(g):
    return [
        wide_case("a_batch_of_sequences", (1, g.randint(2, 4)), 2.0, g),
        wide_case("rows_of_tokens_scaled_by_half", (g.randint(2, 4),), 0.5, g),
    ]
