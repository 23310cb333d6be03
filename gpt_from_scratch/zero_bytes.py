"""Chapter 15 — the bytes each rank keeps, and who owns what, under each scheme.

``shard_owners`` gives each parameter to a rank for ZeRO-1 (contiguous runs, about 1/N
of the numbers each); ``state_bytes`` counts what a rank keeps between steps with AdamW,
unsharded ("ddp"), under ZeRO-1 ("zero1") and under ZeRO-3 ("zero3"), from the shapes
alone (a model on the ``meta`` device will do). ``sharding`` builds the two schemes on
the same owners and units, and refuses the same inputs with the same messages.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn

from .utils import check_int

SCHEMES = ("ddp", "zero1", "zero3")
STEP_BYTES = 4  # AdamW's step count: one float32 per tensor it steps


def shard_owners(numels: list[int], world_size: int) -> list[int]:
    """The rank owning each parameter: contiguous runs, about total / N numbers each.

    Parameter i goes to the rank r whose share of the running total, from r / N to
    (r + 1) / N of it, holds the parameter's middle: each rank owns neighbours, and a
    run is off total / N by at most half a parameter at each end.
    """
    world_size = check_int("shard_owners", "world_size", world_size, minimum=1)
    numels = [check_int("shard_owners", f"numels[{i}]", n, minimum=0)
              for i, n in enumerate(numels)]
    total = sum(numels)
    if not total:
        raise ValueError(f"shard_owners: numels={numels} hold no numbers to share out: "
                         "pass each parameter's numel(), at least one of them above 0")
    owners, start = [], 0
    for n in numels:
        owners.append(min(world_size - 1, (2 * start + n) * world_size // (2 * total)))
        start += n
    return owners


def _check_one_dtype(unit: nn.Module, params: list[Tensor]) -> None:
    if len({p.dtype for p in params}) > 1:
        raise ValueError(f"a {type(unit).__name__} to shard needs parameters of one dtype, "
                         f"it has {sorted({str(p.dtype) for p in params})}: make them one "
                         "(model.float())")


def _check_trainable(caller: str, named) -> None:
    """A ValueError naming the first frozen parameter: the schemes here step every one."""
    frozen = next((name for name, p in named if not p.requires_grad), None)
    if frozen is not None:
        raise ValueError(
            f"{caller}: parameter {frozen!r} is frozen (requires_grad=False), and {caller} "
            "would train it: pass only the trainable parameters ([p for p in "
            "model.parameters() if p.requires_grad]), or unfreeze it first")


def _units(model: nn.Module) -> list[nn.Module]:
    if not isinstance(model, nn.Module):
        raise ValueError(f"expected an nn.Module, got a {type(model).__name__}: pass the "
                         "model")
    return [*getattr(model, "blocks", ()), model]


@dataclass
class StateBytes:
    """Bytes one rank keeps between steps: weights, gradients and AdamW's state."""

    parameters: int
    gradients: int
    optimizer: int  # two moments a number, and a float32 step count per tensor

    @property
    def total(self) -> int:
        return self.parameters + self.gradients + self.optimizer


def state_bytes(model: nn.Module, scheme: str, world_size: int, rank: int | None = None
                ) -> StateBytes:
    """The bytes rank ``rank`` keeps training ``model`` (as built) with AdamW, by scheme;
    ``rank=None``: the rank that keeps the most (ZeRO-1's runs differ in size).

    With P parameters, N ranks and fp32 (4 bytes a number): ``"ddp"`` keeps everything,
    4P + 4P + 8P = 16P; ``"zero1"`` (``ShardedAdamW``) the weights and gradients, and the
    moments of its own run of P_r numbers, 8P + 8P_r (about 8P + 8P/N); ``"zero3"``
    (``shard_model``) 1/N of each unit, padded: 16 S summed over the units, S = ceil(P_unit
    / N), about 16P/N. AdamW adds 4 bytes (its step count) per tensor it steps. Each tensor
    counts in its own dtype; a frozen parameter has no gradient and no moments ("ddp"; the
    two sharded schemes refuse it). Not counted: activations; the parameters gathered for
    forward and backward; and the buckets of ``DataParallel`` or DDP, a second copy of the
    gradients kept between steps (4 bytes a float32 parameter more, unless the gradients
    are views of them: see ``DataParallel``).
    """
    if scheme not in SCHEMES:
        raise ValueError(f"scheme={scheme!r} is unknown: choose one of {SCHEMES}")
    world_size = check_int("state_bytes", "world_size", world_size, minimum=1)
    if rank is None:
        return max((state_bytes(model, scheme, world_size, r) for r in range(world_size)),
                   key=lambda kept: kept.total)
    rank = check_int("state_bytes", "rank", rank, minimum=0)
    if rank >= world_size:
        raise ValueError(f"rank={rank} must be below world_size={world_size}: pass a rank "
                         f"from 0 to {world_size - 1}, or None for the most any rank keeps")
    if any("flat_shard" in m._parameters for m in model.modules()):
        raise ValueError("state_bytes counts a model as built, and this one is sharded "
                         "already (shard_model): pass the model before sharding it")
    units = _units(model)
    named = list(units[-1].named_parameters())  # a tied tensor once
    if not named:
        raise ValueError(f"this {type(model).__name__} has no parameters: pass the model")
    if scheme != "ddp":
        _check_trainable(f"state_bytes({scheme!r})", named)
    params = [p for _, p in named]
    trained = [p for p in params if p.requires_grad]
    weights, grads = _nbytes(params), _nbytes(trained)
    if scheme == "ddp":
        return StateBytes(weights, grads, 2 * grads + STEP_BYTES * len(trained))
    if scheme == "zero1":
        owners = shard_owners([p.numel() for p in params], world_size)
        mine = [p for p, owner in zip(params, owners) if owner == rank]
        return StateBytes(weights, grads, 2 * _nbytes(mine) + STEP_BYTES * len(mine))
    shard = sum(-(-sum(p.numel() for p in own) // world_size) * own[0].element_size()
                for own in _own_parameters(units) if own)
    return StateBytes(shard, shard, 2 * shard + STEP_BYTES * len(units))


def _own_parameters(units: list[nn.Module]) -> list[list[Tensor]]:
    """Each unit's parameters that no unit before it holds (the blocks first, the rest of
    the model last), each unit's of one dtype, or a ValueError naming the unit."""
    seen, out = set(), []
    for unit in units:
        own = [p for p in unit.parameters() if id(p) not in seen]
        seen.update(map(id, own))
        _check_one_dtype(unit, own)
        out.append(own)
    return out


def _nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)
