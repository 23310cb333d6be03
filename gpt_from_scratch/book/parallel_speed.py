"""Chapter 15 — the speed lesson and its sentences, from what the processes timed.

After backward, buckets are waited for a shorter time than one all-reduce per parameter,
round by round (``speed_lesson``); why two processes on two cores are not twice as fast
(CPU time against wall time: the wait for a core, measured), what the overlap with backward
hid (``overlap_text``) and what a GPU cluster's links would change (``cluster_text``).
``parallel_prose`` holds the chapter's other lessons.
"""

from __future__ import annotations

import math
import statistics

from .lessons import Lesson, lesson
from .parallel_prose import ms


def _median(values) -> float:
    return statistics.median(values) if values else math.nan


def step_parts(rounds: list[list[tuple]]) -> tuple[list[float], list[float]]:
    """The median of each part (forward and backward, wait, AdamW) over every step of
    ``rounds``, and each round's median step (the sum of its parts)."""
    if not rounds or not all(rounds):
        raise ValueError("step_parts: no steps were timed: pass a list per round of "
                         "(seconds, seconds, seconds) per step")
    steps = [step for round_ in rounds for step in round_]
    return ([_median([step[i] for step in steps]) for i in range(3)],
            [_median([sum(step) for step in round_]) for round_ in rounds])


def _rounds(speed: dict, kind: str, part: int | None = None) -> list[float]:
    """Each round's median step of ``kind`` (``part``: of that part alone)."""
    return [_median([sum(step) if part is None else step[part] for step in round_])
            for round_ in speed[kind]]


def _ratios(a: list[float], b: list[float]) -> list[float]:
    return [x / y for x, y in zip(a, b)]


def _spread(ratios: list[float]) -> str:
    return (f"{_median(ratios):.1f} times as long (the median of the rounds; "
            f"{min(ratios):.1f} to {max(ratios):.1f})")


def speed_lesson(speed: dict, alpha: float, beta: float, grad_bytes: int) -> Lesson:
    """``speed``: rank 0's timings (``parallel_timing.speed``); ``alpha``, ``beta``: the
    ring's fitted model; ``grad_bytes``: the bytes of the gradients each step averages.
    The verdict: after backward, the buckets' all-reduces are waited for a shorter time
    than one per parameter, round by round; the overlap is measured, and judged only in
    words, since two busy cores may leave it nothing to hide."""
    (fb_a, _, adam_a), alone = step_parts(speed["alone"])
    (fb_t, wait_t, adam_t), together = step_parts(speed["together"])
    (fb_b, wait_b, _), after = step_parts(speed["buckets after"])
    (fb_p, wait_p, _), per_param = step_parts(speed["per parameter"])
    cpu = {kind: _median(seconds) for kind, seconds in speed["cpu"].items()}
    share, share_cpu = _median(speed["alone shares"]), _median(speed["alone shares cpu"])
    ratios = _ratios(alone, together)  # round by round
    messages = speed["messages"]  # all-reduces a step, each kind
    model = {kind: m * 2 * alpha + grad_bytes / beta for kind, m in messages.items()}
    queued = fb_t - cpu["together"]  # wall time not on a core: waiting for one
    busy = (f"Beside the other process, a share's forward and backward ran "
            f"{ms(cpu['together'])} on a core (its thread's CPU time) of the "
            f"{ms(fb_t)} it took: {ms(queued)}, {queued / fb_t:.0%}, waiting for a core"
            + (", so the pair did not have two free cores. " if queued > 0.1 * fb_t
               else ". "))
    said = (busy + f"Over {len(ratios)} rounds, a step alone took {ms(_median(alone))} "
            f"(the median; {ms(min(alone))} to {ms(max(alone))}), together "
            f"{ms(_median(together))} ({ms(min(together))} to {ms(max(together))}): two "
            f"processes were {speedup_of(speed):.1f} times as fast ({min(ratios):.1f} to "
            f"{max(ratios):.1f} round by round). ")
    half = (fb_a + adam_a) / 2
    step_t = fb_t + wait_t + adam_t
    why = (f"In the medians of its parts, a step together took {ms(step_t)}; half the "
           f"step alone, {ms(half)}, falls short of it by {ms(step_t - half)}. Of that, "
           f"AdamW run whole in every process took {_signed(adam_t - adam_a / 2)} "
           f"({ms(adam_t)} against half of {ms(adam_a)}); the wait in `finish()` for the "
           f"buckets still in flight {_signed(wait_t)}; one share's forward and backward "
           f"{_signed(fb_t - fb_a / 2)} ({ms(fb_t)} beside the other process, against "
           f"{ms(fb_a / 2)}, half of both shares' {ms(fb_a)} alone). Alone, one share "
           f"took {ms(share)}, {ms(share_cpu)} of it on a core; together, "
           f"{ms(abs(cpu['together'] - share_cpu))} "
           f"{'more' if cpu['together'] >= share_cpu else 'less'} on a core (copying "
           "the gradients into the buckets, starting their all-reduces, a cache shared "
           f"with the other process) and {ms(queued)} waiting for one. ")
    alone_ar = speed["all-reduces alone"]
    why += (f"Timed alone between two barriers (the median of several tries), the "
            f"{messages['together']} bucketed all-reduces took {ms(alone_ar['together'])} "
            f"and the {messages['per parameter']} per-parameter ones "
            f"{ms(alone_ar['per parameter'])}. The ring's model of section 15.2 gives "
            f"{ms(model['together'])} and {ms(model['per parameter'])} (2α each, and "
            f"{grad_bytes:,} bytes over β): a best case, fitted to the fastest of each "
            f"size's tries, which the medians here exceed "
            f"{alone_ar['together'] / model['together']:.1f} and "
            f"{alone_ar['per parameter'] / model['per parameter']:.1f} times. ")
    waits = _ratios(_rounds(speed, "per parameter", 1), _rounds(speed, "buckets after", 1))
    steps = _ratios(per_param, after)
    bucketing = (f"Both after backward, the wait in `finish()` took {ms(wait_b)} for the "
                 f"{messages['together']} buckets and {ms(wait_p)} for the "
                 f"{messages['per parameter']} per-parameter all-reduces, "
                 f"{_spread(waits)}; a whole step {ms(_median(after))} against "
                 f"{ms(_median(per_param))}, {_spread(steps)}, the forward and backward "
                 "passes adding their own noise.")
    return lesson("after backward, buckets wait less than one all-reduce per parameter",
                  _median(waits) - 1, "times", said + why + bucketing,
                  said + why + bucketing + " The buckets saved no wait here: their "
                  "all-reduces cost the latency fewer times, so on this machine something "
                  "else than the latency (waiting for a core, the other rank's backward) "
                  "decided the wait.")


