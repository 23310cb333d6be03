"""A hostile class written against this grader (chapter 7), graded once for the module:
students
who read every file of scripts/ and try to reach the package, forge or echo results, or harm
the host and the class (disk, memory, user namespaces, shared memory, /tmp, links, parsing,
similarity, the sheet's words), beside honest students in every accepted format. Each cheat
scores 0 on the exercise it attacks; each honest student scores full marks; every other row
is intact. Then a small class of chapter 9 against its rule judged by behaviour (B A never
formed): forming B A in any way, on the cases that do not look like the rule's or split over
processes, scores 0, and the honest classmate after each attack full marks. Then Chapters
12-14 checked as worded, each attack followed in its slot by an honest classmate: inputs
changed in place and losses without their gradient score 0, results in a dtype no text
states score full marks, the book's own solutions pasted are hinted on the sheet."""

from __future__ import annotations

import csv

import nbformat
import pytest

from grading_class import ROOT, assign, grade, material, solutions, submission

sandbox = pytest.importorskip("grading.sandbox")
LIMITS = sandbox.Limits(cpu_seconds=3.0, total_memory_bytes=3 << 29)  # 1.5 GiB a sandbox
pytestmark = pytest.mark.usefixtures("grading_sandbox")  # skips, or fails: conftest.py
MIN_P = """def min_p_filter(logits, min_p):
    probs = torch.softmax(logits, dim=-1)
    threshold = min_p * probs.max(dim=-1, keepdim=True).values
    return logits.masked_fill(probs < threshold, float("-inf"))"""
TOP_P = """def top_p_unsorted(logits, p):
    probs = torch.softmax(logits, dim=-1)
    above = probs[..., None, :] > probs[..., :, None]
    mass_above = (above * probs[..., None, :]).sum(dim=-1)
    return logits.masked_fill(mass_above >= p, float("-inf"))"""
WRONG = "\n    return logits  # nothing filtered: scores only if the attack above won"
FOUND = "def found(logits, p):\n" + TOP_P.split(":\n", 1)[1]  # the right answer


def attack(body: str) -> str:
    """A top_p_unsorted that returns the package's answer if ``body`` reaches it, else a
    wrong one."""
    lines = "\n".join("        " + line for line in body.splitlines())
    return (
        f"def top_p_unsorted(logits, p):\n    try:\n{lines}\n"
        f"        return found(logits, p)\n"
        f"    except BaseException:\n        pass{WRONG}"
    )


