"""Chapter 6 — checkpoints: what a checkpoint folder holds, and the model rebuilt from it.

A checkpoint folder (``checkpoint_folder``: written so that a crash at any moment leaves it loadable)
holds ``model.safetensors`` (weights), ``optimizer.safetensors`` (AdamW state; no pickle anywhere) and
``checkpoint.json`` (configs, step, history, and the SHA-256 of the other files). The model is a ``GPT``
or Chapter 10's ``Llama`` (``checkpoint.json`` names which), with its LoRA layers if it has any.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file
from torch import nn

from .checkpoint_folder import (
    META_FILE,
    MODEL_FILE,
    OPTIMIZER_FILE,
    CheckpointError,
    locate,
    read_meta,
    write_folder,
)
from .lora import lora_settings, with_lora
from .model import GPT, GPTConfig
from .modern import Llama, LlamaConfig
from .train_config import History, TrainConfig
from .utils import check_int

MODELS = {"GPT": (GPT, GPTConfig), "Llama": (Llama, LlamaConfig)}  # what checkpoints hold


@dataclass
class Checkpoint:
    """What ``load_checkpoint`` returns."""

    model: GPT | Llama  # in eval mode, on the requested device
    step: int  # optimizer steps taken
    train_config: object | None  # a train_config.TrainConfig
    optimizer_state: dict | None  # ready for ``optimizer.load_state_dict`` (an optimizer from ``make_optimizer``)
    history: object | None  # a train.History
    extra: dict  # whatever JSON-able dict was passed to ``save_checkpoint``


def _unique_tensors(state: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Split a state dict into tensors stored once and ``{alias: name}`` for tensors sharing memory.

    safetensors refuses to save two names for one tensor, which tied weights are (``lm_head.weight`` is
    ``wte.weight``): the alias is recorded and re-tied on load.
    """
    tensors, aliases, seen = {}, {}, {}
    for name, tensor in state.items():
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape), tensor.stride())
        if key in seen:
            aliases[name] = seen[key]
        else:
            seen[key] = name
            tensors[name] = tensor.detach().contiguous().cpu()
    return tensors, aliases


def _check_finite(tensors: dict[str, torch.Tensor], what: str) -> None:
    for name, tensor in tensors.items():
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            raise FloatingPointError(
                f"not saving: {what} {name!r} holds nan or inf, and writing it would replace a good "
                "checkpoint with a broken one. Training diverged: lower the learning rate and train again"
            )


def _optimizer_tensors(model: GPT, optimizer: torch.optim.Optimizer) -> tuple[dict, list]:
    """AdamW's state as ``{"<param name>.<slot>": tensor}``, and its param groups with names for ids."""
    names = {id(p): n for n, p in model.named_parameters()}
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if not all(id(p) in names for p in params):
        raise ValueError("the optimizer updates tensors that are not this model's parameters: pass the "
                         "optimizer that trains this model (make_optimizer(model, ...))")
    order = [names[id(p)] for p in params]
    state = optimizer.state_dict()
    tensors = {f"{order[i]}.{key}": value.detach().contiguous().cpu()
               for i, per_param in state["state"].items() for key, value in per_param.items()}
    groups = [{k: v for k, v in group.items() if k != "params"} | {"params": [order[i] for i in group["params"]]}
              for group in state["param_groups"]]
    return tensors, groups


def _model_kind(model: nn.Module) -> str:
    """``model``'s name in ``MODELS``; a TypeError for a model no checkpoint can rebuild."""
    for name, (cls, _) in MODELS.items():
        if isinstance(model, cls):
            return name
    raise TypeError(f"save_checkpoint: model is a {type(model).__name__}, and a checkpoint "
                    f"rebuilds only {' or '.join(MODELS)}: save another module's weights "
                    "with safetensors.torch.save_model(model, path)")


