"""The checks of Chapters 1b, 4 (stated constraints), 5, 6, 7 (min-p, top-p without sorting), 8 and 9:
each passes a correct solution and catches at least three typical mistakes, naming them."""

from __future__ import annotations

import math
import threading
from functools import partial

import numpy as np
import pytest
import regex
import torch
from torch import nn

from gpt_from_scratch import exercises as ex
from gpt_from_scratch.attention import MultiHeadAttention, scaled_dot_product_attention
from gpt_from_scratch.layernorm import LayerNorm
from gpt_from_scratch.model import Block, FeedForward
from gpt_from_scratch.tokenizer import GPT2_PATTERN


def outcome(check, candidate, capsys) -> tuple[bool, str]:
    result = check(candidate)
    out = capsys.readouterr().out
    assert isinstance(result, bool) and "Traceback" not in out
    return result, out


def passes(check, candidate, capsys) -> None:
    result, out = outcome(check, candidate, capsys)
    assert result is True and out.startswith(ex.PASS_MARK), out


def fails(check, candidate, capsys, *fragments: str) -> None:
    result, out = outcome(check, candidate, capsys)
    assert result is False and out.startswith(ex.FAIL_MARK), out
    for fragment in fragments:
        assert fragment in out, f"{fragment!r} not in:\n{out}"


# ---------------------------------------------------------------------------------------------- 1b
def bpe_encode(text, merges, pick=min, split=True, start=lambda chunk: list(chunk.encode("utf-8"))):
    out = []
    for chunk in regex.findall(GPT2_PATTERN, text) if split else [text]:
        ids = start(chunk)
        while len(ids) >= 2:
            known = [pair for pair in zip(ids, ids[1:]) if pair in merges]
            if not known:
                break
            best = pick(known, key=merges.get)
            merged, i = [], 0
            while i < len(ids):
                if i + 1 < len(ids) and (ids[i], ids[i + 1]) == best:
                    merged.append(merges[best])
                    i += 2
                else:
                    merged.append(ids[i])
                    i += 1
            ids = merged
        out.extend(ids)
    return out


def test_bpe_encode(capsys):
    passes(ex.check_bpe_encode, bpe_encode, capsys)
    fails(ex.check_bpe_encode, lambda t, m: list(t.encode("utf-8")), capsys, "apply the merges")
    fails(ex.check_bpe_encode, lambda t, m: bpe_encode(t, m)[:-1], capsys, "case 1 of 4")  # lost the last id
    fails(ex.check_bpe_encode, lambda t, m: bpe_encode(t, m, pick=max), capsys, "not the latest")
    fails(ex.check_bpe_encode, lambda t, m: bpe_encode(t, m, start=lambda c: [ord(x) for x in c]), capsys,
          "case 2 of 4", "not from ord()")  # accents and Japanese: ord() is not the bytes


# ---------------------------------------------------------------------------------------------- 4
def test_causal_mask_without_tril(capsys):
    passes(ex.check_causal_mask, lambda T: torch.arange(T)[None, :] <= torch.arange(T)[:, None], capsys)
    fails(ex.check_causal_mask, lambda T: torch.ones(T, T, dtype=torch.bool).tril(), capsys, "Tensor.tril")
    fails(ex.check_causal_mask, lambda T: torch.arange(T)[None, :] < torch.arange(T)[:, None], capsys,
          "diagonal must be True")
    fails(ex.check_causal_mask, lambda T: torch.arange(T)[None, :] >= torch.arange(T)[:, None], capsys,
          "wrong side")


def einsum_attention(q, k, v, mask=None, scale=True):
    scores = torch.einsum("...qd,...kd->...qk", q, k) / (math.sqrt(q.size(-1)) if scale else 1.0)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return torch.einsum("...qk,...kd->...qd", weights, v), weights


def test_attention_with_einsum(capsys):
    passes(ex.check_scaled_dot_product_attention, einsum_attention, capsys)
    fails(ex.check_scaled_dot_product_attention, scaled_dot_product_attention, capsys, "einsum")
    fails(ex.check_scaled_dot_product_attention, lambda q, k, v, mask=None: einsum_attention(q, k, v, mask,
                                                                                             scale=False),
          capsys, "sqrt(d_k)")
    fails(ex.check_scaled_dot_product_attention, lambda q, k, v, mask=None: einsum_attention(q, k, v), capsys,
          "case 2 of 3")  # the mask ignored


class Looped(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.c_attn, self.c_proj = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)

    def forward(self, x):
        D = x.shape[-1]
        q, k, v = self.c_attn(x).split(D, dim=2)
        mask = torch.arange(x.shape[1])[None, :] <= torch.arange(x.shape[1])[:, None]
        heads = []
        for h in range(self.n_heads):
            cols = slice(h * self.d_head, (h + 1) * self.d_head)
            heads.append(scaled_dot_product_attention(q[..., cols], k[..., cols], v[..., cols], mask)[0])
        return self.c_proj(torch.cat(heads, dim=-1))


