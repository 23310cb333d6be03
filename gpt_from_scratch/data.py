"""Chapter 1 — the Tiny Shakespeare corpus and the token pipeline.

``load_tiny_shakespeare`` finds (or downloads) the text and verifies it; ``split_text``,
``write_tokens``/``read_tokens`` and ``prepare_tokens`` turn it into ``uint16`` token files
read back with ``np.memmap``; ``get_batch`` and ``TokenDataset`` cut (x, y) training windows.
"""

from __future__ import annotations

import os
import urllib.request
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset
from tqdm.auto import tqdm

from .utils import atomic_path, sha256_file

TINY_SHAKESPEARE_URL = (
    "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
)
TINY_SHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
TINY_SHAKESPEARE_CHARS = 1_115_394
DATA_ENV_VAR = "GPT_FROM_SCRATCH_DATA"  # a folder laid out like ``<it>/tinyshakespeare/input.txt``
CACHE_ENV_VAR = "GPT_FROM_SCRATCH_CACHE"  # overrides the user cache folder
RELATIVE_PATH = Path("tinyshakespeare") / "input.txt"


class DataNotFoundError(FileNotFoundError):
    """The corpus is nowhere on disk and could not be downloaded."""


class ChecksumError(ValueError):
    """A copy of the corpus exists but is not the expected file (truncated, edited, corrupt)."""


