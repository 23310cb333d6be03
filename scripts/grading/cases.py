"""Private cases: what a case feeds the solution, what it must return, and how the judge
compares.

A course's case file (``<tests>/<chapter>/<exercise>.py``) defines ``cases(g)``, which draws
its inputs from ``g`` (a ``grading.draw.Draw`` keyed by the course secret, so another course
gets other inputs and a few leaked values reveal no other) and returns ``Case``s whose
expected values the judge computes itself; optionally ``criteria`` (the exercise's rules
that no output can show, for the teacher to judge by reading) and ``withheld`` (names of the
set-up this exercise may not use: they are left out of its sandbox).
A case is a small program the sandbox's runner follows: construct (``init``), report fresh
parameters, load a state, then call (``steps``); only plain data goes in (tensors, numbers,
strings, ``Generator``, ``Randn``, ``Pairs``, ``Setup``, and Chapter 15's ``World`` and
``PerRank``) and comes out. A case may run in a world (``Ranks``: the program on several
ranks at once; ``Replicas``: given copies of a model and their optimizers).
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from grading.draw import Draw


@dataclass
class Step:
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    method: str | None = (
        None  # call this method of the constructed object (None: the object)
    )
    attr: str | None = None  # or read this attribute (called when callable)
    # (i, expected): the call made with autograd on for args[i], whose gradient of the
    # returned value (a one-element tensor) must equal ``expected`` (only i goes in)
    gradient: tuple[int, torch.Tensor] | None = None
    unchanged: bool = False  # the args, after the call, must be as sent

    def __post_init__(self):
        if self.gradient is not None:
            i, expected = self.gradient
            if not (
                isinstance(i, int)
                and 0 <= i < len(self.args)
                and isinstance(self.args[i], torch.Tensor)
                and self.args[i].is_floating_point()
                and isinstance(expected, torch.Tensor)
                and expected.shape == self.args[i].shape
            ):
                raise ValueError(
                    f"Step(gradient=({i!r}, …)): the gradient is taken with respect to a "
                    "floating-point tensor of args, by its index, and its expected value "
                    "has that tensor's shape, e.g. gradient=(0, expected_dlogps)"
                )
        if self.unchanged and not all(isinstance(a, PLAIN) for a in self.args):
            kinds = {type(a).__name__ for a in self.args if not isinstance(a, PLAIN)}
            raise ValueError(
                f"Step(unchanged=True) with args of type {', '.join(sorted(kinds))}: only "
                "tensors and plain numbers or strings are compared after the call; pass those"
            )


PLAIN = (torch.Tensor, int, float, str)  # what args are compared as after a call


@dataclass
class Case:
    name: str
    steps: list[Step]
    expected: list = field(
        default_factory=list
    )  # one value per fresh parameter, then per step
    init: Step | None = None  # construct the solution (a class) with these arguments first
    fresh: tuple[str, ...] = ()  # attributes reported right after construction
    state: dict[str, torch.Tensor] = field(default_factory=dict)  # loaded before the steps
    check: Callable[[list], None] | None = (
        None  # instead of ``expected``: raises AssertionError
    )
    atol: float = 1e-5
    rtol: float = 1e-4
    # False where the exercise states no dtype: any dtype, its values compared in float64
    exact_dtype: bool = True
    cpu_seconds: float | None = None  # a tighter CPU limit: the rule this case observes
    behaviour: str = ""  # what the case shows, in the feedback when it fails (no values)
    world: Ranks | Replicas | None = None  # run the program on ranks, or given replicas


@dataclass
class Generator:
    """A case argument: a ``torch.Generator`` with this seed, made in the sandbox."""

    seed: int


@dataclass
class Randn:
    """A case argument: ``torch.randn(shape) * scale``, drawn with a generator seeded with
    ``seed`` in the sandbox before the case's clock starts, so that a large random input
    travels as its seed (Chapter 9's wide layers: 512 MiB). ``tensor()`` draws the same
    values here, for the expected output (another CPU capability may change last bits)."""

    shape: tuple[int, ...]
    seed: int
    scale: float = 1.0

    def __post_init__(self):
        shape = tuple(self.shape)
        if not shape or not all(isinstance(n, int) and n > 0 for n in shape):
            raise ValueError(
                f"Randn(shape={shape!r}): the shape needs one or more positive ints, "
                "e.g. (8192, 4096)"
            )
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(
                f"Randn(seed={self.seed!r}): the seed is an int of 0 or more, e.g. g.seed()"
            )

    def tensor(self) -> torch.Tensor:
        generator = torch.Generator().manual_seed(self.seed)
        return torch.randn(self.shape, generator=generator) * self.scale


@dataclass
class Pairs:
    """A case argument: a dict with pair keys, e.g. BPE merges {(a, b): id}."""

    pairs: dict


@dataclass
class Setup:
    """A case argument: ``name(*args, **kwargs)`` of the assignment's set-up (e.g. GPTConfig)."""

    name: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)


