"""Chapter 4, exercise 2: attention with torch.einsum for both products, (output, weights)."""
import torch
import torch.nn.functional as F
from otter.test_files import test_case

from gpt_from_scratch import attention
from gpt_from_scratch.exercises.core import _forbid

name = "einsum_attention"
points = 1
NO_MATMUL = ((torch, "matmul"), (torch, "bmm"), (torch.Tensor, "__matmul__"), (torch.Tensor, "matmul"),
             (torch.Tensor, "bmm"), (F, "scaled_dot_product_attention"),
             (attention, "scaled_dot_product_attention"))


def qkv(shape_q, shape_kv, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape_q, generator=g), torch.randn(shape_kv, generator=g), torch.randn(shape_kv, generator=g)


def reference(q, k, v, mask):
    weights = torch.softmax((q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).masked_fill(~mask, float("-inf")), -1)
    return weights @ v, weights


@test_case(hidden=True)
def four_heads_causal(einsum_attention):
    q, k, v = qkv((3, 4, 7, 5), (3, 4, 7, 5), 21)
    mask = torch.ones(7, 7, dtype=torch.bool).tril()
    expected = reference(q, k, v, mask)
    with _forbid("einsum only", *NO_MATMUL):
        out, weights = einsum_attention(q, k, v, mask)
    torch.testing.assert_close(weights, expected[1])
    torch.testing.assert_close(out, expected[0])


@test_case(hidden=True)
def fewer_queries_than_keys(einsum_attention):
    q, k, v = qkv((2, 2, 6), (2, 9, 6), 22)
    mask = torch.ones(2, 9, dtype=torch.bool).tril(7)
    expected = reference(q, k, v, mask)
    with _forbid("einsum only", *NO_MATMUL):
        out, weights = einsum_attention(q, k, v, mask)
    torch.testing.assert_close(out, expected[0])
