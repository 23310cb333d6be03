"""Chapter 7's ONNX files (gpt_from_scratch.export): ONNX Runtime computes what PyTorch
does.

The references are the book's own modules: ``GPT.forward`` and ``Llama.forward`` for the
logits, ``generate(..., greedy=True)`` for decoding, ``GPT.attention_maps`` and
``interp.logit_lens`` for the internals. Three small models are exported, one through the
command line. The tests that need ONNX skip where the ``onnx`` extra (onnx, onnxscript,
onnxruntime) or torch >= 2.6 is missing, as in ``make test-oldest``'s venv.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json

import pytest
import torch
from torch import nn
from torch.torch_version import TorchVersion

from gpt_from_scratch import export, interp
from gpt_from_scratch.chat import SPECIAL_TOKENS, ChatTokenizer, add_chat_tokens
from gpt_from_scratch.checkpoint import save_checkpoint
from gpt_from_scratch.export import (FORMAT, GPTGraph, LlamaGraph, OnnxMetadata,
                                     export_onnx, main, read_onnx_metadata)
from gpt_from_scratch.generate import generate
from gpt_from_scratch.model import GPT, GPTConfig
from gpt_from_scratch.modern import Llama, LlamaConfig
from gpt_from_scratch.tokenizer import CharTokenizer

TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\nAll:\nSpeak.\n"
N = 16  # context_length
# float32 on the CPU: the largest |ONNX Runtime - PyTorch| measured here was 1.2e-7, on
# logits of size ~0.3 (onnxruntime 1.32.0, torch 2.13.0); 1e-5 leaves room for other CPUs.
TOL = 1e-5
EXTRA = "pip install 'gpt-from-scratch-book[onnx]'"


@pytest.fixture(scope="module")
def ort():
    """onnxruntime, where the onnx extra and torch's exporter are installed; else a skip."""
    for name in ("onnx", "onnxscript", "onnxruntime"):
        pytest.importorskip(name, reason=f"{name} comes with the onnx extra: {EXTRA}")
    if TorchVersion(torch.__version__) < export.MIN_TORCH:
        pytest.skip(f"torch {torch.__version__}: export_onnx needs torch >= "
                    f"{export.MIN_TORCH}'s torch.export-based exporter")
    return importlib.import_module("onnxruntime")


@pytest.fixture(scope="module")
def tokenizer():
    return CharTokenizer(TEXT)


@pytest.fixture(scope="module")
def model(tokenizer):
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=tokenizer.vocab_size, context_length=N, d_model=32,
                       n_layers=2, n_heads=2, dropout=0.0)
    return GPT(config).eval()


@pytest.fixture(scope="module")
def llama(tokenizer):
    torch.manual_seed(1)
    config = LlamaConfig(vocab_size=tokenizer.vocab_size, context_length=N, d_model=32,
                         n_layers=1, n_heads=4, n_kv_heads=2, multiple_of=16)
    return Llama(config).eval()


@pytest.fixture(scope="module")
def cli(ort, model, tmp_path_factory):
    """The command line run on a checkpoint of ``model``, into a folder that does not exist
    yet: the file it wrote, and what it printed."""
    folder = tmp_path_factory.mktemp("cli")
    checkpoint = save_checkpoint(folder / "ckpt", model)
    (folder / "text.txt").write_text(TEXT, encoding="utf-8")
    out = folder / "new" / "folder" / "tiny.onnx"
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        main([str(checkpoint), str(out), "--chars", str(folder / "text.txt")])
    return out, printed.getvalue()


@pytest.fixture(scope="module")
def onnx_file(cli):
    return cli[0]


@pytest.fixture(scope="module")
def session(ort, onnx_file):
    return ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])


def ids(B: int, T: int, V: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


def run(session, idx: torch.Tensor) -> list[torch.Tensor]:
    return [torch.from_numpy(out) for out in session.run(None, {"idx": idx.numpy()})]


def without_onnxscript(monkeypatch) -> None:
    """A torch new enough for the exporter, and onnxscript not installed."""
    monkeypatch.setattr(torch, "__version__", "2.13.0")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "onnxscript" else real(name, *a))


