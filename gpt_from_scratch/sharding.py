"""Chapter 15 — sharding: ZeRO-1's optimizer state and ZeRO-3's parameters, split by rank.

Data parallelism keeps everything on every rank: in fp32 with AdamW, 4 bytes a parameter
for its weight, 4 for its gradient and 8 for AdamW's two moments, 16 in all. Sharding
splits what each of the N ranks keeps:

- ``ShardedAdamW`` (ZeRO-1): each rank keeps AdamW's moments for its own run of the
  parameters, steps only those, and sends the updated weights to the others;
- ``shard_model`` (ZeRO-3, FSDP's idea): each rank keeps 1/N of every block's weights,
  gradients and moments, and gathers a block's weights for its forward;
``zero_bytes`` counts the bytes a rank keeps under each scheme (``state_bytes``).

``tests/test_parallel.py`` compares ``shard_model`` with PyTorch's FSDP2 (``fully_shard``,
on a CPU with gloo in torch 2.13) and ``ShardedAdamW`` with ``ZeroRedundancyOptimizer``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn

from .parallel import collective, ring_all_gather, ring_reduce_scatter, world
from .zero_bytes import _check_trainable, _own_parameters, _units, shard_owners

__all__ = ["ShardedAdamW", "shard_model", "gathered_parameters"]


class ShardedAdamW:
    """ZeRO-1: AdamW with its state split across ranks; every rank keeps all the weights.

    Rank r owns a contiguous run of the parameters (``shard_owners``), keeps AdamW's two
    moments for those only and steps them; then each rank broadcasts its updated run, flat
    in one message, to the others. The gradients must already be the mean across ranks
    (``DataParallel.finish()``). The weights equal AdamW's on every rank, with 8/N bytes of
    moments a parameter instead of 8. ``adamw_options`` go to ``torch.optim.AdamW``.
    """

    def __init__(self, params, **adamw_options):
        self.rank, self.world_size = world("ShardedAdamW")
        params = list(params)
        for p in params:
            if not isinstance(p, Tensor):
                raise ValueError(f"ShardedAdamW takes tensors, got a {type(p).__name__}: "
                                 "pass model.parameters() (it takes no parameter groups)")
        self.params = list({id(p): p for p in params}.values())  # a tied tensor once
        _check_trainable("ShardedAdamW", ((f"#{i}", p) for i, p in enumerate(self.params)))
        if not self.params:
            raise ValueError("ShardedAdamW got no parameters: pass model.parameters()")
        self.owners = shard_owners([p.numel() for p in self.params], self.world_size)
        mine = [p for p, owner in zip(self.params, self.owners) if owner == self.rank]
        self.local = torch.optim.AdamW(mine, **adamw_options) if mine else None

    @torch.no_grad()
    def step(self) -> None:
        """Step this rank's run of parameters, then give every rank every run."""
        if self.local is not None:
            self.local.step()
        for owner in range(self.world_size):
            run = [p for p, o in zip(self.params, self.owners) if o == owner]
            if not run:
                continue
            flat = torch.cat([p.reshape(-1) for p in run])  # (numel of the run,)
            with collective(f"broadcasting rank {owner}'s updated weights"):
                dist.broadcast(flat, src=owner)
            for p, new in zip(run, flat.split([p.numel() for p in run])):
                p.copy_(new.view_as(p))

    def zero_grad(self) -> None:
        """Forget every parameter's gradient (set it to None)."""
        for p in self.params:
            p.grad = None


@dataclass
class _Piece:
    """One parameter inside a unit's flat vector."""

    names: list[str]  # its names in the unit: two for a tied matrix
    shape: torch.Size
    offset: int  # where it starts in the flat vector


class _GatherShards(torch.autograd.Function):
    """Forward: all-gather the ranks' shards (S,) into the full vector (N * S,).
    Backward: reduce-scatter its gradient; each rank gets its shard's mean gradient."""

    @staticmethod
    def forward(ctx, shard: Tensor) -> Tensor:
        rank, world_size = dist.get_rank(), dist.get_world_size()
        full = shard.new_empty(world_size * shard.numel())  # (N * S,)
        full.view(world_size, -1)[rank] = shard
        return ring_all_gather(full)

    @staticmethod
    def backward(ctx, grad_full: Tensor) -> Tensor:
        summed = ring_reduce_scatter(grad_full.contiguous().clone())  # (S,) this rank's
        return summed / dist.get_world_size()


def _owner(unit: nn.Module, name: str) -> tuple[nn.Module, str]:
    path, _, attr = name.rpartition(".")
    return unit.get_submodule(path), attr