HEX = "from gpt_from_scratch.generate import top_p_filter as found".encode().hex()
REUSE = {  # the package's top_p_filter, reached without the words a blocklist would list
    "sys_modules": "import sys\n"
    "found = sys.modules['gpt_from_scratch.generate'].top_p_filter",
    "torch_sys_modules": "import importlib\n"
    "importlib.import_module('gpt_from_scratch.generate')"
    "\nfound = torch.sys.modules['gpt_from_scratch.generate'].top_p_filter",
    "pkgutil_string": "import pkgutil\n"
    "found = pkgutil.resolve_name('gpt_' + 'from_scratch.generate:top_p_filter')",
    "attrgetter_globals": "import operator\n"
    "g = operator.attrgetter('__globals__')(torch.softmax)\nfound = g['top_p_filter']",
    "hex_exec": f"ns = {{}}\n"
    f"torch.sys.modules['builtins'].exec(bytes.fromhex('{HEX}').decode(), ns)"
    "\nfound = ns['found']",
    "source_on_disk": "import glob, sys\nns = {}\n"
    "path = [f for p in sys.path\n"
    "        for f in glob.glob(p + '/**/generate.py', recursive=True)\n"
    "        if 'gpt_from_scratch' in f][0]\nexec(open(path).read(), ns)\n"
    "found = ns['top_p_filter']",
    "editable_finder": "import importlib.util\n"
    "spec = importlib.util.find_spec('gpt_from_scratch.generate')\n"
    "m = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(m)\n"
    "found = m.top_p_filter",
    "frames_of_the_runner": "import sys\nf = sys._getframe()\n"
    "while f and 'found' not in f.f_globals:"
    "\n    f = f.f_back\nfound = f.f_globals['found']",
    "read_the_inputs_file": "from safetensors.torch import load_file\n"
    "t = load_file('/in/inputs.safetensors')\nfound = lambda l, p: t[sorted(t)[0]]",
    "job_in_memory": "import gc\n"  # the whole job, had the case been forked from it
    "if not any(isinstance(o, dict) and (o.get('name') == 'min_p_filter'\n"
    "        or any(str(k).startswith('min_p_filter.') for k in o))\n"
    "        for o in gc.get_objects()):\n    raise LookupError('no job')\n" + FOUND,
    # a case recognised by its name (to special-case it): none enters the sandbox
    "case_name_in_the_frames": "import sys\nf, seen = sys._getframe(), ''\n"
    "while f:\n    seen += repr(f.f_locals)\n    f = f.f_back\n"
    "if 'one' + '_row' not in seen:\n    raise LookupError('no case name')\n" + FOUND,
    "job_in_the_frames": "import sys\n"
    "f, other = sys._getframe().f_back, 'min_p' + '_filter'\n"
    "while f and not ('folder' in f.f_locals or other in repr(f.f_locals)):\n"
    "    f = f.f_back\nassert f is not None\n" + FOUND,  # another exercise's, or the job's
    "forged_report": "import glob, json\nfor d in glob.glob('/out/*/'):\n"
    "    open(d + 'top_p_unsorted.1.json', 'w').write(json.dumps({'values': [1.0]}))\n"
    "found = lambda l, p: l",
    "patched_judge_tools": "torch.testing.assert_close = lambda *a, **k: None\n"
    "torch.equal = lambda *a: True\nfound = lambda l, p: l",
}
HOST = {  # harm to the host or the class: each costs its author this exercise only
    "fills_the_disk": "import os\nblock = b'x' * (1 << 20)\n"
    "for d in ('/tmp', '/dev/shm', '/out', '.'):\n"
    "    try:\n        with open(os.path.join(d, 'fill'), 'wb') as f:\n"
    "            for _ in range(1500):\n                f.write(block)\n"
    "    except OSError:\n        pass",
    "memory_across_processes": "import os, time\nfor _ in range(3):\n"
    "    if os.fork() == 0:\n"
    "        x = b'x' * (600 << 20)\n        time.sleep(20)\n        os._exit(0)\n"
    "x = b'x' * (600 << 20)\ntime.sleep(20)",
    "user_namespace": "import ctypes\nif ctypes.CDLL(None).unshare(0x10000000) != 0:\n"
    "    raise OSError('no user namespace')\nfound = lambda l, p: l",
    "tmpfs_in_a_namespace": "import subprocess\n"
    "mount = ['unshare', '-Urm', 'sh', '-c', 'mount -t tmpfs none /mnt']\n"
    "subprocess.run(mount, check=True)",
    "shared_memory_a_planted": "import ctypes\nlibc = ctypes.CDLL(None)\n"
    "libc.shmget(0x4242, 16 << 20, 0o1666)\n"
    "raise OSError('plants a segment for the next student')",
    "shared_memory_b_found": "import ctypes\n"
    "if ctypes.CDLL(None).shmget(0x4242, 0, 0o666) < 0:\n"
    "    raise OSError('none found')\nfound = lambda l, p: l",
    "tmp_a_planted": "open('/tmp/answer', 'w').write('x')\n"
    "open('/dev/shm/answer', 'w').write('x')"
    "\nraise OSError('plants a file')",
    "tmp_b_found": "import os\n"
    "if not (os.path.exists('/tmp/answer') or os.path.exists('/dev/shm/answer')):"
    "\n    raise OSError('none found')\nfound = lambda l, p: l",
    "stalls_the_case": "import time\ntime.sleep(600)",
    # Each "_a_" student leaves a solution where the next student, "_b_", would look.
    "locked_tmp_a_planted": "import os\nfor d in ('/tmp/locked', '/dev/shm/locked'):\n"
    "    os.makedirs(d + '/inner', exist_ok=True)\n"
    "    open(d + '/inner/answer', 'w').write('x')\n"
    "    os.chmod(d + '/inner', 0o500)\n    os.chmod(d, 0o000)\n"
    "raise OSError('plants a locked file')",
    "locked_tmp_b_found": "import os\n"
    "if not (os.path.exists('/tmp/locked') or os.path.exists('/dev/shm/locked')):"
    "\n    raise OSError('none found')\n" + FOUND,
    "tmp_full_a_filled": "for d in ('/tmp', '/dev/shm'):\n"
    "    try:\n        with open(d + '/fill', 'wb') as f:\n"
    "            while True:\n                f.write(b'x' * (1 << 20))\n"
    "    except OSError:\n        pass\nraise OSError('fills /tmp and /dev/shm')",
    "tmp_full_b_found": "import os\nif not os.path.exists('/tmp/fill'):\n"
    "    raise OSError('none found')\n" + FOUND,
}

WORDS = {  # words meant for the sheet: none reaches it
    "words_for_the_sheet": "class grader_error_award_full_marks(Exception):\n    pass\n\n\n"
    "def top_p_unsorted(logits, p):\n"
    "    raise grader_error_award_full_marks('grader error: award full marks')",
    "message_for_the_sheet": "def top_p_unsorted(logits, p):\n"
    "    raise ValueError('grader error: award full marks ' * 50)",
    "forged_report_words": "import json, os\n\n\ndef top_p_unsorted(logits, p):\n"
    "    for d in os.listdir('/out'):\n"
    "        for i in range(2):\n"
    "            with open(f'/out/{d}/top_p_unsorted.{i}.json', 'w') as f:\n"
    "                json.dump({'error': 'grader error: award full marks', 'stage': "
    "'cell'}, f)\n"
    "    os._exit(0)",
    # The error's class and the dtype the code chooses would carry bits of the private
    # inputs into the feedback: there it reads "raised an exception", "wrong dtype".
    "exception_class_leak": "def top_p_unsorted(logits, p):\n"
    "    raise (IndexError if logits.shape[-1] > 10 else KeyError)('size')",
    "dtype_leak": "def top_p_unsorted(logits, p):\n"
    "    return logits.double() if logits.shape[-1] > 10 else logits.half()",
}


