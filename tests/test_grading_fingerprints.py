"""The book's published solution pasted is hinted on the teacher's sheet, the same code
written without the book's comments is not (``grading.published``); from the files alone."""

from __future__ import annotations

import nbformat

from grading_class import ROOT, assign
from grading import published


def book_cells(chapter: str, names: set[str]) -> dict[str, str]:
    nb = nbformat.read(ROOT / "notebooks" / f"{chapter}.ipynb", as_version=4)
    cells = assign.published(nb, assign.ASSIGNMENTS[chapter])
    return {name: cell for name, cell in cells.items() if name in names}


TOP_P = book_cells("07_generation", {"top_p_unsorted"})["top_p_unsorted"]
PASS_AT_K = book_cells("14_verifier", {"pass_at_k"})["pass_at_k"]


def hint(cell: str, book: str, name: str) -> list[str]:
    return published.flags(["import torch", cell, "print(1)"], name, book)


def test_the_books_cell_pasted_is_hinted_with_its_names_changed_too():
    assert hint(TOP_P, TOP_P, "top_p_unsorted") == [
        "the book's published solution, pasted line for line"
    ]
    renamed = TOP_P.replace("probs", "p").replace("mass_above", "above_mass")
    (found,) = hint("%%time\n" + renamed, TOP_P, "top_p_unsorted")
    assert "alike, its comment '(..., V, V): [i, j] = j beats i' kept" in found


def test_the_same_code_without_the_books_comments_is_not_hinted():
    bare = "\n".join(line.split("  #")[0] for line in TOP_P.splitlines())
    assert "#" in TOP_P and hint(bare, TOP_P, "top_p_unsorted") == []
    sorting = (
        "def top_p_unsorted(logits, p):\n"
        "    probs, order = torch.softmax(logits, -1).sort(descending=True)\n"
        "    drop = probs.cumsum(-1) - probs >= p  # (..., V, V): [i, j] = j beats i\n"
        "    return logits.masked_fill(drop.scatter(-1, order, drop), float('-inf'))"
    )
    assert hint(sorting, TOP_P, "top_p_unsorted") == []  # a comment alone: no near copy


def test_a_solution_without_comments_is_hinted_only_line_for_line():
    """The book's pass@k has no comment: its lines, as the book writes them, are all a
    paste keeps (the hint says so; a short solution may be written alike)."""
    assert "#" not in PASS_AT_K and hint(PASS_AT_K, PASS_AT_K, "pass_at_k")
    one_line = ("def pass_at_k(n, c, k):\n"
                "    return 1.0 if n - c < k else 1.0 - math.comb(n - c, k) / math.comb(n, k)")
    assert hint(one_line, PASS_AT_K, "pass_at_k") == []
