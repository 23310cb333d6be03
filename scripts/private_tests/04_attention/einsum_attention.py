"""Chapter 4, exercise 2: attention with torch.einsum for both products, (output,
weights)."""

import torch
from grading.cases import Case, Step

name = "einsum_attention"
criteria = ("torch.einsum for both products (no @, matmul, bmm)",)
hints = ("@", "matmul", "bmm", "mm", "baddbmm")
withheld = ("scaled_dot_product_attention",)  # the set-up's attention is the answer


def reference(q, k, v, mask):
    scores = (q.double() @ k.double().transpose(-2, -1) / q.shape[-1] ** 0.5).masked_fill(
        ~mask, float("-inf")
    )
    weights = torch.softmax(scores, -1)
    return [(weights @ v.double()).float(), weights.float()]


def case(label, shape_q, shape_kv, mask, g):
    q, k, v = (
        g.randn(shape_q),
        g.randn(shape_kv),
        g.randn(shape_kv),
    )
    return Case(label, [Step((q, k, v, mask))], [reference(q, k, v, mask)])


def cases(g):
    T = g.randint(5, 10)
    return [
        case(
            "four_heads_causal",
            (3, 4, T, 5),
            (3, 4, T, 5),
            torch.ones(T, T, dtype=torch.bool).tril(),
            g,
        ),
        case(
            "fewer_queries_than_keys",
            (2, 2, 6),
            (2, 9, 6),
            torch.ones(2, 9, dtype=torch.bool).tril(7),
            g,
        ),
    ]
