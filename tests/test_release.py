"""The release procedure (.github/workflows/release.yml, scripts/release.py), and its
rehearsal here.

Fast, in ``make test``: the version is the same wherever it is written, a tag that is not it
is refused with the reason, CHANGELOG.md has the version's notes, CITATION.cff agrees
with pyproject.toml and _config.yml, and every notebook's set-up cell installs the version
of its own commit (``release.pairing``, which the release workflow's tag check includes:
the Colab buttons open the notebooks of the tag ``v<version>``, so a notebook and its
package are a pair); a mismatched pair is refused with the notebook, both versions and the
fix.

Slow, ``make test-release`` (GPT_FROM_SCRATCH_TEST_RELEASE=1): the whole chain as a reader
meets it, offline. The wheel and sdist are built (``python -m build``); a fresh venv gets
only torch, then the package's dependencies; a folder holding the built wheel stands for
PyPI (``PIP_NO_INDEX``, ``PIP_FIND_LINKS``); every chapter's set-up cell, as its Jupyter and
Colab edition has it, runs in that venv (the package uninstalled before each, so that each
cell installs it), as IPython's ``%pip`` runs pip; then the installed version must be the
one a tag would name, and torch the one that was there. CITATION.cff is validated by
``cffconvert --validate`` in a venv of its own (cffconvert 2.0.0 needs jsonschema < 4,
which requirements.txt's Jupyter stack cannot have).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import time
import tomllib
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml", reason="reading _config.yml needs PyYAML")
pytest.importorskip("nbformat", reason="scripts/colab_setup.py reads the chapters with nbformat")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from scripts import colab_setup, release  # noqa: E402
from test_colab import torch_install  # noqa: E402  (TORCH_INDEX: CI's CPU wheel)

RELEASE_ENV = "GPT_FROM_SCRATCH_TEST_RELEASE"
CFFCONVERT = "cffconvert==2.0.0"


def test_the_version_is_the_same_everywhere():
    assert len(set(release.versions().values())) == 1, release.versions()


def test_a_tag_that_is_not_the_version_is_refused_with_each_reason():
    problems = release.check_tag("v99.0")
    assert len(problems) == len(release.versions()) + 1, problems
    assert all("99.0" in p for p in problems), problems
    assert any("CHANGELOG.md has no section '## [99.0]'" in p for p in problems)


def test_every_notebook_installs_the_package_of_its_commit():
    chapters = sorted((ROOT / "notebooks").glob("*.ipynb"))
    assert len(release.notebooks()) == 2 * len(chapters) > 0  # each chapter, its edition
    assert release.pairing() == []


def test_a_mismatched_pair_is_refused_with_a_clear_message(tmp_path, monkeypatch):
    import nbformat

    settings = colab_setup.settings()
    name, version = settings["name"], settings["version"]
    cells = {"older.ipynb": colab_setup.cell_source({**settings, "version": "0.0.9"}),
             "git.ipynb": colab_setup.cell_source({**settings, "install": "git-tag",
                                                   "version": "0.0.8"}),
             "none.ipynb": "import gpt_from_scratch",
             "paired.ipynb": colab_setup.cell_source({**settings, "install": "git-tag"})}
    paths = []
    for file, source in cells.items():
        cell = nbformat.v4.new_code_cell(source, metadata={"tags": ["colab-setup"]})
        nbformat.write(nbformat.v4.new_notebook(cells=[cell]), tmp_path / file)
        paths.append(tmp_path / file)
    problems = release.pairing(paths)
    assert len(problems) == 3, problems
    for problem, installs in zip(problems, ("0.0.9", "0.0.8", "(no version)")):
        assert f"installs {name} {installs}, but this commit's package is {version}" in (
            problem)
        assert "python scripts/colab_setup.py and make jupyter" in problem
    monkeypatch.setattr(release, "notebooks", lambda: paths[:1])
    assert any("older.ipynb: its set-up cell installs" in p
               for p in release.check_tag(f"v{version}")), "the release would go ahead"


def test_the_changelog_has_the_version_s_notes():
    version = release.versions()["gpt_from_scratch.__version__"]
    assert release.changelog_section(version), release.no_notes(version)
    assert release.main(["notes", version]) == 0


def test_the_citation_agrees_with_pyproject_and_config():
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    settings = colab_setup.settings()
    wanted = {"version": settings["version"], "url": release.site_url(),
              "repository-code": config["repository"]["url"], "title": config["title"],
              "license": "MIT", "cff-version": "1.2.0"}
    wrong = {key: (citation.get(key), value) for key, value in wanted.items()
             if citation.get(key) != value}
    assert not wrong, f"CITATION.cff: (has, should have) {wrong}"


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_the_pypi_page_leads_back_to_the_book():
    """Project URLs, and a description of its own (PYPI.md) whose links are absolute:
    README.md's relative links would break on PyPI."""
    meta = project()
    repository = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    wanted = {"Homepage": release.site_url(), "Source": repository,
              "Issues": f"{repository}/issues",
              "Changelog": f"{repository}/blob/main/CHANGELOG.md"}
    assert meta.get("urls") == wanted, f"pyproject.toml [project.urls]: {meta.get('urls')}"
    assert meta["readme"] == {"file": "PYPI.md", "content-type": "text/markdown"}
    page = (ROOT / "PYPI.md").read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", page)
    relative = [link for link in links if not link.startswith("https://")]
    assert links and not relative, f"PYPI.md: links that break on PyPI: {relative}"
    assert {release.site_url(), repository} <= set(links), links


