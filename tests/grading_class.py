"""The simulated class the grading tests share: `make assign`'s material and submissions written as
students write them (correct solutions, typical mistakes, untouched stubs), for every chapter."""

from __future__ import annotations

import copy
import functools
import importlib.util
import os
import shutil
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


assign, grade, make_student = load("assign"), load("grade"), load("make_student")

# Set where the grader's tests must run, not skip (make test-grading, CI): then a sandbox
# that cannot start fails them, with the reason; unset (or 0), they skip with it.
REQUIRE_SANDBOX = "GPT_FROM_SCRATCH_REQUIRE_SANDBOX"


@functools.cache
def no_sandbox() -> str | None:
    """Why the grader's sandbox cannot start here, or None: bubblewrap missing, or its
    start-up check (one trivial case through a sandbox, as before every class) refused, e.g.
    in a container without the capabilities bubblewrap needs."""
    if shutil.which("bwrap") is None:
        return "grading needs bubblewrap (apt-get install bubblewrap)"
    from grading import sandbox, startup

    try:
        startup.check(sandbox.Limits(cpu_seconds=5.0))
    except sandbox.SandboxError as err:
        return f"bubblewrap is installed but cannot start a sandbox here: {err}"
    return None


def require_sandbox() -> None:
    """Skip the test when no sandbox can start here; fail it, loudly, where the environment
    says the grader must be tested (``REQUIRE_SANDBOX``)."""
    why = no_sandbox()
    if why is None:
        return
    if os.environ.get(REQUIRE_SANDBOX, "0") not in ("", "0"):
        pytest.fail(f"{REQUIRE_SANDBOX}={os.environ[REQUIRE_SANDBOX]}: the grader's tests "
                    f"must run here, but {why}", pytrace=False)
    pytest.skip(why)

