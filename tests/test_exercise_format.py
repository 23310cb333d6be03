"""Every chapter's exercises follow the book's one format (see CONTRIBUTING.md and book/instructors.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="the notebook checks need nbformat (pip install nbformat)")

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "notebooks").glob("*.ipynb"))
HEADING = re.compile(r"^### Exercise (\d+)\. .+ \((implement|predict, then run|explain)\)$", re.MULTILINE)


def exercises(nb) -> list[list]:
    blocks: list[list] = []
    for cell in nb.cells:
        if cell.cell_type == "markdown" and HEADING.search(cell.source):
            blocks.append([cell])
        elif blocks:
            blocks[-1].append(cell)
    return blocks


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_one_exercise_format(path):
    nb = nbformat.read(path, as_version=4)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "{admonition} Answers" not in text, f"{path.name}: chapter-end Answers boxes are gone"
    blocks = exercises(nb)
    assert blocks, f"{path.name}: no '### Exercise N. Title (kind)' heading"
    numbers = [int(HEADING.search(b[0].source)[1]) for b in blocks]
    assert numbers == list(range(1, len(blocks) + 1)), f"{path.name}: exercises numbered {numbers}"
    for block in blocks:
        kind = HEADING.search(block[0].source)[2]
        tags = [c.metadata.get("tags", []) for c in block]
        if kind == "implement":
            solution = next(i for i, t in enumerate(tags) if "solution" in t)
            assert "hide-input" in tags[solution]
            assert block[solution].metadata["mystnb"]["code_prompt_show"] == "Show the solution"
            check = block[solution + 1]
            assert "check_" in check.source and check.source.rstrip().endswith(";"), check.source
            assert not [o for o in check.outputs if o.output_type == "execute_result"], "a stray True"
        else:
            answers = [i for i, t in enumerate(tags) if "answer" in t]
            assert len(answers) == 1, f"{path.name} {block[0].source[:60]}: one answer cell"
            assert "{admonition} Answer" in block[answers[0]].source
            runs = [i for i, c in enumerate(block) if c.cell_type == "code"]
            if kind == "predict, then run":
                assert runs and all(i > answers[0] for i in runs), "the run cell comes after the answer"
