"""Chapter 4, exercise 3: multi-head attention as a loop over heads, GPT-2's c_attn/c_proj layout."""
import torch
from otter.test_files import test_case

from gpt_from_scratch.attention import MultiHeadAttention
from gpt_from_scratch.exercises.ch04 import _loops
from gpt_from_scratch.exercises.core import _forbid

name = "LoopedMultiHeadAttention"
points = 1


def compare(cls, D, H, B, T, seed):
    torch.manual_seed(seed)
    reference = MultiHeadAttention(D, H).eval()
    module = cls(D, H).eval()
    module.c_attn.load_state_dict(reference.c_attn.state_dict())
    module.c_proj.load_state_dict(reference.c_proj.state_dict())
    x = torch.randn(B, T, D)
    with torch.no_grad():
        expected = reference(x)
        with _forbid("your own attention", (MultiHeadAttention, "forward")):
            got = module(x)
    got = got[0] if isinstance(got, tuple) else got
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


@test_case(hidden=True)
def six_heads(LoopedMultiHeadAttention):
    compare(LoopedMultiHeadAttention, 24, 6, 2, 9, 31)


@test_case(hidden=True)
def one_head(LoopedMultiHeadAttention):
    compare(LoopedMultiHeadAttention, 10, 1, 3, 4, 32)


@test_case(hidden=True)
def loops_over_heads(LoopedMultiHeadAttention):
    assert _loops(LoopedMultiHeadAttention.forward) is not False
    compare(LoopedMultiHeadAttention, 8, 2, 1, 3, 33)  # and still right