# Three typical mistakes per exercise, as a student would write them, with the share of the private cases
# each still passes (a mistake can be right on some cases: e.g. an unstable loss on small logits).
MISTAKES: dict[str, list[tuple[str, float]]] = {
    "SortedCharTokenizer": [
        ('''class SortedCharTokenizer:
    def __init__(self, text):
        self.chars = list(dict.fromkeys(text))  # first-seen order, not sorted
        self.vocab_size = len(self.chars)
    def encode(self, s): return [self.chars.index(c) for c in s]
    def decode(self, ids): return "".join(self.chars[i] for i in ids)''', 0.0),
        ('''class SortedCharTokenizer:
    def __init__(self, text):
        self.chars = sorted(set(text))
        self.vocab_size = len(self.chars) + 1  # off by one
    def encode(self, s): return [self.chars.index(c) for c in s]
    def decode(self, ids): return "".join(self.chars[i] for i in ids)''', 0.5),
        ('''class SortedCharTokenizer:
    def __init__(self, text):
        self.chars = sorted(set(text))
        self.vocab_size = len(self.chars)
    def encode(self, s): return [self.chars.index(c) for c in s]
    def decode(self, ids): return " ".join(self.chars[i] for i in ids)  # spaces between''', 0.5),
    ],
    "get_batch_stacked": [
        ('''def get_batch_stacked(data, batch_size, block_size, generator=None):
    starts = torch.randint(len(data) - block_size, (batch_size,), generator=generator)
    x = torch.stack([data[s:s + block_size] for s in starts])
    return x, x  # y not shifted''', 0.5),
        ('''def get_batch_stacked(data, batch_size, block_size, generator=None):
    starts = torch.randint(len(data) - block_size - 1, (batch_size,), generator=generator)  # off by one
    x = torch.stack([data[s:s + block_size] for s in starts])
    y = torch.stack([data[s + 1:s + 1 + block_size] for s in starts])
    return x, y''', 0.5),
        ('''def get_batch_stacked(data, batch_size, block_size, generator=None):
    starts = torch.randint(len(data) - block_size, (batch_size,), generator=generator)
    x = torch.stack([data[s:s + block_size] for s in starts]).float()  # floats, not ids
    y = torch.stack([data[s + 1:s + 1 + block_size] for s in starts]).float()
    return x, y''', 0.5),
    ],
    "bpe_encode": [
        ('''def bpe_encode(text, merges):
    return list(text.encode("utf-8"))  # no merges''', 0.0),
        ('''def bpe_encode(text, merges):
    out = []
    for chunk in regex.findall(GPT2_PATTERN, text):
        ids = list(chunk.encode("utf-8"))
        while len(ids) >= 2:
            known = [p for p in zip(ids, ids[1:]) if p in merges]
            if not known:
                break
            best = max(known, key=merges.get)  # the latest merge
            ids = merge_pair(ids, best, merges[best])
        out.extend(ids)
    return out''', 0.5),  # right where no two merges compete (the accented text)
        ('''def bpe_encode(text, merges):
    out = []
    for chunk in regex.findall(GPT2_PATTERN, text):
        ids = [ord(c) for c in chunk]  # characters, not bytes
        while len(ids) >= 2:
            known = [p for p in zip(ids, ids[1:]) if p in merges]
            if not known:
                break
            best = min(known, key=merges.get)
            ids = merge_pair(ids, best, merges[best])
        out.extend(ids)
    return out''', 0.5),
    ],
    "sinusoidal_table": [
        ('''def sinusoidal_table(T, D):
    position = torch.arange(T, dtype=torch.float64)[:, None]
    frequency = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    pe = torch.zeros(T, D, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = torch.cos(position * frequency), torch.sin(position * frequency)
    return pe.float()  # sin and cos swapped''', 0.0),
        ('''def sinusoidal_table(T, D):
    position = torch.arange(T, dtype=torch.float64)[:, None]
    frequency = 10000.0 ** (-torch.arange(D // 2, dtype=torch.float64) / D)  # i, not 2i
    pe = torch.zeros(T, D, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(position * frequency), torch.cos(position * frequency)
    return pe.float()''', 0.0),
        ('''def sinusoidal_table(T, D):
    pe = torch.zeros(T, D)
    for p in range(T):  # right values, but the loop the exercise rules out
        for i in range(D // 2):
            pe[p, 2 * i] = math.sin(p / 10000 ** (2 * i / D))
            pe[p, 2 * i + 1] = math.cos(p / 10000 ** (2 * i / D))
    return pe''', 0.0),
    ],
    "LayerNormModule": [
        ('''class LayerNormModule(torch.nn.Module):
    def __init__(self, D, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight, self.bias = torch.nn.Parameter(torch.ones(D)), torch.nn.Parameter(torch.zeros(D))
    def forward(self, x):
        return (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True) + self.eps) * self.weight + self.bias''', 1 / 2),  # one value case of two
        ('''class LayerNormModule(torch.nn.Module):
    def __init__(self, D, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight, self.bias = torch.nn.Parameter(torch.ones(D)), torch.nn.Parameter(torch.zeros(D))
    def forward(self, x):
        centred = x - x.mean(-1, keepdim=True)
        return centred / (centred.pow(2).mean(-1, keepdim=True).sqrt() + self.eps) * self.weight + self.bias''', 1 / 2),
        ('''class LayerNormModule(torch.nn.Module):
    def __init__(self, D, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight, self.bias = torch.nn.Parameter(torch.randn(D)), torch.nn.Parameter(torch.zeros(D))
    def forward(self, x):
        centred = x - x.mean(-1, keepdim=True)
        return centred / torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight + self.bias''', 0.0),
    ],
    "causal_mask_arange": [
        ('''def causal_mask_arange(T):
    return torch.arange(T)[None, :] < torch.arange(T)[:, None]  # no diagonal''', 0.0),
        ('''def causal_mask_arange(T):
    return torch.ones(T, T, dtype=torch.bool).tril()  # the forbidden tril''', 1.0),
        ('''def causal_mask_arange(T):
    return (torch.arange(T)[None, :] <= torch.arange(T)[:, None]).long()  # not bool''', 0.0),
        # (a rule no output shows is the teacher's written criterion: no points here)
    ],
    "einsum_attention": [
        ('''def einsum_attention(q, k, v, mask=None):
    scores = torch.einsum("...qd,...kd->...qk", q, k)  # not scaled
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(-1)
    return torch.einsum("...qk,...kd->...qd", weights, v), weights''', 0.0),
        ('''def einsum_attention(q, k, v, mask=None):
    scores = torch.einsum("...qd,...kd->...qk", q, k) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(-2)  # over the queries
    return torch.einsum("...qk,...kd->...qd", weights, v), weights''', 0.0),
        ('''def einsum_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # @, not einsum
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(-1)
    return weights @ v, weights''', 1.0),  # right values: the rule is a written criterion
    ],
    "LoopedMultiHeadAttention": [
        ('''class LoopedMultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.c_attn, self.c_proj = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)
    def forward(self, x):
        q, k, v = self.c_attn(x).split(x.shape[-1], dim=2)
        heads = []
        for h in range(self.n_heads):
            c = slice(h * self.d_head, (h + 1) * self.d_head)
            heads.append(scaled_dot_product_attention(q[..., c], k[..., c], v[..., c])[0])  # no mask
        return self.c_proj(torch.cat(heads, dim=-1))''', 0.0),  # the loop case checks the values too
        ('''class LoopedMultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.c_attn, self.c_proj = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)
    def forward(self, x):
        q, k, v = self.c_attn(x).split(x.shape[-1], dim=2)
        mask = causal_mask(x.shape[1])
        heads = []
        for h in range(self.n_heads):
            c = slice(h, None, self.n_heads)  # strided columns: not head h's block
            heads.append(scaled_dot_product_attention(q[..., c], k[..., c], v[..., c], mask)[0])
        return self.c_proj(torch.cat(heads, dim=-1))''', 1 / 2),  # right with one head only
        ('''class LoopedMultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.c_attn, self.c_proj = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)
    def forward(self, x):  # vectorized: right values, but no loop over the heads
        B, T, D = x.shape
        q, k, v = (t.view(B, T, self.n_heads, -1).transpose(1, 2) for t in self.c_attn(x).split(D, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, D))''', 1.0),  # the loop: a written criterion
    ],
    "ParallelBlock": [
        ('''class ParallelBlock(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = LayerNorm(config.d_model)
        self.attn, self.mlp = MultiHeadAttention(config.d_model, config.n_heads), FeedForward(config)
    def forward(self, x):
        x = x + self.attn(self.ln_1(x))  # sequential
        return x + self.mlp(self.ln_1(x))''', 0.0),
        ('''class ParallelBlock(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = LayerNorm(config.d_model)
        self.attn, self.mlp = MultiHeadAttention(config.d_model, config.n_heads), FeedForward(config)
    def forward(self, x):
        h = self.ln_1(x)
        return self.attn(h) + self.mlp(h)  # no residual''', 0.0),
        ('''class ParallelBlock(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = LayerNorm(config.d_model)
        self.attn, self.mlp = MultiHeadAttention(config.d_model, config.n_heads), FeedForward(config)
    def forward(self, x):
        return x + self.attn(self.ln_1(x)) + self.mlp(x)  # mlp on the raw stream''', 0.0),
    ],
    "cross_entropy_by_hand": [
        ('''def cross_entropy_by_hand(logits, targets):
    log_sum_exp = torch.log(torch.exp(logits).sum(-1))  # no max: overflows
    return (log_sum_exp - logits.gather(-1, targets[..., None])[..., 0]).mean()''', 1 / 2),
        ('''def cross_entropy_by_hand(logits, targets):
    z = logits - logits.max(-1, keepdim=True).values
    return (torch.log(torch.exp(z).sum(-1)) - z.gather(-1, targets[..., None])[..., 0]).sum()  # sum''', 0.0),
        ('''def cross_entropy_by_hand(logits, targets):
    return -torch.log_softmax(logits, -1).gather(-1, targets[..., None]).mean()  # ruled out''', 1.0),  # a written criterion
    ],
    "min_p_filter": [
        ('''def min_p_filter(logits, min_p):
    probs = torch.softmax(logits, -1)
    return logits.masked_fill(probs < min_p, float("-inf"))  # absolute threshold''', 0.0),
        ('''def min_p_filter(logits, min_p):
    return logits.masked_fill(logits < min_p * logits.max(-1, keepdim=True).values, float("-inf"))''', 0.0),
        ('''def min_p_filter(logits, min_p):
    probs = torch.softmax(logits, -1)
    return probs.masked_fill(probs < min_p * probs.max(-1, keepdim=True).values, 0.0)  # probabilities''',
         0.0),
    ],
    "top_p_unsorted": [
        ('''def top_p_unsorted(logits, p):
    probs = torch.softmax(logits, -1)
    above = probs[..., None, :] > probs[..., :, None]
    mass = (above * probs[..., None, :]).sum(-1) + probs  # counts itself
    return logits.masked_fill(mass >= p, float("-inf"))''', 0.0),
        ('''def top_p_unsorted(logits, p):
    sorted_probs, order = torch.softmax(logits, -1).sort(descending=True)  # sorts
    remove = sorted_probs.cumsum(-1) - sorted_probs >= p
    return logits.masked_fill(torch.zeros_like(remove).scatter(-1, order, remove), float("-inf"))''', 1.0),  # a written criterion
        ('''def top_p_unsorted(logits, p):
    probs = torch.softmax(logits, -1)
    return logits.masked_fill(probs.cumsum(-1) - probs >= p, float("-inf"))  # in vocabulary order''',
         0.0),
    ],
    "offset_scores": [
        ('''def offset_scores(maps, k):
    A = torch.stack(maps)
    t = torch.arange(k, A.shape[-1])
    return A[..., t - k, t].mean(dim=(1, 3))  # query and key swapped''', 0.0),
        ('''def offset_scores(maps, k):
    A = torch.stack(maps)
    t = torch.arange(k, A.shape[-1])
    return A[..., t, t - k].sum(-1).mean(1)  # summed over the queries''', 0.0),
        ('''def offset_scores(maps, k):
    return torch.stack(maps).diagonal(-k, -2, -1).mean(dim=(1, 3))  # ruled out''', 1.0),  # a written criterion
    ],
    "lora_forward": [
        ('''def lora_forward(x, weight, bias, A, B, scaling):
    return x @ weight.T + bias + x @ A.T @ B.T  # not scaled''', 0.0),
        ('''def lora_forward(x, weight, bias, A, B, scaling):
    return x @ weight.T + (x @ A.T @ B.T) * scaling  # no bias''', 0.0),
        ('''def lora_forward(x, weight, bias, A, B, scaling):
    return x @ weight.T + bias + (x @ A.T @ B.T) * scaling ** 2  # scaled twice''', 0.0),
    ],
    "RMSNormModule": [
        ("""class RMSNormModule(nn.Module):
    def __init__(self, D, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(D))

    def forward(self, x):
        x = x - x.mean(-1, keepdim=True)  # centred: that is LayerNorm
        return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight""", 0.0),
        ("""class RMSNormModule(nn.Module):
    def __init__(self, D, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(D))

    def forward(self, x):
        rms = x.pow(2).mean(-1, keepdim=True).sqrt()
        return x / (rms + self.eps) * self.weight  # eps outside the root: wrong for a large eps""", 1 / 2),
        ("""class RMSNormModule(nn.Module):
    def __init__(self, D, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(D))

    def forward(self, x):
        return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)  # weight forgotten""", 0.0),
    ],
    "rope_interleaved": [
        ("""def rope_interleaved(x, positions, theta=10000.0):
    d = x.size(-1)
    angles = positions.float()[:, None] * theta ** (-torch.arange(0, d, 2).float() / d)
    a, b = x[..., : d // 2], x[..., d // 2:]  # half-split pairs, not neighbours
    return torch.cat([a * angles.cos() - b * angles.sin(), a * angles.sin() + b * angles.cos()], -1)""",
         0.0),
        ("""def rope_interleaved(x, positions, theta=10000.0):
    d, T = x.size(-1), x.size(-2)
    angles = torch.arange(T).float()[:, None] * theta ** (-torch.arange(0, d, 2).float() / d)  # 0..T-1
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * angles.cos() - b * angles.sin(), a * angles.sin() + b * angles.cos()],
                       -1).flatten(-2)""", 0.0),
        ("""def rope_interleaved(x, positions, theta=10000.0):
    d = x.size(-1)
    angles = positions.float()[:, None] * 10000.0 ** (-torch.arange(0, d, 2).float() / d)  # fixed theta
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * angles.cos() - b * angles.sin(), a * angles.sin() + b * angles.cos()],
                       -1).flatten(-2)""", 0.5),
    ],
    "repeat_kv_heads": [
        ("""def repeat_kv_heads(x, n_rep):
    return x.repeat(1, n_rep, 1, 1)  # tiles the group instead of repeating each head""", 0.0),
        ("""def repeat_kv_heads(x, n_rep):
    return x.repeat_interleave(n_rep, dim=1)  # the function the exercise rules out""", 1.0),  # a written criterion
        ("""def repeat_kv_heads(x, n_rep):
    B, H_kv, T, d = x.shape
    return x[:, :, None].expand(B, H_kv, 3, T, d).reshape(B, H_kv * 3, T, d)  # n_rep fixed at 3""", 1 / 2),
    ],
    "acc_norm_picks": [
        ("""def acc_norm_picks(loglik, choices):
    return loglik.argmax(dim=1)  # the plain sum: acc, not acc_norm""", 0.0),
        ("""def acc_norm_picks(loglik, choices):
    lengths = torch.tensor([[len(c) for c in row] for row in choices], dtype=loglik.dtype)
    return (loglik / lengths).argmin(dim=1)  # the lowest""", 0.0),
        ("""def acc_norm_picks(loglik, choices):
    lengths = torch.tensor([[len(c) for c in row] for row in choices], dtype=loglik.dtype)
    per_char = (loglik / lengths).flip(1)
    return loglik.shape[1] - 1 - per_char.argmax(dim=1)  # the last on ties""", 0.5),
    ],
    "bits_per_byte_of": [
        ("""def bits_per_byte_of(losses, token_bytes):
    return (losses.sum() / token_bytes.sum()).item()  # nats, not bits""", 0.0),
        ("""def bits_per_byte_of(losses, token_bytes):
    return (losses.sum() / (math.log(2) * len(losses))).item()  # bits per token""", 0.5),
        ("""def bits_per_byte_of(losses, token_bytes):
    return (losses.sum() * math.log(2) / token_bytes.sum()).item()  # multiplied by ln 2""", 0.0),
    ],
    "mask_prompt": [
        ("""def mask_prompt(ids, n_prompt):
    targets = ids[1:].clone()
    targets[:n_prompt] = -100  # one too many: the first answer token is lost
    return targets""", 0.0),
        ("""def mask_prompt(ids, n_prompt):
    return ids[1:]  # nothing masked""", 0.0),
        ("""def mask_prompt(ids, n_prompt):
    targets = ids.clone()  # not shifted
    targets[:n_prompt] = -100
    return targets""", 0.0),
    ],
    "dpo_loss": [
        ("""def dpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
    z = (policy_chosen - ref_chosen) - (policy_rejected - ref_rejected)  # beta forgotten
    return -F.logsigmoid(z).mean()""", 0.5),  # right where beta = 1
        ("""def dpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
    return -F.logsigmoid(beta * (policy_chosen - policy_rejected)).mean()  # no reference""", 0.0),
        ("""def dpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
    z = beta * ((policy_chosen - ref_chosen) - (policy_rejected - ref_rejected))
    return -F.logsigmoid(z).sum()  # summed over the pairs""", 0.0),
    ],
    "logit_lens": [
        ("""def logit_lens(resid, weight, bias, W_U, eps):
    return resid @ W_U.T  # no final LayerNorm""", 0.0),
        ("""def logit_lens(resid, weight, bias, W_U, eps):
    return F.layer_norm(resid, resid.shape[-1:], weight, bias) @ W_U.T  # eps left at 1e-5""", 0.5),
        ("""def logit_lens(resid, weight, bias, W_U, eps):
    return F.layer_norm(resid, resid.shape[-1:], eps=eps) @ W_U.T  # no weight, no bias""", 0.0),
    ],
    "patch_head": [
        ("""def patch_head(z_corrupted, z_clean, head, W_O, b_O):
    z = z_corrupted.clone()
    z[:, :, head] = z_clean[:, :, head]
    return z.flatten(2) @ W_O.T  # no bias""", 0.0),
        ("""def patch_head(z_corrupted, z_clean, head, W_O, b_O):
    z = z_corrupted.clone()
    z[:, :, 0] = z_clean[:, :, 0]  # always the first head
    return z.flatten(2) @ W_O.T + b_O""", 0.5),
        ("""def patch_head(z_corrupted, z_clean, head, W_O, b_O):
    z = z_corrupted.clone()
    z[:, :, head] = z_clean[:, :, head]
    return z.flatten(2) @ W_O + b_O  # W_O not transposed""", 0.0),
    ],
    "group_advantages": [
        ("""def group_advantages(rewards, group_size):
    grouped = rewards.view(-1, group_size)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    return (centred / (grouped.std(dim=1, unbiased=False, keepdim=True) + 1e-4)).flatten()""",
         0.0),  # the biased std
        ("""def group_advantages(rewards, group_size):
    return (rewards - rewards.mean()) / (rewards.std() + 1e-4)  # the batch, not each group""",
         0.0),
        ("""def group_advantages(rewards, group_size):
    grouped = rewards.view(-1, group_size)
    return (grouped - grouped.mean(dim=1, keepdim=True)).flatten()  # not divided by the std""",
         0.0),
    ],
    "grpo_loss": [
        ("""def grpo_loss(logps, old_logps, advantages, mask, epsilon):
    per_token = -torch.exp(logps - old_logps) * advantages[:, None]  # never clipped
    return (per_token * mask).sum() / mask.sum()""", 0.5),  # right on-policy
        ("""def grpo_loss(logps, old_logps, advantages, mask, epsilon):
    ratio = torch.exp(logps - old_logps)
    A = advantages[:, None]
    per_token = -torch.min(ratio * A, ratio.clamp(1 - epsilon, 1 + epsilon) * A)
    return per_token.mean()  # the padding averaged in""", 0.0),
        ("""def grpo_loss(logps, old_logps, advantages, mask, epsilon):
    ratio = torch.exp(logps - old_logps)
    A = advantages[:, None]
    per_token = -torch.min(ratio * A, ratio.clamp(1 - epsilon, 1 + epsilon) * A)
    return ((per_token * mask).sum(1) / mask.sum(1)).mean()  # each answer alike""", 0.0),
    ],
    "pass_at_k": [
        ("""def pass_at_k(n, c, k):
    return 1 - (1 - c / n) ** k  # the plug-in estimate""", 0.0),
        ("""def pass_at_k(n, c, k):
    f = math.factorial  # comb by factorials: fails where n - c < k
    return 1 - f(n - c) / (f(k) * f(n - c - k)) / math.comb(n, k)""", 0.5),
        ("""def pass_at_k(n, c, k):
    return c / n  # pass@1, whatever k""", 0.0),
    ],
    "ring_all_reduce": [
        ("""def ring_all_reduce(tensor, rank, world_size, send, recv):
    chunks = tensor.clone().tensor_split(world_size)
    after, before = (rank + 1) % world_size, (rank - 1) % world_size
    for step in range(world_size - 1):
        send(chunks[(rank - step - 1) % world_size], after)
        incoming = chunks[(rank - step - 2) % world_size]
        received = torch.empty_like(incoming)
        recv(received, before)
        incoming += received
    for step in range(world_size - 1):
        send(chunks[(rank - step) % world_size], after)
        recv(chunks[(rank - step - 1) % world_size], before)
    return torch.cat(chunks) / world_size  # the mean, not the sum""", 0.0),
        ("""def ring_all_reduce(tensor, rank, world_size, send, recv):
    tensors = {rank: tensor.clone()}
    for step in range(world_size - 1):  # each whole tensor round the ring, not a chunk
        send(tensors[(rank - step) % world_size], (rank + 1) % world_size)
        received = torch.empty_like(tensor)
        recv(received, (rank - 1) % world_size)
        tensors[(rank - step - 1) % world_size] = received
    return torch.stack([tensors[r] for r in range(world_size)]).sum(0)""",
         0.0),  # the same bits on every rank, only to the next: (N - 1) n numbers sent
        ("""def ring_all_reduce(tensor, rank, world_size, send, recv):
    chunks = tensor.clone().tensor_split(world_size)
    others = [r for r in range(world_size) if r != rank]
    for other in others:  # each chunk straight to the rank that owns it, not round the ring
        send(chunks[other], other)
    for other in others:
        received = torch.empty_like(chunks[rank])
        recv(received, other)
        chunks[rank].add_(received)
    for other in others:
        send(chunks[rank], other)
    for other in others:
        recv(chunks[other], other)
    return torch.cat(chunks)""", 0.0),
    ],
    "ZeRO1": [
        ("""class ZeRO1:
    def __init__(self, weights, rank, world_size, **adamw):
        self.weights, self.rank, self.world_size = weights, rank, world_size
        self.whole = torch.nn.Parameter(weights.detach().clone())  # every chunk's state
        self.optimizer = torch.optim.AdamW([self.whole], **adamw)

    def step(self, grad, all_gather):
        self.whole.grad = grad.clone()
        self.optimizer.step()
        mine = self.whole.detach().tensor_split(self.world_size)[self.rank]
        with torch.no_grad():
            self.weights.copy_(torch.cat(all_gather(mine)))""",
         0.0),  # the right weights, by AdamW's state for every chunk
        ("""class ZeRO1:
    def __init__(self, weights, rank, world_size, **adamw):
        self.weights, self.rank, self.world_size = weights, rank, world_size
        mine = weights.detach().tensor_split(world_size)[rank]
        self.chunk = torch.nn.Parameter(mine.clone())
        self.optimizer = torch.optim.AdamW([self.chunk], **adamw)

    def step(self, grad, all_gather):
        self.chunk.grad = grad.tensor_split(self.world_size)[self.rank].clone()
        self.optimizer.step()
        mine = self.weights.tensor_split(self.world_size)[self.rank]
        with torch.no_grad():  # only this rank's chunk written: no all_gather
            mine.copy_(self.chunk)""", 0.0),
        ("""class ZeRO1:
    def __init__(self, weights, rank, world_size, **adamw):
        self.weights, self.rank, self.world_size = weights, rank, world_size
        mine = weights.detach().tensor_split(world_size)[rank]
        self.chunk = torch.nn.Parameter(mine.clone())
        self.optimizer = torch.optim.AdamW([self.chunk], **adamw)

    def step(self, grad, all_gather):
        with torch.no_grad():  # gathered before the step: the weights lag one step
            self.weights.copy_(torch.cat(all_gather(self.chunk.detach())))
        self.chunk.grad = grad.tensor_split(self.world_size)[self.rank].clone()
        self.optimizer.step()""", 0.0),
    ],
    "data_parallel_step": [
        ("""def data_parallel_step(replicas, optimizers, x, y):
    N = len(replicas)
    for replica, xs, ys in zip(replicas, x.chunk(N), y.chunk(N)):
        replica(xs, ys)[1].backward()  # each its own gradient: never averaged
    for optimizer in optimizers:
        optimizer.step()
        optimizer.zero_grad()""", 0.0),
        ("""def data_parallel_step(replicas, optimizers, x, y):
    N = len(replicas)
    for replica, xs, ys in zip(replicas, x.chunk(N), y.chunk(N)):
        replica(xs, ys)[1].backward()
    for params in zip(*(r.parameters() for r in replicas)):
        total = torch.stack([p.grad for p in params]).sum(0)  # the sum, not the mean
        for p in params:
            p.grad = total.clone()
    for optimizer in optimizers:
        optimizer.step()
        optimizer.zero_grad()""", 0.0),  # AdamW too: eps 1e-5 keeps its scale
        ("""def data_parallel_step(replicas, optimizers, x, y):
    for replica in replicas:
        replica(x, y)[1].backward()  # the whole batch on every replica
    for params in zip(*(r.parameters() for r in replicas)):
        mean = torch.stack([p.grad for p in params]).mean(0)
        for p in params:
            p.grad = mean.clone()
    for optimizer in optimizers:
        optimizer.step()
        optimizer.zero_grad()""", 0.0),  # right weights, wrong rows
    ],
    "online_softmax_step": [
        ("""def online_softmax_step(m, l, acc, scores, v_block):
    m_new = torch.maximum(m, scores.max(dim=-1, keepdim=True).values)
    weights = torch.exp(scores - m_new)
    l_new = l * torch.exp(m - m_new) + weights.sum(-1, keepdim=True)
    return m_new, l_new, acc + weights @ v_block  # acc not rescaled""",
         0.0),  # every case: a row's maximum grows in a later block
        ("""def online_softmax_step(m, l, acc, scores, v_block):
    m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))
    p = torch.exp(scores - m_new)
    return m_new, l + p.sum(dim=-1, keepdim=True), acc + p @ v_block  # nothing rescaled""",
         0.0),
        ("""def online_softmax_step(m, l, acc, scores, v_block):
    m_block = scores.amax(dim=-1, keepdim=True)  # the block's own: -inf for a row all -inf
    m_new = torch.maximum(m, m_block)
    p = torch.exp(scores - m_block) * torch.exp(m_block - m_new)  # NaN there
    rescale = torch.exp(m - m_new)
    return m_new, rescale * l + p.sum(dim=-1, keepdim=True), rescale * acc + p @ v_block""",
         2 / 3),  # right wherever each row has a score in each block
    ],
    "accept_or_resample": [
        ("""def accept_or_resample(p, q, draft_tokens, generator):
    for i, x in enumerate(draft_tokens.tolist()):
        if torch.rand((), generator=generator) < p[i, x] / q[i, x]:
            continue
        new = torch.multinomial(q[i], 1, generator=generator)  # from q, not the residual
        return torch.cat([draft_tokens[:i], new]), i
    bonus = torch.multinomial(p[-1], 1, generator=generator)
    return torch.cat([draft_tokens, bonus]), len(draft_tokens)""",
         1 / 3),  # right where every draft is kept
        ("""def accept_or_resample(p, q, draft_tokens, generator):
    for i, x in enumerate(draft_tokens.tolist()):
        if torch.rand((), generator=generator) < p[i, x] / q[i, x]:
            continue
        residual = (p[i] - q[i]).clamp(min=0)
        new = torch.multinomial(residual / residual.sum(), 1, generator=generator)
        return torch.cat([draft_tokens[:i], new]), i
    bonus = torch.multinomial(p[0], 1, generator=generator)  # the first row, not the last
    return torch.cat([draft_tokens, bonus]), len(draft_tokens)""", 0.0),
        ("""def accept_or_resample(p, q, draft_tokens, generator):
    for i, x in enumerate(draft_tokens.tolist()):
        if torch.rand((), generator=generator) < p[0, x] / q[0, x]:  # row 0 for every draft
            continue
        residual = (p[i] - q[i]).clamp(min=0)
        new = torch.multinomial(residual / residual.sum(), 1, generator=generator)
        return torch.cat([draft_tokens[:i], new]), i
    bonus = torch.multinomial(p[-1], 1, generator=generator)
    return torch.cat([draft_tokens, bonus]), len(draft_tokens)""",
         2 / 3),  # right at γ = 1, and where p = q
    ],
    "absmax_quantize": [
        ("""def absmax_quantize(w, bits):
    q_max = 2 ** (bits - 1) - 1
    scale = w.abs().amax(dim=1, keepdim=True)  # the max, not the max over q_max
    scale = scale.clamp(min=torch.finfo(torch.float32).eps)
    return torch.round(w / scale).clamp(-q_max, q_max).to(torch.int8), scale""", 0.0),
        ("""def absmax_quantize(w, bits):
    q_max = 2 ** (bits - 1) - 1
    scale = w.abs().amax(dim=1, keepdim=True) / q_max
    scale = scale.clamp(min=torch.finfo(torch.float32).eps)
    return (w / scale).clamp(-q_max, q_max).to(torch.int8), scale  # toward zero""", 0.0),
        ("""def absmax_quantize(w, bits):
    q_max = 2 ** (bits - 1) - 1
    scale = w.abs().amax(dim=1, keepdim=True) / q_max  # no floor: 0 for a row of zeros
    return torch.round(w / scale).clamp(-q_max, q_max).to(torch.int8), scale""", 2 / 3),
    ],
}


