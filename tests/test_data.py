"""Tests for gpt_from_scratch.data (Chapter 1): the corpus loader, token files, batches and windows."""

from __future__ import annotations

import hashlib
import io
import urllib.error
import urllib.request

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from gpt_from_scratch import data
from gpt_from_scratch.data import (
    ChecksumError,
    DataNotFoundError,
    TokenDataset,
    get_batch,
    load_tiny_shakespeare,
    prepare_tokens,
    read_tokens,
    split_text,
    write_tokens,
)


def ramp(n: int) -> np.ndarray:
    """Token ids equal to their positions, so a window's first id is its start index."""
    return np.arange(n, dtype=np.uint16)


# ---------------------------------------------------------------- get_batch


def test_get_batch_shapes_dtype_and_shift():
    x, y = get_batch(ramp(1000), batch_size=8, block_size=16, generator=torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (8, 16)
    assert x.dtype == y.dtype == torch.int64
    # Each row is a run of consecutive positions, and y is x moved one token to the right.
    torch.testing.assert_close(x, x[:, :1] + torch.arange(16))
    torch.testing.assert_close(y, x + 1)
    torch.testing.assert_close(y[:, :-1], x[:, 1:])


def test_get_batch_rows_are_windows_of_real_text():
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 50_257, size=5_000).astype(np.uint16)
    x, y = get_batch(tokens, 4, 32, generator=torch.Generator().manual_seed(1))
    for row_x, row_y in zip(x.numpy(), y.numpy()):
        starts = [s for s in range(len(tokens) - 32) if np.array_equal(tokens[s:s + 32], row_x)]
        assert starts, "a row of x is not a window of the data"
        assert any(np.array_equal(tokens[s + 1:s + 33], row_y) for s in starts)


def test_get_batch_returns_tensors_that_can_be_viewed():
    x, y = get_batch(ramp(100), 4, 8, generator=torch.Generator().manual_seed(0))
    assert x.is_contiguous() and y.is_contiguous()
    assert y.view(-1).shape == (32,)  # what a loss function does with the targets


def test_get_batch_never_reads_past_the_end():
    n, block_size = 300, 50
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        x, y = get_batch(ramp(n), 64, block_size, generator=g)
        assert int(y.max()) <= n - 1
        assert int(x[:, 0].max()) <= n - block_size - 1


def test_get_batch_last_valid_start_is_reachable_and_nothing_beyond():
    # block_size + 2 tokens: exactly two windows fit, starting at 0 and at 1 = len - block_size - 1.
    block_size = 5
    tokens = ramp(block_size + 2)
    x, y = get_batch(tokens, 2_000, block_size, generator=torch.Generator().manual_seed(0))
    assert set(x[:, 0].tolist()) == {0, 1}
    last = x[x[:, 0] == 1][0]
    assert last.tolist() == [1, 2, 3, 4, 5]
    assert y[x[:, 0] == 1][0].tolist() == [2, 3, 4, 5, 6]  # its target ends on the very last token


def test_get_batch_with_exactly_one_window():
    x, y = get_batch(ramp(4), 3, 3, generator=torch.Generator().manual_seed(0))
    assert x.tolist() == [[0, 1, 2]] * 3 and y.tolist() == [[1, 2, 3]] * 3


@pytest.mark.parametrize("n", [0, 3, 4])
def test_get_batch_rejects_data_too_short_for_a_target(n):
    with pytest.raises(ValueError, match=rf"block_size=4 needs at least 5 tokens, the data has {n}"):
        get_batch(ramp(n), 2, 4)


@pytest.mark.parametrize("batch_size, block_size", [(0, 4), (2, 0), (-1, 4)])
def test_get_batch_rejects_empty_shapes(batch_size, block_size):
    with pytest.raises(ValueError, match=rf"got {batch_size} and {block_size}"):
        get_batch(ramp(100), batch_size, block_size)


@pytest.mark.parametrize("batch_size, block_size, name", [(4.0, 8, "batch_size"), (4, "8", "block_size"),
                                                         (True, 8, "batch_size")])
def test_get_batch_names_a_size_that_is_not_an_int(batch_size, block_size, name):
    with pytest.raises(TypeError, match=rf"{name} must be an int, got .*: pass {name}=int\("):
        get_batch(ramp(100), batch_size, block_size)


def test_get_batch_refuses_data_that_is_not_one_sequence():
    with pytest.raises(ValueError, match=r"1-D token sequence, got shape \(100, 1\).*reshape\(-1\)"):
        get_batch(ramp(100).reshape(100, 1), 2, 8)


