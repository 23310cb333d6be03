"""Chapter 10 — the sentences that depend on the run: the verdict of the GPT-2 versus Llama training
comparison, built from the measured losses and step times (``comparison_text``)."""

from __future__ import annotations

import math
import statistics


def _mean_spread(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def comparison_text(gpt_val: list[float], llama_val: list[float], gpt_step_s: float, llama_step_s: float,
                    steps: int) -> str:
    """Markdown: the validation losses of both models over the seeds (paired by seed), and a verdict.

    The difference counts as real only when the same model is better on every seed **and** the gap of
    the means exceeds twice the larger seed-to-seed standard deviation; otherwise the text says the
    runs cannot tell the two apart. ``*_step_s`` are seconds per training step, measured in one process.
    """
    if len(gpt_val) != len(llama_val) or len(gpt_val) < 2:
        raise ValueError(f"need the same number (>= 2) of seeds for both models, got {len(gpt_val)} "
                         f"and {len(llama_val)}")
    values = [*gpt_val, *llama_val, gpt_step_s, llama_step_s]
    if not all(math.isfinite(v) for v in values) or min(gpt_step_s, llama_step_s) <= 0:
        raise ValueError(f"losses and step times must be finite (and times > 0), got {values}")
    n = len(gpt_val)
    (g_mean, g_sd), (l_mean, l_sd) = _mean_spread(gpt_val), _mean_spread(llama_val)
    gap, spread = g_mean - l_mean, max(g_sd, l_sd)
    llama_wins = sum(l < g for g, l in zip(gpt_val, llama_val))
    text = (f"After {steps} steps, the GPT-2-style model reaches a validation loss of {g_mean:.3f} ± {g_sd:.3f} "
            f"and the Llama-style model {l_mean:.3f} ± {l_sd:.3f} (mean ± standard deviation over {n} seeds). ")
    if llama_wins in (0, n) and abs(gap) > 2 * spread:
        better, worse = ("Llama-style", "GPT-2-style") if gap > 0 else ("GPT-2-style", "Llama-style")
        text += (f"The {better} model is lower by {abs(gap):.3f} on average and on every seed, more than twice "
                 f"the seed-to-seed spread: at this scale and budget the difference is real. ")
    else:
        text += (f"The gap of the means, {abs(gap):.3f}, is not larger than twice the seed-to-seed spread, and "
                 f"the Llama-style model is lower on {llama_wins} of {n} seeds: at this scale and budget these "
                 "runs cannot tell the two architectures apart. ")
    ratio = llama_step_s / gpt_step_s
    text += (f"Each Llama-style step took {ratio:.2f} times as long as a GPT-2-style one on this machine "
             f"({'slower' if ratio > 1 else 'faster'}): it adds rotations and a third MLP matrix but drops the "
             "biases, half the key/value projections and the position table, and which weighs more depends "
             "on the sizes and the hardware.")
    return text
