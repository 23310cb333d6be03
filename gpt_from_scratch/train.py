"""Chapter 6 — training on Tiny Shakespeare.

The loop (``train``): draw a batch, compute the cross-entropy, backpropagate, clip the gradient norm,
take an AdamW step whose learning rate follows ``lr_at`` (linear warm-up, then cosine decay), and every
``eval_interval`` steps estimate the train and validation losses (``estimate_loss``). Checkpoints are
safetensors files plus a small JSON (``save_checkpoint``/``load_checkpoint``); a resumed run continues
exactly like an uninterrupted one. ``book_model`` returns the two small models the book trains.

Run it from a shell (several processes with ``torchrun``: DistributedDataParallel)::

    python -m gpt_from_scratch.train --preset shakespeare-char --max-iters 2000 --out runs/char
    torchrun --standalone --nproc_per_node 2 -m gpt_from_scratch.train --preset shakespeare-char
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from safetensors.torch import load_file, save_file
from tqdm.auto import tqdm

from .data import cache_dir, get_batch, load_tiny_shakespeare, prepare_tokens, read_tokens, split_text
from .model import GPT, GPTConfig
from .tokenizer import CharTokenizer, gpt2_encoding
from .utils import atomic_path, default_device, sha256_file

CHECKPOINT_FORMAT = "gpt_from_scratch.checkpoint/1"
MODEL_FILE, OPTIMIZER_FILE, META_FILE = "model.safetensors", "optimizer.safetensors", "checkpoint.json"


@dataclass
class TrainConfig:
    """Everything the loop needs besides the model and the data. Defaults: nanoGPT's Shakespeare-char run."""

    max_iters: int = 2000  # optimizer steps
    batch_size: int = 12  # B, sequences per step (per process under torchrun)
    block_size: int | None = None  # T, tokens per sequence; None = the model's context_length
    learning_rate: float = 1e-3  # peak learning rate, reached at the end of the warm-up
    min_lr: float = 1e-4  # floor of the cosine decay
    warmup_iters: int = 100  # steps of linear warm-up
    lr_decay_iters: int | None = None  # step where the cosine reaches min_lr; None = max_iters
    weight_decay: float = 0.1  # AdamW's decoupled weight decay, on matrices only
    beta1: float = 0.9
    beta2: float = 0.99
    grad_clip: float = 1.0  # clip the global gradient norm to this; 0 turns clipping off
    eval_interval: int = 250  # estimate the losses every this many steps (and at the end)
    eval_iters: int = 20  # batches per loss estimate
    checkpoint_interval: int = 0  # save every this many steps (0: only at the end); needs out_dir
    seed: int = 1337
    device: str = "cpu"
    progress: bool = True  # show a tqdm progress bar


@dataclass
class History:
    """What ``train`` records, ready to plot: one entry per step, and one per loss estimate."""

    step: list[int] = field(default_factory=list)  # every optimizer step (0-based)
    loss: list[float] = field(default_factory=list)  # its mini-batch loss (noisy)
    lr: list[float] = field(default_factory=list)  # its learning rate
    eval_step: list[int] = field(default_factory=list)  # steps completed when the losses were estimated
    train_loss: list[float] = field(default_factory=list)  # estimated loss on the training split
    val_loss: list[float] = field(default_factory=list)  # estimated loss on the validation split


