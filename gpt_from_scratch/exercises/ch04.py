"""Checkers for the exercises of Chapter 4 (attention): ``check_causal_mask`` (without ``tril``),
``check_scaled_dot_product_attention`` (with ``einsum``) and ``check_multi_head_attention`` (a loop over heads)."""

from __future__ import annotations

import ast
import inspect
import math
import textwrap
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .. import attention as package_attention
from .core import (FAIL_MARK, _Case, _Mismatch, _call, _compare_values, _describe, _forbid, _generator, _print,
                   _require_tensor, _run_cases)

__all__ = ["check_causal_mask", "check_scaled_dot_product_attention", "check_multi_head_attention"]


NO_TRIL = "build the mask from two torch.arange vectors and a comparison, without tril, triu or causal_mask"
EINSUM = "compute both matrix products with torch.einsum (no @, matmul, bmm or a library attention)"


def check_causal_mask(candidate, allow_tril: bool = False) -> bool:
    """Check ``causal_mask(T)`` -> bool Tensor (T, T), True = may attend (on and below the diagonal).

    Chapter 4's exercise builds it without ``tril``: unless ``allow_tril``, calling ``tril``, ``triu``
    or the package's ``causal_mask`` fails the check."""
    forbidden = [] if allow_tril else [(torch, "tril"), (torch, "triu"), (Tensor, "tril"), (Tensor, "triu"),
                                       (package_attention, "causal_mask")]

    build = ("torch.ones(T, T, dtype=torch.bool).tril()" if allow_tril else
             "compare a column of query positions with a row of key positions (two torch.arange(T)): "
             "key j <= query i; a comparison already gives a bool tensor")

    def make(T: int) -> Callable[[], None]:
        def run() -> None:
            ones = torch.ones(T, T, dtype=torch.bool)
            expected = ones.tril()
            with _forbid(NO_TRIL, *forbidden):
                got = _call(candidate, T)
            got = _require_tensor(got, expected, "mask",
                                  shape_hint="one row per query, one column per key: shape (T, T)",
                                  dtype_hint="return a boolean mask (True = may attend), e.g. " + build)
            if torch.equal(got, expected):
                return
            if torch.equal(got, ones.triu()):
                hint = ("the mask is on the wrong side: query i may attend to keys j <= i, the lower "
                        "triangle: " + ("use .tril(), not .triu()" if allow_tril else
                                        "compare key <= query, not key >= query"))
            elif torch.equal(got, ~expected):
                hint = "the mask is inverted: True means *may attend* (the convention of F.scaled_dot_product_attention)"
            elif torch.equal(got, ones.tril(-1)):
                hint = "the diagonal must be True: every token may attend to itself"
            else:
                hint = "True on and below the diagonal: " + build
            raise _Mismatch(f"expected {_mask_rows(expected)}", f"got      {_mask_rows(got)}", hint=hint)
        return run

    cases = [_Case(f"T={T}", make(T), "the function is called as causal_mask(T) with an int T")
             for T in (4, 1, 7)]
    return _run_cases("check_causal_mask", cases)


def _mask_rows(mask: Tensor) -> str:
    """A small boolean matrix as rows of 1s and 0s: '1000 1100 ...' (first 4 rows)."""
    rows = ["".join("1" if v else "0" for v in row.tolist()) for row in mask[:4]]
    return " ".join(rows) + (" …" if mask.shape[0] > 4 else "")


