"""Chapter 2, exercise 1: the sinusoidal table, float32 (T, D), with whole-tensor
operations."""

import torch

from gpt_from_scratch.embeddings import sinusoidal_positional_encoding as reference
from grading.cases import Case, Step
from grading.rules import Loop

name = "sinusoidal_table"
rules = (Loop("whole-tensor operations, no Python loop", required=False),)


def cases(g):
    sizes = [
        (
            int(torch.randint(5, 12, (1,), generator=g)),
            2 * int(torch.randint(3, 8, (1,), generator=g)),
        ),
        (int(torch.randint(400, 600, (1,), generator=g)), 48),
    ]
    return [
        Case(f"T={T}, D={D}", [Step((T, D))], [reference(T, D)], atol=1e-4, rtol=1e-4)
        for T, D in sizes
    ]