def lr_at(step: int, cfg: TrainConfig) -> float:
    """The learning rate of step ``step``: linear warm-up to ``learning_rate``, cosine decay to ``min_lr``.

    Warm-up: ``learning_rate * (step + 1) / (warmup_iters + 1)`` for ``step < warmup_iters``.
    Then ``min_lr + (learning_rate - min_lr) * (1 + cos(pi * r)) / 2`` with ``r`` going from 0 to 1 between
    ``warmup_iters`` and ``lr_decay_iters``; ``min_lr`` after that (nanoGPT's schedule).
    """
    decay_iters = cfg.max_iters if cfg.lr_decay_iters is None else cfg.lr_decay_iters
    if step < cfg.warmup_iters:
        return cfg.learning_rate * (step + 1) / (cfg.warmup_iters + 1)
    if step >= decay_iters:
        return cfg.min_lr
    ratio = (step - cfg.warmup_iters) / (decay_iters - cfg.warmup_iters)  # 0 -> 1
    return cfg.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (cfg.learning_rate - cfg.min_lr)


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW {cite}`loshchilov2019adamw` with weight decay on the matrices (parameters with >= 2 dimensions:
    linear weights and embeddings) and none on biases and LayerNorm gains, which are vectors."""
    params = [p for p in model.parameters() if p.requires_grad]  # tied weights appear once
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    fused = torch.device(cfg.device).type == "cuda"
    return torch.optim.AdamW(groups, lr=cfg.learning_rate, betas=(cfg.beta1, cfg.beta2), fused=fused or None)


@torch.no_grad()
def estimate_loss(model: torch.nn.Module, splits: dict, batch_size: int = 12, block_size: int | None = None,
                  eval_iters: int = 20, seed: int = 0, device: str = "cpu") -> dict[str, float]:
    """Mean loss over ``eval_iters`` batches of each split in ``splits`` (name -> token array).

    The batches come from a fresh ``torch.Generator`` seeded with ``seed``, so every call (and every
    split) is scored on the same windows: two estimates differ only because the model changed.
    The model is evaluated in ``eval()`` mode (no dropout) and put back in its previous mode.
    """
    block_size = block_size or model.config.context_length
    was_training = model.training
    model.eval()
    out = {}
    for name, data in splits.items():
        generator = torch.Generator().manual_seed(seed)
        losses = [model(*get_batch(data, batch_size, block_size, generator, device))[1].item()
                  for _ in range(eval_iters)]
        out[name] = sum(losses) / len(losses)
    model.train(was_training)
    return out


def _step_seed(seed: int, rank: int, step: int) -> int:
    """The seed of one step's randomness (its batch and its dropout masks) on one process."""
    return seed + 1_000_003 * rank + step