def _gather_unit(unit: nn.Module, args) -> None:
    """Before the unit's forward: its parameters become views of the gathered vector."""
    full = _GatherShards.apply(unit.flat_shard)  # (N * S,)
    for piece in unit.shard_pieces:
        value = full[piece.offset : piece.offset + piece.shape.numel()].view(piece.shape)
        for name in piece.names:
            setattr(*_owner(unit, name), value)


def _release_unit(unit: nn.Module, args, output) -> None:
    """After the unit's forward: drop the views (autograd keeps what backward needs)."""
    for piece in unit.shard_pieces:
        for name in piece.names:
            setattr(*_owner(unit, name), _placeholder(piece))


def _placeholder(piece) -> Tensor:
    """A tensor of the parameter's shape and no memory (``meta``), where the parameter
    was: the module still prints, and says its shape; only a forward gathers values."""
    return torch.empty(piece.shape, device="meta")


def _shard_unit(unit: nn.Module, rank: int, world_size: int) -> None:
    if "flat_shard" in unit._parameters:
        raise ValueError(f"this {type(unit).__name__} is sharded already: call shard_model "
                         "once, on the model as built")
    pieces, params, offset = {}, [], 0
    for path, owner in unit.named_modules():
        for name, p in owner._parameters.items():
            if p is None or name == "flat_shard":  # a block's shard stays the block's
                continue
            if id(p) not in pieces:
                pieces[id(p)], offset = _Piece([], p.shape, offset), offset + p.numel()
                params.append(p)
            pieces[id(p)].names.append(f"{path}.{name}" if path else name)
    if not params:
        raise ValueError(f"this {type(unit).__name__} has no parameters to shard: give "
                         "shard_model a model with parameters")
    flat = torch.cat([p.detach().reshape(-1) for p in params])
    S = -(-flat.numel() // world_size)  # each rank's share, rounded up
    flat = F.pad(flat, (0, world_size * S - flat.numel()))  # (N * S,): zeros at the end
    for piece in pieces.values():
        for name in piece.names:
            owner, attr = _owner(unit, name)
            del owner._parameters[attr]
            setattr(owner, attr, _placeholder(piece))
    unit.flat_shard = nn.Parameter(flat[rank * S : (rank + 1) * S].clone())  # (S,)
    unit.shard_pieces = list(pieces.values())
    unit.register_forward_pre_hook(_gather_unit)
    unit.register_forward_hook(_release_unit)


def shard_model(model: nn.Module) -> nn.Module:
    """ZeRO-3 (FSDP's idea): each rank keeps a flat 1/N of each block's parameters.

    Each of ``model.blocks`` is a unit, and the rest of the model (embeddings, last
    LayerNorm, tied head) one more. A unit's parameters are laid end to end in one vector,
    padded with zeros to N equal pieces; rank r keeps piece r as ``flat_shard``, the unit's
    only parameter. Before the unit's forward the ranks all-gather the pieces
    (``ring_all_gather``) and its parameters become views of the full vector; in backward
    the full vector's gradient is reduce-scattered (``ring_reduce_scatter``) and divided by
    N, so ``flat_shard.grad`` is the mean over ranks. An optimizer over
    ``model.parameters()`` steps only the shards; AdamW works number by number, so its
    moments are sharded with them.

    The gathered parameters are kept for backward (autograd holds them, as it holds the
    activations), not gathered again: fewer messages, but from forward to backward a rank
    holds every unit's parameters; FSDP frees them after each unit's forward
    (``reshard_after_forward``) and gathers again in backward. Between steps a rank keeps
    1/N of everything. Only a call of the model (its forward) gathers: read the full
    weights with ``gathered_parameters``. Every rank calls it on the same model; returns
    the model, changed in place.
    """
    rank, world_size = world("shard_model")
    units = _units(model)
    _check_trainable("shard_model", model.named_parameters())  # before any unit changes
    _own_parameters(units)
    for unit in units:
        _shard_unit(unit, rank, world_size)
    return model


@torch.no_grad()
def gathered_parameters(model: nn.Module) -> dict[str, Tensor]:
    """Every parameter of a ``shard_model``'s model at full size, by its name before.

    A collective: every rank calls it. A tied matrix appears under each of its names.
    """
    full_params = {}
    for prefix, unit in model.named_modules():
        if "flat_shard" in unit._parameters:
            full = _GatherShards.apply(unit.flat_shard)  # (N * S,)
            for piece in unit.shard_pieces:
                value = full[piece.offset : piece.offset + piece.shape.numel()]
                for name in piece.names:
                    name = f"{prefix}.{name}" if prefix else name
                    full_params[name] = value.view(piece.shape)
    if not full_params:
        raise ValueError("this model is not sharded: call shard_model(model) first")
    return full_params
