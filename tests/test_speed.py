"""Chapters 6 and 7, the speed settings: mixed precision, torch.compile and the best checkpoint in
``train``; the static KV cache and compiled decoding step of ``generate``. Tiny models, on the CPU; the
tests taking the ``device`` fixture run again on a GPU where there is one (conftest.py)."""

from __future__ import annotations

import copy
import mmap
import os
import platform
import subprocess
import sys

import numpy as np
import pytest
import torch

from gpt_from_scratch import train as train_module
from gpt_from_scratch.book.recipes import char_level_data
from gpt_from_scratch.book.timing import host_reads
from gpt_from_scratch.checkpoint import load_checkpoint
from gpt_from_scratch.generate import generate
from gpt_from_scratch.model import GPT, GPTConfig
from gpt_from_scratch.precision import native_bf16, resolve_precision
from gpt_from_scratch.train import train
from gpt_from_scratch.train_config import TrainConfig
from gpt_from_scratch.utils import float32_matmul_precision

TINY = dict(vocab_size=65, context_length=16, d_model=32, n_layers=2, n_heads=4, dropout=0.0)
# bf16 keeps 8 bits of mantissa: a relative error of 2^-8 = 0.4% per rounding. On a loss of ~4.2 nats the
# products' errors mostly average out; 0.02 nats (0.5%) bounds a few steps with a wide margin (seen: 1e-4).
BF16_TOLERANCE = 0.02
FP16_TOLERANCE = 0.005  # 11 bits of mantissa: 8x finer than bf16 (seen: 2e-5)
COMPILE_TOLERANCE = 1e-4  # the same float32 arithmetic, fused and reordered (seen: 5e-7)
# On a GPU, train's float32 products are TF32 (fp16's mantissa, float32's range) in both runs, and the
# kernels differ in what they round: bounded as fp16 is (not yet measured on a GPU).
TF32_TOLERANCE = FP16_TOLERANCE


@pytest.fixture(scope="module")
def char_data():
    return char_level_data()


def _run(char_data, device="cpu", **settings):
    train_ids, val_ids, _ = char_data
    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY))
    cfg = TrainConfig(**dict(max_iters=6, batch_size=4, warmup_iters=2, eval_interval=3, eval_iters=2,
                             progress=False, device=device) | settings)
    return train(model, train_ids, val_ids, cfg), model


def _gap(a, b) -> float:
    return float(np.abs(np.array(a.loss + a.val_loss) - np.array(b.loss + b.val_loss)).max())


def test_auto_precision_is_fp32_on_the_cpu_so_cpu_runs_are_unchanged(char_data):
    assert resolve_precision("auto", "cpu") == "fp32"
    auto, _ = _run(char_data)
    fp32, _ = _run(char_data, precision="fp32")
    assert auto == fp32  # bit for bit


def test_bf16_autocast_trains_within_tolerance_of_fp32(char_data, device):
    if device == "cuda" and not native_bf16(device):
        pytest.skip("this GPU only emulates bfloat16, so train refuses it (the fp16 test covers it)")
    fp32, _ = _run(char_data, device, precision="fp32")
    bf16, _ = _run(char_data, device, precision="bf16")
    assert 0 < _gap(fp32, bf16) < BF16_TOLERANCE  # > 0: the products really ran in bf16


def test_fp16_uses_a_gradient_scaler_and_stays_within_tolerance(char_data, device, monkeypatch):
    """fp16 is what ``precision="auto"`` picks on a GPU that only emulates bf16, such as Colab's T4."""
    calls = []
    step = torch.amp.GradScaler.step
    monkeypatch.setattr(torch.amp.GradScaler, "step", lambda self, *a, **k: calls.append(1) or step(self, *a, **k))
    fp32, _ = _run(char_data, device, precision="fp32")
    try:
        fp16, _ = _run(char_data, device, precision="fp16")
    except RuntimeError as err:  # an older torch without float16 autocast on the CPU
        if device != "cpu":
            raise
        pytest.skip(f"float16 autocast or GradScaler is not available on this CPU build: {err}")
    assert len(calls) == 6  # every optimizer step went through the scaler
    assert 0 < _gap(fp32, fp16) < FP16_TOLERANCE


