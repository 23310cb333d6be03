"""Checkers for the exercises of Chapter 16 (fast inference, proven exact):
``check_online_softmax_step``, ``check_accept_or_resample``, ``check_absmax_quantize``.

Each compares the candidate with a reference written here, independently of the package's
``tiled_attention``, ``speculative`` and ``quantize`` modules; the accept/reject step, which
draws random numbers, is checked on cases whose answer is certain and then by Pearson's
chi-square test on its output's distribution over many draws.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .core import _Case, _call, _compare_values, _generator, _Mismatch, _require_tensor
from .core import _run_cases

__all__ = ["check_online_softmax_step", "check_accept_or_resample", "check_absmax_quantize"]


# ---------------------------------------------------------------- 1. the online softmax

def _step(m, l, acc, scores, v, rescale_acc=True, rescale_l=True, block_max=False):
    """The reference update, with switches for the usual mistakes."""
    m_new = torch.maximum(m, scores.amax(-1, keepdim=True))  # (Q, 1)
    alpha = torch.exp(m - m_new)
    if block_max:  # exp(s - the block's own max), then scaled: NaN for a row all -inf
        m_block = scores.amax(-1, keepdim=True)
        p = torch.exp(scores - m_block) * torch.exp(m_block - m_new)
    else:
        p = torch.exp(scores - m_new)
    l_new = (alpha * l if rescale_l else l) + p.sum(-1, keepdim=True)
    acc_new = (alpha * acc if rescale_acc else acc) + p @ v
    return m_new, l_new, acc_new


def check_online_softmax_step(candidate) -> bool:
    """Check ``online_softmax_step(m, l, acc, scores, v_block)`` -> ``(m, l, acc)``: one
    block of scores folded into the running maximum ``m`` (Q, 1), sum ``l`` (Q, 1) and
    unnormalized output ``acc`` (Q, d); after the last block ``acc / l`` is
    ``softmax(scores) @ v``."""
    specs = [("3 blocks of 4 keys, the largest score in the last block", 3, 4, 1, True),
             ("2 blocks of 5 keys, scores in order", 2, 5, 2, False),
             ("4 blocks of 3 keys, some scores masked with -inf", 4, 3, 3, False),
             ("3 blocks of 4 keys, a row all -inf in the second block", 3, 4, 4, False)]

    def make(n_blocks: int, K: int, seed: int, grow: bool) -> Callable[[], None]:
        def run() -> None:
            g = _generator(seed)
            Q, d = 3, 4
            scores = 3 * torch.randn(Q, n_blocks * K, generator=g, dtype=torch.float64)
            if grow:  # the maximum grows block after block: the rescale is needed
                scores += torch.arange(n_blocks * K, dtype=torch.float64) / 2
            if seed == 3:  # a masked key in a later block, never a whole first block
                scores[:, K + 1] = float("-inf")
                scores[0, -1] = float("-inf")
            if seed == 4:  # as a causal mask leaves a query row in a block after it
                scores[1, K:2 * K] = float("-inf")
            v = torch.randn(n_blocks * K, d, generator=g, dtype=torch.float64)
            expected = torch.softmax(scores, dim=-1) @ v
            state = [torch.full((Q, 1), float("-inf"), dtype=torch.float64),
                     torch.zeros(Q, 1, dtype=torch.float64),
                     torch.zeros(Q, d, dtype=torch.float64)]
            mine = [s.clone() for s in state]
            wrong = {name: [s.clone() for s in state] for name in ("acc", "both", "block")}
            for b in range(n_blocks):
                block, v_block = scores[:, b * K:(b + 1) * K], v[b * K:(b + 1) * K]
                got = _call(candidate, *(s.clone() for s in state), block.clone(),
                            v_block.clone())
                if not isinstance(got, (tuple, list)) or len(got) != 3:
                    raise _Mismatch(f"expected (m, l, acc), got {type(got).__name__}",
                                    hint="return the three updated tensors: m, l, acc")
                mine = list(_step(*mine, block, v_block))
                wrong["acc"] = list(_step(*wrong["acc"], block, v_block, rescale_acc=False))
                wrong["both"] = list(_step(*wrong["both"], block, v_block,
                                           rescale_acc=False, rescale_l=False))
                wrong["block"] = list(_step(*wrong["block"], block, v_block,
                                            block_max=True))
                for i, (name, value, ref) in enumerate(zip(("m", "l", "acc"), got, mine)):
                    value = _require_tensor(value, ref, name, dtype=False)
                    _compare_values(value.double(), ref, atol=1e-9, rtol=1e-9,
                                    known_mistakes=[
                        (wrong["acc"][2], "rescale acc too: acc * exp(m_old - m_new) "
                                          "before adding p @ v_block"),
                        (wrong["both"][1], "rescale the old sums by exp(m_old - m_new) "
                                           "when the maximum grows"),
                        (wrong["block"][i], "take exp(scores - m_new), the running "
                                            "maximum: a row all -inf in a block gives "
                                            "-inf - (-inf) = NaN against its own maximum"),
                    ], default_hint="m_new = max(m, rowmax(scores)); l and acc times "
                                    "exp(m - m_new), plus the block's exp(scores - m_new)",
                        what=f"{name} after block {b + 1} of {n_blocks}")
                state = [value.double() for value in got]
            _compare_values(state[2] / state[1], expected, atol=1e-9, rtol=1e-9,
                            known_mistakes=[], default_hint="acc / l after the last block "
                            "must be softmax(scores) @ v", what="acc / l")
        return run

    cases = [_Case(label, make(*spec), "m and l are (Q, 1), acc (Q, d), scores (Q, K), "
                                       "v_block (K, d), all float64")
             for label, *spec in specs]
    return _run_cases("check_online_softmax_step", cases)


# ---------------------------------------------------------------- 2. accept or resample

def _residual(p, q):
    r = (p - q).clamp(min=0)
    return r / r.sum()


def _chi_square_p(counts, expected) -> float:
    """Pearson's chi-square p-value over the cells with a positive expectation."""
    keep = expected > 0
    stat = ((counts[keep] - expected[keep]) ** 2 / expected[keep]).sum()
    df = torch.tensor(int(keep.sum()) - 1, dtype=torch.float64)
    return torch.special.gammaincc(df / 2, stat / 2).item()