def test_get_batch_is_the_same_on_memmap_array_tensor_and_list(tmp_path):
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 50_257, size=2_000).astype(np.uint16)
    mm = read_tokens(write_tokens(tokens, tmp_path / "t.bin"))
    assert isinstance(mm, np.memmap)
    batches = [
        get_batch(source, 6, 20, generator=torch.Generator().manual_seed(42))
        for source in (mm, tokens, torch.from_numpy(tokens.astype(np.int64)), tokens.tolist())
    ]
    for x, y in batches[1:]:
        torch.testing.assert_close(x, batches[0][0])
        torch.testing.assert_close(y, batches[0][1])


def test_get_batch_is_reproducible_with_a_seeded_generator():
    tokens = ramp(10_000)
    a = get_batch(tokens, 8, 16, generator=torch.Generator().manual_seed(7))
    b = get_batch(tokens, 8, 16, generator=torch.Generator().manual_seed(7))
    c = get_batch(tokens, 8, 16, generator=torch.Generator().manual_seed(8))
    torch.testing.assert_close(a, b)
    assert not torch.equal(a[0], c[0])


def test_get_batch_without_generator_follows_the_global_seed():
    tokens = ramp(10_000)
    torch.manual_seed(3)
    a = get_batch(tokens, 8, 16)
    torch.manual_seed(3)
    b = get_batch(tokens, 8, 16)
    torch.testing.assert_close(a, b)


def test_get_batch_device_argument():
    x, y = get_batch(ramp(100), 2, 4, device="cpu")
    assert x.device.type == y.device.type == "cpu"
    x, _ = get_batch(ramp(100), 2, 4, device="meta")
    assert x.device.type == "meta" and x.shape == (2, 4)


# ---------------------------------------------------------------- TokenDataset


@pytest.mark.parametrize("bad", [-1, 65])
def test_get_batch_with_vocab_size_refuses_ids_outside_the_vocabulary(bad):
    data = np.arange(100) % 65
    x, y = get_batch(data, 4, 8, torch.Generator().manual_seed(0), vocab_size=65)  # all in range
    assert int(torch.cat([x, y]).max()) < 65
    data[::5] = bad  # in every window of 8
    shown = r"\[-1, \d+\]" if bad < 0 else r"\[\d+, 65\]"  # the batch's least and greatest id
    with pytest.raises(ValueError, match=r"must be in \[0, 65\), this batch has values in " + shown):
        get_batch(data, 4, 8, torch.Generator().manual_seed(0), vocab_size=65)
    get_batch(data, 4, 8, torch.Generator().manual_seed(0))  # without vocab_size: not checked


def test_token_dataset_has_one_item_per_valid_start():
    tokens = np.random.default_rng(0).integers(0, 65, size=40).astype(np.uint16)
    ds = TokenDataset(tokens, block_size=8)
    assert len(ds) == 40 - 8
    for i in range(len(ds)):
        x, y = ds[i]
        assert x.dtype == y.dtype == torch.int64
        assert x.tolist() == tokens[i:i + 8].tolist()
        assert y.tolist() == tokens[i + 1:i + 9].tolist()
    assert ds[-1][1][-1].item() == tokens[-1]  # the last item's target ends on the last token
    with pytest.raises(IndexError, match="index 32 out of range for 32 windows"):
        ds[len(ds)]


def test_token_dataset_items_are_get_batch_windows():
    tokens = ramp(500)
    ds = TokenDataset(tokens, block_size=12)
    x, y = get_batch(tokens, 16, 12, generator=torch.Generator().manual_seed(0))
    for row_x, row_y in zip(x, y):
        item_x, item_y = ds[int(row_x[0])]
        torch.testing.assert_close(item_x, row_x)
        torch.testing.assert_close(item_y, row_y)
    # get_batch's starts and the dataset's indices cover the same range.
    starts = get_batch(tokens, 5_000, 12, generator=torch.Generator().manual_seed(1))[0][:, 0]
    assert int(starts.min()) == 0 and int(starts.max()) == len(ds) - 1


def test_token_dataset_in_a_dataloader():
    loader = DataLoader(TokenDataset(ramp(100), 10), batch_size=16, shuffle=True,
                        generator=torch.Generator().manual_seed(0))
    x, y = next(iter(loader))
    assert x.shape == y.shape == (16, 10)
    torch.testing.assert_close(y, x + 1)
    assert sum(len(batch[0]) for batch in loader) == 90


def test_token_dataset_rejects_short_data():
    with pytest.raises(ValueError, match="block_size=10 needs at least 11 tokens, got 10"):
        TokenDataset(ramp(10), 10)


# ---------------------------------------------------------------- splits and token files