def test_compiled_training_matches_eager(char_data, device):
    """torch.compile on the CPU (inductor writes C++ and calls the C compiler): a tiny model, a minute or two."""
    eager, eager_model = _run(char_data, device, max_iters=3, eval_interval=3)
    compiled, compiled_model = _run(char_data, device, max_iters=3, eval_interval=3, compile=True)
    assert _gap(eager, compiled) < (COMPILE_TOLERANCE if device == "cpu" else TF32_TOLERANCE)
    if device == "cpu":  # in TF32 the weights may differ by a step's size where a gradient is near 0
        for (name, a), (_, b) in zip(eager_model.state_dict().items(), compiled_model.state_dict().items()):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "bf16"])
def test_the_training_forward_pass_compiles_to_one_graph(autocast):
    """A graph break (a ``.item()``, a Python branch on a tensor) splits the compiled model and costs a host
    round trip per step on a GPU: the token-id checks must be skipped while compiling, and nothing else break."""
    config = GPTConfig(vocab_size=65, context_length=16, d_model=32, n_layers=2, n_heads=2, dropout=0.1)
    model = GPT(config).train()
    x, y = (torch.randint(0, 65, (2, 16), generator=torch.Generator().manual_seed(i)) for i in (0, 1))
    torch._dynamo.reset()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        explained = torch._dynamo.explain(model)(x, y)
    reasons = [b.reason for b in explained.break_reasons]
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), reasons


def test_host_reads_counts_every_value_read_back():
    t = torch.arange(4.0)
    assert host_reads(lambda: t * 2) == 0
    assert host_reads(lambda: (t.sum().item(), bool(t.any()), int(t[1]))) == 3
    assert host_reads(lambda: t.sum().item(), device="cpu") == 1
    assert host_reads(lambda: t.sum().item(), device="cuda") == 0  # only reads of tensors on the GPU


def test_train_reads_the_gpu_back_only_at_its_loss_estimates(char_data, device):
    """On a GPU, ``train`` waits for the device only when it estimates the losses (every ``eval_interval``
    steps, where it also reads the steps' losses back): 4 more steps, no more reads. On the CPU it reads
    each step's loss and gradient norm at once (free there), which shows the count sees train's reads."""
    reads = [host_reads(lambda: _run(char_data, device, max_iters=n, eval_interval=100), device=device)
             for n in (4, 8)]
    if device == "cuda":
        assert reads[1] == reads[0]
    else:
        assert reads[1] - reads[0] >= 2 * 4


@pytest.mark.parametrize("checked, reads", [(True, 3), (False, 0)])
def test_a_training_step_waits_for_the_device_only_for_the_token_id_checks(checked, reads):
    """nanoGPT's step reads nothing back; ours read three booleans (the idx and targets checks) until
    ``train`` checked batches on the host and turned them off."""
    model = GPT(GPTConfig(**TINY)).train()
    model.check_token_ids = checked
    x, y = (torch.randint(0, 65, (2, 16), generator=torch.Generator().manual_seed(i)) for i in (0, 1))

    def step():
        _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)

    assert host_reads(step) == reads


@pytest.mark.parametrize("path", [dict(), dict(use_cache=False), dict(static_cache=True)],
                         ids=["kv-cache", "no-cache", "static-cache"])
def test_greedy_generation_waits_for_the_device_twice_per_call_not_once_per_token(path, device):
    """The prompt's id check, and the finiteness of every step's logits read at the end: two reads
    whatever the number of new tokens (one per token would stall a GPU between tokens)."""
    model = GPT(GPTConfig(**TINY)).to(device)
    prompt = torch.randint(0, 65, (1, 4), generator=torch.Generator().manual_seed(0)).to(device)
    reads = [host_reads(lambda: generate(model, prompt, n, greedy=True, **path), device)
             for n in (3, 9)]
    assert reads == [2, 2]
    assert model.check_token_ids  # back on


