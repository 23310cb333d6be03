"""The package's two layers: imports run downhill only.

The root of ``gpt_from_scratch`` is the GPT a reader builds; ``book/`` is what the chapters need to
show it, and ``exercises/`` the chapters' checks. Every import of every module is read from its
syntax tree (lazy imports inside functions too: ``book.model_cache.import_graph``, which also
tells which code trains a cached model), and the test fails on a circle between modules or on
an import from the root into ``book`` or ``exercises``.
"""

from __future__ import annotations

import graphlib
import shutil

import pytest

from gpt_from_scratch.book.model_cache import PACKAGE, import_graph

UPPER_LAYERS = ("book", "exercises")


def layer(module: str) -> str:
    top = module.split(".")[0]
    return top if top in UPPER_LAYERS else "root"


def violations(graph: dict[str, set[str]]) -> list[str]:
    """Every upward import, and the first circle found, as sentences."""
    found = [f"{m} (the GPT) imports {d} ({layer(d)}): the root must not import {layer(d)}/"
             for m, deps in sorted(graph.items()) for d in sorted(deps)
             if layer(m) == "root" and layer(d) != "root"]
    found += [f"{m} (the book) imports {d} (exercises)" for m, deps in sorted(graph.items())
              for d in sorted(deps) if layer(m) == "book" and layer(d) == "exercises"]
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as err:
        found.append("import circle: " + " -> ".join(err.args[1]))
    return found


def test_the_packages_imports_run_downhill():
    graph = import_graph()
    assert {"model", "train", "book.recipes", "book.plotting"} <= set(graph)  # the walk found them
    assert "attention" in graph["model"] and "model" in graph["book.recipes"]
    assert violations(graph) == []


@pytest.mark.parametrize("module, line, expected", [
    ("model.py", "from .train import train\n", "import circle"),
    ("bpe.py", "from .bpe_tokenizer import BPETokenizer\n", "import circle"),
    ("train.py", "from .book.recipes import RECIPES\n", "train (the GPT) imports book.recipes"),
    ("hf_weights.py", "def f():\n    from gpt_from_scratch.book import plotting\n",
     "hf_weights (the GPT) imports book.plotting"),
])
def test_a_reintroduced_circle_or_upward_import_is_found(tmp_path, module, line, expected):
    package = tmp_path / PACKAGE.name
    shutil.copytree(PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__"))
    with open(package / module, "a", encoding="utf-8") as f:
        f.write("\n" + line)
    found = violations(import_graph(package))
    assert any(expected in v for v in found), found


def test_every_subpackage_is_in_the_built_package():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    pyproject = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text(encoding="utf-8"))
    listed = set(pyproject["tool"]["setuptools"]["packages"])
    folders = {".".join(p.parent.relative_to(PACKAGE.parent).parts) for p in PACKAGE.rglob("__init__.py")}
    assert folders == listed, f"pyproject.toml's [tool.setuptools] packages must list {sorted(folders)}"
