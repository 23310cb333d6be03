"""Chapter 6 — the checkpoint folder: three files that a crash at any moment leaves loadable.

A checkpoint folder holds its tensor files (``model.safetensors``, and ``optimizer.safetensors`` when
there is an optimizer state) and ``checkpoint.json``, which describes them and records the SHA-256 of
each. What the files hold is ``checkpoint``'s business; this module only writes and finds them.

Three files cannot be replaced in one step, so ``write_folder`` goes through a staging folder ``.next``:
1. write the new tensor files into ``.next`` and flush them to disk;
2. replace ``checkpoint.json`` by one that names ``.next`` (``os.replace``: atomic, the commit point);
3. move the files from ``.next`` over the old ones, then replace ``checkpoint.json`` again, naming the
   folder itself, and remove ``.next``.
Before step 2 the old description names the old, untouched files; after it the new description names
the new files, and ``locate`` finds each one in ``.next`` or, once moved, beside the JSON (the SHA-256
tells them apart). A save first finishes the moves a crash interrupted. So a save interrupted at any
moment leaves the previous or the new checkpoint, never a mix.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file

from .utils import atomic_path, fsync_dir, sha256_file

CHECKPOINT_FORMAT = "gpt_from_scratch.checkpoint/1"
MODEL_FILE, OPTIMIZER_FILE, META_FILE = "model.safetensors", "optimizer.safetensors", "checkpoint.json"
STAGING = ".next"  # where a save writes its files before the commit point
MAX_META_BYTES = 64 << 20  # checkpoint.json holds configs and a history: megabytes at most


class CheckpointError(ValueError):
    """A checkpoint folder that cannot be loaded: truncated, tampered with, or not a checkpoint."""


def write_folder(path: Path, files: dict[str, dict[str, torch.Tensor]], meta: dict) -> Path:
    """Write the checkpoint folder ``path``: each of ``files`` (a file name -> its tensors) and
    ``checkpoint.json`` holding ``meta``, the format and the files' SHA-256, by the three steps of
    the module docstring. Files get the usual mode (0666 minus the umask)."""
    path.mkdir(parents=True, exist_ok=True)
    _finish_interrupted_save(path)
    hashes = {}
    for name, tensors in files.items():  # 1. the new files, in the staging folder
        with atomic_path(path / STAGING / name) as tmp:
            save_file(tensors, tmp)
        hashes[name] = sha256_file(path / STAGING / name)
    fsync_dir(path)
    meta = {"format": CHECKPOINT_FORMAT} | meta | {"files": hashes}
    _write_meta(path, meta | {"staging": STAGING})  # 2. the commit point
    _finish_interrupted_save(path)  # 3.
    return path


def _write_meta(path: Path, meta: dict) -> None:
    with atomic_path(path / META_FILE) as tmp:
        tmp.write_text(json.dumps(meta, indent=1), encoding="utf-8")


def _finish_interrupted_save(path: Path) -> None:
    """Step 3 of a save (see the module docstring); on a committed folder, clear what a crash left."""
    try:
        meta = read_meta(path) if (path / META_FILE).is_file() else {}
    except CheckpointError:
        meta = {}  # nothing loadable to keep: the new save replaces it
    staging = path / STAGING
    if meta.get("staging") == STAGING:  # committed: the new files are in .next or already moved
        for name in meta["files"]:
            if (staging / name).is_file():
                os.replace(staging / name, path / name)
        fsync_dir(path)
        stale = [name for name in (MODEL_FILE, OPTIMIZER_FILE) if name not in meta["files"]]
        for name in stale:  # a checkpoint without an optimizer replaced one with it
            (path / name).unlink(missing_ok=True)
        _write_meta(path, {k: v for k, v in meta.items() if k != "staging"})
    shutil.rmtree(staging, ignore_errors=True)  # not named by checkpoint.json: an unfinished step 1
    for entry in path.glob(f".{META_FILE}.*.tmp"):  # temporary files of interrupted writes
        entry.unlink(missing_ok=True)


def read_meta(path: Path) -> dict:
    """checkpoint.json, checked to be a description of this format whose ``files`` can be located;
    a CheckpointError otherwise (``checkpoint`` checks the fields that describe the model)."""
    meta_path = path / META_FILE
    if not meta_path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}: {META_FILE} is missing (write one with save_checkpoint)")
    size = meta_path.stat().st_size
    if size > MAX_META_BYTES:
        raise CheckpointError(f"{meta_path} is {size:,} bytes, more than a checkpoint description can be "
                              f"({MAX_META_BYTES:,}): it is not a checkpoint.json")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{meta_path} is not valid JSON ({err}): the file is truncated or damaged. "
                              "Delete the folder and save (or train) again") from None
    if not isinstance(meta, dict) or meta.get("format") != CHECKPOINT_FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise CheckpointError(f"{meta_path} has format {found!r}, expected {CHECKPOINT_FORMAT!r}")
    if not isinstance(meta.get("files"), dict):
        raise CheckpointError(f"{meta_path}: field 'files' is {meta.get('files')!r:.80}, not a valid value: "
                              "the file was edited or damaged. Delete the folder and save again")
    if meta.get("staging", STAGING) != STAGING:
        raise CheckpointError(f"{meta_path}: field 'staging' is {meta['staging']!r}, expected {STAGING!r}")
    return meta


def locate(path: Path, meta: dict) -> dict[str, Path]:
    """Where each file ``checkpoint.json`` lists is now, checked against its SHA-256."""
    found = {}
    for name, expected in meta["files"].items():
        if name not in (MODEL_FILE, OPTIMIZER_FILE):
            raise CheckpointError(f"{path / META_FILE} lists an unknown file {name!r}")
        places = ([path / STAGING / name] if meta.get("staging") else []) + [path / name]
        actual = "missing"
        for place in places:
            if place.is_file():
                actual = sha256_file(place)
                if actual == expected:
                    found[name] = place
                    break
        if name not in found:
            raise CheckpointError(
                f"{path / name} does not match {META_FILE} (sha256 {actual}, expected {expected}): the checkpoint "
                "was changed or its saving was interrupted. Delete the folder and save (or train) again."
            )
    return found


def checkpoint_files(path: str | os.PathLike) -> dict[str, Path]:
    """The files of the checkpoint in folder ``path``, verified: ``{"checkpoint.json": ...,
    "model.safetensors": ..., "optimizer.safetensors": ...}`` (the last only with an optimizer state)."""
    path = Path(path)
    return {META_FILE: path / META_FILE} | locate(path, read_meta(path))