def test_train_checks_batches_on_the_host_and_gives_the_model_its_checks_back(char_data, monkeypatch):
    train_ids, val_ids, _ = char_data
    seen = []
    forward = GPT.forward
    monkeypatch.setattr(GPT, "forward", lambda self, *a, **k: seen.append(self.check_token_ids)
                        or forward(self, *a, **k))
    model = GPT(GPTConfig(**TINY))
    cfg = TrainConfig(max_iters=2, batch_size=2, eval_interval=2, eval_iters=1, progress=False)
    train(model, train_ids, val_ids, cfg)
    assert seen and not any(seen) and model.check_token_ids
    bad = np.array(train_ids, dtype=np.int64)
    bad[::7] = 65  # one id past the vocabulary in every window
    with pytest.raises(ValueError, match=r"token ids must be in \[0, 65\), this batch has values in \[\d+, 65\]"):
        train(model, bad, val_ids, cfg)
    assert model.check_token_ids  # back on after the error too


def test_train_uses_tf32_on_a_gpu_only_while_it_runs(char_data, device, monkeypatch):
    """TF32 speeds training up on a GPU; after ``train`` the setting is back (even after an error),
    so that what a chapter runs next, a parity check say, is as exact as before."""
    seen = []
    forward = GPT.forward
    monkeypatch.setattr(GPT, "forward", lambda self, *a, **k: seen.append(torch.get_float32_matmul_precision())
                        or forward(self, *a, **k))
    torch.set_float32_matmul_precision("highest")  # PyTorch's default
    _run(char_data, device, max_iters=2)
    assert set(seen) == {"high" if device == "cuda" else "highest"}
    assert torch.get_float32_matmul_precision() == "highest"
    with pytest.raises(FloatingPointError), float32_matmul_precision("medium"):
        assert torch.get_float32_matmul_precision() == "medium"
        raise FloatingPointError("a run that diverged")
    assert torch.get_float32_matmul_precision() == "highest"


@pytest.mark.parametrize("settings, message", [
    (dict(precision="fp64"), r"precision='fp64' is not one of \('auto', 'fp32', 'bf16', 'fp16'\)"),
    (dict(precision=None), "precision=None is not one of"),
    (dict(compile="yes"), "compile='yes' must be True or False"),
    (dict(keep_best=1), "keep_best=1 must be True or False"),
])
def test_bad_speed_settings_are_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**settings)


def test_precision_the_device_cannot_do_is_refused():
    with pytest.raises(ValueError, match="not on 'mps'.*use precision='fp32'"):
        resolve_precision("bf16", "mps")
    assert resolve_precision("auto", "mps") == "fp32"


BF16_ATTENTION = """
import torch, torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from gpt_from_scratch.precision import autocast, cpu_bf16_attention_fails
with sdpa_kernel(SDPBackend.MATH):  # the caller's choice of kernel does not fool the probe
    cpu_bf16_attention_fails()
q = torch.randn(2, 3, 64, 8, requires_grad=True)  # (B, H, T, d_k): T >= 64 packs
context = autocast("bf16", "cpu")
for _ in range(2):  # entered again, as torch.autocast can be
    with context:
        y = F.scaled_dot_product_attention(q, q, q, is_causal=True)
    y.float().sum().backward()
print(y.dtype, torch.backends.cpu.get_cpu_capability())
"""


@pytest.mark.parametrize("capability", ["default", "avx2", "avx512"])
def test_bf16_autocast_attention_runs_under_every_cpu_capability(capability):
    """On a CPU with bfloat16 units, torch 2.13's fused attention fails in bfloat16 below
    avx512 ("pack_vnni2"): ``autocast`` routes it to the written-out kernel there."""
    env = {**os.environ, "ATEN_CPU_CAPABILITY": capability}
    out = subprocess.run([sys.executable, "-c", BF16_ATTENTION], capture_output=True,
                         text=True, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("torch.bfloat16"), out.stdout



@pytest.mark.parametrize("capability, auto", [((7, 5), "fp16"), ((8, 0), "bf16"), ((9, 0), "bf16")])
def test_auto_precision_is_bf16_only_on_a_gpu_that_computes_in_it(monkeypatch, capability, auto):
    """Colab's T4 (7.5) only emulates bfloat16, slowly, and torch.compile skips bf16 graphs there,
    yet ``torch.cuda.is_bf16_supported()`` says True on it: the choice must not rest on that."""
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.version, "hip", None)
    assert resolve_precision("auto", "cuda") == auto
    if auto == "fp16":
        with pytest.raises(ValueError, match=r"capability 7\.5\) only emulates bfloat16.*'fp16'"):
            resolve_precision("bf16", "cuda:0")
    else:
        assert resolve_precision("bf16", "cuda") == "bf16"