def _step_output(candidate, p, q, drafts, seed):
    got = _call(candidate, p, q, drafts, _generator(seed))
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        raise _Mismatch(f"expected (tokens, n_accepted), got {type(got).__name__}",
                        hint="return the tokens kept and drawn, and how many drafts were "
                             "kept")
    tokens, n = got
    if (not isinstance(tokens, torch.Tensor) or tokens.dim() != 1
            or tokens.is_floating_point()):
        raise _Mismatch(f"tokens: expected a 1-D tensor of ids, got {tokens!r:.60}",
                        hint="return torch.cat([draft_tokens[:n], new_token])")
    n = int(n)
    if len(tokens) != n + 1 or not torch.equal(tokens[:n].long(), drafts[:n].long()):
        raise _Mismatch(f"with n_accepted={n}, tokens {tokens.tolist()} must be the first "
                        f"{n} drafts {drafts.tolist()} and one token more",
                        hint="keep the drafts up to the first rejection, then add one "
                             "token")
    return tokens.long(), n


# γ = 2, rows that differ, so that a step reading the wrong row fails: the target's p
# (3, V) and the draft's q (2, V); token j of the output follows p_j.
P_ROWS = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.4, 0.1, 0.1, 0.4], [0.7, 0.1, 0.1, 0.1]],
                      dtype=torch.float64)
Q_ROWS = torch.tensor([[0.4, 0.3, 0.2, 0.1], [0.25, 0.25, 0.25, 0.25]], dtype=torch.float64)
DRAWS = 2_000  # the wrong rules' laws are far from p: each fails at p < 1e-12
BONUS_DRAWS = 400


def _law_mismatch(tokens: list[int], p: torch.Tensor, what: str, hint: str) -> None:
    """A _Mismatch when Pearson's test rejects ``tokens`` as draws from ``p`` at 1e-6."""
    counts = torch.bincount(torch.tensor(tokens), minlength=len(p)).double()
    value = _chi_square_p(counts, len(tokens) * p)
    if value < 1e-6 or counts[p == 0].sum() > 0:
        shares = ", ".join(f"{c / len(tokens):.3f}" for c in counts.tolist())
        raise _Mismatch(f"{what}: shares [{shares}] over {len(tokens):,} draws, the law is "
                        f"{p.tolist()}: Pearson's chi-square p-value {value:.1e}",
                        hint=hint)


