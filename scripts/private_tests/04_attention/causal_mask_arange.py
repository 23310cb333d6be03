"""Chapter 4, exercise 1: the causal mask from two aranges and a comparison, without tril/triu."""
import torch
from otter.test_files import test_case

from gpt_from_scratch import attention
from gpt_from_scratch.exercises.core import _forbid

name = "causal_mask_arange"
points = 1
NO_TRIL = ((torch, "tril"), (torch, "triu"), (torch.Tensor, "tril"), (torch.Tensor, "triu"),
           (attention, "causal_mask"))


@test_case(hidden=True)
def values(causal_mask_arange):
    for T in (2, 5, 13):
        got = causal_mask_arange(T)
        assert got.dtype == torch.bool and torch.equal(got, torch.ones(T, T, dtype=torch.bool).tril())


@test_case(hidden=True)
def without_tril(causal_mask_arange):
    with _forbid("no tril", *NO_TRIL):
        got = causal_mask_arange(6)
    assert torch.equal(got, torch.ones(6, 6, dtype=torch.bool).tril())
