"""Chapter 7, exercise 2: top-p filtering without sorting."""
import torch
from otter.test_files import test_case

from gpt_from_scratch.exercises.core import _forbid
from gpt_from_scratch.generate import top_p_filter

name = "top_p_unsorted"
points = 1
SORTING = tuple((owner, n) for owner in (torch, torch.Tensor) for n in ("sort", "argsort", "topk", "msort")
                if hasattr(owner, n))


@test_case(hidden=True)
def one_row(top_p_unsorted):
    logits = torch.log(torch.tensor([0.1, 0.35, 0.05, 0.3, 0.2])) + 0.5  # no ties
    expected = top_p_filter(logits, 0.8)
    with _forbid("no sorting", *SORTING):
        assert torch.equal(top_p_unsorted(logits.clone(), 0.8), expected)


@test_case(hidden=True)
def batch(top_p_unsorted):
    logits = 2.0 * torch.randn(3, 25, generator=torch.Generator().manual_seed(72))
    expected = top_p_filter(logits, 0.6)
    with _forbid("no sorting", *SORTING):
        assert torch.equal(top_p_unsorted(logits.clone(), 0.6), expected)
