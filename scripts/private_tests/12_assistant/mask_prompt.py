"""Chapter 12, exercise 1: the targets of a prompt and its answer, shifted, the prompt's set to
-100."""

import torch
from grading.cases import Case, Step

name = "mask_prompt"


def case(label, T, n_prompt, g):
    ids = g.randint(0, 69, (T,))
    expected = ids[1:].clone()
    expected[: n_prompt - 1] = -100  # targets 0 .. n_prompt - 2 are prompt tokens 1 .. n_prompt - 1
    # int64, as ids are: the dtype cross-entropy's targets must have (with -100 ignored)
    return Case(label, [Step((ids, n_prompt))], [expected])


def cases(g):
    return [
        case("long_prompt_short_answer", 40, 33, g),
        case("short_prompt_long_answer", 30, 3, g),
    ]
