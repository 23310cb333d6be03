"""Chapter 1, exercise 2: nanoGPT's get_batch (randint, slices, stack)."""
import torch
from otter.test_files import test_case

name = "get_batch_stacked"
points = 1


def windows_ok(data, x, y, T):
    starts = [int(row[0]) for row in x]  # data is arange: a window's first value is its start
    return all(torch.equal(x[i], data[s:s + T]) and torch.equal(y[i], data[s + 1:s + T + 1])
               for i, s in enumerate(starts))


@test_case(hidden=True)
def shapes_dtypes_and_windows(get_batch_stacked):
    data = torch.arange(300)
    x, y = get_batch_stacked(data, 6, 11, generator=torch.Generator().manual_seed(3))
    assert x.shape == y.shape == (6, 11) and x.dtype == y.dtype == torch.int64
    assert windows_ok(data, x, y, 11)


@test_case(hidden=True)
def every_start_reachable(get_batch_stacked):
    data = torch.arange(12)
    x, _ = get_batch_stacked(data, 4000, 4, generator=torch.Generator().manual_seed(4))
    assert set(x[:, 0].tolist()) == set(range(12 - 4))  # starts 0 .. len - T - 1, all of them
