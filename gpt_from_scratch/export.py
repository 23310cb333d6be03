"""Chapter 7 — the book's models as ONNX files, which ONNX Runtime (and a web page) runs.

``export_onnx`` writes a ``GPT`` (or Chapter 10's ``Llama``) as one ONNX file: token ids
(B, T) int64 in, logits (B, T, V) float32 out, for any batch size B and any length T from 1
to ``context_length``. For a ``GPT`` it can also return what Chapter 13 reads inside: every
layer's attention pattern, the residual stream after each block, and the logit lens (each
block's residual stream through ``ln_f`` and the head). The file records the model's config
and vocabulary (GPT-2's BPE, or a character tokenizer's characters, and Chapter 12's chat
tokens after them) as ONNX metadata, which ``read_onnx_metadata`` reads back.
``tests/test_export.py`` proves that ONNX Runtime's logits are PyTorch's (float32: within
1e-5) and that its greedy decoding picks ``generate``'s tokens.

ONNX Runtime does not check the input as ``GPT.forward`` does, so the page must: a ``GPT``
run on more than ``context_length`` tokens fails (its position table has that many rows:
"Attempting to broadcast an axis"), an id at or above V fails ("indices element out of data
bounds"), but a negative id -i is read as id V - i, as Python indexes; a ``Llama`` (rotary
positions, no table) runs on any length, past what it was trained for. The page crops to
the metadata's ``context_length``, as ``generate`` does, and checks ids against V.

    python -m gpt_from_scratch.export CHECKPOINT OUT.onnx [--vocab gpt2|char] [--chars FILE]
        [--chat] [--internals] [--lens]
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor, nn
from torch.torch_version import TorchVersion

from .attention import MultiHeadAttention, causal_mask
from .chat import SPECIAL_TOKENS, ChatTokenizer
from .checkpoint import MODELS, load_checkpoint
from .data import load_tiny_shakespeare
from .model import GPT, GPTConfig
from .modern import Llama, LlamaConfig
from .rope import rope_cos_sin
from .tokenizer import CharTokenizer
from .utils import atomic_path, eval_mode

FORMAT = "gpt_from_scratch.onnx/1"
KEY = "gpt_from_scratch."  # the prefix of this package's metadata_props keys
MIN_TORCH = "2.6"  # the torch.export-based exporter, torch.onnx.export(..., dynamo=True)
MAX_BYTES = 2**31  # protobuf's limit on one message: the whole file, weights included
GPT2_VOCAB = 50_257
INSTALL = "pip install 'gpt-from-scratch-book[onnx]'"


@dataclass
class OnnxMetadata:
    """What an exported file says about itself (``read_onnx_metadata``)."""

    model: str  # "GPT" or "Llama"
    config: GPTConfig | LlamaConfig
    vocab: str  # "gpt2" (GPT-2's BPE, tiktoken's ids) or "char" (a token per character)
    chars: list[str] | None  # with "char": the characters, token id i is chars[i]
    outputs: list[str]  # "logits", then "attention" and "resid" (internals), "lens" (lens)
    special: list[str] = field(default_factory=list)  # chat tokens, ids after the base's


class GPTGraph(nn.Module):
    """``GPT.forward`` written out block by block: what ``export_onnx`` exports (Chapter 7).

    The modules are the model's own, in evaluation (no dropout); only the calls differ:
    positions come from the embeddings' shape (so that T stays a variable of the graph), and
    the token-id checks, branches on data, are left to the runtime. With ``internals``
    each block's attention is written out, as Chapter 13's ``interp`` reads it, to also
    return the attention patterns (L, B, H, T, T) and the residual stream after each block
    (L, B, T, D); with ``lens``, the logit lens (L, B, T, V): ``lm_head(ln_f(.))`` of each
    block's residual stream, as ``interp.logit_lens`` reads it (Chapter 13).
    """

    def __init__(self, model: GPT, internals: bool = False, lens: bool = False):
        super().__init__()
        self.model = model
        self.internals = internals
        self.lens = lens

    def forward(self, idx: Tensor) -> Tensor | tuple[Tensor, ...]:
        """idx (B, T) -> logits (B, T, V), then with ``internals`` attention (L, B, H, T, T)
        and resid (L, B, T, D), then with ``lens`` the logit lens (L, B, T, V)."""
        m = self.model
        tok = m.wte(idx)  # (B, T, D)
        x = tok + m.wpe(tok)  # (B, T, D) + (T, D)
        patterns, resid = [], []
        for block in m.blocks:
            if self.internals:
                attended, pattern = _attention(block.attn, block.ln_1(x))
                x = x + attended
                x = x + block.mlp(block.ln_2(x))  # (B, T, D)
                patterns.append(pattern)
            else:
                x = block(x)  # (B, T, D)
            resid.append(x)
        logits = m.lm_head(m.ln_f(x))  # (B, T, V)
        outputs = [logits]
        if self.internals:
            outputs += [torch.stack(patterns), torch.stack(resid)]
        if self.lens:
            outputs.append(m.lm_head(m.ln_f(torch.stack(resid))))  # (L, B, T, V)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)


def _attention(attn: MultiHeadAttention, x: Tensor) -> tuple[Tensor, Tensor]:
    """Causal self-attention written out (Chapter 4): ``(output (B, T, D), pattern)``, the
    pattern (B, H, T, T) being softmax(q kᵀ / √d_k) under the causal mask."""
    T = x.shape[1]
    qkv = attn.c_attn(x).split(attn.d_model, dim=2)  # 3 x (B, T, D)
    q, k, v = (attn.split_heads(t) for t in qkv)  # 3 x (B, H, T, d_k)
    scores = q @ k.transpose(-2, -1) / math.sqrt(attn.d_head)  # (B, H, T, T)
    mask = causal_mask(T, device=x.device)  # (T, T)
    pattern = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)  # (B, H, T, T)
    return attn.c_proj(attn.merge_heads(pattern @ v)), pattern  # (B, T, D), (B, H, T, T)


class LlamaGraph(nn.Module):
    """``Llama.forward`` written out (Chapters 7 and 10): rotations for the positions
    0 .. T - 1, the blocks, the final RMSNorm and the head; no token-id check (a branch on
    data)."""

    def __init__(self, model: Llama):
        super().__init__()
        self.model = model

    def forward(self, idx: Tensor) -> Tensor:
        """idx (B, T) -> logits (B, T, V)."""
        m, c = self.model, self.model.config
        positions = torch.arange(idx.shape[1], device=idx.device)  # (T,)
        cos, sin = rope_cos_sin(positions, c.d_head, c.rope_theta)  # 2 x (T, d_head)
        x = m.wte(idx)  # (B, T, D)
        for block in m.blocks:
            x = block(x, cos, sin)  # (B, T, D)
        return m.lm_head(m.ln_f(x))  # (B, T, V)


def _vocabulary(tokenizer, config) -> dict[str, str]:
    """The metadata entries of ``tokenizer``, checked against ``config.vocab_size``; a
    ``ChatTokenizer``'s are its base's, with its chat tokens (ids after the base's)."""
    V = config.vocab_size
    if isinstance(tokenizer, ChatTokenizer):
        if tokenizer.vocab_size != V:
            raise ValueError(f"export_onnx: the ChatTokenizer has {tokenizer.vocab_size} "
                             f"tokens, the model vocab_size={V}: pass the tokenizer the "
                             "model was fine-tuned with (add_chat_tokens grows the model)")
        base = dataclasses.replace(config, vocab_size=tokenizer.base_vocab_size)
        return {**_vocabulary(tokenizer.base, base), "special": json.dumps(SPECIAL_TOKENS)}
    if isinstance(tokenizer, CharTokenizer):
        if tokenizer.vocab_size != V:
            raise ValueError(f"export_onnx: the CharTokenizer has {tokenizer.vocab_size} "
                             f"characters, the model vocab_size={V}: pass the tokenizer "
                             "the model was trained with")
        return {"vocab": "char", "chars": json.dumps(tokenizer.chars)}
    if (isinstance(tokenizer, str) and tokenizer == "gpt2"
            or getattr(tokenizer, "name", None) == "gpt2"):
        if V < GPT2_VOCAB:
            raise ValueError(f"export_onnx: GPT-2's BPE has {GPT2_VOCAB:,} tokens, the "
                             f"model vocab_size={V}: pass the CharTokenizer it was trained "
                             "with")
        return {"vocab": "gpt2"}
    raise TypeError(f"export_onnx: tokenizer={tokenizer!r:.80} is neither a CharTokenizer "
                    "nor GPT-2's BPE: pass the CharTokenizer, 'gpt2', "
                    "tokenizer.gpt2_encoding() or a ChatTokenizer over one of them")


def _graph(model: nn.Module, internals: bool, lens: bool) -> nn.Module:
    """The module to export for ``model``, or a clear error for one this cannot export."""
    if isinstance(model, GPT):
        return GPTGraph(model, internals, lens)
    if isinstance(model, Llama):
        if internals or lens:
            raise ValueError("export_onnx: internals=True and lens=True read a GPT's "
                             "attention patterns and residual stream (Chapter 13); a Llama "
                             "exports its logits only: pass internals=False, lens=False")
        return LlamaGraph(model)
    raise TypeError(f"export_onnx: model is a {type(model).__name__}; this exports the "
                    "book's GPT and Chapter 10's Llama only (for a Hugging Face GPT-2, "
                    "hf_weights.from_hf(model) gives the book's GPT)")


def _check_exporter() -> None:
    """An error naming what to install where torch's exporter or ONNX is missing."""
    if TorchVersion(torch.__version__) < MIN_TORCH:
        raise RuntimeError(f"export_onnx needs torch >= {MIN_TORCH} (its torch.export-"
                           f"based ONNX exporter), this is torch {torch.__version__}: "
                           f"pip install 'torch>={MIN_TORCH}'")
    missing = [name for name in ("onnx", "onnxscript")
               if importlib.util.find_spec(name) is None]
    if missing:
        raise ImportError(f"export_onnx needs {' and '.join(missing)}: {INSTALL}")


def _check_dynamic(proto, axes: int) -> None:
    """A RuntimeError unless the first ``axes`` sizes of the graph's input are variables
    (a torch that fixed them to the example's would write a file refusing other shapes)."""
    dims = proto.graph.input[0].type.tensor_type.shape.dim[:axes]  # B, T
    fixed = [d.dim_value for d in dims if not d.dim_param]
    if fixed:
        raise RuntimeError(f"torch {torch.__version__} exported a graph whose input has "
                           f"the fixed sizes {fixed}, not (B, T): report it, with the "
                           "model's config")


def export_onnx(model: GPT | Llama, path: str | os.PathLike, tokenizer,
                internals: bool = False, lens: bool = False) -> Path:
    """Write ``model`` as the ONNX file ``path`` (Chapter 7): input ``idx`` (B, T) int64,
    output ``logits`` (B, T, V) float32; with ``internals`` (a GPT only) also ``attention``
    (L, B, H, T, T) and ``resid`` (L, B, T, D), the residual stream after each block; with
    ``lens`` (a GPT only) also ``lens`` (L, B, T, V), each block's logit-lens read-out.

    ``tokenizer`` is the model's: a ``CharTokenizer`` (its characters are stored), GPT-2's
    BPE (``"gpt2"`` or ``tokenizer.gpt2_encoding()``), or Chapter 12's ``ChatTokenizer``
    over one of them (its chat tokens are stored too). The metadata records it with the
    format, the model's class and config, and the outputs (``read_onnx_metadata``). The
    model is exported in eval mode (its own mode is kept) and must hold float32 weights.
    The file appears whole or not at all (``atomic_path``, which also creates missing
    folders).
    """
    for name, value in (("internals", internals), ("lens", lens)):
        if not isinstance(value, bool):
            raise ValueError(f"export_onnx: {name}={value!r} must be True or False")
    graph = _graph(model, internals, lens)
    vocab = _vocabulary(tokenizer, model.config)
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"export_onnx: {path} is a folder: pass a file path, e.g. "
                         f"{path / 'model.onnx'}")
    dtypes = sorted({str(p.dtype) for p in model.parameters() if p.dtype != torch.float32})
    if dtypes:
        raise ValueError(f"export_onnx: the model holds {dtypes} weights; the ONNX file is "
                         "checked in float32: pass model.float()")
    size = sum(p.numel() * p.element_size() for p in model.parameters())
    if size >= MAX_BYTES:
        raise ValueError(f"export_onnx: the weights take {size:,} bytes, and one ONNX "
                         f"file holds less than {MAX_BYTES:,} (protobuf's limit): export a "
                         "smaller model")
    _check_exporter()
    import onnx

    n = model.config.context_length
    B = torch.export.Dim("B", min=1)
    T = torch.export.Dim("T", min=1, max=n) if n > 1 else None  # None: T is always 1
    device = model.wte.weight.device
    # (B, T) = (2, 2): torch.export would fix a size of 1 as a constant of the graph
    example = torch.zeros(2, min(n, 2), dtype=torch.long, device=device)
    outputs = ["logits"] + ["attention", "resid"] * internals + ["lens"] * lens
    with eval_mode(graph):
        program = torch.onnx.export(
            graph, (example,), dynamo=True, input_names=["idx"], output_names=outputs,
            dynamic_shapes={"idx": {0: B, 1: T}}, external_data=False, verbose=False)
    proto = program.model_proto
    _check_dynamic(proto, 2 if n > 1 else 1)
    meta = {"format": FORMAT, "model": type(model).__name__,
            "config": json.dumps(dataclasses.asdict(model.config)), **vocab,
            "outputs": json.dumps(outputs)}
    for key, value in meta.items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = KEY + key, value
    with atomic_path(path) as tmp:
        onnx.save_model(proto, tmp)
    return path


