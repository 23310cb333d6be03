"""The lessons a chapter judges (gpt_from_scratch.book.lessons) and nbval's tolerance for numbers
from training (notebooks/conftest.py): a lesson never raises, its verdict line fails nbval."""

import importlib.util
import json
import math
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from gpt_from_scratch.book import lessons

ROOT = Path(__file__).resolve().parents[1]


def _tolerance_plugin():
    spec = importlib.util.spec_from_file_location("nbval_tolerance", ROOT / "notebooks/conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    monkeypatch.setattr(lessons, "_LESSONS", {})


def test_a_lesson_that_holds_and_one_that_does_not():
    good = lessons.lesson("the loss falls", 0.08, "nats", "It falls.", "It does not fall here.")
    bad = lessons.lesson("words are real", -0.01, "points", "Real.", "Not real here.")
    assert good.holds and good.text == "It falls."
    assert not bad.holds and bad.text == "Not real here."
    assert lessons.verdicts() == "holds: the loss falls\nDOES NOT HOLD: words are real"


def test_verdicts_carry_no_numbers_and_a_rejudged_lesson_replaces_itself():
    lessons.lesson("x", 1.234, "nats", "a", "b")
    lessons.lesson("x", -2.5, "nats", "a", "b")
    assert lessons.verdicts() == "DOES NOT HOLD: x"
    assert not any(ch.isdigit() for ch in lessons.verdicts())


def test_a_margin_that_is_not_a_number_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="margin nan must be a number"):
        lessons.lesson("x", math.nan, "nats", "a", "b")


def test_margins_are_recorded_for_the_spread_measurement(tmp_path, monkeypatch):
    path = tmp_path / "lessons.jsonl"
    monkeypatch.setenv("GPT_FROM_SCRATCH_LESSONS", str(path))
    lessons.lesson("x", 0.5, "nats", "a", "b")
    record = json.loads(path.read_text())
    assert record["name"] == "x" and record["margin"] == 0.5 and record["holds"] is True


def test_paired_difference_and_standard_errors():
    mean, se = lessons.paired_difference([2.30, 2.34, 2.28], [2.27, 2.30, 2.26])
    assert mean == pytest.approx(0.03) and se == pytest.approx(0.01 / math.sqrt(3), rel=1e-6)
    assert lessons.standard_errors(0.03, 0.0) == math.inf
    assert lessons.standard_errors(0.0, 0.0) == 0.0
    with pytest.raises(ValueError, match="one value per seed"):
        lessons.paired_difference([1.0], [2.0])


def test_tolerance_accepts_numbers_within_it_and_nothing_else():
    within = _tolerance_plugin().within
    tol = {"abs": 0.02}
    assert within("val 1.73 at step 500", "val 1.72 at step 500", tol) == "val 1.72 at step 500"
    assert within("val 1.75 at step 500", "val 1.72 at step 500", tol) == "val 1.75 at step 500"
    assert within("train 1.73", "val 1.72", tol) == "train 1.73"  # other words: unchanged
    rel = {"rel": 0.05}
    assert within("89% and 1.00", "86% and 1.01", rel) == "86% and 1.01"
    assert within("70% and 1.00", "86% and 1.01", rel) == "70% and 1.01"  # only the near one


TWINS = sorted((ROOT / "notebooks" / "text").glob("*.py"))
CELL = re.compile(r"^# %%(?P<header>[^\n]*)\n(?P<body>.*?)(?=^# %%|\Z)", re.MULTILINE | re.DOTALL)


def _cells(path: Path):
    return [(m["header"], m["body"]) for m in CELL.finditer(path.read_text())]


@pytest.mark.parametrize("twin", TWINS, ids=lambda p: p.stem)
def test_no_hidden_cell_asserts_and_no_chapter_names_the_tracker(twin):
    """Hidden checks are lessons (a sentence, never a traceback in a reader's run), and chapters
    never send the reader to the issue tracker."""
    text = twin.read_text()
    assert not re.search(r"\bissues? ?#?\d", text, re.IGNORECASE), "a chapter names the tracker"
    for header, body in _cells(twin):
        if "remove-cell" in header:
            assert not re.search(r"^\s*assert\b", body, re.MULTILINE), (
                f"{twin.name}: a hidden cell asserts; judge it with book.lessons.lesson instead:\n"
                + body)


@pytest.mark.parametrize("twin", TWINS, ids=lambda p: p.stem)
def test_a_chapter_that_judges_lessons_shows_their_verdicts_to_nbval(twin):
    cells, text = _cells(twin), twin.read_text()
    if "verdicts" not in text and not re.search(r"lessons?\(", text):
        pytest.skip("this chapter judges no lesson")
    verdict = [i for i, (_, body) in enumerate(cells)
               if re.search(r"print\((lessons\.)?verdicts\(\)\)", body)]
    assert len(verdict) == 1, f"{twin.name}: one cell prints the verdicts"
    header, _ = cells[verdict[0]]
    assert "nbval-check-output" in header and "remove-cell" in header, (
        f"{twin.name}: the verdict cell is hidden and compared by nbval")
    following = cells[verdict[0] + 1][1] if verdict[0] + 1 < len(cells) else ""
    assert following.startswith("# ## Exercises"), (
        f"{twin.name}: the verdicts close the chapter's text, just before its exercises")


