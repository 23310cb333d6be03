"""Chapter 5, exercise 2: a parallel block, x + attn(ln_1(x)) + mlp(ln_1(x))."""

import torch

from gpt_from_scratch.model import Block, GPTConfig
from grading.cases import Case, Step, Setup

name = "ParallelBlock"


def case(label, preset, B, T, g):
    config = GPTConfig.from_preset("tiny", **preset)
    reference = Block(config).eval()
    with torch.no_grad():
        for p in reference.parameters():
            p.copy_(0.2 * g.randn(p.shape))
        reference.ln_1.weight.add_(1.0)
        x = g.randn(B, T, config.d_model)
        h = reference.ln_1(x)
        expected = x + reference.attn(h) + reference.mlp(h)
    state = {k: v for k, v in reference.state_dict().items() if not k.startswith("ln_2.")}
    return Case(
        label,
        [Step((x,))],
        [expected],
        init=Step((Setup("GPTConfig.from_preset", ("tiny",), preset),)),
        state=state,
    )


def cases(g):
    return [
        case(
            "wide",
            {"d_model": 40, "n_heads": 5},
            2,
            g.randint(4, 9),
            g,
        ),
        case("one_token", {}, 3, 1, g),
    ]