def read_onnx_metadata(path: str | os.PathLike) -> OnnxMetadata:
    """What an ``export_onnx`` file says about itself (Chapter 7): the model's class and
    config, its vocabulary (with its chat tokens, if any) and the file's outputs.

    A missing file raises FileNotFoundError; a file that is not ONNX or was cut short, or an
    ONNX file that ``export_onnx`` did not write, a ValueError saying which.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no ONNX file at {path}: write one with export_onnx (or "
                                "python -m gpt_from_scratch.export CHECKPOINT OUT.onnx)")
    import onnx
    from google.protobuf.message import DecodeError

    try:
        proto = onnx.load_model(path, load_external_data=False)
    except (DecodeError, ValueError, RuntimeError) as err:  # onnx's errors for bad bytes
        raise ValueError(f"{path} is not a complete ONNX file ({type(err).__name__}: "
                         f"{err!s:.100}): it was cut short or is another kind of file. "
                         "Export it again") from None
    props = {p.key[len(KEY):]: p.value for p in proto.metadata_props
             if p.key.startswith(KEY)}
    if props.get("format") != FORMAT:
        found = f"format {props['format']!r}" if "format" in props else "none of its keys"
        raise ValueError(f"{path} is not one of the book's models ({found}, expected "
                         f"{KEY}format = {FORMAT!r}): another ONNX model, or a file cut "
                         "short. Export it with export_onnx")
    try:
        model, vocab = props["model"], props["vocab"]
        config = MODELS[model][1](**json.loads(props["config"]))
        chars = json.loads(props["chars"]) if vocab == "char" else None
        outputs = json.loads(props["outputs"])
        special = json.loads(props.get("special", "[]"))
        if vocab not in ("gpt2", "char") or (
                chars is not None and len(chars) + len(special) != config.vocab_size):
            raise ValueError(f"vocab {vocab!r} with {len(chars or [])} characters and "
                             f"{len(special)} chat tokens")
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"{path}: the book's metadata is damaged ({type(err).__name__}: "
                         f"{err!s:.100}): export the model again") from None
    return OnnxMetadata(model, config, vocab, chars, outputs, special)


def _tokenizer(args: argparse.Namespace, extra: dict):
    """The tokenizer the command line names, else the one the checkpoint's recipe names;
    with ``--chat``, Chapter 12's chat tokens after it."""
    base = _base_tokenizer(args, extra)
    if not args.chat:
        return base
    # "gpt2" stands for the BPE here: export_onnx reads only the vocabulary
    return ChatTokenizer(base, GPT2_VOCAB if base == "gpt2" else base.vocab_size)


