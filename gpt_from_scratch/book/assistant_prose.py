"""Chapter 12 — the chapter's lessons and sentences, judged and written from the measured numbers.

Each ``judge_*`` function takes what the chapter measured, one value per seed, and returns the
``lessons.Lesson``s it judged (see ``book.lessons``): a paired difference over the seeds, with its
margin in points beyond two standard errors, so that the claim survives another CPU's arithmetic.
"""

from __future__ import annotations

import math
import numbers

from .lessons import (
    SE_BAR, Lesson, beyond_bar, check_share, lesson, paired_difference, points, seed_count,
)


def _scores(judge: str, name: str, runs: list[dict], tasks, keys) -> None:
    """Check that each of ``runs`` (a task -> its scores) scores every task of ``tasks`` with
    every key of ``keys``, each a share."""
    for i, run in enumerate(runs):
        for task in tasks:
            if not isinstance(run, dict) or task not in run:
                found = sorted(run) if isinstance(run, dict) else type(run).__name__
                raise ValueError(f"{judge}: {name}[{i}] has no scores for the task {task!r} "
                                 f"(it has {found}): pass one dict per seed, a task -> its "
                                 "scores, for every task judged")
            for key in keys:
                if key not in run[task]:
                    raise ValueError(f"{judge}: {name}[{i}][{task!r}] has no {key!r} score (it "
                                     f"has {sorted(run[task])}): pass evaluate's scores")
                check_share(judge, f"{name}[{i}][{task!r}][{key!r}]", run[task][key])


def _tasks(judge: str, tasks, judged) -> tuple[tuple, tuple]:
    """``tasks`` and ``judged`` (all of them when None), checked: at least one task, and every
    judged task among them."""
    tasks = tuple(tasks)
    judged = tasks if judged is None else tuple(judged)
    if not tasks:
        raise ValueError(f"{judge}: tasks is empty, so there is nothing to judge: pass the "
                         "chapter's TASKS")
    if not set(judged) <= set(tasks):
        raise ValueError(f"{judge}: judged={list(judged)} names tasks not in tasks={list(tasks)}: "
                         "judge only tasks that were measured")
    return tasks, judged


def transcript(messages: list[dict]) -> str:
    """A conversation as a plain-text transcript, one turn per line."""
    return "\n".join(f"{'you' if m['role'] == 'user' else 'model':>5}: {m['content']}"
                     for m in messages)


def judge_sft(base: dict, sft: list[dict], majority: dict, tasks, seeds, judged=None
              ) -> list[Lesson]:
    """Lessons of SFT: it stops (over ``tasks``), and it answers each task of ``judged`` (all by
    default) better than the base model and the majority answer. ``base`` and each of ``sft``
    (one per seed) map a task to its scores; ``majority`` maps a task to the majority answer's
    exact match."""
    tasks, judged = _tasks("judge_sft", tasks, judged)
    n, found = seed_count("judge_sft", seeds, sft=sft), []
    _scores("judge_sft", "base", [base], tasks, ("stop", "exact"))
    _scores("judge_sft", "sft", sft, tasks, ("stop", "exact"))
    for task in judged:
        if task not in majority:
            raise ValueError(f"judge_sft: majority has no exact match for the task {task!r} (it "
                             f"has {sorted(majority)}): pass the majority answer's score for "
                             "every task judged")
        check_share("judge_sft", f"majority[{task!r}]", majority[task])
    stop_sft = [sum(s[t]["stop"] for t in tasks) / len(tasks) for s in sft]
    stop_base = [sum(base[t]["stop"] for t in tasks) / len(tasks)] * n
    mean, se, margin = beyond_bar(stop_sft, stop_base)
    found.append(lesson(
        "fine-tuning teaches the model to end its turn", 100 * margin, "points",
        holds=f"Over {n} seeds, fine-tuning raised the share of held-out answers that end with "
              f"`<|end|>` from {points(stop_base[0])}% to {points(sum(stop_sft) / n)}% (a rise of "
              f"{points(mean)} ± {points(se)} points, one standard error over the seeds).",
        fails=f"Over {n} seeds, the stop rate rose by {points(mean)} ± {points(se)} points only, "
              f"not {SE_BAR:g} standard errors clear of zero here: the runs are short, and another "
              f"CPU's arithmetic can shift when the end marker is learned."))
    for task in judged:
        exact = [s[task]["exact"] for s in sft]
        bar = max(base[task]["exact"], majority[task])
        mean, se, margin = beyond_bar(exact, [bar] * n)
        found.append(lesson(
            f"after fine-tuning the model answers '{task}' on held-out lines", 100 * margin, "points",
            holds=f"**{task}**: {points(sum(exact) / n)}% exact on held-out lines after fine-tuning "
                  f"(seeds: {', '.join(points(e) for e in exact)}), against {points(base[task]['exact'])}%"
                  f" for the base model and {points(majority[task])}% for the majority answer: "
                  f"{points(mean)} ± {points(se)} points above the better baseline.",
            fails=f"**{task}**: {points(sum(exact) / n)}% exact after fine-tuning (seeds: "
                  f"{', '.join(points(e) for e in exact)}), not {SE_BAR:g} standard errors above the "
                  f"better baseline ({points(bar)}%) on this machine: with this few steps the copying "
                  f"skill is only starting, and its onset moves with the arithmetic."))
    return found