def test_split_text():
    text = "abcdefghij" * 10
    train, val = split_text(text, 0.9)
    assert (len(train), len(val)) == (90, 10)
    assert train + val == text
    for bad in (0.0, 1.0, 1.5, -0.1):
        with pytest.raises(ValueError, match=rf"train_frac must be in \(0, 1\), got {bad}"):
            split_text(text, bad)


def test_corpus_split_in_gpt2_tokens(tmp_path, corpus, gpt2):
    # nanoGPT's data/shakespeare/prepare.py reports the same counts: 301,966 and 36,059 tokens.
    paths = prepare_tokens(gpt2, out_dir=tmp_path)
    assert set(paths) == {"train", "val"}
    train, val = read_tokens(paths["train"]), read_tokens(paths["val"])
    assert (len(train), len(val)) == (301_966, 36_059)
    assert paths["train"].stat().st_size == 2 * 301_966
    assert train[:4].tolist() == [5962, 22307, 25, 198]  # "First Citizen:\n"
    assert gpt2.decode(train.tolist()) + gpt2.decode(val.tolist()) == corpus
    assert len(gpt2.decode(train.tolist())) == int(0.9 * len(corpus))


def test_prepare_tokens_with_characters(tmp_path, corpus):
    from gpt_from_scratch.tokenizer import CharTokenizer

    tok = CharTokenizer(corpus)
    paths = prepare_tokens(tok, out_dir=tmp_path)
    train, val = read_tokens(paths["train"]), read_tokens(paths["val"])
    assert len(train) + len(val) == len(corpus)
    assert tok.decode(train[:14]) == "First Citizen:"


def test_prepare_tokens_default_folder_depends_on_the_tokenizer(tmp_path, monkeypatch, gpt2):
    from gpt_from_scratch.tokenizer import CharTokenizer

    monkeypatch.setenv(data.CACHE_ENV_VAR, str(tmp_path))
    text = "To be, or not to be: that is the question."
    gpt2_paths = prepare_tokens(gpt2, text=text)
    char_paths = prepare_tokens(CharTokenizer(text), text=text)
    assert gpt2_paths["train"].parent == tmp_path / "tinyshakespeare-gpt2"
    assert char_paths["train"].parent != gpt2_paths["train"].parent
    assert gpt2.decode(read_tokens(gpt2_paths["train"]).tolist()) == text[:int(0.9 * len(text))]


def test_write_read_round_trip(tmp_path):
    ids = np.array([0, 1, 50_256, 65_535, 198, 0], dtype=np.int64)
    path = write_tokens(ids, tmp_path / "sub" / "ids.bin")
    assert path.stat().st_size == 2 * len(ids)
    back = read_tokens(path)
    assert isinstance(back, np.memmap) and back.dtype == np.uint16
    assert back.tolist() == ids.tolist()
    with pytest.raises(ValueError):  # read-only: a batch can never corrupt the token file
        back[0] = 1
    assert write_tokens([], tmp_path / "empty.bin").stat().st_size == 0
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == ["ids.bin"]  # no temporary files left


@pytest.mark.parametrize("bad", [65_536, -1, 100_000])
def test_write_tokens_refuses_ids_that_do_not_fit_uint16(tmp_path, bad):
    path = tmp_path / "ids.bin"
    with pytest.raises(ValueError, match=rf"\[0, 65535\].*{bad}"):
        write_tokens([5, bad, 7], path)
    assert not path.exists()


# ---------------------------------------------------------------- finding, verifying, downloading the corpus


def test_load_tiny_shakespeare(corpus):
    assert len(corpus) == data.TINY_SHAKESPEARE_CHARS
    assert corpus.startswith("First Citizen:\nBefore we proceed any further, hear me speak.")
    assert hashlib.sha256(corpus.encode("utf-8")).hexdigest() == data.TINY_SHAKESPEARE_SHA256


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """Empty data and cache folders, and a network that fails the test if touched (override per test)."""
    data_dir, cache = tmp_path / "data", tmp_path / "cache"
    data_dir.mkdir()
    cache.mkdir()
    monkeypatch.setenv(data.DATA_ENV_VAR, str(data_dir))
    monkeypatch.setenv(data.CACHE_ENV_VAR, str(cache))

    def no_network(*args, **kwargs):
        raise AssertionError("urlopen was called")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    return data_dir, cache


def _corrupted_copy(dest, corpus, edit):
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(bytes(edit(bytearray(corpus.encode("utf-8")))))
    return dest


