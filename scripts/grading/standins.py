"""Stand-ins for the package's objects that an exercise's set-up names: the package itself
is
not in the sandbox, so no path through ``__globals__``, ``sys.modules`` or a string name
reaches its reference solutions.

Each stand-in is written here, short, with the package's names, signatures and parameter
layout (a case loads the package's state dicts into the student's modules), and holds
nothing
an exercise asks for. ``setup_source`` turns an assignment's set-up into the set-up one
exercise runs: its ``from gpt_from_scratch… import`` lines become the stand-ins of the names
they import, defined in a function of their own so that their globals hold only themselves,
and the names the exercise's case file withholds (``withheld``: e.g. ``causal_mask`` for the
exercise that asks for a causal mask) are left out.
"""

from __future__ import annotations

import ast
import dataclasses
import math
import textwrap
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

PACKAGE = "gpt_from_scratch"
GPT2_PATTERN = (
    r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
)


def merge(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == tuple(pair):
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def causal_mask(T, device=None, *, n_past=0):
    return torch.ones(T, n_past + T, dtype=torch.bool, device=device).tril(diagonal=n_past)


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (..., T_q, T_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # a fully masked row: zeros
    return F.dropout(weights, dropout_p) @ v, weights


class LayerNorm(nn.Module):
    def __init__(
        self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True, fast=True
    ):
        super().__init__()
        shape = (
            (normalized_shape,) if isinstance(normalized_shape, int) else normalized_shape
        )
        self.normalized_shape, self.eps = tuple(shape), eps
        self.weight = nn.Parameter(torch.ones(shape)) if elementwise_affine else None
        self.bias = (
            nn.Parameter(torch.zeros(shape)) if elementwise_affine and bias else None
        )

    def forward(self, x):
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.0, bias=True, fast=True):
        super().__init__()
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.c_attn = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.c_proj = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = dropout

    def forward(self, x):  # (B, T, D), causal
        B, T, D = x.shape
        q, k, v = (
            t.view(B, T, self.n_heads, self.d_head).transpose(1, 2)  # (B, H, T, d_head)
            for t in self.c_attn(x).split(D, dim=2)
        )
        p = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, D))


@dataclasses.dataclass
class GPTConfig:
    vocab_size: int = 50_257
    context_length: int = 1_024
    d_model: int = 768
    n_layers: int = 12
    n_heads: int = 12
    d_ff: int | None = None
    dropout: float = 0.1
    bias: bool = True
    tie_weights: bool = True
    layer_norm_eps: float = 1e-5
    activation: str = "gelu_tanh"

    def __post_init__(self):
        self.d_ff = 4 * self.d_model if self.d_ff is None else self.d_ff

    @classmethod
    def from_preset(cls, name, **overrides):
        presets = {
            "gpt2": dict(n_layers=12, d_model=768, n_heads=12),
            "shakespeare-char": dict(
                vocab_size=65,
                context_length=64,
                d_model=128,
                n_layers=4,
                n_heads=4,
                dropout=0.0,
            ),
            "tiny": dict(context_length=16, d_model=32, n_layers=2, n_heads=2, dropout=0.0),
        }
        return cls(**{**presets[name], **overrides})


