"""Checkers for the exercises of Chapter 1 (tokens and batches): ``check_char_tokenizer``, ``check_get_batch``."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor, nn

from .core import (_Case, _Mismatch, _call, _describe, _generator, _require_tensor, _rng_preserved, _run_cases, _short)

__all__ = ["check_char_tokenizer", "check_get_batch"]


def check_char_tokenizer(candidate) -> bool:
    """Check a character tokenizer class: ``tok = candidate(text)``; ``tok.vocab_size`` (an int or
    property), ``tok.encode(str) -> list[int]`` and ``tok.decode(ids) -> str``.

    The vocabulary is the **sorted** set of the text's characters, so id 0 is the smallest character.
    """
    texts = [
        ("a text of 11 characters, 'hello world'", "hello world", "low held"),
        ("a Shakespeare snippet with newlines, capitals and punctuation",
         "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n",
         "Speak, Citizen.\n"),
    ]

    def make(text: str, probe: str) -> Callable[[], None]:
        def run() -> None:
            chars = sorted(set(text))
            stoi = {c: i for i, c in enumerate(chars)}
            tok = _call(candidate, text)
            size = _call(lambda: tok.vocab_size)
            size = _call(size) if callable(size) else size
            if size != len(chars):
                raise _Mismatch(f"expected vocab_size {len(chars)} (distinct characters), got {size!r}",
                                hint="vocab_size is the number of distinct characters: len(sorted(set(text)))")
            for sample in (probe, text):
                ids = _call(tok.encode, sample)
                if isinstance(ids, Tensor):
                    ids = ids.tolist()
                try:
                    ids = [int(i) for i in ids]
                except (TypeError, ValueError):
                    raise _Mismatch(f"encode({sample!r}) returned {_describe(ids)}",
                                    hint="encode returns a list of ints, one per character") from None
                expected = [stoi[c] for c in sample]
                if ids != expected:
                    consistent = len(ids) == len(sample) and len({(c, i) for c, i in zip(sample, ids)}) == len(set(sample))
                    hint = ("your ids are consistent but numbered in another order: build the vocabulary with "
                            "sorted(set(text)) so that the ids are the same on every run and every machine"
                            if consistent else "give each character the index of its position in sorted(set(text))")
                    raise _Mismatch(f"encode({_short(sample)}):", f"expected {_short(expected)}",
                                    f"got      {_short(ids)}", hint=hint)
                decoded = _call(tok.decode, expected)
                if decoded != sample:
                    raise _Mismatch(f"decode({_short(expected)}):", f"expected {sample!r}", f"got      {decoded!r}",
                                    hint="decode maps each id back to its character and joins them: ''.join(...)")
        return run

    cases = [_Case(label, make(text, probe), "the class is built as YourClass(text); check encode and decode")
             for label, text, probe in texts]
    return _run_cases("check_char_tokenizer", cases)


def check_get_batch(candidate) -> bool:
    """Check ``get_batch(data, batch_size, block_size, generator=None)`` -> ``(x, y)``, both int64 (B, T).

    ``data`` is a 1-D token sequence; the cases pass a LongTensor, or a NumPy ``uint16`` array when
    the candidate only handles NumPy (as a memmap would be). Rows of ``x`` are windows
    ``data[s : s + T]`` with ``y = data[s + 1 : s + T + 1]``; starts ``s`` cover ``0 .. len(data) - T - 1``.
    """
    use_numpy = False
    with _rng_preserved():  # which kind of data does the candidate take?
        try:
            candidate(torch.arange(50), 2, 4, generator=_generator(0))
        except Exception:  # noqa: BLE001 - retried with NumPy data; a real error shows up in the cases
            try:
                candidate(np.arange(50, dtype=np.uint16), 2, 4, generator=_generator(0))
                use_numpy = True
            except Exception:  # noqa: BLE001
                pass

    def data_of(n: int):
        return np.arange(n, dtype=np.uint16) if use_numpy else torch.arange(n)

    def draw(n: int, batch_size: int, block_size: int, seed: int) -> tuple[Tensor, Tensor]:
        out = _call(candidate, data_of(n), batch_size, block_size, generator=_generator(seed))
        if not (isinstance(out, (tuple, list)) and len(out) == 2):
            raise _Mismatch(f"expected a pair (x, y), got {_describe(out)}", hint="return x, y")
        expected = torch.zeros(batch_size, block_size, dtype=torch.int64)
        shape_hint = f"x and y have shape (batch_size, block_size) = ({batch_size}, {block_size})"
        dtype_hint = ("token ids must be int64 (what nn.Embedding and cross_entropy want): "
                      "use .long(), or .astype(np.int64) before torch.from_numpy")
        x = _require_tensor(out[0], expected, "x", shape_hint=shape_hint, dtype_hint=dtype_hint)
        y = _require_tensor(out[1], expected, "y", shape_hint=shape_hint, dtype_hint=dtype_hint)
        return x, y

    def windows(n: int = 100, batch_size: int = 4, block_size: int = 8) -> None:
        # the data is 0, 1, 2, ..., so every value is its own position: x[i, 0] is the start
        x, y = draw(n, batch_size, block_size, seed=1)
        steps = torch.arange(block_size)
        for i in range(batch_size):
            start = int(x[i, 0])
            if not torch.equal(x[i], start + steps):
                raise _Mismatch(f"row {i} of x is {x[i].tolist()}: not consecutive tokens of the data",
                                hint="each row is one window data[s : s + block_size] of a random start s")
            if torch.equal(y[i], x[i]):
                hint = "y must be x shifted by one token: y = data[s + 1 : s + 1 + block_size]"
            elif torch.equal(y[i], x[i] + 2):
                hint = "y is shifted by two tokens: the target of data[s + t] is data[s + t + 1]"
            elif torch.equal(y[i], x[i] - 1):
                hint = "y is shifted the wrong way: y = data[s + 1 : s + 1 + block_size], x = data[s : s + block_size]"
            else:
                hint = "y = data[s + 1 : s + 1 + block_size]: the next token after each token of x"
            if not torch.equal(y[i], x[i] + 1):
                raise _Mismatch(f"row {i}: x = {x[i].tolist()}", f"expected y = {(x[i] + 1).tolist()}",
                                f"got      y = {y[i].tolist()}", hint=hint)

    def bounds() -> None:
        n, block_size, batch_size = 10, 8, 64  # exactly two valid starts: 0 and 1
        x, y = draw(n, batch_size, block_size, seed=2)
        starts = sorted(set(x[:, 0].tolist()))
        last_start = n - block_size - 1
        if max(starts) > last_start or int(y.max()) > n - 1 or min(starts) < 0:
            raise _Mismatch(f"data of {n} tokens, block_size={block_size}: the valid starts are 0 .. {last_start}",
                            f"got starts {starts}",
                            hint="draw starts with torch.randint(len(data) - block_size, ...): y needs one token more")
        if starts != list(range(last_start + 1)):
            raise _Mismatch(f"data of {n} tokens, block_size={block_size}: {batch_size} draws should use every start "
                            f"0 .. {last_start}", f"got only starts {starts}",
                            hint=f"the last window, start {last_start}, is valid (its target is the last token): "
                                 "torch.randint(len(data) - block_size, ...) draws from exactly the valid starts")

    def reproducible() -> None:
        first, second = draw(100, 4, 8, seed=3), draw(100, 4, 8, seed=3)
        if not (torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])):
            raise _Mismatch("two calls with generators seeded alike returned different batches",
                            hint="draw the starts with the generator you are given: "
                                 "torch.randint(..., generator=generator)")

    index_hint = ("starts must stay in [0, len(data) - block_size): the window and its shifted target "
                  "both have to fit in the data")
    cases = [
        _Case("data = 0, 1, ..., 99, batch_size=4, block_size=8", windows,
              "get_batch is called as get_batch(data, batch_size, block_size, generator=g)"),
        _Case("data of 10 tokens, block_size=8 (only starts 0 and 1 fit)", bounds, index_hint),
        _Case("the same generator seed twice gives the same batch", reproducible),
    ]
    notes = ("(your get_batch takes NumPy arrays, so the cases passed NumPy data)",) if use_numpy else ()
    return _run_cases("check_get_batch", cases, notes)
