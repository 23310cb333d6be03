"""Rules judged by behaviour (book/instructors.md, "Rules judged by behaviour"): every case
of such an exercise is one the rule watches, under the same CPU limit, so that a submission
cannot take the forbidden route on the other cases and the honest one where it recognises
the rule's case (by its shape, size or values). Submissions that try it are graded in
test_grading_hostile.py (Chapter 9) and test_grading.py (Chapter 2's loop per entry). And
what no text states (a dtype) decides no case; a case that cannot be judged is refused."""

from __future__ import annotations

import importlib
import math

import pytest
import torch

from grading_class import ROOT, grade
from grading.cases import Randn, Ranks, Step, World

SECRET = b"a-course-secret-for-the-rules-" + b"9" * 32


def drawn(chapter: str, name: str, secret: bytes):
    path = ROOT / "scripts" / "private_tests" / chapter / f"{name}.py"
    return grade.case_files.exercise_cases(path, secret, chapter, name)


def test_every_lora_case_is_too_wide_for_b_a_within_the_same_limit():
    cases, seeds = drawn("09_finetuning", "lora_forward", SECRET), set()
    for case in cases:
        x, weight, _, A, B, _ = case.steps[0].args
        # random through and through (made in the sandbox from their seeds): no structure
        # to make B A cheap
        assert all(isinstance(m, Randn) for m in (weight, A, B)), case.name
        seeds.update(m.seed for m in (weight, A, B))
        d_out, d_in, r = weight.shape[0], weight.shape[1], A.shape[0]
        assert (B.shape, A.shape[1], x.shape[-1]) == ((d_out, r), d_in, d_in), case.name
        # B A: 2.7e11 multiply-adds, past 1.5 s on a core 3 times the test machine's
        assert d_out * d_in * r >= 2.7e11, case.name
        assert (case.cpu_seconds, case.behaviour) == (1.5, cases[0].behaviour), case.name
    assert len({tuple(c.steps[0].args[0].shape) for c in cases}) == len(cases)
    assert len(seeds) == 3 * len(cases)


@pytest.mark.parametrize("secret", [SECRET, b"another-course-secret-" + b"0" * 40])
def test_every_sinusoidal_case_is_too_long_for_a_loop_within_the_same_limit(secret):
    cases = drawn("02_embeddings_and_position", "sinusoidal_table", secret)
    for case in cases:
        # a loop writing each entry into the tensor: over 3 s on a core 3 times as fast as
        # the test machine's
        assert math.prod(case.steps[0].args) >= 6_000_000, case.name
        assert (case.cpu_seconds, case.behaviour) == (3.0, cases[0].behaviour), case.name


@pytest.mark.parametrize(
    "shape, seed, match",
    [((), 1, "shape="), ((8, 0), 1, "shape="), ((8.0, 2), 1, "shape="),
     ((8, 2), -1, "seed=")],
)
def test_a_random_input_needs_a_positive_shape_and_a_seed(shape, seed, match):
    with pytest.raises(ValueError, match=rf"Randn\({match}.*(positive ints|0 or more)"):
        Randn(shape, seed)


def test_a_random_input_is_the_same_in_the_sandbox_and_the_grader(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "scripts" / "grading"))  # as in the sandbox
    runner = importlib.import_module("runner")
    tensors: dict = {}
    program = grade.case_files.encode_arg([Randn((64, 32), 7, 0.5)], "k", tensors)
    runner.make_random(program, tensors)
    made = runner.decode(program, tensors, {})[0]
    assert torch.equal(made, Randn((64, 32), 7, 0.5).tensor()) and made.std() > 0.4


@pytest.mark.parametrize("secret", [SECRET, b"another-course-secret-" + b"7" * 40])
def test_every_pass_at_k_case_depends_on_n_c_and_k(secret):
    """No answer from c alone (0 when none is right, else 1) passes a case, and float32
    arithmetic passes every case (the exercise states no dtype)."""
    for case in drawn("14_verifier", "pass_at_k", secret):
        triples = [step.args for step in case.steps]
        by_c = [0.0 if c == 0 else 1.0 for _, c, _ in triples]
        assert any(abs(a - e) > case.atol for a, e in zip(by_c, case.expected)), case.name
        for (n, c, k), e in zip(triples, case.expected):
            ratio = torch.tensor([math.comb(n - c, k) / math.comb(n, k)], dtype=torch.float32)
            got = float(1 - ratio) if n - c >= k else 1.0
            assert abs(got - e) <= case.atol + case.rtol * abs(e), (case.name, n, c, k)