def _attention_variants(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor, list]:
    """Reference (output, weights) in float64 and the usual mistakes as (weights, output, hint)."""
    d_k = q.size(-1)

    def attend(scores: Tensor, dim: int = -1, m: Tensor | None = mask) -> tuple[Tensor, Tensor]:
        if m is not None:
            scores = scores.masked_fill(~m, float("-inf"))
        weights = torch.softmax(scores, dim=dim)
        return weights @ v, weights

    raw = q @ k.transpose(-2, -1)  # (..., T_q, T_k)
    out, weights = attend(raw / math.sqrt(d_k))
    mistakes = [
        (*attend(raw), "scale the scores by 1/sqrt(d_k) before the softmax: q @ k.transpose(-2, -1) / sqrt(d_k)"),
        (*attend(raw / d_k), "scale by 1/sqrt(d_k), not 1/d_k"),
        (*attend(raw / math.sqrt(d_k), dim=-2), "take the softmax over the keys, the last dimension (dim=-1): "
                                                "each query's weights sum to 1"),
    ]
    if mask is not None:
        mistakes += [
            (*attend(raw / math.sqrt(d_k), m=None), "apply the mask before the softmax: "
                                                    "scores.masked_fill(~mask, float('-inf'))"),
            (*attend(raw / math.sqrt(d_k), m=~mask), "the mask is used inverted: True means *may attend*, so fill "
                                                     "where the mask is False: masked_fill(~mask, float('-inf'))"),
        ]
    return out, weights, mistakes


def check_scaled_dot_product_attention(candidate, require_einsum: bool = True) -> bool:
    """Check ``attention(q, k, v, mask=None)`` -> ``(output, weights)`` for tensors of shape (..., T, d).

    ``mask`` is boolean, True = may attend, broadcastable to (..., T_q, T_k); ``weights`` is the softmax
    (..., T_q, T_k) and ``output = weights @ v``. The output is compared with
    ``torch.nn.functional.scaled_dot_product_attention``. Chapter 4's exercise computes both products
    with ``torch.einsum``: unless ``require_einsum`` is False, ``@``, ``matmul``, ``bmm`` and library
    attentions fail the check.
    """
    forbidden = [] if not require_einsum else [
        (torch, "matmul"), (torch, "bmm"), (Tensor, "__matmul__"), (Tensor, "matmul"), (Tensor, "bmm"),
        (F, "scaled_dot_product_attention"), (package_attention, "scaled_dot_product_attention")]
    specs = [
        ("q, k, v of shape (2, 5, 8), no mask", (2, 5, 8), (2, 5, 8), None, 1),
        ("q, k, v of shape (2, 3, 6, 4) (B, H, T, d_k), causal mask (6, 6)", (2, 3, 6, 4), (2, 3, 6, 4), "causal", 2),
        ("q of shape (1, 2, 3, 8), k and v of shape (1, 2, 5, 8) (3 new queries, 5 keys), mask (3, 5)",
         (1, 2, 3, 8), (1, 2, 5, 8), "past", 3),
    ]

    def make(q_shape, kv_shape, mask_kind, seed: int) -> Callable[[], None]:
        def run() -> None:
            g = _generator(seed)
            q, k, v = (torch.randn(s, generator=g) for s in (q_shape, kv_shape, kv_shape))
            T_q, T_k = q_shape[-2], kv_shape[-2]
            mask = None if mask_kind is None else torch.ones(T_q, T_k, dtype=torch.bool).tril(T_k - T_q)
            out64, weights64, mistakes = _attention_variants(q.double(), k.double(), v.double(), mask)
            expected_out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # PyTorch's own kernel
            with _forbid(EINSUM, *forbidden):
                result = _call(candidate, q.clone(), k.clone(), v.clone(), mask)
            if not (isinstance(result, (tuple, list)) and len(result) == 2):
                raise _Mismatch(f"expected a pair (output, weights), got {_describe(result)}",
                                hint="return both: return output, weights")
            weights = _require_tensor(result[1], weights64.float(), "weights",
                                      shape_hint="weights has one row per query and one column per key: (..., T_q, T_k)")
            _compare_values(weights, weights64, atol=1e-5, rtol=1e-4,
                            known_mistakes=[(w, hint) for _, w, hint in mistakes],
                            default_hint="weights = softmax(q @ k.transpose(-2, -1) / sqrt(d_k), dim=-1), "
                                         "masked with -inf where the mask is False", what="weights")
            output = _require_tensor(result[0], expected_out, "output",
                                     shape_hint="the output has one row per query: (..., T_q, d_v)")
            _compare_values(output, expected_out, atol=1e-5, rtol=1e-4,
                            known_mistakes=[(o, hint) for o, _, hint in mistakes],
                            default_hint="output = weights @ v", what="output")
        return run

    cases = [_Case(label, make(qs, kvs, kind, seed),
                   "the function is called as attention(q, k, v, mask) with mask a bool tensor or None; "
                   "use k.transpose(-2, -1), not k.T, for batched tensors")
             for label, qs, kvs, kind, seed in specs]
    return _run_cases("check_scaled_dot_product_attention", cases)


