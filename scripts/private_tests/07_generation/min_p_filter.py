"""Chapter 7, exercise 1: min-p filtering."""
import torch
from otter.test_files import test_case

name = "min_p_filter"
points = 1


def expected(logits, min_p):
    p = torch.softmax(logits, dim=-1)
    return logits.masked_fill(p < min_p * p.max(dim=-1, keepdim=True).values, float("-inf"))


@test_case(hidden=True)
def one_row(min_p_filter):
    logits = torch.log(torch.tensor([0.4, 0.02, 0.3, 0.08, 0.2])) + 1.0
    assert torch.equal(min_p_filter(logits.clone(), 0.4), expected(logits, 0.4))  # keeps 0.4, 0.3, 0.2


@test_case(hidden=True)
def batch(min_p_filter):
    logits = 2.5 * torch.randn(4, 30, generator=torch.Generator().manual_seed(71))
    assert torch.equal(min_p_filter(logits.clone(), 0.2), expected(logits, 0.2))
