"""Rules judged by behaviour (book/instructors.md, "Rules judged by behaviour"): every case
of such an exercise is one the rule watches, under the same CPU limit, so that a submission
cannot take the forbidden route on the other cases and the honest one where it recognises
the rule's case (by its shape, size or values). Submissions that try it are graded in
test_grading_hostile.py (Chapter 9) and test_grading.py (Chapter 2's loop per entry)."""

from __future__ import annotations

import math

import pytest
import torch

from grading_class import ROOT, grade
from grading.cases import Repeated

SECRET = b"a-course-secret-for-the-rules-" + b"9" * 32


def drawn(chapter: str, name: str, secret: bytes):
    path = ROOT / "scripts" / "private_tests" / chapter / f"{name}.py"
    return grade.case_files.exercise_cases(path, secret, chapter, name)


@pytest.mark.parametrize("secret", [SECRET, b"another-course-secret-" + b"0" * 40])
def test_every_lora_case_is_too_wide_for_b_a_within_the_same_limit(secret):
    cases = drawn("09_finetuning", "lora_forward", secret)
    for case in cases:
        x, *factors = (case.steps[0].args[i] for i in (0, 1, 3, 4))
        # weight, A and B are sent as tiles, repeated in the sandbox
        weight, A, B = ([s * t for s, t in zip(f.tile.shape, f.times)] for f in factors)
        d_out, d_in, r = weight[0], weight[1], A[0]
        assert (B, A[1], x.shape[-1]) == ([d_out, r], d_in, d_in), case.name
        # B A: 2.7e11 multiply-adds, past 1.5 s on a core 3 times the test machine's
        assert d_out * d_in * r >= 2.7e11, case.name
        assert (case.cpu_seconds, case.behaviour) == (1.5, cases[0].behaviour), case.name
    assert len({tuple(c.steps[0].args[0].shape) for c in cases}) == len(cases)


@pytest.mark.parametrize("secret", [SECRET, b"another-course-secret-" + b"0" * 40])
def test_every_sinusoidal_case_is_too_long_for_a_loop_within_the_same_limit(secret):
    cases = drawn("02_embeddings_and_position", "sinusoidal_table", secret)
    for case in cases:
        # a loop writing each entry into the tensor: over 3 s on a core 3 times as fast as
        # the test machine's
        assert math.prod(case.steps[0].args) >= 6_000_000, case.name
        assert (case.cpu_seconds, case.behaviour) == (3.0, cases[0].behaviour), case.name


@pytest.mark.parametrize("times", [(128,), (0, 1), (2.0, 1), (2, 1, 1)])
def test_a_repeated_input_needs_a_positive_count_per_dimension(times):
    with pytest.raises(ValueError, match=r"Repeated\(times=.*one positive int per dim"):
        Repeated(torch.zeros(64, 8), times)