def test_the_graphs_compute_the_models_forward(model, llama):
    V = model.config.vocab_size
    with torch.no_grad():
        for B, T in [(1, 1), (3, 7), (2, N)]:
            idx = ids(B, T, V)
            assert torch.equal(GPTGraph(model)(idx), model(idx)[0])
            assert torch.equal(LlamaGraph(llama)(idx), llama(idx)[0])
            # attention written out against F.scaled_dot_product_attention: 1.8e-7 measured
            logits, attention, resid = GPTGraph(model, internals=True)(idx)
            torch.testing.assert_close(logits, model(idx)[0], atol=1e-6, rtol=0)
            torch.testing.assert_close(attention, torch.stack(model.attention_maps(idx)))
            lens = model.lm_head(model.ln_f(resid))  # (L, B, T, V)
            expected = interp.logit_lens(model, idx)
            torch.testing.assert_close(lens, expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize("B, T", [(1, 1), (2, 5), (1, N), (4, N)])
def test_onnx_runtimes_logits_are_pytorchs(session, model, B, T):
    idx = ids(B, T, model.config.vocab_size, seed=B * 100 + T)
    (logits,) = run(session, idx)
    with torch.no_grad():
        expected = model(idx)[0]
    assert logits.shape == (B, T, model.config.vocab_size)
    assert (logits - expected).abs().max() <= TOL


def test_the_tolerance_catches_a_weight_changed_by_a_thousandth(session, model):
    changed = GPT(model.config).eval()
    changed.load_state_dict(model.state_dict())
    with torch.no_grad():
        changed.blocks[1].mlp.c_proj.bias[0] += 1e-3
        idx = ids(2, N, model.config.vocab_size)
        assert (run(session, idx)[0] - changed(idx)[0]).abs().max() > TOL


def test_greedy_decoding_with_onnx_runtime_picks_generates_tokens(session, model,
                                                                  tokenizer):
    prompts = torch.tensor([tokenizer.encode(p) for p in ("All:\n", "Speak")])  # (2, 5)
    expected = generate(model, prompts, max_new_tokens=30, greedy=True)
    out = prompts
    for _ in range(30):  # the whole window each step, cropped as generate crops it
        (logits,) = run(session, out[:, -N:])
        out = torch.cat([out, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert out.shape == (2, 35) and torch.equal(out, expected)


def test_the_metadata_round_trips_and_onnx_runtime_reads_it(session, onnx_file, model,
                                                             tokenizer):
    assert read_onnx_metadata(onnx_file) == OnnxMetadata(
        "GPT", model.config, "char", tokenizer.chars, ["logits"])
    meta = session.get_modelmeta().custom_metadata_map
    assert meta["gpt_from_scratch.format"] == FORMAT
    assert json.loads(meta["gpt_from_scratch.chars"]) == tokenizer.chars
    assert [(i.name, i.shape, i.type) for i in session.get_inputs()] == [
        ("idx", ["B", "T"], "tensor(int64)")]


def test_the_command_line_says_what_it_wrote(cli):
    path, printed = cli
    assert printed == f"wrote {path} ({path.stat().st_size:,} bytes)\n"  # folders made


def test_internals_are_the_attention_maps_and_the_logit_lens(ort, model, tokenizer,
                                                             tmp_path):
    model.train()  # exported in eval mode, and left in training mode
    try:
        path = export_onnx(model, tmp_path / "internals.onnx", tokenizer, internals=True)
        assert all(m.training for m in model.modules())
    finally:
        model.eval()
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert read_onnx_metadata(path).outputs == ["logits", "attention", "resid"]
    for B, T in [(1, 1), (3, N)]:
        idx = ids(B, T, model.config.vocab_size)
        logits, attention, resid = run(session, idx)
        with torch.no_grad():
            assert (logits - model(idx)[0]).abs().max() <= TOL
            assert (attention - torch.stack(model.attention_maps(idx))).abs().max() <= TOL
            lens = model.lm_head(model.ln_f(resid))  # (L, B, T, V)
            assert (lens - interp.logit_lens(model, idx)).abs().max() <= TOL


def test_the_lens_output_is_interp_logit_lens(ort, model, tokenizer, tmp_path):
    path = export_onnx(model, tmp_path / "lens.onnx", tokenizer, lens=True)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert read_onnx_metadata(path).outputs == ["logits", "lens"]
    idx = ids(2, N, model.config.vocab_size)
    logits, lens = run(session, idx)
    with torch.no_grad():
        expected = interp.logit_lens(model, idx)  # (L, B, T, V)
        assert (lens - expected).abs().max() <= TOL
        assert torch.equal(lens[-1], logits)  # the last block's read-out is the output
        # the residual stream read without ln_f, a wrong lens, fails the same check
        resid = GPTGraph(model, internals=True)(idx)[2]  # (L, B, T, D)
        assert (lens - model.lm_head(resid)).abs().max() > TOL


def test_a_chat_model_records_its_chat_tokens(ort, model, tokenizer, tmp_path):
    torch.manual_seed(2)
    grown = add_chat_tokens(model).eval()  # V + 4 rows
    chat_tok = ChatTokenizer(tokenizer, tokenizer.vocab_size)
    folder = save_checkpoint(tmp_path / "ckpt", grown)
    (tmp_path / "text.txt").write_text(TEXT, encoding="utf-8")
    path = tmp_path / "chat.onnx"
    with contextlib.redirect_stdout(io.StringIO()):
        main([str(folder), str(path), "--chars", str(tmp_path / "text.txt"), "--chat",
              "--internals", "--lens"])
    meta = read_onnx_metadata(path)
    assert (meta.chars, meta.special) == (tokenizer.chars, list(SPECIAL_TOKENS))
    assert meta.outputs == ["logits", "attention", "resid", "lens"]
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    prompt, _ = chat_tok.render([{"role": "user", "content": "Speak"}], True)
    idx = torch.tensor([prompt])  # (1, 8): the chat tokens' ids included
    logits, attention, _, lens = run(session, idx)
    with torch.no_grad():
        assert (logits - grown(idx)[0]).abs().max() <= TOL
        assert (attention - torch.stack(grown.attention_maps(idx))).abs().max() <= TOL
        assert (lens - interp.logit_lens(grown, idx)).abs().max() <= TOL
    with pytest.raises(ValueError, match="ChatTokenizer has 34 tokens, the model vocab"):
        export_onnx(model, tmp_path / "m.onnx", chat_tok)


def test_a_llama_exports_its_logits_and_runs_past_its_context(ort, llama, tokenizer,
                                                              tmp_path):
    path = export_onnx(llama, tmp_path / "llama.onnx", tokenizer)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    meta = read_onnx_metadata(path)
    assert (meta.model, meta.config) == ("Llama", llama.config)
    V = llama.config.vocab_size
    for B, T in [(1, 1), (2, N)]:
        idx = ids(B, T, V)
        with torch.no_grad():
            assert (run(session, idx)[0] - llama(idx)[0]).abs().max() <= TOL
    longer = ids(1, N + 4, V)  # no position table: the page must crop
    assert run(session, longer)[0].shape == (1, N + 4, V)


def test_what_onnx_runtime_does_with_inputs_the_model_refuses(session, model):
    V = model.config.vocab_size
    with pytest.raises(Exception, match="broadcast"):  # T > context_length: wpe has N rows
        run(session, ids(1, N + 1, V))
    with pytest.raises(Exception, match="out of data bounds"):
        run(session, torch.tensor([[0, V]]))
    # a negative id is read from the end, as Python indexes: the page checks ids itself
    last = run(session, torch.tensor([[V - 1]]))[0]
    assert torch.equal(run(session, torch.tensor([[-1]]))[0], last)


@pytest.mark.parametrize("case, error, match", [
    ("linear", TypeError, "exports the book's GPT and Chapter 10's Llama only"),
    ("llama internals", ValueError, "a Llama exports its logits only"),
    ("llama lens", ValueError, "a Llama exports its logits only"),
    ("internals 1", ValueError, "internals=1 must be True or False"),
    ("lens 1", ValueError, "lens=1 must be True or False"),
    ("other characters", ValueError, "has 3 characters, the model vocab_size="),
    ("gpt2 vocabulary", ValueError, "GPT-2's BPE has 50,257 tokens"),
    ("no tokenizer", TypeError, "neither a CharTokenizer nor GPT-2's BPE"),
    ("folder", ValueError, "is a folder: pass a file path"),
    ("half", ValueError, r"\['torch.float16'\] weights.*model.float\(\)"),
    ("too big", ValueError, "protobuf's limit"),
    ("old torch", RuntimeError, "needs torch >= 2.6"),
    ("no onnxscript", ImportError, "onnxscript: pip install"),
])
def test_clear_errors_before_exporting(model, llama, tokenizer, tmp_path, monkeypatch, case,
                                       error, match):
    args = {"model": model, "path": tmp_path / "m.onnx", "tokenizer": tokenizer}
    if case == "linear":
        args["model"] = nn.Linear(2, 2)
    elif case == "llama internals":
        args |= {"model": llama, "internals": True}
    elif case == "llama lens":
        args |= {"model": llama, "lens": True}
    elif case == "internals 1":
        args["internals"] = 1
    elif case == "lens 1":
        args["lens"] = 1
    elif case == "other characters":
        args["tokenizer"] = CharTokenizer("abc")
    elif case == "gpt2 vocabulary":
        args["tokenizer"] = "gpt2"
    elif case == "no tokenizer":
        args["tokenizer"] = 42
    elif case == "folder":
        args["path"] = tmp_path
    elif case == "half":
        args["model"] = GPT(model.config).half()
    elif case == "too big":
        monkeypatch.setattr(export, "MAX_BYTES", 1000)
    elif case == "old torch":
        monkeypatch.setattr(torch, "__version__", "2.5.1")
    else:
        without_onnxscript(monkeypatch)
    with pytest.raises(error, match=match):
        export_onnx(**args)
    assert not (tmp_path / "m.onnx").exists()


def test_a_graph_with_fixed_sizes_is_refused(ort):
    onnx = importlib.import_module("onnx")
    fixed = onnx.helper.make_tensor_value_info("idx", onnx.TensorProto.INT64, ["B", 4])
    proto = onnx.helper.make_model(onnx.helper.make_graph([], "g", [fixed], [fixed]))
    with pytest.raises(RuntimeError, match=r"fixed sizes \[4\], not \(B, T\)"):
        export._check_dynamic(proto, 2)
    export._check_dynamic(proto, 1)  # B alone is a variable


def test_a_crash_while_writing_leaves_the_old_file_and_no_other(ort, model, tokenizer,
                                                               tmp_path, monkeypatch):
    onnx = importlib.import_module("onnx")
    idx = onnx.helper.make_tensor_value_info("idx", onnx.TensorProto.INT64, ["B", "T"])
    proto = onnx.helper.make_model(onnx.helper.make_graph([], "g", [idx], [idx]))
    program = type("Program", (), {"model_proto": proto})
    monkeypatch.setattr(torch.onnx, "export", lambda *args, **kwargs: program)

    def crash(proto, path):
        open(path, "wb").write(b"half a file")
        raise OSError("the disk is full")

    monkeypatch.setattr(onnx, "save_model", crash)
    path = tmp_path / "m.onnx"
    path.write_bytes(b"the previous export")
    with pytest.raises(OSError, match="the disk is full"):
        export_onnx(model, path, tokenizer)
    assert path.read_bytes() == b"the previous export"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_a_file_that_is_not_one_of_the_books_is_refused(ort, onnx_file, tmp_path):
    onnx = importlib.import_module("onnx")
    data = onnx_file.read_bytes()
    with pytest.raises(FileNotFoundError, match="no ONNX file at"):
        read_onnx_metadata(tmp_path / "missing.onnx")
    for cut in [0, 10, len(data) // 2, len(data) - 1]:  # cut short anywhere
        (tmp_path / "cut.onnx").write_bytes(data[:cut])
        with pytest.raises(ValueError, match="not a complete ONNX file|cut short"):
            read_onnx_metadata(tmp_path / "cut.onnx")
    (tmp_path / "text.onnx").write_text("hello, not ONNX\n")
    with pytest.raises(ValueError, match="is not a complete ONNX file"):
        read_onnx_metadata(tmp_path / "text.onnx")
    x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])
    y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])
    identity = onnx.helper.make_node("Identity", ["x"], ["y"])
    other = onnx.helper.make_model(onnx.helper.make_graph([identity], "g", [x], [y]))
    onnx.save_model(other, tmp_path / "other.onnx")
    with pytest.raises(ValueError, match="not one of the book's models .none of its keys"):
        read_onnx_metadata(tmp_path / "other.onnx")
    proto = onnx.load_model(onnx_file)
    next(p for p in proto.metadata_props if p.key.endswith(".config")).value = "{"
    onnx.save_model(proto, tmp_path / "damaged.onnx")
    with pytest.raises(ValueError, match="the book's metadata is damaged"):
        read_onnx_metadata(tmp_path / "damaged.onnx")


