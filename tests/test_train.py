"""Chapter 6: the learning-rate schedule, the optimizer groups, the loop, checkpoints, resuming,
the command line, the data helpers and ``book_model``."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from gpt_from_scratch.book import recipes
from gpt_from_scratch.book.cli import main
from gpt_from_scratch.book.recipes import (
    Recipe,
    book_model,
    book_model_path,
    char_level_data,
)
from gpt_from_scratch.checkpoint import load_checkpoint, save_checkpoint
from gpt_from_scratch.model import GPT, GPTConfig
from gpt_from_scratch.train import estimate_loss, train
from gpt_from_scratch.train_config import History, TrainConfig, lr_at, make_optimizer

TINY = dict(vocab_size=65, context_length=16, d_model=32, n_layers=2, n_heads=4, dropout=0.0)


@pytest.fixture(scope="module")
def char_data():
    return char_level_data()


def _model(seed: int = 0, **overrides) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig(**(TINY | overrides)))


def _fast(**overrides) -> TrainConfig:
    settings = dict(max_iters=12, batch_size=4, warmup_iters=3, eval_interval=6, eval_iters=2, progress=False)
    return TrainConfig(**(settings | overrides))


# ---------------------------------------------------------------------------------------------- schedule


def test_lr_schedule_warms_up_linearly_then_follows_a_cosine():
    cfg = TrainConfig(learning_rate=1e-3, min_lr=1e-4, warmup_iters=10, max_iters=110)
    assert lr_at(0, cfg) == pytest.approx(1e-3 / 11)
    assert lr_at(4, cfg) == pytest.approx(1e-3 * 5 / 11)
    assert lr_at(10, cfg) == pytest.approx(1e-3)  # the end of the warm-up is the peak
    assert lr_at(60, cfg) == pytest.approx((1e-3 + 1e-4) / 2)  # halfway down the cosine
    assert lr_at(35, cfg) == pytest.approx(1e-4 + 0.9e-3 * (1 + math.cos(math.pi / 4)) / 2)
    assert lr_at(110, cfg) == pytest.approx(1e-4)
    assert lr_at(500, cfg) == pytest.approx(1e-4)
    decay = [lr_at(s, cfg) for s in range(10, 111)]
    assert all(a >= b for a, b in zip(decay, decay[1:]))


def test_lr_decay_iters_can_differ_from_max_iters():
    cfg = TrainConfig(learning_rate=1.0, min_lr=0.0, warmup_iters=0, max_iters=10, lr_decay_iters=20)
    assert lr_at(10, cfg) == pytest.approx(0.5)


# ---------------------------------------------------------------------------------------------- optimizer


def test_weight_decay_applies_to_matrices_only():
    model = _model()
    optimizer = make_optimizer(model, TrainConfig(weight_decay=0.1))
    names = {id(p): n for n, p in model.named_parameters()}
    decayed = {names[id(p)] for g in optimizer.param_groups if g["weight_decay"] > 0 for p in g["params"]}
    plain = {names[id(p)] for g in optimizer.param_groups if g["weight_decay"] == 0 for p in g["params"]}
    assert "wte.weight" in decayed and "blocks.0.attn.c_attn.weight" in decayed and "blocks.1.mlp.c_fc.weight" in decayed
    assert "blocks.0.ln_1.weight" in plain and "ln_f.bias" in plain and "blocks.0.attn.c_attn.bias" in plain
    assert all(dict(model.named_parameters())[n].dim() >= 2 for n in decayed)
    assert all(dict(model.named_parameters())[n].dim() == 1 for n in plain)
    # the tied lm_head/wte matrix is optimized once
    assert sum(p.numel() for g in optimizer.param_groups for p in g["params"]) == model.num_parameters()


# ---------------------------------------------------------------------------------------------- loss, loop


def test_untrained_loss_is_about_ln_vocab_and_estimates_are_reproducible(char_data):
    train_ids, val_ids, _ = char_data
    model = _model().train()
    splits = {"train": train_ids, "val": val_ids}
    first = estimate_loss(model, splits, batch_size=4, block_size=16, eval_iters=3, seed=1)
    second = estimate_loss(model, splits, batch_size=4, block_size=16, eval_iters=3, seed=1)
    assert first == second
    assert model.training  # mode restored
    assert abs(first["val"] - math.log(65)) < 0.05  # GPT-2's small init: logits near 0, a near-uniform guess


def test_a_short_run_learns_characters(char_data):
    """CI-sized: a 2-layer, 64-wide model gets below 2.5 nats in 200 steps (ln 65 = 4.17 untrained)."""
    train_ids, val_ids, _ = char_data
    model = _model(d_model=64, context_length=32)
    cfg = TrainConfig(max_iters=200, batch_size=16, learning_rate=5e-3, min_lr=5e-4, warmup_iters=20,
                      eval_interval=100, eval_iters=10, seed=0, progress=False)
    history = train(model, train_ids, val_ids, cfg)
    assert history.eval_step == [0, 100, 200]
    assert history.step == list(range(200)) and len(history.loss) == len(history.lr) == 200
    assert history.val_loss[0] > 4.0
    assert history.val_loss[-1] < 2.5
    assert history.lr == [lr_at(s, cfg) for s in range(200)]


# ---------------------------------------------------------------------------------------------- checkpoints


@pytest.mark.parametrize("tie", [True, False])
def test_checkpoint_round_trip(tmp_path, tie):
    model = _model(tie_weights=tie)
    save_checkpoint(tmp_path, model, step=7, train_config=_fast(), extra={"note": "hi"})
    stored = load_file(tmp_path / "model.safetensors")
    assert ("lm_head.weight" in stored) == (not tie)  # a tied matrix is stored once
    ckpt = load_checkpoint(tmp_path)
    assert ckpt.step == 7 and ckpt.train_config == _fast() and ckpt.extra == {"note": "hi"}
    assert ckpt.model.config == model.config
    assert (ckpt.model.lm_head.weight is ckpt.model.wte.weight) == tie  # re-tied
    for (name, a), (_, b) in zip(model.state_dict().items(), ckpt.model.state_dict().items()):
        assert torch.equal(a, b), name
    assert not ckpt.model.training
    assert not list(tmp_path.glob("*.tmp"))  # atomic writes leave no temporary files


def test_a_damaged_checkpoint_is_refused(tmp_path):
    save_checkpoint(tmp_path, _model(), step=1)
    data = bytearray((tmp_path / "model.safetensors").read_bytes())
    data[-1] ^= 0xFF
    (tmp_path / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(ValueError, match="does not match checkpoint.json"):
        load_checkpoint(tmp_path)
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        load_checkpoint(tmp_path / "elsewhere")


def test_resuming_gives_exactly_the_uninterrupted_run(char_data, tmp_path):
    train_ids, val_ids, _ = char_data
    settings = dict(max_iters=12, lr_decay_iters=12)
    whole = _model(dropout=0.1)  # dropout: the resumed run must also draw the same masks
    full = train(whole, train_ids, val_ids, _fast(**settings))

    first = _model(dropout=0.1)
    train(first, train_ids, val_ids, _fast(**settings | {"max_iters": 6}), out_dir=tmp_path)
    assert load_checkpoint(tmp_path).step == 6
    second = _model(seed=99, dropout=0.1)  # other initial weights: all of them must come from the checkpoint
    resumed = train(second, train_ids, val_ids, _fast(**settings), out_dir=tmp_path, resume=True)

    assert resumed == full  # every loss, learning rate and estimate, bit for bit
    for (name, a), (_, b) in zip(whole.state_dict().items(), second.state_dict().items()):
        assert torch.equal(a, b), name
    assert load_checkpoint(tmp_path).step == 12


def test_resume_needs_a_checkpoint_with_optimizer_state(char_data, tmp_path):
    train_ids, val_ids, _ = char_data
    save_checkpoint(tmp_path, _model(), step=3)
    with pytest.raises(ValueError, match="no optimizer state"):
        train(_model(), train_ids, val_ids, _fast(), out_dir=tmp_path, resume=True)


# ---------------------------------------------------------------------------------------------- command line


def test_command_line_trains_saves_and_resumes(tmp_path, capsys):
    common = ["--preset", "shakespeare-char", "--n-layers", "1", "--d-model", "32", "--n-heads", "2",
              "--batch-size", "2", "--eval-interval", "2", "--eval-iters", "1", "--progress", "false",
              "--out", str(tmp_path)]
    main(common + ["--max-iters", "3", "--lr", "3e-3"])
    ckpt = load_checkpoint(tmp_path)
    assert ckpt.step == 3
    assert ckpt.model.config.n_layers == 1 and ckpt.model.config.d_model == 32
    assert ckpt.train_config.learning_rate == 3e-3 and ckpt.train_config.progress is False
    main(common + ["--max-iters", "5", "--lr", "3e-3", "--resume"])
    assert load_checkpoint(tmp_path).step == 5
    assert "val loss" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------- data, book models


def test_char_level_data_is_nanogpts_split(char_data):
    train_ids, val_ids, tokenizer = char_data
    assert (len(train_ids), len(val_ids), tokenizer.vocab_size) == (1_003_854, 111_540, 65)
    assert tokenizer.decode(train_ids[:14]) == "First Citizen:"
    assert train_ids.dtype == np.uint16


def test_bpe_level_data(tmp_path, monkeypatch):
    monkeypatch.setenv("GPT_FROM_SCRATCH_CACHE", str(tmp_path))
    train_ids, val_ids, encoding = recipes.bpe_level_data()
    assert (len(train_ids), len(val_ids)) == (301_966, 36_059)
    assert encoding.decode(list(train_ids[:3])) == "First Citizen:"


def test_book_model_trains_once_then_loads_the_same_weights(tmp_path, monkeypatch):
    monkeypatch.setenv("GPT_FROM_SCRATCH_CACHE", str(tmp_path))
    recipe = Recipe("char", dataclasses.asdict(GPTConfig(**TINY)), dict(max_iters=4, batch_size=2, eval_interval=2,
                                                                      eval_iters=1, warmup_iters=1))
    monkeypatch.setitem(recipes.RECIPES, "shakespeare-char", recipe)
    model, tokenizer = book_model("shakespeare-char", progress=False)
    assert book_model_path("shakespeare-char").parent == tmp_path / "models"
    assert book_model_path("shakespeare-char").name.startswith("shakespeare-char-")
    assert tokenizer.vocab_size == 65 and not model.training
    stamp = (book_model_path("shakespeare-char") / "checkpoint.json").stat().st_mtime_ns
    loaded, _ = book_model("shakespeare-char", progress=False)
    assert (book_model_path("shakespeare-char") / "checkpoint.json").stat().st_mtime_ns == stamp  # not retrained
    history = load_checkpoint(book_model_path("shakespeare-char")).history
    assert isinstance(history, History) and history.eval_step == [0, 2, 4]

    monkeypatch.setenv("GPT_FROM_SCRATCH_CACHE", str(tmp_path / "again"))
    retrained, _ = book_model("shakespeare-char", progress=False)  # deterministic: the same weights again
    for (name, a), (_, b), (_, c) in zip(model.state_dict().items(), loaded.state_dict().items(),
                                         retrained.state_dict().items()):
        assert torch.equal(a, b) and torch.equal(a, c), name

    meta = json.loads((book_model_path("shakespeare-char") / "checkpoint.json").read_text())
    meta["files"]["model.safetensors"] = "0" * 64  # a damaged cache is retrained, with a warning
    (book_model_path("shakespeare-char") / "checkpoint.json").write_text(json.dumps(meta))
    with pytest.warns(UserWarning, match="retraining"):
        book_model("shakespeare-char", progress=False)
    with pytest.raises(ValueError, match="unknown book model"):
        book_model("shakespeare-word")


TWO_AT_ONCE = """
import dataclasses, sys, time
from gpt_from_scratch.book import model_cache, recipes
from gpt_from_scratch.model import GPTConfig

