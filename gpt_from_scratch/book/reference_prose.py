"""What the chapters say about a reference run, written from its manifest entry, and whether
one is there at all: a chapter describes only the runs ``reference_run`` found."""

from __future__ import annotations

import matplotlib.pyplot as plt

from .figure_text import WIDTH_IN
from .reference import ReferenceRun, published


def found_text(runs: dict[str, ReferenceRun | None], shows: str) -> str:
    """The opening of a chapter's reference-run section: which of ``runs`` (name -> the run, or None
    where ``reference_run`` raised ``ReferenceUnavailable``) are here, and what was found of them.
    ``shows`` names what the section adds with a run, e.g. "its samples beside this chapter's"."""
    found = {name: run for name, run in runs.items() if run is not None}
    names = " and ".join(f"`{name}`" for name in runs)
    if not found:
        where = ("and this version of the book pins no published copy" if not published()
                 else "and the published copy could not be fetched (the message above says why)")
        return (f"No reference run ({names}) is on this machine, {where}: this section has only "
                f"this chapter's own run to show. With one, it would show {shows}.")
    parts = [f"`{name}` ({run.info['device']}, torch {run.info['torch']}, "
             f"{run.info['wall_seconds']:,.0f} s)" for name, run in found.items()]
    missing = [f"`{name}`" for name in runs if name not in found]
    text = f"Found: {'; '.join(parts)}, each file checked against its manifest."
    if missing:
        text += f" Not found: {', '.join(missing)}; what needs it is left out."
    return text + f" Below: {shows}."


def run_text(info: dict, cpu_best: float | None = None, cpu_steps: int | None = None) -> str:
    """One paragraph on a reference run: its size, training, losses and sample, beside the chapter's
    CPU run when ``cpu_best`` (its best validation loss) and ``cpu_steps`` are given."""
    m, t = info["recipe"]["model"], info["recipe"]["train"]
    history = info["history"]
    best_step = history["eval_step"][history["val_loss"].index(info["best_val_loss"])]
    text = (f"The reference run ({m['n_layers']} layers, {m['d_model']} dimensions, context "
            f"{m['context_length']}; {t['max_iters']:,} steps of batch {t['batch_size']}) trained "
            f"in {info['wall_seconds']:,.0f} s on {info['device']} with torch {info['torch']}. Its "
            f"best validation loss is {info['best_val_loss']:.3f}, at step {best_step:,} (the "
            f"weights kept), and {info['final_val_loss']:.3f} after the last step")
    if cpu_best is not None:
        text += (f"; this chapter's run on the CPU reached {cpu_best:.3f} in {cpu_steps:,} steps, "
                 f"{'above' if cpu_best > info['best_val_loss'] else 'below'} it by "
                 f"{abs(cpu_best - info['best_val_loss']):.3f}")
    return (text + f". {info['real_words']:.0%} of the words of its 500-character sample are "
            f"words of the training text.")


def loss_curves(info: dict, cpu_history, label: str = "this chapter's run (CPU)"):
    """The reference run's validation losses against the chapter's run's, step by step."""
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 3.4))
    ax.plot(info["history"]["eval_step"], info["history"]["val_loss"], marker=".",
            label=f"reference run ({info['device']})")
    ax.plot(cpu_history.eval_step, cpu_history.val_loss, marker=".", label=label)
    ax.set(xlabel="step", ylabel="validation loss (nats)")
    ax.legend()
    return fig
