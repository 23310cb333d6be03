"""Chapter 6 — what a training run is told and what it records.

``TrainConfig`` (nanoGPT's Shakespeare-char defaults, each value checked), ``History`` (the losses
``train`` records, with the best validation estimate), the learning-rate schedule ``lr_at`` (linear
warm-up, then cosine decay) and ``make_optimizer`` (AdamW, weight decay on matrices only).
``checkpoint`` stores them and ``train`` uses them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from .precision import check_precision
from .utils import check_float, check_int


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
    precision: str = "auto"  # "fp32", "bf16", "fp16" or "auto" (GPU: bf16, else fp16; CPU: fp32); see precision
    compile: bool = False  # torch.compile the model (the command line turns it on on a GPU)
    keep_best: bool = True  # end with the weights of the lowest validation loss estimate (as nanoGPT keeps)
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
        self.precision = check_precision(self.precision)
        for name in ("compile", "keep_best"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"TrainConfig.{name}={getattr(self, name)!r} must be True or False")


@dataclass
class History:
    """What ``train`` records, ready to plot: one entry per step, and one per loss estimate."""

    step: list[int] = field(default_factory=list)  # every optimizer step (0-based)
    loss: list[float] = field(default_factory=list)  # its mini-batch loss (noisy)
    lr: list[float] = field(default_factory=list)  # its learning rate
    eval_step: list[int] = field(default_factory=list)  # steps completed when the losses were estimated
    train_loss: list[float] = field(default_factory=list)  # estimated loss on the training split
    val_loss: list[float] = field(default_factory=list)  # estimated loss on the validation split

    @property
    def best_index(self) -> int | None:
        """Index of the lowest validation estimate (the first one on ties); None before any estimate."""
        return min(range(len(self.val_loss)), key=self.val_loss.__getitem__) if self.val_loss else None

    @property
    def best_val_loss(self) -> float | None:
        """The lowest validation estimate: the loss of the weights ``train`` keeps (``keep_best``)."""
        return None if self.best_index is None else self.val_loss[self.best_index]

    @property
    def best_step(self) -> int | None:
        """The step after which the lowest validation estimate was made."""
        return None if self.best_index is None else self.eval_step[self.best_index]

    @property
    def final_val_loss(self) -> float | None:
        """The last validation estimate (after the last step)."""
        return self.val_loss[-1] if self.val_loss else None

    def summary(self, best_dir: str | None = None) -> str:
        """One line: the best validation loss, its step (and ``best_dir``, where it is saved), the final one."""
        if not self.val_loss:
            return "no validation estimate yet"
        where = f" (weights in {best_dir})" if best_dir else ""
        return (f"best val loss {self.best_val_loss:.4f} at step {self.best_step:,}{where}; "
                f"final val loss {self.final_val_loss:.4f} at step {self.eval_step[-1]:,}")


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