def _scripted_val_losses(monkeypatch, values):
    """Make ``estimate_loss`` report ``values`` as the validation losses, in order (the train loss: 1.0)."""
    values = iter(values)
    monkeypatch.setattr(train_module, "estimate_loss", lambda *a, **k: {"train": 1.0, "val": next(values)})


def test_training_keeps_the_weights_of_the_lowest_validation_loss(char_data, monkeypatch, tmp_path):
    _scripted_val_losses(monkeypatch, [3.0, 2.0, 2.5])  # at steps 0, 3, 6: the best after step 3
    history, model = _run(char_data, lr_decay_iters=6)
    assert (history.best_step, history.best_val_loss, history.final_val_loss) == (3, 2.0, 2.5)
    assert history.summary("runs/x/best") == ("best val loss 2.0000 at step 3 (weights in runs/x/best); "
                                              "final val loss 2.5000 at step 6")
    _scripted_val_losses(monkeypatch, [3.0, 2.0])
    _, at_step_3 = _run(char_data, lr_decay_iters=6, max_iters=3)
    for (name, a), (_, b) in zip(model.state_dict().items(), at_step_3.state_dict().items()):
        assert torch.equal(a, b), name

    _scripted_val_losses(monkeypatch, [3.0, 2.0, 2.5])
    train_ids, val_ids, _ = char_data
    torch.manual_seed(0)
    cfg = TrainConfig(max_iters=6, batch_size=4, warmup_iters=2, eval_interval=3, eval_iters=2, progress=False)
    train(GPT(GPTConfig(**TINY)), train_ids, val_ids, cfg, out_dir=tmp_path)
    best = load_checkpoint(tmp_path / "best")
    assert best.step == 3 and best.optimizer_state is None
    for (name, a), (_, b) in zip(model.state_dict().items(), best.model.state_dict().items()):
        assert torch.equal(a, b), name
    assert load_checkpoint(tmp_path).step == 6  # the last step, with its optimizer state: to resume from


def test_keep_best_false_ends_with_the_last_weights(char_data, monkeypatch):
    _scripted_val_losses(monkeypatch, [3.0, 2.0, 2.5])
    history, model = _run(char_data, keep_best=False)
    _scripted_val_losses(monkeypatch, [3.0, 2.0, 2.5])
    _, kept = _run(char_data)
    assert history.best_step == 3
    assert not all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), kept.state_dict().values()))


def test_a_resumed_run_keeps_the_best_weights_from_before_the_resume(char_data, monkeypatch, tmp_path):
    train_ids, val_ids, _ = char_data
    settings = dict(batch_size=4, warmup_iters=2, eval_interval=3, eval_iters=2, lr_decay_iters=9, progress=False)
    _scripted_val_losses(monkeypatch, [3.0, 2.0, 2.5, 2.6])
    torch.manual_seed(0)
    whole = GPT(GPTConfig(**TINY))
    train(whole, train_ids, val_ids, TrainConfig(max_iters=9, **settings))

    _scripted_val_losses(monkeypatch, [3.0, 2.0, 2.5, 2.6])
    torch.manual_seed(0)
    train(GPT(GPTConfig(**TINY)), train_ids, val_ids, TrainConfig(max_iters=6, **settings), out_dir=tmp_path)
    resumed = GPT(GPTConfig(**TINY))
    history = train(resumed, train_ids, val_ids, TrainConfig(max_iters=9, **settings), out_dir=tmp_path,
                    resume=True)
    assert history.best_step == 3 and history.eval_step == [0, 3, 6, 9]
    for (name, a), (_, b) in zip(whole.state_dict().items(), resumed.state_dict().items()):
        assert torch.equal(a, b), name


# ---------------------------------------------------------------------------------------------- generation


@pytest.fixture(scope="module")
def tiny_model():
    from gpt_from_scratch.model import GPT, GPTConfig

    torch.manual_seed(0)
    return GPT(GPTConfig(**TINY)).eval()


