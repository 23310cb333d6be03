"""Chapter 7, last section — the measured speed-ups as the chapter's sentences.

``speedups_prose``, ``allocator_prose`` and ``bandwidth_prose`` turn ``timing``'s measurements into
sentences, so what the text says (faster, slower) always matches the numbers of the run;
``lesson_prose`` draws the section's conclusion from them.
"""

from __future__ import annotations

import mmap

import torch


def _ratio_words(before: float, after: float) -> str:
    ratio = before / after
    if ratio >= 1.05:
        return f"{ratio:.1f}x faster"
    if ratio <= 0.95:
        return f"slower ({1 / ratio:.1f}x the time)"
    return "no measurable change (within 5%)"


def speedups_prose(rows: dict[str, tuple[float, float]], device: str) -> str:
    """One sentence per measured technique: ``rows`` maps a name to ``(seconds before, seconds after)``."""
    parts = [f"{name}: {after * 1e3:.1f} ms against {before * 1e3:.1f} ms, {_ratio_words(before, after)}"
             for name, (before, after) in rows.items()]
    slower = [name for name, (before, after) in rows.items() if before / after <= 0.95]
    where = _where(device)
    text = f"Measured in this run on the {where}: " + "; ".join(parts) + "."
    if slower:
        text += f" Not every technique pays everywhere: {', '.join(slower)} did not help on this {where}."
        if device == "cpu" and any("bf16" in name for name in slower):
            text += (" On this CPU, converting to and from bfloat16 costs more than the narrower numbers save; "
                     "on a GPU, bf16 products run on the tensor cores (the FULL_RUN branch measures it).")
    return text


def allocator_prose(rows: dict[str, tuple[float, int | None]], applied: bool) -> str:
    """What ``reuse_freed_memory`` changed: ``rows`` maps "before" and "after" to ``(seconds of a pass,
    page faults of a pass)``; ``applied`` is what the call returned."""
    (t0, f0), (t1, f1) = rows["before"], rows["after"]

    def faults(n: int | None) -> str:
        if n is None:
            return "page faults not counted on this system"
        if n == 0:
            return "no page faults"
        return f"{n:,} page faults ({n * mmap.PAGESIZE / 1e6:,.0f} MB mapped in afresh)"

    if not applied:
        return (f"Measured in this run: {t0 * 1e3:.0f} ms a pass, {faults(f0)}. This system's C allocator is "
                "not Linux's glibc, so `reuse_freed_memory()` changed nothing here.")
    return (f"Measured in this run: a pass took {t0 * 1e3:.0f} ms with {faults(f0)} under `malloc`'s defaults, and "
            f"{t1 * 1e3:.0f} ms with {faults(f1)} once freed memory is reused: "
            f"{_ratio_words(t0, t1)}, for the same arithmetic.")


def _where(device: str) -> str:
    return "CPU" if torch.device(device).type == "cpu" else f"GPU ({device})"


def bandwidth_prose(n_params: int, bytes_per_param: int, bandwidth: float, rate: float, device: str) -> str:
    """The batch-1 decoding limit: every token reads every weight, so tokens/s <= bandwidth / weight bytes."""
    weight_bytes = n_params * bytes_per_param
    limit = bandwidth / weight_bytes
    return (f"Each new token reads all {n_params / 1e6:.0f} million weights, {weight_bytes / 1e6:.0f} MB at "
            f"{bytes_per_param} bytes each. A copy on this {_where(device)} moved {bandwidth / 1e9:.1f} GB/s, so no "
            f"batch-1 decoder can exceed about {limit:,.1f} tokens/s here; ours reached {rate:,.1f}, "
            f"{rate / limit:.0%} of that limit.")


def lesson_prose(speedups: dict[str, tuple[float, float]], rate: float, limit: float,
                 device: str) -> str:
    """The section's conclusion from its measurements: ``speedups`` maps each technique to
    ``(seconds before, seconds after)``; ``rate`` and ``limit`` are the batch-1 decoding speed
    and the bandwidth's limit on it, in tokens/s."""
    best = max(speedups, key=lambda name: speedups[name][0] / speedups[name][1])
    gain = speedups[best][0] / speedups[best][1]
    helped = [name for name, (before, after) in speedups.items() if before / after >= 1.05]
    where = _where(device)
    if len(helped) == len(speedups):
        measured = f"every technique measured here paid on this {where}, {best} most ({gain:.1f}x)"
    elif helped:
        measured = (f"on this {where} only {', '.join(helped)} paid (at most {gain:.1f}x); the "
                    "others removed a cost this machine hardly has")
    else:
        measured = (f"on this {where} none of them paid (at most {gain:.1f}x): they remove "
                    "costs this machine hardly has")
    return (f"**What to take away.** A step's time goes to arithmetic, to moving memory, or to "
            f"overhead, and a technique helps only where it removes the cost that dominates: "
            f"{measured}. On a GPU the overheads and the memory traffic dominate, which is why "
            f"`train` and `generate` switch these techniques on there. And at batch 1 no trick "
            f"beats the bandwidth: decoding reached {rate / limit:.0%} of the limit that "
            f"reading every weight once per token sets. Measure first, then remove what the "
            f"measurement shows.")