class Vectorized(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.attention = MultiHeadAttention(d_model, n_heads)
        self.c_attn, self.c_proj = self.attention.c_attn, self.attention.c_proj

    def forward(self, x):
        return self.attention(x)


class PackageSubclass(MultiHeadAttention):
    pass


def test_multi_head_attention_loops_over_heads(capsys):
    passes(ex.check_multi_head_attention, Looped, capsys)
    fails(ex.check_multi_head_attention, Vectorized, capsys, "package's MultiHeadAttention")
    fails(ex.check_multi_head_attention, PackageSubclass, capsys, "package's MultiHeadAttention")


# ---------------------------------------------------------------------------------------------- 5
def parallel_block(combine):
    class ParallelBlock(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.ln_1 = LayerNorm(config.d_model)
            self.attn = MultiHeadAttention(config.d_model, config.n_heads)
            self.mlp = FeedForward(config)

        def forward(self, x):
            return combine(self, x)
    return ParallelBlock


def sequential(self, x):
    x = x + self.attn(self.ln_1(x))
    return x + self.mlp(self.ln_1(x))


def test_parallel_block(capsys):
    passes(ex.check_parallel_block, parallel_block(lambda m, x: x + m.attn(m.ln_1(x)) + m.mlp(m.ln_1(x))), capsys)
    fails(ex.check_parallel_block, parallel_block(lambda m, x: m.attn(m.ln_1(x)) + m.mlp(m.ln_1(x))), capsys,
          "keep the residual stream")
    fails(ex.check_parallel_block, parallel_block(lambda m, x: x + m.attn(m.ln_1(x)) + m.mlp(x)), capsys,
          "mlp(ln_1(x))")
    fails(ex.check_parallel_block, parallel_block(sequential), capsys, "case 1 of 2")
    fails(ex.check_parallel_block, Block, capsys, "package's sequential Block")


# ---------------------------------------------------------------------------------------------- 6
def cross_entropy(logits, targets, stable=True, reduce=torch.mean):
    z = logits - logits.max(dim=-1, keepdim=True).values if stable else logits
    return reduce(torch.log(torch.exp(z).sum(dim=-1)) - z.gather(-1, targets[..., None])[..., 0])


def test_cross_entropy(capsys):
    passes(ex.check_cross_entropy, cross_entropy, capsys)
    fails(ex.check_cross_entropy, lambda l, t: cross_entropy(l, t, stable=False), capsys, "subtract each row's")
    fails(ex.check_cross_entropy, lambda l, t: cross_entropy(l, t, reduce=torch.sum), capsys, "do not sum")
    fails(ex.check_cross_entropy, lambda l, t: -cross_entropy(l, t), capsys, "minus the log-probability")
    fails(ex.check_cross_entropy, lambda l, t: torch.nn.functional.cross_entropy(l.flatten(0, 1), t.flatten()),
          capsys, "rules out")
    fails(ex.check_cross_entropy, lambda l, t: -l.log_softmax(-1).gather(-1, t[..., None]).mean(), capsys,
          "rules out")


# ---------------------------------------------------------------------------------------------- 7
def min_p(logits, m, probabilities=True, relative=True):
    p = torch.softmax(logits, dim=-1) if probabilities else logits
    threshold = m * p.max(dim=-1, keepdim=True).values if relative else m
    return logits.masked_fill(p < threshold, float("-inf"))


def test_min_p_filter(capsys):
    passes(ex.check_min_p_filter, min_p, capsys)
    fails(ex.check_min_p_filter, lambda l, m: min_p(l, m, probabilities=False), capsys, "not the logits")
    fails(ex.check_min_p_filter, lambda l, m: min_p(l, m, relative=False), capsys, "relative")
    fails(ex.check_min_p_filter, lambda l, m: torch.softmax(min_p(l, m), -1), capsys, "not probabilities")


def top_p_unsorted(logits, p, include_self=False):
    probs = torch.softmax(logits, dim=-1)  # (..., V)
    above = probs[..., None, :] > probs[..., :, None]  # (..., V, V): [i, j] = token j ranks above token i
    mass_above = (above * probs[..., None, :]).sum(-1)  # (..., V)
    remove = (mass_above + probs >= p) if include_self else mass_above >= p
    return logits.masked_fill(remove, float("-inf"))


def test_top_p_without_sorting(capsys):
    check = lambda candidate: ex.check_top_p_filter(candidate, allow_sort=False)  # noqa: E731
    passes(check, top_p_unsorted, capsys)
    fails(check, lambda l, p: l.masked_fill(torch.softmax(l, -1).cumsum(-1) > p, float("-inf")), capsys,
          "case 1 of 4")  # a cumulative sum in vocabulary order, not in order of probability
    fails(check, lambda l, p: top_p_unsorted(l, p, include_self=True), capsys, "keep the token that crosses p")
    from gpt_from_scratch.generate import top_p_filter
    fails(check, top_p_filter, capsys, "rules out")  # sorts


# ---------------------------------------------------------------------------------------------- 8
def offset_scores(maps, k, swap=False, reduce=torch.mean):
    A = torch.stack(maps)  # (L, B, H, T, T)
    t = torch.arange(k, A.shape[-1])
    picked = A[..., t - k, t] if swap else A[..., t, t - k]  # (L, B, H, T - k)
    return reduce(picked, dim=-1).mean(dim=1)


def test_offset_scores(capsys):
    passes(ex.check_offset_scores, offset_scores, capsys)
    fails(ex.check_offset_scores, lambda maps, k: offset_scores(maps, k, swap=True), capsys, "not A[..., t - k, t]")
    fails(ex.check_offset_scores, lambda maps, k: offset_scores(maps, k, reduce=torch.sum), capsys, "do not sum")
    fails(ex.check_offset_scores, lambda maps, k: offset_scores(maps, 1), capsys, "case 2 of 3")
    fails(ex.check_offset_scores, lambda maps, k: torch.stack(maps).diagonal(-k, -2, -1).mean(dim=(1, 3)), capsys,
          "rules out")


# ---------------------------------------------------------------------------------------------- 9
def lora_forward(x, weight, bias, A, B, scaling):
    return x @ weight.T + bias + (x @ A.T @ B.T) * scaling


def test_lora_forward(capsys):
    passes(ex.check_lora_forward, lora_forward, capsys)
    fails(ex.check_lora_forward, lambda x, w, b, A, B, s: lora_forward(x, w, b, A, B, 1.0), capsys,
          "multiply the update by scaling")
    fails(ex.check_lora_forward, lambda x, w, b, A, B, s: lora_forward(x, w, 0 * b, A, B, s), capsys, "bias")
    fails(ex.check_lora_forward, lambda x, w, b, A, B, s: lora_forward(x, w, b, A, B, s * s), capsys,
          "scale the update once")
    fails(ex.check_lora_forward, lambda x, w, b, A, B, s: x @ w.T + b + (x @ B @ A) * s, capsys,
          "x @ A.T is (..., r)")


# ---------------------------------------------------------------------------------------------- 10
class RMSNormModule(nn.Module):
    def __init__(self, D, eps=1e-5, centre=False, eps_outside=False):
        super().__init__()
        self.eps, self.centre, self.eps_outside = eps, centre, eps_outside
        self.weight = nn.Parameter(torch.ones(D))

    def forward(self, x):
        if self.centre:
            x = x - x.mean(-1, keepdim=True)
        ms = x.pow(2).mean(-1, keepdim=True)
        scale = 1 / (ms.sqrt() + self.eps) if self.eps_outside else torch.rsqrt(ms + self.eps)
        return x * scale * self.weight


def test_rms_norm(capsys):
    passes(ex.check_rms_norm, RMSNormModule, capsys)
    passes(ex.check_rms_norm, lambda x, w, eps: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w, capsys)
    fails(ex.check_rms_norm, lambda x, w, eps: torch.nn.functional.rms_norm(x, (x.size(-1),), w, eps), capsys,
          "rules out")
    fails(ex.check_rms_norm, lambda x, w, eps: torch.nn.functional.layer_norm(x, (x.size(-1),), w, None, eps),
          capsys, "does not subtract the mean")
    fails(ex.check_rms_norm, lambda x, w, eps: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps), capsys,
          "learned scale")
    fails(ex.check_rms_norm, lambda x, w, eps: x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps) * w, capsys,
          "not their sum")

    class Outside(RMSNormModule):
        def __init__(self, D, eps=1e-5):
            super().__init__(D, eps, eps_outside=True)

    fails(ex.check_rms_norm, Outside, capsys, "inside the square root")