def speedup_of(speed: dict) -> float:
    """Two processes' speed-up: the median over the rounds of a step alone over together."""
    return _median(_ratios(step_parts(speed["alone"])[1], step_parts(speed["together"])[1]))


def overlap_text(speed: dict) -> str:
    """What sending the buckets during backward hid, against the same buckets after it:
    said to be nothing measurable unless every round shows it."""
    (fb_t, wait_t, _), together = step_parts(speed["together"])
    (fb_b, wait_b, _), after = step_parts(speed["buckets after"])
    steps = _ratios(after, together)
    queued = 1 - _median(speed["cpu"]["together"]) / fb_t  # of backward, waiting for a core
    moved = (f"Sent during backward, the same buckets left {ms(wait_t)} of wait in "
             f"`finish()` against {ms(wait_b)} after it, while the forward and backward "
             f"passes took {ms(fb_t)} against {ms(fb_b)}; a step took "
             f"{ms(_median(together))} against {ms(_median(after))}: with the buckets "
             f"after backward, {_spread(steps)}. ")
    if min(steps) > 1:
        return moved + (f"The overlap hid {ms(_median(after) - _median(together))} a "
                        "step, in every round: the all-reduces ran on a core backward "
                        "did not need.")
    return moved + ("The overlap hid nothing measurable here: some rounds were as fast "
                    "or faster without it. "
                    + (f"Backward already spent {queued:.0%} of its time waiting for a "
                       "core, and the all-reduces' copies and sums need one too. "
                       if queued > 0.1 else "")
                    + "With a core (or, on a GPU, a network card and copy engines) to "
                    "spare, the same overlap hides the sending behind the computation.")


def _signed(seconds: float) -> str:
    return f"{1e3 * seconds:+.1f} ms"


def cluster_text(allreduce_ms: dict[str, float], compute_ms: float) -> str:
    """``allreduce_ms``: where -> the gradients' all-reduce time at the link's speed."""
    shares = ", ".join(f"{ms / compute_ms:.0%} of it on {where}"
                       for where, ms in allreduce_ms.items())
    small = max(allreduce_ms.values()) < 0.2 * compute_ms
    return (f"Against the step's computation, {compute_ms:.0f} ms, a ring all-reduce of "
            f"its gradients takes at least {shares}: the bytes over the links alone, "
            "before any latency, at the links' full speed. "
            + ("A small part in both, even between servers: there only because NCCL "
               "spreads the bytes over every card of a server." if small else
               "Where that is a large part, only the overlap with the backward pass keeps "
               "the GPUs busy."))
