"""Chapter 14, exercise 2: the clipped per-token loss, averaged over every answer token of the
batch ("dapo"), with its gradient with respect to logps (the exercise asks for it: a value
without the graph that gives it scores 0)."""

import torch
from grading.cases import Case, Step

name = "grpo_loss"


def loss(logps, old, advantages, mask, epsilon):
    ratio = torch.exp(logps - old)
    A = advantages[:, None]
    per_token = -torch.min(ratio * A, ratio.clamp(1 - epsilon, 1 + epsilon) * A)
    return (per_token * mask).sum() / mask.sum()


def case(label, N, C, drift, epsilon, g):
    logps = -3 * g.rand(N, C)
    old = logps + drift * g.randn(N, C)  # drift 0: on-policy, the ratio is 1
    advantages = g.randn(N)
    lengths = g.randint(1, C + 1, (N,))
    mask = (torch.arange(C)[None] < lengths[:, None]).float()  # (N, C)
    wrt = logps.double().requires_grad_()
    expected = loss(wrt, old.double(), advantages.double(), mask.double(), epsilon)
    (dlogps,) = torch.autograd.grad(expected, wrt)
    step = Step((logps, old, advantages, mask, epsilon), gradient=(0, dlogps.float()))
    # no dtype is stated: any, compared in float64
    return Case(label, [step], [expected.detach().float()], atol=1e-5, rtol=1e-4,
                exact_dtype=False)


def cases(g):
    return [
        case("off_policy_the_clip_binds", 12, 9, 0.6, 0.2, g),
        case("on_policy_ratio_one", 8, 7, 0.0, 0.2, g),
    ]