def check_accept_or_resample(candidate) -> bool:
    """Check ``accept_or_resample(p, q, draft_tokens, generator)`` -> ``(tokens,
    n_accepted)``: keep draft x_i with probability min(1, p_i(x_i) / q_i(x_i)); at the first
    rejection draw from norm(max(0, p_i - q_i)) and stop; after γ kept, a bonus from
    p_γ+1. The drafts must be kept as often as that rule keeps them, Σ min(p_i, q_i)."""
    F64 = torch.float64

    def all_kept() -> None:
        p = torch.tensor([[0.1, 0.1, 0.4, 0.4], [0.3, 0.3, 0.2, 0.2], [0.0, 0.0, 0.3, 0.7]],
                         dtype=F64)  # rows that differ: p_2 / q_1 keeps only some drafts
        g, bonuses = _generator(7), []
        for seed in range(BONUS_DRAWS):
            drafts = torch.multinomial(p[:2], 1, generator=g)[:, 0]
            tokens, n = _step_output(candidate, p, p[:2].clone(), drafts, seed)
            if n != 2:
                raise _Mismatch(f"p == q at both drafts, yet n_accepted={n} of 2",
                                hint="keep x with probability min(1, p(x) / q(x)): 1 here")
            bonuses.append(int(tokens[2]))
        _law_mismatch(bonuses, p[2], "the bonus token after both drafts were kept",
                      "draw the bonus from p[-1] = p_γ+1 (the last row of p, not q's, not "
                      "p[0]), with torch.multinomial: a draw, not the arg-max")

    def certain_rejection() -> None:
        p = torch.tensor([[0.0, 0.0, 0.5, 0.5], [0.25] * 4], dtype=F64)
        q = torch.tensor([[0.5, 0.5, 0.0, 0.0]], dtype=F64)
        for seed in range(20):
            tokens, n = _step_output(candidate, p, q, torch.tensor([0]), seed)
            if n != 0 or tokens[0] not in (2, 3):
                raise _Mismatch(f"p(x) = 0 for the draft x = 0, so it must be rejected and "
                                f"the new token drawn where p > q (2 or 3); got tokens "
                                f"{tokens.tolist()}, n_accepted={n}",
                                hint="after a rejection draw from norm(max(0, p - q)), not "
                                     "from q")

    def certain_residual() -> None:
        p = torch.tensor([[0.4, 0.6], [0.5, 0.5]], dtype=F64)
        q = torch.tensor([[0.8, 0.2]], dtype=F64)
        for seed in range(60):
            tokens, n = _step_output(candidate, p, q, torch.tensor([0]), seed)
            if n == 0 and tokens[0] != 1:
                raise _Mismatch("after rejecting x = 0 (p = 0.4 < q = 0.8) the token must "
                                "be 1, the only one with p > q; got 0",
                                hint="the residual is max(0, p - q) normalized: [0, 1] here"
                                     "; drawing from p again is the usual slip")

    def law() -> None:
        g, outputs, kept = _generator(16), [], []
        for i in range(DRAWS):
            drafts = torch.multinomial(Q_ROWS, 1, generator=g)[:, 0]  # (γ,)
            tokens, n = _step_output(candidate, P_ROWS, Q_ROWS, drafts, 1000 + i)
            outputs.append(tokens)
            kept.append(int(n))
        for j in range(3):  # token j exists when the first j drafts were kept
            _law_mismatch([int(out[j]) for out in outputs if len(out) > j], P_ROWS[j],
                          f"output token {j + 1} (of the outputs that have one)",
                          "use row i of p and q for draft i; keep with probability "
                          "min(1, p_i(x)/q_i(x)) (not p_i(x)); after a rejection draw "
                          "from norm(max(0, p_i - q_i)), not from q_i or p_i")
        beta = torch.minimum(P_ROWS[:2], Q_ROWS).sum(-1)  # (γ,): draft i's chance to stay
        reach = torch.cat([beta.new_ones(1), beta.cumprod(0)])  # (γ + 1,): P(n >= k)
        _law_mismatch(kept, reach - torch.cat([reach[1:], beta.new_zeros(1)]),
                      "n_accepted, the number of drafts kept (its law: P(n = 0, 1, 2))",
                      "keep draft i with probability min(1, p_i(x)/q_i(x)), one uniform "
                      "draw per draft: then it stays with probability Σ min(p_i, q_i); "
                      "a rule that keeps fewer (drawing y from p_i and keeping x if y == "
                      "x keeps Σ p_i q_i) can give the right tokens and still lose speed")

    cases = [_Case(f"p == q at the drafts: every draft is kept, and the bonus over "
                   f"{BONUS_DRAWS} draws follows p_γ+1", all_kept),
             _Case("p(x) = 0 at the draft: rejected, and the residual's support is "
                   "disjoint from q's", certain_rejection),
             _Case("a rejection leaves one token where p > q", certain_residual),
             _Case(f"γ = 2, rows that differ: over {DRAWS:,} draws each output token j "
                   "follows p_j, and the drafts are kept as often as min(1, p/q) keeps "
                   "them", law)]
    hint = ("p is a (γ + 1, V) tensor, q (γ, V), draft_tokens (γ,) int64, generator a "
            "torch.Generator")
    for case in cases:
        case.error_hint = hint
    cases[0].error_hint = ("with p == q nothing may be rejected, so no residual is drawn "
                           "(it is all zeros): keep x with probability min(1, p(x) / q(x))")
    return _run_cases("check_accept_or_resample", cases)


