"""Chapter 10 — from GPT-2 to a Llama-style decoder.

``Llama`` is the book's GPT with the four changes of today's open models: RMSNorm for LayerNorm
(``layernorm.RMSNorm``), a SwiGLU feed-forward network (``SwiGLU``), rotary position embeddings
instead of a position table (``rope``) and grouped-query attention (``gqa``); no biases anywhere and
an untied output head. Its logits equal transformers' ``LlamaForCausalLM`` for the same weights
(``Llama.from_hf``), and it works with the book's ``generate`` and ``KVCache``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import KVCache
from .gqa import GroupedQueryAttention
from .layernorm import RMSNorm
from .model import _token_ids
from .rope import rope_cos_sin, rope_frequencies
from .utils import check_float, check_int


def llama_hidden_size(d_model: int, multiple_of: int = 256) -> int:
    """SwiGLU's hidden width as Llama sets it: ``2/3 * 4 * d_model``, rounded up to a multiple.

    Three matrices of ``d_model x d_ff`` then hold about as many numbers as GPT-2's two of
    ``d_model x 4 d_model``. Llama 7B: ``d_model = 4096`` gives 10,922, rounded to 11,008.
    """
    d_model = check_int("llama_hidden_size", "d_model", d_model, minimum=1)
    multiple_of = check_int("llama_hidden_size", "multiple_of", multiple_of, minimum=1)
    hidden = int(2 * 4 * d_model / 3)
    return multiple_of * math.ceil(hidden / multiple_of)


@dataclass
class LlamaConfig:
    """The sizes of a Llama-style decoder; the defaults are GPT-2 small's shapes with 4 key/value heads.

    ``n_kv_heads=None`` means ``n_heads`` (plain multi-head attention); ``d_ff=None`` means
    ``llama_hidden_size(d_model, multiple_of)``. ``rope_theta`` is RoPE's base (Llama 2: 10,000).
    """

    vocab_size: int = 50_257
    context_length: int = 1_024
    d_model: int = 768
    n_layers: int = 12
    n_heads: int = 12
    n_kv_heads: int | None = 4
    d_ff: int | None = None
    multiple_of: int = 256
    rope_theta: float = 10_000.0
    rms_norm_eps: float = 1e-5
    tie_weights: bool = False

    def __post_init__(self) -> None:
        if self.n_kv_heads is None:
            self.n_kv_heads = self.n_heads
        for name in ("vocab_size", "context_length", "d_model", "n_layers", "n_heads", "n_kv_heads",
                     "multiple_of"):
            setattr(self, name, check_int("LlamaConfig", name, getattr(self, name), minimum=1))
        if self.d_ff is None:
            self.d_ff = llama_hidden_size(self.d_model, self.multiple_of)
        self.d_ff = check_int("LlamaConfig", "d_ff", self.d_ff, minimum=1)
        self.rms_norm_eps = check_float("LlamaConfig", "rms_norm_eps", self.rms_norm_eps, 0.0, low_open=True)
        self.rope_theta = check_float("LlamaConfig", "rope_theta", self.rope_theta, 1.0, low_open=True)
        if self.d_model % self.n_heads:
            raise ValueError(f"n_heads={self.n_heads} does not divide d_model={self.d_model}: choose n_heads "
                             "among the divisors of d_model")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_kv_heads={self.n_kv_heads} does not divide n_heads={self.n_heads}: choose "
                             f"n_kv_heads among {[h for h in range(1, self.n_heads + 1) if self.n_heads % h == 0]}")
        rope_frequencies(self.d_head, self.rope_theta)  # raises for an odd head width or a bad theta

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads


class SwiGLU(nn.Module):
    """Llama's feed-forward network: ``c_proj(silu(gate_proj(x)) * up_proj(x))``, no biases.

    The gate ``silu(gate_proj(x))`` multiplies, feature by feature, a second linear map of the same
    token (Shazeer 2020). Names as in transformers, ``c_proj`` for Llama's ``down_proj``.
    """

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.gate_proj = nn.Linear(d_model, d_ff, bias=False)
        self.up_proj = nn.Linear(d_model, d_ff, bias=False)
        self.c_proj = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        """(B, T, D) -> (B, T, D), through (B, T, d_ff)."""
        return self.c_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaBlock(nn.Module):
    """A pre-RMSNorm block: ``x + attn(ln_1(x))``, then ``x + mlp(ln_2(x))``, as GPT-2's ``Block``."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.ln_1 = RMSNorm(config.d_model, eps=config.rms_norm_eps)
        self.attn = GroupedQueryAttention(config.d_model, config.n_heads, config.n_kv_heads)
        self.ln_2 = RMSNorm(config.d_model, eps=config.rms_norm_eps)
        self.mlp = SwiGLU(config.d_model, config.d_ff)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, kv_cache: KVCache | None = None) -> Tensor:
        """(B, T, D) -> (B, T, D); ``cos``, ``sin`` (T, d_head) are the rotations of the T positions."""
        x = x + self.attn(self.ln_1(x), cos, sin, kv_cache=kv_cache)
        return x + self.mlp(self.ln_2(x))