def cache_dir() -> Path:
    """Where downloads and token files live: ``$GPT_FROM_SCRATCH_CACHE``, else ``~/.cache/gpt_from_scratch``."""
    if os.environ.get(CACHE_ENV_VAR):
        return Path(os.environ[CACHE_ENV_VAR]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "gpt_from_scratch"


def verify_tiny_shakespeare(path: str | os.PathLike) -> Path:
    """Return ``path`` if it holds exactly the expected corpus, else raise ``ChecksumError``."""
    path = Path(path)
    actual = sha256_file(path)
    if actual != TINY_SHAKESPEARE_SHA256:
        size = path.stat().st_size
        raise ChecksumError(
            f"{path} is not the Tiny Shakespeare corpus: sha256 {actual} ({size:,} bytes), "
            f"expected {TINY_SHAKESPEARE_SHA256} ({TINY_SHAKESPEARE_CHARS:,} bytes). "
            f"It may be truncated or edited: delete it, then download it again from {TINY_SHAKESPEARE_URL}"
        )
    return path


def _download(url: str, dest: Path, expected_sha256: str) -> Path:
    """Download ``url`` to ``dest`` atomically; the file appears only once its checksum is right."""
    with atomic_path(dest) as tmp:
        with urllib.request.urlopen(url, timeout=30) as response, open(tmp, "wb") as f:
            total = int(response.headers.get("Content-Length") or 0) or None
            with tqdm(total=total, unit="B", unit_scale=True, desc=f"downloading {dest.name}") as bar:
                for chunk in iter(lambda: response.read(1 << 16), b""):
                    f.write(chunk)
                    bar.update(len(chunk))
        actual = sha256_file(tmp)
        if actual != expected_sha256:
            raise ChecksumError(
                f"the download from {url} has sha256 {actual}, expected {expected_sha256}; "
                "nothing was saved. Try again, or fetch the file by hand."
            )
    return dest


def tiny_shakespeare_path(path: str | os.PathLike | None = None, download: bool = True) -> Path:
    """Find a verified copy of Tiny Shakespeare, downloading it into the cache if needed.

    Looks in this order: ``path`` → ``$GPT_FROM_SCRATCH_DATA/tinyshakespeare/input.txt`` →
    the user cache → a download from ``TINY_SHAKESPEARE_URL``. Every copy is checked against
    ``TINY_SHAKESPEARE_SHA256``; a wrong copy raises ``ChecksumError`` rather than being used.
    """
    if path is not None:
        path = Path(path).expanduser()
        if not path.is_file():
            raise DataNotFoundError(f"no file at {path}: pass the path of Tiny Shakespeare's input.txt")
        return verify_tiny_shakespeare(path)

    candidates = []
    if os.environ.get(DATA_ENV_VAR):
        candidates.append(Path(os.environ[DATA_ENV_VAR]).expanduser() / RELATIVE_PATH)
    cached = cache_dir() / RELATIVE_PATH
    candidates.append(cached)
    for candidate in candidates:
        if candidate.is_file():
            return verify_tiny_shakespeare(candidate)

    looked = ", ".join(str(c) for c in candidates)
    if not download:
        raise DataNotFoundError(f"Tiny Shakespeare not found (looked in: {looked}) and download=False")
    try:
        return _download(TINY_SHAKESPEARE_URL, cached, TINY_SHAKESPEARE_SHA256)
    except OSError as err:  # URLError, timeouts and refused connections are all OSErrors
        raise DataNotFoundError(
            f"Tiny Shakespeare is not on this machine (looked in: {looked}) and downloading "
            f"{TINY_SHAKESPEARE_URL} failed ({err}). Offline? Copy input.txt to {cached}, or set "
            f"{DATA_ENV_VAR} to a folder that contains tinyshakespeare/input.txt."
        ) from err


def load_tiny_shakespeare(path: str | os.PathLike | None = None) -> str:
    """The whole corpus as one string (1,115,394 characters), verified; see ``tiny_shakespeare_path``."""
    return tiny_shakespeare_path(path).read_text(encoding="utf-8")


def split_text(text: str, train_frac: float = 0.9) -> tuple[str, str]:
    """Split by characters: the first ``train_frac`` for training, the rest for validation."""
    if not 0.0 < train_frac < 1.0:
        raise ValueError(f"train_frac must be in (0, 1), got {train_frac}")
    n = int(train_frac * len(text))
    return text[:n], text[n:]


def write_tokens(ids, path: str | os.PathLike) -> Path:
    """Write token ids as raw ``uint16`` (2 bytes each; GPT-2's 50,257 ids fit below 65,536), atomically."""
    ids = np.asarray(ids)
    if ids.size and (ids.min() < 0 or ids.max() >= 2**16):
        raise ValueError(
            f"token ids must be in [0, 65535] to be stored as uint16, got range [{ids.min()}, {ids.max()}]: "
            "these files hold vocabularies of at most 65,536 tokens; for a larger one, store the ids as np.uint32"
        )
    with atomic_path(path) as tmp:
        ids.astype(np.uint16).tofile(tmp)
    return Path(path)


def read_tokens(path: str | os.PathLike) -> np.memmap:
    """Map a ``uint16`` token file into memory without reading it: pages load as batches touch them.

    A file whose size is not a whole number of tokens (2 bytes each), or that is empty, raises a
    ValueError: it was cut short or is not a token file.
    """
    size = Path(path).stat().st_size
    if size == 0 or size % 2:
        raise ValueError(
            f"{path} has {size:,} bytes, not a positive multiple of 2 (uint16 token ids): it was cut short or "
            "is not a token file. Delete it and write it again (write_tokens or prepare_tokens)"
        )
    return np.memmap(path, dtype=np.uint16, mode="r")


def prepare_tokens(encoding=None, out_dir: str | os.PathLike | None = None, train_frac: float = 0.9,
                   text: str | None = None) -> dict[str, Path]:
    """Encode Tiny Shakespeare (or ``text``) and write ``train.bin``/``val.bin``; return their paths.

    With GPT-2's encoding the 90/10 split gives 301,966 training and 36,059 validation tokens.
    By default the files go to ``cache_dir() / "tinyshakespeare-<encoding name>"``
    (``tinyshakespeare-gpt2``, or ``tinyshakespeare-chartokenizer`` for a ``CharTokenizer``).
    """
    if encoding is None:
        from .tokenizer import gpt2_encoding

        encoding = gpt2_encoding()
    if text is None:
        text = load_tiny_shakespeare()
    if out_dir is None:  # one folder per tokenizer, so GPT-2 and character tokens never overwrite each other
        out_dir = cache_dir() / f"tinyshakespeare-{getattr(encoding, 'name', type(encoding).__name__.lower())}"
    out_dir = Path(out_dir)
    paths = {}
    for split, part in zip(("train", "val"), split_text(text, train_frac)):
        ids = encoding.encode_ordinary(part) if hasattr(encoding, "encode_ordinary") else encoding.encode(part)
        paths[split] = write_tokens(ids, out_dir / f"{split}.bin")
    return paths


def _windows(data, starts: torch.Tensor, length: int) -> torch.Tensor:
    """Rows ``data[s : s + length]`` for every start ``s``, as an int64 tensor of shape (len(starts), length)."""
    index = starts[:, None] + torch.arange(length)  # (B, length)
    if isinstance(data, torch.Tensor):
        return data[index].long()
    return torch.from_numpy(np.asarray(data)[index.numpy()].astype(np.int64))


def get_batch(data, batch_size: int, block_size: int, generator: torch.Generator | None = None,
              device: str | torch.device = "cpu",
              vocab_size: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """A random batch of ``batch_size`` windows: inputs ``x`` and targets ``y = x`` shifted by one token.

    ``data`` is a 1-D token sequence (``np.memmap``, NumPy array or tensor). Starts are drawn from
    ``[0, len(data) - block_size)``: the last start, ``len(data) - block_size - 1``, still leaves room
    for the target of the final position, ``data[len(data) - 1]``. Both tensors are int64 of shape (B, T).
    With ``vocab_size``, the windows are checked to hold ids in ``[0, vocab_size)`` before they go to
    ``device``: on the host, so a GPU is not kept waiting (``train`` relies on it).
    """
    for name, value in (("batch_size", batch_size), ("block_size", block_size)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name} must be an int, got {value!r} ({type(value).__name__}): "
                            f"pass {name}=int({value!r})")
    if block_size < 1 or batch_size < 1:
        raise ValueError(f"batch_size and block_size must be >= 1, got {batch_size} and {block_size}")
    if np.ndim(data) != 1:
        raise ValueError(f"data must be a 1-D token sequence, got shape {tuple(np.shape(data))}: "
                         "flatten it (data.reshape(-1)) or pass one sequence")
    if len(data) <= block_size:
        raise ValueError(
            f"block_size={block_size} needs at least {block_size + 1} tokens, the data has {len(data)}: "
            "use a smaller block_size or more data"
        )
    starts = torch.randint(len(data) - block_size, (batch_size,), generator=generator)
    chunk = _windows(data, starts, block_size + 1)  # (B, T + 1)
    if vocab_size is not None and ((chunk < 0) | (chunk >= vocab_size)).any():
        raise ValueError(
            f"token ids must be in [0, {vocab_size}), this batch has values in [{int(chunk.min())}, "
            f"{int(chunk.max())}]: was the data made with a different tokenizer than the model's?"
        )
    if torch.device(device).type == "cuda" and chunk.device.type == "cpu":
        chunk = chunk.pin_memory().to(device, non_blocking=True)  # one asynchronous copy to the GPU
    else:
        chunk = chunk.to(device)
    # Contiguous copies, so that callers may .view() them (e.g. targets.view(-1) in the loss).
    return chunk[:, :-1].contiguous(), chunk[:, 1:].contiguous()  # x, y: (B, T) each


class TokenDataset(Dataset):
    """Every (x, y) window of a token sequence, for ``torch.utils.data.DataLoader`` users.

    Item ``i`` is ``(data[i : i + block_size], data[i + 1 : i + 1 + block_size])``, exactly what
    ``get_batch`` draws at random; a shuffling DataLoader therefore samples the same distribution.
    """

    def __init__(self, data, block_size: int):
        if len(data) <= block_size:
            raise ValueError(f"block_size={block_size} needs at least {block_size + 1} tokens, got {len(data)}")
        self.data, self.block_size = data, block_size

    def __len__(self) -> int:
        return len(self.data) - self.block_size

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not -len(self) <= i < len(self):
            raise IndexError(f"index {i} out of range for {len(self)} windows")
        chunk = _windows(self.data, torch.tensor([i % len(self)]), self.block_size + 1)[0]
        return chunk[:-1], chunk[1:]
