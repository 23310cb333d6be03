"""The Colab path: every chapter's set-up cell installs this repository, and chapters run in a fresh,
Colab-like environment.

The fresh-environment test takes minutes, so ``make test`` skips it; ``make test-colab`` runs it
(``COLAB_CHAPTERS="01 04"`` by default), and CI calls that target separately. It builds a new venv
holding only torch==2.13.0 (as Colab ships a torch of its own), installs the package from this
checkout through pyproject.toml's ranges with the ``notebooks`` extra, uninstalls the package again
so that the chapter's own set-up cell installs it (its ``git+`` URL pointed at the checkout, the
machine being offline), runs the chapters top to bottom under nbval, and checks that torch is still
the one that was there before.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

jupytext = pytest.importorskip("jupytext", reason="the chapter checks need jupytext (pip install jupytext)")
nbformat = pytest.importorskip("nbformat", reason="the chapter checks need nbformat (pip install nbformat)")
yaml = pytest.importorskip("yaml", reason="reading _config.yml needs PyYAML (pip install pyyaml)")

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
REPOSITORY_URL = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
DISTRIBUTION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"]
SETUP_TAG = "colab-setup"
# %pip install --quiet "gpt-from-scratch-book @ git+https://github.com/owner/repo" (an extra such as [notebooks] allowed)
INSTALL_LINE = re.compile(r'%pip install --quiet "(?P<name>[\w.-]+)(?P<extras>\[[\w,-]+\])? @ git\+(?P<url>[^"@#]+)"')
COLAB_ENV = "GPT_FROM_SCRATCH_TEST_COLAB"  # chapter numbers to run, e.g. "01 04"; unset: skip
TORCH_VERSION = "2.13.0"

CHAPTER_FILES = sorted(NOTEBOOKS.glob("*.ipynb")) + sorted((NOTEBOOKS / "text").glob("*.py"))


def read_chapter(path: Path):
    return nbformat.read(path, as_version=4) if path.suffix == ".ipynb" else jupytext.read(path)


def setup_cells(nb) -> list:
    return [c for c in nb.cells if c.cell_type == "code" and SETUP_TAG in c.metadata.get("tags", [])]


# ----------------------------------------------------------------------------------------------
# Every chapter's set-up cell (fast, part of `make test`)
# ----------------------------------------------------------------------------------------------


@pytest.mark.skipif(not CHAPTER_FILES, reason="no chapter yet")
@pytest.mark.parametrize("path", CHAPTER_FILES, ids=lambda p: str(p.relative_to(NOTEBOOKS)))
def test_setup_cell_installs_the_configured_repository(path):
    nb = read_chapter(path)
    cells = setup_cells(nb)
    assert len(cells) == 1, f"{path.name}: expected exactly one cell tagged {SETUP_TAG!r}, found {len(cells)}"
    first_code = next(c for c in nb.cells if c.cell_type == "code")
    assert first_code is cells[0], f"{path.name}: the {SETUP_TAG} cell must be the first code cell"
    matches = list(INSTALL_LINE.finditer(cells[0].source))
    assert len(matches) == 1, f"{path.name}: no `%pip install --quiet \"NAME @ git+URL\"` line in:\n{cells[0].source}"
    install = matches[0]
    assert install["url"] == REPOSITORY_URL, (
        f"{path.name} installs from {install['url']}, but _config.yml's repository.url is {REPOSITORY_URL}"
    )
    assert install["name"] == DISTRIBUTION, (
        f"{path.name} installs {install['name']!r}, but pyproject.toml names the distribution {DISTRIBUTION!r}"
    )
    assert "import gpt_from_scratch" in cells[0].source  # installs only where the package is missing


@pytest.mark.skipif(len(CHAPTER_FILES) < 2, reason="fewer than two chapters")
def test_setup_cells_are_identical_in_every_chapter():
    sources = {path.name: setup_cells(read_chapter(path))[0].source.strip() for path in CHAPTER_FILES
               if setup_cells(read_chapter(path))}
    distinct = sorted(set(sources.values()))
    assert len(distinct) == 1, "the set-up cells differ:\n" + "\n---\n".join(
        f"{[n for n, s in sources.items() if s == text]}:\n{text}" for text in distinct)


# ----------------------------------------------------------------------------------------------
# A fresh Colab-like environment (minutes: `make test-colab`)
# ----------------------------------------------------------------------------------------------


def run(command: list, **kwargs) -> str:
    """Run a command and return its stdout; on failure show the last lines of its output."""
    start = time.perf_counter()
    result = subprocess.run([str(c) for c in command], capture_output=True, text=True, **kwargs)
    output = result.stdout + result.stderr
    print(f"[{time.perf_counter() - start:6.1f} s] {' '.join(str(c) for c in command[:6])}")
    if result.returncode != 0:
        tail = "\n".join(output.splitlines()[-60:])
        pytest.fail(f"exit {result.returncode}: {' '.join(map(str, command))}\n{tail}", pytrace=False)
    return result.stdout


def torch_version(python: Path) -> str:
    return run([python, "-c", "import torch; print(torch.__version__)"]).strip().splitlines()[-1]


def copy_package(dest: Path) -> Path:
    """What a `git clone` of the repository gives pip: pyproject.toml, its readme/licence and the package."""
    dest.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE", "LICENSE.md", "setup.cfg", "MANIFEST.in"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, dest / name)
    shutil.copytree(ROOT / "gpt_from_scratch", dest / "gpt_from_scratch",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest


def colab_chapters() -> list[Path]:
    chapters = []
    for number in os.environ.get(COLAB_ENV, "").split():
        found = sorted(NOTEBOOKS.glob(f"{number}_*.ipynb"))
        assert len(found) == 1, f"{COLAB_ENV}: chapter {number!r} should match one notebooks/{number}_*.ipynb, got {found}"
        chapters.append(found[0])
    return chapters


@pytest.mark.skipif(not os.environ.get(COLAB_ENV), reason=f"slow (minutes): run with `make test-colab` ({COLAB_ENV})")
def test_chapters_run_in_a_fresh_colab_like_environment(tmp_path):
    chapters = colab_chapters()
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", venv])
    python = venv / "bin" / "python"
    pip = [python, "-m", "pip", "install", "--quiet"]

    run([*pip, f"torch=={TORCH_VERSION}"])  # Colab's own torch (here: the CPU wheel)
    before = torch_version(python)
    assert before.startswith(TORCH_VERSION), before

    package = copy_package(tmp_path / "checkout")
    run([*pip, f"{package}[notebooks]", "nbval", "ipykernel"])  # the chapters' dependencies, from the ranges
    run([python, "-m", "pip", "uninstall", "--yes", "--quiet", DISTRIBUTION])  # the set-up cell installs it
    assert torch_version(python) == before, "installing the package replaced torch"

    workdir = tmp_path / "notebooks"
    workdir.mkdir()
    shutil.copy2(ROOT / "nbval_sanitize.cfg", workdir)
    for chapter in chapters:
        nb = nbformat.read(chapter, as_version=4)
        (cell,) = setup_cells(nb)
        assert f"git+{REPOSITORY_URL}" in cell.source
        cell.source = cell.source.replace(f"git+{REPOSITORY_URL}", package.as_uri())  # offline: the checkout
        nbformat.write(nb, workdir / chapter.name)

    env = {key: value for key, value in os.environ.items()
           if key not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", COLAB_ENV}}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", VIRTUAL_ENV=str(venv),
               GPT_FROM_SCRATCH_CACHE=str(tmp_path / "cache"))  # a new reader: nothing cached yet
    run([python, "-m", "pytest", "--nbval-lax", "--nbval-current-env", "--nbval-sanitize-with", "nbval_sanitize.cfg",
         "--nbval-cell-timeout=600", "-p", "no:cacheprovider", "-q", *(c.name for c in chapters)],
        cwd=workdir, env=env)

    run([python, "-c", "import gpt_from_scratch, sys; assert 'site-packages' in gpt_from_scratch.__file__, "
                       "gpt_from_scratch.__file__"], cwd=tmp_path)  # installed by the set-up cell
    run([python, "-m", "pip", "check"])
    assert torch_version(python) == before, "a chapter's set-up cell replaced torch"