def test_the_package_makes_waiting_threads_spin_briefly_unless_the_reader_chose(tmp_path):
    code = ("import os, gpt_from_scratch\n"
            "print([os.environ.get(k) for k in ('OMP_WAIT_POLICY', 'GOMP_SPINCOUNT', "
            "'KMP_BLOCKTIME')])")
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")}
    run = lambda e: subprocess.run([sys.executable, "-c", code], env=e, capture_output=True,  # noqa
                                   text=True, check=True).stdout.strip()
    assert run(env) == "[None, '1000', '0']"
    assert run(dict(env, OMP_WAIT_POLICY="PASSIVE")) == "['PASSIVE', None, None]"
    assert run(dict(env, GOMP_SPINCOUNT="5")) == "[None, '5', None]"


def test_the_package_knows_when_torchs_threads_spin():
    code = "import sys\nif sys.argv[1] == 'torch': import torch\nimport gpt_from_scratch as g\n" \
           "print(g.SPINNING_THREADS)"
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")}
    run = lambda first, e: subprocess.run([sys.executable, "-c", code, first], env=e,  # noqa: E731
                                          capture_output=True, text=True, check=True).stdout.strip()
    assert run("package", env) == "False"  # the package asked them to wait briefly, in time
    assert run("torch", env) == "True"  # too late: torch read the policy when it loaded
    assert run("torch", dict(env, OMP_WAIT_POLICY="passive")) == "False"  # the reader's choice
    assert run("torch", dict(env, GOMP_SPINCOUNT="1000")) == "False"
    assert run("package", dict(env, OMP_WAIT_POLICY="ACTIVE")) == "True"


