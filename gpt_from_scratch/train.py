"""Chapter 6 — training on Tiny Shakespeare.

The loop (``train``): draw a batch, compute the cross-entropy, backpropagate, clip the gradient norm,
take an AdamW step whose learning rate follows ``lr_at`` (linear warm-up, then cosine decay), and every
``eval_interval`` steps estimate the train and validation losses (``estimate_loss``). A non-finite
loss stops the run at once (``TrainingDivergedError``). Checkpoints (``checkpoint``) are crash-safe
folders; a resumed run continues exactly like an uninterrupted one. The settings (``TrainConfig``),
the schedule and the optimizer are in ``train_config``. The models the book trains, and the command
line that trains them, are the book's (``book.recipes``, ``book.cli``).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import torch
import torch.distributed as dist
from tqdm.auto import tqdm

from .checkpoint import META_FILE, load_checkpoint, save_checkpoint
from .data import get_batch
from .model import GPT
from .precision import autocast, grad_scaler, resolve_precision
from .train_config import History, TrainConfig, lr_at, make_optimizer
from .utils import check_int, eval_mode, float32_matmul_precision, free_threads, skip_token_id_checks


class TrainingDivergedError(FloatingPointError):
    """The loss (or the gradient norm) became nan or inf: training stopped before the weights broke."""


@torch.no_grad()
def estimate_loss(model: torch.nn.Module, splits: dict, batch_size: int = 12, block_size: int | None = None,
                  eval_iters: int = 20, seed: int = 0, device: str = "cpu",
                  precision: str = "fp32") -> dict[str, float]:
    """Mean loss over ``eval_iters`` batches of each split in ``splits`` (name -> token array).

    The batches come from a fresh ``torch.Generator`` seeded with ``seed``, so every call (and every
    split) is scored on the same windows: two estimates differ only because the model changed.
    The model is evaluated in ``eval()`` mode (no dropout), then every module is put back in its mode; the
    forward passes run in ``precision`` (``"fp32"``, ``"bf16"`` or ``"fp16"``: see ``precision``).
    """
    eval_iters = check_int("estimate_loss", "eval_iters", eval_iters, minimum=1)
    block_size = _block_size(model, block_size)
    vocab_size = _vocab_size(model)
    out = {}
    with eval_mode(model):
        for name, data in splits.items():
            generator = torch.Generator().manual_seed(seed)
            losses = []
            for _ in range(eval_iters):
                x, y = get_batch(data, batch_size, block_size, generator, device, vocab_size)
                with autocast(precision, device):
                    losses.append(model(x, y)[1].item())
            out[name] = sum(losses) / len(losses)
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


def _vocab_size(model: torch.nn.Module) -> int | None:
    """The model's ``config.vocab_size`` (batches are checked against it on the host), if it has one."""
    return getattr(getattr(model, "config", None), "vocab_size", None)


def _step_seed(seed: int, rank: int, step: int) -> int:
    """The seed of one step's randomness (its batch and its dropout masks) on one process."""
    return seed + 1_000_003 * rank + step


