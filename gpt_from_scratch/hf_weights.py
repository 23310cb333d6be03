"""Chapter 8 — moving weights between the book's ``GPT`` and Hugging Face's GPT-2.

``from_hf`` and ``from_pretrained`` build a ``GPT`` from GPT-2's weights, ``to_hf_state_dict`` and
``to_hf_config`` export one. GPT-2 keeps its four projection weights as ``Conv1D``, stored (in, out): they are
transposed for ``nn.Linear``. Parameter names differ only in ``blocks.N`` (ours) vs ``h.N``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import torch
from torch import Tensor, nn

from .layernorm import LayerNorm
from .model import GPT, GPTConfig


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


def from_hf(model_or_state_dict, **overrides) -> GPT:
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
        model = GPT(config)  # shapes only: the weights come from the state dict
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

def to_hf_state_dict(model: GPT) -> dict[str, Tensor]:
    """These weights under ``GPT2LMHeadModel``'s names and layouts (Conv1D weights transposed to (in, out)).

    Load it with ``GPT2LMHeadModel(to_hf_config(model)).load_state_dict(...)``. GPT-2 always has
    biases: a model built with ``bias=False`` exports zeros there, which computes the same thing.
    """
    out = {}
    for name, tensor in model.state_dict().items():
        key = _hf_name(name)
        tensor = tensor.detach()
        out[("" if key == "lm_head.weight" else "transformer.") + key] = (
            tensor.t().contiguous() if _is_conv1d(key) else tensor.clone()
        )
    if not model.config.bias:
        for name, module in model.named_modules():
            if isinstance(module, (nn.Linear, LayerNorm)) and name != "lm_head":
                rows = module.weight.shape[0]
                out[f"transformer.{_hf_name(name + '.bias')}"] = module.weight.new_zeros(rows)
    return out

def to_hf_config(model: GPT):
    """The matching transformers ``GPT2Config``."""
    from transformers import GPT2Config

    c = model.config
    eos = 50_256 if c.vocab_size > 50_256 else None  # GPT-2's <|endoftext|>, when the vocabulary has it
    return GPT2Config(
        vocab_size=c.vocab_size, n_positions=c.context_length, n_embd=c.d_model, n_layer=c.n_layers,
        n_head=c.n_heads, n_inner=c.d_ff, activation_function=_HF_ACTIVATION_NAMES[c.activation],
        resid_pdrop=c.dropout, embd_pdrop=c.dropout, attn_pdrop=c.dropout, layer_norm_epsilon=c.layer_norm_eps,
        tie_word_embeddings=c.tie_weights, bos_token_id=eos, eos_token_id=eos,
    )

def from_pretrained(name_or_path: str | os.PathLike, **hf_kwargs) -> GPT:
    """OpenAI's GPT-2 weights: ``"gpt2"``, ``"gpt2-medium"``, ``"gpt2-large"``, ``"gpt2-xl"``, or a local
    directory written by transformers' ``save_pretrained``.

    Downloads through transformers once (then its cache is used, also offline); extra keyword
    arguments go to ``GPT2LMHeadModel.from_pretrained`` (e.g. ``cache_dir``). Raises
    ``WeightsUnavailableError`` when the weights are neither cached nor reachable.
    """
    from transformers import GPT2LMHeadModel

    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return from_hf(GPT2LMHeadModel.from_pretrained(path, **hf_kwargs))
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
    return from_hf(hf_model)
