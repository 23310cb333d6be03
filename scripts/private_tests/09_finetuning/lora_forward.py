"""Chapter 9, exercise 1: a frozen linear layer plus the scaled low-rank update, B A never
formed. Every case is a wide layer of high rank, fed a few tokens, under the same CPU limit
(observed from outside the student's process): forming the (d_out, d_in) matrix B A costs
d_out d_in r multiply-adds, far past the limit, while the bottleneck, x Aᵀ then Bᵀ, costs a
thousandth of that. No case is small enough for B A, so a submission that recognises the
rule's case (by its shape, its size, its values) has no other case to form it on."""

import torch.nn.functional as F
from grading.cases import Case, Repeated, Step

name = "lora_forward"
# d_out, d_in, r: B A is 2.7e11 multiply-adds, 6.3 s of CPU at 87 GFLOP/s (a core of the
# 2-core test machine) and over 2 s (where the limit kills) at 3 times that, about the
# fastest single core's float32 peak; the honest run makes the inputs (512 MiB) from
# their tiles and applies them in 0.3 s
WIDE = (8192, 8192, 4096)
ROWS = 64  # each case's matrices repeat 64 drawn rows: the draw stays small
CPU_SECONDS = 1.5
BEHAVIOUR = (
    "the update through the r-dimensional bottleneck: forming B A runs past 1.5 s of CPU"
)


def reference(x, bias, tiles, scaling):
    """The output in float64 from the tiles the matrices repeat, through the bottleneck (the
    grader never forms B A either): output column k is column k mod ROWS of the tiles'."""
    d_out, _, r = WIDE
    x, bias, weight, A, B = (t.double() for t in (x, bias, *tiles))
    low = (x @ A.T).tile(r // ROWS)  # x Aᵀ, (..., r)
    out = (F.linear(x, weight) + scaling * (low @ B.T)).tile(d_out // ROWS)
    return (out + bias).float()


def wide_case(label, leading, scaling, g):
    """A case of ``leading`` tokens (x is (*leading, d_in)) through the wide layer."""
    d_out, d_in, r = WIDE
    x, bias = g.randn(*leading, d_in), g.randn(d_out)
    # Values of order one in the output: weight, A and B repeat tiles of ROWS drawn rows
    tiles = [g.randn(ROWS, cols) * cols**-0.5 for cols in (d_in, d_in, r)]
    # sent as tiles, repeated in the sandbox: (d_out, d_in), (r, d_in), (d_out, r)
    weight, A, B = (Repeated(t, (n // ROWS, 1)) for t, n in zip(tiles, (d_out, r, d_out)))
    return Case(
        label,
        [Step((x, weight, bias, A, B, scaling))],
        [reference(x, bias, tiles, scaling)],
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