class Llama(nn.Module):
    """A Llama-style decoder: token embeddings, ``n_layers`` ``LlamaBlock``s, a final RMSNorm, the head.

    No position table: positions enter through RoPE inside attention, so the same weights run at any
    ``context_length``. Initialized like the book's GPT (N(0, 0.02²), output projections scaled by
    ``1/sqrt(2 n_layers)``), so that Chapter 10 compares architectures, not initializations.
    """

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.d_model)
        self.blocks = nn.ModuleList([LlamaBlock(config) for _ in range(config.n_layers)])
        self.ln_f = RMSNorm(config.d_model, eps=config.rms_norm_eps)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_weights:
            self.lm_head.weight = self.wte.weight
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * config.n_layers) if name.endswith("c_proj.weight") else 0.02
                nn.init.normal_(p, mean=0.0, std=std)

    def new_kv_cache(self) -> list[KVCache]:
        """An empty cache for ``forward(..., kv_cache=...)``: one ``KVCache`` per block."""
        return [KVCache(max_positions=self.config.context_length) for _ in self.blocks]

    def forward(self, idx: Tensor, targets: Tensor | None = None,
                kv_cache: list[KVCache] | None = None) -> tuple[Tensor, Tensor | None]:
        """``(logits (B, T, V), loss)`` for token ids ``idx`` (B, T), like ``GPT.forward``.

        With a ``kv_cache`` holding ``P`` positions, ``idx`` are positions ``P .. P + T - 1``.
        ``targets`` (B, T) are the next tokens, -100 ignored; the loss is None without them.
        """
        idx = _token_ids("idx", idx)
        B, T = idx.shape
        if kv_cache is not None and len(kv_cache) != len(self.blocks):
            raise ValueError(f"kv_cache has {len(kv_cache)} layers, the model {len(self.blocks)}: "
                             "use model.new_kv_cache()")
        P = 0 if kv_cache is None else len(kv_cache[0])
        n, V = self.config.context_length, self.config.vocab_size
        if T == 0 or P + T > n:
            raise ValueError(f"{T} tokens after {P} cached positions: need 1 to context_length={n} positions "
                             f"in all; keep the last {n} tokens (idx[:, -context_length:])")
        if ((idx < 0) | (idx >= V)).any():
            raise ValueError(f"token ids must be in [0, {V}), got values in [{int(idx.min())}, {int(idx.max())}]")
        positions = torch.arange(P, P + T, device=idx.device)  # (T,)
        cos, sin = rope_cos_sin(positions, self.config.d_head, self.config.rope_theta)  # 2 x (T, d_head)
        x = self.wte(idx)  # (B, T, D): no position embedding added
        for i, block in enumerate(self.blocks):
            x = block(x, cos, sin, kv_cache=None if kv_cache is None else kv_cache[i])  # (B, T, D)
        logits = self.lm_head(self.ln_f(x))  # (B, T, V)
        if targets is None:
            return logits, None
        targets = _token_ids("targets", targets).long()
        if targets.shape != idx.shape or ((targets >= V) | ((targets < 0) & (targets != -100))).any():
            raise ValueError(f"targets must be token ids in [0, {V}) or -100 with the shape of idx "
                             f"{tuple(idx.shape)}, got shape {tuple(targets.shape)}")
        loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=-100)
        return logits, loss

    def num_parameters(self) -> int:
        """Number of trainable numbers (a tied ``wte``/``lm_head`` counts once)."""
        return sum(p.numel() for p in self.parameters())

    # ----- Hugging Face interoperability -------------------------------------------------------

    def to_hf_config(self):
        """The ``transformers.LlamaConfig`` of this model (for ``LlamaForCausalLM(config)``)."""
        from transformers import LlamaConfig as HFLlamaConfig

        c = self.config
        return HFLlamaConfig(vocab_size=c.vocab_size, hidden_size=c.d_model, intermediate_size=c.d_ff,
                             num_hidden_layers=c.n_layers, num_attention_heads=c.n_heads,
                             num_key_value_heads=c.n_kv_heads, max_position_embeddings=c.context_length,
                             rms_norm_eps=c.rms_norm_eps, rope_theta=c.rope_theta,
                             tie_word_embeddings=c.tie_weights, attention_bias=False, mlp_bias=False,
                             hidden_act="silu")

    def to_hf_state_dict(self) -> dict[str, Tensor]:
        """The weights under transformers' ``LlamaForCausalLM`` names (the inverse of ``from_hf``)."""
        renames = [("wte.", "model.embed_tokens."), ("ln_f.", "model.norm."), ("blocks.", "model.layers."),
                   (".ln_1.", ".input_layernorm."), (".ln_2.", ".post_attention_layernorm."),
                   (".attn.c_proj.", ".self_attn.o_proj."), (".attn.", ".self_attn."),
                   (".mlp.c_proj.", ".mlp.down_proj.")]
        out = {}
        for name, value in self.state_dict().items():
            for ours, theirs in renames:
                name = name.replace(ours, theirs)
            out[name] = value
        return out

    @classmethod
    def from_hf(cls, model_or_state_dict, config: LlamaConfig | None = None) -> Llama:
        """A ``Llama`` holding the weights of a transformers ``LlamaForCausalLM`` (or of its state dict).

        With a model the configuration comes from ``model.config``; with a state dict pass ``config``.
        Unknown or missing keys raise a ``ValueError`` naming them. Returned in eval mode.
        """
        if isinstance(model_or_state_dict, nn.Module):
            config = config or _config_from_hf(model_or_state_dict.config)
            state_dict = model_or_state_dict.state_dict()
        elif config is None:
            raise ValueError("from_hf(state_dict) needs config=LlamaConfig(...): the head counts and RoPE's "
                             "theta cannot be read from the weights' shapes")
        else:
            state_dict = dict(model_or_state_dict)
        model = cls(config)
        expected = model.state_dict()
        ours, unknown = {}, []
        for key, value in state_dict.items():
            name = _our_name(key)
            if name in expected:
                ours[name] = value
            else:
                unknown.append(key)
        if config.tie_weights:
            ours.pop("lm_head.weight", None)
            ours["lm_head.weight"] = ours.get("wte.weight")
        missing = sorted(set(expected) - set(ours))
        if unknown or missing:
            raise ValueError(f"not a Llama state dict for {config}: unknown keys {unknown[:5]}, "
                             f"missing {missing[:5]}")
        model.load_state_dict(ours)
        return model.eval()


