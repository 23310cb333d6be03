"""Assignments: per chapter, the notebook students hand in and the grader's material.

    python scripts/assign.py                       # every chapter with graded exercises -> _build/assign/
    python scripts/assign.py 04 --out /tmp/assign  # one chapter

For chapter ``NN_name`` it writes ``<out>/NN_name/``:

- ``student/NN_name.ipynb``: the whole chapter, student copy (``make_student.py``), for reading and for
  the predict/explain exercises;
- ``student/NN_name_assignment.ipynb``: **the notebook students hand in**: the set-up cell, the names
  the exercises may use, and each graded exercise (instructions, the stub, the public check). It runs
  in seconds, untouched or solved, without the rest of the chapter;
- ``autograder/assignment.json``: exercises, points, set-up, for ``scripts/grade.py``, and
  each exercise's solution cell as the book publishes it (the grader hints at a paste).

It also creates the course secret (``grading.secret``) when there is none: the private cases' inputs
are drawn from it. The cases themselves are read by the grader from the course's folder
(``--tests``) or the repository's public defaults (``scripts/private_tests/``); assign never
writes or deletes either.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_student  # noqa: E402  (scripts/ is not a package)
from grading.secret import create_secret, secret_path  # noqa: E402

PRIVATE_TESTS = ROOT / "scripts" / "private_tests"


@dataclass(frozen=True)
class Exercise:
    name: str  # the function or class the student writes, as the instructions name it
    points: int
    check: str  # the public checker its check cell calls


@dataclass(frozen=True)
class Assignment:
    chapter: str  # the notebook's stem
    setup: str  # what the exercises may use; run before the student's cell, in the notebook and the grader
    exercises: tuple[Exercise, ...]


ASSIGNMENTS = {a.chapter: a for a in [
    Assignment("01_tokens_and_batches", "import numpy as np\nimport torch",
               (Exercise("SortedCharTokenizer", 2, "check_char_tokenizer"),
                Exercise("get_batch_stacked", 2, "check_get_batch"))),
    Assignment("01b_bpe_from_scratch",
               "import regex\n\nfrom gpt_from_scratch.bpe import merge as merge_pair\n"
               "from gpt_from_scratch.tokenizer import GPT2_PATTERN",
               (Exercise("bpe_encode", 3, "check_bpe_encode"),)),
    Assignment("02_embeddings_and_position", "import math\n\nimport torch",
               (Exercise("sinusoidal_table", 2, "check_sinusoidal_positional_encoding"),)),
    Assignment("03_layer_normalization", "import torch\nfrom torch import nn",
               (Exercise("LayerNormModule", 2, "check_layer_norm"),)),
    Assignment("04_attention",
               "import math\n\nimport torch\nimport torch.nn.functional as F\nfrom torch import nn\n\n"
               "from gpt_from_scratch.attention import causal_mask, scaled_dot_product_attention",
               (Exercise("causal_mask_arange", 2, "check_causal_mask"),
                Exercise("einsum_attention", 2, "check_scaled_dot_product_attention"),
                Exercise("LoopedMultiHeadAttention", 3, "check_multi_head_attention"))),
    Assignment("05_gpt_model",
               "import torch\nfrom torch import nn\n\nfrom gpt_from_scratch.attention import MultiHeadAttention\n"
               "from gpt_from_scratch.layernorm import LayerNorm\n"
               "from gpt_from_scratch.model import FeedForward, GPTConfig",
               (Exercise("ParallelBlock", 3, "check_parallel_block"),)),
    Assignment("06_training", "import torch\nimport torch.nn.functional as F",
               (Exercise("cross_entropy_by_hand", 2, "check_cross_entropy"),)),
    Assignment("07_generation", "import torch",
               (Exercise("min_p_filter", 2, "check_min_p_filter"),
                Exercise("top_p_unsorted", 3, "check_top_p_filter"))),
    Assignment("08_gpt2_weights", "import torch",
               (Exercise("offset_scores", 2, "check_offset_scores"),)),
    Assignment("09_finetuning", "import torch",
               (Exercise("lora_forward", 2, "check_lora_forward"),)),
    Assignment("10_modern_llm", "import torch\nfrom torch import nn",
               (Exercise("RMSNormModule", 2, "check_rms_norm"),
                Exercise("rope_interleaved", 3, "check_rope_interleaved"),
                Exercise("repeat_kv_heads", 2, "check_repeat_kv"))),
    Assignment("11_measuring", "import math\n\nimport torch",
               (Exercise("acc_norm_picks", 2, "check_acc_norm"),
                Exercise("bits_per_byte_of", 2, "check_bits_per_byte"))),
    Assignment("12_assistant", "import torch\nimport torch.nn.functional as F",
               (Exercise("mask_prompt", 2, "check_mask_prompt"),
                Exercise("dpo_loss", 2, "check_dpo_loss"))),
    Assignment("13_inside", "import torch\nimport torch.nn.functional as F",
               (Exercise("logit_lens", 2, "check_logit_lens"),
                Exercise("patch_head", 2, "check_patch_head"))),
    Assignment("14_verifier", "import math\n\nimport torch",
               (Exercise("group_advantages", 2, "check_group_advantages"),
                Exercise("grpo_loss", 2, "check_grpo_loss"),
                Exercise("pass_at_k", 2, "check_pass_at_k"))),
    Assignment("15_many_devices",
               "import torch\n\nfrom gpt_from_scratch.model import GPT, GPTConfig",
               (Exercise("ring_all_reduce", 3, "check_ring_all_reduce"),
                Exercise("ZeRO1", 2, "check_zero1"),
                Exercise("data_parallel_step", 2, "check_data_parallel_step"))),
    Assignment("16_fast_inference", "import torch",
               (Exercise("online_softmax_step", 2, "check_online_softmax_step"),
                Exercise("accept_or_resample", 3, "check_accept_or_resample"),
                Exercise("absmax_quantize", 2, "check_absmax_quantize"))),
]}


def find(chapter: str) -> Assignment:
    """The assignment of ``chapter``: its notebook stem or its number ("04", "01b")."""
    matches = [a for stem, a in ASSIGNMENTS.items() if stem == chapter or stem.split("_")[0] == chapter]
    if len(matches) != 1:
        raise SystemExit(f"no assignment for chapter {chapter!r}: use one of {', '.join(ASSIGNMENTS)}")
    return matches[0]


def exercise_blocks(nb) -> list[list]:
    """The cells of each ``### Exercise N.`` block of the exercises section, heading first; the
    chapter's quiz (cells tagged ``quiz``) ends the last block."""
    blocks: list[list] = []
    for cell in nb.cells:
        if make_student.QUIZ_TAG in cell.metadata.get("tags", []):
            break
        if cell.cell_type == "markdown" and make_student.EXERCISE_HEADING.search(cell.source):
            blocks.append([cell])
        elif blocks:
            blocks[-1].append(cell)
    return blocks


