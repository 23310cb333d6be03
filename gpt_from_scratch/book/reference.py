"""Reference runs: the book's full-size models, trained on a GPU, shown beside the reader's run.

``make reference-runs`` (``scripts/reference_runs.py``) writes a folder ``reference/``: one folder per
run (its weights in safetensors shards of at most ``MAX_SHARD`` bytes, with the Hub's index file
``model.safetensors.index.json``) and ``manifest.json``, which holds each run's recipe, settings,
losses, sample and tables, and the SHA-256 and size of every file. A chapter can show a run's
numbers from the manifest before any weights are fetched.

``reference_run(name)`` finds the runs in ``$GPT_FROM_SCRATCH_DATA/reference``, else in the cache
(``cache_dir() / "reference"``), else downloads them from the published copy (a Hugging Face Hub
model repository at the pinned ``HUB_REVISION``). Every file is checked against the manifest, and
the manifest against ``MANIFEST_SHA256`` once the maintainers pin it; a wrong or partial file is an
error that names the file and the fix, a missing copy a ``ReferenceUnavailable`` of one sentence.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import nn

from ..data import DATA_ENV_VAR, ChecksumError, cache_dir
from ..model import GPT, GPTConfig
from ..utils import atomic_path, sha256_file
from .corpus_vocab import CorpusVocabGPT

REFERENCE = "reference"  # the folder's name, under $GPT_FROM_SCRATCH_DATA and under the cache
MANIFEST_FILE = "manifest.json"
MANIFEST_FORMAT = "gpt_from_scratch.reference/1"
MAX_SHARD = 15 << 20  # bytes per safetensors file at most: small enough for any host to serve
ROWS = "@"  # a tensor stored as row blocks: "<name>@0", "<name>@1", ...

# The published copy, filled in by the maintainers when the GPU-trained runs are uploaded: the
# Hub repository, the commit that holds them, and the SHA-256 of its manifest.json.
HUB_REPO_ID: str | None = None
HUB_REVISION: str | None = None
MANIFEST_SHA256: str | None = None


def published() -> bool:
    """Whether this version of the package pins a published copy of the reference runs."""
    return HUB_REPO_ID is not None and HUB_REVISION is not None


class ReferenceUnavailable(FileNotFoundError):
    """The reference runs are neither on this machine nor downloadable; the message is one sentence."""


@dataclass
class ReferenceRun:
    """One reference run: its manifest entry (``info``) and the folder that holds its weights."""

    name: str
    info: dict  # recipe, config, seed, torch, device, wall_seconds, losses, sample, history, tables
    path: Path

    def model(self) -> nn.Module:
        """The trained model in float32 and eval mode on the CPU: a ``GPT``, or a
        ``CorpusVocabGPT`` for a run trained on the corpus vocabulary (Chapter 8's offline model)."""
        if not self.info.get("files"):
            raise ValueError(f"reference run {self.name!r} has no weights, only its tables: "
                             "read reference_run(name).info['tables']")
        stored = {}
        for file in self.info["files"]:
            if file.endswith(".safetensors"):
                stored |= load_file(self.path.parent / file)
        state = _join_rows(stored)
        vocab = state.pop("vocab", None)  # the corpus vocabulary's GPT-2 ids, if any
        model = GPT(GPTConfig(**self.info["config"]))
        missing, unexpected = model.load_state_dict(state, strict=False)
        tied = {"lm_head.weight"} if model.config.tie_weights else set()
        if unexpected or set(missing) - tied:
            raise ValueError(f"the weights in {self.path} do not fit the run's config: missing "
                             f"{sorted(set(missing) - tied)}, unexpected {sorted(unexpected)}")
        model = model.float()
        if vocab is not None:
            model = CorpusVocabGPT(model, vocab.long())
        return model.eval()


def _split_rows(state: dict[str, torch.Tensor], limit: int) -> dict[str, torch.Tensor]:
    """Tensors over ``limit`` bytes cut into row blocks ``<name>@<k>`` that each fit a shard (the
    Hub's sharding never splits a tensor, and GPT-2's token embedding alone is 38 MB in float16)."""
    out = {}
    for name, t in state.items():
        nbytes = t.numel() * t.element_size()
        if nbytes <= limit or t.dim() == 0:
            out[name] = t
            continue
        rows = max(1, limit * t.shape[0] // nbytes)
        out |= {f"{name}{ROWS}{k}": block.clone() for k, block in enumerate(t.split(rows))}
    return out


def _join_rows(stored: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The inverse of ``_split_rows``."""
    state, blocks = {}, {}
    for key, t in stored.items():
        name, _, k = key.partition(ROWS)
        if k:
            blocks.setdefault(name, {})[int(k)] = t
        else:
            state[name] = t
    return state | {name: torch.cat([parts[k] for k in sorted(parts)]) for name, parts in blocks.items()}


def reference_dir() -> Path:
    """Where ``make reference-runs`` writes and ``reference_run`` looks first:
    ``$GPT_FROM_SCRATCH_DATA/reference`` when the variable is set, else ``cache_dir() / "reference"``."""
    return _local_roots()[0][0]


def _local_roots() -> list[tuple[Path, str]]:
    """Where a copy may be, each with how to repair a bad file there."""
    roots = []
    if os.environ.get(DATA_ENV_VAR):
        roots.append((Path(os.environ[DATA_ENV_VAR]).expanduser() / REFERENCE,
                      "copy the reference runs there again, or rebuild them (make reference-runs)"))
    roots.append((cache_dir() / REFERENCE,
                  "delete it, and reference_run downloads it again"))
    return roots


def _download(root: Path, name: str) -> None:
    """The manifest and run ``name``'s files from the pinned Hub revision, into ``root``."""
    if HUB_REPO_ID is None or HUB_REVISION is None:
        raise ReferenceUnavailable(
            "The reference runs are not on this machine and not published yet: build them with "
            f"`make reference-runs` on a GPU and put the folder in ${DATA_ENV_VAR}/{REFERENCE}.")
    try:
        from huggingface_hub import snapshot_download

        snapshot_download(HUB_REPO_ID, revision=HUB_REVISION, local_dir=root,
                          allow_patterns=[MANIFEST_FILE, f"{name}/*"])
    except Exception as err:  # noqa: BLE001 (offline, refused, not found: the Hub's errors vary)
        raise ReferenceUnavailable(
            f"The reference runs could not be downloaded from {HUB_REPO_ID} ({type(err).__name__}; "
            f"offline?): connect and try again, or put a copy in ${DATA_ENV_VAR}/{REFERENCE}."
        ) from None


def _check_file(path: Path, expected: dict, fix: str) -> None:
    """Raise a ``ChecksumError`` naming ``path`` when its size or SHA-256 is not the manifest's."""
    if not path.is_file():
        raise ReferenceUnavailable(f"{path} is missing: {fix}.")
    size = path.stat().st_size
    if size < expected["bytes"]:
        raise ChecksumError(f"{path} is truncated: {size:,} of {expected['bytes']:,} bytes (an "
                            f"interrupted copy or download): {fix}")
    actual = sha256_file(path)
    if actual != expected["sha256"] or size != expected["bytes"]:
        raise ChecksumError(f"{path} has sha256 {actual}, the manifest says {expected['sha256']}: the "
                            f"file is damaged or from another build of the reference runs: {fix}")


def _manifest(root: Path, fix: str) -> dict:
    path = root / MANIFEST_FILE
    if not path.is_file():
        raise ReferenceUnavailable(f"{root} holds no {MANIFEST_FILE}, so none of its files can be "
                                   f"verified: {fix}.")
    if MANIFEST_SHA256 is not None and (actual := sha256_file(path)) != MANIFEST_SHA256:
        raise ChecksumError(f"{path} has sha256 {actual}, the package pins {MANIFEST_SHA256}: it is "
                            f"not the published manifest: {fix}")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ChecksumError(f"{path} is not valid JSON ({err}): the file is truncated or damaged (an "
                            f"interrupted copy or download): {fix}") from None
    if not isinstance(manifest, dict):
        manifest = {"format": type(manifest).__name__}
    if manifest.get("format") != MANIFEST_FORMAT:
        raise ValueError(f"{path} is not a reference-run manifest (format {manifest.get('format')!r},"
                         f" expected {MANIFEST_FORMAT!r}): {fix}")
    return manifest


def reference_run(name: str, download: bool = True) -> ReferenceRun:
    """Reference run ``name``, verified: the first copy found in ``$GPT_FROM_SCRATCH_DATA/reference``
    or the cache, else downloaded into the cache (``download=False``: never).

    Raises ``ReferenceUnavailable`` (one sentence saying what to do) when there is no copy, and
    ``ChecksumError`` (naming the file and the fix) when a file is truncated or not the manifest's.
    """
    roots = _local_roots()
    found = [(root, fix) for root, fix in roots if root.is_dir()]
    if not found:
        if not download:
            raise ReferenceUnavailable(
                f"The reference runs are not on this machine (looked in {roots[0][0]}): call "
                "reference_run with download=True, or run `make reference-runs` on a GPU.")
        root, fix = roots[-1]
        _download(root, name)
    else:
        root, fix = found[0]
    manifest = _manifest(root, fix)
    if name not in manifest["runs"]:
        raise KeyError(f"no reference run {name!r} in {root / MANIFEST_FILE}: choose one of "
                       f"{', '.join(manifest['runs'])}")
    info = manifest["runs"][name]
    if root == roots[-1][0] and not all((root / f).is_file() for f in info["files"]):
        _download(root, name)  # the manifest came with another run: fetch this one's files
    for file, expected in info["files"].items():
        _check_file(root / file, expected, fix)
    return ReferenceRun(name, info, root / name)


def save_run(root: str | os.PathLike, name: str, model: nn.Module, info: dict,
             half: bool) -> dict:
    """Write ``model``'s weights (only) to ``root / name`` and return ``info`` with its ``config``,
    ``dtype`` and ``files`` (SHA-256 and size of each, keyed by path under ``root``).

    Shards of at most ``MAX_SHARD`` bytes in the Hub's layout (``save_torch_state_dict``); ``half``
    stores float16 (a caller checks first that the results do not change). A ``CorpusVocabGPT``
    is stored as its compact ``GPT`` plus its vocabulary (the tensor ``vocab``).
    """
    from huggingface_hub import save_torch_state_dict

    from ..checkpoint import _unique_tensors  # tied weights stored once

    vocab = model.vocab if isinstance(model, CorpusVocabGPT) else None
    gpt = model.compact() if vocab is not None else model
    state, _ = _unique_tensors(gpt.state_dict())
    dtype = torch.float16 if half else torch.float32
    state = {k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()}
    if vocab is not None:
        state["vocab"] = vocab.clone()
    folder = Path(root) / name
    folder.mkdir(parents=True, exist_ok=True)
    state = _split_rows(state, MAX_SHARD - (64 << 10))  # room for the file's header
    save_torch_state_dict(state, folder, max_shard_size=MAX_SHARD, metadata={"format": "pt"})
    files = {f"{name}/{f.name}": dict(sha256=sha256_file(f), bytes=f.stat().st_size)
             for f in sorted(folder.iterdir())}
    config = dataclasses.asdict(gpt.config)
    return info | dict(config=config, dtype=str(dtype).removeprefix("torch."), files=files)


def write_manifest(root: str | os.PathLike, runs: dict[str, dict]) -> Path:
    """``root / manifest.json`` describing ``runs`` (each ``save_run``'s or a tables-only entry)."""
    path = Path(root) / MANIFEST_FILE
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(dict(format=MANIFEST_FORMAT, runs=runs), indent=1) + "\n")
    return path
