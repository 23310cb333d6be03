"""Chapter 2, exercise 1: the sinusoidal table, float32 (T, D), with whole-tensor
operations. The last case is long enough that a Python loop over its entries runs past the
case's CPU limit (observed from outside the student's process), while whole-tensor code
takes a fraction of it."""

from gpt_from_scratch.embeddings import sinusoidal_positional_encoding as reference
from grading.cases import Case, Step

name = "sinusoidal_table"
criteria = (
    "whole-tensor operations: no Python loop over the positions (a loop per entry is "
    "caught by the long table's CPU limit; a loop per position or per feature is for you "
    "to judge)",
)
LONG = (32_000, 64)  # 2 M entries: 0.05 s whole-tensor, 9 s in a loop per entry (2 cores)


def cases(g):
    sizes = [(g.randint(5, 12), 2 * g.randint(3, 8)), (g.randint(400, 600), 48)]
    return [
        Case(label, [Step((T, D))], [reference(T, D)], atol=1e-4, rtol=1e-4)
        for label, (T, D) in zip(("short_table", "medium_table"), sizes)
    ] + [
        Case(
            "long_table_under_3_cpu_seconds",
            [Step(LONG)],
            [reference(*LONG)],
            atol=1e-2,  # float32 angles of positions up to 32,000
            rtol=1e-4,
            cpu_seconds=3.0,
            behaviour="a whole-tensor table: a loop over every entry runs past 3 s of CPU",
        )
    ]