def defines(cell, name: str) -> bool:
    return cell.cell_type == "code" and name in make_student.defined_names(cell.source)


def assignment_notebook(chapter_nb, assignment: Assignment):
    """The hand-in notebook: set-up, then each graded exercise of the student copy of ``chapter_nb``."""
    student = make_student.make_student(chapter_nb)
    setup_cell = next(c for c in student.cells if "colab-setup" in c.metadata.get("tags", []))
    heading = next(c for c in student.cells if c.cell_type == "markdown").source
    title = next(line[2:] for line in heading.splitlines() if line.startswith("# "))
    points = sum(e.points for e in assignment.exercises)
    cells = [
        nbformat.v4.new_markdown_cell(
            f"# Assignment: {title}\n\nWrite each solution in its own cell, where the stub is, without renaming "
            f"it; helpers may go in the same cell or in cells of their own. Run the check under it for feedback. "
            f"Your grade ({points} points) comes from other, private test cases run on your solution and the "
            "helpers it uses, in a sandbox without network, files or the `gpt_from_scratch` package (the names "
            "the set-up cell imports are given there): what the notebook prints, and any change to the check "
            "cells, does not count. The rules an exercise states that no test can see (such as \"no `tril`\") "
            "are read by your teacher."),
        copy_cell(setup_cell),
        nbformat.v4.new_code_cell(f"# The names the exercises may use.\n{assignment.setup}",
                                  metadata={"tags": ["assignment-setup"]}),
    ]
    blocks = exercise_blocks(student)
    for exercise in assignment.exercises:
        block = next((b for b in blocks if any(defines(c, exercise.name) for c in b)), None)
        if block is None:
            raise SystemExit(f"{assignment.chapter}: no exercise cell defines {exercise.name}")
        kept = [copy_cell(c) for c in block if c.cell_type == "markdown" or defines(c, exercise.name)
                or exercise.check in c.source]
        heading = make_student.EXERCISE_HEADING.search(kept[0].source)
        kept[0].source = kept[0].source[heading.start():]  # not the summary that may share the cell
        cells += kept
    nb = nbformat.v4.new_notebook(cells=cells, metadata=chapter_nb.metadata)
    nbformat.validate(nb)
    return nb