def _base_tokenizer(args: argparse.Namespace, extra: dict):
    """The tokenizer the command line names, else the one the checkpoint's recipe names."""
    if args.chars is not None:
        return CharTokenizer(Path(args.chars).read_text(encoding="utf-8"))
    recipe = extra.get("recipe")
    level = recipe.get("data") if isinstance(recipe, dict) else None
    vocab = args.vocab or {"char": "char", "bpe": "gpt2"}.get(level)
    if vocab is None:
        raise ValueError(f"{args.checkpoint} does not record its tokenizer (no recipe): "
                         "pass --vocab gpt2 (GPT-2's BPE), --vocab char (Tiny "
                         "Shakespeare's characters) or --chars FILE (the characters of "
                         "another text)")
    return "gpt2" if vocab == "gpt2" else CharTokenizer(load_tiny_shakespeare())


def main(argv: list[str] | None = None) -> None:
    """``python -m gpt_from_scratch.export CHECKPOINT OUT.onnx`` (Chapter 7): a checkpoint
    folder, as Chapter 6's training writes it (``save_checkpoint``), to an ONNX file."""
    parser = argparse.ArgumentParser(
        prog="python -m gpt_from_scratch.export",
        description="Export a checkpoint of the book's GPT (or Llama) to one ONNX file.")
    parser.add_argument("checkpoint", help="a checkpoint folder (checkpoint.json, weights)")
    parser.add_argument("out", help="the .onnx file to write (missing folders are created)")
    parser.add_argument("--vocab", choices=["gpt2", "char"], default=None,
                        help="GPT-2's BPE, or Tiny Shakespeare's characters (default: what "
                             "the checkpoint's recipe records)")
    parser.add_argument("--chars", metavar="FILE", default=None,
                        help="a text whose characters, sorted, are the model's vocabulary")
    parser.add_argument("--chat", action="store_true",
                        help="the model was fine-tuned with Chapter 12's chat tokens")
    parser.add_argument("--internals", action="store_true",
                        help="also output the attention patterns and residual stream")
    parser.add_argument("--lens", action="store_true",
                        help="also output the logit lens (each block's read-out)")
    args = parser.parse_args(argv)
    try:
        ckpt = load_checkpoint(args.checkpoint)
        tokenizer = _tokenizer(args, ckpt.extra)
        path = export_onnx(ckpt.model, args.out, tokenizer, args.internals, args.lens)
    except (OSError, ImportError, ValueError, TypeError) as err:  # CheckpointError too
        parser.error(str(err))
    print(f"wrote {path} ({path.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
