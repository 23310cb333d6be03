"""Checkers for the exercises of Chapter 13 (looking inside): ``check_logit_lens``,
``check_patch_head``."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from .core import _Case, _call, _compare_values, _generator, _Mismatch, _require_tensor, _run_cases

__all__ = ["check_logit_lens", "check_patch_head"]


def _lens(resid, weight, bias, W_U, eps):
    return F.layer_norm(resid, resid.shape[-1:], weight, bias, eps) @ W_U.T


def check_logit_lens(candidate) -> bool:
    """Check ``logit_lens(resid, weight, bias, W_U, eps)`` -> logits (L, B, T, V): residual streams
    (L, B, T, D) through the final LayerNorm (γ ``weight``, β ``bias``, ``eps``) and the output
    layer ``W_U`` (V, D)."""
    specs = [("2 layers, batch 3, 5 positions, D = 8, V = 11", (2, 3, 5), 8, 11, 1e-5, 1),
             ("4 layers, batch 1, 1 position, D = 16, V = 7", (4, 1, 1), 16, 7, 1e-5, 2),
             ("3 layers, small variance and eps = 0.1", (3, 2, 4), 8, 5, 0.1, 3)]

    def make(shape, D: int, V: int, eps: float, seed: int) -> Callable[[], None]:
        def run() -> None:
            g = _generator(seed)
            scale = 0.05 if eps > 0.01 else 1.0  # where eps matters
            resid = scale * torch.randn(*shape, D, generator=g) + torch.randn(D, generator=g)
            weight, bias = 1 + torch.randn(D, generator=g), torch.randn(D, generator=g)
            W_U = torch.randn(V, D, generator=g)
            expected = _lens(resid, weight, bias, W_U, eps)
            got = _call(candidate, resid.clone(), weight.clone(), bias.clone(), W_U.clone(), eps)
            got = _require_tensor(got, expected, "logits", dtype=False,  # none is stated
                                  shape_hint="(L, B, T, D) @ W_U.T gives (L, B, T, V)")
            centred = resid - resid.mean(-1, keepdim=True)
            _compare_values(got, expected, atol=1e-4, rtol=1e-4, known_mistakes=[
                (resid @ W_U.T, "apply the final LayerNorm before the output layer"),
                (_lens(resid, weight, bias, W_U, 0.0), "add eps to the variance inside the square root"),
                (_lens(resid, None, None, W_U, eps), "scale by weight (γ) and shift by bias (β)"),
                ((centred / centred.std(-1, keepdim=True) * weight + bias) @ W_U.T,
                 "LayerNorm divides by the biased standard deviation (unbiased=False) with eps"),
            ], default_hint="F.layer_norm(resid, (D,), weight, bias, eps) @ W_U.T", what="logits")
        return run

    cases = [_Case(label, make(*spec), "resid is (L, B, T, D); W_U is (V, D); eps is a float")
             for label, *spec in specs]
    return _run_cases("check_logit_lens", cases)


def _patch(z_corrupted, z_clean, head, W_O, b_O, heads=None):
    z = z_corrupted.clone()
    for h in ([head] if heads is None else heads):
        z[:, :, h] = z_clean[:, :, h]
    return z.flatten(2) @ W_O.T + b_O


def check_patch_head(candidate) -> bool:
    """Check ``patch_head(z_corrupted, z_clean, head, W_O, b_O)`` -> the attention output (B, T, D)
    of the corrupted run with one head's output ``z`` (B, T, H, d_k) taken from the clean run, through
    ``c_proj`` (weight ``W_O`` (D, D), bias ``b_O`` (D,)); the inputs are left unchanged."""
    specs = [("batch 2, 6 positions, 4 heads of 3, head 1", 2, 6, 4, 3, 1, 1),
             ("batch 1, 3 positions, 2 heads of 5, the last head", 1, 3, 2, 5, 1, 2),
             ("batch 3, 4 positions, 3 heads of 2, head 0", 3, 4, 3, 2, 0, 3)]

    def make(B: int, T: int, H: int, d_k: int, head: int, seed: int) -> Callable[[], None]:
        def run() -> None:
            g = _generator(seed)
            z_corrupted, z_clean = (torch.randn(B, T, H, d_k, generator=g) for _ in range(2))
            W_O, b_O = torch.randn(H * d_k, H * d_k, generator=g), torch.randn(H * d_k, generator=g)
            inputs = {"z_corrupted": z_corrupted, "z_clean": z_clean, "W_O": W_O, "b_O": b_O}
            sent = {name: t.clone() for name, t in inputs.items()}
            expected = _patch(z_corrupted, z_clean, head, W_O, b_O)
            got = _call(candidate, sent["z_corrupted"], sent["z_clean"], head, sent["W_O"],
                        sent["b_O"])
            changed = [name for name in inputs if not torch.equal(sent[name], inputs[name])]
            if changed:
                raise _Mismatch(f"{', '.join(changed)} changed in place",
                                "expected: the inputs left as they were",
                                hint="write into a copy, never an input: z = z_corrupted.clone()")
            got = _require_tensor(got, expected, "attention output", dtype=False,
                                  shape_hint="merge the heads (B, T, H * d_k), then apply c_proj: (B, T, D)")
            others = [h for h in range(H) if h != head]
            _compare_values(got, expected, atol=1e-4, rtol=1e-4, known_mistakes=[
                (_patch(z_corrupted, z_clean, head, W_O, b_O, heads=others),
                 "patch only the head asked for, keep the others corrupted"),
                (_patch(z_corrupted, z_clean, head, W_O, 0 * b_O), "add c_proj's bias b_O"),
                (_patch(z_corrupted, z_clean, head, W_O.T, b_O), "nn.Linear computes x @ W.T + b"),
                (z_corrupted.flatten(2) @ W_O.T + b_O, "replace the head's output by the clean run's"),
            ], default_hint="z = z_corrupted.clone(); z[:, :, head] = z_clean[:, :, head]; "
                            "z.flatten(2) @ W_O.T + b_O", what="attention output")
        return run

    cases = [_Case(label, make(*spec), "z_* are (B, T, H, d_k); head is an int; W_O is (D, D), b_O (D,)")
             for label, *spec in specs]
    return _run_cases("check_patch_head", cases)
