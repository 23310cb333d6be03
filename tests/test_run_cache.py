"""The chapters' training runs kept for the tests (book.run_cache): a hit leaves exactly
what the call left, every input is in the key, a damaged entry is trained again, and what
cannot be keyed runs uncached."""

from __future__ import annotations

import dataclasses
import importlib
import random

import numpy as np
import pytest
import torch

from gpt_from_scratch.book import run_cache, run_key
from gpt_from_scratch.book.ladder import BigramModel, LadderConfig, train_rung
from gpt_from_scratch.model import GPT, GPTConfig
from gpt_from_scratch.train import train
from gpt_from_scratch.train_config import TrainConfig

TINY = GPTConfig(vocab_size=65, context_length=16, d_model=32, n_layers=2, n_heads=4,
                 dropout=0.1)
CFG = TrainConfig(max_iters=6, batch_size=4, warmup_iters=2, eval_interval=3, eval_iters=2,
                  progress=False)
IDS = np.random.default_rng(0).integers(0, 65, 2_000).astype(np.uint16)


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPT_FROM_SCRATCH_CACHE", str(tmp_path))
    return tmp_path


def _model(seed=0):
    torch.manual_seed(seed)
    return GPT(TINY)


def _after(model, returned, out):
    """Everything a call leaves: weights, gradients, flags, random states, value, stdout."""
    return ({k: v.clone() for k, v in model.state_dict().items()},
            {n: None if p.grad is None else p.grad.clone()
             for n, p in model.named_parameters()},
            [m.training for m in model.modules()], torch.get_rng_state(), random.getstate(),
            np.random.get_state()[1].copy(), returned, out)


def _same(a, b):
    assert a[0].keys() == b[0].keys()
    assert all(torch.equal(a[0][k], b[0][k]) for k in a[0])
    assert a[1].keys() == b[1].keys()
    assert all((x is None and y is None) or torch.equal(x, y)
               for x, y in zip(a[1].values(), b[1].values()))
    assert a[2] == b[2] and torch.equal(a[3], b[3]) and a[4] == b[4]
    assert np.array_equal(a[5], b[5]) and a[6] == b[6] and a[7] == b[7]


def _call(fn, capsys, seed=0, rng=7, **changes):
    model = _model(seed)
    torch.manual_seed(rng)
    random.seed(rng)
    np.random.seed(rng)
    returned = fn(model, IDS, IDS, dataclasses.replace(CFG, **changes))
    return _after(model, returned, capsys.readouterr().out)


def _printing_train(model, train_ids, val_ids, cfg):
    """``train`` that prints and draws from every global generator (stdout, states)."""
    history = train(model, train_ids, val_ids, cfg)
    print("done", torch.rand(1).item(), random.random(), np.random.rand())
    return history


def test_a_hit_leaves_exactly_what_the_training_left(capsys, cache, monkeypatch):
    monkeypatch.setattr(_printing_train, "__module__", "gpt_from_scratch.train")
    cached = run_cache.cached_run(_printing_train)
    plain = _call(_printing_train, capsys)
    first = _call(cached, capsys)  # trains and saves
    assert len(list((cache / "runs").glob("*/run.json"))) == 1
    second = _call(cached, capsys)  # reads
    _same(plain, first)
    _same(plain, second)
    assert "done" in second[7]


def test_a_hit_does_not_train(capsys, monkeypatch):
    cached = run_cache.cached_run(train)
    _call(cached, capsys)

    def no_training(*args):
        raise AssertionError("trained again")

    monkeypatch.setattr("gpt_from_scratch.train._train", no_training)
    _call(cached, capsys)
    with pytest.raises(AssertionError, match="trained again"):  # a miss would train
        _call(cached, capsys, rng=8)


@pytest.mark.parametrize("change", ["weights", "config", "data", "random", "code",
                                    "threads", "flag", "requires_grad"])
def test_every_input_changes_the_key(change, monkeypatch):
    model, data, cfg = _model(), IDS.copy(), CFG
    torch.manual_seed(0)
    before = run_key.run_key(train, (model, data, data, cfg), {})
    if change == "weights":
        with torch.no_grad():
            model.lm_head.weight[0, 0] += 1e-7
    elif change == "config":
        cfg = dataclasses.replace(CFG, learning_rate=CFG.learning_rate * (1 + 1e-12))
    elif change == "data":
        data[5] += 1
    elif change == "random":
        torch.rand(1)
    elif change == "code":
        real = run_key.source_digest
        monkeypatch.setattr(run_key, "source_digest",
                            lambda m: real(m) + ("x" if m == "model" else ""))
    elif change == "threads":
        monkeypatch.setattr(run_key, "arithmetic", lambda: {"threads": 99})
    elif change == "flag":
        model.blocks[0].train(False)
    elif change == "requires_grad":
        model.wpe.weight.requires_grad_(False)
    if change != "random":
        torch.manual_seed(0)
    assert run_key.run_key(train, (model, data, data, cfg), {}) != before


