"""The chapters' training runs kept for the tests (book.run_cache): a hit leaves exactly
what the call left, every input is in the key, a damaged entry is trained again, and what
cannot be keyed runs uncached. A new ``cached_run`` stands for a new process."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import importlib
import json
import random
import warnings

import numpy as np
import pytest
import torch

from gpt_from_scratch.book import run_cache, run_key
from gpt_from_scratch.book.ladder import BigramModel, LadderConfig, train_rung
from gpt_from_scratch.dpo import train_dpo
from gpt_from_scratch.model import GPT, GPTConfig
from gpt_from_scratch.train import train
from gpt_from_scratch.train_config import TrainConfig

TINY = GPTConfig(vocab_size=65, context_length=16, d_model=32, n_layers=2, n_heads=4,
                 dropout=0.1)
CFG = TrainConfig(max_iters=6, batch_size=4, warmup_iters=2, eval_interval=3, eval_iters=2,
                  progress=False)
IDS = np.random.default_rng(0).integers(0, 65, 2_000).astype(np.uint16)
RUNG = LadderConfig(batch_size=4, block_size=8, eval_iters=2)


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPT_FROM_SCRATCH_CACHE", str(tmp_path))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the cache keys one-thread runs only
    yield tmp_path
    torch.set_num_threads(threads)


def _entries(cache):
    return list((cache / "runs").glob("*/run.json"))


def _model(seed=0):
    torch.manual_seed(seed)
    return GPT(TINY)


def _after(model, returned, out):
    """Everything a call leaves: weights, gradients, flags, random states, value, stdout,
    plain attributes."""
    return ({k: v.clone() for k, v in model.state_dict().items()},
            {n: None if p.grad is None else p.grad.clone()
             for n, p in model.named_parameters()},
            [m.training for m in model.modules()], torch.get_rng_state(), random.getstate(),
            repr(np.random.get_state()), returned, out,
            [run_key.plain_attributes(m) for m in model.modules()])


def _same(a, b):
    assert a[0].keys() == b[0].keys()
    assert all(torch.equal(a[0][k], b[0][k]) for k in a[0])
    assert a[1].keys() == b[1].keys()
    assert all((x is None and y is None) or torch.equal(x, y)
               for x, y in zip(a[1].values(), b[1].values()))
    assert a[2] == b[2] and torch.equal(a[3], b[3]) and a[4] == b[4]
    assert a[5] == b[5] and a[6] == b[6] and type(a[6]) is type(b[6]) and a[7] == b[7]
    assert a[8] == b[8]  # train() leaves check_token_ids set on the model


def _call(fn, capsys, seed=0, rng=7, **changes):
    model = _model(seed)
    torch.manual_seed(rng)
    random.seed(rng)
    np.random.seed(rng)
    returned = fn(model, IDS, IDS, dataclasses.replace(CFG, **changes))
    return _after(model, returned, capsys.readouterr().out)


def _printing_train(model, train_ids, val_ids, cfg):
    """``train`` that prints, warns, leaves one block in training mode and draws from every
    global generator."""
    history = train(model, train_ids, val_ids, cfg)
    model.blocks[1].train()
    warnings.warn("a warning to keep", RuntimeWarning)
    print("done", torch.rand(1).item(), random.random(), np.random.rand())
    return history


def test_a_hit_leaves_exactly_what_the_training_left(capsys, cache, monkeypatch):
    monkeypatch.setattr(_printing_train, "__module__", "gpt_from_scratch.train")
    with pytest.warns(RuntimeWarning, match="a warning to keep"):
        plain = _call(_printing_train, capsys)
    with pytest.warns(RuntimeWarning, match="a warning to keep"):
        first = _call(run_cache.cached_run(_printing_train), capsys)  # trains and saves
    assert len(_entries(cache)) == 1
    with pytest.warns(RuntimeWarning, match="a warning to keep"):
        second = _call(run_cache.cached_run(_printing_train), capsys)  # reads
    _same(plain, first)
    _same(plain, second)
    assert "done" in second[7] and any(second[2]) and not all(second[2])  # mixed flags


def test_a_hit_does_not_train_and_a_repeat_in_one_process_does(capsys, monkeypatch):
    _call(run_cache.cached_run(train), capsys)

    def no_training(*args):
        raise AssertionError("trained again")

    monkeypatch.setattr("gpt_from_scratch.train._train", no_training)
    cached = run_cache.cached_run(train)  # another process
    _call(cached, capsys)
    with pytest.raises(AssertionError, match="trained again"):  # the same key once more
        _call(cached, capsys)
    with pytest.raises(AssertionError, match="trained again"):  # another key
        _call(run_cache.cached_run(train), capsys, rng=8)


def test_two_modules_that_share_weights_key_otherwise_than_two_copies(capsys, cache):
    policy = _model()
    pairs = [([1, 2, 3, 4], [2, 3, 4, 5])] * 4
    keys = [run_key.run_key(train_dpo, (policy, other, pairs * 2, 0, 2), {})
            for other in (copy.copy(policy), copy.deepcopy(policy), policy)]
    assert len(set(keys)) == 3
    chosen = [([1, 2, 3], [2, 3, 4]), ([3, 2, 1], [2, 1, 0])]
    shifted = [((a, b), (a, [b[0], 9, 9])) for a, b in chosen]
    plain = copy.deepcopy(policy)
    torch.manual_seed(3)  # dropout's masks
    losses = train_dpo(plain, copy.deepcopy(policy), shifted, 0, 3, batch_size=2)
    for _ in range(2):  # the second a hit, in another process
        model = copy.deepcopy(policy)
        torch.manual_seed(3)
        got = run_cache.cached_run(train_dpo)(model, copy.deepcopy(policy), shifted, 0, 3,
                                              batch_size=2)
        assert got == losses
        assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(),
                                                     plain.state_dict().values()))
    assert len(_entries(cache)) == 1


@pytest.mark.parametrize("change", ["weights", "config", "data", "random", "code",
                                    "flag", "requires_grad", "dropout", "environment",
                                    "autocast", "numpy random"])
def test_every_input_changes_the_key(change, monkeypatch):
    model, data, cfg = _model(), IDS.copy(), CFG
    torch.manual_seed(0)
    np.random.seed(0)
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
    elif change == "flag":
        model.blocks[0].train(False)
    elif change == "requires_grad":
        model.wpe.weight.requires_grad_(False)
    elif change == "dropout":
        model.blocks[0].attn.resid_dropout.p = 0.2  # an attribute, no weight
    elif change == "environment":
        monkeypatch.setenv("MKL_CBWR", "COMPATIBLE")
    elif change == "numpy random":
        np.random.rand()
    if change != "random":
        torch.manual_seed(0)
    if change == "autocast":
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert run_key.run_key(train, (model, data, data, cfg), {}) != before
    else:
        assert run_key.run_key(train, (model, data, data, cfg), {}) != before


def test_the_same_inputs_give_the_same_key():
    keys = []
    for _ in range(2):
        model = _model()
        torch.manual_seed(0)
        keys.append(run_key.run_key(train, (model, IDS.copy(), IDS, CFG), {}))
    assert keys[0] == keys[1]


@pytest.mark.parametrize("damage", ["truncated state", "edited result", "no flags",
                                    "no flags, summed again"])
def test_a_damaged_entry_is_trained_again(damage, capsys, cache, monkeypatch):
    said = []
    monkeypatch.setattr(run_cache, "_say", said.append)
    plain = _call(train, capsys)
    _call(run_cache.cached_run(train), capsys)
    (folder,) = (path.parent for path in _entries(cache))
    if damage == "truncated state":
        state = folder / "state.safetensors"
        state.write_bytes(state.read_bytes()[:-100])
    else:
        meta = json.loads((folder / "run.json").read_text())
        if damage == "edited result":
            meta["returned"]["fields"]["val_loss"][-1] += 1.0
        else:
            del meta["modules"]
        (folder / "run.json").write_text(json.dumps(meta))
        if damage.endswith("summed again"):  # whole by its sums, yet not what fits
            text = (folder / "run.json").read_bytes()
            (folder / "run.sha256").write_text(hashlib.sha256(text).hexdigest())
    again = _call(run_cache.cached_run(train), capsys)
    assert "cannot be used" in said[0] and not capsys.readouterr().err  # not in the cell
    _same(plain, again)
    _same(plain, _call(run_cache.cached_run(train), capsys))  # the new entry is whole


@pytest.mark.filterwarnings("ignore:.*keep the cores busy")  # the two-thread call's
def test_what_cannot_be_keyed_runs_uncached(capsys, cache, tmp_path):
    cached = run_cache.cached_run(train, side_effects=("out_dir",))
    model = _model()
    cached(model, IDS, IDS, CFG, out_dir=tmp_path / "ckpt")  # writes files: not cached
    assert (tmp_path / "ckpt").is_dir() and not _entries(cache)
    model.register_forward_hook(lambda *a: None)
    cached(model, IDS, IDS, CFG)  # a hook changes what the model computes
    hooked = _model()
    hooked.wte.weight.register_hook(lambda g: g * 0)  # so does a hook on a weight
    cached(hooked, IDS, IDS, CFG)
    torch.set_num_threads(2)
    cached(_model(), IDS, IDS, CFG)  # train() may take fewer threads on a busy machine
    torch.set_num_threads(1)
    assert not _entries(cache)

    class Mine(BigramModel):  # a class of the notebook's own: its code is not known
        pass

    cached_rung = run_cache.cached_run(train_rung)
    cached_rung(Mine(65), IDS, IDS, RUNG, 0, max_iters=3)
    assert not _entries(cache)
    run_cache.cached_run(train_rung, only_from="__main__")(BigramModel(65), IDS, IDS, RUNG,
                                                           0, max_iters=3)
    assert not _entries(cache)  # not called by a notebook
    notebook = {"__name__": "__main__", "rung": run_cache.cached_run(train_rung,
                                                                   only_from="__main__"),
                "BigramModel": BigramModel, "IDS": IDS, "RUNG": RUNG}
    exec("def cell():\n    return rung(BigramModel(65), IDS, IDS, RUNG, 1, max_iters=3)\n"
         "cell()", notebook)  # a function a cell defines, called from a cell
    assert len(_entries(cache)) == 1
    cached_rung(BigramModel(65), IDS, IDS, RUNG, 0, max_iters=3)
    assert len(_entries(cache)) == 2


def test_a_package_file_changed_after_the_process_started_is_not_keyed(monkeypatch):
    monkeypatch.setattr(run_key, "STARTED", 0.0)  # every file is newer
    with pytest.raises(run_key.Unkeyable, match="changed after this process started"):
        run_key.run_key(train, (_model(), IDS, IDS, CFG), {})


def test_a_call_that_changes_an_argument_in_place_is_not_kept(cache, monkeypatch):
    def shuffle_in_place(model, ids):
        ids[0] += 1
        return 0.0

    monkeypatch.setattr(shuffle_in_place, "__module__", "gpt_from_scratch.train")
    monkeypatch.setattr(shuffle_in_place, "__qualname__", "shuffle_in_place")
    run_cache.cached_run(shuffle_in_place)(_model(), IDS.copy())
    assert not _entries(cache)


def test_a_module_s_plain_attributes_are_put_back_and_a_new_submodule_is_not_kept(
        cache, monkeypatch):
    def retune(model, ids):
        model.blocks[0].attn.resid_dropout.p = 0.5
        return 0.0

    def swap(model, ids):
        model.blocks[0].attn.resid_dropout = torch.nn.Identity()
        return 0.0

    for fn in (retune, swap):
        monkeypatch.setattr(fn, "__module__", "gpt_from_scratch.train")
        monkeypatch.setattr(fn, "__qualname__", fn.__name__)
    run_cache.cached_run(retune)(_model(), IDS)
    model = _model()
    run_cache.cached_run(retune)(model, IDS)  # a hit
    assert model.blocks[0].attn.resid_dropout.p == 0.5 and len(_entries(cache)) == 1
    run_cache.cached_run(swap)(_model(), IDS)  # a submodule replaced: no record can
    assert len(_entries(cache)) == 1


def test_the_chapters_that_time_their_training_are_named_in_the_docstring():
    spec = importlib.util.spec_from_file_location(
        "nbval_conftest", run_key.PACKAGE_DIR.parent / "notebooks" / "conftest.py")
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    numbers = sorted(int(name[:2]) for name in conftest.TIMED)
    said = " and ".join(map(str, numbers))
    assert f"Chapters {said})" in " ".join(run_cache.__doc__.split())


def test_odd_functions_are_refused():
    with pytest.raises(TypeError, match="must be a function of the package"):
        run_cache.cached_run(_model().forward)
    with pytest.raises(ValueError, match=r"side_effects \['outdir'\] are not arguments"):
        run_cache.cached_run(train, side_effects=("outdir",))


def test_install_wraps_the_runs_once_and_can_be_turned_off(monkeypatch):
    import gpt_from_scratch.train as module

    for where in (*run_cache.TRAINERS, *run_cache.SCORERS):  # each put back after
        module_name, _, name = where.partition(":")
        module_of = importlib.import_module(f"gpt_from_scratch.{module_name}")
        monkeypatch.setattr(module_of, name, getattr(module_of, name))
    monkeypatch.setenv(run_cache.ENV_VAR, "0")
    run_cache.install()
    assert module.train is train
    monkeypatch.delenv(run_cache.ENV_VAR)
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
    keyword = "f = lambda step, _, *, at=AT: step == at"
    assert key(_notebook_function(keyword, AT=5)) != key(_notebook_function(keyword, AT=6))
    with pytest.raises(run_key.Unkeyable, match="not of a plain type"):
        key(_notebook_function("f = lambda step, _, seen=(): step in seen"))


class _Loud(int):
    def __eq__(self, other):
        print("an effect")
        return int(self) == other


@pytest.mark.parametrize("source", [
    "f = lambda step, _: seen.append(step)",  # a call: an effect
    "f = lambda step, model: model.training",  # an attribute
    "f = lambda step, _: step == STEPS[0]",  # a list, which can change
    "f = lambda step, _: step == LOUD",  # an int whose == has an effect
    "def f(step, model):\n    g = lambda: step\n    return g()",  # a function inside
    "def f(step, model):\n    seen[0] = step",  # a store
    "f = lambda step, model: model.training",  # an attribute named like a plain global
])
def test_a_notebook_function_that_could_have_an_effect_is_not_keyed(source):
    with pytest.raises(run_key.Unkeyable):
        run_key.values_digest([_notebook_function(source, seen=[], STEPS=[5],
                                                  LOUD=_Loud(5), training=True)])


def test_the_chapters_calls_can_be_keyed():
    """The calls Chapters 6 and 12 make (a rung, a GPT, a chat model and its DPO reference),
    so that a change that made them unkeyable fails here, not only slows the tests."""
    from gpt_from_scratch.book.ladder import RUNGS, LadderModel
    from gpt_from_scratch.chat import add_chat_tokens

    for rung in RUNGS:
        torch.manual_seed(0)
        run_key.run_key(train_rung, (LadderModel(65, rung, RUNG), IDS, IDS, RUNG, 0), {})
    chat = add_chat_tokens(_model())
    run_key.run_key(train_dpo, (chat, copy.deepcopy(chat), [], 0, 2), {})
    stop = _notebook_function("f = lambda step, _: step == STEPS", STEPS=5)
    run_key.values_digest([stop])


def test_a_package_object_is_keyed_by_its_class_and_its_state():
    """A tokenizer (an object of the package, not a dataclass) keys by its class and every
    attribute; an object of another module is refused."""
    from gpt_from_scratch.chat import ChatTokenizer
    from gpt_from_scratch.tokenizer import CharTokenizer

    def key(value):
        return run_key.values_digest([value])

    abc = CharTokenizer("abc")
    assert key(abc) == key(CharTokenizer("cba"))  # the same vocabulary
    assert key(abc) != key(CharTokenizer("abd"))
    assert key(ChatTokenizer(abc, 3)) != key(ChatTokenizer(CharTokenizer("abd"), 3))
    abc.stoi["a"] = 2  # a state the constructor would not make
    assert key(abc) != key(CharTokenizer("abc"))

    class Foreign:
        pass

    with pytest.raises(run_key.Unkeyable, match=r"of type .*\.Foreign"):
        key(Foreign())

    class Listed(list):  # state outside its __dict__
        pass

    Listed.__module__ = CharTokenizer.__module__
    with pytest.raises(run_key.Unkeyable, match=r"of type .*\.Listed"):
        key(Listed([1]))
    loop = CharTokenizer("ab")
    loop.me = loop
    with pytest.raises(run_key.Unkeyable, match="holds itself"):
        key(loop)
    twice = ChatTokenizer(abc, 3)
    key([twice, twice])  # met twice, not inside itself: keyed


def test_a_scoring_run_is_served_as_the_call_returns_it(capsys, cache):
    """Chapter 14's sampled scores (a dict with NaN) and answers (tuples), Chapter 12's
    greedy evaluation (its Items): the same value and types from the cache as from the
    call, the model untouched; keyed without the global generators, which a hit leaves as
    they are; a different seed is another run."""
    from gpt_from_scratch.book.assistant import Item, evaluate
    from gpt_from_scratch.book.verifier import sampled_scores
    from gpt_from_scratch.book.verifier_control import sampled_answers
    from gpt_from_scratch.chat import ChatTokenizer
    from gpt_from_scratch.tokenizer import CharTokenizer

    chars = CharTokenizer("".join(chr(c) for c in range(32, 127)) + "\n")
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=chars.vocab_size + 4, context_length=64, d_model=16,
                          n_layers=1, n_heads=2, dropout=0.0)).eval()
    model.check_token_ids = True  # as sampling leaves it (utils.skip_token_id_checks)
    tok = ChatTokenizer(chars, chars.vocab_size)
    items = [Item("Last word", "Is it not so, my lord?"), Item("Repeat", "Peace, ho!")]
    calls = [(sampled_scores, (model, tok, items, 4, 2), {"seed": 1}),
             (sampled_answers, (model, tok, items, 3), {"seed": 2}),
             (evaluate, (model, tok, items), {})]
    for fn, args, kwargs in calls:
        weights = copy.deepcopy(model.state_dict())
        results = []
        for seed in (5, 6):  # a new wrapper: a new process, its generators elsewhere
            torch.manual_seed(seed)
            returned = run_cache.cached_run(fn, only_from=__name__,
                                            global_random=False)(*args, **kwargs)
            assert torch.equal(torch.get_rng_state(), torch.manual_seed(seed).get_state())
            results.append(repr(returned))  # tuples stay tuples, Items Items
        assert results[0] == results[1]
        assert all(torch.equal(weights[k], v) for k, v in model.state_dict().items())
    assert len(_entries(cache)) == 3
    run_cache.cached_run(sampled_scores, only_from=__name__,
                         global_random=False)(model, tok, items, 4, 2, seed=2)
    assert len(_entries(cache)) == 4


def _drawing_score(model, ids):
    """A scorer that draws from the global generator (dropout in training mode would)."""
    with torch.no_grad():
        return float(model(torch.as_tensor(ids[None, :8].astype("int64")))[0].sum()
                     + torch.rand(()))


def test_a_scoring_call_that_draws_from_a_global_generator_is_not_kept(cache, monkeypatch):
    monkeypatch.setattr(_drawing_score, "__module__", "gpt_from_scratch.book.assistant")
    model = _model()
    first = run_cache.cached_run(_drawing_score, global_random=False)(model, IDS)
    second = run_cache.cached_run(_drawing_score, global_random=False)(model, IDS)
    assert first != second and _entries(cache) == []


def test_the_scorers_give_the_same_under_any_global_seed():
    """What keying them without the global generators rests on: two real calls under other
    torch, NumPy and Python seeds give the same, with dropout on, and move no generator."""
    from gpt_from_scratch.book.assistant import Item
    from gpt_from_scratch.chat import ChatTokenizer
    from gpt_from_scratch.tokenizer import CharTokenizer

    chars = CharTokenizer("".join(chr(c) for c in range(32, 127)) + "\n")
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=chars.vocab_size + 4, context_length=64, d_model=16,
                          n_layers=1, n_heads=2, dropout=0.5))  # in training mode
    reference = copy.deepcopy(model)
    tok = ChatTokenizer(chars, chars.vocab_size)
    items = [Item("Last word", "Is it not so, my lord?"), Item("Repeat", "Peace, ho!")]
    extra = {"sampled_scores": (3, 2), "sampled_answers": (3,),
             "next_token_kl": (), "answer_logprob": (), "evaluate": ()}
    for where in run_cache.SCORERS:
        module_name, _, name = where.partition(":")
        fn = getattr(importlib.import_module(f"gpt_from_scratch.{module_name}"), name)
        first = reference if name == "next_token_kl" else tok
        args = (model, first, tok, items) if name == "next_token_kl" else (
            model, tok, items, *extra[name])
        results = []
        for seed in (1, 2):
            torch.manual_seed(seed)
            random.seed(seed)
            np.random.seed(seed)
            before = run_key.random_states()
            results.append(repr(fn(*args)))
            after = run_key.random_states()
            assert torch.equal(before["torch"], after["torch"]), name
            assert before["python"] == after["python"], name
            assert repr(before["numpy"]) == repr(after["numpy"]), name
        assert results[0] == results[1], name
        assert model.training, name  # its flag put back


def test_a_hit_on_unchanged_weights_leaves_a_graph_differentiable(cache):
    from gpt_from_scratch.book.assistant import Item
    from gpt_from_scratch.book.verifier import answer_logprob
    from gpt_from_scratch.chat import ChatTokenizer
    from gpt_from_scratch.tokenizer import CharTokenizer

    chars = CharTokenizer("".join(chr(c) for c in range(32, 127)) + "\n")
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=chars.vocab_size + 4, context_length=64, d_model=16,
                          n_layers=1, n_heads=2, dropout=0.0)).eval()
    tok = ChatTokenizer(chars, chars.vocab_size)
    items = [Item("Repeat", "Peace, ho!")]
    for _ in range(2):  # a miss, then a hit
        loss = model(torch.zeros(1, 4, dtype=torch.long))[0].sum()
        run_cache.cached_run(answer_logprob, global_random=False)(model, tok, items)
        loss.backward()  # no weight was written over in place
        model.zero_grad(set_to_none=True)  # gradients are in the key
    assert len(_entries(cache)) == 1
