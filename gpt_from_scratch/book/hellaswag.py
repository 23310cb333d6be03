"""Chapter 11 — HellaSwag (Zellers et al., 2019) as the two published GPT-2 numbers read it.

HellaSwag's validation set is 10,042 items: a context from ActivityNet or WikiHow, four endings.
build-nanogpt's ``hellaswag.py`` scores the raw context and endings and picks the lowest mean loss
per token (0.2955 for GPT-2 small); lm-evaluation-harness first cleans the text
(``preprocess``, from its ``tasks/hellaswag/utils.py``), puts the activity label in front and
picks the highest log-likelihood per character (``acc_norm``, 0.3114). ``hellaswag_items`` builds
each reading; the Colab section of the chapter scores both. The file is downloaded once (online).
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from pathlib import Path

from ..data import cache_dir
from ..evaluate import MultipleChoice
from ..utils import atomic_path

HELLASWAG_URL = "https://raw.githubusercontent.com/rowanz/hellaswag/master/data/hellaswag_val.jsonl"
HELLASWAG_ITEMS = 10_042  # the validation split


def preprocess(text: str) -> str:
    """The harness's cleaning of HellaSwag text: WikiHow's ``[title]`` markers become sentence ends,
    other bracketed markers go, double spaces become one."""
    text = text.strip().replace(" [title]", ". ")
    text = re.sub(r"\[.*?\]", "", text)
    return text.replace("  ", " ")


def hellaswag_rows(path: str | Path | None = None) -> list[dict]:
    """The validation split's rows, from ``path`` or the cache (downloaded there the first time);
    a file that does not hold the split's 10,042 rows is refused, and a failed download is
    an ``OSError`` that says where to put a copy."""
    path = Path(path) if path else cache_dir() / "hellaswag" / "hellaswag_val.jsonl"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with atomic_path(path) as tmp, urllib.request.urlopen(HELLASWAG_URL,
                                                                  timeout=60) as r:
                tmp.write_bytes(r.read())
        except (urllib.error.URLError, TimeoutError) as err:
            raise OSError(f"cannot download {HELLASWAG_URL} ({err}): connect to the "
                          "network, or put a copy of hellaswag_val.jsonl at "
                          f"{path}") from None
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        try:
            rows += [json.loads(line)] if line else []
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}, line {n}, is not JSON ({err}): the file is "
                             "truncated or damaged; delete it and run again") from None
    if (len(rows) != HELLASWAG_ITEMS or not isinstance(rows[0], dict)
            or not {"ctx", "endings", "label"} <= set(rows[0])):
        raise ValueError(f"{path} holds {len(rows)} rows, not HellaSwag's {HELLASWAG_ITEMS} "
                         "validation rows with ctx, endings and label: delete it and run again")
    return rows


def hellaswag_items(rows: list[dict], reading: str) -> list[MultipleChoice]:
    """``rows`` as items, read as ``"nanogpt"`` (raw ``ctx``, raw endings) or ``"harness"``
    (``preprocess(activity_label + ": " + ctx_a + " " + ctx_b.capitalize())``, cleaned endings).
    Both score each ending after a space."""
    if reading == "nanogpt":
        return [MultipleChoice(r["ctx"], list(r["endings"]), int(r["label"])) for r in rows]
    if reading == "harness":
        return [MultipleChoice(
            preprocess(r["activity_label"] + ": " + r["ctx_a"] + " " + r["ctx_b"].capitalize()),
            [preprocess(e) for e in r["endings"]], int(r["label"])) for r in rows]
    raise ValueError(f"unknown reading {reading!r}: use 'nanogpt' or 'harness'")
