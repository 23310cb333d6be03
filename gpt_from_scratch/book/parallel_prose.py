"""Chapter 15 — the lessons and sentences, written from what the processes measured.

Three lessons, each with its margin: the ring's cost per byte falls with the message's size
(latency, then bandwidth); data parallelism computes one process's gradients, within a bar
far above float32 rounding and far below a real mistake; each scheme keeps the bytes a
parameter its formula gives. The memory, timing and restart sentences are written from the
run too; the speed lesson and its sentences are ``parallel_speed``'s.
"""

from __future__ import annotations

import math
import re

from .lessons import Lesson, lesson

PER_BYTE_BAR = 10  # the smallest message costs at least 10 times the largest per byte
GRADS_BAR = 1e-5  # largest gradient difference from one process on the whole batch
MEMORY_BAR = 0.02  # bytes a parameter within 2% of the formula, on every rank
SCHEMES = {"ddp": "unsharded", "zero1": "ZeRO-1", "zero3": "ZeRO-3"}  # state_bytes' names
FLOOR = 1e-12  # a difference of exactly zero is read as this, to take its logarithm


def ms(seconds: float) -> str:
    """Chapter 15: a time in seconds, written in milliseconds ("12.3 ms")."""
    return f"{1e3 * seconds:.1f} ms"


def _size(n_bytes: float) -> str:
    if n_bytes >= 1e9:
        return f"{n_bytes / 1e9:.1f} GB"
    if n_bytes >= 1e6:
        return f"{n_bytes / 1e6:.1f} MB"
    return f"{n_bytes / 1e3:.1f} kB" if n_bytes < 1e4 else f"{n_bytes / 1e3:.0f} kB"


def _binary(n_bytes: int) -> str:
    """A tensor's size as the chapter's tables print it: KiB, or MiB from 1 MiB."""
    return f"{n_bytes / 2**20:g} MiB" if n_bytes >= 2**20 else f"{n_bytes / 2**10:g} KiB"


def memory_text(sizes: dict[str, tuple], device_gb: float, n_devices: int,
                device: str) -> str:
    """``sizes``: name -> (parameters, bytes on one device, the most ZeRO-1 and ZeRO-3 leave
    on any of ``n_devices``, in GB), the book's models first; ``device``: its name, which
    holds ``device_gb`` GB."""
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
                 f"{gb / device_gb:.0%} of {device} ({device_gb:.1f} GB), before any "
                 "activation. ")
    for name, (p, gb, zero1, zero3) in too_big:
        text += (f"{name}, {p / 1e9:.2f} billion parameters, needs {gb:.1f} GB: more than "
                 f"the device holds. Shared by {n_devices} devices, ZeRO-1 leaves at most "
                 f"{zero1:.1f} GB on each (the ranks own whole parameters, so some own "
                 f"more), ZeRO-3 {zero3:.1f} GB. ")
    return text.rstrip()


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
    s1, s2 = small["sent"], large["sent"]  # N = 2: per byte, 2 alpha / s + 1 / beta
    gap = 1 / s1 - PER_BYTE_BAR / s2
    needed = (PER_BYTE_BAR - 1) / (2 * gap) if gap > 0 else math.inf  # alpha beta, bytes
    said = (f"Per byte sent, the ring's smallest tensor ({_binary(s1)}) cost "
            f"{1e9 * cost[0]:.1f} ns and its largest ({_binary(s2)}) {1e9 * cost[1]:.2f} "
            f"ns: {ratio:.0f} times less. Fitted to this run's {len(rows)} sizes, the "
            f"model puts the latency at {1e6 * alpha:.{0 if alpha >= 1e-5 else 1}f} µs a "
            f"step and the bandwidth at {beta / 1e9:.2f} GB/s: this run's values, not the "
            f"machine's constants{_out_of_order(rows)}. ")
    why = (f"In the model the ratio of the two is (2αβ/s₁ + 1)/(2αβ/s₂ + 1), for s₁ and s₂ "
           f"bytes: it exceeds {PER_BYTE_BAR} once αβ, the bytes a link moves during one "
           f"latency, exceeds {_size(needed)}, as it does wherever a message goes through "
           "an operating system (ten microseconds or more, at a few GB/s: tens of kB). In "
           f"this fit αβ is {_size(crossover)}: a message that size costs as much in "
           "latency as in bytes; smaller ones are paid mostly for being sent at all, which "
           f"is why gradients travel in buckets. Gloo's own all-reduce took "
           f"{ms(small['gloo'])} and {ms(large['gloo'])} for the same two tensors.")
    return lesson("a message costs a latency, then bytes over a bandwidth",
                  math.log10(ratio / PER_BYTE_BAR), "decades",
                  said + why,
                  said + f"That is not the factor of {PER_BYTE_BAR} the chapter expects. "
                  f"Either this machine's messages cost little latency beside their bytes "
                  f"(αβ under {_size(needed)}; the fit gives {_size(crossover)}), or the "
                  "times were disturbed: on a busy machine the time of a small message is "
                  "mostly waiting for a core, and the fit says little.")


def _out_of_order(rows: list[dict]) -> str:
    """A clause for the first pair of sizes whose times are not in order of size, or ''."""
    for i, small in enumerate(rows):
        for large in rows[i + 1:]:
            if small["ring"] > large["ring"]:
                return (f"; the times are not even in order of size "
                        f"({_binary(small['sent'])} took {1e3 * small['ring']:.2f} ms, "
                        f"{_binary(large['sent'])} {1e3 * large['ring']:.2f} ms), the mark "
                        "of the machine's other work on short waits, so another run fits "
                        "other values")
    return ""


