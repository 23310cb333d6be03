"""Chapter 9, exercise 1: a frozen linear layer plus the scaled low-rank update, B A never
formed. The last case is a wide layer of high rank, fed two tokens: forming the (d_out,
d_in) matrix B A costs d_out d_in r multiply-adds, far past the case's CPU limit (observed
from outside the student's process), while the bottleneck, x Aᵀ then Bᵀ, costs a
thousandth of that."""

import torch.nn.functional as F
from grading.cases import Case, Step

name = "lora_forward"
# d_out, d_in, r: B A is 2.7e11 multiply-adds, 6.3 s of CPU at 87 GFLOP/s (a core of the
# 2-core test machine) and over 2 s (where the limit kills) at 3 times that, about the
# fastest single core's float32 peak; the honest run copies the inputs (512 MiB) and
# applies them in 0.3 s
WIDE = (8192, 8192, 4096)
ROWS = 64  # the wide case's matrices repeat 64 drawn rows: the draw stays small


def reference(x, weight, bias, A, B, scaling):
    """The output in float64, through the bottleneck (the grader never forms B A either)."""
    x, weight, bias, A, B = (t.double() for t in (x, weight, bias, A, B))
    return (F.linear(x, weight, bias) + scaling * (x @ A.T @ B.T)).float()


def case(label, shape, out, r, scaling, g):
    x, weight = g.randn(shape), g.randn(out, shape[-1]) * 0.2
    bias, A = g.randn(out), g.randn(r, shape[-1]) * 0.3
    B = g.randn(out, r) * 0.3
    args = (x, weight, bias, A, B, scaling)
    return Case(label, [Step(args)], [reference(*args)], atol=1e-4, rtol=1e-4)


def wide_case(g):
    d_out, d_in, r = WIDE

    def tiled(rows, cols, scale):  # values of order one in the output
        return (g.randn(ROWS, cols) * scale).repeat(rows // ROWS, 1)

    x, bias = g.randn(2, d_in), g.randn(d_out)
    weight, A = tiled(d_out, d_in, d_in**-0.5), tiled(r, d_in, d_in**-0.5)
    B = tiled(d_out, r, r**-0.5)
    args = (x, weight, bias, A, B, 0.5)
    return Case(
        "wide_layer_of_high_rank_under_1.5_cpu_seconds",
        [Step(args)],
        [reference(*args)],
        atol=1e-4,
        rtol=1e-4,
        cpu_seconds=1.5,
        behaviour="the update through the r-dimensional bottleneck: forming B A runs past "
        "1.5 s of CPU",
    )


def cases(g):
    return [
        case("batch_of_sequences", (3, 4, 10), 7, 3, 1.5, g),
        case("rank_one_small_scaling", (5, 9), 9, 1, 0.25, g),
        wide_case(g),  # last: a case past its CPU limit ends the exercise's run
    ]