def solutions(chapter_nb, names) -> dict[str, str]:
    """The teacher's solution cell of each exercise."""
    return {n: next(c.source for c in chapter_nb.cells if c.cell_type == "code"
                    and "solution" in c.metadata.get("tags", []) and n in make_student.defined_names(c.source))
            for n in names}


def submission(student_nb, sources: dict[str, str], extra: list | None = None):
    """The hand-in notebook with these solution cells (by exercise name) and extra cells at the end."""
    nb = copy.deepcopy(student_nb)
    for cell in nb.cells:
        names = make_student.defined_names(cell.source) if cell.cell_type == "code" else set()
        for name, source in sources.items():
            if name in names and "exercise" in cell.metadata.get("tags", []):
                cell.source = source
    nb.cells += extra or []
    return nb


def material(chapter: str, folder: Path):
    """(assignment, autograder folder, the teacher's chapter, the hand-in notebook) for ``chapter``."""
    assignment = assign.ASSIGNMENTS[chapter]
    written = assign.write_assignment(assignment, folder)
    chapter_nb = nbformat.read(ROOT / "notebooks" / f"{chapter}.ipynb", as_version=4)
    student_nb = nbformat.read(written / "student" / f"{chapter}_assignment.ipynb", as_version=4)
    return assignment, written / "autograder", chapter_nb, student_nb