def _flip_one_byte(raw):
    raw[len(raw) // 2] ^= 0x20  # one letter changes case
    return raw


def test_a_copy_with_one_byte_changed_is_rejected(tmp_path, corpus):
    bad = _corrupted_copy(tmp_path / "input.txt", corpus, _flip_one_byte)
    assert bad.stat().st_size == data.TINY_SHAKESPEARE_CHARS  # same size: only the hash can tell
    with pytest.raises(ChecksumError, match=rf"{bad} is not the Tiny Shakespeare corpus.*delete it"):
        load_tiny_shakespeare(bad)


def test_a_truncated_copy_is_rejected(tmp_path, corpus):
    bad = _corrupted_copy(tmp_path / "input.txt", corpus, lambda raw: raw[:500_000])
    with pytest.raises(ChecksumError, match=r"\(500,000 bytes\), expected .* \(1,115,394 bytes\)"):
        load_tiny_shakespeare(bad)


def test_a_bad_copy_in_the_data_folder_is_not_replaced_by_a_download(isolated, corpus):
    data_dir, cache = isolated
    _corrupted_copy(data_dir / "tinyshakespeare" / "input.txt", corpus, _flip_one_byte)
    with pytest.raises(ChecksumError):
        load_tiny_shakespeare()  # urlopen would fail the test: a wrong file is an error, not a miss
    assert not any(cache.iterdir())


def test_a_missing_explicit_path(tmp_path):
    with pytest.raises(DataNotFoundError, match=rf"no file at {tmp_path / 'nope.txt'}"):
        load_tiny_shakespeare(tmp_path / "nope.txt")


def test_offline_with_nothing_on_disk_says_where_to_put_the_file(isolated, monkeypatch):
    data_dir, cache = isolated

    def offline(url, *args, **kwargs):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(DataNotFoundError) as info:
        load_tiny_shakespeare()
    message = str(info.value)
    assert f"Copy input.txt to {cache / 'tinyshakespeare' / 'input.txt'}" in message
    assert data.DATA_ENV_VAR in message and str(data_dir / "tinyshakespeare" / "input.txt") in message
    assert "name resolution" in message
    assert isinstance(info.value, FileNotFoundError)
    assert not any(cache.rglob("*.txt"))


def test_no_download_when_download_is_false(isolated):
    with pytest.raises(DataNotFoundError, match="download=False"):
        data.tiny_shakespeare_path(download=False)


class FakeResponse(io.BytesIO):
    """What urlopen returns, as far as the downloader uses it: a readable body and headers."""

    def __init__(self, body: bytes):
        super().__init__(body)
        self.headers = {"Content-Length": str(len(body))}


def test_a_download_with_wrong_bytes_leaves_no_file(isolated, monkeypatch):
    data_dir, cache = isolated
    monkeypatch.setattr(urllib.request, "urlopen", lambda url, timeout=None: FakeResponse(b"<html>404</html>"))
    with pytest.raises(ChecksumError, match=r"the download from .* has sha256 .*nothing was saved"):
        load_tiny_shakespeare()
    assert [p for p in cache.rglob("*") if p.is_file()] == []  # neither input.txt nor a temporary file


def test_a_correct_download_is_written_verified_and_reused(isolated, monkeypatch):
    data_dir, cache = isolated
    body = "To be, or not to be: that is the question.\n".encode()
    monkeypatch.setattr(data, "TINY_SHAKESPEARE_SHA256", hashlib.sha256(body).hexdigest())
    urls = []

    def fake_urlopen(url, timeout=None):
        urls.append(url)
        return FakeResponse(body)

    monkeypatch.setattr(urllib.request, "urlopen", fake_urlopen)
    assert load_tiny_shakespeare() == body.decode()
    assert urls == [data.TINY_SHAKESPEARE_URL]
    saved = cache / "tinyshakespeare" / "input.txt"
    assert saved.read_bytes() == body
    assert [p for p in cache.rglob("*") if p.is_file()] == [saved]
    assert load_tiny_shakespeare() == body.decode()  # the second call finds the cached copy
    assert len(urls) == 1


def test_the_data_folder_comes_before_the_cache(isolated, corpus):
    data_dir, cache = isolated
    _corrupted_copy(cache / "tinyshakespeare" / "input.txt", corpus, _flip_one_byte)
    good = data_dir / "tinyshakespeare" / "input.txt"
    good.parent.mkdir()
    good.write_bytes(corpus.encode("utf-8"))
    assert data.tiny_shakespeare_path() == good
    assert load_tiny_shakespeare() == corpus


def test_the_cache_is_used_when_the_data_folder_is_empty(isolated, corpus):
    data_dir, cache = isolated
    cached = cache / "tinyshakespeare" / "input.txt"
    cached.parent.mkdir()
    cached.write_bytes(corpus.encode("utf-8"))
    assert data.tiny_shakespeare_path() == cached  # found without touching the network