# ---------------------------------------------------------------- 3. absmax quantization

def _absmax(w, bits, divide=True, rounding=torch.round, per_row=True, absolute=True):
    top = 2 ** (bits - 1) - 1
    size = w.abs() if absolute else w
    peak = size.amax(dim=1, keepdim=True) if per_row else size.amax().expand(len(w), 1)
    scale = (peak / top if divide else peak).clamp(min=torch.finfo(torch.float32).eps)
    q = rounding(w / scale).clamp(-top, top).to(torch.int8)
    return q, scale


def check_absmax_quantize(candidate) -> bool:
    """Check ``absmax_quantize(w, bits)`` -> ``(q, scale)``: per row s = max|w_row| / q_max
    (q_max = 2^(bits-1) - 1) as float32 (out, 1), q = round(w / s) clamped to ±q_max as int8
    (out, in); a row of zeros gets s = float32's eps. Then q * scale is within s / 2 of
    w. The clamp cannot be checked: with the row's own absmax scale |w / s| <= q_max
    already (and the eps floor only makes s larger), so it never acts here."""
    specs = [("8 bits, 4 rows of 16", 8, 1, False), ("4 bits, 6 rows of 8", 4, 2, False),
             ("8 bits, a row of zeros and a row of one large weight", 8, 3, True)]

    def make(bits: int, seed: int, odd_rows: bool) -> Callable[[], None]:
        def run() -> None:
            g = _generator(seed)
            w = torch.randn(4 if bits == 8 else 6, 16 if bits == 8 else 8, generator=g)
            w[0] -= 0.5  # a row whose largest magnitude is negative
            if odd_rows:
                w[1] = 0.0
                w[2] = 0.01 * w[2]
                w[2, 3] = 5.0
            q_ref, s_ref = _absmax(w, bits)
            got = _call(candidate, w.clone(), bits)
            if not isinstance(got, (tuple, list)) or len(got) != 2:
                raise _Mismatch(f"expected (q, scale), got {type(got).__name__}",
                                hint="return the int8 integers and the scales")
            q, scale = got
            scale = _require_tensor(scale, s_ref, "scale",
                                    shape_hint="one scale per row: shape (out, 1)",
                                    dtype_hint="keep the scale float32, as w is")
            # relative only: a floor other than eps (e.g. 1e-7) fails the row of zeros
            _compare_values(scale, s_ref, atol=0.0, rtol=1e-6, known_mistakes=[
                (_absmax(w, bits, divide=False)[1], "divide the largest magnitude by q_max "
                                                    f"({2 ** (bits - 1) - 1} here)"),
                (_absmax(w, bits, per_row=False)[1], "one scale per row (max over dim=1), "
                                                     "not one for the whole matrix"),
                (_absmax(w, bits, absolute=False)[1], "take the largest |w|: a row's "
                                                      "extreme may be negative"),
            ], default_hint="scale = w.abs().amax(dim=1, keepdim=True) / q_max, at least "
                            "torch.finfo(torch.float32).eps", what="scale")
            q = _require_tensor(q, q_ref, "q",
                                dtype_hint="store q as int8: .to(torch.int8)")
            _compare_values(q, q_ref, atol=0, rtol=0, known_mistakes=[
                (_absmax(w, bits, rounding=torch.trunc)[0], "round to the nearest integer "
                 "(torch.round); .to(torch.int8) alone rounds toward zero"),
            ], default_hint="q = round(w / scale), clamped to [-q_max, q_max]", what="q")
            error = (w - q.float() * scale).abs()
            if (error > scale / 2 + 1e-6).any():
                raise _Mismatch("some |w - q scale| exceeds half a step, scale / 2",
                                hint="round to the nearest step")
        return run

    cases = [_Case(label, make(*spec), "w is a float32 (out, in) tensor, bits 8 or 4")
             for label, *spec in specs]
    return _run_cases("check_absmax_quantize", cases)