def save_checkpoint(path: str | os.PathLike, model: GPT | Llama, step: int = 0,
                    train_config=None, optimizer: torch.optim.Optimizer | None = None,
                    history=None, extra: dict | None = None) -> Path:
    """Write a checkpoint folder ``path``: weights, optimizer state (if given) and a JSON description.

    Crash-safe (``checkpoint_folder``): interrupted at any moment, the folder still loads as the
    previous checkpoint or the new one. Weights or optimizer state holding nan or inf raise a
    ``FloatingPointError`` before anything is written. Files get the usual mode (0666 minus the umask).
    """
    path = Path(path)
    step = check_int("save_checkpoint", "step", step, minimum=0)
    kind = _model_kind(model)
    lora = lora_settings(model)  # a fine-tune's LoRA layers, rebuilt on load (Chapter 9)
    weights, tied = _unique_tensors(model.state_dict())
    _check_finite(weights, "the weight")
    opt_tensors, groups = _optimizer_tensors(model, optimizer) if optimizer is not None else ({}, None)
    _check_finite(opt_tensors, "the optimizer state")
    files = {MODEL_FILE: weights} | ({OPTIMIZER_FILE: opt_tensors} if optimizer is not None else {})
    return write_folder(path, files, {
        "step": step,
        "model": kind,
        "model_config": dataclasses.asdict(model.config),
        "train_config": dataclasses.asdict(train_config) if train_config is not None else None,
        "tied": tied,
        "lora": lora,
        "optimizer": {"param_groups": groups} if optimizer is not None else None,
        "history": dataclasses.asdict(history) if history is not None else None,
        "extra": extra or {},
        "torch_version": torch.__version__,
    })


def _read_meta(path: Path) -> dict:
    """checkpoint.json (``read_meta``), checked for the fields ``load_checkpoint`` needs; a
    CheckpointError otherwise."""
    meta = read_meta(path)
    meta_path = path / META_FILE
    kinds = {"step": int, "model_config": dict, "tied": dict, "extra": dict,
             "train_config": (dict, type(None)), "optimizer": (dict, type(None)), "history": (dict, type(None)),
             "lora": (dict, type(None))}  # absent (None): no LoRA layers
    for key, kind in kinds.items():
        if not isinstance(meta.get(key), kind) or isinstance(meta.get(key), bool):
            raise CheckpointError(f"{meta_path}: field {key!r} is {meta.get(key)!r:.80}, not a valid value: "
                                  "the file was edited or damaged. Delete the folder and save again")
    if meta.get("model", "GPT") not in MODELS:  # absent: saved before Llamas were, a GPT
        raise CheckpointError(f"{meta_path}: field 'model' is {meta['model']!r:.80}, "
                              f"expected one of {list(MODELS)}: the file was edited or "
                              "damaged")
    return meta


def _config_from(meta_path: Path, fields: dict, cls):
    try:
        return cls(**fields)
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"{meta_path}: its {cls.__name__} is not valid ({err})") from None


def _with_lora(model: GPT | Llama, meta: dict, meta_path: Path) -> GPT:
    """``model`` with the LoRA layers ``checkpoint.json`` records (none when it records none)."""
    try:
        return with_lora(model, meta.get("lora"))
    except (KeyError, TypeError, ValueError) as err:
        raise CheckpointError(f"{meta_path}: its LoRA settings {meta['lora']!r:.120} are not valid "
                              f"({err}): the file was edited or damaged") from None


