"""Chapter 6 — training on Tiny Shakespeare.

The loop (``train``): draw a batch, compute the cross-entropy, backpropagate, clip the gradient norm,
take an AdamW step whose learning rate follows ``lr_at`` (linear warm-up, then cosine decay), and every
``eval_interval`` steps estimate the train and validation losses (``estimate_loss``). A non-finite
loss stops the run at once (``TrainingDivergedError``). Checkpoints (``checkpoint``) are crash-safe
folders; a resumed run continues exactly like an uninterrupted one. ``book_model`` (``recipes``)
returns the two small models the book trains; the command line lives in ``cli``::

    python -m gpt_from_scratch.train --preset shakespeare-char --max-iters 2000 --out runs/char
    torchrun --standalone --nproc_per_node 2 -m gpt_from_scratch.train --preset shakespeare-char
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from tqdm.auto import tqdm

from .checkpoint import (  # noqa: F401  (re-exported: chapters import them from here)
    CHECKPOINT_FORMAT, META_FILE, MODEL_FILE, OPTIMIZER_FILE, Checkpoint, CheckpointError, load_checkpoint,
    save_checkpoint,
)
from .data import get_batch
from .model import GPT
from .recipes import (  # noqa: F401  (re-exported)
    BOOK_MODELS, RECIPES, Recipe, book_model, book_model_path, bpe_level_data, char_level_data, load_data,
)
from .utils import check_float, check_int


class TrainingDivergedError(FloatingPointError):
    """The loss (or the gradient norm) became nan or inf: training stopped before the weights broke."""


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

    def __post_init__(self) -> None:
        ints = dict(max_iters=0, batch_size=1, block_size=1, warmup_iters=0, lr_decay_iters=0, eval_interval=1,
                    eval_iters=1, checkpoint_interval=0, seed=0)
        for name, minimum in ints.items():
            optional = name in ("block_size", "lr_decay_iters")
            setattr(self, name, check_int("TrainConfig", name, getattr(self, name), minimum, optional))
        floats = dict(learning_rate=(0, None), min_lr=(0, None), weight_decay=(0, None), beta1=(0, 1),
                      beta2=(0, 1), grad_clip=(0, None))
        for name, (low, high) in floats.items():
            setattr(self, name, check_float("TrainConfig", name, getattr(self, name), low, high))
        if not isinstance(self.device, str):
            raise ValueError(f"TrainConfig.device={self.device!r} must be a string such as 'cpu' or 'cuda'")


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
    eval_iters = check_int("estimate_loss", "eval_iters", eval_iters, minimum=1)
    block_size = _block_size(model, block_size)
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


def _block_size(model: torch.nn.Module, block_size: int | None) -> int:
    """``block_size``, or the model's context length; an error when the model cannot take it."""
    context = getattr(getattr(model, "config", None), "context_length", None)
    if block_size is None:
        if context is None:
            raise ValueError("this model has no config.context_length: set TrainConfig.block_size")
        return context
    if context is not None and block_size > context:
        raise ValueError(
            f"TrainConfig.block_size={block_size} is longer than the model's context_length={context}: "
            f"use block_size <= {context} (or None, which means {context})"
        )
    return block_size


def _step_seed(seed: int, rank: int, step: int) -> int:
    """The seed of one step's randomness (its batch and its dropout masks) on one process."""
    return seed + 1_000_003 * rank + step


def _world() -> tuple[int, int]:
    """(rank, world size) of this process: (0, 1) unless torch.distributed is initialised."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _check_finite(what: str, value: float, step: int, lr: float) -> None:
    if not math.isfinite(value):
        raise TrainingDivergedError(
            f"training diverged at step {step}: the {what} is {value} at learning rate {lr:.3g}. The weights "
            f"before this step are kept (no checkpoint was written). Lower learning_rate (e.g. {lr / 10:.3g}), "
            "lengthen warmup_iters, or keep grad_clip > 0"
        )


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
    block_size = _block_size(model, cfg.block_size)
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
        loss_value = loss.item()
        _check_finite("loss", loss_value, step, lr)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.grad_clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            _check_finite("gradient norm", norm.item(), step, lr)  # before the step: weights stay finite
        optimizer.step()
        history.step.append(step)
        history.loss.append(loss_value)
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


def main(argv=None) -> None:
    """``python -m gpt_from_scratch.train``: train a preset with overrides; see ``cli`` and ``--help``."""
    from .cli import main as cli_main

    cli_main(argv)


if __name__ == "__main__":
    main()