class FeedForward(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.d_model, config.d_ff, bias=config.bias)
        self.act = {
            "gelu_tanh": lambda: nn.GELU(approximate="tanh"),
            "gelu": nn.GELU,
            "relu": nn.ReLU,
        }[config.activation]()
        self.c_proj = nn.Linear(config.d_ff, config.d_model, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.act(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        D = config.d_model
        self.ln_1 = LayerNorm(D, eps=config.layer_norm_eps, bias=config.bias)
        self.attn = MultiHeadAttention(D, config.n_heads, config.dropout, config.bias)
        self.ln_2 = LayerNorm(D, eps=config.layer_norm_eps, bias=config.bias)
        self.mlp = FeedForward(config)

    def forward(self, x):  # (B, T, D)
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config, D = config, config.d_model
        self.wte = nn.Embedding(config.vocab_size, D)
        self.wpe = nn.Embedding(config.context_length, D)  # the package's: a (T, D) table
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList([Block(config) for _ in range(config.n_layers)])
        self.ln_f = LayerNorm(D, eps=config.layer_norm_eps, bias=config.bias)
        self.lm_head = nn.Linear(D, config.vocab_size, bias=False)
        if config.tie_weights:
            self.lm_head.weight = self.wte.weight

    def forward(self, idx, targets=None):  # (B, T) -> (B, T, V) logits, the mean loss
        x = self.drop(self.wte(idx) + self.wpe.weight[: idx.shape[1]])  # (B, T, D)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten().long(),
                               ignore_index=-100)
        return logits, loss


NEEDS = {  # the stand-ins a stand-in uses, defined beside it
    "Block": ("LayerNorm", "MultiHeadAttention", "FeedForward"),
    "GPT": ("LayerNorm", "MultiHeadAttention", "FeedForward", "Block"),
}
NOT_STAND_INS = ("definitions", "setup_source", "setup_names", "NEEDS", "NOT_STAND_INS")
HEADER = (
    "import dataclasses\nimport math\n\nimport torch\nimport torch.nn.functional as F\n"
    "from torch import nn\n"
)


def definitions() -> dict[str, str]:
    """The source of every stand-in of this file, by name."""
    source = Path(__file__).read_text()
    tree, lines = ast.parse(source), source.splitlines(keepends=True)
    found = {}
    for node in tree.body:
        names = (
            [node.name]
            if isinstance(node, (ast.FunctionDef, ast.ClassDef))
            else [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
        )
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        for name in names:  # the whole statement, decorators included
            found[name] = "".join(lines[first - 1 : node.end_lineno])
    return found


def setup_source(setup: str, withheld: tuple[str, ...] = ()) -> str:
    """The set-up one exercise runs: the package's names replaced by stand-ins, minus
    ``withheld``. A name of the package without a stand-in here is a clear error."""
    kept, wanted, known = [], {}, definitions()
    for node in ast.parse(setup).body:
        if (
            isinstance(node, ast.ImportFrom)
            and (node.module or "").split(".")[0] == PACKAGE
        ):
            for alias in node.names:
                if alias.name not in known or alias.name in NOT_STAND_INS:
                    raise SystemExit(
                        f"the set-up imports {node.module}.{alias.name}, which has no "
                        "stand-in in scripts/grading/standins.py: write one there (the "
                        "package is not "
                        "in the sandbox)"
                    )
                if (alias.asname or alias.name) not in withheld:
                    wanted[alias.asname or alias.name] = alias.name
        else:
            kept.append(ast.unparse(node))
    if not wanted:
        return "\n".join(kept) + "\n"
    needed = [n for name in wanted.values() for n in (*NEEDS.get(name, ()), name)]
    body = HEADER + "\n".join(known[n] for n in dict.fromkeys(needed))
    returned = ", ".join(f"{alias!r}: {name}" for alias, name in wanted.items())
    return (
        "\n".join(kept)
        + "\n\n\ndef _stand_ins():\n"
        + textwrap.indent(body, "    ")
        + f"\n    return {{{returned}}}\n\n\n"
        + "globals().update(_stand_ins())\ndel _stand_ins\n"
    )


def setup_names(setup: str) -> set[str]:
    """The names the set-up binds (its imports: modules, and the stand-ins of the
    package's)."""
    return {
        a.asname or a.name
        for node in ast.walk(ast.parse(setup))
        if isinstance(node, ast.ImportFrom)
        for a in node.names
    } | {
        a.asname or a.name.split(".")[0]
        for node in ast.walk(ast.parse(setup))
        if isinstance(node, ast.Import)
        for a in node.names
    }