def _world() -> tuple[int, int]:
    """(rank, world size) of this process: (0, 1) unless torch.distributed is initialised."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _check_finite(what: str, value: float, step: int, lr: float, seen_at: int | None = None) -> None:
    """A ``TrainingDivergedError`` when ``value`` is nan or inf. ``seen_at``: the step at which a value
    read back late (from a GPU, see ``train``) was checked; the weights are then already broken."""
    if not math.isfinite(value):
        kept = ("The weights before this step are kept (no checkpoint was written)." if seen_at is None else
                f"The losses are read from the GPU every eval_interval steps, so this was seen at step {seen_at} "
                "and the weights are no longer finite; the last checkpoint written is intact.")
        raise TrainingDivergedError(
            f"training diverged at step {step}: the {what} is {value} at learning rate {lr:.3g}. {kept} Lower "
            f"learning_rate (e.g. {lr / 10:.3g}), lengthen warmup_iters, or keep grad_clip > 0"
        )


BEST_DIR = "best"  # train(out_dir=...) keeps the weights of the lowest validation loss in out_dir / BEST_DIR


def _best_weights(out_dir, step: int, device: str) -> dict | None:
    """The weights saved in ``out_dir / BEST_DIR`` if they are those of ``step`` (for a resumed run)."""
    if out_dir is None or not (Path(out_dir) / BEST_DIR / META_FILE).is_file():
        return None
    ckpt = load_checkpoint(Path(out_dir) / BEST_DIR, device=device)
    return ckpt.model.state_dict() if ckpt.step == step else None


def train(model: GPT, train_data, val_data, cfg: TrainConfig, out_dir: str | os.PathLike | None = None,
          resume: bool = False) -> History:
    """Train ``model`` on the token array ``train_data`` for ``cfg.max_iters`` steps; return the ``History``.

    ``model`` is a ``GPT``, or any module whose ``forward(idx, targets)`` returns ``(logits, loss)``
    (then set ``cfg.block_size``; checkpoints need a ``GPT``). It is left in eval mode.

    Every ``cfg.eval_interval`` steps, and after the last one, ``estimate_loss`` scores both splits.
    With ``cfg.keep_best`` (the default) the model ends with the weights of the lowest validation
    estimate (``History.best_step``; usually the last one, unless the model overfits), as nanoGPT keeps
    its best checkpoint. With ``out_dir``, a checkpoint of the last step (weights and optimizer, to
    resume from) is written there at the end (and every ``cfg.checkpoint_interval`` steps), and the best
    weights in ``out_dir / "best"`` whenever the validation loss improves. ``resume=True`` first loads
    the checkpoint in ``out_dir`` (weights, optimizer state, step, history) and continues up to
    ``cfg.max_iters``. Step ``s`` draws its batch and its dropout masks from seeds derived from
    ``(cfg.seed, rank, s)``, so a resumed run takes exactly the steps an uninterrupted one would.
    Every batch is checked on the host to hold token ids the model has (``get_batch``'s
    ``vocab_size``); the model's own checks, which wait for a GPU, are off meanwhile.

    Speed (Chapter 7's last section): ``cfg.precision`` runs the forward passes under autocast
    (``precision``), ``cfg.compile`` compiles the model with ``torch.compile``, AdamW is fused on a
    GPU, float32 matrix products use TF32 there during the run (``utils.float32_matmul_precision``), the
    next batch is drawn while the GPU computes, and on a GPU the losses are read back (and checked
    for nan) only every ``eval_interval`` steps, not after every step: reading one waits for the GPU.
    On a CPU whose cores other programs keep busy, where torch's threads spin while they wait, it
    trains on the cores left free (``utils.free_threads``, with a warning).

    Under ``torchrun`` (``torch.distributed`` initialised) the model is wrapped in
    ``DistributedDataParallel``: each process draws its own batches, gradients are averaged, and only
    rank 0 shows progress and writes checkpoints.
    """
    on_gpu = torch.device(cfg.device).type == "cuda"
    matmuls = "high" if on_gpu else torch.get_float32_matmul_precision()  # TF32 on a GPU, as nanoGPT
    with (skip_token_id_checks(model),  # batches: checked on the host
          float32_matmul_precision(matmuls), free_threads(cfg.device)):
        return _train(model, train_data, val_data, cfg, out_dir, resume)


def _train(model: GPT, train_data, val_data, cfg: TrainConfig, out_dir, resume: bool) -> History:
    """``train``'s work, while the model's own token-id checks are off."""
    rank, world = _world()
    device = cfg.device
    precision = resolve_precision(cfg.precision, device)
    on_gpu = torch.device(device).type == "cuda"
    block_size, vocab_size = _block_size(model, cfg.block_size), _vocab_size(model)
    model.to(device)
    optimizer = make_optimizer(model, cfg)
    scaler = grad_scaler(precision, device)  # fp16 only
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
    best = None  # a copy of the best weights so far, when they are not the model's current ones
    if resume and history.best_step is not None and history.best_step < start:
        best = _best_weights(out_dir, history.best_step, device)
    compiled = torch.compile(model) if cfg.compile else model
    net = compiled
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel

        net = DistributedDataParallel(compiled, device_ids=[torch.device(device).index] if on_gpu else None)
    pending = []  # (step, lr, loss, gradient norm or None): on a GPU, read back at the next flush()

    def flush() -> None:
        if not pending:
            return
        values = torch.stack([v for _, _, loss, norm in pending for v in (loss, loss if norm is None else norm)])
        values = values.float().tolist()  # one wait for the GPU
        seen_at = pending[-1][0] if on_gpu else None  # None: checked before the optimizer step
        for i, (step, lr, _, norm) in enumerate(pending):
            _check_finite("loss", values[2 * i], step, lr, seen_at)
            if norm is not None:
                _check_finite("gradient norm", values[2 * i + 1], step, lr, seen_at)
            history.step.append(step)
            history.loss.append(values[2 * i])
            history.lr.append(lr)
        pending.clear()

    def evaluate(step: int) -> None:
        nonlocal best
        flush()
        if history.eval_step and history.eval_step[-1] == step:
            return  # already estimated (a resumed run starts where the last estimate was made)
        losses = estimate_loss(compiled, {"train": train_data, "val": val_data}, cfg.batch_size, block_size,
                               cfg.eval_iters, seed=cfg.seed, device=device, precision=precision)
        improved = history.best_val_loss is None or losses["val"] < history.best_val_loss
        history.eval_step.append(step)
        history.train_loss.append(losses["train"])
        history.val_loss.append(losses["val"])
        if improved and cfg.keep_best:
            last = step == cfg.max_iters  # the model ends with these weights anyway
            best = None if last else {k: v.detach().clone() for k, v in model.state_dict().items()}
        if improved and out_dir is not None and rank == 0:
            save_checkpoint(Path(out_dir) / BEST_DIR, model, step, cfg, history=history)
        if rank == 0:
            bar.set_postfix(train=f"{losses['train']:.4f}", val=f"{losses['val']:.4f}")

    def batch(step: int):
        seed = _step_seed(cfg.seed, rank, step)
        return get_batch(train_data, cfg.batch_size, block_size, torch.Generator().manual_seed(seed), device,
                         vocab_size)

    model.train()
    bar = tqdm(range(start, cfg.max_iters), initial=start, total=cfg.max_iters, desc="training",
               disable=not cfg.progress or rank != 0)
    x, y = batch(start) if start < cfg.max_iters else (None, None)
    for step in bar:
        if step % cfg.eval_interval == 0:
            evaluate(step)
        lr = lr_at(step, cfg)
        for group in optimizer.param_groups:
            group["lr"] = lr
        torch.manual_seed(_step_seed(cfg.seed, rank, step))  # this step's dropout masks
        with autocast(precision, device):
            _, loss = net(x, y)  # logits (B, T, V), loss: mean cross-entropy over the B * T positions
        if step + 1 < cfg.max_iters:
            x, y = batch(step + 1)  # the next batch, drawn while the GPU computes (as nanoGPT does)
        if not on_gpu:  # free on the CPU: check now, before the step can break the weights
            _check_finite("loss", loss.item(), step, lr)
        optimizer.zero_grad(set_to_none=True)
        (loss if scaler is None else scaler.scale(loss)).backward()
        norm = None
        if cfg.grad_clip > 0:
            if scaler is not None:
                scaler.unscale_(optimizer)  # clip the true gradients; inf ones make the scaler skip the step
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            if scaler is not None:
                norm = None  # fp16 overflows now and then: the scaler skips those steps and lowers its scale
            elif not on_gpu:
                _check_finite("gradient norm", norm.item(), step, lr)  # before the step: weights stay finite
        if scaler is None:
            optimizer.step()
        else:
            scaler.step(optimizer)
            scaler.update()
        pending.append((step, lr, loss.detach(), None if norm is None else norm.detach()))
        if not on_gpu:
            flush()
        done = step + 1
        if out_dir is not None and rank == 0 and cfg.checkpoint_interval and done % cfg.checkpoint_interval == 0:
            flush()
            save_checkpoint(out_dir, model, done, cfg, optimizer, history)
    evaluate(cfg.max_iters)
    bar.close()
    if out_dir is not None and rank == 0:
        save_checkpoint(out_dir, model, max(start, cfg.max_iters), cfg, optimizer, history)
    if cfg.keep_best and best is not None:
        model.load_state_dict(best)
    model.eval()
    return history
