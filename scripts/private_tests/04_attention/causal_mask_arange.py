"""Chapter 4, exercise 1: the causal mask from two aranges and a comparison, without
tril/triu."""

import torch
from grading.cases import Case, Step

name = "causal_mask_arange"
criteria = ("no tril or triu: two aranges and a comparison",)
hints = ("tril", "triu", "tril_", "triu_")
withheld = ("causal_mask",)  # the set-up's mask is the answer


def cases(g):
    sizes = [int(t) for t in g.randint(2, 17, (3,))]
    return [
        Case(f"size_{i + 1}", [Step((T,))], [torch.ones(T, T, dtype=torch.bool).tril()])
        for i, T in enumerate(sizes)  # named without T: a name never tells an input
    ]
