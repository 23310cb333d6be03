"""The course secret: the private cases' inputs are drawn from it, so they differ from
course to course and cannot be read in the (public) repository. ``make assign`` creates it
once, outside the repository; a teacher rotates it with ``--rotate-secret`` (every input
changes)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

ENV = "GPT_FROM_SCRATCH_SECRET"  # a path overriding the default location
DEFAULT = Path("~/.config/gpt_from_scratch/course_secret")


def secret_path() -> Path:
    return Path(os.environ.get(ENV) or DEFAULT).expanduser()


def create_secret(path: Path, rotate: bool = False) -> bool:
    """Write a new random secret at ``path`` (mode 0600) unless one exists; True if written."""
    if path.exists() and not rotate:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(secrets.token_hex(32) + "\n")
    partial.chmod(0o600)
    partial.replace(path)
    return True


def read_secret(path: Path) -> bytes:
    if not path.is_file():
        raise SystemExit(
            f"no course secret at {path}: run `make assign` (it creates one), or name "
            f"yours with --secret PATH or {ENV}=PATH"
        )
    value = path.read_text().strip()
    if len(value) < 32:
        raise SystemExit(
            f"the course secret {path} is {len(value)} characters long; it needs at "
            "least 32: make assign ROTATE=1 writes a new one"
        )
    return value.encode()
