"""Write the Colab set-up cell into every chapter, from the one place that configures it.

    python scripts/colab_setup.py           # rewrite the cell in notebooks/text/*.py and notebooks/*.ipynb
    python scripts/colab_setup.py --check   # exit 1 when a chapter's cell differs (tests/test_colab.py)

The repository URL is ``_config.yml``'s ``repository.url`` (the book's Colab and repository buttons
use it too); the distribution name and version are ``pyproject.toml``'s ``[project]``; and
``[tool.gpt-from-scratch.colab] install`` says where the cell installs from: ``"git-tag"`` (the
repository at tag ``v<version>``) or ``"pypi"`` (the released ``<name>==<version>``). The cell
installs the package only where it is missing, keeps the runtime's torch (the dependencies are
ranges), and stops with a clear message when the install fails.

The Colab buttons (the book's, the README's: ``colab_url``) open the notebooks of the same
tag, ``v<version>``, whose set-up cell installs that version, published from that tag: a
notebook and its package are always of one commit. ``scripts/release.py`` refuses a release
whose notebooks install another version; ``make test-release`` rehearses the pair.
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parent.parent
SETUP_TAG = "colab-setup"
TWIN_CELL = re.compile(r'^# %% tags=\["colab-setup"\]\n(?P<body>.*?)(?=\n\n# %%)', re.MULTILINE | re.DOTALL)


def settings() -> dict:
    """The repository URL, the distribution's name and version, and where the cell installs from."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    install = project.get("tool", {}).get("gpt-from-scratch", {}).get("colab", {}).get("install", "git-tag")
    if install not in ("git-tag", "pypi"):
        raise SystemExit(f"pyproject.toml: [tool.gpt-from-scratch.colab] install = {install!r}; "
                         "use 'git-tag' or 'pypi'")
    url = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    return {"url": url, "name": project["project"]["name"], "version": project["project"]["version"],
            "install": install}


def colab_ref(config: dict | None = None) -> str:
    """The git ref whose notebooks the Colab buttons open: the release's tag v<version>."""
    return f"v{(config or settings())['version']}"


def colab_url(chapter: str, config: dict | None = None) -> str:
    """Where Colab opens a chapter's Jupyter and Colab edition (``chapter``: "06_training"):
    ``notebooks/jupyter/`` at the release's tag, on the repository of ``_config.yml``."""
    book = yaml.safe_load((ROOT / "_config.yml").read_text())
    repository = book["repository"]["url"].rstrip("/").removeprefix("https://github.com/")
    return (f"{book['launch_buttons']['colab_url'].rstrip('/')}/github/{repository}/blob/"
            f"{colab_ref(config)}/notebooks/jupyter/{chapter}.ipynb")


def git_source(config: dict) -> str:
    """What pip installs from in "git-tag" mode (tests/test_colab.py swaps it for a local checkout)."""
    return f"git+{config['url']}@v{config['version']}"


def cell_source(config: dict | None = None) -> str:
    config = config or settings()
    name, version = config["name"], config["version"]
    if config["install"] == "git-tag":
        install = (f'    source = "{git_source(config)}"\n'
                   f'    %pip install --quiet "{name}[notebooks] @ {{source}}"\n')
        failed = (f'            f"could not install {name} {version} from {{source}}: check that the "\n'
                  f'            "runtime has internet access and that this tag exists") from None')
    else:
        install = f'    %pip install --quiet "{name}[notebooks]=={version}"\n'
        failed = (f'            "could not install {name} {version}: check that the runtime has "\n'
                  f'            "internet access and that this version is on PyPI") from None')
    return (
        "# Set-up: on Colab, or wherever the package is missing, install it (your own torch is kept).\n"
        "# Written by scripts/colab_setup.py from _config.yml and pyproject.toml.\n"
        "try:\n"
        "    import gpt_from_scratch\n"
        "except ImportError:\n"
        f"{install}"
        "    try:\n"
        "        import gpt_from_scratch\n"
        "    except ImportError:\n"
        "        raise RuntimeError(\n"
        f"{failed}"
    )


def chapter_files() -> list[Path]:
    return sorted((ROOT / "notebooks" / "text").glob("*.py")) + sorted((ROOT / "notebooks").glob("*.ipynb"))


def current_cell(path: Path) -> str | None:
    if path.suffix == ".py":
        match = TWIN_CELL.search(path.read_text())
        return match["body"] if match else None
    cells = [c for c in nbformat.read(path, as_version=4).cells
             if c.cell_type == "code" and SETUP_TAG in c.metadata.get("tags", [])]
    return cells[0].source if len(cells) == 1 else None


def write_cell(path: Path, source: str) -> None:
    if path.suffix == ".py":
        text = path.read_text()
        if not TWIN_CELL.search(text):
            raise SystemExit(f"{path}: no cell tagged {SETUP_TAG!r}")
        path.write_text(TWIN_CELL.sub(lambda m: m.group(0).replace(m["body"], source), text, count=1))
        return
    nb = nbformat.read(path, as_version=4)
    cells = [c for c in nb.cells if c.cell_type == "code" and SETUP_TAG in c.metadata.get("tags", [])]
    if len(cells) != 1:
        raise SystemExit(f"{path}: expected one cell tagged {SETUP_TAG!r}, found {len(cells)}")
    cells[0].source = source
    nbformat.write(nb, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="report drift instead of writing")
    args = parser.parse_args(argv)
    source = cell_source()
    drifted = [p for p in chapter_files() if current_cell(p) != source]
    if args.check:
        for path in drifted:
            print(f"{path.relative_to(ROOT)}: the set-up cell differs; run python scripts/colab_setup.py")
        return 1 if drifted else 0
    for path in drifted:
        write_cell(path, source)
        print(f"{path.relative_to(ROOT)}: set-up cell written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
