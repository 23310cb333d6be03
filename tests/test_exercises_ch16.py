"""The checks of Chapter 16's exercises: each passes a correct solution (the book's, and the
package's own function where it has one) and catches the typical mistakes, naming them."""

from __future__ import annotations

import torch

from gpt_from_scratch import exercises as ex
from gpt_from_scratch.quantize import absmax_quantize as package_absmax
from gpt_from_scratch.speculative import accept_or_resample as package_accept
from gpt_from_scratch.tiled_attention import online_softmax_step as package_step
from test_exercises_chapters import fails, passes  # one pair of checker assertions


# ------------------------------------------------------------------ 1. the online softmax
def online_step(m, l, acc, scores, v, rescale_acc=True, rescale_l=True, grow=True,
                block_max=False):
    m_new = torch.maximum(m, scores.amax(-1, keepdim=True)) if grow else torch.where(
        torch.isinf(m), scores.amax(-1, keepdim=True), m)
    alpha = torch.exp(m - m_new)
    if block_max:  # FlashAttention-2's form: exp(s - the block's max), then rescaled
        m_block = scores.amax(-1, keepdim=True)
        p = torch.exp(scores - m_block) * torch.exp(m_block - m_new)
    else:
        p = torch.exp(scores - m_new)
    l_new = (alpha * l if rescale_l else l) + p.sum(-1, keepdim=True)
    return m_new, l_new, (alpha * acc if rescale_acc else acc) + p @ v


def test_online_softmax_step(capsys):
    passes(ex.check_online_softmax_step, online_step, capsys)
    passes(ex.check_online_softmax_step, package_step, capsys)
    fails(ex.check_online_softmax_step,
          lambda *a: online_step(*a, rescale_acc=False), capsys, "case 1 of 4",
          "rescale acc too")
    fails(ex.check_online_softmax_step,
          lambda *a: online_step(*a, rescale_acc=False, rescale_l=False), capsys,
          "rescale the old sums")
    fails(ex.check_online_softmax_step, lambda *a: online_step(*a, grow=False), capsys,
          "case 1 of 4")  # the first block's maximum kept: wrong once a larger score comes
    fails(ex.check_online_softmax_step, lambda *a: online_step(*a)[1:], capsys,
          "expected (m, l, acc)")


def test_a_step_that_gives_nan_on_a_row_masked_in_a_later_block_fails(capsys):
    """exp(scores - rowmax(block)) equals the right step wherever a block has a finite
    score, and is NaN for a row all -inf: a causal tiling (block_q=4, block_k=5, T=17)
    has such rows. Only case 4 has one."""
    fails(ex.check_online_softmax_step, lambda *a: online_step(*a, block_max=True),
          capsys, "case 4 of 4", "-inf - (-inf) = NaN")


# ------------------------------------------------------------------ 2. accept or resample
def accept(p, q, drafts, generator, keep="ratio", resample="residual"):
    for i, x in enumerate(drafts.tolist()):
        chance = p[i, x] / q[i, x] if keep == "ratio" else p[i, x]
        if torch.rand((), generator=generator, dtype=p.dtype) < chance:
            continue
        law = {"residual": (p[i] - q[i]).clamp(min=0), "q": q[i], "p": p[i]}[resample]
        new = torch.multinomial(law / law.sum(), 1, generator=generator)
        return torch.cat([drafts[:i], new]), i
    bonus = torch.multinomial(p[-1], 1, generator=generator)
    return torch.cat([drafts, bonus]), len(drafts)


def test_accept_or_resample(capsys):
    passes(ex.check_accept_or_resample, accept, capsys)
    passes(ex.check_accept_or_resample, package_accept, capsys)
    fails(ex.check_accept_or_resample, lambda *a: accept(*a, resample="q"), capsys,
          "case 2 of 4", "not from q")
    fails(ex.check_accept_or_resample, lambda *a: accept(*a, resample="p"), capsys,
          "case 3 of 4", "drawing from p again")
    fails(ex.check_accept_or_resample, lambda *a: accept(*a, keep="p"), capsys,
          "case 1 of 4", "min(1, p(x) / q(x))")


def test_a_wrong_acceptance_that_passes_the_certain_cases_fails_the_chi_square(capsys):
    """Keeping with probability min(1, p/q)^2 keeps every draft when p >= q (cases 1 to 3
    cannot tell): only the distribution shows it."""
    def squared(p, q, drafts, generator):
        for i, x in enumerate(drafts.tolist()):
            if torch.rand((), generator=generator, dtype=p.dtype) < min(
                    1.0, float(p[i, x] / q[i, x])) ** 2:
                continue
            law = (p[i] - q[i]).clamp(min=0)
            new = torch.multinomial(law / law.sum(), 1, generator=generator)
            return torch.cat([drafts[:i], new]), i
        return torch.cat([drafts, torch.multinomial(p[-1], 1, generator=generator)]), \
            len(drafts)
    fails(ex.check_accept_or_resample, squared, capsys, "case 4 of 4", "chi-square")


