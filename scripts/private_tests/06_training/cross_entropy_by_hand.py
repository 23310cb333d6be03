"""Chapter 6, exercise 2: cross-entropy from max, exp, log and gather, without library losses."""
import torch
import torch.nn.functional as F
from otter.test_files import test_case

from gpt_from_scratch.exercises.core import _forbid

name = "cross_entropy_by_hand"
points = 1
LIBRARY = ((F, "cross_entropy"), (F, "log_softmax"), (F, "nll_loss"), (torch, "log_softmax"),
           (torch.Tensor, "log_softmax"), (torch, "logsumexp"), (torch.Tensor, "logsumexp"))


def compare(candidate, shape, scale, seed):
    g = torch.Generator().manual_seed(seed)
    logits = scale * torch.randn(shape, generator=g)
    targets = torch.randint(shape[-1], shape[:2], generator=g)
    expected = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
    with _forbid("by hand", *LIBRARY):
        got = candidate(logits, targets)
    torch.testing.assert_close(got.reshape(()), expected, atol=1e-4, rtol=1e-4)


@test_case(hidden=True)
def ordinary(cross_entropy_by_hand):
    compare(cross_entropy_by_hand, (3, 7, 50), 2.0, 61)


@test_case(hidden=True)
def huge_logits(cross_entropy_by_hand):
    compare(cross_entropy_by_hand, (2, 4, 11), 200.0, 62)
