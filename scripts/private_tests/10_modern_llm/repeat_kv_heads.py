"""Chapter 10, exercise 3: repeat each key/value head n_rep times in a row, without repeat_interleave."""
import torch
from otter.test_files import test_case

from gpt_from_scratch.exercises.core import _forbid

name = "repeat_kv_heads"
points = 1
NO_INTERLEAVE = ((torch, "repeat_interleave"), (torch.Tensor, "repeat_interleave"))


def run(repeat_kv_heads, shape, n_rep, seed):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
    with _forbid("no repeat_interleave", *NO_INTERLEAVE):
        got = repeat_kv_heads(x.clone(), n_rep)
    B, H_kv, T, d = shape
    assert tuple(got.shape) == (B, H_kv * n_rep, T, d)
    for h in range(H_kv * n_rep):
        assert torch.equal(got[:, h], x[:, h // n_rep]), f"head {h} should be key/value head {h // n_rep}"


@test_case(hidden=True)
def three_groups_of_three(repeat_kv_heads):
    run(repeat_kv_heads, (2, 3, 4, 5), 3, 105)


@test_case(hidden=True)
def eight_query_heads_per_kv_head(repeat_kv_heads):
    run(repeat_kv_heads, (1, 2, 3, 4), 8, 106)
