"""Chapter 15, exercise 3: one data-parallel step done in one process: replica r's forward
on its share of the rows alone, the gradients averaged over the replicas, every optimizer
stepped once; after a few steps every replica equals one model (the package's GPT)
trained on the whole batch. The replicas are the set-up's GPT (a stand-in in the sandbox)
with the package model's weights loaded."""

import torch
from gpt_from_scratch.model import GPT, GPTConfig
from grading.cases import Case, Replicas, Setup, Step, World

name = "data_parallel_step"
BEHAVIOUR = "each replica its own rows; one model's weights on the whole batch"
CONFIG = dict(vocab_size=11, context_length=8, d_model=16, n_layers=1, n_heads=2,
              dropout=0.0)


def case(label, N, B, optimizer, kwargs, g):
    batches = [g.randint(0, 11, (B, 9)) for _ in range(3)]
    with torch.random.fork_rng():
        torch.manual_seed(g.seed())
        one = GPT(GPTConfig(**CONFIG))
    state = {k: v.clone() for k, v in one.state_dict().items()}
    steps = getattr(torch.optim, optimizer)(one.parameters(), **kwargs)
    for batch in batches:  # the whole batch, on one model
        one(batch[:, :-1], batch[:, 1:])[1].backward()
        steps.step()
        steps.zero_grad()
    expected = torch.cat([one.state_dict()[k].reshape(-1) for k in state])
    # AdamW divides each gradient by its running size plus eps: with eps 1e-5 rounding moves
    # a weight by 4e-6 at most (1e-5 with eps 1e-8), summed gradients (2x) by 6e-3 or more
    atol = 1e-4 if optimizer == "AdamW" else 1e-5

    def check(got):
        seen, weights = got[-1]
        assert len(seen) == len(batches)
        for (rows, steps), batch in zip(seen, batches):
            shares = batch[:, :-1].tensor_split(N)  # a second forward of them is allowed
            assert [set(map(tuple, r.tolist())) for r in rows] == [
                set(map(tuple, share.tolist())) for share in shares]
            assert steps == [1] * N  # every optimizer steps, once
        assert all(torch.equal(w, weights[0]) for w in weights)
        assert torch.allclose(weights[0], expected, atol=atol, rtol=1e-4)

    replicas = Replicas(N, Setup("GPT", (Setup("GPTConfig", (), CONFIG),)), state,
                        Setup(f"torch.optim.{optimizer}", (), kwargs))
    given = (World("replicas"), World("optimizers"))
    return Case(label, [Step((*given, b[:, :-1], b[:, 1:])) for b in batches], check=check,
                world=replicas, behaviour=BEHAVIOUR)


def cases(g):
    return [
        case("sgd_steps", 2, 8, "SGD", {"lr": 0.5}, g),
        case("sgd_steps_more_replicas", 4, 8, "SGD", {"lr": 0.5}, g),
        case("adamw_steps", 2, 6, "AdamW", {"lr": 1e-2, "eps": 1e-5}, g),
    ]