# Chapter 15's world (grading.ranks): the ranks of a case are threads of its process; the
# record it keeps is what the ring's and ZeRO-1's rules are judged by.
RING = '''def ring_all_reduce(tensor, rank, world_size, send, recv):
    chunks = tensor.clone().tensor_split(world_size)
    after, before = (rank + 1) % world_size, (rank - 1) % world_size
    for step in range(world_size - 1):
        send(chunks[(rank - step - 1) % world_size], after)
        incoming = chunks[(rank - step - 2) % world_size]
        received = torch.empty_like(incoming)
        recv(received, before)
        incoming += received
    for step in range(world_size - 1):
        send(chunks[(rank - step) % world_size], after)
        recv(chunks[(rank - step - 1) % world_size], before)
    return torch.cat(chunks)'''


def ring(source: str = RING):
    env = {"torch": torch}
    exec(source, env)
    return env["ring_all_reduce"]


def test_the_world_records_a_rings_messages_and_every_rank_gets_the_sum():
    """Four ranks, ten numbers (chunks of 3, 3, 2, 2): every rank's sum is the sum of the
    four tensors, each rank sent 2n minus its two chunks, every send went to the next rank
    and every recv came from the previous one."""
    from grading import ranks

    tensors = [torch.randn(10, generator=torch.Generator().manual_seed(r))
               for r in range(4)]
    world, candidate = ranks.World(4), ring()
    sums = ranks.run(world, lambda r: candidate(tensors[r].clone(), r, 4,
                                                *map(world.given(r).get, ("send", "recv"))))
    for total in sums:
        torch.testing.assert_close(total, torch.stack(tensors).sum(0), atol=1e-6, rtol=1e-6)
        assert torch.equal(total, sums[0])
    assert world.sent == [20 - 3 - 3, 20 - 3 - 2, 20 - 2 - 2, 20 - 2 - 3]
    assert sorted(set(world.sends)) == [(0, 1), (1, 2), (2, 3), (3, 0)]
    assert sorted(set(world.recvs)) == [(0, 3), (1, 0), (2, 1), (3, 2)]
    assert len(world.sends) == len(world.recvs) == 4 * 2 * 3


def test_a_deadlock_is_found_when_every_rank_waits_not_when_a_wait_runs_out(monkeypatch):
    """Every rank receives first: the world raises Deadlock as soon as all wait, never the
    TimeoutError of a wait that ran out (the wait is a minute here)."""
    from grading import ranks

    monkeypatch.setattr(ranks, "WAIT_S", 60.0)
    send = "        send(chunks[(rank - step - 1) % world_size], after)\n"
    first = RING.replace(send, "").replace("        incoming += received\n",
                                           "        incoming += received\n" + send)
    world, candidate = ranks.World(3), ring(first)
    with pytest.raises(ranks.Deadlock, match="deadlocked"):
        ranks.run(world, lambda r: candidate(torch.ones(6), r, 3,
                                             *map(world.given(r).get, ("send", "recv"))))
    assert world.deadlock and world.sends == []


def test_a_wait_that_runs_out_names_the_waiting_rank(monkeypatch):
    """Rank 1 neither sends nor waits on the world (it waits on an event of its own): rank
    0's wait for it runs out, a TimeoutError naming rank 0 and rank 1."""
    import threading

    from grading import ranks

    monkeypatch.setattr(ranks, "WAIT_S", 1.0)
    released = threading.Event()

    def program(rank):
        if rank == 1:
            return released.wait(30)
        try:
            world.recv(0, torch.empty(2), 1)
        finally:
            released.set()

    world = ranks.World(2)
    with pytest.raises(TimeoutError, match="rank 0 waited 1 s for a message from rank 1"):
        ranks.run(world, program)


def test_ranks_that_never_end_are_a_timeout_not_a_hang(monkeypatch):
    import threading

    from grading import ranks

    monkeypatch.setattr(ranks, "WAIT_S", 0.1)
    never = threading.Event()
    try:
        with pytest.raises(TimeoutError, match="did not end within 0.2 s"):
            ranks.run(ranks.World(2), lambda rank: never.wait(30))
    finally:
        never.set()  # the threads end with the test