def rope_interleaved(x, positions, theta=10000.0, sign=1.0, half_split=False):
    d = x.size(-1)
    angles = sign * positions.float()[:, None] * theta ** (-torch.arange(0, d, 2).float() / d)
    cos, sin = angles.cos(), angles.sin()
    if half_split:
        a, b = x[..., : d // 2], x[..., d // 2:]
        return torch.cat([a * cos - b * sin, a * sin + b * cos], -1)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * cos - b * sin, a * sin + b * cos], -1).flatten(-2)


def test_rope_interleaved(capsys):
    passes(ex.check_rope_interleaved, rope_interleaved, capsys)
    fails(ex.check_rope_interleaved, lambda x, p, t: rope_interleaved(x, p, t, half_split=True), capsys,
          "pair neighbours")
    fails(ex.check_rope_interleaved, lambda x, p, t: rope_interleaved(x, p, t, sign=-1.0), capsys, "other way")
    fails(ex.check_rope_interleaved, lambda x, p, t: rope_interleaved(x, torch.arange(len(p)), t), capsys,
          "positions you are given")


def test_repeat_kv(capsys):
    def by_expand(x, n):
        B, H, T, d = x.shape
        return x[:, :, None].expand(B, H, n, T, d).reshape(B, H * n, T, d)

    passes(ex.check_repeat_kv, by_expand, capsys)
    passes(ex.check_repeat_kv, lambda x, n: x[:, torch.arange(x.size(1) * n) // n], capsys)
    fails(ex.check_repeat_kv, lambda x, n: x.repeat(1, n, 1, 1), capsys, "tiles the whole group")
    fails(ex.check_repeat_kv, lambda x, n: x.repeat_interleave(n, dim=1), capsys, "rules out")
    fails(ex.check_repeat_kv, lambda x, n: x.repeat_interleave(n, dim=2), capsys, "rules out")


@pytest.mark.parametrize("check", [ex.check_bpe_encode, ex.check_cross_entropy, ex.check_offset_scores,
                                   ex.check_lora_forward])
def test_exit_and_endless_loops_are_one_line_reports(check, capsys, monkeypatch):
    monkeypatch.setattr(ex.core, "CASE_SECONDS", 0.5)

    def forever(*args):
        while True:
            pass

    fails(check, forever, capsys, "did not return within")
    fails(check, lambda *args: exit(1), capsys, "called exit(1)")


# ---------------------------------------------------------------------------------------------- 3
class LayerNormModule(nn.Module):
    def __init__(self, D, eps=1e-5, start=torch.ones, library=False):
        super().__init__()
        self.eps, self.library = eps, library
        self.weight, self.bias = nn.Parameter(start(D)), nn.Parameter(torch.zeros(D))

    def forward(self, x):
        if self.library:
            return torch.nn.functional.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)
        centred = x - x.mean(-1, keepdim=True)
        return centred / torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight + self.bias


def test_layer_norm_module(capsys):
    passes(ex.check_layer_norm, LayerNormModule, capsys)
    fails(ex.check_layer_norm, lambda D, eps: LayerNormModule(D, eps, start=torch.randn), capsys)  # not a class
    Random = type("Random", (LayerNormModule,), {"__init__": lambda self, D, eps=1e-5:
                                                 LayerNormModule.__init__(self, D, eps, start=torch.randn)})
    fails(ex.check_layer_norm, Random, capsys, "γ starts at ones")
    Library = type("Library", (LayerNormModule,), {"__init__": lambda self, D, eps=1e-5:
                                                   LayerNormModule.__init__(self, D, eps, library=True)})
    fails(ex.check_layer_norm, Library, capsys, "rules out")


class ReshapeComprehension(Looped):
    def forward(self, x):  # vectorized: the comprehension only reshapes, it is no loop over the heads
        B, T, D = x.shape
        q, k, v = (t.view(B, T, self.n_heads, -1).transpose(1, 2) for t in self.c_attn(x).split(D, dim=2))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, D))


