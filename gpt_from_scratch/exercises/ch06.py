"""Checkers for the exercises of Chapter 6 (training): ``check_cross_entropy``."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from .core import _Case, _compare_values, _call, _forbid, _generator, _require_tensor, _run_cases

__all__ = ["check_cross_entropy"]

RULE = ("compute the loss from exp, log, max and gather, without F.cross_entropy, log_softmax, logsumexp "
        "or nll_loss")


def check_cross_entropy(candidate) -> bool:
    """Check ``cross_entropy(logits, targets)`` -> scalar mean loss, for logits (B, T, V) and targets
    (B, T), written without ``F.cross_entropy``, ``log_softmax``, ``logsumexp`` or ``nll_loss`` (calling them fails)."""
    specs = [("logits (2, 3, 5) of size about 1", (2, 3, 5), 1.0, 1),
             ("logits (4, 8, 65) of size about 30 (exp overflows without the max)", (4, 8, 65), 30.0, 2),
             ("logits (1, 1, 3) with one logit 1000 above the rest", (1, 1, 3), 1000.0, 3)]

    def make(shape: tuple[int, int, int], scale: float, seed: int) -> Callable[[], None]:
        def run() -> None:
            g = _generator(seed)
            logits = scale * torch.randn(shape, generator=g)
            targets = torch.randint(shape[-1], shape[:2], generator=g)
            flat_logits, flat_targets = logits.flatten(0, 1).double(), targets.flatten()
            expected = F.cross_entropy(flat_logits, flat_targets).float()
            with _forbid(RULE, (F, "cross_entropy"), (F, "log_softmax"), (F, "nll_loss"),
                         (torch, "log_softmax"), (Tensor, "log_softmax"), (torch, "logsumexp"),
                         (Tensor, "logsumexp")):
                got = _call(candidate, logits.clone(), targets.clone())
            got = _require_tensor(got, expected, "loss", shape_hint="return one number: the mean over B and T, "
                                                                    "a tensor of shape ()")
            picked = flat_logits.gather(-1, flat_targets[:, None])[:, 0]
            log_sum = flat_logits.logsumexp(-1)
            naive = (logits.exp().sum(-1).log() - logits.gather(-1, targets[..., None])[..., 0]).mean()
            _compare_values(got, expected, atol=1e-4, rtol=1e-4, known_mistakes=[
                (naive, "exp overflows for large logits: subtract each row's maximum before exp (the "
                        "log-sum-exp trick), and add nothing back to the target's logit"),
                ((log_sum - picked).sum().float(), "average over the B * T positions (.mean()), do not sum"),
                ((picked - log_sum).mean().float(), "the loss is minus the log-probability: log_sum_exp - "
                                                    "target_logit, not the other way round"),
                ((log_sum - flat_logits.max(-1).values).mean().float(),
                 "pick each position's target logit with gather, not the maximum logit"),
            ], default_hint="subtract each row's max, then loss = log(sum(exp(z))) - z[target], averaged",
                what="loss")
        return run

    cases = [_Case(label, make(shape, scale, seed), "the function is called as cross_entropy(logits, targets) "
                                                    "with logits (B, T, V) and int64 targets (B, T)")
             for label, shape, scale, seed in specs]
    return _run_cases("check_cross_entropy", cases)