def test_what_an_object_keeps_counts_storages_closures_classes_and_globals():
    """ZeRO-1's rule as numbers, counted by storage: the weights given (and views of them)
    do not count; AdamW's two moments and step count are state; a (40,) tensor counts
    wherever it is kept: in a closure, as a slice (its storage stays alive), in the class,
    in a global the code names."""
    from grading import ranks

    weights, hidden = torch.randn(40), torch.zeros(40)
    chunk = torch.nn.Parameter(weights[:10].clone())
    optimizer = torch.optim.AdamW([chunk], lr=0.1)
    chunk.grad = torch.ones(10)
    optimizer.step()

    class Honest:
        def __init__(self):
            self.weights, self.view, self.optimizer = weights, weights[10:20], optimizer

    class Closure(Honest):
        def __init__(self):
            super().__init__()
            self.moments = lambda: hidden

    class Slice(Honest):
        def __init__(self):
            super().__init__()
            self.moments = hidden[:10]

    class Attribute(Honest):
        moments = hidden

    env = {"__name__": "__main__", "hidden": hidden, "Honest": Honest}  # as a cell runs
    exec("class Named(Honest):\n    def step(self):\n        return hidden.sum()", env)
    assert ranks.kept(Honest(), [weights]) == [10, 10 + 2 * 10 + 1, 2 * 10 + 1, 1]
    for hiding in (Closure, Slice, Attribute, env["Named"]):
        assert ranks.kept(hiding(), [weights])[:2] == [40, 40 + 10 + 2 * 10 + 1], hiding
    with ranks.optimizers_built() as built:
        torch.optim.AdamW([torch.nn.Parameter(torch.zeros(7))])
    assert built == [7]


@pytest.mark.parametrize("make, match", [
    (lambda: Ranks(1), r"Ranks\(world_size=1\): ranks are 2 to 8 threads"),
    (lambda: Ranks(True), r"Ranks\(world_size=True\)"),
    (lambda: World("sned"), r"World\('sned'\): a world gives rank, send, recv"),
])
def test_a_world_needs_ranks_it_can_run_and_names_it_gives(make, match):
    with pytest.raises(ValueError, match=match):
        make()


@pytest.mark.parametrize("call, match", [
    (lambda w: w.send(0, torch.ones(2), 0), r"to=0 must be another rank.*cannot message"),
    (lambda w: w.send(0, [1.0], 1), "send takes a tensor, got a list"),
    (lambda w: w.recv(1, torch.ones(2), 2), r"source=2 must be another rank, an int from"),
    (lambda w: w.all_gather(0, 3.0), "all_gather takes a tensor, got a float"),
])
def test_a_rank_that_misuses_send_recv_or_all_gather_gets_a_clear_error(call, match):
    from grading import ranks

    with pytest.raises(ValueError, match=match):
        call(ranks.World(2))


CHAPTERS_12_TO_14 = {"12_assistant": ("mask_prompt", "dpo_loss"),
                     "13_inside": ("logit_lens", "patch_head"),
                     "14_verifier": ("group_advantages", "grpo_loss", "pass_at_k")}


NO_DTYPE_STATED = {"12_assistant": ("mask_prompt", "dpo_loss"),
                   "13_inside": ("logit_lens", "patch_head"),
                   "14_verifier": ("group_advantages", "grpo_loss", "pass_at_k"),
                   "16_fast_inference": ("online_softmax_step",)}


@pytest.mark.parametrize("chapter", sorted(NO_DTYPE_STATED))
def test_no_dtype_the_text_does_not_state_decides_a_case(chapter):
    """Chapters 12-14's texts and Chapter 16's online softmax state no dtype: every
    floating-point result is judged by its values in float64 (mask_prompt's targets stay
    int64, the dtype of the ids and the only one cross-entropy takes with -100 ignored).
    (Chapter 16's absmax_quantize states int8 and float32: its case checks them.)"""
    for name in NO_DTYPE_STATED[chapter]:
        for case in drawn(chapter, name, SECRET):
            values = [v for e in case.expected for v in (e if isinstance(e, list) else [e])]
            floating = [v for v in values
                        if isinstance(v, torch.Tensor) and v.is_floating_point()]
            assert not (floating and case.exact_dtype), (name, case.name)


def test_the_judge_compares_values_in_float64_where_no_dtype_is_stated():
    from grading.cases import Case
    from grading.judge import same

    expected = torch.tensor([1.0, 2.0 / 3.0])
    free, fixed = Case("free", [], exact_dtype=False), Case("fixed", [])
    assert same(expected.double() + 1e-7, expected, free) == ""
    assert same(expected.double(), expected, fixed) == "wrong dtype (float64)"
    assert same(expected.half(), expected, free) == "wrong values"  # not to 1e-4
    assert same(torch.tensor([1.5]), torch.tensor([1]), free) == "wrong values"  # not cut
    assert same(torch.tensor(0.25, dtype=torch.float64), 0.25, fixed) == ""  # a number
    assert same(True, 1.0, fixed) == "wrong value"


@pytest.mark.parametrize(
    "step, match",
    [(lambda: Step((torch.ones(2), 1), gradient=(1, torch.ones(2))), r"gradient=\(1, "),
     (lambda: Step((torch.ones(2),), gradient=(0, torch.ones(3))), r"gradient=\(0, "),
     (lambda: Step((torch.ones(2), Randn((2,), 1)), unchanged=True), r"type Randn: only")],
)
def test_a_step_refuses_a_gradient_or_a_comparison_it_cannot_make(step, match):
    with pytest.raises(ValueError, match=match):
        step()