tiny = GPTConfig(vocab_size=65, context_length=16, d_model=32, n_layers=2, n_heads=4, dropout=0.0)
recipes.RECIPES["shakespeare-char"] = recipes.Recipe(
    "char", dataclasses.asdict(tiny), dict(max_iters=4, batch_size=2, eval_interval=2, eval_iters=1))
train = recipes.train
def slow_train(*args, **kwargs):  # long enough for the other process to ask meanwhile
    print("this process trains it", flush=True)
    time.sleep(3)
    return train(*args, **kwargs)
recipes.train = slow_train
model_cache.QUIET_WAIT_S = 0.5  # shorter than the training: the waiting process says it waits
recipes.book_model("shakespeare-char", progress=False)
"""


def test_two_processes_that_ask_for_a_book_model_at_once_train_it_once(tmp_path):
    import os
    import subprocess
    import sys

    env = os.environ | {"GPT_FROM_SCRATCH_CACHE": str(tmp_path), "OMP_NUM_THREADS": "1"}
    runs = [subprocess.Popen([sys.executable, "-c", TWO_AT_ONCE], env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    outputs = [run.communicate(timeout=120) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], [err[-2000:] for _, err in outputs]
    said = "".join(out for out, _ in outputs)
    assert said.count("this process trains it") == 1, said  # one trained it...
    assert "another process is training this model; waiting for it" in said  # ...the other waited
    entries = [p.name for p in (tmp_path / "models").iterdir() if p.is_dir()]
    assert len(entries) == 1 and entries[0].startswith("shakespeare-char-"), entries  # one entry


class _Wrapper(torch.nn.Module):
    """A new module around a model (as ``DocumentStart`` or a reader's own wrapper): in training mode."""

    def __init__(self, model: GPT):
        super().__init__()
        self.model, self.config = model, model.config

    def forward(self, idx, targets=None):
        return self.model(idx, targets)


def test_estimate_loss_and_generate_leave_every_module_in_the_mode_they_found():
    from gpt_from_scratch.generate import generate

    model = GPT(GPTConfig(vocab_size=65, context_length=16, d_model=32, n_layers=1, n_heads=2,
                          dropout=0.5)).eval()
    wrapper = _Wrapper(model)
    data = torch.arange(300) % 65
    estimate_loss(wrapper, {"val": data}, batch_size=2, eval_iters=2)
    generate(wrapper, torch.zeros(1, 1, dtype=torch.long), 3, use_cache=False)
    assert wrapper.training  # as it was
    assert not any(m.training for m in model.modules())  # the dropout inside stays off
    model.train()
    estimate_loss(model, {"val": data}, batch_size=2, eval_iters=2)
    assert all(m.training for m in model.modules())
