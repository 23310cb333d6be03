"""The grader's start-up check: one trivial case through the path every student's code takes
(a ``Sandbox`` as a class gets it: bubblewrap, its control group, ``runner.py`` serving a
job, the chapter's set-up of stand-ins, the result frames, the judge's reading of them), so
that a sandbox or a runner that does not work is reported once, with its own error output,
before any student is graded, instead of as a note on every row.
"""

from __future__ import annotations

import tempfile

import torch
from safetensors.torch import save

from grading import cases, judge
from grading.sandbox import Limits, Sandbox, SandboxError

NO_USERNS = (
    "bubblewrap cannot create its namespaces here ({error}). As a user other than root "
    "it needs unprivileged user namespaces: enable them (Debian: sysctl -w "
    "kernel.unprivileged_userns_clone=1; Ubuntu 24.04: sysctl -w "
    "kernel.apparmor_restrict_unprivileged_userns=0; any: sysctl -w "
    "user.max_user_namespaces=15000), grade as root, or grade without a sandbox with "
    "UNSAFE=1 (make) / --unsafe, on a machine you can throw away. In a Docker container, "
    "even as root, run the container with --privileged: Docker's seccomp and AppArmor "
    "profiles and its capabilities refuse bubblewrap's namespaces."
)
PROBE = '''def probe(x):
    try:
        import gpt_from_scratch.model  # not in the sandbox: its set-up has stand-ins
    except ImportError:
        return x + 1, False
    return x + 1, True
'''


def check(limits: Limits, setup: str = "", unsafe: bool = False) -> str:
    """Raise SandboxError unless the runner, started as for a class (in the sandbox unless
    ``unsafe``), runs ``setup`` and a trivial case and returns its answer, without the
    package in sight; return what is lost where the cases have no control group
    (``cgroup.Group.lost``), else ""."""
    x, tensors = torch.arange(6.0), {}
    case = cases.Case("probe", [cases.Step((x,))])
    program = cases.program(case, "in", tensors)
    job = {
        "name": "probe",
        "setup": setup,
        "source": PROBE,
        "cpu_seconds": limits.cpu_seconds,
        "cases": [{"program": program, "tensors": save(tensors), "cpu": None}],
    }
    with tempfile.TemporaryFile() as log:
        box = Sandbox(0, limits, unsafe, stderr=log)
        try:
            results, stopped = box.run([job])
            lost = box.group.lost
        finally:
            box.close()
        log.seek(0)
        error = " ".join(log.read().decode(errors="replace").split())[-400:]
    failure = "the sandbox sent no result"
    if not stopped:
        failure = _failure(results["probe"][0], x, unsafe)
    if failure:
        if "namespace" in error or "uid map" in error or "Operation not permitted" in error:
            raise SandboxError(NO_USERNS.format(error=error))
        raise SandboxError(
            "the start-up check failed (a trivial case, run as every student's code is: "
            f"scripts/grading/runner.py in the sandbox): {failure}"
            + (f"; the error output: {error}" if error else "")
            + ". Nothing was graded"
        )
    return "" if unsafe else lost


def _failure(raw: bytes | str, x: torch.Tensor, unsafe: bool) -> str:
    """What went wrong with the trivial case whose result is ``raw``, or ""."""
    report, tensors = judge.report(raw)
    if report is None:
        return f"the case sent {tensors}"  # judge.report's reason: "an unreadable result"
    if "stopped" in report:
        return f"the case {judge.STOPPED.get(report['stopped'], 'stopped')}"
    if "error" in report:
        kind = judge.error_name(report["error"])
        if report.get("stage") == "cell":  # the probe's own cell only defines a function
            return (
                f"the chapter's set-up raised {kind} (the set-up of assignment.json, "
                "with the stand-ins of scripts/grading/standins.py)"
            )
        return f"the case raised {kind}"
    values = report.get("values")
    got = [judge.decode(v, tensors) for v in values] if isinstance(values, list) else []
    case = cases.Case("probe", [])
    if judge.same(got, [[x + 1, False]], case) == "":
        return ""
    if judge.same(got, [[x + 1, True]], case) == "":  # without the sandbox: in sight
        return "" if unsafe else "the package is importable in the sandbox"
    return "the runner sent back wrong values"