_HF_NAMES = [  # (transformers' name, the book's), for the keys under "model."
    (r"embed_tokens\.", "wte."), (r"norm\.", "ln_f."),
    (r"layers\.(\d+)\.input_layernorm\.", r"blocks.\1.ln_1."),
    (r"layers\.(\d+)\.post_attention_layernorm\.", r"blocks.\1.ln_2."),
    (r"layers\.(\d+)\.self_attn\.o_proj\.", r"blocks.\1.attn.c_proj."),
    (r"layers\.(\d+)\.self_attn\.", r"blocks.\1.attn."),
    (r"layers\.(\d+)\.mlp\.down_proj\.", r"blocks.\1.mlp.c_proj."),
    (r"layers\.(\d+)\.mlp\.", r"blocks.\1.mlp."),
]


def _our_name(key: str) -> str | None:
    """The book's name for one key of a ``LlamaForCausalLM`` state dict; None when unknown."""
    if key == "lm_head.weight":
        return key
    rest = key.removeprefix("model.")
    for pattern, replacement in _HF_NAMES:
        if re.match(pattern, rest):
            return re.sub(pattern, replacement, rest, count=1)
    return None


def _config_from_hf(hf) -> LlamaConfig:
    """Our ``LlamaConfig`` from a transformers ``LlamaConfig``; a ``ValueError`` for what Llama() lacks."""
    rope = getattr(hf, "rope_parameters", None) or {"rope_theta": hf.rope_theta,
                                                     **(getattr(hf, "rope_scaling", None) or {})}
    unsupported = {"hidden_act": hf.hidden_act != "silu", "attention_bias": hf.attention_bias,
                   "mlp_bias": getattr(hf, "mlp_bias", False),
                   "rope scaling": rope.get("rope_type", "default") != "default",
                   "head_dim": getattr(hf, "head_dim", None) not in (None, hf.hidden_size // hf.num_attention_heads)}
    bad = [name for name, flag in unsupported.items() if flag]
    if bad:
        raise ValueError(f"this Llama configuration uses {bad}, which the book's Llama does not implement")
    return LlamaConfig(vocab_size=hf.vocab_size, context_length=hf.max_position_embeddings,
                       d_model=hf.hidden_size, n_layers=hf.num_hidden_layers, n_heads=hf.num_attention_heads,
                       n_kv_heads=hf.num_key_value_heads, d_ff=hf.intermediate_size,
                       rope_theta=float(rope["rope_theta"]), rms_norm_eps=hf.rms_norm_eps,
                       tie_weights=bool(hf.tie_word_embeddings))