def test_a_reshaping_comprehension_is_not_a_loop_over_heads(capsys):
    fails(ex.check_multi_head_attention, ReshapeComprehension, capsys, "no loop over the heads")


# ---------------------------------------------------------------------------------------------- 2
def looped_table(T, D):
    pe = torch.zeros(T, D)
    for p in range(T):
        for i in range(D // 2):
            pe[p, 2 * i] = math.sin(p / 10000 ** (2 * i / D))
            pe[p, 2 * i + 1] = math.cos(p / 10000 ** (2 * i / D))
    return pe


def test_sinusoidal_table_without_loops(capsys):
    from gpt_from_scratch.embeddings import sinusoidal_positional_encoding

    passes(ex.check_sinusoidal_positional_encoding, sinusoidal_positional_encoding, capsys)
    fails(ex.check_sinusoidal_positional_encoding, looped_table, capsys, "loops in Python")
    assert ex.check_sinusoidal_positional_encoding(looped_table, whole_tensor=False)


# The hints aimed at four usual mistakes (issue 31): each names the real mistake.
def lora_with_ba(x, weight, bias, A, B, scaling):
    return x @ (weight + scaling * B @ A).T + bias  # forms B A, which the exercise rules out


def lora_with_torch_mm(x, weight, bias, A, B, scaling):
    return torch.nn.functional.linear(x, weight + scaling * torch.mm(B, A), bias)


def lora_applied_in_turn(x, weight, bias, A, B, scaling):
    return x @ weight.T + bias + (x @ A.T @ B.T) * scaling


def test_lora_forming_b_a_fails_and_says_why(capsys):
    for candidate in (lora_with_ba, lora_with_torch_mm):
        fails(ex.check_lora_forward, candidate, capsys, "forms B A", "(x @ A.T) @ B.T")
    passes(ex.check_lora_forward, lora_applied_in_turn, capsys)


def test_top_p_without_softmax_is_told_to_take_it(capsys):
    def no_softmax(logits, p):
        above = logits[..., None, :] > logits[..., :, None]
        return logits.masked_fill((above * logits[..., None, :]).sum(-1) >= p, float("-inf"))

    fails(partial(ex.check_top_p_filter, allow_sort=False), no_softmax, capsys, "take the softmax")


def test_min_p_without_keepdim_is_told_about_keepdim(capsys):
    def no_keepdim(logits, min_p):
        probs = torch.softmax(logits, -1)
        return logits.masked_fill(probs < min_p * probs.max(-1).values, float("-inf"))

    fails(ex.check_min_p_filter, no_keepdim, capsys, "keepdim=True")


def test_the_no_tril_hint_does_not_suggest_tril(capsys):
    fails(ex.check_causal_mask, lambda T: torch.arange(T)[None, :] < torch.arange(T)[:, None], capsys,
          "diagonal")
    fails(ex.check_causal_mask, lambda T: torch.arange(T)[None, :] >= torch.arange(T)[:, None], capsys,
          "key <= query")
    assert ".tril()" not in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------- 11
def acc_norm_picks(loglik, choices, divide=True):
    lengths = torch.tensor([[len(c) for c in row] for row in choices], dtype=loglik.dtype)
    return (loglik / lengths if divide else loglik).argmax(dim=1)


def test_acc_norm(capsys):
    passes(ex.check_acc_norm, acc_norm_picks, capsys)
    fails(ex.check_acc_norm, lambda l, c: acc_norm_picks(l, c, divide=False), capsys, "plain sum is acc")
    fails(ex.check_acc_norm, lambda l, c: (-acc_norm_picks(-l, c)).neg(), capsys, "argmax")  # argmin
    fails(ex.check_acc_norm, lambda l, c: (l * torch.tensor([[len(x) for x in r] for r in c])).argmax(1),
          capsys, "do not multiply")


def bits_per_byte_of(losses, token_bytes, bits=True, by_bytes=True):
    total = losses.sum() / (math.log(2) if bits else 1.0)
    return (total / (token_bytes.sum() if by_bytes else len(losses))).item()


def test_bits_per_byte(capsys):
    passes(ex.check_bits_per_byte, bits_per_byte_of, capsys)
    fails(ex.check_bits_per_byte, lambda l, b: bits_per_byte_of(l, b, bits=False), capsys, "divide by ln 2")
    fails(ex.check_bits_per_byte, lambda l, b: bits_per_byte_of(l, b, by_bytes=False), capsys,
          "not by the number of tokens")
    fails(ex.check_bits_per_byte, lambda l, b: (l.sum() * math.log(2) / b.sum()).item(), capsys,
          "do not multiply")
# ---------------------------------------------------------------------------------------------- 12
def mask_prompt(ids, n_prompt, first=None):
    targets = ids[1:].clone()
    targets[: (n_prompt - 1 if first is None else first)] = -100
    return targets


def test_mask_prompt(capsys):
    passes(ex.check_mask_prompt, mask_prompt, capsys)
    fails(ex.check_mask_prompt, lambda ids, n: mask_prompt(ids, n, first=n), capsys, "first answer token")
    fails(ex.check_mask_prompt, lambda ids, n: ids[1:], capsys, "-100")
    fails(ex.check_mask_prompt, lambda ids, n: torch.cat([mask_prompt(ids, n), ids[-1:]]), capsys,
          "one fewer")


def render(messages, encode, markers, end=True, opener=False, user_end=True):
    ids, mask = [], []
    for m in messages:
        ours = m["role"] == "assistant"
        ids += [markers[m["role"]]] + encode(m["content"])
        mask += [int(ours and opener)] + [int(ours)] * len(encode(m["content"]))
        if ours or user_end:
            ids.append(markers["end"])
            mask.append(int(ours and end))
    return ids, mask


def test_render(capsys):
    passes(ex.check_render, render, capsys)
    fails(ex.check_render, lambda m, e, k: render(m, e, k, end=False), capsys, "how the model learns to stop")
    fails(ex.check_render, lambda m, e, k: render(m, e, k, opener=True), capsys, "assistant marker is 0")
    fails(ex.check_render, lambda m, e, k: render(m, e, k, user_end=False), capsys, "user's turn ends")
    fails(ex.check_render, lambda m, e, k: render(m, e, k)[0], capsys, "expected a pair")


def dpo(pc, pr, rc, rr, beta):
    return -torch.nn.functional.logsigmoid(beta * ((pc - rc) - (pr - rr))).mean()


def test_dpo_loss(capsys):
    passes(ex.check_dpo_loss, dpo, capsys)
    fails(ex.check_dpo_loss, lambda pc, pr, rc, rr, b: dpo(pc, pr, rc, rr, 1.0), capsys, "by beta")
    fails(ex.check_dpo_loss, lambda pc, pr, rc, rr, b: dpo(pc, pr, 0 * rc, 0 * rr, b), capsys, "reference")
    fails(ex.check_dpo_loss, lambda pc, pr, rc, rr, b: dpo(pr, pc, rr, rc, b), capsys, "comes first")
    fails(ex.check_dpo_loss, lambda pc, pr, rc, rr, b: 4 * dpo(pc, pr, rc, rr, b), capsys, "case 1 of 3")
# ---------------------------------------------------------------------------------------------- 13
def logit_lens(resid, weight, bias, W_U, eps, norm=True, use_eps=True, affine=True):
    x = resid
    if norm:
        x = torch.nn.functional.layer_norm(x, x.shape[-1:], weight if affine else None, bias if affine else None,
                                           eps if use_eps else 0.0)
    return x @ W_U.T


def test_logit_lens(capsys):
    passes(ex.check_logit_lens, logit_lens, capsys)
    fails(ex.check_logit_lens, lambda *a: logit_lens(*a, norm=False), capsys, "final LayerNorm before")
    fails(ex.check_logit_lens, lambda *a: logit_lens(*a, use_eps=False), capsys, "add eps")
    fails(ex.check_logit_lens, lambda *a: logit_lens(*a, affine=False), capsys, "scale by weight")
    fails(ex.check_logit_lens, lambda r, w, b, W, e: logit_lens(r, w, b, W, e)[0], capsys, "(L, B, T, V)")
    passes(ex.check_logit_lens, lambda *a: logit_lens(*(t.double() for t in a[:4]), a[4]),
           capsys)  # no dtype is stated: float64 too


def clears_b_O(z_corrupted, z_clean, head, W_O, b_O):
    out = patch_head(z_corrupted, z_clean, head, W_O, b_O)
    b_O.zero_()
    return out


def patch_head(z_corrupted, z_clean, head, W_O, b_O, in_place=False, bias=True, all_but=False):
    z = z_corrupted if in_place else z_corrupted.clone()
    heads = [h for h in range(z.shape[2]) if h != head] if all_but else [head]
    for h in heads:
        z[:, :, h] = z_clean[:, :, h]
    return z.flatten(2) @ W_O.T + (b_O if bias else 0)


def test_patch_head(capsys):
    passes(ex.check_patch_head, patch_head, capsys)
    fails(ex.check_patch_head, lambda *a: patch_head(*a, in_place=True), capsys, "clone()")
    fails(ex.check_patch_head, lambda *a: patch_head(*a, bias=False), capsys, "bias b_O")
    fails(ex.check_patch_head, lambda *a: patch_head(*a, all_but=True), capsys, "only the head asked for")
    fails(ex.check_patch_head, lambda zc, zk, h, W, b: zc.flatten(2) @ W.T + b, capsys, "clean run's")
    fails(ex.check_patch_head, clears_b_O, capsys, "b_O changed in place")
    passes(ex.check_patch_head, lambda zc, zk, h, W, b: patch_head(
        zc.double(), zk.double(), h, W.double(), b), capsys)  # float64 too


# ---------------------------------------------------------------------------------------------- 14
def group_advantages(rewards, G, unbiased=True, eps=1e-4, over_batch=False):
    grouped = rewards.view(1, -1) if over_batch else rewards.view(-1, G)
    std = grouped.std(1, keepdim=True, unbiased=unbiased)
    return ((grouped - grouped.mean(1, keepdim=True)) / (std + eps)).flatten()


def test_group_advantages(capsys):
    passes(ex.check_group_advantages, group_advantages, capsys)
    fails(ex.check_group_advantages, lambda r, G: group_advantages(r, G, eps=0.0), capsys,
          "add 1e-4")
    fails(ex.check_group_advantages, lambda r, G: group_advantages(r, G, unbiased=False),
          capsys, "unbiased std")
    fails(ex.check_group_advantages, lambda r, G: group_advantages(r, G, over_batch=True),
          capsys, "not the batch")
    fails(ex.check_group_advantages, lambda r, G: r - r.view(-1, G).mean(1).repeat_interleave(G),
          capsys, "divide by the group's std")
    fails(ex.check_group_advantages, lambda r, G: group_advantages(r, len(r) // G), capsys,
          "rewards.view(-1, G)")
    passes(ex.check_group_advantages, lambda r, G: group_advantages(r.double(), G), capsys)


def grpo_loss(logps, old, A, mask, eps, clip=True, reduce="tokens", detach=False, sign=1):
    ratio = torch.exp((logps.detach() if detach else logps) - old)
    if detach:
        ratio = ratio + 0 * logps.sum()  # a graph, but not the ratio's
    A = A[:, None]
    low = ratio.clamp(1 - eps, 1 + eps) * A if clip else ratio * A
    per_token = -sign * torch.min(ratio * A, low)
    if reduce == "tokens":
        return (per_token * mask).sum() / mask.sum()
    if reduce == "sequences":
        return ((per_token * mask).sum(-1) / mask.sum(-1)).mean()
    return per_token.mean()


def test_grpo_loss(capsys):
    passes(ex.check_grpo_loss, grpo_loss, capsys)
    fails(ex.check_grpo_loss, partial(grpo_loss, clip=False), capsys, "clip the ratio")
    fails(ex.check_grpo_loss, partial(grpo_loss, reduce="sequences"), capsys,
          "not each completion first")
    fails(ex.check_grpo_loss, partial(grpo_loss, reduce="all"), capsys, "multiply by the mask")
    fails(ex.check_grpo_loss, partial(grpo_loss, sign=-1), capsys, "minus the clipped")
    fails(ex.check_grpo_loss, partial(grpo_loss, detach=True), capsys, "case 1 of 3",
          "keep the ratio's graph")
    fails(ex.check_grpo_loss, lambda *a: grpo_loss(*a).detach(), capsys, "no gradient")


def test_pass_at_k(capsys):
    passes(ex.check_pass_at_k, lambda n, c, k: 1 - math.comb(n - c, k) / math.comb(n, k), capsys)
    fails(ex.check_pass_at_k, lambda n, c, k: 1 - (1 - c / n) ** k, capsys, "case 2 of 5",
          "without replacement")
    fails(ex.check_pass_at_k, lambda n, c, k: c / n, capsys, "case 2 of 5", "depends on k")
    fails(ex.check_pass_at_k, lambda n, c, k: math.comb(n - c, k) / math.comb(n, k), capsys,
          "take 1 minus it")
    passes(ex.check_pass_at_k,  # a NumPy number is a number
           lambda n, c, k: np.float32(1 - math.comb(n - c, k) / math.comb(n, k)), capsys)


# ---------------------------------------------------------------------------------------------- 15
def ring_all_reduce(tensor, rank, N, send, recv, mean=False, gather=True,
                    receive_first=False, ends=0):
    """Section 15.2's ring; ``ends=1``: the common textbook's (Baidu, Gibiansky), in which
    rank r ends the reduce-scatter with chunk r + 1's sum, and sends other numbers."""
    chunks = tensor.clone().tensor_split(N)
    after, before, r = (rank + 1) % N, (rank - 1) % N, rank + ends
    for step in range(N - 1):
        incoming = chunks[(r - step - 2) % N]
        received = torch.empty_like(incoming)
        if receive_first:
            recv(received, before)
        send(chunks[(r - step - 1) % N], after)
        if not receive_first:
            recv(received, before)
        incoming += received
    for step in range(N - 1 if gather else 0):
        send(chunks[(r - step) % N], after)
        recv(chunks[(r - step - 1) % N], before)
    total = torch.cat(chunks)
    return total / N if mean else total


def everyone_to_everyone(tensor, rank, N, send, recv):
    for other in range(N):
        if other != rank:
            send(tensor, other)
    total = tensor.clone()
    for other in range(N):
        if other != rank:
            received = torch.empty_like(tensor)
            recv(received, other)
            total += received
    return total


def owner_all_reduce(tensor, rank, N, send, recv):
    """Reduce-scatter and all-gather by the owners: each chunk straight to the rank that
    sums it, then from it to every other rank: a ring's bytes, not its messages."""
    chunks = list(tensor.clone().tensor_split(N))
    for other in range(N):
        if other != rank:
            send(chunks[other], other)
    for other in range(N):
        if other != rank:
            received = torch.empty_like(chunks[rank])
            recv(received, other)
            chunks[rank] += received
    for other in range(N):
        if other != rank:
            send(chunks[rank], other)
    for other in range(N):
        if other != rank:
            recv(chunks[other], other)
    return torch.cat(chunks)


def shared_memory_all_reduce(tensor, rank, N, send, recv, board={}):
    """Ranks that are threads share memory: the sum read off a board, no message sent."""
    barrier, values = board.setdefault(N, (threading.Barrier(N), {}))
    values[rank] = tensor.clone()
    barrier.wait()
    return torch.stack([values[r] for r in range(N)]).sum(0)


def test_ring_all_reduce(capsys, monkeypatch):
    passes(ex.check_ring_all_reduce, ring_all_reduce, capsys)
    passes(ex.check_ring_all_reduce, partial(ring_all_reduce, ends=1), capsys)
    passes(ex.check_ring_all_reduce, partial(ring_all_reduce, ends=2), capsys)
    fails(ex.check_ring_all_reduce, partial(ring_all_reduce, mean=True), capsys,
          "not their mean")
    fails(ex.check_ring_all_reduce, everyone_to_everyone, capsys, "case 1 of 4",
          "rank 0 received 1 message; a ring of 2 receives 2(N - 1) = 2")
    fails(ex.check_ring_all_reduce, partial(ring_all_reduce, gather=False), capsys,
          "all-gather")
    fails(ex.check_ring_all_reduce, shared_memory_all_reduce, capsys,
          "rank 0 sent 0 numbers; section 15.2's ring (chunk r's sum ends on rank r) "
          "sends 8 from rank 0", "share nothing but their messages")
    fails(ex.check_ring_all_reduce, owner_all_reduce, capsys, "case 2 of 4",
          "rank 0 sent a message to rank 2", "not straight to the rank that owns it")
    fails(ex.check_ring_all_reduce,  # rank 1 a last bit off: within atol, not the same bits
          lambda t, rank, N, send, recv: ring_all_reduce(t, rank, N, send, recv).nextafter(
              torch.tensor(math.inf)) if rank == 1 else ring_all_reduce(t, rank, N, send, recv),
          capsys, "rank 1's sum differs from rank 0's", "the same bits")
    monkeypatch.setattr(ex.ranks, "WAIT_S", 0.3)
    fails(ex.check_ring_all_reduce, partial(ring_all_reduce, receive_first=True), capsys,
          "never came", "send before you receive")


class EveryChunk:
    """ZeRO-1 gone wrong: an AdamW per chunk on every rank, each stepping every chunk (the
    memory of no sharding); with ``gather`` it still gathers its own chunk once a step."""

    def __init__(self, weights, rank, N, gather=False, **adamw):
        self.weights, self.rank, self.N, self.gather = weights, rank, N, gather
        self.chunks = [nn.Parameter(c.clone()) for c in weights.detach().tensor_split(N)]
        self.optimizers = [torch.optim.AdamW([c], **adamw) for c in self.chunks]

    def step(self, grad, all_gather):
        chunks = zip(self.chunks, grad.tensor_split(self.N), self.optimizers)
        for chunk, g, optimizer in chunks:
            chunk.grad = g.clone()
            optimizer.step()
            chunk.grad = None
        if self.gather:
            all_gather(self.chunks[self.rank].detach())
        self.weights.detach().copy_(torch.cat([c.detach() for c in self.chunks]))


class ZeRO1:
    def __init__(self, weights, rank, N, everything=False, gather=True, in_place=True,
                 whole=False, twice=False, view=False, **adamw):
        self.weights, self.rank, self.N = weights, rank, N
        self.everything, self.gather, self.in_place = everything, gather, in_place
        self.whole, self.twice = whole, twice  # gather the whole vector; gather twice
        start = weights.detach() if everything else weights.detach().tensor_split(N)[rank]
        self.chunk = nn.Parameter(weights.detach().clone().tensor_split(N)[rank] if view
                                  else start.clone())  # view: the whole copy stays alive
        self.optimizer = torch.optim.AdamW([self.chunk], **adamw)

    def step(self, grad, all_gather):
        self.chunk.grad = grad.clone() if self.everything else grad.tensor_split(self.N)[
            self.rank].clone()
        self.optimizer.step()
        mine = self.chunk.detach()
        if self.whole:  # each rank's whole vector, its own chunk updated: N times the bytes
            self.weights.detach().tensor_split(self.N)[self.rank].copy_(mine)
            gathered = all_gather(self.weights.detach())
            self.weights.detach().copy_(torch.cat([g.tensor_split(self.N)[r]
                                                   for r, g in enumerate(gathered)]))
            return
        if self.twice:
            all_gather(mine)
        new = mine if self.everything else (torch.cat(all_gather(mine)) if self.gather
                                            else None)
        if new is None:
            self.weights.detach().tensor_split(self.N)[self.rank].copy_(mine)
        elif self.in_place:
            self.weights.detach().copy_(new)
        else:
            self.weights = new.clone()


MOMENTS = {}  # rank -> (m, v): where hidden_zero1(where="global") keeps them


class ClassMoments:
    moments = {}  # rank -> (m, v): kept on the class, not on its objects

    def __init__(self, step):
        self.step = step


def hidden_zero1(weights, rank, N, lr, weight_decay, where="closure"):
    """AdamW on the whole vector, written by hand, its moments hidden: in step's closure,
    on the class of the object returned, or in a global that step's code names."""
    m, v, t = torch.zeros_like(weights), torch.zeros_like(weights), [0]
    if where == "global":
        MOMENTS[rank] = (m, v)
    elif where == "class":
        ClassMoments.moments[rank] = (m, v)

    def step(grad, all_gather):
        if where != "closure":
            m, v = (MOMENTS if where == "global" else ClassMoments.moments)[rank]
        else:
            m, v = moments
        t[0] += 1
        m.mul_(0.9).add_(grad, alpha=0.1)
        v.mul_(0.999).addcmul_(grad, grad, value=0.001)
        whole = weights.detach() * (1 - lr * weight_decay)
        whole -= lr / (1 - 0.9 ** t[0]) * m / ((v / (1 - 0.999 ** t[0])).sqrt() + 1e-8)
        weights.detach().copy_(torch.cat(all_gather(whole.tensor_split(N)[rank])))
    moments = (m, v) if where == "closure" else None
    return ClassMoments(step)


def test_zero1(capsys):
    passes(ex.check_zero1, ZeRO1, capsys)
    fails(ex.check_zero1, partial(ZeRO1, everything=True), capsys,
          "an optimizer built during the steps holds 40 numbers", "your own chunk only")
    for where in ("closure", "class", "global"):
        fails(ex.check_zero1, partial(hidden_zero1, where=where), capsys,
              "keeps a tensor whose memory holds 40 numbers")
    fails(ex.check_zero1, partial(ZeRO1, view=True), capsys,
          "keeps a tensor whose memory holds 40 numbers", "without clone()")
    fails(ex.check_zero1, partial(ZeRO1, gather=False), capsys, "all_gather")
    fails(ex.check_zero1, partial(ZeRO1, in_place=False), capsys, "in place")
    for gather in (False, True):
        fails(ex.check_zero1, partial(EveryChunk, gather=gather), capsys,
              "rank 0's optimizers keep 82 numbers of state", "no moments for the other")
    fails(ex.check_zero1, partial(ZeRO1, whole=True), capsys,
          "rank 0 gave all_gather a tensor of shape (40,) in step 1", "chunk only")
    fails(ex.check_zero1, partial(ZeRO1, twice=True), capsys,
          "rank 0 called all_gather 2 times in step 1")


def data_parallel_step(replicas, optimizers, x, y, reduce="mean", zero=True, whole=False,
                       reverse=False, log=False, first_only=False):
    N = len(replicas)
    shares = list(zip(x.chunk(N), y.chunk(N)))
    for replica, (xs, ys) in zip(replicas, shares[::-1] if reverse else shares):
        replica(x, y)[1].backward() if whole else replica(xs, ys)[1].backward()
        if log:  # a second forward of the same rows, to print the loss
            with torch.no_grad():
                replica(xs, ys)
    if first_only:  # one optimizer steps, its weights copied to the others
        for params in zip(*(r.parameters() for r in replicas)):
            params[0].grad = torch.stack([p.grad for p in params]).mean(0)
        optimizers[0].step()
        optimizers[0].zero_grad()
        for replica in replicas[1:]:
            replica.load_state_dict(replicas[0].state_dict())
            replica.zero_grad()
        return
    if reduce:
        for params in zip(*(r.parameters() for r in replicas)):
            total = torch.stack([p.grad for p in params]).sum(0)
            for p in params:
                p.grad = total / N if reduce == "mean" else total.clone()
    for optimizer in optimizers:
        optimizer.step()
        if zero:
            optimizer.zero_grad()


def test_data_parallel_step(capsys):
    passes(ex.check_data_parallel_step, data_parallel_step, capsys)
    passes(ex.check_data_parallel_step, partial(data_parallel_step, log=True), capsys)
    fails(ex.check_data_parallel_step, partial(data_parallel_step, first_only=True), capsys,
          "after step 1, optimizer 1 has stepped 0 times", "its own optimizer")
    fails(ex.check_data_parallel_step, partial(data_parallel_step, reduce="sum"), capsys,
          "the mean, not the sum")
    fails(ex.check_data_parallel_step, partial(data_parallel_step, reduce=None), capsys,
          "replica 1's weights differ")
    fails(ex.check_data_parallel_step,  # no data parallelism: every replica, every row
          partial(data_parallel_step, reduce=None, whole=True), capsys,
          "in step 1, replica 0's forward received the whole batch", "rows 0 to 3 of the 8")
    fails(ex.check_data_parallel_step, partial(data_parallel_step, reverse=True), capsys,
          "replica 0's forward received other rows")  # the same mean: only the rows tell
    fails(ex.check_data_parallel_step, partial(data_parallel_step, zero=False), capsys,
          "zero_grad")


BOOK_ZERO1 = '''class ZeRO1:
    def __init__(self, weights, rank, world_size, **adamw):
        self.weights, self.rank, self.world_size = weights, rank, world_size
        mine = weights.detach().tensor_split(world_size)[rank]
        self.chunk = torch.nn.Parameter(mine.clone())
        self.optimizer = torch.optim.AdamW([self.chunk], **adamw)

    def step(self, grad, all_gather):
        self.chunk.grad = grad.tensor_split(self.world_size)[self.rank].clone()
        self.optimizer.step()
        self.chunk.grad = None
        with torch.no_grad():
            self.weights.copy_(torch.cat(all_gather(self.chunk.detach())))'''


def test_zero1_passes_beside_a_notebooks_globals_of_its_attributes_names(capsys):
    """A notebook that built an `optimizer` and `weights` of its own earlier (Chapter 15's
    section 15.1 does): `self.optimizer` is an attribute, not that global, and the book's
    solution passes (it failed in a committed run)."""
    big = nn.Parameter(torch.zeros(65, 128))
    env = {"torch": torch, "optimizer": torch.optim.AdamW([big]), "weights": big,
           "chunk": big, "grad": big}
    exec(BOOK_ZERO1, env)
    passes(ex.check_zero1, env["ZeRO1"], capsys)
