"""Chapter 2, exercise 1: the sinusoidal table, float32 (T, D), with whole-tensor
operations. Every case is long enough that a loop writing each entry into the tensor runs
past the case's CPU limit (observed from outside the student's process), while whole-tensor
code takes a fraction of it: no case is small enough for that loop, so a submission that
recognises the rule's case has no other case to loop on."""

from gpt_from_scratch.embeddings import sinusoidal_positional_encoding as reference
from grading.cases import Case, Step

name = "sinusoidal_table"
criteria = (
    "whole-tensor operations: no Python loop over the positions (a loop that writes each "
    "entry into the tensor is caught by every case's CPU limit; a loop per position or per "
    "feature, or one over the entries that builds Python lists, is for you to judge)",
)
# Each table holds 6.1 to 9.6 M entries (positions up to 40,000: float32 angles stay within
# the tolerance). On a core of the 2-core test machine whole-tensor code takes at most
# 0.14 s of CPU, a loop that writes each entry into the tensor 12 s or more (over 3 s on a
# core 3 times as fast); a loop over the entries that builds Python lists takes 1.0 to
# 1.6 s and passes: the criterion says so
SHAPES = {  # name: (T range, D / 2 range)
    "many_positions": ((32_000, 40_000), (96, 120)),
    "positions_and_features": ((16_000, 20_000), (192, 240)),
    "many_features": ((2_000, 2_500), (1_536, 1_920)),
}


def cases(g):
    sizes = {
        label: (g.randint(*t), 2 * g.randint(*half)) for label, (t, half) in SHAPES.items()
    }
    return [
        Case(
            label,
            [Step((T, D))],
            [reference(T, D)],
            atol=1e-2,  # float32 angles of positions up to 40,000
            rtol=1e-4,
            cpu_seconds=3.0,
            behaviour="a whole-tensor table: a loop over every entry runs past 3 s of CPU",
        )
        for label, (T, D) in sizes.items()
    ]
