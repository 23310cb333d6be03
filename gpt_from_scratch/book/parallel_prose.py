"""Chapter 15 — the lessons and sentences, written from what the processes measured.

Four lessons, each with its margin: the ring's cost per byte falls with the message's size
(latency, then bandwidth); data parallelism ends with one process's weights, within a bar
far above float32 rounding and far below a real mistake; each scheme keeps the bytes a
parameter its formula gives; and two processes on two cores are not twice as fast as one
doing the same work. The timing sentences and the restart's are written from the run too.
"""

from __future__ import annotations

import math
import re

from .lessons import Lesson, lesson

PER_BYTE_BAR = 10  # the smallest message costs at least 10 times the largest per byte
WEIGHTS_BAR = 1e-3  # largest weight difference from one process, after a few AdamW steps
MEMORY_BAR = 0.02  # bytes a parameter within 2% of the formula, on every rank
SCHEMES = {"ddp": "unsharded", "zero1": "ZeRO-1", "zero3": "ZeRO-3"}  # state_bytes' names
FLOOR = 1e-12  # a difference of exactly zero is read as this, to take its logarithm


def _ms(seconds: float) -> str:
    return f"{1e3 * seconds:.1f} ms"


def _size(n_bytes: float) -> str:
    if n_bytes >= 1e9:
        return f"{n_bytes / 1e9:.1f} GB"
    return f"{n_bytes / 1e6:.1f} MB" if n_bytes >= 1e6 else f"{n_bytes / 1e3:.0f} kB"


def memory_text(sizes: dict[str, tuple], device_gb: float, n_devices: int) -> str:
    """``sizes``: name -> (parameters, bytes on one device, ZeRO-1 and ZeRO-3 on each of
    ``n_devices``, in GB), the book's models first."""
    if not sizes:
        raise ValueError("memory_text: no sizes: pass {name: (P, one, zero1, zero3)}")
    (small, (p_small, gb_small, *_)), *rest = sizes.items()
    fits = [(name, row) for name, row in rest if row[1] <= device_gb]
    too_big = [(name, row) for name, row in rest if row[1] > device_gb]
    text = (f"At 16 bytes a parameter, `{small}`'s {p_small:,} parameters need "
            f"{_size(1e9 * gb_small)}. ")
    if fits:
        name, (p, gb, *_) = fits[-1]
        text += (f"`{name}`, with {p / 1e6:,.0f}M parameters, needs {gb:.1f} GB: "
                 f"{gb / device_gb:.0%} of a device of {device_gb:g} GB, before any "
                 "activation. ")
    for name, (p, gb, zero1, zero3) in too_big:
        text += (f"{name}, {p / 1e9:.2f} billion parameters, needs {gb:.1f} GB: more than "
                 f"the device holds. Shared by {n_devices} devices, ZeRO-1 leaves "
                 f"{zero1:.1f} GB on each, ZeRO-3 {zero3:.1f} GB.")
    return text


def fit_ring(volume: list[float], seconds: list[float], N: int) -> tuple[float, float]:
    """The ring model ``t = 2(N - 1) alpha + volume / beta`` fitted to measured times, each
    weighed by 1/t (a relative error), no term negative; ``volume`` is the bytes each rank
    sent. Returns (alpha in seconds a step, beta in bytes a second)."""
    if len(volume) != len(seconds) or len(volume) < 2 or min(seconds) <= 0:
        raise ValueError(f"fit_ring: {len(volume)} volumes and {len(seconds)} times: pass "
                         "two or more sizes, each with its positive time")
    rows = [(1 / t, v / t) for v, t in zip(volume, seconds)]  # (a, b) -> a/t + b v/t = 1
    saa = sum(a * a for a, _ in rows)
    sbb = sum(b * b for _, b in rows)
    sab = sum(a * b for a, b in rows)
    sa, sb = sum(a for a, _ in rows), sum(b for _, b in rows)
    det = saa * sbb - sab * sab
    fixed, per_byte = -1.0, -1.0
    if det:
        fixed, per_byte = (sa * sbb - sb * sab) / det, (saa * sb - sab * sa) / det
    if fixed <= 0 or per_byte <= 0:  # one term alone
        fixed, per_byte = (0.0, sb / sbb) if fixed <= 0 else (sa / saa, 0.0)
    return fixed / (2 * (N - 1)), 1 / per_byte if per_byte > 0 else math.inf