def test_the_python_classifiers_are_the_versions_requires_python_admits():
    meta = project()
    lowest = re.fullmatch(r">=3\.(\d+)", meta["requires-python"])
    assert lowest, meta["requires-python"]
    minors = sorted(int(c.rsplit(".", 1)[1]) for c in meta["classifiers"]
                    if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c))
    assert minors and minors[0] == int(lowest[1]), (minors, meta["requires-python"])
    assert minors == list(range(minors[0], minors[-1] + 1)), f"a version missing: {minors}"


def test_the_sdist_ships_no_tests_without_what_they_need(tmp_path):
    """tests/ needs its conftest.py, scripts/ and notebooks/: the sdist has none of them
    (MANIFEST.in), only the package, its metadata and its licence."""
    pytest.importorskip("build", reason="python -m build (requirements.txt)")
    setuptools = pytest.importorskip("setuptools")
    if int(setuptools.__version__.split(".")[0]) < 77:
        pytest.skip(f"setuptools {setuptools.__version__}: the build needs 77 or newer")
    run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir", tmp_path,
         ROOT])
    (sdist,) = tmp_path.glob("*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
        info = archive.extractfile(next(n for n in archive.getnames()
                                        if n.endswith("/PKG-INFO"))).read().decode()
    tests = sorted(name for name in names if name.split("/")[0] in ("tests", "scripts"))
    assert not tests, f"the sdist ships {len(tests)} test files: {tests[:3]}"
    assert {"PYPI.md", "LICENSE", "pyproject.toml", "gpt_from_scratch/__init__.py"} <= names
    assert "Project-URL: Homepage, https://" in info and "Python :: 3.10" in info


def test_the_site_url_comes_from_the_repository_or_baseurl():
    repository = {"repository": {"url": "https://github.com/someone/a-book/"}}
    assert release.site_url(repository) == "https://someone.github.io/a-book/"
    moved = {**repository, "html": {"baseurl": "https://book.example.org"}}
    assert release.site_url(moved) == "https://book.example.org/"
    assert release.main(["site-url", "--expect", "https://elsewhere.example.org/"]) == 1
    assert release.main(["site-url", "--expect", release.site_url().rstrip("/")]) == 0


# ------------------------------------------------------------------------------------------
# The rehearsal (`make test-release`)
# ------------------------------------------------------------------------------------------


def run(command: list, **kwargs) -> str:
    """Run a command, print how long it took, fail with its last lines when it fails."""
    start = time.perf_counter()
    result = subprocess.run([str(c) for c in command], capture_output=True, text=True,
                            **kwargs)
    print(f"[{time.perf_counter() - start:6.1f} s] {' '.join(map(str, command[:6]))}")
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-40:])
        pytest.fail(f"exit {result.returncode}: {' '.join(map(str, command))}\n{tail}",
                    pytrace=False)
    return result.stdout


