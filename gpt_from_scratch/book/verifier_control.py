"""Chapter 14 — the control for a drift: a model changed exactly as much as a run changed it, in
no chosen direction.

Almost any change to a model moves a 50/50 choice away from one half, so a drift is a finding
only against a control changed as much. ``same_size_change`` gives each weight the run's step
with its sign drawn at random: every weight moves by the amount the run moved it, but the moves
no longer add up to what the run's gradients chose.
"""

from __future__ import annotations

import copy
import numbers

import torch
from torch import nn


def same_size_change(before: nn.Module, after: nn.Module, seed: int = 0) -> nn.Module:
    """A copy of ``before`` whose every weight is ``before + s * (after - before)``, ``s`` a
    random sign per entry (a seeded generator: the same control on every run), in eval mode."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise ValueError(f"same_size_change: seed={seed!r} must be a whole number (the run's "
                         "seed, so that each run has its own control)")
    ours, theirs = dict(before.named_parameters()), dict(after.named_parameters())
    if ours.keys() != theirs.keys() or any(ours[k].shape != theirs[k].shape for k in ours):
        differ = sorted(k for k in ours.keys() | theirs.keys()
                        if k not in ours or k not in theirs or ours[k].shape != theirs[k].shape)
        raise ValueError(f"same_size_change: before and after differ in their weights "
                         f"({', '.join(differ[:3])}): pass the model a run started from and "
                         "the model it ended with, of one architecture")
    g = torch.Generator().manual_seed(int(seed))
    control = copy.deepcopy(before).eval()
    with torch.no_grad():
        for name, p in control.named_parameters():
            step = theirs[name].detach().cpu() - ours[name].detach().cpu()
            sign = torch.randint(0, 2, step.shape, generator=g).to(step.dtype) * 2 - 1
            p.copy_((ours[name].detach().cpu() + sign * step).to(p.device))
    return control
