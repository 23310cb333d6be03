"""Chapter 9, exercise 1: a frozen linear layer plus the scaled low-rank update B A x."""
import torch
from otter.test_files import test_case

name = "lora_forward"
points = 1


def inputs(shape, out, r, seed):
    g = torch.Generator().manual_seed(seed)
    x, weight = torch.randn(shape, generator=g), torch.randn(out, shape[-1], generator=g) * 0.2
    bias, A = torch.randn(out, generator=g), torch.randn(r, shape[-1], generator=g) * 0.3
    B = torch.randn(out, r, generator=g) * 0.3
    return x, weight, bias, A, B


def expected(x, weight, bias, A, B, scaling):
    delta = torch.stack([torch.outer(B[:, i], A[i]) for i in range(A.shape[0])]).sum(0)  # B A, rank by rank
    return torch.nn.functional.linear(x, weight + scaling * delta, bias)


@test_case(hidden=True)
def batch_of_sequences(lora_forward):
    args = inputs((3, 4, 10), 7, 3, 91)
    torch.testing.assert_close(lora_forward(*args, 1.5), expected(*args, 1.5), atol=1e-4, rtol=1e-4)


@test_case(hidden=True)
def rank_one_small_scaling(lora_forward):
    args = inputs((5, 9), 9, 1, 92)
    torch.testing.assert_close(lora_forward(*args, 0.25), expected(*args, 0.25), atol=1e-4, rtol=1e-4)