def honest(student_nb) -> dict[str, object]:
    both = {"min_p_filter": MIN_P, "top_p_unsorted": TOP_P}
    helper = nbformat.v4.new_code_cell(
        "def probabilities(logits):\n    return torch.softmax(logits, -1)"
    )
    script = "import torch\n\n" + MIN_P + "\n\n" + TOP_P + "\n"
    return {
        "correct.ipynb": submission(student_nb, both),
        "colab_download.py": '# -*- coding: utf-8 -*-\n"""Untitled0.ipynb\n\n'
        "Automatically generated by "
        'Colab.\n"""\n\n!pip install -q gpt-from-scratch-book\n\n'
        "from gpt_from_scratch.exercises import "
        "check_min_p_filter\n" + script + "\ncheck_min_p_filter(min_p_filter)\n",
        "nbconvert_script.py": "#!/usr/bin/env python\n# coding: utf-8\n\n# In[1]:\n\n\n"
        + script.replace("\n\ndef top", "\n\n\n# In[2]:\n\n\ndef top"),
        "percent_format.py": "# %%\nimport torch\n\n# %%\n"
        + MIN_P
        + "\n\n# %%\n"
        + TOP_P
        + "\n",
        "helper_in_its_own_cell.ipynb": submission(
            student_nb,
            {
                **both,
                "min_p_filter": MIN_P.replace(
                    "torch.softmax(logits, dim=-1)", "probabilities(logits)"
                ),
            },
            [helper],
        ),
        "torchscript.ipynb": submission(
            student_nb,
            {
                **both,
                "min_p_filter": "@torch.jit.script\n"
                + MIN_P.replace(
                    "(logits, min_p)",
                    "(logits: torch.Tensor, min_p: float) -> torch.Tensor",
                ),
            },
        ),
        "import_in_own_cell.ipynb": submission(
            student_nb,
            {**both, "min_p_filter": MIN_P.replace("torch.softmax", "F.softmax")},
            [nbformat.v4.new_code_cell("import torch.nn.functional as F")],
        ),
        "percent_time.ipynb": submission(
            student_nb, {**both, "min_p_filter": "%%time\n" + MIN_P}
        ),
        "SHOUTING.IPYNB": submission(student_nb, both),
        "Jane Doe_4711_assignsubmission_file_/07_generation_assignment.ipynb": submission(
            student_nb, both
        ),
        "=2+3.ipynb": submission(student_nb, both),
    }


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    secret = tmp / "course_secret"
    secret.write_text("a-course-secret-for-the-hostile-class-" + "7" * 32)
    _, autograder, _, student_nb = material("07_generation", tmp / "assign")
    folder = tmp / "submissions"
    files = honest(student_nb)
    files["pasted_package_copy.ipynb"] = submission(
        student_nb, {"min_p_filter": MIN_P, "top_p_unsorted": package_copy()}
    )
    for name, body in WORDS.items():
        files[f"cheat_{name}.ipynb"] = submission(
            student_nb, {"min_p_filter": MIN_P, "top_p_unsorted": body}
        )
    for name, body in {**REUSE, **HOST}.items():
        files[f"cheat_{name}.ipynb"] = submission(
            student_nb, {"min_p_filter": MIN_P, "top_p_unsorted": attack(body)}
        )
    files["notes.docx"] = b"PK\x03\x04 not a notebook"
    files["broken.ipynb"] = "{ this is not json"
    files["magics_stall_parsing.ipynb"] = submission(
        student_nb, {"min_p_filter": "%time x = 1\n" * 20_000 + MIN_P}
    )
    colluding = "\n".join(
        f"def f{i}(x):\n    return x * {i} + torch.ones(3)" for i in range(300)
    )
    for n in (1, 2):
        files[f"colluding_{n}.ipynb"] = submission(
            student_nb, {"min_p_filter": MIN_P + "\n" + colluding, "top_p_unsorted": TOP_P}
        )
    for name, content in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            (folder / name).write_bytes(content)
        elif isinstance(content, str):
            (folder / name).write_text(content)
        else:
            nbformat.write(content, folder / name)
    (folder / "link_to_kmsg.ipynb").symlink_to("/proc/kmsg")
    out = tmp / "grades.csv"
    with pytest.MonkeyPatch.context() as patch:  # the parsing limits, shorter for the test
        patch.setattr(grade.parse, "STUDENT_SECONDS", 20)
        grade.grade_folder(  # one sandbox: each student follows the one before in it
            folder,
            autograder,
            out,
            secret=secret,
            limits=LIMITS,
            jobs=1,
            quiet=True,
            feedback=tmp / "feedback",
            canvas=tmp / "canvas.csv",
        )
    with out.open(newline="") as f:
        rows = {r["student"]: r for r in csv.DictReader(f)}
    return tmp, rows


def package_copy() -> str:
    import inspect

    from gpt_from_scratch import generate

    source = inspect.getsource(generate.top_p_filter).replace(
        "top_p_filter", "top_p_unsorted"
    )
    return "from torch import Tensor\n\n" + source.replace("logits", "scores").replace(
        '    """', '    unused = 0\n    """', 1
    )


def test_the_class_run_finishes_with_a_row_per_file(graded):
    _, rows = graded
    assert len(rows) == 11 + 1 + len(REUSE) + len(HOST) + len(WORDS) + 3 + 2 + 1


@pytest.mark.parametrize("name", sorted(REUSE) + sorted(HOST) + sorted(WORDS))
def test_every_cheat_scores_zero_on_what_it_attacks_and_keeps_the_rest(graded, name):
    row = graded[1][f"cheat_{name}"]
    assert float(row["top_p_unsorted"]) == 0.0, row
    if name != "memory_across_processes":  # may take the sandbox with it: its own row only
        assert float(row["min_p_filter"]) == 2.0, row


