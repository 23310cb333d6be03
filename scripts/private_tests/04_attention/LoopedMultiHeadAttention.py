"""Chapter 4, exercise 3: multi-head attention as a loop over heads, GPT-2's c_attn/c_proj
layout."""

import torch

from gpt_from_scratch.attention import MultiHeadAttention
from grading.cases import Case, Step

name = "LoopedMultiHeadAttention"
criteria = ("a Python loop over the heads in forward",)


def case(label, D, H, B, T, g):
    reference = MultiHeadAttention(D, H).eval()
    with torch.no_grad():
        for p in reference.parameters():
            p.copy_(0.3 * g.randn(p.shape))
    x = g.randn(B, T, D)
    with torch.no_grad():
        expected = reference(x)
    state = {
        k: v
        for k, v in reference.state_dict().items()
        if k.startswith(("c_attn.", "c_proj."))
    }
    return Case(label, [Step((x,))], [expected], init=Step((D, H)), state=state)


def cases(g):
    return [
        case("six_heads", 24, 6, 2, g.randint(5, 12), g),
        case("one_head", 10, 1, 3, 4, g),
    ]