def published(chapter_nb, assignment: Assignment) -> dict[str, str]:
    """Each graded exercise's solution cell, as the book shows it (*Show the solution*)."""
    cells = {}
    for exercise in assignment.exercises:
        cell = next((c for c in chapter_nb.cells if defines(c, exercise.name)
                     and "solution" in c.metadata.get("tags", [])), None)
        if cell is None:
            raise SystemExit(f"{assignment.chapter}: no cell tagged 'solution' defines "
                             f"{exercise.name}: tag the exercise's solution cell so")
        cells[exercise.name] = cell.source
    return cells


def copy_cell(cell):
    cell = nbformat.from_dict(json.loads(json.dumps(cell)))
    if cell.cell_type == "code":
        cell.outputs, cell.execution_count = [], None
    return cell


def write_assignment(assignment: Assignment, out: Path) -> Path:
    chapter_nb = nbformat.read(ROOT / "notebooks" / f"{assignment.chapter}.ipynb", as_version=4)
    folder = out / assignment.chapter
    shutil.rmtree(folder / "student", ignore_errors=True)
    (folder / "student").mkdir(parents=True)
    (folder / "autograder").mkdir(parents=True, exist_ok=True)
    nbformat.write(make_student.make_student(chapter_nb), folder / "student" / f"{assignment.chapter}.ipynb")
    nbformat.write(assignment_notebook(chapter_nb, assignment),
                   folder / "student" / f"{assignment.chapter}_assignment.ipynb")
    for exercise in assignment.exercises:
        test = PRIVATE_TESTS / assignment.chapter / f"{exercise.name}.py"
        if not test.exists():
            raise SystemExit(f"missing private case file {test.relative_to(ROOT)} for {exercise.name}")
    material = asdict(assignment) | {"published": published(chapter_nb, assignment)}
    text = json.dumps(material, indent=2) + "\n"
    (folder / "autograder" / "assignment.json").write_text(text)
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("chapters", nargs="*", help="chapter numbers or stems (default: all)")
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "assign")
    parser.add_argument("--secret", type=Path, help=f"the course secret (default {secret_path()})")
    parser.add_argument("--rotate-secret", action="store_true", help="replace the course secret")
    args = parser.parse_args(argv)
    secret = args.secret or secret_path()
    if create_secret(secret, rotate=args.rotate_secret):
        print(f"{secret}: a new course secret (the private cases' inputs are drawn from it)")
    chosen = [find(c) for c in args.chapters] or list(ASSIGNMENTS.values())
    for assignment in chosen:
        folder = write_assignment(assignment, args.out)
        print(f"{folder}: {len(assignment.exercises)} graded exercise(s), "
              f"{sum(e.points for e in assignment.exercises)} points")
    return 0


if __name__ == "__main__":
    sys.exit(main())
