"""Chapter 4, exercise 1: the causal mask from two aranges and a comparison, without
tril/triu."""

import torch
from grading.cases import Case, Step
from grading.rules import Forbid

name = "causal_mask_arange"
rules = (Forbid("no tril", ("tril", "triu", "tril_", "triu_", "causal_mask")),)


def cases(g):
    sizes = [int(t) for t in torch.randint(2, 17, (3,), generator=g)]
    return [
        Case(f"T={T}", [Step((T,))], [torch.ones(T, T, dtype=torch.bool).tril()])
        for T in sizes
    ]
