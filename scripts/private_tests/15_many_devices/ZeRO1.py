"""Chapter 15, exercise 2: ZeRO-1 on N ranks: each rank steps AdamW on its own chunk, then
gathers every rank's updated chunk into its weights with one all_gather a step; after each
step the weights equal AdamW's on the whole vector, and no rank keeps more than its chunk,
its gradient and AdamW's state for it. The ranks are threads of the case's process
(grading.ranks)."""

import math

import torch
from grading import ranks
from grading.cases import Case, Ranks, Step, World
from torch import nn

name = "ZeRO1"
BEHAVIOUR = "AdamW's weights, one all_gather a step, state for a chunk only"


def case(label, N, P, weight_decay, g):
    start, grads = g.randn(P), [g.randn(P) for _ in range(3)]
    adamw = {"lr": 0.1, "weight_decay": weight_decay}
    reference = nn.Parameter(start.clone())
    optimizer = torch.optim.AdamW([reference], **adamw)
    after = []  # the whole vector after each step
    for grad in grads:
        reference.grad = grad.clone()
        optimizer.step()
        after.append(reference.detach().clone())
    chunk = math.ceil(P / N)

    def check(got):
        _, record = ranks.read(got)
        assert all(held <= chunk for held in record["built"])
        for rank in range(N):
            weights = record["inputs"][rank][0]
            assert weights.shape == (P,)
            assert torch.allclose(weights, after[-1], atol=1e-5, rtol=1e-5)
            largest, total, state, states = record["kept"][rank]
            assert largest <= chunk and total <= 4 * chunk + 8
            assert state <= 2 * chunk + states
            assert record["steps"][rank] == list(range(1, len(grads) + 1))
            for given, whole in zip(record["gathered"][rank], after):
                mine = whole.tensor_split(N)[rank]
                assert given.shape == mine.shape
                assert torch.allclose(given, mine, atol=1e-5, rtol=1e-5)

    steps = [Step((grad, World("all_gather")), method="step") for grad in grads]
    return Case(label, steps, init=Step((start, World("rank"), N), adamw), check=check,
                world=Ranks(N), behaviour=BEHAVIOUR)


def cases(g):
    N = g.randint(2, 4)
    return [
        case("adamw_with_weight_decay", N, N * g.randint(8, 20), 0.1, g),
        case("chunks_of_unequal_size", 3, 3 * g.randint(8, 20) + g.randint(1, 3), 0.1, g),
        case("adamw_without_weight_decay", 4, 4 * g.randint(8, 20) + 2, 0.0, g),
    ]
