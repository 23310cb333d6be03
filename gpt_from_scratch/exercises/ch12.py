"""Checkers for the exercises of Chapter 12 (an assistant): ``check_mask_prompt``, ``check_render``,
``check_dpo_loss``."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from .core import _Case, _call, _compare_values, _generator, _Mismatch, _require_tensor, _run_cases

__all__ = ["check_mask_prompt", "check_render", "check_dpo_loss"]

IGNORE = -100


def _targets(ids, n_prompt: int, first_kept: int):
    kept = torch.arange(1, len(ids)) >= first_kept
    return torch.where(kept, ids[1:], torch.full_like(ids[1:], IGNORE))


def check_mask_prompt(candidate) -> bool:
    """Check ``mask_prompt(ids, n_prompt)`` -> targets (T - 1,): for ids (T,) whose first
    ``n_prompt`` tokens are the prompt, ``targets[t] = ids[t + 1]`` when ``ids[t + 1]`` is an answer
    token, else -100."""
    specs = [("ids of 10 tokens, a prompt of 4", 10, 4, 1), ("ids of 25 tokens, a prompt of 20", 25, 20, 2),
             ("ids of 6 tokens, a prompt of 1 (everything after the first token is answer)", 6, 1, 3)]

    def make(T: int, n_prompt: int, seed: int) -> Callable[[], None]:
        def run() -> None:
            ids = torch.randint(50, (T,), generator=_generator(seed))
            expected = _targets(ids, n_prompt, n_prompt)
            got = _require_tensor(_call(candidate, ids.clone(), n_prompt), expected, "targets",
                                  shape_hint="the targets are shifted: one fewer than the ids, (T - 1,)")
            _compare_values(got, expected, atol=0, rtol=0, known_mistakes=[
                (_targets(ids, n_prompt, n_prompt + 1), "the first answer token is a target too: the last "
                                                        "prompt position predicts it"),
                (_targets(ids, n_prompt, n_prompt - 1), "the last prompt token is no target: mask every "
                                                        "target that is a prompt token"),
                (ids[1:], "set the prompt's targets to -100"),
            ], default_hint="targets = ids[1:], with -100 where the position t + 1 < n_prompt",
                what="targets")
        return run

    cases = [_Case(label, make(*spec), "ids is a 1-D int64 tensor; return a tensor of T - 1 targets")
             for label, *spec in specs]
    return _run_cases("check_mask_prompt", cases)


MARKERS = {"user": 100, "assistant": 101, "end": 102}


def _render(messages, encode, markers, end_in_mask=True, opener_in_mask=False, end_after_user=True):
    ids, mask = [], []
    for m in messages:
        body = encode(m["content"])
        ours = m["role"] == "assistant"
        ids += [markers[m["role"]]] + body
        mask += [int(ours and opener_in_mask)] + [int(ours)] * len(body)
        if ours or end_after_user:
            ids.append(markers["end"])
            mask.append(int(ours and end_in_mask))
    return ids, mask


def check_render(candidate) -> bool:
    """Check ``render(messages, encode, markers)`` -> ``(ids, mask)``: each message is its role's
    marker id, its ``encode``d content and the end marker; ``mask`` is 1 on the assistant's content
    and its end marker, 0 elsewhere. ``markers`` maps "user", "assistant" and "end" to ids."""
    encode = lambda text: [ord(c) - 32 for c in text]  # noqa: E731  (a character tokenizer)
    specs = [
        ("one exchange", [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Good sir"}]),
        ("two exchanges", [{"role": "user", "content": "Repeat: O"}, {"role": "assistant", "content": "O"},
                           {"role": "user", "content": "Last word: a b"},
                           {"role": "assistant", "content": "b"}]),
        ("a user message alone", [{"role": "user", "content": "Who?"}]),
    ]

    def make(messages) -> Callable[[], None]:
        def run() -> None:
            expected = _render(messages, encode, MARKERS)
            got = _call(candidate, [dict(m) for m in messages], encode, dict(MARKERS))
            if not (isinstance(got, tuple) and len(got) == 2):
                raise _Mismatch(f"expected a pair (ids, mask), got {type(got).__name__}",
                                hint="return ids, mask: two lists of the same length")
            ids, mask = (list(map(int, x)) for x in got)
            if ids != expected[0]:
                raise _Mismatch(f"ids: expected {expected[0]}", f"got:          {ids}",
                                hint="each message: its role's marker, the encoded content, then the end "
                                     "marker" if ids != _render(messages, encode, MARKERS,
                                                                end_after_user=False)[0]
                                else "the user's turn ends with the end marker too")
            wrong = {"the end marker after the assistant's text is in the mask (1): it is how the "
                     "model learns to stop": _render(messages, encode, MARKERS, end_in_mask=False)[1],
                     "the assistant marker is 0: it comes from the template, the model never has to "
                     "write it": _render(messages, encode, MARKERS, opener_in_mask=True)[1],
                     "mark the assistant's tokens with 1": [0] * len(ids)}
            if mask != expected[1]:
                hint = next((h for h, m in wrong.items() if m == mask), "1 on the assistant's content "
                            "and its end marker, 0 on everything else")
                raise _Mismatch(f"mask: expected {expected[1]}", f"got:           {mask}", hint=hint)
        return run

    cases = [_Case(label, make(messages), "messages are dicts with 'role' and 'content'; encode(text) gives "
                                           "a list of ids; markers['user'] etc. are ints")
             for label, messages in specs]
    return _run_cases("check_render", cases)


def _dpo(pc, pr, rc, rr, beta):
    return -F.logsigmoid(beta * ((pc - rc) - (pr - rr))).mean()


def check_dpo_loss(candidate) -> bool:
    """Check ``dpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta)`` -> the mean
    sigmoid DPO loss (a scalar tensor) from four (N,) tensors of summed log-probabilities."""
    specs = [("4 pairs, beta 0.1", 4, 0.1, 1), ("16 pairs, beta 0.5", 16, 0.5, 2),
             ("1 pair, beta 2.0, large log-probabilities", 1, 2.0, 3)]

    def make(n: int, beta: float, seed: int) -> Callable[[], None]:
        def run() -> None:
            g = _generator(seed)
            pc, pr, rc, rr = (-30 * torch.rand(n, generator=g, dtype=torch.float64) for _ in range(4))
            expected = _dpo(pc, pr, rc, rr, beta).float()
            got = _call(candidate, pc.float(), pr.float(), rc.float(), rr.float(), beta)
            got = _require_tensor(got, expected, "loss", dtype=False,
                                  shape_hint="return the mean over the pairs: a tensor of shape ()")
            z = beta * ((pc - rc) - (pr - rr))
            _compare_values(got, expected, atol=1e-4, rtol=1e-4, known_mistakes=[
                (_dpo(pc, pr, rc, rr, 1.0), "multiply the difference of log-ratios by beta"),
                (_dpo(pc, pr, 0 * rc, 0 * rr, beta), "subtract the reference's log-probabilities: the "
                                                     "rewards are log pi - log ref"),
                (_dpo(pr, pc, rr, rc, beta), "the chosen answer's log-ratio comes first: a positive "
                                             "margin must lower the loss"),
                ((-torch.sigmoid(z)).mean(), "take the log of the sigmoid: -log sigmoid(z) "
                                             "(F.logsigmoid)"),
                (-F.logsigmoid(z).sum(), "average over the pairs, do not sum"),
            ], default_hint="z = beta * ((pc - rc) - (pr - rr)); loss = -F.logsigmoid(z).mean()",
                what="loss")
        return run

    cases = [_Case(label, make(*spec), "the four inputs are (N,) tensors; beta is a float")
             for label, *spec in specs]
    return _run_cases("check_dpo_loss", cases)
