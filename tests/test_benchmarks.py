"""The benchmarks' command line (benchmarks/__main__.py, each bench_<name>.py's parse_args):
a usage error for an unknown name, a misspelt option or a refused value, before anything
runs, and each option handed to the benchmarks that take it. No benchmark is run."""

from __future__ import annotations

import importlib
import sys

import pytest
import torch

runner = importlib.import_module("benchmarks.__main__")


def usage_error(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as done:
        runner.arguments(argv)
    assert done.value.code == 2
    return capsys.readouterr().err


def test_an_unknown_benchmark_is_a_usage_error_that_lists_the_names(capsys):
    err = usage_error(["train", "trian"], capsys)
    assert "usage: python -m benchmarks" in err
    assert "unknown benchmark 'trian': choose from bpe, busy, chapters" in err


@pytest.mark.parametrize("argv, option", [
    (["train", "--itres", "5"], "--itres"),  # misspelt
    (["train", "--iter", "5"], "--iter"),  # a prefix: only the whole name is taken here
    (["--devcie", "cuda"], "--devcie"),  # all the benchmarks, none of which takes it
    (["bpe", "--device", "cuda"], "--device"),  # another benchmark's option
])
def test_an_option_no_named_benchmark_takes_is_a_usage_error(argv, option, capsys):
    err = usage_error(argv, capsys)
    assert f"unrecognized option '{option}': the options of " in err


@pytest.mark.parametrize("argv, message", [
    (["busy", "--runs", "0"], "argument --runs: 0 must be at least 1"),
    (["busy", "--steps", "3"], "argument --steps: 3 must be at least 6"),
    (["generate", "--repeats", "x"], "argument --repeats: 'x' is not a whole number"),
    (["sampling", "--group", "0"], "argument --group: 0 must be at least 1"),
    (["train", "--device", "tpu"], "argument --device: invalid choice: 'tpu'"),
])
def test_a_refused_value_is_a_usage_error_of_its_benchmark(argv, message, capsys):
    program = sys.argv[0]
    err = usage_error(argv, capsys)
    assert f"usage: bench_{argv[0]}.py" in err and message in err
    assert sys.argv[0] == program


def test_a_benchmark_run_alone_refuses_a_misspelt_option_and_a_count_below_one(capsys):
    from benchmarks import bench_bpe, bench_busy, bench_train

    for parse, argv in [(bench_busy.parse_args, ["--runs", "0"]),
                        (bench_train.parse_args, ["--itres", "5"]),
                        (bench_bpe.parse_args, ["--runs", "1"])]:
        with pytest.raises(SystemExit):
            parse(argv)
    assert "unrecognized arguments: --runs 1" in capsys.readouterr().err


def test_each_option_goes_to_the_benchmarks_that_take_it():
    argv = ["chapters", "train", "--threads", "2", "--iters=5", "--run", "06", "12"]
    assert runner.arguments(argv) == {"chapters": ["--threads", "2", "--run", "06", "12"],
                                      "train": ["--threads", "2", "--iters=5"]}
    assert runner.arguments([]) == {name: [] for name in runner.NAMES}


def test_every_benchmark_runs_though_one_ends_with_sys_exit_0(monkeypatch):
    ran = []

    def run_path(path, run_name):
        ran.append((path.rsplit("/", 1)[-1], sys.argv[1:]))
        raise SystemExit(0)
    monkeypatch.setattr(runner.runpy, "run_path", run_path)
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    runner.main(["busy", "bpe", "--runs", "2"])
    assert ran == [("bench_busy.py", ["--runs", "2"]), ("bench_bpe.py", [])]


def test_the_sampling_benchmark_times_two_samplers_of_one_law():
    from transformers import GPT2LMHeadModel

    from benchmarks.bench_sampling import same_law
    from gpt_from_scratch.hf_weights import to_hf_config, to_hf_state_dict
    from gpt_from_scratch.model import GPT, GPTConfig

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=12, context_length=16, d_model=16, n_layers=1,
                          n_heads=2, dropout=0.0)).eval()
    hf = GPT2LMHeadModel(to_hf_config(model)).eval()
    hf.load_state_dict(to_hf_state_dict(model))
    prompts = torch.randint(11, (2, 5))
    assert same_law(model, hf, prompts, 3, end_id=11) <= 1e-5
    with torch.no_grad():
        model.lm_head.weight.mul_(2)  # another law: the check must see it
    assert same_law(model, hf, prompts, 3, end_id=11) > 1e-3