def test_a_rule_with_the_right_tokens_that_keeps_too_few_drafts_fails(capsys):
    """Draw y from p_i, keep x if y == x, else emit y: every token follows p, but a draft
    stays with probability Σ p_i q_i, not Σ min(p_i, q_i) (review 4, L3: it passed the four
    cases, which judged only the tokens). p == q is kept, to pass case 1."""
    def compare_with_a_draw(p, q, drafts, generator):
        for i, x in enumerate(drafts.tolist()):
            if torch.equal(p[i], q[i]):
                continue
            y = torch.multinomial(p[i], 1, generator=generator)  # (1,)
            if int(y) != x:
                return torch.cat([drafts[:i], y]), i
        return torch.cat([drafts, torch.multinomial(p[-1], 1, generator=generator)]), \
            len(drafts)
    fails(ex.check_accept_or_resample, compare_with_a_draw, capsys, "case 4 of 4",
          "n_accepted, the number of drafts kept", "Σ p_i q_i")


def wrong_rows(p, q, drafts, generator, row="i", bonus="last"):
    """The right rule with one index wrong: row 0 for every draft, q's row 0 for every
    draft, or the bonus drawn from another row (or its arg-max)."""
    for i, x in enumerate(drafts.tolist()):
        r = 0 if row == "0" else i
        q_row = 0 if row == "q0" else r
        if torch.rand((), generator=generator, dtype=p.dtype) < p[r, x] / q[q_row, x]:
            continue
        law = (p[r] - q[r]).clamp(min=0)
        return torch.cat([drafts[:i], torch.multinomial(law / law.sum(), 1,
                                                        generator=generator)]), i
    extra = {"last": lambda: torch.multinomial(p[-1], 1, generator=generator),
             "p0": lambda: torch.multinomial(p[0], 1, generator=generator),
             "q": lambda: torch.multinomial(q[-1], 1, generator=generator),
             "argmax": lambda: p[-1].argmax()[None]}[bonus]()
    return torch.cat([drafts, extra]), len(drafts)


def test_wrong_rows_and_wrong_bonuses_fail(capsys):
    """The slips that the first version of the checker passed (review H2)."""
    passes(ex.check_accept_or_resample, wrong_rows, capsys)
    fails(ex.check_accept_or_resample, lambda *a: wrong_rows(*a, row="0"), capsys,
          "case 4 of 4", "output token 2")
    fails(ex.check_accept_or_resample, lambda *a: wrong_rows(*a, row="q0"), capsys,
          "case 1 of 4", "with p == q nothing may be rejected")  # q_1 for every draft
    for bonus in ("p0", "q", "argmax"):
        fails(ex.check_accept_or_resample, lambda *a: wrong_rows(*a, bonus=bonus), capsys,
              "case 1 of 4", "the bonus token", "not the arg-max")


# ------------------------------------------------------------------ 3. absmax quantization
def absmax(w, bits, divide=True, rounding=torch.round, per_row=True,
           floor=torch.finfo(torch.float32).eps):
    top = 2 ** (bits - 1) - 1
    peak = (w.abs().amax(dim=1, keepdim=True) if per_row
            else w.abs().amax().expand(len(w), 1))
    scale = (peak / top if divide else peak).clamp(min=floor)
    return rounding(w / scale).clamp(-top, top).to(torch.int8), scale


def test_absmax_quantize(capsys):
    passes(ex.check_absmax_quantize, absmax, capsys)
    passes(ex.check_absmax_quantize,
           lambda w, b: (package_absmax(w, b).values(), package_absmax(w, b).scale),
           capsys)
    fails(ex.check_absmax_quantize, lambda w, b: absmax(w, b, divide=False), capsys,
          "divide the largest magnitude by q_max")
    fails(ex.check_absmax_quantize, lambda w, b: absmax(w, b, rounding=torch.trunc), capsys,
          "rounds toward zero")
    fails(ex.check_absmax_quantize, lambda w, b: absmax(w, b, per_row=False), capsys,
          "one scale per row")
    fails(ex.check_absmax_quantize, lambda w, b: (absmax(w, b)[0].float(), absmax(w, b)[1]),
          capsys, "int8")
    fails(ex.check_absmax_quantize, lambda w, b: (absmax(w, b)[0], absmax(w, b)[1][:, 0]),
          capsys, "shape (out, 1)")
    fails(ex.check_absmax_quantize, lambda w, b: absmax(w.double(), b), capsys,
          "keep the scale float32")
    fails(ex.check_absmax_quantize, lambda w, b: absmax(w, b, floor=1e-7), capsys,
          "case 3 of 3", "at least torch.finfo(torch.float32).eps")