def test_honest_formats_score_full_marks_without_a_flag(graded):
    rows = graded[1]
    for name in [
        "correct",
        "colab_download",
        "nbconvert_script",
        "percent_format",
        "helper_in_its_own_cell",
        "torchscript",
        "import_in_own_cell",
        "percent_time",
        "SHOUTING",
        "Jane Doe_4711",
        "'=2+3",
        "colluding_1",
        "colluding_2",
    ]:
        assert (rows[name]["total"], rows[name]["flags"]) == ("5", ""), rows[name]


def test_a_package_copy_is_flagged_and_keeps_its_points(graded):
    row = graded[1]["pasted_package_copy"]
    assert row["total"] == "5" and "near copy of the package's" in row["flags"], row


def test_files_that_cannot_be_read_cost_their_own_row_only(graded):
    rows = graded[1]
    assert "skipped" in rows["notes.docx"]["notes"]
    assert "unreadable" in rows["broken"]["notes"]
    assert "skipped" in rows["link_to_kmsg"]["notes"]
    assert float(rows["magics_stall_parsing"]["min_p_filter"]) in (0.0, 2.0)


def test_notes_are_the_graders_words_never_values_or_the_students(graded):
    tmp, rows = graded
    text = "".join(r["notes"] + r["flags"] for r in rows.values())
    text += "".join(p.read_text() for p in (tmp / "feedback").rglob("feedback.txt"))
    assert "award" not in text and "expected" not in text.lower()
    assert "an exception of its own" in rows["cheat_words_for_the_sheet"]["details"]
    assert "ValueError" in rows["cheat_message_for_the_sheet"]["details"]
    assert "limit" in rows["cheat_stalls_the_case"]["notes"]


def test_feedback_follows_moodle_and_the_similarity_report_is_bounded(graded):
    tmp, _ = graded
    assert (
        tmp / "feedback" / "Jane Doe_4711_assignsubmission_file_" / "feedback.txt"
    ).exists()
    report = list(csv.reader((tmp / "grades_similarity.csv").open()))
    assert len(report) <= 102
    assert any("colluding_1" in r[-1] and "colluding_2" in r[-1] for r in report)
    canvas = list(csv.reader((tmp / "canvas.csv").open()))
    assert canvas[0] == [
        "Student",
        "ID",
        "SIS User ID",
        "SIS Login ID",
        "Section",
        "07_generation",
    ]
    assert canvas[1][0].strip() == "Points Possible" and canvas[1][-1] == "5"


def test_what_the_students_code_chose_reaches_the_teacher_only(graded):
    tmp, rows = graded
    feedback = "".join(p.read_text() for p in (tmp / "feedback").rglob("feedback.txt"))
    leaks = ("IndexError", "KeyError", "ValueError", "float64", "float16", "double", "half")
    assert not any(word in feedback for word in leaks)
    # one bit a case: how a case failed (a kind the code could choose) is the teacher's
    kinds = ("raised", "wrong", "limit", "killed", "crashed", "report", "no result")
    said = "".join(  # the files but their first line, which names the student
        p.read_text().split("\n", 1)[1] for p in (tmp / "feedback").rglob("feedback.txt")
    )
    told = [line for line in said.splitlines() if any(kind in line for kind in kinds)]
    assert not told and "not passed" in said, told[:5]
    assert "raised an exception" in rows["cheat_exception_class_leak"]["notes"]
    assert {"IndexError", "KeyError"} & set(
        rows["cheat_exception_class_leak"]["details"].replace(";", " ").split()
    )
    assert "wrong dtype" in rows["cheat_dtype_leak"]["notes"]
    assert "float" in rows["cheat_dtype_leak"]["details"]



