"""The front matter names every chapter of the table of contents: the introduction (also the
PDF's preface, book/_ext/print_edition.py) lists what each chapter builds, and the closing page
sums it up."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def chapter_labels() -> list[str]:
    """The label each chapter of _toc.yml opens with, in the table's order (from its text twin)."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    files = [c["file"] for part in toc["parts"] for c in part["chapters"]
             if c["file"].startswith("notebooks/")]
    labels = []
    for file in files:
        twin = ROOT / "notebooks" / "text" / (Path(file).name + ".py")
        found = re.search(r"^# \((ch-[\w-]+)\)=$", twin.read_text(encoding="utf-8"), re.M)
        assert found, f"{twin.name} opens with no (ch-...)= label"
        labels.append(found.group(1))
    return labels


def test_each_chapter_of_the_toc_has_its_own_label():
    labels = chapter_labels()
    assert len(labels) >= 13 and len(set(labels)) == len(labels), labels


@pytest.mark.parametrize("page", ["intro.md", "closing.md"])
def test_the_front_and_closing_pages_name_every_chapter_in_order(page):
    text = (ROOT / "book" / page).read_text(encoding="utf-8")
    at = [min((m.start() for m in re.finditer(rf"[<`]{label}[>`]", text)), default=-1)
          for label in chapter_labels()]
    missing = [label for label, i in zip(chapter_labels(), at) if i < 0]
    assert not missing, f"book/{page} never links {missing}: add each chapter to its list"
    assert at == sorted(at), f"book/{page} lists the chapters out of the table's order"
