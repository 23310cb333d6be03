"""Chapter 16, exercise 1: one block of scores folded into the running maximum m (Q, 1),
sum l (Q, 1) and unnormalized output acc (Q, d). Each step starts from the state of the
blocks before it and must return the state of the blocks up to it; both are written here
directly, not by the update: after blocks 1..b, m is the largest score seen, l the sum of
exp(s - m) over the scores seen, acc the sum of exp(s - m) v (so acc / l is the softmax's
output so far). In every case some row's maximum grows in a later block, so acc and l must
be rescaled there."""

import torch

from grading.cases import Case, Step

name = "online_softmax_step"


def state(scores, v):
    """(m, l, acc) of the scores seen (Q, n) and their values (n, d), by definition."""
    m = scores.amax(-1, keepdim=True)  # (Q, 1)
    weights = torch.exp(scores - m)  # (Q, n): 0 where -inf
    return m, weights.sum(-1, keepdim=True), weights @ v


def case(label, scores, v, K):
    Q, n = scores.shape
    before = (torch.full((Q, 1), float("-inf"), dtype=torch.float64),
              torch.zeros(Q, 1, dtype=torch.float64),
              torch.zeros(Q, v.shape[1], dtype=torch.float64))
    steps, expected = [], []
    for start in range(0, n, K):
        block, v_block = scores[:, start:start + K], v[start:start + K]
        after = state(scores[:, :start + K], v[:start + K])
        steps.append(Step((*before, block, v_block)))
        expected.append(list(after))
        before = after
    # no dtype is stated: any, compared in float64 (the inputs are float64)
    return Case(label, steps, expected, atol=1e-9, rtol=1e-7, exact_dtype=False)


def draw(g, n_blocks, K):
    Q, d = g.randint(3, 7), g.randint(2, 7)
    scores = 3 * g.randn(Q, n_blocks * K).double()
    scores[0, -K:] += 60  # row 0's maximum grows in the last block, whatever the draws
    return scores, g.randn(n_blocks * K, d).double()


def cases(g):
    K = g.randint(3, 7)
    rising, v_rising = draw(g, 3, K)
    rising += torch.arange(3 * K, dtype=torch.float64) / 2  # maxima grow block by block
    masked, v_masked = draw(g, 4, K)
    hidden = g.rand(masked.shape) < 0.25  # masked keys (Q, 4 K)
    hidden[:, 0] = hidden[0, -1] = False  # each row's first block, row 0's growth: finite
    masked[hidden] = float("-inf")
    causal, v_causal = draw(g, 3, K)
    causal[1, K:2 * K] = float("-inf")  # a row all -inf in a block after its first
    return [
        case("the_maximum_grows_block_after_block", rising, v_rising, K),
        case("masked_keys_in_every_block", masked, v_masked, K),
        case("a_row_all_masked_in_a_later_block", causal, v_causal, K),
    ]