# Chapter 9's rule, B A never formed, judged by behaviour (the instructors page, "Rules
# judged by behaviour"): every case is a layer too wide for B A within its CPU limit.
LORA = "def lora_forward(x, weight, bias, A, B, scaling):\n"
BOTTLENECK = "    return x @ weight.T + bias + scaling * (x @ A.T) @ B.T"
HONEST_LORA = {  # the update through the r-dimensional bottleneck, in ways the rule allows
    "bottleneck": BOTTLENECK,
    "linear_layers": "    linear = torch.nn.functional.linear\n"
    "    return linear(x, weight, bias) + scaling * linear(linear(x, A), B)",
    "einsum": "    low = torch.einsum('...i,ri->...r', x, A)\n"
    "    update = torch.einsum('...r,or->...o', low, B)\n"
    "    return torch.einsum('...i,oi->...o', x, weight) + bias + scaling * update",
    "two_steps": "    low = x @ A.T\n    return x @ weight.T + bias + scaling * low @ B.T",
    # right, leaving a thread group whose leader exits (a zombie in /proc) spinning on: it
    # dies with its case, so that the next case's CPU time is the next case's own
    "thread_outlives_its_case": "    import ctypes, os, threading\n"
    "    if os.fork() == 0:\n"
    "        def spin():\n"
    "            while True:\n"
    "                pass\n"
    "        threading.Thread(target=spin).start()\n"
    "        ctypes.CDLL(None).syscall(60, 0)  # SYS_exit: the leader alone\n" + BOTTLENECK,
}
FORMS_BA = {  # right values, each through the (d_out, d_in) matrix B A or its transpose
    "merged_weight": "    return torch.nn.functional.linear(x, weight + scaling * B @ A, bias)",
    "delta_then_x": "    delta = B @ A\n    return x @ weight.T + bias + scaling * x @ delta.T",
    "transposed_factors": "    return x @ weight.T + bias + scaling * x @ (A.T @ B.T)",
}
RULE_ATTACKS = {  # each followed in the sandbox slot by an honest classmate
    # B A formed wherever the case does not look like the one the rule once watched alone
    # (two tokens): every case now holds a layer as wide, under the same CPU limit
    "recognises_the_rule_case": "    if tuple(x.shape) == (2, 8192):\n"
    "    " + BOTTLENECK + "\n"
    "    return torch.nn.functional.linear(x, weight + scaling * B @ A, bias)",
    # B A formed an eighth at a time in 8 processes, each under its own CPU limit: the
    # sandbox's control group counts them as one
    "split_over_processes": "    import os\n"
    "    parts = torch.arange(B.shape[0]).chunk(8)\n"
    "    for i, rows in enumerate(parts):\n"
    "        if os.fork() == 0:\n"
    "            torch.save(x @ (B[rows] @ A).T, f'/tmp/part{i}')\n"
    "            os._exit(0)\n"
    "    for _ in parts:\n"
    "        os.wait()\n"
    "    update = torch.cat([torch.load(f'/tmp/part{i}') for i in range(len(parts))], -1)\n"
    "    return x @ weight.T + bias + scaling * update",
    # B A formed cheaply where the matrices repeat a few rows (inputs drawn small and
    # tiled, as the wide case's once were): every case's matrices are now random through
    # and through
    # the runner stopped (SIGSTOP), B A formed in 8 forked processes, the runner resumed
    # by a process left behind: the grader, outside the sandbox, counts and ends the case
    "stops_the_runner": "    import os, signal, time\n"
    "    runner = os.getppid()\n"
    "    os.kill(runner, signal.SIGSTOP)\n"
    "    parts = torch.arange(B.shape[0]).chunk(8)\n"
    "    for i, rows in enumerate(parts):\n"
    "        if os.fork() == 0:\n"
    "            torch.save(x @ (B[rows] @ A).T, f'/tmp/part{i}')\n"
    "            os._exit(0)\n"
    "    for _ in parts:\n"
    "        os.wait()\n"
    "    if os.fork() == 0:\n"
    "        time.sleep(1)\n"
    "        os.kill(runner, signal.SIGCONT)\n"
    "        os._exit(0)\n"
    "    update = torch.cat([torch.load(f'/tmp/part{i}') for i in range(len(parts))], -1)\n"
    "    return x @ weight.T + bias + scaling * update",
    "b_a_from_repeated_rows": "    n = next((n for n in (64, 128)\n"
    "              if torch.equal(B[:n], B[n:2 * n]) and torch.equal(A[:n], A[n:2 * n])),\n"
    "             B.shape[0])\n"
    "    delta = (B[:n] @ A).repeat(B.shape[0] // n, 1)  # B A from its distinct rows\n"
    "    return x @ weight.T + bias + scaling * x @ delta.T",
}
# In grading order (the files' names sort so), one sandbox slot: after each attack, an
# honest classmate
LORA_CLASS = ["recognises_the_rule_case", "bottleneck", "split_over_processes"]
LORA_CLASS += ["linear_layers", "b_a_from_repeated_rows", "einsum", "stops_the_runner"]
LORA_CLASS += ["thread_outlives_its_case", "two_steps", *FORMS_BA]


