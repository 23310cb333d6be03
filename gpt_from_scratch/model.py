"""Chapter 5 — the full GPT: configuration, feed-forward network, pre-LN block and the model.

``GPT`` is GPT-2 exactly: learned token (``wte``) and position (``wpe``) embeddings, a stack of
pre-LN blocks (``x + attn(ln_1(x))``, then ``x + mlp(ln_2(x))``), a final ``ln_f`` and a language
model head tied to ``wte``. Its logits equal Hugging Face's ``GPT2LMHeadModel`` for the same
weights; ``GPT.from_hf`` / ``to_hf_state_dict`` / ``GPT.from_pretrained`` move weights across.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import KVCache, MultiHeadAttention
from .embeddings import LearnedPositionalEmbedding
from .layernorm import LayerNorm
from .utils import check_float, check_int

ACTIVATIONS = {
    "gelu_tanh": lambda: nn.GELU(approximate="tanh"),  # GPT-2's (Hugging Face calls it "gelu_new")
    "gelu": nn.GELU,  # exact: x * Φ(x)
    "relu": nn.ReLU,  # the original Transformer's
}


@dataclass
class GPTConfig:
    """Every size and switch of a GPT. The defaults are GPT-2 small (``GPTConfig() == from_preset("gpt2")``).

    ``d_ff=None`` means ``4 * d_model``. ``dropout`` is the one rate GPT-2 uses at its three places
    (embeddings, attention weights, each residual branch); it acts only in training mode. The GPT-2
    presets keep 0.1, the value of GPT-2's published configuration; set ``dropout=0.0`` to
    fine-tune without it. ``bias`` switches the biases of every Linear and LayerNorm.
    """

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

    def __post_init__(self) -> None:
        for name in ("vocab_size", "context_length", "d_model", "n_layers", "n_heads", "d_ff"):
            if name == "d_ff" and self.d_ff is None:
                self.d_ff = 4 * self.d_model
            setattr(self, name, check_int("GPTConfig", name, getattr(self, name), minimum=1))
        for name in ("bias", "tie_weights"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise ValueError(f"GPTConfig.{name}={getattr(self, name)!r} must be True or False")
            setattr(self, name, bool(getattr(self, name)))
        self.dropout = check_float("GPTConfig", "dropout", self.dropout, 0.0, 1.0)
        self.layer_norm_eps = check_float("GPTConfig", "layer_norm_eps", self.layer_norm_eps, 0.0, low_open=True)
        if self.d_model % self.n_heads:
            divisors = [h for h in range(1, self.d_model + 1) if self.d_model % h == 0]
            raise ValueError(
                f"n_heads={self.n_heads} does not divide d_model={self.d_model}: each head gets d_model / n_heads "
                f"features, so choose n_heads among {divisors[:12]}{' ...' if len(divisors) > 12 else ''}"
            )
        if not isinstance(self.activation, str) or self.activation not in ACTIVATIONS:
            raise ValueError(f"activation={self.activation!r} is unknown: choose one of {sorted(ACTIVATIONS)}")

    @property
    def d_head(self) -> int:
        """Width of one head, ``d_k = d_model / n_heads``."""
        return self.d_model // self.n_heads

    @classmethod
    def from_preset(cls, name: str, **overrides) -> GPTConfig:
        """A named configuration (see ``PRESETS``), with any field replaced by ``overrides``."""
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}: choose one of {', '.join(PRESETS)}")
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(overrides) - fields)
        if unknown:
            raise ValueError(f"unknown GPTConfig field(s) {unknown}: the fields are {sorted(fields)}")
        return cls(**{**PRESETS[name], **overrides})


PRESETS: dict[str, dict] = {
    # The GPT-2 family (Radford et al., 2019): 50,257 tokens, 1,024 positions, d_k = 64 in every size.
    "gpt2": dict(n_layers=12, d_model=768, n_heads=12),  # 124M parameters
    "gpt2-medium": dict(n_layers=24, d_model=1024, n_heads=16),  # 355M
    "gpt2-large": dict(n_layers=36, d_model=1280, n_heads=20),  # 774M
    "gpt2-xl": dict(n_layers=48, d_model=1600, n_heads=25),  # 1,558M
    # nanoGPT's CPU run on characters: small enough to train on a laptop in minutes. Biases kept: a true mini GPT-2.
    "shakespeare-char": dict(
        vocab_size=65, context_length=64, d_model=128, n_layers=4, n_heads=4, dropout=0.0
    ),
    # For tests and quick demos: GPT-2's vocabulary, so GPT-2 token ids fit.
    "tiny": dict(context_length=16, d_model=32, n_layers=2, n_heads=2, dropout=0.0),
}


class FeedForward(nn.Module):
    """The position-wise MLP: ``c_fc`` (D -> d_ff), activation, ``c_proj`` (d_ff -> D), dropout.

    Applied to every token on its own (no mixing across positions: that is attention's job).
    """

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.d_model, config.d_ff, bias=config.bias)
        self.act = ACTIVATIONS[config.activation]()
        self.c_proj = nn.Linear(config.d_ff, config.d_model, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: Tensor) -> Tensor:
        """(B, T, D) -> (B, T, D)."""
        return self.dropout(self.c_proj(self.act(self.c_fc(x))))  # (B, T, d_ff) inside


class Block(nn.Module):
    """A pre-LN transformer block: ``x + attn(ln_1(x))``, then ``x + mlp(ln_2(x))``."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln_1 = LayerNorm(config.d_model, eps=config.layer_norm_eps, bias=config.bias)
        self.attn = MultiHeadAttention(config.d_model, config.n_heads, dropout=config.dropout, bias=config.bias)
        self.ln_2 = LayerNorm(config.d_model, eps=config.layer_norm_eps, bias=config.bias)
        self.mlp = FeedForward(config)

    def forward(
        self, x: Tensor, kv_cache: KVCache | None = None, return_weights: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        """(B, T, D) -> (B, T, D); with ``return_weights``, also the attention weights (B, H, T, P + T)."""
        attended = self.attn(self.ln_1(x), return_weights=return_weights, kv_cache=kv_cache)
        if return_weights:
            attended, weights = attended
        x = x + attended
        x = x + self.mlp(self.ln_2(x))
        return (x, weights) if return_weights else x


class GPT(nn.Module):
    """GPT-2: embeddings, ``n_layers`` pre-LN blocks, a final LayerNorm and the language-model head."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.d_model)
        self.wpe = LearnedPositionalEmbedding(config.context_length, config.d_model)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList([Block(config) for _ in range(config.n_layers)])
        self.ln_f = LayerNorm(config.d_model, eps=config.layer_norm_eps, bias=config.bias)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_weights:
            self.lm_head.weight = self.wte.weight  # one (V, D) matrix reads tokens in and writes them out
        self.apply(self._init_weights)
        # GPT-2's residual scaling: each of the 2 * n_layers branches writing into the residual stream
        # starts smaller, so what they add up to does not grow with the number of layers.
        for name, param in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(param, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layers))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        """GPT-2's initialization: N(0, 0.02²) weights, zero biases; LayerNorms start at γ = 1, β = 0."""
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, (nn.Embedding, LearnedPositionalEmbedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def new_kv_cache(self) -> list[KVCache]:
        """An empty cache for ``forward(..., kv_cache=...)``: one ``KVCache`` per block."""
        return [KVCache(max_positions=self.config.context_length) for _ in self.blocks]

    def _embed(self, idx: Tensor, start: int = 0) -> Tensor:
        """Token plus position embeddings of ``idx`` (B, T) at positions ``start ..``, then dropout: (B, T, D)."""
        idx = _token_ids("idx", idx)
        B, T = idx.shape
        if T == 0:
            raise ValueError("idx has no tokens (T = 0): pass at least one token per sequence")
        if start + T > self.config.context_length:
            n = self.config.context_length
            raise ValueError(
                f"a sequence of T={T} tokens is longer than context_length={n}: keep its last {n} tokens "
                f"(idx[:, -context_length:])"
                if start == 0
                else f"T={T} new tokens after {start} cached positions need {start + T} positions, but "
                f"context_length={n}: start a fresh cache with at most the last {n} tokens"
            )
        if not torch.compiler.is_compiling() and ((idx < 0) | (idx >= self.config.vocab_size)).any():
            raise ValueError(
                f"token ids must be in [0, {self.config.vocab_size}), got values in "
                f"[{int(idx.min())}, {int(idx.max())}]: was idx made with a different tokenizer?"
            )
        x = self.wte(idx) + self.wpe(T, start=start)  # (B, T, D) + (T, D)
        return self.drop(x)

    def forward(
        self, idx: Tensor, targets: Tensor | None = None, kv_cache: list[KVCache] | None = None
    ) -> tuple[Tensor, Tensor | None]:
        """Logits for the next token at every position, and the loss when ``targets`` are given.

        Args:
            idx: token ids (B, T).
            targets: the next tokens (B, T), already shifted (``targets[:, t]`` follows ``idx[:, t]``);
                positions set to -100 are ignored.
            kv_cache: from ``new_kv_cache()``; holds ``P`` past positions, so ``idx`` are positions
                ``P .. P + T - 1``. It is updated in place.

        Returns:
            ``(logits (B, T, V), loss)``: the mean cross-entropy in nats, or None without targets.
        """
        if kv_cache is not None and len(kv_cache) != len(self.blocks):
            raise ValueError(
                f"kv_cache has {len(kv_cache)} layers, the model {len(self.blocks)}: use model.new_kv_cache()"
            )
        start = len(kv_cache[0]) if kv_cache is not None else 0
        x = self._embed(idx, start)  # (B, T, D)
        for i, block in enumerate(self.blocks):
            x = block(x, kv_cache=None if kv_cache is None else kv_cache[i])  # (B, T, D)
        logits = self.lm_head(self.ln_f(x))  # (B, T, V)
        if targets is None:
            return logits, None
        targets = _token_ids("targets", targets).long()  # cross_entropy takes int64 targets only
        if targets.shape != idx.shape:
            raise ValueError(f"targets must have the shape of idx {tuple(idx.shape)}, got {tuple(targets.shape)}")
        if not torch.compiler.is_compiling():
            V = self.config.vocab_size
            ignored = targets == -100
            bad, none_left = (((targets < 0) & ~ignored) | (targets >= V)).any(), ignored.all()
            if bad or none_left:
                raise ValueError(
                    f"targets must be token ids in [0, {V}) or -100 (ignored), got values in "
                    f"[{int(targets.min())}, {int(targets.max())}]" if bad else
                    "every target is -100 (ignored), so the mean loss would be 0 / 0 = nan: give at least "
                    "one target, or skip this batch"
                )
        loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=-100)
        return logits, loss

    @torch.no_grad()
    def attention_maps(self, idx: Tensor) -> list[Tensor]:
        """Every layer's attention weights for ``idx`` (B, T): ``n_layers`` tensors (B, H, T, T), rows sum to 1.

        The same format as transformers' ``output_attentions=True``. Call ``model.eval()`` first
        (in training mode the embeddings are dropped out). Only this method asks the blocks for
        weights: ``forward`` never materializes them.
        """
        x = self._embed(idx)  # (B, T, D)
        maps = []
        for block in self.blocks:
            x, weights = block(x, return_weights=True)  # (B, T, D), (B, H, T, T)
            maps.append(weights)
        return maps

    def num_parameters(self, exclude_embeddings: bool = False) -> int:
        """Number of trainable numbers; a tied ``wte``/``lm_head`` matrix counts once.

        ``exclude_embeddings=True`` leaves out the token and position tables (``wte``, ``wpe``), as
        transformers' ``num_parameters(exclude_embeddings=True)`` does; an untied ``lm_head`` stays.
        """
        total = sum(p.numel() for p in self.parameters())  # parameters() yields a shared tensor once
        if exclude_embeddings:
            total -= self.wte.weight.numel() + self.wpe.weight.numel()
        return total

    # ----- Hugging Face interoperability -------------------------------------------------------

    @classmethod
    def from_hf(cls, model_or_state_dict, **overrides) -> GPT:
        """A ``GPT`` holding the weights of a transformers ``GPT2LMHeadModel`` (or ``GPT2Model``) or its state dict.

        With a model, the configuration comes from ``model.config``; with a state dict it is
        inferred from the shapes, ``n_heads`` assumed ``d_model / 64`` (GPT-2's head width) and
        ``dropout`` 0.1 (GPT-2's) unless given in ``overrides``. GPT-2's ``Conv1D`` weights, stored
        (in, out), are transposed for ``nn.Linear``. Wrong or missing keys and shapes raise a
        ``ValueError`` naming the key. The model is returned in eval mode, like transformers'.
        """
        if isinstance(model_or_state_dict, nn.Module):
            state_dict = model_or_state_dict.state_dict()
        else:
            state_dict = dict(model_or_state_dict)
        prefix = "transformer." if any(k.startswith("transformer.") for k in state_dict) else ""
        hf = {k.removeprefix(prefix): v for k, v in state_dict.items()}
        old_mask_buffer = re.compile(r"h\.\d+\.attn\.(bias|masked_bias)")  # in checkpoints saved by old transformers
        hf = {k: v for k, v in hf.items() if not old_mask_buffer.fullmatch(k)}
        for key in ("wte.weight", "wpe.weight"):
            if key not in hf:
                raise ValueError(f"the state dict has no {prefix + key!r}: is it a GPT-2 (GPT2LMHeadModel) state dict?")
        if isinstance(model_or_state_dict, nn.Module):
            settings = _settings_from_hf_config(model_or_state_dict.config, overrides)
        else:
            settings = _settings_from_shapes(hf, overrides)
        config = GPTConfig(**{**settings, **overrides})

        with torch.device("meta"):
            model = cls(config)  # shapes only: the weights come from the state dict
        expected = {_hf_name(name): (name, p.shape) for name, p in model.state_dict(keep_vars=True).items()}
        if config.tie_weights:
            hf.pop("lm_head.weight", None)
            del expected["lm_head.weight"]
        missing = sorted(set(expected) - set(hf), key=_natural)
        if missing:
            raise ValueError(
                f"the state dict is missing {prefix + missing[0]!r}"
                + (f" and {len(missing) - 1} more" if len(missing) > 1 else "")
                + f" expected for a GPT with {config}"
            )
        unexpected = sorted(set(hf) - set(expected), key=_natural)
        if unexpected:
            raise ValueError(
                f"unexpected key {prefix + unexpected[0]!r}"
                + (f" (and {len(unexpected) - 1} more)" if len(unexpected) > 1 else "")
                + f" for a GPT with {config}"
            )
        ours = {}
        for key, (name, shape) in expected.items():
            tensor = hf[key].detach()
            if _is_conv1d(key):
                tensor = tensor.t()  # Conv1D (in, out) -> Linear (out, in)
            if tensor.shape != shape:
                stored = tuple(hf[key].shape)
                want = tuple(shape[::-1]) if _is_conv1d(key) else tuple(shape)
                raise ValueError(f"{prefix + key!r} has shape {stored}, expected {want} for a GPT with {config}")
            ours[name] = tensor.contiguous().clone()
        if config.tie_weights:
            ours["lm_head.weight"] = ours["wte.weight"]
        model.load_state_dict(ours, assign=True)
        if config.tie_weights:
            model.lm_head.weight = model.wte.weight  # assign=True replaced both; share one tensor again
        return model.eval()

    def to_hf_state_dict(self) -> dict[str, Tensor]:
        """These weights under ``GPT2LMHeadModel``'s names and layouts (Conv1D weights transposed to (in, out)).

        Load it with ``GPT2LMHeadModel(model.to_hf_config()).load_state_dict(...)``. GPT-2 always has
        biases: a model built with ``bias=False`` exports zeros there, which computes the same thing.
        """
        out = {}
        for name, tensor in self.state_dict().items():
            key = _hf_name(name)
            tensor = tensor.detach()
            out[("" if key == "lm_head.weight" else "transformer.") + key] = (
                tensor.t().contiguous() if _is_conv1d(key) else tensor.clone()
            )
        if not self.config.bias:
            for name, module in self.named_modules():
                if isinstance(module, (nn.Linear, LayerNorm)) and name != "lm_head":
                    rows = module.weight.shape[0]
                    out[f"transformer.{_hf_name(name + '.bias')}"] = module.weight.new_zeros(rows)
        return out

    def to_hf_config(self):
        """The matching transformers ``GPT2Config``."""
        from transformers import GPT2Config

        c = self.config
        eos = 50_256 if c.vocab_size > 50_256 else None  # GPT-2's <|endoftext|>, when the vocabulary has it
        return GPT2Config(
            vocab_size=c.vocab_size, n_positions=c.context_length, n_embd=c.d_model, n_layer=c.n_layers,
            n_head=c.n_heads, n_inner=c.d_ff, activation_function=_HF_ACTIVATION_NAMES[c.activation],
            resid_pdrop=c.dropout, embd_pdrop=c.dropout, attn_pdrop=c.dropout, layer_norm_epsilon=c.layer_norm_eps,
            tie_word_embeddings=c.tie_weights, bos_token_id=eos, eos_token_id=eos,
        )

    @classmethod
    def from_pretrained(cls, name_or_path: str | os.PathLike, **hf_kwargs) -> GPT:
        """OpenAI's GPT-2 weights: ``"gpt2"``, ``"gpt2-medium"``, ``"gpt2-large"``, ``"gpt2-xl"``, or a local
        directory written by transformers' ``save_pretrained``.

        Downloads through transformers once (then its cache is used, also offline); extra keyword
        arguments go to ``GPT2LMHeadModel.from_pretrained`` (e.g. ``cache_dir``). Raises
        ``WeightsUnavailableError`` when the weights are neither cached nor reachable.
        """
        from transformers import GPT2LMHeadModel

        path = Path(name_or_path).expanduser()
        if path.is_dir():
            return cls.from_hf(GPT2LMHeadModel.from_pretrained(path, **hf_kwargs))
        name = str(name_or_path).removeprefix("openai-community/")
        if name not in PRETRAINED:
            raise ValueError(
                f"{str(name_or_path)!r} is neither a directory nor a GPT-2 checkpoint: choose one of "
                f"{', '.join(PRETRAINED)}, or a directory saved with save_pretrained"
            )
        try:  # the cache first: instant, and no network retries when the files are there
            hf_model = GPT2LMHeadModel.from_pretrained(name, local_files_only=True, **hf_kwargs)
        except OSError:
            if _offline():
                raise WeightsUnavailableError(
                    f"the {name} weights are not in the Hugging Face cache and offline mode is on (HF_HUB_OFFLINE or "
                    f"TRANSFORMERS_OFFLINE): the weights need a network connection once (then they are cached), "
                    f"or pass a local directory written by save_pretrained"
                ) from None
            if (why := _hub_unreachable()) is not None:  # fail in seconds, not after minutes of retries
                raise WeightsUnavailableError(
                    f"the {name} weights are not in the Hugging Face cache and the hub cannot be reached ({why}): "
                    f"the weights need a network connection once (then they are cached), or pass a local "
                    f"directory written by save_pretrained"
                ) from None
            try:
                hf_model = GPT2LMHeadModel.from_pretrained(name, **hf_kwargs)
            except OSError as err:
                raise WeightsUnavailableError(
                    f"could not download the {name} weights from the Hugging Face hub ({err}). They need a network "
                    f"connection once (then they are cached), or pass a local directory written by save_pretrained"
                ) from err
        return cls.from_hf(hf_model)


def _token_ids(name: str, ids) -> Tensor:
    """``ids`` as an int64 (B, T) tensor, or a ValueError naming what is wrong and the fix."""
    if not isinstance(ids, Tensor):
        raise ValueError(
            f"{name} must be a torch.Tensor of token ids of shape (B, T), got a {type(ids).__name__}: "
            f"pass torch.tensor([ids]) (one sequence) or torch.as_tensor(array)"
        )
    if ids.dtype == torch.bool or ids.is_floating_point() or ids.is_complex():
        raise ValueError(
            f"{name} must hold integer token ids, got {ids.dtype}: ids are whole numbers (tokenizer "
            f"output), e.g. {name}.long() if the values are whole"
        )
    if ids.dim() != 2:
        raise ValueError(f"{name} must have shape (B, T), got {tuple(ids.shape)}: for one sequence use {name}[None]")
    return ids if ids.dtype in (torch.int64, torch.int32) else ids.long()  # uint8, int16, ...: embeddings need int64


class WeightsUnavailableError(OSError):
    """Pretrained weights are neither in the local cache nor downloadable (no network)."""


PRETRAINED = ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl")
_HF_ACTIVATION_NAMES = {"gelu_tanh": "gelu_new", "gelu": "gelu", "relu": "relu"}
_ACTIVATION_FROM_HF = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}


def _hf_name(name: str) -> str:
    """Our parameter name -> GPT-2's (without the ``transformer.`` prefix): ``blocks.0.x`` -> ``h.0.x``."""
    return re.sub(r"^blocks\.", "h.", name)


def _is_conv1d(hf_name: str) -> bool:
    """GPT-2 stores these four weights as Conv1D, shape (in, out): the transpose of nn.Linear's."""
    return bool(re.fullmatch(r"h\.\d+\.(attn\.c_attn|attn\.c_proj|mlp\.c_fc|mlp\.c_proj)\.weight", hf_name))


def _natural(key: str) -> list:
    """Sort key putting h.2 before h.10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", key)]


def _offline() -> bool:
    truthy = {"1", "ON", "YES", "TRUE"}
    return any(os.environ.get(v, "").upper() in truthy for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def _hub_unreachable(timeout: float = 3.0) -> str | None:
    """Why the Hugging Face hub does not answer one HEAD request within ``timeout`` seconds, or ``None``
    when it answers (any HTTP status). Uses huggingface_hub's own session, so its proxies and endpoint
    (``HF_ENDPOINT``) apply."""
    from huggingface_hub import constants, get_session

    try:
        get_session().head(constants.ENDPOINT, timeout=timeout)
    except Exception as err:  # noqa: BLE001 - any failure to get an answer means: unreachable
        return f"{constants.ENDPOINT}: {type(err).__name__}: {err}"
    return None


def _settings_from_shapes(hf: dict[str, Tensor], overrides: dict) -> dict:
    """GPTConfig fields read off a GPT-2 state dict (keys without the ``transformer.`` prefix)."""
    (vocab_size, d_model), context_length = hf["wte.weight"].shape, hf["wpe.weight"].shape[0]
    layers = [int(m.group(1)) for k in hf if (m := re.match(r"h\.(\d+)\.", k))]
    d_ff = hf["h.0.mlp.c_fc.weight"].shape[1] if "h.0.mlp.c_fc.weight" in hf else 4 * d_model
    head = hf.get("lm_head.weight")
    tied = head is None or head.data_ptr() == hf["wte.weight"].data_ptr() or torch.equal(head, hf["wte.weight"])
    settings = dict(
        vocab_size=vocab_size, context_length=context_length, d_model=d_model,
        n_layers=max(layers, default=-1) + 1, d_ff=d_ff, tie_weights=tied,
    )
    if "n_heads" not in overrides:
        if d_model % 64:
            raise ValueError(
                f"a state dict does not say how many heads it has, and d_model={d_model} is not a multiple "
                f"of GPT-2's head width 64: pass n_heads=... (or pass the model instead of its state dict)"
            )
        settings["n_heads"] = d_model // 64
    return settings


def _settings_from_hf_config(hf_config, overrides: dict) -> dict:
    """GPTConfig fields from a transformers ``GPT2Config``; features GPT does not have raise a ValueError."""
    unsupported = {
        "add_cross_attention": True,
        "scale_attn_by_inverse_layer_idx": True,
        "scale_attn_weights": False,
    }
    for flag, bad in unsupported.items():
        if getattr(hf_config, flag, not bad) == bad:
            raise ValueError(f"GPT2Config.{flag}={bad} is not supported by this GPT (GPT-2 uses {not bad})")
    if hf_config.activation_function not in _ACTIVATION_FROM_HF:
        raise ValueError(
            f"GPT2Config.activation_function={hf_config.activation_function!r} is not supported: "
            f"use one of {sorted(_ACTIVATION_FROM_HF)}"
        )
    rates = {hf_config.embd_pdrop, hf_config.attn_pdrop, hf_config.resid_pdrop}
    if len(rates) > 1 and "dropout" not in overrides:
        raise ValueError(
            f"GPT2Config has embd_pdrop={hf_config.embd_pdrop}, attn_pdrop={hf_config.attn_pdrop}, "
            f"resid_pdrop={hf_config.resid_pdrop}, but GPTConfig has one dropout: pass dropout=... to from_hf"
        )
    return dict(
        vocab_size=hf_config.vocab_size,
        context_length=hf_config.n_positions,
        d_model=hf_config.n_embd,
        n_layers=hf_config.n_layer,
        n_heads=hf_config.n_head,
        d_ff=hf_config.n_inner,
        dropout=overrides.get("dropout", max(rates)),
        bias=True,
        tie_weights=hf_config.tie_word_embeddings,
        layer_norm_eps=hf_config.layer_norm_epsilon,
        activation=_ACTIVATION_FROM_HF[hf_config.activation_function],
    )
