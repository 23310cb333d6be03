"""Chapter 15, exercise 1: the sum of every rank's tensor, on every rank, by a ring: each
rank sends 2(N - 1)/N of the tensor, only to the next rank, receives 2(N - 1) messages
from the previous one, and every rank ends with the same bits. The ranks are threads of
the case's process (grading.ranks)."""

import itertools

import torch
from grading import ranks
from grading.cases import Case, PerRank, Ranks, Step, World

name = "ring_all_reduce"
BEHAVIOUR = "every rank's sum, by a ring: 2(N - 1)/N sent, to the next only"


def case(label, N, n, g):
    tensors = [g.randn(n) for _ in range(N)]
    expected = torch.stack(tensors).double().sum(0).float()
    chunks = [c.numel() for c in torch.empty(n).tensor_split(N)]
    # What each rank of a ring sends, for each chunk rank r may end the reduce-scatter
    # with (section 15.2: chunk r; the common textbook ring: chunk r + 1; any is a ring).
    rings = [[2 * n - chunks[ends[r]] - chunks[ends[(r + 1) % N]] for r in range(N)]
             for ends in itertools.permutations(range(N))]

    def check(got):
        results, record = ranks.read(got)
        sums = [values[0] for values in results]
        for result in sums:
            assert result.shape == expected.shape and result.dtype == expected.dtype
            assert torch.allclose(result, expected, atol=1e-5, rtol=1e-5)
        assert all(torch.equal(result, sums[0]) for result in sums)
        assert list(record["sent"]) in rings  # a ring's numbers, exactly
        for rank in range(N):
            assert sum(1 for r, _ in record["recvs"] if r == rank) == 2 * (N - 1)
        assert all(to == (rank + 1) % N for rank, to in record["sends"])
        assert all(source == (rank - 1) % N for rank, source in record["recvs"])

    step = Step((PerRank(tensors), World("rank"), N, World("send"), World("recv")))
    return Case(label, [step], check=check, world=Ranks(N), behaviour=BEHAVIOUR)


def cases(g):
    N = g.randint(3, 5)
    return [
        case("chunks_of_equal_size", N, N * g.randint(3, 8), g),
        case("chunks_of_unequal_size", 4, 4 * g.randint(2, 6) + g.randint(1, 4), g),
        case("more_ranks_than_numbers", 5, g.randint(2, 5), g),  # some chunks empty
    ]