def early_text(task: str, exact: list[float], base: float, majority: float) -> str:
    """A sentence on a task whose lesson this run does not judge (too few steps to expect it)."""
    n = len(exact)
    return (f"**{task}** is not judged at this length of run: {points(sum(exact) / n)}% exact on "
            f"held-out lines (seeds: {', '.join(points(e) for e in exact)}), against "
            f"{points(base)}% for the base model and {points(majority)}% for the majority answer. "
            f"Copying a whole line is the slow skill; longer runs (`FULL_RUN = True`) judge it.")


def judge_mask(masked: list[dict], unmasked: list[dict], loss_masked: list[float],
               loss_unmasked: list[float], tasks, seeds, steps: int, judged=None
               ) -> tuple[list[Lesson], str]:
    """The ablation of the loss mask: the same runs with and without it, after ``steps`` steps.

    ``masked`` and ``unmasked`` hold one dict per seed, a task -> its scores; ``loss_*`` the
    held-out answer loss per seed. Returns the lessons (for each task of ``judged``, all by
    default: the masked runs answer it better) and sentences on the rest, judged or not.
    """
    tasks, judged = _tasks("judge_mask", tasks, judged)
    n = seed_count("judge_mask", seeds, masked=masked, unmasked=unmasked, loss_masked=loss_masked,
               loss_unmasked=loss_unmasked)
    _scores("judge_mask", "masked", masked, tasks, ("stop", "exact"))
    _scores("judge_mask", "unmasked", unmasked, tasks, ("stop", "exact"))
    found, notes = [], []
    for task in tasks:
        a, b = [s[task]["exact"] for s in masked], [s[task]["exact"] for s in unmasked]
        mean, se, margin = beyond_bar(a, b)
        if task not in judged:
            notes.append(f"**{task}** is not judged at this length of run: {points(sum(a) / n)}% "
                         f"exact with the mask, {points(sum(b) / n)}% without.")
            continue
        seen = (f"after {steps} steps the masked runs answer **{task}** right "
                f"{points(sum(a) / n)}% of the time (seeds: {', '.join(points(e) for e in a)}), the "
                f"runs on every token {points(sum(b) / n)}% (seeds: {', '.join(points(e) for e in b)})")
        found.append(lesson(
            f"at the same step, fine-tuning with the mask answers '{task}' better than without",
            100 * margin, "points",
            holds=f"With the same batches, {seen}: the mask is worth {points(mean)} ± {points(se)} "
                  f"points of exact match at this step, over {n} seeds.",
            fails=f"With the same batches, {seen}: {points(mean)} ± {points(se)} points apart, not "
                  f"{SE_BAR:g} standard errors clear of zero on this machine."))
    stop = [[sum(s[t]["stop"] for t in tasks) / len(tasks) for s in runs]
            for runs in (masked, unmasked)]
    mean, se = paired_difference(*stop)
    rates = (f"{points(sum(stop[0]) / n)}% of the answers end with `<|end|>` with the mask, "
             f"{points(sum(stop[1]) / n)}% without (with minus without: {points(mean)} ± "
             f"{points(se)} points)")
    notes.append(f"Both learn to stop, the end marker being a target either way: {rates}."
                 if abs(mean) <= SE_BAR * se else f"The stop rates differ: {rates}.")
    mean, se = paired_difference(loss_unmasked, loss_masked)
    notes.append(f"On the held-out conversations, the answers cost {sum(loss_masked) / n:.2f} "
                 f"nats per token after the masked runs and {sum(loss_unmasked) / n:.2f} after "
                 f"the runs on every token (without minus with: {mean:+.2f} ± {se:.2f}).")
    return found, " ".join(notes)