@pytest.mark.parametrize("spinning, others, wanted", [
    (True, 1, 1),  # one core of two busy: one thread, and a warning
    (True, 0, 2),  # quiet cores: every thread
    (False, 1, 2),  # sleeping threads wait well: every thread
    (True, None, 2),  # no count of running threads (not Linux): every thread
])
def test_training_takes_the_free_cores_when_threads_spin(monkeypatch, spinning, others, wanted):
    import warnings

    import torch

    import gpt_from_scratch
    from gpt_from_scratch import utils

    monkeypatch.setattr(gpt_from_scratch, "SPINNING_THREADS", spinning)
    monkeypatch.setattr(utils, "_others_running", lambda: others)
    monkeypatch.setattr(utils.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            with utils.free_threads("cpu"):
                inside = torch.get_num_threads()
        assert inside == wanted and torch.get_num_threads() == 2  # and back afterwards
        assert [str(w.message) for w in said if "spin while they wait" in str(w.message)] == (
            [] if wanted == 2 else [said[0].message.args[0]])
        with utils.free_threads("cuda"):  # a GPU's work is not the CPU threads'
            assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_real_words_and_loops_are_judged_with_their_margins():
    from gpt_from_scratch.book.samples import decoding_lessons, real_words_lesson

    good = real_words_lesson([0.86, 0.88, 0.86, 0.88, 0.86], "the model")
    assert good.holds and good.margin == pytest.approx(100 * (0.868 - 2 * 0.0049 - 0.80), abs=0.1)
    assert "(the samples': 86%, 88%, 86%, 88%, 86%)" in good.text
    bad = real_words_lesson([0.70, 0.95], "the model")  # a high mean, too spread to trust
    assert not bad.holds and "below the bar of 80%" in bad.text
    loop = "the king is dead the king is dead the king is dead the king is dead now"
    looping, moving = decoding_lessons(loop, [loop])
    assert looping.holds and not moving.holds and "repeats itself here" in moving.text
    looping, moving = decoding_lessons("a b c d e f g h", ["i j k l m n o p"])
    assert not looping.holds and moving.holds and "no sample repeats" in moving.text


@pytest.mark.parametrize("margin", [np.float32(0.5), np.float16(0.5), 0.5])
def test_a_numpy_margin_is_a_number(margin):
    """A float32 0.5 was refused as "not a number (not NaN)"."""
    assert lessons.lesson("x", margin, "points", "a", "b").margin == 0.5


def test_a_tensor_margin_and_a_nan_run_are_refused_with_the_fix():
    with pytest.raises(ValueError, match=r"a number, not a Tensor.*margin.item\(\)"):
        lessons.lesson("x", torch.tensor(0.5), "nats", "a", "b")
    with pytest.raises(ValueError, match="diverged has no loss to compare"):
        lessons.paired_difference([1.0, math.nan], [1.0, 2.0])  # an AttributeError before


def test_t_quantiles_are_students():
    assert lessons.t_quantile(0.95, 2) == pytest.approx(2.919986, abs=1e-6)
    assert lessons.t_quantile(0.975, 1) == pytest.approx(12.706205, abs=1e-6)
    assert lessons.t_quantile(0.95, 10) == pytest.approx(1.812461, abs=1e-6)
    stats = pytest.importorskip("scipy.stats")
    for df in (1, 2, 3, 4, 5, 8, 29):
        for level in (0.8, 0.95, 0.99):
            assert lessons.t_quantile(level, df) == pytest.approx(stats.t.ppf(level, df), abs=1e-9)


def test_beyond_t_is_the_mean_less_t_standard_errors():
    mean, se, t, margin = lessons.beyond_t([3.0, 4.0, 8.0], [1.0, 1.0, 1.0])
    assert (mean, t) == (pytest.approx(4.0), pytest.approx(2.919986, abs=1e-6))
    assert se == pytest.approx(statistics.stdev([2, 3, 7]) / 3 ** 0.5)
    assert margin == pytest.approx(4.0 - t * se)


def test_an_error_every_seed_shares_widens_the_standard_error_and_the_degrees_of_freedom():
    a, b = [3.0, 4.0, 8.0], [1.0, 1.0, 1.0]
    _, se_seeds, _, _ = lessons.beyond_t(a, b)
    same = lessons.beyond_t_shared(a, b, 0.0)  # nothing shared: beyond_t itself
    assert same == (4.0, se_seeds, se_seeds, 2, pytest.approx(2.919986, abs=1e-6),
                    pytest.approx(4.0 - 2.919986 * se_seeds, abs=1e-5))
    mean, _, se, df, t, margin = lessons.beyond_t_shared(a, b, se_seeds)
    assert se == pytest.approx(2 ** 0.5 * se_seeds)  # in quadrature
    assert df == 8  # Welch and Satterthwaite: (2 s^2)^2 / (s^4 / 2)
    assert t == pytest.approx(lessons.t_quantile(0.95, 8)) and margin == pytest.approx(
        mean - t * se)
    alike = lessons.beyond_t_shared([2.0, 2.0], [1.0, 1.0], 0.5)  # the seeds agree exactly
    assert alike[1] == 0 and alike[3] == lessons.SHARED_DF and alike[2] == 0.5


def test_the_paired_bootstrap_bounds_the_mean_from_below_the_same_way_every_time():
    diffs = [0.1 * (i % 7) - 0.2 for i in range(200)]
    bound = lessons.paired_bootstrap(diffs)
    mean = sum(diffs) / len(diffs)
    se = statistics.stdev(diffs) / len(diffs) ** 0.5
    assert mean - 2.2 * se < bound < mean - 1.1 * se  # near mean - 1.645 se
    assert bound == lessons.paired_bootstrap(diffs) and bound != lessons.paired_bootstrap(diffs, seed=1)


@pytest.mark.parametrize("call, match", [
    (lambda: lessons.t_quantile(0.95, 0), r"df=0 must be a whole number >= 1"),
    (lambda: lessons.t_quantile(95, 2), r"level=95 must be a probability between 0.5 and 1"),
    (lambda: lessons.paired_bootstrap([0.1]), r"1 differences, 0 not finite"),
    (lambda: lessons.paired_bootstrap([0.1, math.nan]), r"2 differences, 1 not finite"),
    (lambda: lessons.paired_bootstrap([0.1, 0.2], resamples=10), r"resamples=10 must be"),
    (lambda: lessons.paired_bootstrap([0.1, 0.2], level=0.3), r"level=0.3 must be"),
    (lambda: lessons.paired_bootstrap("12"), r"diffs = '12' must be a list of numbers"),
    (lambda: lessons.paired_bootstrap([1, 2, 3], 100, 0.999), r"resamples=100 must be .* >= 1000"),
    (lambda: lessons.paired_difference([1, "a"], [1, 2]), r"a\[1\] = 'a' must be a number"),
    (lambda: lessons.beyond_t("34", "12"), r"a = '34' must be a list of numbers"),
    (lambda: lessons.beyond_t([1.0], [0.0]), r"two lists of equal length >= 2"),
    (lambda: lessons.beyond_t_shared([1.0, 2.0], [0.0, 0.0], -0.1),
     r"beyond_t_shared: shared_se=-0.1 must be a finite number >= 0"),
    (lambda: lessons.beyond_t_shared([1.0, 2.0], [0.0, 0.0], math.nan),
     r"shared_se=nan must be a finite number"),
])
def test_the_bars_refuse_what_they_cannot_judge(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_beyond_t_takes_generators_and_the_bootstrap_a_high_level_with_enough_resamples():
    mean, se, t, margin = lessons.beyond_t((v for v in [3.0, 4.0, 8.0]), iter([1.0] * 3))
    assert mean == 4.0 and t == pytest.approx(2.919986, abs=1e-5)
    assert lessons.paired_bootstrap([1, 2, 3], 1000, 0.999) >= 1.0
