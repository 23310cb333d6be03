"""Chapter 10, exercise 3: repeat each key/value head n_rep times in a row, without
repeat_interleave."""

import torch
from grading.cases import Case, Step

name = "repeat_kv_heads"
criteria = ("no repeat_interleave",)
hints = ("repeat_interleave",)


def case(label, shape, n_rep, g):
    x = g.randn(shape)
    return Case(label, [Step((x, n_rep))], [x.repeat_interleave(n_rep, dim=1)])


def cases(g):
    return [
        case("three_groups_of_three", (2, 3, 4, 5), 3, g),
        case("eight_query_heads_per_kv_head", (1, 2, 3, 4), 8, g),
    ]
