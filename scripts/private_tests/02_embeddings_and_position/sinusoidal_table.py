"""Chapter 2, exercise 1: the sinusoidal table, float32 (T, D), with whole-tensor operations."""
import torch
from otter.test_files import test_case

from gpt_from_scratch.embeddings import sinusoidal_positional_encoding as reference

name = "sinusoidal_table"
points = 1


@test_case(hidden=True)
def small(sinusoidal_table):
    got = sinusoidal_table(7, 10)
    assert got.shape == (7, 10) and got.dtype == torch.float32
    torch.testing.assert_close(got, reference(7, 10), atol=1e-5, rtol=1e-5)


@test_case(hidden=True)
def long(sinusoidal_table):
    torch.testing.assert_close(sinusoidal_table(513, 48), reference(513, 48), atol=1e-4, rtol=1e-4)


@test_case(hidden=True)
def whole_tensor(sinusoidal_table):
    from gpt_from_scratch.exercises.core import _python_loops

    assert _python_loops(sinusoidal_table) is not True  # the exercise's rule: no Python loop
    torch.testing.assert_close(sinusoidal_table(9, 6), reference(9, 6), atol=1e-5, rtol=1e-5)