def _check_shapes(weights: Path, config, meta: dict, meta_path: Path) -> None:
    """Compare the stored tensor shapes with the model ``config`` describes, before allocating it.

    The layer count is checked first, then one layer built on the meta device (shapes, no memory)
    gives every expected shape: a description asking for a huge model costs nothing to refuse.
    """
    with safe_open(weights, framework="pt") as f:
        stored = {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}
    layers = {int(m.group(1)) for name in stored if (m := re.match(r"blocks\.(\d+)\.", name))}
    expected = None
    if layers == set(range(config.n_layers)):
        with torch.device("meta"):
            model_class = MODELS[meta.get("model", "GPT")][0]
            one = model_class(dataclasses.replace(config, n_layers=1))
            one = _with_lora(one, meta, meta_path)
            one = one.state_dict()
        expected = {re.sub(r"^blocks\.0\.", f"blocks.{i}.", name): tuple(t.shape)
                    for i in range(config.n_layers) for name, t in one.items()
                    if i == 0 or name.startswith("blocks.0.")}
        expected = {name: shape for name, shape in expected.items() if name not in meta["tied"]}
    if stored != expected:
        if expected is None:
            wrong = f"{len(layers)} layers stored, {config.n_layers} described"
        else:  # only the tensors that truly differ: described but not stored, stored but not, shape
            wrong = "; ".join(sorted(
                f"{name}: stored {stored.get(name, 'nothing')}, described {expected.get(name, 'nothing')}"
                for name in stored.keys() | expected.keys() if stored.get(name) != expected.get(name))[:3])
        raise CheckpointError(f"{meta_path} describes a model ({config}) whose weights are not the ones "
                              f"stored in {MODEL_FILE} ({wrong}): the description was edited or damaged. "
                              "Save the model again from the code that trained it, or restore the file")


def _optimizer_state(file: Path, groups: list, device: str) -> dict:
    """The dict ``optimizer.load_state_dict`` takes, equal to the ``state_dict()`` that was saved."""
    tensors = load_file(file, device=device)
    order = [name for group in groups for name in group["params"]]
    index = {name: i for i, name in enumerate(order)}
    state = {}
    for key, value in tensors.items():
        name, _, slot = key.rpartition(".")
        state.setdefault(index[name], {})[slot] = value
    for per_param in state.values():  # AdamW keeps "step" on the CPU unless it is capturable or fused
        if "step" in per_param and not (groups[0].get("capturable") or groups[0].get("fused")):
            per_param["step"] = per_param["step"].cpu()
    # JSON has no tuples: betas (and any other tuple setting) come back as lists
    groups = [{k: tuple(v) if isinstance(v, list) and k != "params" else v for k, v in group.items()}
              | {"params": [index[name] for name in group["params"]]} for group in groups]
    return {"state": dict(sorted(state.items())), "param_groups": groups}


def load_checkpoint(path: str | os.PathLike, device: str = "cpu") -> Checkpoint:
    """Read a folder written by ``save_checkpoint``, verifying every file's SHA-256 first.

    Rebuilds the model (a ``GPT`` or a ``Llama``) from its stored config (after checking
    that the stored tensors have its shapes, so a damaged description cannot make it
    allocate a huge model), loads the weights
    (re-tying tied ones, strictly) and returns a ``Checkpoint``. A damaged folder raises a
    ``CheckpointError`` (a ValueError) saying what is wrong.
    """
    path = Path(path)
    meta = _read_meta(path)
    meta_path = path / META_FILE
    files = locate(path, meta)
    if MODEL_FILE not in meta["files"] or (meta["optimizer"] is not None) != (OPTIMIZER_FILE in meta["files"]):
        raise CheckpointError(f"{meta_path} does not list the files its checkpoint needs: it was edited")
    model_class, config_class = MODELS[meta.get("model", "GPT")]
    config = _config_from(meta_path, meta["model_config"], config_class)
    _check_shapes(files[MODEL_FILE], config, meta, meta_path)
    model = _with_lora(model_class(config), meta, meta_path)
    state = load_file(files[MODEL_FILE])
    try:
        for alias, name in meta["tied"].items():
            state[alias] = state[name]
        model.load_state_dict(state, strict=True)
        optimizer_state = None
        if meta["optimizer"] is not None:
            optimizer_state = _optimizer_state(files[OPTIMIZER_FILE], meta["optimizer"]["param_groups"], device)
    except (KeyError, TypeError, RuntimeError) as err:
        raise CheckpointError(f"{meta_path} does not match its tensors ({err!r:.200}): it was edited. "
                              "Delete the folder and save again") from None
    model.to(device).eval()
    train_config = _config_from(meta_path, meta["train_config"], TrainConfig) if meta["train_config"] else None
    history = _config_from(meta_path, meta["history"], History) if meta["history"] is not None else None
    return Checkpoint(model, meta["step"], train_config, optimizer_state, history, meta["extra"])
