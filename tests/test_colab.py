"""The Colab path: every chapter's set-up cell is the one scripts/colab_setup.py writes (from
_config.yml and pyproject.toml), it fails loudly when the install fails, and chapters run in a fresh,
Colab-like environment.

The fresh-environment test takes minutes, so ``make test`` skips it; ``make test-colab`` runs it
(``COLAB_CHAPTERS="01 04"`` by default), and CI calls that target separately. It builds a new venv
holding only torch==2.13.0 (as Colab ships a torch of its own), installs the package from this
checkout through pyproject.toml's ranges with the ``notebooks`` extra, uninstalls the package again
so that the chapter's own set-up cell installs it (offline: from a folder holding the
checkout's wheel, or its ``git+`` URL pointed at the checkout), runs the chapters top to
bottom under nbval, and checks that torch is still the one that was there before.
"""

from __future__ import annotations

import importlib.util
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

_spec = importlib.util.spec_from_file_location("colab_setup", Path(__file__).resolve().parent.parent / "scripts"
                                               / "colab_setup.py")
colab_setup = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(colab_setup)

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
REPOSITORY_URL = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
DISTRIBUTION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"]
SETUP_TAG = "colab-setup"
COLAB_ENV = "GPT_FROM_SCRATCH_TEST_COLAB"  # chapter numbers to run, e.g. "01 04"; unset: skip
TORCH_VERSION = "2.13.0"


def torch_install() -> list[str]:
    """pip's arguments for the torch a fresh venv starts with (Colab's own, here): from
    ``TORCH_INDEX`` where the Makefile's variable is set, e.g. the CPU wheel's index, as on
    CI; else from pip's own index."""
    index = os.environ.get("TORCH_INDEX")
    return [f"torch=={TORCH_VERSION}", *(["--index-url", index] if index else [])]

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
def test_setup_cell_is_the_one_the_script_writes(path):
    nb = read_chapter(path)
    cells = setup_cells(nb)
    assert len(cells) == 1, f"{path.name}: expected exactly one cell tagged {SETUP_TAG!r}, found {len(cells)}"
    first_code = next(c for c in nb.cells if c.cell_type == "code")
    assert first_code is cells[0], f"{path.name}: the {SETUP_TAG} cell must be the first code cell"
    assert cells[0].source == colab_setup.cell_source(), (
        f"{path.name}: the set-up cell drifted from scripts/colab_setup.py's; run python scripts/colab_setup.py")


def test_the_script_finds_no_drift():
    assert colab_setup.main(["--check"]) == 0


def test_setup_cell_installs_the_configured_version_and_says_why_it_failed():
    config = colab_setup.settings()
    assert config["url"] == REPOSITORY_URL and config["name"] == DISTRIBUTION
    git = colab_setup.cell_source({**config, "install": "git-tag"})
    assert f'"{DISTRIBUTION}[notebooks] @ {{source}}"' in git
    assert f"{REPOSITORY_URL}@v{config['version']}" in git  # pinned: this version's tag
    pypi = colab_setup.cell_source({**config, "install": "pypi"})
    assert f'"{DISTRIBUTION}[notebooks]=={config["version"]}"' in pypi
    modes = {"git-tag": git, "pypi": pypi}
    assert colab_setup.cell_source(config) == modes[config["install"]]
    assert all(len(line) <= 92 for line in (git + "\n" + pypi).splitlines())


def test_the_fresh_venv_s_torch_comes_from_torch_index(monkeypatch):
    cpu = "https://download.pytorch.org/whl/cpu"
    monkeypatch.setenv("TORCH_INDEX", cpu)
    assert torch_install() == [f"torch=={TORCH_VERSION}", "--index-url", cpu]
    monkeypatch.delenv("TORCH_INDEX")
    assert torch_install() == [f"torch=={TORCH_VERSION}"]


def test_setup_cell_stops_with_a_clear_message_when_the_install_fails(monkeypatch):
    """The cell as IPython runs it, with the package missing and %pip installing nothing."""
    import builtins

    from IPython.core.inputtransformer2 import TransformerManager

    python = TransformerManager().transform_cell(colab_setup.cell_source())  # %pip -> run_line_magic
    pip_calls = []

    class Shell:
        def run_line_magic(self, name, line, *args):
            pip_calls.append((name, line))  # no network: pip prints its error and installs nothing

    real_import = builtins.__import__

    def no_package(name, *args, **kwargs):
        if name.split(".")[0] == "gpt_from_scratch":
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_package)
    with pytest.raises(RuntimeError, match=r"could not install gpt-from-scratch-book .*internet access"):
        exec(compile(python, "<colab-setup>", "exec"), {"get_ipython": Shell})
    assert pip_calls and pip_calls[0][0] == "pip" and DISTRIBUTION in pip_calls[0][1]


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
    for name in ("pyproject.toml", "README.md", "PYPI.md", "LICENSE", "LICENSE.md",
                 "setup.cfg", "MANIFEST.in"):
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

    run([*pip, *torch_install()])  # Colab's own torch (TORCH_INDEX: the CPU wheel)
    before = torch_version(python)
    assert before.startswith(TORCH_VERSION), before

    package = copy_package(tmp_path / "checkout")
    run([*pip, f"{package}[notebooks]", "nbval", "ipykernel"])  # the chapters' dependencies, from the ranges
    run([python, "-m", "pip", "uninstall", "--yes", "--quiet", DISTRIBUTION])  # the set-up cell installs it
    assert torch_version(python) == before, "installing the package replaced torch"

    workdir = tmp_path / "notebooks"
    workdir.mkdir()
    shutil.copy2(ROOT / "nbval_sanitize.cfg", workdir)
    config = colab_setup.settings()
    for chapter in chapters:
        nb = nbformat.read(chapter, as_version=4)
        (cell,) = setup_cells(nb)
        if config["install"] == "git-tag":  # offline: the checkout stands for the tag
            assert colab_setup.git_source(config) in cell.source
            cell.source = cell.source.replace(colab_setup.git_source(config),
                                              package.as_uri())
        nbformat.write(nb, workdir / chapter.name)

    env = {key: value for key, value in os.environ.items()
           if key not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", COLAB_ENV}}
    if config["install"] == "pypi":  # offline: a folder with the checkout's wheel is PyPI
        wheels = tmp_path / "wheels"
        run([python, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", wheels,
             package])
        env.update(PIP_NO_INDEX="1", PIP_FIND_LINKS=str(wheels))
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", VIRTUAL_ENV=str(venv),
               GPT_FROM_SCRATCH_CACHE=str(tmp_path / "cache"))  # a new reader: nothing cached yet
    run([python, "-m", "pytest", "--nbval-lax", "--nbval-current-env", "--nbval-sanitize-with", "nbval_sanitize.cfg",
         "--nbval-cell-timeout=600", "-p", "no:cacheprovider", "-q", *(c.name for c in chapters)],
        cwd=workdir, env=env)

    run([python, "-c", "import gpt_from_scratch, sys; assert 'site-packages' in gpt_from_scratch.__file__, "
                       "gpt_from_scratch.__file__"], cwd=tmp_path)  # installed by the set-up cell
    run([python, "-m", "pip", "check"])
    assert torch_version(python) == before, "a chapter's set-up cell replaced torch"