def ring_lesson(rows: list[dict], alpha: float, beta: float) -> Lesson:
    """``rows``: the ring's measurements between two ranks, smallest size first (``sent``
    bytes, ``ring`` and ``gloo`` seconds)."""
    small, large = rows[0], rows[-1]
    cost = [row["ring"] / row["sent"] for row in (small, large)]  # seconds a byte sent
    ratio = cost[0] / cost[1]
    crossover = alpha * beta if math.isfinite(beta) else math.inf
    said = (f"Per byte sent, the ring's smallest tensor cost {1e9 * cost[0]:.1f} ns and "
            f"its largest {1e9 * cost[1]:.2f} ns: {ratio:.0f} times less. The fitted model "
            f"puts the latency at {1e6 * alpha:.0f} µs a step and the bandwidth at "
            f"{beta / 1e9:.2f} GB/s. ")
    why = (f"A message of {_size(crossover)} costs as much in latency as in bytes: smaller "
           "ones are paid mostly for being sent at all, which is why gradients travel in "
           "buckets. Gloo's own all-reduce took "
           f"{_ms(small['gloo'])} and {_ms(large['gloo'])} for the same two tensors.")
    return lesson("a message costs a latency, then bytes over a bandwidth",
                  math.log10(ratio / PER_BYTE_BAR), "decades",
                  said + why,
                  said + f"That is not the factor of {PER_BYTE_BAR} the chapter expects: "
                  "on a machine this busy, the times of small messages are mostly waiting "
                  "for a core, and the fit says little.")


def equivalence_lesson(differences: dict[str, float], grads: float, steps: int,
                       lr: float) -> Lesson:
    """``differences``: run -> largest weight difference from one process on the whole
    batch, after ``steps`` AdamW steps; ``"never averaged"`` is the mistake."""
    if "never averaged" not in differences or len(differences) < 2:
        raise ValueError("equivalence_lesson: pass the runs' differences and the one of "
                         "'never averaged', the mistake that sets the bar's other side")
    mistake = differences["never averaged"]
    runs = {run: d for run, d in differences.items() if run != "never averaged"}
    worst = max(runs.values())
    below = math.log10(WEIGHTS_BAR / max(worst, FLOOR))  # decades under the bar
    above = math.log10(mistake / WEIGHTS_BAR)  # decades over it
    margin = min(below, above)
    said = (f"After {steps} AdamW steps at a learning rate of {lr:g}, the weights of every "
            f"data-parallel run differ from one process's on the whole batch by at most "
            f"{worst:.1e}, the first step's gradients by {grads:.1e}; two processes that "
            f"never average differ by {mistake:.1e}. ")
    why = ("The small difference is float32 rounding: one process sums the whole batch's "
           "losses, two processes each half, then the halves, another order of the same "
           "sums. AdamW enlarges it: it divides each gradient by its own running size, "
           "so for a gradient near its ε the last bits move the step by a part of the "
           f"learning rate. The bar, {WEIGHTS_BAR:g}, is {below:.1f} decades above the one "
           f"and {above:.1f} below the other: data parallelism is one process's "
           "training, computed in two places.")
    return lesson("data parallelism equals one process on the whole batch", margin,
                  "decades", said + why,
                  said + f"Here the two are not separated by the bar of {WEIGHTS_BAR:g}: "
                  "with a gradient near AdamW's ε, rounding can move a step by a part of "
                  "the learning rate; fewer steps or a larger ε would narrow it.")


def memory_lesson(measured: dict[tuple[str, int], list[float]], formula: dict,
                  exact: bool) -> Lesson:
    """``measured``: (scheme, N) -> bytes a parameter on each rank; ``formula``: scheme ->
    N -> bytes a parameter; ``exact``: whether every rank's bytes equal ``state_bytes``."""
    if not measured:
        raise ValueError("memory_lesson: nothing measured: pass {(scheme, N): [bytes a "
                         "parameter, one per rank]}")
    worst, where = max((abs(b / formula[s](N) - 1), (s, N, b)) for (s, N), ranks in
                       measured.items() for b in ranks)
    s, N, b = where
    name = SCHEMES.get(s, s)
    said = (f"On every rank, at N = 2 and 4, each scheme kept its formula's bytes a "
            f"parameter to within {worst:.1%}: the farthest, {name} at N = {N}, "
            f"{b:.3f} against {formula[s](N):.3f}. ")
    why = ("ZeRO-1 gives each rank whole parameters, so its share of the moments is 1/N "
           "only to within a parameter; ZeRO-3 pads each block to a multiple of N; AdamW "
           "adds 4 bytes a tensor for its step count. "
           + ("Every rank's bytes equal those `state_bytes` computes from the shapes."
              if exact else "Some rank's bytes differ from those `state_bytes` computes: "
              "a tensor is kept that the formula does not count."))
    return lesson("each rank keeps the bytes its scheme's formula gives",
                  100 * (MEMORY_BAR - worst), "points", said + why,
                  said + f"That is beyond the {MEMORY_BAR:.0%} the chapter allows. " + why)


HALF = 0.55  # one share "took about half" the two shares' time alone up to this share


def _sharing(share: float, load: float, cores: int) -> str:
    """What one share taking ``share`` of the time both shares took alone says."""
    if share > 1:
        return (f"more than both shares alone: other programs kept the cores busy (a load "
                f"of {load:.1f} on {cores} cores over the last minute), and the second "
                "process competed with them for a core")
    return ("not half: the two processes share the machine's memory and caches, and the "
            "buckets' all-reduces run beside the backward pass on the same cores")


def fastest(steps: list[tuple[float, float, float]]) -> list[float]:
    """The parts (forward and backward, wait, AdamW) of the fastest of ``steps``: other
    programs on the machine can only slow a step down."""
    if not steps:
        raise ValueError("fastest: no steps were timed: pass (seconds, seconds, seconds) "
                         "for each step")
    return list(min(steps, key=sum))