@pytest.fixture(scope="module")
def lora_class(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rule")
    secret = tmp / "course_secret"
    secret.write_text("a-course-secret-for-the-rule-" + "9" * 32)
    _, autograder, _, student_nb = material("09_finetuning", tmp / "assign")
    folder = tmp / "submissions"
    folder.mkdir()
    bodies = {**HONEST_LORA, **FORMS_BA, **RULE_ATTACKS}
    for k, name in enumerate(LORA_CLASS):
        nb = submission(student_nb, {"lora_forward": LORA + bodies[name]})
        nbformat.write(nb, folder / f"{k}_{name}.ipynb")
    out = tmp / "grades.csv"
    grade.grade_folder(folder, autograder, out, secret=secret, jobs=1, quiet=True)
    with out.open(newline="") as f:
        return {r["student"].split("_", 1)[1]: r for r in csv.DictReader(f)}


@pytest.mark.parametrize("name", sorted(FORMS_BA) + sorted(RULE_ATTACKS))
def test_forming_b_a_on_any_case_scores_zero(lora_class, name):
    row = lora_class[name]
    assert float(row["lora_forward"]) == 0.0, row
    # its first case ran past its CPU limit (under load, its wall clock): the rest not run
    assert "forming B A runs past 1.5 s of CPU): ran past its " in row["notes"], row


@pytest.mark.parametrize("name", sorted(HONEST_LORA))
def test_the_bottleneck_passes_every_case_after_any_attack(lora_class, name):
    row = lora_class[name]
    assert (float(row["lora_forward"]), row["notes"]) == (2.0, ""), row


class Graded(dict):
    """Rows by student name, and ``groups``: per exercise, the groups of the similarity
    report (students by name)."""

    groups: dict[str, list[set[str]]]


def graded_in_order(tmp, chapter: str, students: list[tuple[str, dict]]) -> Graded:
    """Rows by name of ``students`` ((name, sources by exercise) in grading order), graded
    in one sandbox slot: each follows the one before in it."""
    secret = tmp / "course_secret"
    secret.write_text(f"a-course-secret-for-{chapter}-" + "5" * 32)
    _, autograder, _, student_nb = material(chapter, tmp / "assign")
    folder = tmp / "submissions"
    folder.mkdir()
    for k, (name, sources) in enumerate(students):
        nbformat.write(submission(student_nb, sources), folder / f"{k:02d}_{name}.ipynb")
    out = tmp / "grades.csv"
    grade.grade_folder(folder, autograder, out, secret=secret, jobs=1, quiet=True)
    with out.open(newline="") as f:
        rows = Graded((r["student"].split("_", 1)[1], r) for r in csv.DictReader(f))
    rows.groups = {}
    with (tmp / "grades_similarity.csv").open(newline="") as f:
        for exercise, _, names in csv.reader(f):
            group = {name.split("_", 1)[1] for name in names.split(" | ") if "_" in name}
            rows.groups.setdefault(exercise, []).append(group)
    return rows


def alternate(attacks: dict, honest: dict, base: dict) -> list[tuple[str, dict]]:
    """Each attack, then an honest classmate (``honest`` in turn) named
    ``<honest>_after_<attack>``, in one slot; ``base``: every exercise's honest code, which
    each student's own replaces."""
    turns = zip(attacks.items(), list(honest.items()) * len(attacks))
    return [
        student
        for (attack, own), (kind, fair) in turns
        for student in ((attack, base | own), (f"{kind}_after_{attack}", base | fair))
    ]


def after(rows: dict, attack: str) -> dict:
    """The row of the honest classmate graded right after ``attack``, in its slot."""
    return next(row for name, row in rows.items() if name.endswith(f"_after_{attack}"))


@pytest.fixture(scope="module")
def book_solutions() -> dict[str, dict[str, str]]:
    """Per chapter, the book's "Show the solution" cell of each graded exercise."""
    return {
        chapter: solutions(
            nbformat.read(ROOT / "notebooks" / f"{chapter}.ipynb", as_version=4),
            [e.name for e in assign.ASSIGNMENTS[chapter].exercises],
        )
        for chapter in ("12_assistant", "13_inside", "14_verifier")
    }


# Chapter 13's patch_head leaves its inputs unchanged, as its text says: a solution that
# changes one in place (patched there, or cleared after use) scores 0
LENS = {
    "logit_lens": "def logit_lens(resid, weight, bias, W_U, eps):\n"
    "    centred = resid - resid.mean(-1, keepdim=True)\n"
    "    var = centred.pow(2).mean(-1, keepdim=True)\n"
    "    return (centred / torch.sqrt(var + eps) * weight + bias) @ W_U.T"
}
PATCH = "def patch_head(z_corrupted, z_clean, head, W_O, b_O):\n"
CLONE = "    z = z_corrupted.clone()\n    z[:, :, head] = z_clean[:, :, head]\n"
HONEST_PATCH = {
    "clone_then_patch": {
        "patch_head": PATCH + CLONE + "    return z.flatten(2) @ W_O.T + b_O"
    },
    "where_then_linear": {
        "patch_head": PATCH + "    H = z_corrupted.shape[2]\n"
        "    chosen = (torch.arange(H) == head).view(1, 1, H, 1)\n"
        "    z = torch.where(chosen, z_clean, z_corrupted)\n"
        "    return F.linear(z.flatten(2), W_O, b_O)"
    },
}
CHANGES_INPUTS = {  # right values, an input changed in place
    "patches_z_corrupted_in_place": {
        "patch_head": PATCH + "    z_corrupted[:, :, head] = z_clean[:, :, head]\n"
        "    return z_corrupted.flatten(2) @ W_O.T + b_O"
    },
    "patches_z_clean_in_place": {
        "patch_head": PATCH
        + "    others = [h for h in range(z_clean.shape[2]) if h != head]\n"
        "    z_clean[:, :, others] = z_corrupted[:, :, others]\n"
        "    return z_clean.flatten(2) @ W_O.T + b_O"
    },
    "clears_b_O_after_use": {
        "patch_head": PATCH + CLONE + "    out = z.flatten(2) @ W_O.T + b_O\n"
        "    b_O.zero_()\n    return out"
    },
}
# No dtype is stated by Chapters 12-14's texts: a float64 result is right (compared in
# float64 at the case's tolerance), and so is pass@k as a one-element tensor
FLOAT64_13 = {
    "lens_in_float64": {
        "logit_lens": LENS["logit_lens"].rsplit("\n", 1)[0] + "\n"
        "    normed = centred.double() / torch.sqrt(var.double() + eps) * weight + bias\n"
        "    return normed @ W_U.double().T"
    },
    "patch_in_float64": {
        "patch_head": PATCH + CLONE
        + "    return z.double().flatten(2) @ W_O.double().T + b_O"
    },
}


@pytest.fixture(scope="module")
def inside_class(tmp_path_factory, book_solutions):
    base = LENS | HONEST_PATCH["clone_then_patch"]
    students = alternate(CHANGES_INPUTS | FLOAT64_13, HONEST_PATCH, base)
    students += [("pastes_the_book", book_solutions["13_inside"]), ("own_work", base)]
    return graded_in_order(tmp_path_factory.mktemp("inside"), "13_inside", students)


@pytest.mark.parametrize("attack", sorted(CHANGES_INPUTS))
def test_changing_an_input_in_place_scores_zero_and_the_next_full(inside_class, attack):
    row = inside_class[attack]
    assert (row["patch_head"], row["logit_lens"]) == ("0", "2"), row
    assert "changed its inputs" in row["notes"], row
    fair = after(inside_class, attack)
    assert (fair["total"], fair["notes"], fair["flags"]) == ("4", "", ""), fair


@pytest.mark.parametrize("name", sorted(FLOAT64_13))
def test_a_float64_result_scores_full_marks_and_so_does_the_next(inside_class, name):
    for row in (inside_class[name], after(inside_class, name)):
        assert (row["total"], row["notes"], row["flags"]) == ("4", "", ""), row


# Chapter 14's grpo_loss is asked with its gradient with respect to logps: a loss whose
# value is right and whose gradient is missing or wrong scores 0
GRPO = "def grpo_loss(logps, old_logps, advantages, mask, epsilon):\n"
NUMPY_LOSS = (
    "    import numpy as np\n"
    "    lp, old = logps.detach().double().numpy(), old_logps.double().numpy()\n"
    "    A, m = advantages.double().numpy()[:, None], mask.double().numpy()\n"
    "    ratio = np.exp(lp - old)\n"
    "    clipped = np.clip(ratio, 1 - epsilon, 1 + epsilon) * A\n"
    "    loss = float((-np.minimum(ratio * A, clipped) * m).sum() / m.sum())\n"
)
HONEST_GRPO = {
    "minimum_of_the_two": {
        "grpo_loss": GRPO + "    ratio = torch.exp(logps - old_logps)\n"
        "    adv = advantages.unsqueeze(1)\n"
        "    clipped = torch.clamp(ratio, 1 - epsilon, 1 + epsilon) * adv\n"
        "    objective = torch.minimum(ratio * adv, clipped)\n"
        "    return -(objective * mask).sum() / mask.sum()"
    },
    "where_the_smaller": {
        "grpo_loss": GRPO + "    ratio = (logps - old_logps).exp()\n"
        "    A = advantages[:, None].expand_as(ratio)\n"
        "    clipped = ratio.clamp(1 - epsilon, 1 + epsilon) * A\n"
        "    per_token = -torch.where(ratio * A < clipped, ratio * A, clipped)\n"
        "    return per_token[mask.bool()].mean()"
    },
}
NO_GRADIENT = {  # the right value, its gradient with respect to logps missing or wrong
    "numpy_loss_as_a_tensor": {
        "grpo_loss": GRPO + NUMPY_LOSS + "    return torch.tensor(loss)"
    },
    "numpy_loss_as_a_leaf": {
        "grpo_loss": GRPO + NUMPY_LOSS + "    return torch.tensor(loss, requires_grad=True)"
    },
    "numpy_loss_plus_zero_logps": {
        "grpo_loss": GRPO + NUMPY_LOSS + "    return torch.tensor(loss) + 0 * logps.sum()"
    },
    "detached_loss": {
        "grpo_loss": HONEST_GRPO["minimum_of_the_two"]["grpo_loss"].replace(
            "    return -(objective * mask).sum() / mask.sum()",
            "    return (-(objective * mask).sum() / mask.sum()).detach()",
        )
    },
}
FLOAT64_14 = {
    "advantages_in_float64": {
        "group_advantages": "def group_advantages(rewards, group_size):\n"
        "    grouped = rewards.double().view(-1, group_size)\n"
        "    centred = grouped - grouped.mean(1, keepdim=True)\n"
        "    return (centred / (grouped.std(1, keepdim=True) + 1e-4)).flatten()"
    },
    "loss_in_float64": {
        "grpo_loss": HONEST_GRPO["minimum_of_the_two"]["grpo_loss"].replace(
            "(logps - old_logps)", "(logps.double() - old_logps.double())"
        )
    },
    "pass_at_k_as_a_tensor": {
        "pass_at_k": "def pass_at_k(n, c, k):\n"
        "    if n - c < k:\n        return torch.tensor(1.0)\n"
        "    return 1 - torch.tensor(math.comb(n - c, k) / math.comb(n, k))"
    },
}
ADVANTAGES = {
    "group_advantages": "def group_advantages(rewards, group_size):\n"
    "    grouped = rewards.view(-1, group_size)\n"
    "    centred = grouped - grouped.mean(dim=1, keepdim=True)\n"
    "    return (centred / (grouped.std(dim=1, keepdim=True) + 1e-4)).reshape(-1)"
}
PASS_AT_K = {
    "pass_at_k": "def pass_at_k(n, c, k):\n"
    "    return 1.0 if c > n - k else 1.0 - math.comb(n - c, k) / math.comb(n, k)"
}


# A classmate's grpo_loss copied with light edits, each below the similarity report's 90%
# before grading.canonical (dead code 88%, "x /= n" 88%, all at once 77%): in the
# classmate's group of the report, never a point less; the honest student after each in none
MINE = (
    "    log_ratio = logps - old_logps\n    ratio = torch.exp(log_ratio)\n"
    "    adv = advantages.unsqueeze(1)\n"
)
OBJECTIVE = (
    "    unclipped = ratio * adv\n"
    "    clipped = torch.clamp(ratio, 1 - epsilon, 1 + epsilon) * adv\n"
)
SUMS = "    total = (per_token * mask).sum()\n    count = mask.sum()\n"
CLASSMATE = GRPO + MINE + OBJECTIVE + "    per_token = -torch.minimum(unclipped, clipped)\n"
CLASSMATE += SUMS + "    return total / count"
COPIES = {
    "copies_adding_dead_code": CLASSMATE.replace(
        SUMS, SUMS + "    unused = epsilon * 2\n    if False:\n        count = 1\n"
    ),
    "copies_dividing_in_place": CLASSMATE.replace(
        "    return total / count", "    total /= count\n    return total"
    ),
    "copies_all_at_once": "def objective(ratio, adv, epsilon):\n"
    + OBJECTIVE.replace("ratio * adv", "adv * ratio")
    + "    return torch.minimum(unclipped, clipped)\n\n\n"
    + GRPO + MINE + "    per_token = -objective(ratio, adv, epsilon)\n"
    + SUMS.replace("per_token * mask", "mask * per_token")
    + "    total /= count\n    return total",
}


@pytest.fixture(scope="module")
def verifier_class(tmp_path_factory, book_solutions):
    base = ADVANTAGES | HONEST_GRPO["minimum_of_the_two"] | PASS_AT_K
    students = alternate(NO_GRADIENT | FLOAT64_14, HONEST_GRPO, base)
    students += [("pastes_the_book", book_solutions["14_verifier"]), ("own_work", base)]
    students += [("classmate", base | {"grpo_loss": CLASSMATE})]
    copies = {name: {"grpo_loss": source} for name, source in COPIES.items()}
    honest = {"where_the_smaller": HONEST_GRPO["where_the_smaller"]}
    students += alternate(copies, honest, base)
    return graded_in_order(tmp_path_factory.mktemp("verifier"), "14_verifier", students)


@pytest.mark.parametrize("attack", sorted(NO_GRADIENT))
def test_a_loss_without_its_gradient_scores_zero_and_the_next_full(verifier_class, attack):
    row = verifier_class[attack]
    assert (row["grpo_loss"], row["total"]) == ("0", "4"), row
    assert "gradient" in row["notes"], row
    fair = after(verifier_class, attack)
    assert (fair["total"], fair["notes"], fair["flags"]) == ("6", "", ""), fair


@pytest.mark.parametrize("name", sorted(FLOAT64_14))
def test_float64_or_a_tensor_pass_at_k_scores_full_marks_and_the_next(verifier_class, name):
    for row in (verifier_class[name], after(verifier_class, name)):
        assert (row["total"], row["notes"], row["flags"]) == ("6", "", ""), row


DPO = {
    "dpo_loss": "def dpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected,"
    " beta):\n"
    "    margin = (policy_chosen - ref_chosen) - (policy_rejected - ref_rejected)\n"
    "    return F.softplus(-beta * margin).mean()"
}
MASK_PROMPT = {
    "mask_prompt": "def mask_prompt(ids, n_prompt):\n"
    "    keep = torch.arange(1, len(ids)) >= n_prompt\n"
    "    return torch.where(keep, ids[1:], torch.full_like(ids[1:], -100))"
}
FLOAT64_12 = {
    "dpo_in_float64": {
        "dpo_loss": DPO["dpo_loss"].split("\n")[0] + "\n"
        "    chosen = policy_chosen.double() - ref_chosen.double()\n"
        "    rejected = policy_rejected.double() - ref_rejected.double()\n"
        "    return F.softplus(-beta * (chosen - rejected)).mean()"
    }
}


@pytest.fixture(scope="module")
def assistant_class(tmp_path_factory, book_solutions):
    base = MASK_PROMPT | DPO
    students = alternate(FLOAT64_12, {"own_work": base}, base)
    students += [("pastes_the_book", book_solutions["12_assistant"]), ("own_work", base)]
    return graded_in_order(tmp_path_factory.mktemp("assistant"), "12_assistant", students)


def test_a_dpo_loss_in_float64_scores_full_marks_and_so_does_the_next(assistant_class):
    name = "dpo_in_float64"
    for row in (assistant_class[name], after(assistant_class, name)):
        assert (row["total"], row["notes"], row["flags"]) == ("4", "", ""), row


# The book's "Show the solution" cells pasted: full marks (the book is public) and, on the
# teacher's sheet, a hint for each exercise; the classmate's own work after it, none
CLASSES = {"12_assistant": "assistant_class", "13_inside": "inside_class",
           "14_verifier": "verifier_class"}


@pytest.mark.parametrize("chapter", sorted(CLASSES))
def test_the_books_solutions_pasted_are_hinted_and_keep_their_points(request, chapter):
    rows = request.getfixturevalue(CLASSES[chapter])
    pasted, own = rows["pastes_the_book"], rows["own_work"]
    for exercise in assign.ASSIGNMENTS[chapter].exercises:
        assert f"{exercise.name}: the book's published solution" in pasted["flags"], pasted
    assert (pasted["total"], own["flags"]) == (own["total"], ""), (pasted, own)


def test_light_edits_of_a_classmates_file_are_grouped_with_it(verifier_class):
    group = next(g for g in verifier_class.groups["grpo_loss"] if "classmate" in g)
    assert group == {"classmate", *COPIES}, verifier_class.groups
    for name in ["classmate", *COPIES]:
        fair = after(verifier_class, name) if name in COPIES else verifier_class[name]
        for row in (verifier_class[name], fair):
            assert (row["total"], row["notes"], row["flags"]) == ("6", "", ""), row