PROMPT = torch.randint(65, (2, 5), generator=torch.Generator().manual_seed(1))
# 30 new tokens after 5 with a context of 16: the cache fills up and restarts, twice


@pytest.mark.parametrize("fast", [dict(static_cache=True), dict(compile=True)], ids=["static", "compiled"])
def test_static_cache_and_compiled_step_give_the_tokens_of_the_eager_path(tiny_model, fast, device):
    """On a GPU, ``compile`` replays the step as a CUDA graph (``mode="reduce-overhead"``)."""
    from gpt_from_scratch.generate import generate

    model, prompt = copy.deepcopy(tiny_model).to(device), PROMPT.to(device)
    greedy = generate(model, prompt, 30, greedy=True)
    assert torch.equal(generate(model, prompt, 30, greedy=True, **fast), greedy)
    sampled = generate(model, prompt, 30, top_k=10, generator=torch.Generator(device).manual_seed(3))
    again = generate(model, prompt, 30, top_k=10, generator=torch.Generator(device).manual_seed(3), **fast)
    assert torch.equal(again, sampled)
    assert not torch.equal(sampled, greedy)  # the draws really were random


def test_static_decoder_logits_match_the_model(tiny_model):
    from gpt_from_scratch.fast import StaticDecoder

    decoder = StaticDecoder(tiny_model, B=2)
    with torch.no_grad():
        full = tiny_model(PROMPT)[0]  # (B, T, V)
        prefill = decoder(PROMPT[:, :3], decoder.positions[:3])  # (B, 3, V)
        steps = [decoder(PROMPT[:, t : t + 1], decoder.positions[t : t + 1]) for t in range(3, 5)]
    torch.testing.assert_close(torch.cat([prefill, *steps], dim=1), full, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("settings, message", [
    (dict(static_cache=True, use_cache=False), "ways of using the KV cache"),
    (dict(compile="yes"), "compile must be True or False, got 'yes'"),
    (dict(static_cache=1), "static_cache must be True or False"),
])
def test_bad_fast_generation_options_are_refused(tiny_model, settings, message):
    from gpt_from_scratch.generate import generate

    with pytest.raises(ValueError, match=message):
        generate(tiny_model, PROMPT, 2, greedy=True, **settings)


def test_static_cache_checks_token_ids(tiny_model):
    from gpt_from_scratch.generate import generate

    with pytest.raises(ValueError, match=r"token ids must be in \[0, 65\)"):
        generate(tiny_model, PROMPT + 100, 2, greedy=True, static_cache=True)


# ---------------------------------------------------------------------------------------------- chapter 7's prose


def test_speedups_prose_says_faster_slower_or_the_same_as_the_numbers_do():
    from gpt_from_scratch.book.speed_prose import speedups_prose

    text = speedups_prose({"fused AdamW": (0.2, 0.1), "bf16 autocast": (0.1, 0.9), "SDPA": (0.1, 0.102)}, "cpu")
    assert "fused AdamW: 100.0 ms against 200.0 ms, 2.0x faster" in text
    assert "bf16 autocast: 900.0 ms against 100.0 ms, slower (9.0x the time)" in text
    assert "SDPA: 102.0 ms against 100.0 ms, no measurable change (within 5%)" in text
    assert "bf16 autocast did not help on this CPU" in text and "SDPA did not help" not in text
    assert "costs more than the narrower numbers save" in text
    assert "did not help" not in speedups_prose({"compile": (0.3, 0.1)}, "cuda")


def test_bandwidth_prose_is_the_weights_over_the_bandwidth():
    from gpt_from_scratch.book.speed_prose import bandwidth_prose

    text = bandwidth_prose(124_000_000, 4, 10e9, 5.0, "cpu")  # 496 MB at 10 GB/s: 20.2 tokens/s at most
    assert "496 MB at 4 bytes each" in text and "about 20.2 tokens/s" in text and "25% of that limit" in text


def test_allocator_prose_says_what_reusing_freed_memory_changed():
    from gpt_from_scratch.book.speed_prose import allocator_prose

    pages = 100_000_000 // mmap.PAGESIZE  # 100 MB of pages
    text = allocator_prose({"before": (0.6, pages), "after": (0.4, 0)}, applied=True)
    assert f"600 ms with {pages:,} page faults (100 MB mapped in afresh)" in text
    assert "400 ms with no page faults" in text and "1.5x faster" in text
    text = allocator_prose({"before": (0.5, None), "after": (0.5, None)}, applied=False)
    assert "page faults not counted" in text and "changed nothing here" in text and "faster" not in text


def test_measurements_run_on_the_cpu(tiny_model):
    from gpt_from_scratch.book.timing import copy_bandwidth, decode_rate, step_time

    x = torch.randint(65, (2, 16))
    assert step_time(GPT(GPTConfig(**TINY)), x, x, precision="bf16", fused=True, repeats=1) > 0
    assert decode_rate(tiny_model, PROMPT[:1], 4, repeats=1, static_cache=True) > 0
    assert copy_bandwidth(n_bytes=1 << 20) > 0


def test_step_times_alternates_the_settings_and_puts_sdpa_back(monkeypatch):
    from gpt_from_scratch import attention
    from gpt_from_scratch.book.timing import step_time, step_times

    written_out = []
    original = attention.scaled_dot_product_attention
    monkeypatch.setattr(attention, "scaled_dot_product_attention",
                        lambda *args, **kwargs: written_out.append(1) or original(*args, **kwargs))
    model = GPT(GPTConfig(**TINY))
    x = torch.randint(65, (2, 16), generator=torch.Generator().manual_seed(0))
    times = step_times(model, x, x, {"SDPA": {}, "fused": dict(fused=False),
                                     "written out": dict(sdpa=False)}, rounds=2)  # the last
    assert list(times) == ["SDPA", "fused", "written out"] and min(times.values()) > 0
    assert len(written_out) == (1 + 2) * TINY["n_layers"]  # warm-up and 2 rounds, every layer
    assert all(block.attn.fast for block in model.blocks)  # SDPA again afterwards
    for block in model.blocks:
        block.attn.fast = False  # a reader's written-out model: step_time keeps it so
    written_out.clear()
    step_time(model, x, x, repeats=1)
    assert len(written_out) == 2 * TINY["n_layers"] and not model.blocks[0].attn.fast
    with pytest.raises(ValueError, match="shape of idx"):  # a failing step puts it back too
        step_times(model, x, x[:, :4], {"SDPA": dict(sdpa=True)}, rounds=1)
    assert not any(block.attn.fast for block in model.blocks)


REUSE_SCRIPT = """
import torch
from gpt_from_scratch.allocator import reuse_freed_memory
from gpt_from_scratch.book.timing import page_faults
step = lambda: torch.empty(25_000_000).fill_(1).sum()  # 100 MB, allocated, written and freed
step()
before = page_faults(step)
applied = reuse_freed_memory()
after = [page_faults(step) for _ in range(15)]
print(before, applied, sum(after[-5:]))
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="reuse_freed_memory configures glibc's malloc")
def test_reuse_freed_memory_ends_the_page_faults_of_a_big_block_allocated_again():
    # a fresh process: the setting cannot be undone, and this one's may have it already
    out = subprocess.run([sys.executable, "-c", REUSE_SCRIPT], capture_output=True, text=True, check=True)
    before, applied, last_five = out.stdout.split()
    pages = 100_000_000 // mmap.PAGESIZE
    assert applied == "True"
    assert int(before) > 0.9 * pages  # glibc gave the block back: every page mapped in again
    # The heap grows to hold the block within the first few steps (seen: 1 to 5, while Python's own
    # small objects settle around it); from then on no step maps pages in.
    assert int(last_five) < 0.01 * pages


def test_lesson_prose_concludes_from_the_measurements():
    from gpt_from_scratch.book.speed_prose import lesson_prose

    mixed = lesson_prose({"fused AdamW": (0.2, 0.1), "SDPA": (0.1, 0.1)}, 5.0, 20.0, "cpu")
    assert "only fused AdamW paid (at most 2.0x)" in mixed and "25% of the limit" in mixed
    none = lesson_prose({"SDPA": (0.1, 0.1)}, 5.0, 20.0, "cpu")
    assert "none of them paid" in none
    every = lesson_prose({"compile": (0.3, 0.1)}, 5.0, 20.0, "cuda")
    assert "every technique measured here paid" in every and "compile most (3.0x)" in every
