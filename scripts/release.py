"""What the release and Pages workflows (.github/workflows/) check, read from the files.

    python scripts/release.py check-tag v0.1.0  # exit 1 unless it is the package's version
    python scripts/release.py notes 0.1.0       # CHANGELOG.md's section of that version
    python scripts/release.py site-url          # the rendered book's URL, from _config.yml
    python scripts/release.py site-url --expect URL  # exit 1 unless Pages serves it there

Only the standard library and PyYAML: the release workflow runs it before any install. The
version is written twice, ``pyproject.toml``'s ``[project] version`` and
``gpt_from_scratch.__version__`` (read from the source, not imported: importing the package
would need torch); a tag ``v<version>`` must match both, and CHANGELOG.md must have a dated
section ``## [<version>] - YYYY-MM-DD`` for the release's notes. The notebooks must install
that version too (``pairing``): the Colab buttons open the tag's notebooks, whose set-up
cell (``scripts/colab_setup.py``) installs the release published from the same tag.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def versions() -> dict[str, str]:
    """Every place the version is written, by its name."""
    module = ast.parse((ROOT / "gpt_from_scratch" / "__init__.py").read_text())
    found = {"gpt_from_scratch.__version__": node.value.value for node in module.body
             if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
             and any(getattr(t, "id", None) == "__version__" for t in node.targets)}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found["pyproject.toml's [project] version"] = project["version"]
    return found


def notebooks() -> list[Path]:
    """The notebooks whose set-up cell installs the package: the chapters and their Jupyter
    and Colab editions (notebooks/jupyter/, which the Colab buttons open)."""
    return sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted(
        (ROOT / "notebooks" / "jupyter").glob("*.ipynb"))


def installed_version(path: Path, name: str) -> str | None:
    """The version of ``name`` that the notebook's set-up cell (tag ``colab-setup``)
    installs, from PyPI (``name[notebooks]==V``) or from the repository's tag (``@vV``);
    None if none."""
    cells = [cell for cell in json.loads(path.read_text())["cells"]
             if "colab-setup" in cell.get("metadata", {}).get("tags", [])]
    source = "".join(cells[0]["source"]) if len(cells) == 1 else ""
    found = (re.search(rf'"{re.escape(name)}\[notebooks\]==([^"\s]+)"', source)
             or re.search(r'source = "git\+\S+@v([^"\s]+)"', source))
    return found[1] if found else None


def pairing(paths: list[Path] | None = None) -> list[str]:
    """Why a notebook and the package of its commit are not a pair; empty when they are:
    each set-up cell must install this commit's version."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    name, version = project["name"], project["version"]
    problems = []
    for path in notebooks() if paths is None else paths:
        installs = installed_version(path, name)
        where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        if installs != version:
            problems.append(
                f"{where}: its set-up cell installs {name} {installs or '(no version)'}, "
                f"but this commit's package is {version}: a reader would run it with "
                "another package. Run python scripts/colab_setup.py and make jupyter, and "
                "commit")
    return problems


def changelog() -> str:
    return (ROOT / "CHANGELOG.md").read_text()


def changelog_section(version: str) -> str | None:
    """CHANGELOG.md's text under ``## [version]`` (up to the next ``## ``), or None."""
    match = re.search(rf"^## \[{re.escape(version)}\][^\n]*\n(.*?)(?=^## |\Z)", changelog(),
                      re.MULTILINE | re.DOTALL)
    return match[1].strip() or None if match else None


def no_notes(version: str) -> str:
    return (f"CHANGELOG.md has no section '## [{version}]' with notes: add the release's "
            "changes under that heading")


def check_tag(tag: str) -> list[str]:
    """Why ``tag`` cannot be released; empty when it can."""
    problems = [f"the tag {tag!r} is not {name} ({version!r}) with a leading 'v': tag "
                f"v{version}, or change the version first"
                for name, version in versions().items() if tag != f"v{version}"]
    version = tag.removeprefix("v")
    problems += pairing()
    if changelog_section(version) is None:
        problems.append(no_notes(version))
    elif re.search(rf"^## \[{re.escape(version)}\].*unreleased", changelog(), re.I | re.M):
        problems.append(f"CHANGELOG.md: the section '## [{version}]' says unreleased: date "
                        f"it ('## [{version}] - YYYY-MM-DD'), commit, then tag")
    return problems


def site_url(config: dict | None = None) -> str:
    """The rendered book's URL, ending in "/": ``html.baseurl`` when ``_config.yml`` sets
    it, else the GitHub Pages address of its ``repository.url`` (the one place it is
    written)."""
    config = config or yaml.safe_load((ROOT / "_config.yml").read_text())
    base = (config.get("html") or {}).get("baseurl")
    if not base:
        owner, name = config["repository"]["url"].rstrip("/").split("/")[-2:]
        base = f"https://{owner}.github.io/{name}"
    return base.rstrip("/") + "/"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("check-tag").add_argument("tag")
    commands.add_parser("notes").add_argument("version")
    site = commands.add_parser("site-url")
    site.add_argument("--expect", help="the URL Pages serves the site at (configure-pages)")
    args = parser.parse_args(argv)
    if args.command == "check-tag":
        problems = check_tag(args.tag)
        done = f"{args.tag}: the version everywhere, dated in CHANGELOG.md"
        print("\n".join(problems) or done)
        return 1 if problems else 0
    if args.command == "notes":
        notes = changelog_section(args.version)
        print(notes or no_notes(args.version), file=sys.stdout if notes else sys.stderr)
        return 0 if notes else 1
    url = site_url()
    if args.expect is not None and args.expect.rstrip("/") + "/" != url:
        print(f"GitHub Pages serves the site at {args.expect}, but the book links to {url} "
              "(from _config.yml's repository.url): set html.baseurl in _config.yml to "
              "the address Pages serves, then make jupyter")
        return 1
    print(url)
    return 0


if __name__ == "__main__":
    sys.exit(main())