def _mha_reference(x: Tensor, w_attn: Tensor, b_attn: Tensor, w_proj: Tensor, b_proj: Tensor, H: int,
                   split_wrong: bool = False, merge_wrong: bool = False, causal: bool = True,
                   scale: bool = True) -> Tensor:
    """GPT-2 attention on x (B, T, D) in float64 with F.scaled_dot_product_attention; flags build mistakes."""
    B, T, D = x.shape
    d_k = D // H
    q, k, v = F.linear(x, w_attn, b_attn).split(D, dim=-1)  # 3 x (B, T, D)

    def heads(t: Tensor) -> Tensor:
        if split_wrong:
            return t.reshape(B, H, T, d_k)  # the classic slip: a reshape is not a transpose
        return t.view(B, T, H, d_k).transpose(1, 2)  # (B, H, T, d_k)

    q, k, v = heads(q), heads(k), heads(v)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=None if scale else 1.0)  # (B, H, T, d_k)
    y = y.reshape(B, T, D) if merge_wrong else y.transpose(1, 2).reshape(B, T, D)  # (B, T, D)
    return F.linear(y, w_proj, b_proj)


LOOP = "run the heads one at a time, in a Python loop over the heads"


def _loops(method) -> bool | None:
    """Whether ``method``'s source computes attention inside a loop (a ``for``, ``while`` or comprehension
    whose body calls a softmax, an attention, ``einsum`` or a matrix product); None when the source is
    unknown. A comprehension that only reshapes q, k and v is not a loop over the heads."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(method)))
    except (OSError, TypeError, SyntaxError):
        return None
    loops = (ast.For, ast.While, ast.ListComp, ast.GeneratorExp)
    words = ("softmax", "attention", "einsum", "matmul", "bmm")

    def attends(node: ast.AST) -> bool:
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            return True
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            return any(word in name for word in words)
        return False

    return any(isinstance(loop, loops) and any(attends(n) for n in ast.walk(loop)) for loop in ast.walk(tree))


def check_multi_head_attention(candidate, require_loop: bool = True) -> bool:
    """Check a causal multi-head self-attention **class**, built as ``MHA(d_model, n_heads)`` and called
    on x (B, T, D), returning y (B, T, D) (a tuple's first element is taken as y).

    Chapter 4's exercise runs the heads in a Python loop: unless ``require_loop`` is False, a
    ``forward`` without a loop fails. It needs GPT-2's layout, like the package's ``MultiHeadAttention``: ``c_attn = nn.Linear(D, 3 * D)``
    producing q, k, v concatenated in that order, and ``c_proj = nn.Linear(D, D)``. The checker copies
    its own random weights into those two layers, so results are comparable.
    """
    if not (isinstance(candidate, type) and issubclass(candidate, nn.Module)):
        _print(f"{FAIL_MARK} check_multi_head_attention: expected a module class, got {_describe(candidate)}.",
               "   hint: pass the class itself (MyAttention), not an instance or a function; "
               "it is built as MyAttention(d_model, n_heads)")
        return False
    if issubclass(candidate, package_attention.MultiHeadAttention):
        _print(f"{FAIL_MARK} check_multi_head_attention: your class is the package's MultiHeadAttention.",
               "   hint: write your own nn.Module with c_attn and c_proj")
        return False
    specs = [(2, 5, 16, 4, 1), (1, 7, 12, 3, 2), (3, 4, 8, 2, 3)]

    def make(B: int, T: int, D: int, H: int, seed: int) -> Callable[[], None]:
        def run() -> None:
            g = _generator(seed)
            x = torch.randn(B, T, D, generator=g)
            w_attn = torch.randn(3 * D, D, generator=g) / math.sqrt(D)
            b_attn = 0.1 * torch.randn(3 * D, generator=g)
            w_proj = torch.randn(D, D, generator=g) / math.sqrt(D)
            b_proj = 0.1 * torch.randn(D, generator=g)
            module = _call(candidate, D, H)
            for name, weight, bias in (("c_attn", w_attn, b_attn), ("c_proj", w_proj, b_proj)):
                layer = getattr(module, name, None)
                layer_weight = getattr(layer, "weight", None)
                layer_bias = getattr(layer, "bias", None)
                if not isinstance(layer_weight, Tensor) or layer_weight.shape != weight.shape:
                    raise _Mismatch(f"expected {name}.weight of shape {tuple(weight.shape)}, got {_describe(layer_weight)}",
                                    hint="name the layers like GPT-2: self.c_attn = nn.Linear(d_model, 3 * d_model) "
                                         "and self.c_proj = nn.Linear(d_model, d_model)")
                if not isinstance(layer_bias, Tensor):
                    raise _Mismatch(f"{name} has no bias", hint="GPT-2's projections have biases: nn.Linear(..., bias=True)")
                with torch.no_grad():
                    layer_weight.copy_(weight)
                    layer_bias.copy_(bias)
            module.eval()
            with _forbid("write the attention yourself, not with the package's MultiHeadAttention",
                         (package_attention.MultiHeadAttention, "forward")):
                out = _call(module, x.clone())
            if isinstance(out, (tuple, list)) and out:
                out = out[0]
            args = [t.double() for t in (x, w_attn, b_attn, w_proj, b_proj)]
            expected = _mha_reference(*args, H)
            got = _require_tensor(out, expected.float(), "y", shape_hint="the output has the shape of x: (B, T, D)")
            mistakes = [
                (_mha_reference(*args, H, split_wrong=True),
                 "split the heads with .view(B, T, H, d_k).transpose(1, 2); a reshape straight to (B, H, T, d_k) "
                 "mixes positions and features"),
                (_mha_reference(*args, H, merge_wrong=True),
                 "merge the heads with .transpose(1, 2).contiguous().view(B, T, D): (B, H, T, d_k) must become "
                 "(B, T, H, d_k) first"),
                (_mha_reference(*args, H, causal=False), "the attention must be causal: mask the future keys "
                                                         "(causal_mask(T), or is_causal=True)"),
                (_mha_reference(*args, H, scale=False), "scale the scores by 1/sqrt(d_k), with d_k = D / H"),
            ]
            _compare_values(got, expected, atol=1e-4, rtol=1e-4, known_mistakes=mistakes,
                            default_hint="q, k, v = c_attn(x).split(D, dim=2); split heads; causal attention; "
                                         "merge heads; c_proj", what="y")
        return run

    cases = [_Case(f"B={B}, T={T}, D={D}, H={H}", make(B, T, D, H, seed),
                   "the class is built as MHA(d_model, n_heads) and called as module(x), x of shape (B, T, D)")
             for B, T, D, H, seed in specs]
    if require_loop:  # after the values, so that an unfinished stub says "not implemented yet"

        def loop() -> None:
            if _loops(candidate.forward) is False:
                raise _Mismatch("forward has no loop over the heads",
                                hint=f"{LOOP}: for h in range(n_heads), take that head's d_k columns of q, k and v")
        cases.append(_Case("the source of forward", loop))
    return _run_cases("check_multi_head_attention", cases)
