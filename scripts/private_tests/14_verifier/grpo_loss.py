"""Chapter 14, exercise 2: the clipped per-token loss, averaged over every answer token of the
batch ("dapo")."""

import torch
from grading.cases import Case, Step

name = "grpo_loss"


def case(label, N, C, drift, epsilon, g):
    logps = -3 * g.rand(N, C)
    old = logps + drift * g.randn(N, C)  # drift 0: on-policy, the ratio is 1
    advantages = g.randn(N)
    lengths = g.randint(1, C + 1, (N,))
    mask = (torch.arange(C)[None] < lengths[:, None]).float()  # (N, C)
    ratio = torch.exp(logps.double() - old.double())
    A = advantages.double()[:, None]
    per_token = -torch.min(ratio * A, ratio.clamp(1 - epsilon, 1 + epsilon) * A)
    expected = ((per_token * mask).sum() / mask.sum()).float()
    return Case(label, [Step((logps, old, advantages, mask, epsilon))], [expected],
                atol=1e-5, rtol=1e-4)


def cases(g):
    return [
        case("off_policy_the_clip_binds", 12, 9, 0.6, 0.2, g),
        case("on_policy_ratio_one", 8, 7, 0.0, 0.2, g),
    ]