# IPython runs `%pip LINE` as the shell command `<its python> -m pip LINE`; this stands in
# for IPython in a venv that has none, and runs the cell that IPython's transformer wrote.
RUN_CELL = """\
import subprocess, sys
class Shell:
    def run_line_magic(self, name, line):
        assert name == "pip", f"the set-up cell uses %{name}; only %pip is rehearsed"
        subprocess.run(f"{sys.executable} -m pip {line}", shell=True)
exec(compile(open(sys.argv[1]).read(), sys.argv[1], "exec"), {"get_ipython": Shell})
"""


@pytest.mark.skipif(not os.environ.get(RELEASE_ENV),
                    reason=f"slow (minutes): run with `make test-release` ({RELEASE_ENV})")
def test_the_release_installs_from_a_package_index_in_every_chapter(tmp_path):
    from IPython.core.inputtransformer2 import TransformerManager

    settings = colab_setup.settings()
    name, version = settings["name"], settings["version"]
    assert settings["install"] == "pypi", (
        "pyproject.toml: [tool.gpt-from-scratch.colab] install must be 'pypi', where the "
        f"release workflow publishes; it is {settings['install']!r}")
    # Before the release day its CHANGELOG section may still say "unreleased"; nothing else.
    refused = [p for p in release.check_tag(f"v{version}") if "unreleased" not in p]
    assert not refused, f"the release workflow would refuse v{version}: {refused}"
    mismatched = release.pairing()  # check_tag's too: said here on its own
    assert not mismatched, "notebooks, package: two versions\n" + "\n".join(mismatched)

    index = tmp_path / "index"
    run([sys.executable, "-m", "build", "--outdir", index, ROOT])
    wheels = sorted(index.glob("*.whl"))
    built = sorted(index.iterdir())
    assert len(wheels) == 1 and len(list(index.glob("*.tar.gz"))) == 1, built
    assert f"-{version}-" in wheels[0].name, wheels[0].name

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", venv])
    python = venv / "bin" / "python"
    torch_version = [python, "-c", "import torch; print(torch.__version__)"]
    run([python, "-m", "pip", "install", "--quiet", *torch_install()])  # Colab's own
    torch_before = run(torch_version).strip()
    # The dependencies from the index the reader has; the package itself then only from the
    # local index, as each set-up cell installs it.
    run([python, "-m", "pip", "install", "--quiet", f"{wheels[0]}[notebooks]"])
    offline = {**os.environ, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(index)}
    runner = tmp_path / "run_cell.py"
    runner.write_text(RUN_CELL)
    # The editions: the notebooks the Colab buttons open (at the tag of this version).
    cells = {chapter.name: colab_setup.current_cell(chapter)
             for chapter in sorted((ROOT / "notebooks" / "jupyter").glob("*.ipynb"))}
    assert cells and all(cells.values()), f"an edition has no set-up cell: {cells}"
    for chapter, source in cells.items():
        run([python, "-m", "pip", "uninstall", "--yes", "--quiet", name])
        cell = tmp_path / f"{chapter}.py"
        cell.write_text(TransformerManager().transform_cell(source))
        run([python, runner, cell], env=offline, cwd=tmp_path)
        installed = run([python, "-c", "import gpt_from_scratch, importlib.metadata as m; "
                         f"print(gpt_from_scratch.__version__, m.version({name!r}))"],
                        cwd=tmp_path).split()
        assert installed == [version, version], f"{chapter}: installed {installed}"
    assert run(torch_version).strip() == torch_before, "the set-up cell replaced torch"
    run([python, "-m", "pip", "check"])


@pytest.mark.skipif(not os.environ.get(RELEASE_ENV),
                    reason=f"installs {CFFCONVERT}: run with `make test-release`")
def test_the_citation_is_valid_cff(tmp_path):
    run([sys.executable, "-m", "venv", tmp_path / "cff"])
    run([tmp_path / "cff" / "bin" / "pip", "install", "--quiet", CFFCONVERT])
    out = run([tmp_path / "cff" / "bin" / "cffconvert", "--validate", "-i",
               ROOT / "CITATION.cff"])
    assert "valid" in out, out