def equivalence_lesson(grads: dict[str, float], weights: dict[str, float], steps: int,
                       lr: float) -> Lesson:
    """``grads``: run -> largest difference of its first step's gradients from one process
    on the whole batch; ``weights``: run -> the same for the weights after ``steps`` AdamW
    steps. ``"never averaged"`` is the mistake, on the other side of the bar."""
    if "never averaged" not in grads or len(grads) < 2:
        raise ValueError("equivalence_lesson: pass the runs' differences and the one of "
                         "'never averaged', the mistake that sets the bar's other side")
    mistake = grads["never averaged"]
    worst = max(d for run, d in grads.items() if run != "never averaged")
    below = math.log10(GRADS_BAR / max(worst, FLOOR))  # decades under the bar
    above = math.log10(mistake / GRADS_BAR)  # decades over it
    moved = max(d for run, d in weights.items() if run != "never averaged")
    said = (f"In the first step the gradients of every data-parallel run differ from one "
            f"process's on the whole batch by at most {worst:.1e}, those of two processes "
            f"that never average by {mistake:.1e}: the bar, {GRADS_BAR:g}, leaves "
            f"{below:.1f} decades between the rounding and itself, and {above:.1f} between "
            "itself and the mistake. ")
    why = ("The small difference is float32 rounding: one process sums the whole batch's "
           "losses, two processes each half, then the halves, another order of the same "
           f"sums. After {steps} AdamW steps at a learning rate of {lr:g} the weights "
           f"differ by at most {moved:.1e} (never averaged: "
           f"{weights.get('never averaged', math.nan):.1e}). The weights show it, the "
           "gradients decide it: AdamW's first step moves a weight by about the learning "
           "rate whatever its gradient's size (lr·g/(|g| + ε)), so rounding that flips the "
           "sign of a gradient near zero can move a weight by up to twice the learning "
           "rate. Data parallelism is one process's training, computed in two places.")
    return lesson("data parallelism equals one process on the whole batch",
                  min(below, above), "decades", said + why,
                  said + f"Here the bar of {GRADS_BAR:g} does not separate the two: "
                  "a rounding that large means the processes do not compute the whole "
                  "batch's gradient, or a mistake that small means their shares are "
                  "nearly alike. " + why)


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


AGENT_LINE = re.compile(r"^[IWE]\d{4} [\d:.]+ \d+ \S+\] (?:\[default\] )?(.*)$")
KEEP = ("failed (exitcode", "will restart", "Sending process", "successfully finished")


def torchrun_lines(log: str) -> list[str]:
    """torchrun's own account of a run, from its log: what failed, what it ended, what it
    restarted (process ids and file paths left out)."""
    lines = []
    for line in log.splitlines():
        match = AGENT_LINE.match(line)
        if match and any(k in match[1] for k in KEEP):
            said = re.sub(r" \(pid: \d+\)| of binary: \S+|process \d+ |"
                          r" Waiting \d+ seconds for other agents to finish\.", "",
                          match[1])
            lines.append("torchrun: " + said.replace("Sending closing", "sending closing"))
        elif line.startswith("[rank") and "Error:" in line:
            lines.append(re.sub(r"\[/[^\]]*\] ", "", line).split(". ")[0] + ".")
    return lines


def restart_text(restarted: dict, reference: dict, every: int, killed_at: int,
                 log: str) -> str:
    """The restarted run against the uninterrupted one: what torchrun's ``log`` says
    happened, the steps redone, the weights and the losses."""
    resumed, restarts = restarted["resumed_from"], restarted["restart"]
    lines = torchrun_lines(log)
    how = next((how for line in lines for said, how in (("Connection reset", "reset"),
                ("Connection closed", "closed by rank 1")) if said in line), None)
    text = (f"Rank 1 died in its step {killed_at}"
            + ("; rank 0's next collective failed on its own (its connection to rank 1 "
               f"was {how})" if how else "")
            + (f"; torchrun saw a process fail and started both again, and they resumed "
               f"from the checkpoint written after step {resumed} (one every {every} "
               f"steps): the {killed_at - 1 - resumed} steps after it, and the one in "
               "progress, were computed again. " if restarts and resumed is not None else
               f". torchrun did not restart them (restarts: {restarts}); the run did not "
               "resume from a checkpoint. "))
    same = bool((restarted["weights"] == reference["weights"]).all())
    gap = float((restarted["weights"] - reference["weights"]).abs().max())
    losses = max(abs(a - b) for a, b in zip(restarted["losses"], reference["losses"]))
    if same and losses == 0:
        return text + (f"The restarted run ends with the weights of the two machines' "
                       f"uninterrupted run to the bit, and took the same losses in all "
                       f"{len(reference['losses'])} steps: the failure cost time, nothing "
                       "else.")
    if same:
        return text + ("The weights end the same to the bit, but the losses differ by up "
                       f"to {losses:.1e}: a loss was computed on other rows or in another "
                       "order, and the weights did not record it.")
    return text + (f"Its weights differ from the uninterrupted run's by up to {gap:.1e}: "
                   "a resumed run should take exactly the same steps, so something the "
                   "checkpoint does not hold changed.")


def timing_text(total: float, launches: float, torchruns: float) -> str:
    return (f"This chapter ran in {total:.0f} s here, wall clock: {launches:.0f} s in "
            "section 15.2's two launches (every measurement of sections 15.2 to 15.7, and "
            f"the processes' start), {torchruns:.0f} s in section 15.6's three torchrun "
            "launches.")
