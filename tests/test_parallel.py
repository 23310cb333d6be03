"""Chapter 15: data parallelism, ZeRO-1 and ZeRO-3 from scratch, equal to PyTorch's own.

Two process groups serve the whole file, each started here as plain processes on
127.0.0.1 (``tests/parallel_workers.py``, rank 0 on a free port) and always ended, even on
failure: "pair" (2 ranks) runs every parity check at once, "ring3" (3 ranks) the ring at
an odd size, then loses a rank mid-step. The tests read what each rank measured.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from gpt_from_scratch.data_parallel import DataParallel
from gpt_from_scratch.parallel import free_port, ring_all_reduce, start_process_group
from gpt_from_scratch.sharding import shard_model
from gpt_from_scratch.zero_bytes import shard_owners, state_bytes
from parallel_workers import tiny_gpt

ROOT = Path(__file__).resolve().parent.parent
WORKERS = Path(__file__).with_name("parallel_workers.py")
STARTED: list[int] = []  # every process this file started, to check that none is left

# The same sums in the same order: no difference at all (2 ranks: a + b either way; the
# DDP, ZeRO and FSDP2 comparisons). Another order of the same sums: float32 rounding.
EXACT = dict(rtol=0, atol=0)
REORDERED_SUM = 1e-4  # 3 ranks' sums of numbers ~100: measured 1.5e-5 (one ulp at 256)
ONE_PROCESS_GRADS = dict(rtol=0, atol=1e-6)  # the whole batch in one process: 3.0e-8
# AdamW steps by lr * m / sqrt(v): a rounding in a gradient near zero can move a weight by
# a good part of lr = 1e-2. After 3 steps: measured 6.5e-6.
ONE_PROCESS_WEIGHTS = dict(rtol=0, atol=5e-5)


def launch(group: str, world_size: int, out: Path, timeout_s: float = 150) -> list[int]:
    """Start the ranks of ``group``, wait, and end any still running; their exit codes."""
    env = os.environ | {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    port, processes = str(free_port()), []
    try:
        for rank in range(world_size):
            command = [sys.executable, str(WORKERS), group, str(rank), str(world_size),
                       port, str(out)]
            with open(out / f"{group}-rank{rank}.log", "w") as log:
                processes.append(subprocess.Popen(command, env=env, stdout=log,
                                                  stderr=subprocess.STDOUT))
            STARTED.append(processes[-1].pid)
        deadline = time.monotonic() + timeout_s
        for process in processes:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    return [process.returncode for process in processes]


def logs(out: Path, group: str, world_size: int) -> str:
    return "".join((out / f"{group}-rank{r}.log").read_text()[-3000:]
                   for r in range(world_size))


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("pair")
    assert launch("pair", 2, out) == [0, 0], logs(out, "pair", 2)
    return [torch.load(out / f"pair-rank{r}.pt", weights_only=False) for r in range(2)]


@pytest.fixture(scope="module")
def ring3(tmp_path_factory) -> tuple[list[int], Path]:
    out = tmp_path_factory.mktemp("ring3")
    return launch("ring3", 3, out, timeout_s=60), out


def test_ring_all_reduce_equals_dist_all_reduce(pair, ring3):
    codes, out = ring3
    assert (out / "ring3-rank2.pt").is_file(), logs(out, "ring3", 3)
    three = [torch.load(out / f"ring3-rank{r}.pt")["ring"] for r in range(3)]
    for ranks, tolerance in (([rank["ring"] for rank in pair], 0), (three, REORDERED_SUM)):
        N, sent = len(ranks), ranks[0].pop("sent") + sum(r.pop("sent") for r in ranks[1:])
        assert len(ranks[0]) == 10  # lengths 1, 2, 7, 10 and (3, 5); float32 and int64
        assert sent == 2 * (N - 1) * 2 * (1 + 2 + 7 + 10 + 15)  # 2(N - 1)/N of it a rank
        for case, (ours, difference) in ranks[0].items():
            assert difference <= tolerance, case
            for other in ranks[1:]:
                assert torch.equal(other[case][0], ours), case  # every rank, the same bits


def test_data_parallel_equals_one_process_and_ddp(pair):
    rank0, rank1 = pair
    for mode in ("per_parameter", "bucketed", "buckets_after"):
        torch.testing.assert_close(rank0[f"{mode}_grads"], rank0["ddp_grads"], **EXACT)
        torch.testing.assert_close(rank0[mode], rank0["ddp"], **EXACT)
        torch.testing.assert_close(rank0[f"{mode}_grads"], rank0["reference_grads"],
                                   **ONE_PROCESS_GRADS)
        torch.testing.assert_close(rank0[mode], rank0["reference"], **ONE_PROCESS_WEIGHTS)
        assert torch.equal(rank0[mode], rank1[mode])  # the same weights on both ranks
    assert not torch.equal(rank0["bucketed"], rank0["reference"])  # other sums, so rounded


def test_buckets_are_started_during_backward(pair):
    n_buckets, started_before_finish = pair[0]["bucketed_buckets"]
    assert n_buckets >= 10 and started_before_finish == n_buckets
    assert pair[0]["per_parameter_buckets"] == (0, 0)
    assert pair[0]["buckets_after_buckets"] == (n_buckets, 0)  # overlap=False: in finish()


def test_a_parameter_without_gradient_does_not_hang_the_step(pair):
    for rank in pair:
        for bucket_bytes, result in rank["unused"].items():
            assert result["seconds"] < 5, bucket_bytes  # the group's timeout is 30 s
            torch.testing.assert_close(result["extra"], torch.full((3,), 0.5))  # (1 + 0)/2
            torch.testing.assert_close(result["never"], torch.zeros(2))


def test_zero1_equals_zero_redundancy_optimizer(pair):
    for rank in pair:
        torch.testing.assert_close(rank["zero1"], rank["zero_redundancy"], **EXACT)
        torch.testing.assert_close(rank["zero1"], rank["per_parameter"], **EXACT)
    assert torch.equal(pair[0]["zero1"], pair[1]["zero1"])


def test_shard_model_equals_fsdp2(pair):
    rank0, rank1 = pair
    torch.testing.assert_close(rank0["zero3"], rank0["reference"], **ONE_PROCESS_WEIGHTS)
    assert torch.equal(rank0["zero3"], rank1["zero3"])
    if isinstance(rank0["fsdp2"], str):
        pytest.skip(rank0["fsdp2"])
    torch.testing.assert_close(rank0["zero3"], rank0["fsdp2"], **EXACT)


def test_state_bytes_equal_the_tensors_each_rank_holds(pair):
    for rank in pair:
        for scheme, held in (("ddp", "per_parameter_held"), ("zero1", "zero1_held"),
                             ("zero3", "zero3_held")):
            assert rank["expected_bytes"][scheme] == rank[held], scheme
    moments = [rank["expected_bytes"]["zero1"]["optimizer"] for rank in pair]
    assert sum(moments) == pair[0]["expected_bytes"]["ddp"]["optimizer"]  # shared out


def test_state_bytes_formula():
    model = tiny_gpt(0)
    P, tensors = model.num_parameters(), len(list(model.parameters()))
    assert state_bytes(model, "ddp", 4).total == 16 * P + 4 * tensors
    zero3 = state_bytes(model, "zero3", 4)  # 3 units (2 blocks, the rest), each padded
    assert 16 * P / 4 <= zero3.total - 4 * 3 <= 16 * (P / 4 + 3)
    assert shard_owners([5, 1, 1, 1, 2], 2) == [0, 1, 1, 1, 1]  # 5 numbers each
    assert shard_owners([1] * 5, 3) == [0, 0, 1, 2, 2]  # runs of neighbours
    with pytest.raises(ValueError, match="scheme='zero2' is unknown"):
        state_bytes(model, "zero2", 2)
    with pytest.raises(ValueError, match="rank=2 must be below world_size=2"):
        state_bytes(model, "zero1", 2, rank=2)
    ranks = [state_bytes(model, "zero1", 8, rank=r).total for r in range(8)]
    assert state_bytes(model, "zero1", 8).total == max(ranks) > min(ranks)  # the most


def test_odd_inputs_to_the_formulas_are_named():
    with pytest.raises(ValueError, match="shard_owners.world_size=0 must be a positive"):
        shard_owners([5, 3], 0)
    with pytest.raises(ValueError, match=r"numels=\[0, 0\] hold no numbers to share out"):
        shard_owners([0, 0], 2)
    with pytest.raises(ValueError, match=r"numels\[1\]=-3 must be an int >= 0"):
        shard_owners([5, -3], 2)
    model = tiny_gpt(0)
    P, frozen = model.num_parameters(), model.blocks[0].ln_1.weight
    frozen.requires_grad_(False)  # no gradient and no moments for it
    kept = state_bytes(model, "ddp", 2)
    assert (kept.parameters, kept.gradients) == (4 * P, 4 * (P - frozen.numel()))
    with pytest.raises(ValueError, match="'blocks.0.ln_1.weight' is frozen"):
        state_bytes(model, "zero3", 2)
    half = tiny_gpt(0)
    half.blocks[1].half()  # a block in float16: 2 bytes a number there
    full, mixed = state_bytes(tiny_gpt(0), "zero3", 2), state_bytes(half, "zero3", 2)
    block = sum(p.numel() for p in half.blocks[1].parameters())
    assert full.parameters - mixed.parameters == 2 * -(-block // 2)
    half.blocks[1].ln_1.float()  # one block, two dtypes: what shard_model refuses
    with pytest.raises(ValueError, match=r"needs parameters of one dtype.*model.float\(\)"):
        state_bytes(half, "zero3", 2)


def test_odd_inputs_are_named_or_handled(pair):
    for rank, result in enumerate(pair):
        odd = result["odd"]
        assert "is wrapped by a DataParallel already (a cell run twice?)" in odd["twice"]
        assert "call its remove() before wrapping again" in odd["twice"]
        assert "this module is a DataParallel already" in odd["wrapper"]
        assert odd["views"]  # after finish(), each gradient is its bucket's memory
        assert "finish() called twice with no backward between" in odd["finish twice"]
        dtypes, a, b = odd["mixed"]
        assert dtypes == ["torch.float64", "torch.float32"]  # a bucket per dtype
        torch.testing.assert_close(a, torch.full((3,), 1.5))  # (1 + 2) / 2
        torch.testing.assert_close(b, torch.ones(2, dtype=torch.float64))
        for scheme in ("zero1", "zero3"):
            assert "is frozen (requires_grad=False)" in odd[f"frozen {scheme}"], scheme
            assert "pass only the trainable parameters" in odd[f"frozen {scheme}"]
        assert "'blocks.0.ln_1.weight' is frozen" in odd["frozen zero3"]


def test_mismatched_models_fail_on_every_rank(pair):
    for rank in pair:
        message = rank["mismatch"]
        assert "rank 1's model differs from rank 0's: wte.weight (66, 16)" in message
        assert "(65, 16) torch.float32 trains on rank 0" in message
        assert "the same GPTConfig" in message
        frozen = rank["frozen on one rank"]
        assert "rank 1's model differs from rank 0's: wte.weight (65, 16) torch.float32 " \
            "frozen on rank 1, wte.weight (65, 16) torch.float32 trains on rank 0" in frozen


def test_a_rank_killed_mid_step_ends_the_others_with_a_clear_error(ring3):
    codes, out = ring3
    assert codes == [0, 0, 17], logs(out, "ring3", 3)
    for rank in (0, 1):
        killed = torch.load(out / f"killed-rank{rank}.pt")
        assert killed["seconds"] < 15, killed  # the group's timeout is 10 s
        assert f"rank {rank} of 3: the all-reduce of gradient bucket" in killed["error"]
        assert "end every process and start them all again" in killed["error"]
        assert ".cc:" not in killed["error"]  # gloo's source path where it was built


def test_a_port_already_taken_is_named():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        named = f"port {port} on 127.0.0.1 is already taken by another process"
        with pytest.raises(RuntimeError, match=named):
            start_process_group(0, 2, port, timeout_s=5)
    assert not dist.is_initialized()


def test_a_rendezvous_that_never_completes_ends_in_bounded_time():
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="rank 0 of 2 waited 1 s .* not every process"):
        start_process_group(0, 2, free_port(), timeout_s=1)
    assert time.monotonic() - start < 10 and not dist.is_initialized()


JOIN = """import sys, time
from gpt_from_scratch.parallel import start_process_group
rank, world_size, port = map(int, sys.argv[1:])
start = time.monotonic()
try:
    start_process_group(rank, world_size, port, timeout_s=4)