def judge_dpo(share_before: list[float], share_after: list[float], exact_before: list[float],
              exact_after: list[float], seeds, drift_bar: float) -> list[Lesson]:
    """Lessons of DPO on the style pairs, one value per seed: the probability of the courteous
    opening rises; exact match (averaged over the tasks) moves by less than ``drift_bar``."""
    runs = dict(share_before=share_before, share_after=share_after, exact_before=exact_before,
                exact_after=exact_after)
    n = seed_count("judge_dpo", seeds, **runs)
    for name, values in runs.items():
        for i, v in enumerate(values):
            check_share("judge_dpo", f"{name}[{i}]", v)
    if isinstance(drift_bar, bool) or not isinstance(drift_bar, numbers.Real) or not 0 < drift_bar <= 1:
        raise ValueError(f"judge_dpo: drift_bar = {drift_bar!r} must be a share above 0 and at most "
                         "1, the largest move of exact match that counts as none (the chapter "
                         "uses 0.10)")
    mean, se, margin = beyond_bar(share_after, share_before)
    found = [lesson(
        "preference tuning makes the courteous opening the usual one", 100 * margin, "points",
        holds=f"Over {n} seeds, DPO raised the probability of the courteous opening on held-out "
              f"prompts from {points(sum(share_before) / n)}% to {points(sum(share_after) / n)}% "
              f"({points(mean)} ± {points(se)} points, one standard error over the seeds).",
        fails=f"Over {n} seeds, DPO moved the probability of the courteous opening by "
              f"{points(mean)} ± {points(se)} points, not {SE_BAR:g} standard errors clear of zero on "
              f"this machine: the runs are short.")]
    mean, se = paired_difference(exact_after, exact_before)
    margin = drift_bar - (abs(mean) + SE_BAR * se)
    found.append(lesson(
        "preference tuning leaves the answers as right as they were", 100 * margin, "points",
        holds=f"Exact match, averaged over the tasks, moved by {points(mean)} ± {points(se)} points "
              f"({points(sum(exact_before) / n)}% before, {points(sum(exact_after) / n)}% after): "
              f"within {points(drift_bar)} points, even at {SE_BAR:g} standard errors. The "
              f"preference changed how the model opens, not what it answers.",
        fails=f"Exact match moved by {points(mean)} ± {points(se)} points "
              f"({points(sum(exact_before) / n)}% before, {points(sum(exact_after) / n)}% after): "
              f"{SE_BAR:g} standard errors from that change reach past {points(drift_bar)} points, "
              f"so on this machine these {n} seeds cannot show that the preference left the "
              "answers alone."))
    return found


def judge_collapse(before: list[float], after: list[float], seeds, lr: float) -> Lesson:
    """The warning: DPO pushed too hard (learning rate ``lr``) loses exact match."""
    n = seed_count("judge_collapse", seeds, before=before, after=after)
    for name, values in (("before", before), ("after", after)):
        for i, v in enumerate(values):
            check_share("judge_collapse", f"{name}[{i}]", v)
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real) or not 0 < lr < math.inf:
        raise ValueError(f"judge_collapse: lr = {lr!r} must be the positive learning rate of the "
                         "run that pushed too hard (the chapter's COLLAPSE_LR)")
    mean, se, margin = beyond_bar(before, after)
    return lesson(
        "pushed too hard, preference tuning breaks the answers", 100 * margin, "points",
        holds=f"At a learning rate of {lr:g}, the same DPO run lowered exact match from "
              f"{points(sum(before) / n)}% to {points(sum(after) / n)}% (a fall of {points(mean)} ± "
              f"{points(se)} points over {n} seeds), while its reward margins kept growing.",
        fails=f"At a learning rate of {lr:g}, exact match fell by {points(mean)} ± {points(se)} "
              f"points only, not {SE_BAR:g} standard errors clear of zero on this machine.")