@pytest.mark.parametrize("case, match", [
    ("missing", "no checkpoint at"),
    ("corrupt", "does not match checkpoint.json"),
    ("no recipe", "does not record its tokenizer (no recipe): pass --vocab gpt2"),
    ("bpe recipe", "GPT-2's BPE has 50,257 tokens"),  # the recipe read: "bpe" is GPT-2's
    ("no text", "No such file"),
    ("no onnxscript", "onnxscript: pip install"),  # "onnx and onnxscript" where both lack
])
def test_the_command_line_refuses_a_bad_checkpoint_clearly(model, tmp_path, capsys,
                                                           monkeypatch, case, match):
    folder, text = tmp_path / "ckpt", tmp_path / "text.txt"
    text.write_text(TEXT, encoding="utf-8")
    if case != "missing":
        recipe = {"recipe": {"data": "bpe"}} if case == "bpe recipe" else None
        save_checkpoint(folder, model, extra=recipe)
    if case == "corrupt":
        weights = folder / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:-10])
    if case == "no onnxscript":
        without_onnxscript(monkeypatch)
    options = {"no text": ["--chars", str(tmp_path / "none.txt")],
               "no onnxscript": ["--chars", str(text)]}.get(case, [])
    with pytest.raises(SystemExit) as exit_:
        main([str(folder), str(tmp_path / "out.onnx"), *options])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert match in err, err
    assert not (tmp_path / "out.onnx").exists()