def _world() -> tuple[int, int]:
    """(rank, world size) of this process: (0, 1) unless torch.distributed is initialised."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def train(model: GPT, train_data, val_data, cfg: TrainConfig, out_dir: str | os.PathLike | None = None,
          resume: bool = False) -> History:
    """Train ``model`` on the token array ``train_data`` for ``cfg.max_iters`` steps; return the ``History``.

    ``model`` is a ``GPT``, or any module whose ``forward(idx, targets)`` returns ``(logits, loss)``
    (then set ``cfg.block_size``; checkpoints need a ``GPT``). It is left in eval mode.

    Every ``cfg.eval_interval`` steps, and after the last one, ``estimate_loss`` scores both splits.
    With ``out_dir``, a checkpoint is written there at the end (and every ``cfg.checkpoint_interval``
    steps); ``resume=True`` first loads the checkpoint in ``out_dir`` (weights, optimizer state, step,
    history) and continues up to ``cfg.max_iters``. Step ``s`` draws its batch and its dropout masks
    from seeds derived from ``(cfg.seed, rank, s)``, so a resumed run takes exactly the steps an
    uninterrupted one would.

    Under ``torchrun`` (``torch.distributed`` initialised) the model is wrapped in
    ``DistributedDataParallel``: each process draws its own batches, gradients are averaged, and only
    rank 0 shows progress and writes checkpoints. On a GPU, float32 matrix products use TF32
    (``torch.set_float32_matmul_precision("high")``).
    """
    rank, world = _world()
    device = cfg.device
    if torch.device(device).type == "cuda":
        torch.set_float32_matmul_precision("high")  # TF32 matrix products on recent GPUs, as nanoGPT does
    block_size = cfg.block_size or model.config.context_length
    model.to(device)
    optimizer = make_optimizer(model, cfg)
    history, start = History(), 0
    if resume:
        if out_dir is None:
            raise ValueError("resume=True needs out_dir, the folder holding the checkpoint to resume from")
        ckpt = load_checkpoint(out_dir, device=device)
        if ckpt.model.config != model.config:
            raise ValueError(f"the checkpoint in {out_dir} is for {ckpt.model.config}, not for {model.config}")
        model.load_state_dict(ckpt.model.state_dict())
        if ckpt.optimizer_state is None:
            raise ValueError(f"the checkpoint in {out_dir} has no optimizer state, so it cannot be resumed exactly")
        optimizer.load_state_dict(ckpt.optimizer_state)
        history, start = ckpt.history or History(), ckpt.step
    net = model
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel

        net = DistributedDataParallel(model, device_ids=[torch.device(device).index] if "cuda" in device else None)

    def evaluate(step: int) -> None:
        if history.eval_step and history.eval_step[-1] == step:
            return  # already estimated (a resumed run starts where the last estimate was made)
        losses = estimate_loss(model, {"train": train_data, "val": val_data}, cfg.batch_size, block_size,
                               cfg.eval_iters, seed=cfg.seed, device=device)
        history.eval_step.append(step)
        history.train_loss.append(losses["train"])
        history.val_loss.append(losses["val"])
        if rank == 0:
            bar.set_postfix(train=f"{losses['train']:.4f}", val=f"{losses['val']:.4f}")

    model.train()
    bar = tqdm(range(start, cfg.max_iters), initial=start, total=cfg.max_iters, desc="training",
               disable=not cfg.progress or rank != 0)
    for step in bar:
        if step % cfg.eval_interval == 0:
            evaluate(step)
        lr = lr_at(step, cfg)
        for group in optimizer.param_groups:
            group["lr"] = lr
        seed = _step_seed(cfg.seed, rank, step)
        x, y = get_batch(train_data, cfg.batch_size, block_size, torch.Generator().manual_seed(seed), device)
        torch.manual_seed(seed)  # this step's dropout masks
        _, loss = net(x, y)  # logits (B, T, V), loss: mean cross-entropy over the B * T positions
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        history.step.append(step)
        history.loss.append(loss.item())
        history.lr.append(lr)
        done = step + 1
        if out_dir is not None and rank == 0 and cfg.checkpoint_interval and done % cfg.checkpoint_interval == 0:
            save_checkpoint(out_dir, model, done, cfg, optimizer, history)
    evaluate(cfg.max_iters)
    bar.close()
    if out_dir is not None and rank == 0:
        save_checkpoint(out_dir, model, max(start, cfg.max_iters), cfg, optimizer, history)
    model.eval()
    return history


# ----------------------------------------------------------------------------------------------------
# Checkpoints: model.safetensors (weights), optimizer.safetensors (AdamW state), checkpoint.json.


@dataclass
class Checkpoint:
    """What ``load_checkpoint`` returns."""

    model: GPT  # in eval mode, on the requested device
    step: int  # optimizer steps taken
    train_config: TrainConfig | None
    optimizer_state: dict | None  # ready for ``optimizer.load_state_dict`` (an optimizer from ``make_optimizer``)
    history: History | None
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


def save_checkpoint(path: str | os.PathLike, model: GPT, step: int = 0, train_config: TrainConfig | None = None,
                    optimizer: torch.optim.Optimizer | None = None, history: History | None = None,
                    extra: dict | None = None) -> Path:
    """Write a checkpoint folder ``path``: weights, optimizer state (if given) and a JSON description.

    Each file is written atomically (``atomic_path``). ``checkpoint.json`` is written last and records
    the SHA-256 of the other files, so ``load_checkpoint`` notices a checkpoint whose writing was
    interrupted. The optimizer state is stored as tensors (no pickle): exp_avg, exp_avg_sq and step of
    every parameter, keyed by the parameter's name.
    """
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    weights, tied = _unique_tensors(model.state_dict())
    meta = {
        "format": CHECKPOINT_FORMAT,
        "step": int(step),
        "model_config": dataclasses.asdict(model.config),
        "train_config": dataclasses.asdict(train_config) if train_config is not None else None,
        "tied": tied,
        "optimizer": None,
        "history": dataclasses.asdict(history) if history is not None else None,
        "extra": extra or {},
        "torch_version": torch.__version__,
        "files": {},
    }
    with atomic_path(path / MODEL_FILE) as tmp:
        save_file(weights, tmp)
    meta["files"][MODEL_FILE] = sha256_file(path / MODEL_FILE)
    if optimizer is not None:
        names = {id(p): n for n, p in model.named_parameters()}
        order = [names[id(p)] for group in optimizer.param_groups for p in group["params"]]
        state = optimizer.state_dict()
        tensors = {f"{order[i]}.{key}": value.detach().contiguous().cpu()
                   for i, per_param in state["state"].items() for key, value in per_param.items()}
        groups = [{k: v for k, v in group.items() if k != "params"} | {"params": [order[i] for i in group["params"]]}
                  for group in state["param_groups"]]
        with atomic_path(path / OPTIMIZER_FILE) as tmp:
            save_file(tensors, tmp)
        meta["optimizer"] = {"param_groups": groups}
        meta["files"][OPTIMIZER_FILE] = sha256_file(path / OPTIMIZER_FILE)
    with atomic_path(path / META_FILE) as tmp:
        tmp.write_text(json.dumps(meta, indent=1), encoding="utf-8")
    return path


def load_checkpoint(path: str | os.PathLike, device: str = "cpu") -> Checkpoint:
    """Read a folder written by ``save_checkpoint``, verifying every file's SHA-256 first.

    Rebuilds the model from the stored ``GPTConfig``, loads the weights (re-tying tied ones, strictly:
    every parameter must be present) and returns a ``Checkpoint``.
    """
    path = Path(path)
    meta_path = path / META_FILE
    if not meta_path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}: {META_FILE} is missing (write one with save_checkpoint)")
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    if meta.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{meta_path} has format {meta.get('format')!r}, expected {CHECKPOINT_FORMAT!r}")
    for name, expected in meta["files"].items():
        actual = sha256_file(path / name) if (path / name).is_file() else "missing"
        if actual != expected:
            raise ValueError(
                f"{path / name} does not match {META_FILE} (sha256 {actual}, expected {expected}): the checkpoint "
                "was changed or its saving was interrupted. Delete the folder and save (or train) again."
            )
    model = GPT(GPTConfig(**meta["model_config"]))
    state = load_file(path / MODEL_FILE)
    for alias, name in meta["tied"].items():
        state[alias] = state[name]
    model.load_state_dict(state, strict=True)
    model.to(device).eval()

    optimizer_state = None
    if meta["optimizer"] is not None:
        tensors = load_file(path / OPTIMIZER_FILE, device=device)
        groups = meta["optimizer"]["param_groups"]
        order = [name for group in groups for name in group["params"]]
        index = {name: i for i, name in enumerate(order)}
        state = {}
        for key, value in tensors.items():
            name, _, slot = key.rpartition(".")
            state.setdefault(index[name], {})[slot] = value
        for per_param in state.values():  # AdamW keeps "step" on the CPU unless it is capturable or fused
            if "step" in per_param and not (groups[0].get("capturable") or groups[0].get("fused")):
                per_param["step"] = per_param["step"].cpu()
        optimizer_state = {"state": state, "param_groups": [
            group | {"params": [index[name] for name in group["params"]]} for group in groups]}
    train_config = TrainConfig(**meta["train_config"]) if meta["train_config"] is not None else None
    history = History(**meta["history"]) if meta["history"] is not None else None
    return Checkpoint(model, meta["step"], train_config, optimizer_state, history, meta["extra"])


# ----------------------------------------------------------------------------------------------------
# Data at two levels, and the two models the book trains.


def char_level_data(text: str | None = None) -> tuple[np.ndarray, np.ndarray, CharTokenizer]:
    """Character-level Tiny Shakespeare: ``(train_ids, val_ids, tokenizer)``.

    The vocabulary is every character of the whole corpus (65); the first 90% is for training
    (1,003,854 tokens), the rest for validation (111,540). Ids are ``uint16`` NumPy arrays.
    """
    text = load_tiny_shakespeare() if text is None else text
    tokenizer = CharTokenizer(text)
    train_text, val_text = split_text(text, 0.9)
    train_ids = np.array(tokenizer.encode(train_text), dtype=np.uint16)
    val_ids = np.array(tokenizer.encode(val_text), dtype=np.uint16)
    return train_ids, val_ids, tokenizer


def bpe_level_data(text: str | None = None):
    """GPT-2-BPE-level Tiny Shakespeare: ``(train_ids, val_ids, encoding)`` (301,966 and 36,059 tokens).

    The ids come from ``prepare_tokens`` (memory-mapped ``uint16`` files in the cache); ``encoding`` is
    the tiktoken GPT-2 encoding (``encode_ordinary`` / ``decode``).
    """
    encoding = gpt2_encoding()
    paths = prepare_tokens(encoding, text=text)
    return read_tokens(paths["train"]), read_tokens(paths["val"]), encoding


@dataclass(frozen=True)
class Recipe:
    """A model the book trains: its data level, architecture and training settings."""

    data: str  # "char" or "bpe"
    model: dict  # GPTConfig fields
    train: dict  # TrainConfig fields that differ from the defaults


_CHAR = dataclasses.asdict(GPTConfig.from_preset("shakespeare-char"))  # 4 layers, 4 heads, 128 dims, context 64
RECIPES = {
    # nanoGPT's CPU run for Shakespeare-char (batch 12, block 64, lr 1e-3 -> 1e-4), 1,000 steps instead of
    # 2,000 so that Chapter 6 runs in under 5 minutes on 2 CPU cores (benchmarks/bench_train.py runs the 2,000).
    "shakespeare-char": Recipe("char", _CHAR, dict(max_iters=1000, batch_size=12, eval_interval=250, eval_iters=20)),
    # The same network on GPT-2 tokens: its 50,257-way output layer is most of the work, hence fewer steps.
    "shakespeare-bpe": Recipe("bpe", _CHAR | {"vocab_size": 50_257},
                              dict(max_iters=100, batch_size=8, warmup_iters=10, eval_interval=25, eval_iters=5)),
    # nanoGPT's GPU run for Shakespeare-char (6 layers, 6 heads, 384 dims, context 256, dropout 0.2): for a GPU.
    "shakespeare-char-full": Recipe("char", _CHAR | dict(context_length=256, d_model=384, n_layers=6, n_heads=6,
                                                         d_ff=1536, dropout=0.2),
                                    dict(max_iters=5000, batch_size=64, eval_interval=250, eval_iters=200)),
}
BOOK_MODELS = ("shakespeare-char", "shakespeare-bpe")  # what book_model returns


def load_data(level: str):
    """``char_level_data()`` for ``"char"``, ``bpe_level_data()`` for ``"bpe"``."""
    if level == "char":
        return char_level_data()
    if level == "bpe":
        return bpe_level_data()
    raise ValueError(f"unknown data level {level!r}: use 'char' or 'bpe'")


def book_model_path(name: str) -> Path:
    """Where ``book_model(name)`` keeps its checkpoint: ``cache_dir() / "checkpoints" / name``."""
    if name not in BOOK_MODELS:
        raise ValueError(f"unknown book model {name!r}: choose one of {', '.join(BOOK_MODELS)}")
    return cache_dir() / "checkpoints" / name


def book_model(name: str, progress: bool = True):
    """One of the two models Chapter 6 trains, ``"shakespeare-char"`` or ``"shakespeare-bpe"``.

    Returns ``(model, tokenizer)``: the ``GPT`` in eval mode on the CPU, and what decodes its ids
    (a ``CharTokenizer``, or the tiktoken GPT-2 encoding), both with ``.encode(text)`` and ``.decode(ids)``.

    The checkpoint in ``book_model_path(name)`` is loaded (and verified) when it exists and was made with
    the book's current settings; otherwise the model is trained from seed 1337 with ``RECIPES[name]``
    and saved there. Training is deterministic, so both routes give the same weights on one machine
    (other CPUs or PyTorch versions may differ in the last bits). Its ``History`` is
    ``load_checkpoint(book_model_path(name)).history``.
    """
    path = book_model_path(name)  # checks the name
    recipe = RECIPES[name]
    train_ids, val_ids, tokenizer = load_data(recipe.data)
    cfg = TrainConfig(**recipe.train, progress=progress)
    if (path / META_FILE).is_file():
        try:
            ckpt = load_checkpoint(path)
            if ckpt.extra.get("recipe") == dataclasses.asdict(recipe):
                return ckpt.model, tokenizer
        except (ValueError, KeyError, TypeError, OSError) as err:
            warnings.warn(f"retraining {name}: its cached checkpoint could not be used ({err})", stacklevel=2)
    torch.manual_seed(cfg.seed)
    model = GPT(GPTConfig(**recipe.model))
    history = train(model, train_ids, val_ids, cfg)
    save_checkpoint(path, model, cfg.max_iters, cfg, history=history, extra={"recipe": dataclasses.asdict(recipe)})
    return model.eval(), tokenizer


# ----------------------------------------------------------------------------------------------------
# Command line.


def _parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m gpt_from_scratch.train",
        description="Train a GPT on Tiny Shakespeare. Any TrainConfig or GPTConfig field can be overridden, "
                    "e.g. --max-iters 500 --lr 3e-4 --n-layers 2; the rest comes from the preset.")
    parser.add_argument("--preset", default="shakespeare-char", choices=sorted(RECIPES))
    parser.add_argument("--out", default=None, help="checkpoint folder (written at the end)")
    parser.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out")
    groups = {"train": parser.add_argument_group("training (TrainConfig fields)"),
              "model": parser.add_argument_group("model (GPTConfig fields)")}
    groups["train"].add_argument("--lr", "--learning-rate", dest="learning_rate", type=float, metavar="LR")
    fields = [(f.name, "train") for f in dataclasses.fields(TrainConfig) if f.name != "learning_rate"]
    fields += [(name, "model") for name in RECIPES["shakespeare-char"].model]
    for name, kind in fields:
        groups[kind].add_argument("--" + name.replace("_", "-"), dest=name, metavar=name.upper())
    return parser.parse_args(argv)


def _convert(value: str, like):
    """Parse a command-line string as the type of ``like`` (an int when ``like`` is None)."""
    if isinstance(like, bool):
        if value.lower() not in {"true", "false", "1", "0"}:
            raise ValueError(f"expected true or false, got {value!r}")
        return value.lower() in {"true", "1"}
    return type(like)(value) if like is not None else int(value)


def world_size() -> int:
    """How many processes ``torchrun`` started (1 without torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def main(argv=None) -> None:
    """``python -m gpt_from_scratch.train``: train a preset with overrides; see ``--help``."""
    args = _parse_args(argv)
    recipe = RECIPES[args.preset]
    defaults = TrainConfig(**recipe.train)
    train_kw, model_kw = dataclasses.asdict(defaults), dict(recipe.model)
    for name, value in vars(args).items():
        if value is None or name in {"preset", "out", "resume"}:
            continue
        target = train_kw if name in train_kw else model_kw
        target[name] = value if not isinstance(value, str) else _convert(value, target[name])
    if world_size() > 1:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend)
        if backend == "nccl":
            train_kw["device"] = f"cuda:{int(os.environ['LOCAL_RANK'])}"
            torch.cuda.set_device(train_kw["device"])
    elif args.device is None:
        train_kw["device"] = default_device()  # the command line uses a GPU when there is one
    rank, world = _world()
    cfg = TrainConfig(**train_kw)
    train_ids, val_ids, _ = load_data(recipe.data)
    torch.manual_seed(cfg.seed)  # the same initial weights on every process
    model = GPT(GPTConfig(**model_kw))
    done_before = load_checkpoint(args.out).step if args.resume and args.out else 0
    start = time.perf_counter()
    history = train(model, train_ids, val_ids, cfg, out_dir=args.out, resume=args.resume)
    seconds = time.perf_counter() - start
    if world > 1:
        agree = torch.tensor(1, device=cfg.device)
        for p in model.parameters():  # every process must end with rank 0's weights
            reference = p.detach().clone()
            dist.broadcast(reference, src=0)
            agree &= torch.tensor(int(torch.equal(reference, p.detach())), device=cfg.device)
        dist.all_reduce(agree, op=dist.ReduceOp.MIN)
        if rank == 0:
            print(f"{world} processes, weights identical on every rank: {bool(agree.item())}")
        dist.destroy_process_group()
    if rank == 0:
        print(f"{args.preset}: {model.num_parameters():,} parameters on {cfg.device}")
        for step, train_loss, val_loss in zip(history.eval_step, history.train_loss, history.val_loss):
            print(f"step {step:6d}: train loss {train_loss:.4f}, val loss {val_loss:.4f}")
        tokens = (cfg.max_iters - done_before) * cfg.batch_size * (cfg.block_size or model.config.context_length)
        print(f"{seconds:.1f} s, {tokens * world / seconds:,.0f} tokens/s" + (f"; checkpoint in {args.out}" if args.out else ""))


if __name__ == "__main__":
    main()