def speed_lesson(alone: list[float], together: list[float], per_parameter: list[float],
                 alpha: float, beta: float, P: int, load: tuple[float, int]) -> Lesson:
    """Seconds of (forward and backward, wait in ``finish()``, AdamW) in the fastest step:
    ``alone`` (both shares in one process), ``together`` (bucketed), ``per_parameter``;
    ``load``: the machine's load average over the last minute and its number of cores."""
    speedup = sum(alone) / sum(together)
    share = together[0] / alone[0]
    predicted = 2 * alpha + 4 * P / beta  # every gradient in one all-reduce, N = 2
    said = (f"Alone, the fastest step took {_ms(sum(alone))}: {_ms(alone[0])} of forward "
            f"and backward for the two shares, {_ms(alone[2])} of AdamW. Together, "
            f"{_ms(sum(together))}: {_ms(together[0])} of forward and backward for one "
            f"share, {_ms(together[1])} waiting for the last buckets, {_ms(together[2])} "
            f"of AdamW. Two processes were {speedup:.2f} times as fast. ")
    reasons = [f"every process repeats AdamW's whole step, {_ms(together[2])} that no "
               "second process shortens (ZeRO-1 would split it)",
               f"the gradients travel: {_ms(together[1])} of waiting remained after the "
               f"overlap, where the ring model of section 15.2 gives {_ms(predicted)} for "
               f"all {4 * P:,} bytes at once"]
    if share > HALF:
        reasons.insert(1, f"one share took {share:.0%} of the two shares' time alone, "
                          + _sharing(share, *load))
    why = (f"What keeps it under 2: {'; '.join(reasons)}. With one all-reduce per "
           f"parameter after the backward pass instead, nothing ran beside the forward and "
           f"backward ({_ms(per_parameter[0])}), but the wait took "
           f"{_ms(per_parameter[1])}: {_ms(sum(per_parameter))} a step.")
    return lesson("two processes on two cores are not twice as fast", 2 - speedup, "times",
                  said + why,
                  said + "Here the two processes came close to, or beyond, twice as fast: "
                  "the one process was slowed by something the two were not (another "
                  "program on the machine). " + why)


AGENT_LINE = re.compile(r"^[IWE]\d{4} [\d:.]+ \d+ \S+\] (?:\[default\] )?(.*)$")
KEEP = ("failed (exitcode", "will restart", "Sending process", "successfully finished")


def torchrun_lines(log: str) -> list[str]:
    """torchrun's own account of a run, from its log: what failed, what it ended, what it
    restarted (process ids and file paths left out)."""
    lines = []
    for line in log.splitlines():
        match = AGENT_LINE.match(line)
        if match and any(k in match[1] for k in KEEP):
            said = re.sub(r" \(pid: \d+\)| of binary: \S+|process \d+ ", "", match[1])
            lines.append("torchrun: " + said.replace("Sending closing", "sending closing"))
        elif line.startswith("[rank") and "Error:" in line:
            lines.append(re.sub(r"\[/[^\]]*\] ", "", line).split(". ")[0] + ".")
    return lines


def restart_text(restarted: dict, reference: dict, every: int, killed_at: int) -> str:
    """The restarted run against the uninterrupted one: steps redone, weights, losses."""
    resumed = restarted["resumed_from"]
    same = bool((restarted["weights"] == reference["weights"]).all())
    gap = float((restarted["weights"] - reference["weights"]).abs().max())
    text = (f"Rank 1 died in its step {killed_at}; torchrun ended rank 0 and started both "
            f"again, and they resumed from the checkpoint written after step {resumed} "
            f"(one every {every} steps): the {killed_at - 1 - resumed} steps after it, and "
            "the one in progress, were computed again. ")
    if same and restarted["losses"] == reference["losses"]:
        return text + (f"The restarted run ends with the weights of the two machines' "
                       f"uninterrupted run to the bit, and took the same losses in all "
                       f"{len(reference['losses'])} steps: the failure cost time, nothing "
                       "else.")
    return text + (f"Its weights differ from the uninterrupted run's by up to {gap:.1e}: "
                   "a resumed run should take exactly the same steps, so something the "
                   "checkpoint does not hold changed.")


def cluster_text(allreduce_ms: dict[str, float], compute_ms: float) -> str:
    """``allreduce_ms``: where -> the gradients' all-reduce time at the link's speed."""
    shares = ", ".join(f"{ms / compute_ms:.0%} of it on {where}"
                       for where, ms in allreduce_ms.items())
    return (f"Against the step's computation, {compute_ms:.0f} ms, the all-reduce of its "
            f"gradients takes {shares}.")


def timing_text(total: float, launches: float, torchruns: float) -> str:
    return (f"This chapter ran in {total:.0f} s here, wall clock: {launches:.0f} s in "
            "section 15.2's two launches (every measurement of sections 15.2 to 15.7, and "
            f"the processes' start), {torchruns:.0f} s in section 15.6's three torchrun "
            "launches.")
