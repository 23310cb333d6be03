"""``make test-oldest`` tests the oldest versions pyproject.toml promises: its pins must be those versions."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent


# Extras of reference libraries for parity tests that need releases above the oldest pins
# (trl >= 0.29 needs transformers >= 4.56.2, transformer-lens >= 4 transformers >= 5.9; the harness
# and nnsight, like them, are tested at their pins in requirements.txt), and the ONNX
# export's, whose exporter needs torch >= 2.6: the oldest job does not install them, and
# their tests skip there.
NOT_IN_OLDEST = {"eval", "interp", "onnx", "posttrain"}


def _lower_bounds() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    specs = project["dependencies"] + [s for name, extra in extras.items()
                                       if name not in NOT_IN_OLDEST for s in extra]
    bounds = {}
    for spec in specs:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)>=([0-9.]+)", spec.split(";")[0].strip())
        assert match, f"pyproject.toml: {spec!r} is not of the form name>=version"
        bounds[match[1].lower()] = match[2]
    return bounds


def _pins() -> dict[str, str]:
    lines = (ROOT / "requirements-oldest.txt").read_text().splitlines()
    pins = [re.fullmatch(r"([A-Za-z0-9_.-]+)==([0-9.]+)", line.split("#")[0].strip()) for line in lines]
    return {m[1].lower(): m[2] for m in pins if m}


def test_the_oldest_job_pins_every_lower_bound_of_pyproject():
    pins, bounds = _pins(), _lower_bounds()
    for name, version in bounds.items():
        assert name in pins and Version(pins[name]) == Version(version), (
            f"pyproject.toml says {name}>={version}, but requirements-oldest.txt pins {name}=={pins.get(name)}: "
            "make the two agree, so that make test-oldest tests what the range promises"
        )
