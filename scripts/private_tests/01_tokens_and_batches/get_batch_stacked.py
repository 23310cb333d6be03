"""Chapter 1, exercise 2: nanoGPT's get_batch (randint, slices, stack)."""

import torch
from grading.cases import Case, Step, Generator

name = "get_batch_stacked"


def windows(n, B, T):
    def check(got):
        x, y = got[0]
        assert tuple(x.shape) == tuple(y.shape) == (B, T), (
            f"shapes {tuple(x.shape)}, {tuple(y.shape)}"
        )
        assert x.dtype == y.dtype == torch.int64, (
            f"dtypes {x.dtype}, {y.dtype}: token ids are int64"
        )
        data = torch.arange(n)
        for row, target in zip(x, y):  # data is arange: a window's first value is its start
            s = int(row[0])
            assert torch.equal(row, data[s : s + T]), "x is not a window of the data"
            assert torch.equal(target, data[s + 1 : s + T + 1]), "y is not x shifted by one"

    return check


def every_start(n, T):
    def check(got):
        starts = set(got[0][0][:, 0].tolist())
        assert starts == set(range(n - T)), (
            f"starts {sorted(starts)[:5]}…, expected 0 .. {n - T - 1}"
        )

    return check


def cases(g):
    n, B, T = (
        g.randint(200, 400),
        6,
        g.randint(5, 15),
    )
    seed = g.seed()
    return [
        Case(
            "shapes_dtypes_and_windows",
            [Step((torch.arange(n), B, T), {"generator": Generator(seed)})],
            check=windows(n, B, T),
        ),
        Case(
            "every_start_reachable",
            [Step((torch.arange(12), 4000, 4), {"generator": Generator(seed + 1)})],
            check=every_start(12, 4),
        ),
    ]