except ValueError as err:
    print(f"{time.monotonic() - start:.1f} s: {err}")
"""


@pytest.mark.parametrize("sizes", [(2, 3), (3, 2)])
def test_mismatched_world_sizes_end_every_process_with_both_sizes(sizes):
    """Rank 0 and rank 1 started with different world sizes: each ends, within the group's
    timeout (4 s), with an error naming both sizes and the fix; none waits for a rank that
    never comes (rank 0 of 3 would wait for rank 2)."""
    env = os.environ | {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    port, processes = str(free_port()), []
    try:
        for rank, size in enumerate(sizes):
            processes.append(subprocess.Popen(
                [sys.executable, "-c", JOIN, str(rank), str(size), port], env=env,
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
        said = [p.communicate(timeout=30)[0] for p in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert [p.returncode for p in processes] == [0, 0], said
    wrong = sizes[1]  # rank 1's world_size, named against rank 0's
    for text in said:
        seconds, message = text.split(" s: ")
        assert float(seconds) < 4, text
        assert message.startswith(f"rank 1 was started with world_size={wrong}, rank 0 "
                                  f"with {sizes[0]}: start every process with the same "
                                  "world_size"), text


def test_bad_inputs_are_named():
    with pytest.raises(RuntimeError, match="ring_reduce_scatter needs a process group"):
        ring_all_reduce(torch.ones(3))
    with pytest.raises(ValueError, match="DataParallel wraps an nn.Module, got a Tensor"):
        DataParallel(torch.ones(3))
    with pytest.raises(ValueError, match="overlap='no' must be True .* or False"):
        DataParallel(torch.nn.Linear(2, 2), overlap="no")
    with pytest.raises(ValueError, match="rank=2 must be below world_size=2"):
        start_process_group(2, 2, 29500)
    with pytest.raises(ValueError, match="timeout_s='a minute' must be a number"):
        start_process_group(0, 1, 29500, timeout_s="a minute")


def test_a_group_of_one_in_this_process_names_its_misuses():
    start_process_group(0, 1, free_port())
    try:
        with pytest.raises(RuntimeError, match="this process is rank 0 of a group of 1 "
                                               "already: use it, or end it"):
            start_process_group(0, 1, free_port())
        weight = torch.nn.Parameter(torch.ones(3))  # in place on it: autograd's error
        with pytest.raises(ValueError, match=r"requires grad .* pass p.grad, or p.detach"):
            ring_all_reduce(weight)
        ring_all_reduce(weight.detach())  # a group of one: the sum is the tensor
        sharded = shard_model(tiny_gpt(0))
        assert "Linear(in_features=16, out_features=48, bias=True)" in repr(sharded)
        with pytest.raises(ValueError, match="this one is sharded already"):
            state_bytes(sharded, "zero3", 1)
        logits, _ = sharded(torch.zeros(1, 4, dtype=torch.long))  # still runs
        assert logits.shape == (1, 4, 65)
    finally:
        dist.destroy_process_group()


def test_no_process_is_left(pair, ring3):
    assert len(STARTED) == 5
    for pid in STARTED:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # ended and reaped
