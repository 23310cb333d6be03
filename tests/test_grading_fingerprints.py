"""The teacher's fingerprints, from the files alone (no sandbox): a classmate's file with a
light edit a cheating student would try still lands in its group of the similarity report
(``grading.canonical`` undoes the edit), independent solutions stay apart, and the book's
published solution pasted is hinted while the same code written without the book's comments
is not (``grading.published``)."""

from __future__ import annotations

import ast
import time

import nbformat
import pytest

from grading_class import ROOT, assign
from grading import canonical, integrity, published, similarity

BPE = """def bpe_encode(text, merges):
    out = []
    for chunk in regex.findall(GPT2_PATTERN, text):
        ids = list(chunk.encode("utf-8"))
        while len(ids) >= 2:
            pairs = [p for p in zip(ids, ids[1:]) if p in merges]
            if not pairs:
                break
            best = min(pairs, key=lambda p: merges[p])
            ids = merge_pair(ids, best, merges[best])
        out.extend(ids)
    return out
"""
HEADS = """class LoopedMultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.c_attn = nn.Linear(d_model, 3 * d_model)
        self.c_proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.c_attn(x).split(D, dim=2)
        mask = causal_mask(T)
        outs = []
        for h in range(self.n_heads):
            cols = slice(h * self.d_head, (h + 1) * self.d_head)
            scores = q[..., cols] @ k[..., cols].transpose(-2, -1) / math.sqrt(self.d_head)
            scores = scores.masked_fill(~mask, float("-inf"))
            weights = torch.softmax(scores, dim=-1)
            outs.append(weights @ v[..., cols])
        return self.c_proj(torch.cat(outs, dim=-1))
"""
GRPO = """def grpo_loss(logps, old_logps, advantages, mask, epsilon):
    log_ratio = logps - old_logps
    ratio = torch.exp(log_ratio)
    adv = advantages.unsqueeze(1)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1 - epsilon, 1 + epsilon) * adv
    per_token = -torch.minimum(unclipped, clipped)
    total = (per_token * mask).sum()
    count = mask.sum()
    return total / count
"""
HEAD_LOOP = HEADS[HEADS.index("        outs = []"):
                  HEADS.index("        return self.c_proj")]
# Each scored below the report's 90% before grading.canonical (the share alike then)
EDITS = {
    "comparison_turned": (BPE, BPE.replace("len(ids) >= 2", "2 <= len(ids)")),  # 0.88
    "operands_swapped": (HEADS, HEADS.replace("3 * d_model", "d_model * 3")  # 0.88
                         .replace("(h + 1) * self.d_head", "self.d_head * (1 + h)")
                         .replace("h * self.d_head", "self.d_head * h")),
    "dead_code_added": (GRPO, GRPO.replace(  # 0.88
        "    count = mask.sum()", "    count = mask.sum()\n    unused = epsilon * 2\n"
        "    if False:\n        count = 1")),
    "augmented_assignment": (GRPO, GRPO.replace(  # 0.88
        "    return total / count", "    total /= count\n    return total")),
    "loop_for_a_comprehension": (BPE, BPE.replace(  # 0.83
        "            pairs = [p for p in zip(ids, ids[1:]) if p in merges]",
        "            pairs = []\n            for p in zip(ids, ids[1:]):\n"
        "                if p in merges:\n                    pairs.append(p)")),
    "loop_body_into_a_helper": (HEADS, HEADS.replace(  # 0.87
        HEAD_LOOP,
        "        outs = [self.head(q, k, v, mask, h) for h in range(self.n_heads)]\n",
    )
        + "\n    def head(self, q, k, v, mask, h):\n"
        + HEAD_LOOP.split("\n", 2)[2].replace("            ", "        ").replace(
            "        outs.append(", "        return (")),
}
INDEPENDENT = {  # the same exercise written another way: each pair stays apart
    "heads_vectorised_in_the_loop": HEADS.replace(HEAD_LOOP, """        heads = []
        for h in range(self.n_heads):
            part = slice(h * self.d_head, (h + 1) * self.d_head)
            qh, kh, vh = q[..., part], k[..., part], v[..., part]
            y, _ = scaled_dot_product_attention(qh, kh, vh, mask)
            heads.append(y)
        outs = heads
"""),
    "grpo_by_where": """def grpo_loss(logps, old_logps, advantages, mask, epsilon):
    ratio = (logps - old_logps).exp()
    A = advantages[:, None].expand_as(ratio)
    clipped = ratio.clamp(1 - epsilon, 1 + epsilon) * A
    per_token = -torch.where(ratio * A < clipped, ratio * A, clipped)
    return per_token[mask.bool()].mean()
""",
}


def prints(sources: dict[str, str]) -> dict[str, list[int]]:
    return {name: integrity.fingerprint(ast.parse(s)) for name, s in sources.items()}


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_a_light_edit_of_a_classmates_file_is_grouped_with_it(edit):
    original, edited = EDITS[edit]
    independent = INDEPENDENT[
        "grpo_by_where" if "grpo" in original else "heads_vectorised_in_the_loop"
    ]
    found, complete = similarity.groups(
        prints({"classmate": original, "edited": edited, "own_work": independent}),
        time.monotonic() + 10,
    )
    assert complete and found == [["classmate", "edited"]], found


@pytest.mark.parametrize("name", sorted(INDEPENDENT))
def test_independent_solutions_stay_apart_from_the_classmate_and_the_book(name):
    chapter, exercise, classmate = (
        ("14_verifier", "grpo_loss", GRPO) if "grpo" in name
        else ("04_attention", "LoopedMultiHeadAttention", HEADS)
    )
    book = book_cells(chapter, {exercise})[exercise]
    mine, *others = prints({"mine": INDEPENDENT[name], "classmate": classmate,
                            "book": book}).values()
    assert all(integrity.resemblance(mine, other) < similarity.NEAR for other in others)


def test_a_helper_used_twice_or_calling_itself_is_kept():
    source = (
        "def twice(x):\n    return x + 1\n\n\n"
        "def f(x):\n    return twice(x) * twice(x)\n\n\n"
        "def itself(n):\n    y = n - 1\n    return itself(y)\n"
    )
    kept = canonical.canonical(ast.parse(source))
    assert [n.name for n in kept.body] == ["twice", "f", "itself"]


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
    one_line = (
        "def pass_at_k(n, c, k):\n"
        "    return 1.0 if n - c < k else 1.0 - math.comb(n - c, k) / math.comb(n, k)"
    )
    assert hint(one_line, PASS_AT_K, "pass_at_k") == []