def test_the_same_inputs_give_the_same_key():
    keys = []
    for _ in range(2):
        model = _model()
        torch.manual_seed(0)
        keys.append(run_key.run_key(train, (model, IDS.copy(), IDS, CFG), {}))
    assert keys[0] == keys[1]


def test_a_damaged_entry_is_trained_again(capsys, cache):
    cached = run_cache.cached_run(train)
    plain = _call(train, capsys)
    _call(cached, capsys)
    (state,) = (cache / "runs").glob("*/state.safetensors")
    state.write_bytes(state.read_bytes()[:-100])  # truncated
    with pytest.warns(UserWarning, match="cannot be used"):
        again = _call(cached, capsys)
    _same(plain, again)
    _same(plain, _call(cached, capsys))  # the new entry is whole


def test_what_cannot_be_keyed_runs_uncached(capsys, cache, tmp_path):
    cached = run_cache.cached_run(train, side_effects=("out_dir",))
    model = _model()
    cached(model, IDS, IDS, CFG, out_dir=tmp_path / "ckpt")  # writes files: not cached
    assert (tmp_path / "ckpt").is_dir() and not (cache / "runs").exists()
    model.register_forward_hook(lambda *a: None)
    cached(model, IDS, IDS, CFG)  # a hook changes what the model computes
    assert not (cache / "runs").exists()

    class Mine(BigramModel):  # a class of the notebook's own: its code is not known
        pass

    cached_rung = run_cache.cached_run(train_rung)
    cached_rung(Mine(65), IDS, IDS, LadderConfig(batch_size=4, block_size=8, eval_iters=2),
                0, max_iters=3)
    assert not (cache / "runs").exists()
    cached_rung(BigramModel(65), IDS, IDS, LadderConfig(batch_size=4, block_size=8,
                                                        eval_iters=2), 0, max_iters=3)
    assert len(list((cache / "runs").glob("*/run.json"))) == 1


def test_a_call_that_changes_an_argument_in_place_is_not_kept(cache, monkeypatch):
    def shuffle_in_place(model, ids):
        ids[0] += 1
        return 0.0

    monkeypatch.setattr(shuffle_in_place, "__module__", "gpt_from_scratch.train")
    monkeypatch.setattr(shuffle_in_place, "__qualname__", "shuffle_in_place")
    run_cache.cached_run(shuffle_in_place)(_model(), IDS.copy())
    assert not any((cache / "runs").glob("*/run.json"))


def test_install_wraps_the_trainers_once_and_can_be_turned_off(monkeypatch):
    import gpt_from_scratch.train as module

    monkeypatch.setattr(module, "train", train)
    monkeypatch.setenv(run_cache.ENV_VAR, "0")
    run_cache.install()
    assert module.train is train
    monkeypatch.delenv(run_cache.ENV_VAR)
    for where in run_cache.TRAINERS:  # each put back after the test
        module_name, _, name = where.partition(":")
        module_of = importlib.import_module(f"gpt_from_scratch.{module_name}")
        monkeypatch.setattr(module_of, name, getattr(module_of, name))
    run_cache.install()
    wrapped = module.train
    assert wrapped.__wrapped__ is train
    run_cache.install()
    assert module.train is wrapped


def _notebook_function(source: str, **names):
    """A function as a notebook defines it (module ``__main__``)."""
    namespace = {"__name__": "__main__", **names}
    exec(source, namespace)
    return namespace["f"]


def test_a_notebook_expression_is_keyed_by_its_code_and_the_values_it_reads():
    def key(fn):
        return run_key.values_digest([fn])

    stop_at = "f = lambda step, _: step == STEPS"
    five = key(_notebook_function(stop_at, STEPS=5))
    assert five == key(_notebook_function(stop_at, STEPS=5))
    assert five != key(_notebook_function(stop_at, STEPS=6))
    assert five != key(_notebook_function("f = lambda step, _: step >= STEPS", STEPS=5))


@pytest.mark.parametrize("source", [
    "f = lambda step, _: seen.append(step)",  # a call: an effect
    "f = lambda step, model: model.training",  # an attribute
    "f = lambda step, _: step == STEPS[0]",  # a list, which can change
    "def f(step, model):\n    g = lambda: step\n    return g()",  # a function inside
    "def f(step, model):\n    seen[0] = step",  # a store
])
def test_a_notebook_function_that_could_have_an_effect_is_not_keyed(source):
    with pytest.raises(run_key.Unkeyable):
        run_key.values_digest([_notebook_function(source, seen=[], STEPS=[5])])