def binomial_text(rates: dict[str, float], n: int) -> str:
    """The spread of a rate measured on ``n`` prompts: the binomial standard error
    ``sqrt(p (1 - p) / n)`` at each task's mean rate (``rates``: task -> mean), and at 50%,
    where it is largest."""
    n = int(n)
    if n < 1 or not rates:
        raise ValueError(f"binomial_text: n={n} prompts and {len(rates)} rates: pass each "
                         "task's mean rate and the number of prompts it was measured on (>= 1)")
    at = ", ".join(f"±{points(math.sqrt(p * (1 - p) / n))} points at {task}'s {points(p)}%"
                   for task, p in rates.items())
    return (f"Each rate is a share of {n} prompts, so another draw of {n} prompts would move "
            f"it: one binomial standard error is {at}, and at most "
            f"±{points(math.sqrt(0.25 / n))} points, at 50%. The lessons' standard errors are "
            "over seeds on these same prompts: they measure how much a run varies, not how "
            "far another draw of prompts would move a rate.")


def onset_text(task: str, steps: tuple[int, int], stop: tuple[float, float],
               exact: tuple[float, float]) -> str:
    """When the format and the copying came, from the masked runs at two steps: ``stop`` and
    ``exact`` (on ``task``) at ``steps[0]`` and ``steps[1]``, each a mean over the seeds."""
    (early, late), (stop_early, stop_late), (copy_early, copy_late) = steps, stop, exact
    text = (f"The masked runs measured at two steps show the order: at step {early} they end "
            f"{points(stop_early)}% of their answers with `<|end|>` and answer **{task}** "
            f"{points(copy_early)}% exactly; at step {late}, {points(stop_late)}% and "
            f"{points(copy_late)}%.")
    if stop_early >= 0.9 and copy_late > copy_early + 0.1:
        return text + " The format came first, the copying after it."
    return text + " Here the two did not come one after the other."


def drift_text(beta: float, lr: float, margin: list[float], chosen: list[float],
               rejected: list[float], gentle: tuple[list[float], list[float]]) -> str:
    """What the reference did not do: per seed, the last margin of the run at ``lr`` and the
    mean log-ratio (log pi - log pi_ref, nats) of the held-out chosen and rejected answers;
    ``gentle``: the same two log-ratios after the chapter's own DPO runs."""
    n = len(margin)

    def span(xs: list[float], digits: int = 1) -> str:
        return f"{min(xs):+.{digits}f} to {max(xs):+.{digits}f}"

    gap = [m / beta for m in margin]
    text = (f"At a learning rate of {lr:g}, the last margins ({span(margin)}) are gaps of "
            f"{min(gap):.0f} to {max(gap):.0f} nats between the two log-ratios "
            f"(margin / β, β = {beta:g}). The held-out answers show how they were reached: the "
            f"**chosen** answers' log-ratio fell to {span(chosen)} nats and the rejected "
            f"answers' to {span(rejected)}, over {n} seeds. ")
    if max(chosen) < 0 and max(rejected) < 0:
        more = ("the rejected ones more so" if sum(rejected) < sum(chosen) else
                "the chosen ones more so")
        text += (f"Both answers became far less likely than under the reference, {more}: the "
                 "loss sees only the difference of the two log-ratios, and nothing in it held "
                 "the policy near the reference. ")
    else:
        text += "Not every answer lost probability here. "
    return text + (f"After the chapter's own DPO runs the same log-ratios are "
                   f"{span(gentle[0], 2)} (chosen) and {span(gentle[1], 2)} (rejected) nats: a "
                   "short run at a small learning rate, not the loss, kept that policy close.")