@dataclass
class Ranks:
    """A case's world (``Case.world``, Chapter 15): its program runs on ``world_size``
    ranks at once, a thread each in the case's process (``grading.ranks``), its ``World``
    and ``PerRank`` arguments each rank's own. The values are each rank's, then the world's
    record: ``ranks.read(got)`` splits them."""

    world_size: int

    def __post_init__(self):
        if isinstance(self.world_size, bool) or not isinstance(self.world_size, int) or (
                not 2 <= self.world_size <= 8):
            raise ValueError(f"Ranks(world_size={self.world_size!r}): ranks are 2 to 8 "
                             "threads of the case's process (its process limit is 32)")


@dataclass
class Replicas:
    """A case's world (Chapter 15): ``n`` copies of the set-up model ``model`` (a
    ``Setup``), ``state`` loaded into each, each with ``optimizer`` (a ``Setup`` given the
    copy's parameters first), passed as ``World("replicas")`` and ``World("optimizers")``.
    The values end with the record [per step, [the token ids each replica's forward
    received, the steps each optimizer took]; each replica's state after the steps,
    ``state``'s keys flattened in order]."""

    n: int
    model: Setup
    state: dict[str, torch.Tensor]
    optimizer: Setup


GIVEN = ("rank", "send", "recv", "all_gather", "replicas", "optimizers")


@dataclass
class World:
    """A case argument: what the case's world gives: on ranks the rank's own ``rank``,
    ``send``, ``recv`` or ``all_gather``; on replicas the ``replicas`` or ``optimizers``."""

    name: str

    def __post_init__(self):
        if self.name not in GIVEN:
            raise ValueError(f"World({self.name!r}): a world gives {', '.join(GIVEN)}")


@dataclass
class PerRank:
    """A case argument on ranks: rank r gets ``values[r]``."""

    values: list


def load_case_file(path: Path):
    spec = importlib.util.spec_from_file_location(f"course_cases_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not callable(getattr(module, "cases", None)):
        raise SystemExit(
            f"{path}: a case file defines cases(g) returning a list of Case "
            "(see scripts/private_tests/README.md)"
        )
    return module


def exercise_cases(path: Path, secret: bytes, chapter: str, exercise: str) -> list[Case]:
    return load_case_file(path).cases(Draw(secret, f"{chapter}/{exercise}"))


def encode_arg(value, key: str, tensors: dict):
    """A case argument as JSON, its tensors into ``tensors``."""
    if isinstance(value, torch.Tensor):
        tensors[key] = value.contiguous()
        return {"$tensor": key}
    if isinstance(value, Randn):
        return {"$randn": key, "shape": list(value.shape), "seed": value.seed,
                "scale": float(value.scale)}
    if isinstance(value, Generator):
        return {"$generator": value.seed}
    if isinstance(value, Pairs):
        return {"$pairs": [[a, b, c] for (a, b), c in value.pairs.items()]}
    if isinstance(value, World):
        return {"$world": value.name}
    if isinstance(value, PerRank):
        return {"$per_rank": encode_arg(list(value.values), key + ".r", tensors)}
    if isinstance(value, Ranks):
        return {"ranks": value.world_size}
    if isinstance(value, Replicas):
        return {"replicas": value.n, "model": encode_arg(value.model, key + ".m", tensors),
                "state": encode_arg(value.state, key + ".s", tensors),
                "optimizer": encode_arg(value.optimizer, key + ".o", tensors)}
    if isinstance(value, Setup):
        return {
            "$setup": value.name,
            "args": encode_arg(list(value.args), key + ".a", tensors),
            "kwargs": encode_arg(value.kwargs, key + ".k", tensors),
        }
    if isinstance(value, (list, tuple)):
        return [encode_arg(v, f"{key}.{i}", tensors) for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {k: encode_arg(v, f"{key}.{k}", tensors) for k, v in value.items()}
    json.dumps(value)  # a plain value, or a clear TypeError naming it
    return value


def program(case: Case, key: str, tensors: dict) -> dict:
    """What the runner needs of a case: its program, never its name, limits or expected
    values (nothing in the sandbox tells one case from another but its inputs)."""

    def step(s: Step, k: str) -> dict:
        return {
            "args": encode_arg(list(s.args), k + ".a", tensors),
            "kwargs": encode_arg(s.kwargs, k + ".k", tensors),
            "method": s.method,
            "attr": s.attr,
            "grad": None if s.gradient is None else s.gradient[0],  # never the expected
            "unchanged": s.unchanged,
        }

    state = {}
    for name, value in case.state.items():
        tensors[f"{key}.state.{name}"] = value.contiguous()
        state[name] = f"{key}.state.{name}"
    return {
        "init": step(case.init, key + ".init") if case.init else None,
        "fresh": list(case.fresh),
        "state": state,
        "steps": [step(s, f"{key}.{i}") for i, s in enumerate(case.steps)],
        "world": encode_arg(case.world, key + ".world", tensors) if case.world else None,
    }
