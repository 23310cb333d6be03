"""Exercise checkers, used by every chapter's exercises.

Each ``check_<thing>(candidate)`` runs your implementation on a few hidden cases, compares it with
an independent reference (PyTorch's own op where one exists, the book's formula otherwise) and prints
one short report: a success line, or the first failing case with what was expected, what came back
(shape, dtype, largest difference) and a hint aimed at the usual mistake. An exception raised by
your code is caught and reported (its type, message and line), never shown as a traceback.
Each checker returns ``True`` only when every case passes, and leaves the random number generators
of PyTorch, NumPy and Python as it found them.

What each checker calls (the ``candidate`` you pass):

=======================================  ===============================================================
checker                                  candidate
=======================================  ===============================================================
``check_char_tokenizer``                 a class: ``Tok(text)`` with ``encode``, ``decode``, ``vocab_size``
``check_get_batch``                      ``get_batch(data, batch_size, block_size, generator=None)``
``check_sinusoidal_positional_encoding`` ``pe(T, D)`` -> Tensor (T, D)
``check_layer_norm``                     ``layer_norm(x, weight, bias, eps)`` -> Tensor, or a module
                                         class ``LN(D, eps=...)`` with parameters ``weight``, ``bias``
``check_causal_mask``                    ``causal_mask(T)`` -> bool Tensor (T, T)
``check_scaled_dot_product_attention``   ``attention(q, k, v, mask=None)`` -> ``(output, weights)``
``check_multi_head_attention``           a module class ``MHA(d_model, n_heads)`` with ``c_attn``, ``c_proj``
``check_top_k_filter``                   ``top_k_filter(logits, k)`` -> logits, removed entries ``-inf``
``check_top_p_filter``                   ``top_p_filter(logits, p)`` -> logits, removed entries ``-inf``
=======================================  ===============================================================
"""

from __future__ import annotations

import math
import random
import sysconfig
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "check_char_tokenizer",
    "check_get_batch",
    "check_sinusoidal_positional_encoding",
    "check_layer_norm",
    "check_causal_mask",
    "check_scaled_dot_product_attention",
    "check_multi_head_attention",
    "check_top_k_filter",
    "check_top_p_filter",
]

PASS_MARK, FAIL_MARK = "✅", "❌"
_MAX_MESSAGE = 240  # characters of an exception message worth printing
# Frames of these folders (the standard library, installed packages) are not the candidate's code.
_LIBRARY_DIRS = tuple({sysconfig.get_path(name) for name in ("stdlib", "platstdlib", "purelib", "platlib")})


# ----------------------------------------------------------------------------------------------
# The machinery shared by every checker
# ----------------------------------------------------------------------------------------------


class _Mismatch(Exception):
    """A case failed: ``lines`` say what differs, ``hint`` what to look at."""

    def __init__(self, *lines: str, hint: str = ""):
        super().__init__(lines[0] if lines else "")
        self.lines, self.hint = list(lines), hint


class _CandidateError(Exception):
    """The candidate itself raised ``error``."""

    def __init__(self, error: Exception):
        super().__init__(str(error))
        self.error = error


@dataclass
class _Case:
    label: str  # what the case feeds the candidate, in words
    run: Callable[[], None]  # raises _Mismatch or _CandidateError on failure
    error_hint: str = ""  # the usual reason for an exception in this case


def _call(fn: Callable, *args, **kwargs):
    """Call the candidate; wrap anything it raises so the report can tell it from a checker bug."""
    try:
        return fn(*args, **kwargs)
    except Exception as err:  # noqa: BLE001 - every error of the candidate is reported, none escapes
        raise _CandidateError(err) from None


def _where(error: BaseException) -> str:
    """The last line of the candidate's code that ran before ``error`` (this file's frames skipped)."""
    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if f.filename != __file__ and not f.filename.startswith(_LIBRARY_DIRS)]
    if not frames or not frames[-1].line:
        return ""
    frame = frames[-1]
    return f"in {frame.name}(): {frame.line.strip()}"


def _message(error: BaseException) -> str:
    text = " ".join(str(error).split())
    if len(text) > _MAX_MESSAGE:
        text = text[: _MAX_MESSAGE - 1] + "…"
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


@contextmanager
def _rng_preserved() -> Iterator[None]:
    """Candidates may draw random numbers: give PyTorch, NumPy and Python their states back afterwards."""
    python_state, numpy_state = random.getstate(), np.random.get_state()
    try:
        with torch.random.fork_rng(devices=[]):
            yield
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)


def _run_cases(name: str, cases: list[_Case], notes: tuple[str, ...] = ()) -> bool:
    """Run ``cases`` in order, print the first failure (or one success line), return whether all passed."""
    with _rng_preserved():
        for number, case in enumerate(cases, 1):
            try:
                case.run()
                continue
            except _Mismatch as mismatch:
                lines, hint = mismatch.lines, mismatch.hint
            except _CandidateError as raised:
                error = raised.error
                if isinstance(error, NotImplementedError):
                    _print(f"{FAIL_MARK} {name}: not implemented yet ({_message(error)}).",
                           "   Write the body of your function, run its cell, then run this check again.")
                    return False
                lines = [f"your code raised {_message(error)}"]
                where = _where(error)
                if where:
                    lines.append(where)
                hint = case.error_hint
            except Exception as error:  # noqa: BLE001 - the result could not even be inspected
                lines = [f"your result could not be checked: {_message(error)}"]
                hint = "return what the exercise asks for: compare the type and shape you return with its instructions"
            header = f"{FAIL_MARK} {name}: case {number} of {len(cases)} failed — {case.label}"
            _print(header, *(f"   {line}" for line in lines), *([f"   hint: {hint}"] if hint else []))
            return False
    _print(*notes, f"{PASS_MARK} {name}: all {len(cases)} cases passed.")
    return True


def _print(*lines: str) -> None:
    print("\n".join(lines))


def _describe(t) -> str:
    if t is None:
        return "None"
    if isinstance(t, Tensor):
        return f"shape {tuple(t.shape)}, dtype {t.dtype}"
    return f"a {type(t).__name__}"


def _require_tensor(got, expected: Tensor, what: str = "result", dtype: bool = True,
                    shape_hint: str = "", dtype_hint: str = "") -> Tensor:
    """``got`` as a detached tensor with ``expected``'s shape (and dtype), else a _Mismatch."""
    if not isinstance(got, Tensor):
        raise _Mismatch(f"expected {what}: a Tensor, {_describe(expected)}", f"got:      {_describe(got)}",
                        hint=f"return a torch.Tensor for the {what}")
    if got.shape != expected.shape:
        raise _Mismatch(f"expected {what}: {_describe(expected)}", f"got:      {_describe(got)}",
                        hint=shape_hint or "compare the shape you return with the shape asked for")
    if dtype and got.dtype != expected.dtype:
        raise _Mismatch(f"expected {what}: {_describe(expected)}", f"got:      {_describe(got)}",
                        hint=dtype_hint or f"convert the {what} with .to({expected.dtype})")
    return got.detach().cpu()


def _max_difference(a: Tensor, b: Tensor) -> float:
    diff = (a.double() - b.double()).abs()
    diff = torch.where(torch.isnan(diff) & torch.isnan(a.double()) & torch.isnan(b.double()), 0.0, diff)
    diff = torch.nan_to_num(diff, nan=math.inf)
    return float(diff.max()) if diff.numel() else 0.0


def _close(a: Tensor, b: Tensor, atol: float, rtol: float) -> bool:
    return bool(torch.allclose(a.double(), b.double(), atol=atol, rtol=rtol, equal_nan=True))


def _compare_values(got: Tensor, expected: Tensor, atol: float, rtol: float,
                    known_mistakes: list[tuple[Tensor, str]], default_hint: str, what: str = "result") -> None:
    """Raise a _Mismatch unless ``got`` equals ``expected``; name the mistake ``got`` matches, if any."""
    if _close(got, expected, atol, rtol):
        return
    hint = default_hint
    for wrong, mistake_hint in known_mistakes:
        if wrong.shape == got.shape and _close(got, wrong, max(atol, 1e-4), max(rtol, 1e-4)):
            hint = mistake_hint
            break
    if torch.isnan(got).any() and not torch.isnan(expected).any():
        nan_note = f", {int(torch.isnan(got).sum())} NaN values"
    else:
        nan_note = ""
    raise _Mismatch(f"{what}: right shape and dtype ({tuple(got.shape)}, {got.dtype}) but wrong values",
                    f"largest difference from the expected values: {_max_difference(got, expected):.3g}{nan_note}",
                    hint=hint)


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ----------------------------------------------------------------------------------------------
# Chapter 1: tokens and batches
# ----------------------------------------------------------------------------------------------


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


def _short(value, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


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


# ----------------------------------------------------------------------------------------------
# Chapter 2: positional encoding
# ----------------------------------------------------------------------------------------------


def _sinusoid_table(T: int, D: int, pair_exponent: bool = True, swap: bool = False, halves: bool = False) -> Tensor:
    """The sinusoidal table in float64; the flags build the usual wrong versions."""
    position = torch.arange(T, dtype=torch.float64)[:, None]  # (T, 1)
    i = torch.arange(D // 2, dtype=torch.float64)  # (D/2,)
    exponent = 2 * i / D if pair_exponent else i / D
    angle = position / 10000.0 ** exponent  # (T, D/2)
    first, second = (torch.cos(angle), torch.sin(angle)) if swap else (torch.sin(angle), torch.cos(angle))
    if halves:
        return torch.cat([first, second], dim=1)  # (T, D)
    return torch.stack([first, second], dim=2).reshape(T, D)  # interleaved: (T, D/2, 2) -> (T, D)


def check_sinusoidal_positional_encoding(candidate) -> bool:
    """Check ``candidate(T, D)`` -> Tensor (T, D) in the default float dtype: the Transformer's table
    ``P[t, 2i] = sin(t / 10000^(2i/D))``, ``P[t, 2i+1] = cos(t / 10000^(2i/D))``."""
    sizes = [(6, 8), (50, 32), (1, 2), (20, 128)]

    def make(T: int, D: int) -> Callable[[], None]:
        def run() -> None:
            expected = _sinusoid_table(T, D)
            got = _require_tensor(_call(candidate, T, D), expected.to(torch.get_default_dtype()), "encoding",
                                  shape_hint="one row per position, one column per dimension: shape (T, D)",
                                  dtype_hint=f"return the table in {torch.get_default_dtype()} (e.g. .float()), "
                                             "the dtype of the embeddings it is added to")
            mistakes = [
                (_sinusoid_table(T, D, swap=True), "sin and cos are swapped: even dimensions 2i get the sine, "
                                                   "odd dimensions 2i+1 the cosine"),
                (_sinusoid_table(T, D, pair_exponent=False), "the exponent is 2i/D, where i counts the sin/cos "
                                                             "pairs (dimension 2i and 2i+1 share one frequency)"),
                (_sinusoid_table(T, D, halves=True), "sines and cosines are interleaved (sin in column 2i, cos in "
                                                     "2i+1), not in two halves"),
            ]
            _compare_values(got, expected, atol=1e-4, rtol=0.0, known_mistakes=mistakes,
                            default_hint="P[t, 2i] = sin(t / 10000^(2i/D)) and P[t, 2i+1] = cos(t / 10000^(2i/D))",
                            what="encoding")
        return run

    cases = [_Case(f"T={T}, D={D}", make(T, D), "the function is called as candidate(T, D) with two ints")
             for T, D in sizes]
    return _run_cases("check_sinusoidal_positional_encoding", cases)


# ----------------------------------------------------------------------------------------------
# Chapter 3: layer normalization
# ----------------------------------------------------------------------------------------------


def _layer_norm_variants(x: Tensor, weight: Tensor, bias: Tensor, eps: float) -> list[tuple[Tensor, str]]:
    """The usual wrong LayerNorms of ``x`` (float64), each with the hint that names the mistake."""
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, keepdim=True, unbiased=False)
    return [
        ((x - mean) / torch.sqrt(x.var(-1, keepdim=True, unbiased=True) + eps) * weight + bias,
         "use the biased variance (divide by D): x.var(-1, unbiased=False, keepdim=True), "
         "or ((x - mean)**2).mean(-1, keepdim=True); torch.var divides by D - 1 by default"),
        ((x - mean) / (torch.sqrt(var) + eps) * weight + bias,
         "eps goes inside the square root: (x - mean) / sqrt(var + eps), not (x - mean) / (std + eps)"),
        ((x - mean) / torch.sqrt(var + eps),
         "apply the learned scale and shift after normalizing: x_hat * weight + bias"),
        ((x - mean) / torch.sqrt(var + eps) * weight,
         "add the shift bias (β) after scaling: x_hat * weight + bias"),
        ((x - mean) / torch.sqrt(var + 1e-5) * weight + bias,
         "use the eps you are given, not a hard-coded 1e-5"),
        ((x - x.mean(0, keepdim=True)) / torch.sqrt(x.var(0, keepdim=True, unbiased=False) + eps) * weight + bias,
         "normalize each token over its features: mean and variance over the last dimension (dim=-1)"),
    ]


def check_layer_norm(candidate) -> bool:
    """Check a LayerNorm. ``candidate`` is either a function ``layer_norm(x, weight, bias, eps)``
    normalizing over the last dimension, or an ``nn.Module`` class built as ``LN(D, eps=eps)`` whose
    parameters are named ``weight`` (γ) and ``bias`` (β), like ``nn.LayerNorm``.

    The reference is ``torch.nn.functional.layer_norm``: biased variance, eps inside the square root.
    """
    is_module = isinstance(candidate, type) and issubclass(candidate, nn.Module)
    specs = [
        ("x of shape (2, 3, 8), random γ and β, eps=1e-05", (2, 3, 8), 3.0, 2.0, 1e-5, 1),
        ("x of shape (4, 16) with tiny variance (std 0.01), eps=1e-05", (4, 16), 0.0, 0.01, 1e-5, 2),
        ("x of shape (3, 32), eps=0.1", (3, 32), -1.0, 1.0, 0.1, 3),
    ]

    def make(shape: tuple[int, ...], mean: float, std: float, eps: float, seed: int) -> Callable[[], None]:
        def run() -> None:
            g = _generator(seed)
            D = shape[-1]
            x = mean + std * torch.randn(shape, generator=g)
            weight = 1.0 + 0.5 * torch.randn(D, generator=g)
            bias = 0.5 * torch.randn(D, generator=g)
            x64, w64, b64 = x.double(), weight.double(), bias.double()
            expected = F.layer_norm(x64, (D,), w64, b64, eps)
            if is_module:
                module = _call(candidate, D, eps=eps)
                for name, value in (("weight", weight), ("bias", bias)):
                    param = getattr(module, name, None)
                    if not isinstance(param, Tensor) or param.shape != (D,):
                        raise _Mismatch(f"your module has no parameter {name} of shape ({D},): got {_describe(param)}",
                                        hint="create self.weight = nn.Parameter(torch.ones(D)) (γ) and "
                                             "self.bias = nn.Parameter(torch.zeros(D)) (β)")
                    with torch.no_grad():
                        param.copy_(value)
                out = _call(module, x.clone())
            else:
                out = _call(candidate, x.clone(), weight.clone(), bias.clone(), eps)
            got = _require_tensor(out, expected.float(), "output",
                                  shape_hint="LayerNorm keeps the shape of its input")
            _compare_values(got, expected, atol=1e-4, rtol=1e-4,
                            known_mistakes=_layer_norm_variants(x64, w64, b64, eps),
                            default_hint="y = (x - mean) / sqrt(var + eps) * weight + bias, with mean and "
                                         "biased var over the last dimension (keepdim=True)",
                            what="output")
        return run

    error_hint = ("the module is built as YourClass(D, eps=eps) and called on x"
                  if is_module else "the function is called as layer_norm(x, weight, bias, eps)")
    cases = [_Case(label, make(shape, mean, std, eps, seed), error_hint)
             for label, shape, mean, std, eps, seed in specs]
    return _run_cases("check_layer_norm", cases)


# ----------------------------------------------------------------------------------------------
# Chapter 4: attention
# ----------------------------------------------------------------------------------------------


def check_causal_mask(candidate) -> bool:
    """Check ``causal_mask(T)`` -> bool Tensor (T, T), True = may attend (on and below the diagonal)."""

    def make(T: int) -> Callable[[], None]:
        def run() -> None:
            ones = torch.ones(T, T, dtype=torch.bool)
            expected = ones.tril()
            got = _require_tensor(_call(candidate, T), expected, "mask",
                                  shape_hint="one row per query, one column per key: shape (T, T)",
                                  dtype_hint="return a boolean mask (True = may attend), e.g. "
                                             "torch.ones(T, T, dtype=torch.bool).tril()")
            if torch.equal(got, expected):
                return
            if torch.equal(got, ones.triu()):
                hint = ("the mask is on the wrong side: query i may attend to keys j <= i, the lower "
                        "triangle: use .tril(), not .triu()")
            elif torch.equal(got, ~expected):
                hint = "the mask is inverted: True means *may attend* (the convention of F.scaled_dot_product_attention)"
            elif torch.equal(got, ones.tril(-1)):
                hint = "the diagonal must be True: every token may attend to itself"
            else:
                hint = "True on and below the diagonal: torch.ones(T, T, dtype=torch.bool).tril()"
            raise _Mismatch(f"expected {_mask_rows(expected)}", f"got      {_mask_rows(got)}", hint=hint)
        return run

    cases = [_Case(f"T={T}", make(T), "the function is called as causal_mask(T) with an int T")
             for T in (4, 1, 7)]
    return _run_cases("check_causal_mask", cases)


def _mask_rows(mask: Tensor) -> str:
    """A small boolean matrix as rows of 1s and 0s: '1000 1100 ...' (first 4 rows)."""
    rows = ["".join("1" if v else "0" for v in row.tolist()) for row in mask[:4]]
    return " ".join(rows) + (" …" if mask.shape[0] > 4 else "")


def _attention_variants(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor, list]:
    """Reference (output, weights) in float64 and the usual mistakes as (weights, output, hint)."""
    d_k = q.size(-1)

    def attend(scores: Tensor, dim: int = -1, m: Tensor | None = mask) -> tuple[Tensor, Tensor]:
        if m is not None:
            scores = scores.masked_fill(~m, float("-inf"))
        weights = torch.softmax(scores, dim=dim)
        return weights @ v, weights

    raw = q @ k.transpose(-2, -1)  # (..., T_q, T_k)
    out, weights = attend(raw / math.sqrt(d_k))
    mistakes = [
        (*attend(raw), "scale the scores by 1/sqrt(d_k) before the softmax: q @ k.transpose(-2, -1) / sqrt(d_k)"),
        (*attend(raw / d_k), "scale by 1/sqrt(d_k), not 1/d_k"),
        (*attend(raw / math.sqrt(d_k), dim=-2), "take the softmax over the keys, the last dimension (dim=-1): "
                                                "each query's weights sum to 1"),
    ]
    if mask is not None:
        mistakes += [
            (*attend(raw / math.sqrt(d_k), m=None), "apply the mask before the softmax: "
                                                    "scores.masked_fill(~mask, float('-inf'))"),
            (*attend(raw / math.sqrt(d_k), m=~mask), "the mask is used inverted: True means *may attend*, so fill "
                                                     "where the mask is False: masked_fill(~mask, float('-inf'))"),
        ]
    return out, weights, mistakes


def check_scaled_dot_product_attention(candidate) -> bool:
    """Check ``attention(q, k, v, mask=None)`` -> ``(output, weights)`` for tensors of shape (..., T, d).

    ``mask`` is boolean, True = may attend, broadcastable to (..., T_q, T_k); ``weights`` is the softmax
    (..., T_q, T_k) and ``output = weights @ v``. The output is compared with
    ``torch.nn.functional.scaled_dot_product_attention``.
    """
    specs = [
        ("q, k, v of shape (2, 5, 8), no mask", (2, 5, 8), (2, 5, 8), None, 1),
        ("q, k, v of shape (2, 3, 6, 4) (B, H, T, d_k), causal mask (6, 6)", (2, 3, 6, 4), (2, 3, 6, 4), "causal", 2),
        ("q of shape (1, 2, 3, 8), k and v of shape (1, 2, 5, 8) (3 new queries, 5 keys), mask (3, 5)",
         (1, 2, 3, 8), (1, 2, 5, 8), "past", 3),
    ]

    def make(q_shape, kv_shape, mask_kind, seed: int) -> Callable[[], None]:
        def run() -> None:
            g = _generator(seed)
            q, k, v = (torch.randn(s, generator=g) for s in (q_shape, kv_shape, kv_shape))
            T_q, T_k = q_shape[-2], kv_shape[-2]
            mask = None if mask_kind is None else torch.ones(T_q, T_k, dtype=torch.bool).tril(T_k - T_q)
            out64, weights64, mistakes = _attention_variants(q.double(), k.double(), v.double(), mask)
            expected_out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # PyTorch's own kernel
            result = _call(candidate, q.clone(), k.clone(), v.clone(), mask)
            if not (isinstance(result, (tuple, list)) and len(result) == 2):
                raise _Mismatch(f"expected a pair (output, weights), got {_describe(result)}",
                                hint="return both: return output, weights")
            weights = _require_tensor(result[1], weights64.float(), "weights",
                                      shape_hint="weights has one row per query and one column per key: (..., T_q, T_k)")
            _compare_values(weights, weights64, atol=1e-5, rtol=1e-4,
                            known_mistakes=[(w, hint) for _, w, hint in mistakes],
                            default_hint="weights = softmax(q @ k.transpose(-2, -1) / sqrt(d_k), dim=-1), "
                                         "masked with -inf where the mask is False", what="weights")
            output = _require_tensor(result[0], expected_out, "output",
                                     shape_hint="the output has one row per query: (..., T_q, d_v)")
            _compare_values(output, expected_out, atol=1e-5, rtol=1e-4,
                            known_mistakes=[(o, hint) for o, _, hint in mistakes],
                            default_hint="output = weights @ v", what="output")
        return run

    cases = [_Case(label, make(qs, kvs, kind, seed),
                   "the function is called as attention(q, k, v, mask) with mask a bool tensor or None; "
                   "use k.transpose(-2, -1), not k.T, for batched tensors")
             for label, qs, kvs, kind, seed in specs]
    return _run_cases("check_scaled_dot_product_attention", cases)


def _mha_reference(x: Tensor, w_attn: Tensor, b_attn: Tensor, w_proj: Tensor, b_proj: Tensor, H: int,
                   split_wrong: bool = False, merge_wrong: bool = False, causal: bool = True,
                   scale: bool = True) -> Tensor:
    """GPT-2 attention on x (B, T, D) in float64 with F.scaled_dot_product_attention; flags build mistakes."""
    B, T, D = x.shape
    d_k = D // H
    q, k, v = F.linear(x, w_attn, b_attn).split(D, dim=-1)  # 3 x (B, T, D)

    def heads(t: Tensor) -> Tensor:
        if split_wrong:
            return t.reshape(B, H, T, d_k)  # the classic slip: a reshape is not a transpose
        return t.view(B, T, H, d_k).transpose(1, 2)  # (B, H, T, d_k)

    q, k, v = heads(q), heads(k), heads(v)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=None if scale else 1.0)  # (B, H, T, d_k)
    y = y.reshape(B, T, D) if merge_wrong else y.transpose(1, 2).reshape(B, T, D)  # (B, T, D)
    return F.linear(y, w_proj, b_proj)


def check_multi_head_attention(candidate) -> bool:
    """Check a causal multi-head self-attention **class**, built as ``MHA(d_model, n_heads)`` and called
    on x (B, T, D), returning y (B, T, D) (a tuple's first element is taken as y).

    It needs GPT-2's layout, like the package's ``MultiHeadAttention``: ``c_attn = nn.Linear(D, 3 * D)``
    producing q, k, v concatenated in that order, and ``c_proj = nn.Linear(D, D)``. The checker copies
    its own random weights into those two layers, so results are comparable.
    """
    if not (isinstance(candidate, type) and issubclass(candidate, nn.Module)):
        _print(f"{FAIL_MARK} check_multi_head_attention: expected a module class, got {_describe(candidate)}.",
               "   hint: pass the class itself (MyAttention), not an instance or a function; "
               "it is built as MyAttention(d_model, n_heads)")
        return False
    specs = [(2, 5, 16, 4, 1), (1, 7, 12, 3, 2), (3, 4, 8, 2, 3)]

    def make(B: int, T: int, D: int, H: int, seed: int) -> Callable[[], None]:
        def run() -> None:
            g = _generator(seed)
            x = torch.randn(B, T, D, generator=g)
            w_attn = torch.randn(3 * D, D, generator=g) / math.sqrt(D)
            b_attn = 0.1 * torch.randn(3 * D, generator=g)
            w_proj = torch.randn(D, D, generator=g) / math.sqrt(D)
            b_proj = 0.1 * torch.randn(D, generator=g)
            module = _call(candidate, D, H)
            for name, weight, bias in (("c_attn", w_attn, b_attn), ("c_proj", w_proj, b_proj)):
                layer = getattr(module, name, None)
                layer_weight = getattr(layer, "weight", None)
                layer_bias = getattr(layer, "bias", None)
                if not isinstance(layer_weight, Tensor) or layer_weight.shape != weight.shape:
                    raise _Mismatch(f"expected {name}.weight of shape {tuple(weight.shape)}, got {_describe(layer_weight)}",
                                    hint="name the layers like GPT-2: self.c_attn = nn.Linear(d_model, 3 * d_model) "
                                         "and self.c_proj = nn.Linear(d_model, d_model)")
                if not isinstance(layer_bias, Tensor):
                    raise _Mismatch(f"{name} has no bias", hint="GPT-2's projections have biases: nn.Linear(..., bias=True)")
                with torch.no_grad():
                    layer_weight.copy_(weight)
                    layer_bias.copy_(bias)
            module.eval()
            out = _call(module, x.clone())
            if isinstance(out, (tuple, list)) and out:
                out = out[0]
            args = [t.double() for t in (x, w_attn, b_attn, w_proj, b_proj)]
            expected = _mha_reference(*args, H)
            got = _require_tensor(out, expected.float(), "y", shape_hint="the output has the shape of x: (B, T, D)")
            mistakes = [
                (_mha_reference(*args, H, split_wrong=True),
                 "split the heads with .view(B, T, H, d_k).transpose(1, 2); a reshape straight to (B, H, T, d_k) "
                 "mixes positions and features"),
                (_mha_reference(*args, H, merge_wrong=True),
                 "merge the heads with .transpose(1, 2).contiguous().view(B, T, D): (B, H, T, d_k) must become "
                 "(B, T, H, d_k) first"),
                (_mha_reference(*args, H, causal=False), "the attention must be causal: mask the future keys "
                                                         "(causal_mask(T), or is_causal=True)"),
                (_mha_reference(*args, H, scale=False), "scale the scores by 1/sqrt(d_k), with d_k = D / H"),
            ]
            _compare_values(got, expected, atol=1e-4, rtol=1e-4, known_mistakes=mistakes,
                            default_hint="q, k, v = c_attn(x).split(D, dim=2); split heads; causal attention; "
                                         "merge heads; c_proj", what="y")
        return run

    cases = [_Case(f"B={B}, T={T}, D={D}, H={H}", make(B, T, D, H, seed),
                   "the class is built as MHA(d_model, n_heads) and called as module(x), x of shape (B, T, D)")
             for B, T, D, H, seed in specs]
    return _run_cases("check_multi_head_attention", cases)


# ----------------------------------------------------------------------------------------------
# Chapter 7: sampling filters
# ----------------------------------------------------------------------------------------------


def _check_filtered(got, logits: Tensor, keep: Tensor, hints: Callable[[Tensor], str]) -> None:
    """``got`` must equal ``logits`` where ``keep`` is True and be -inf elsewhere."""
    expected = logits.masked_fill(~keep, float("-inf"))
    got = _require_tensor(got, expected, "filtered logits", shape_hint="return logits of the same shape as the input")
    kept = got > float("-inf")
    if not torch.equal(kept, keep):
        sums = got.double().sum(-1)
        if bool(((got >= 0) & (got <= 1)).all()) and torch.allclose(sums, torch.ones_like(sums), atol=1e-4):
            hint = "return the filtered logits, not probabilities: the sampler takes the softmax afterwards"
        elif not torch.isinf(got).any():
            hint = "set the removed entries to float('-inf'), so that softmax gives them probability 0"
        else:
            hint = hints(kept)
        raise _Mismatch(f"expected kept positions {_positions(keep)}", f"got      kept positions {_positions(kept)}",
                        hint=hint)
    if not torch.equal(got[keep], logits[keep]):
        raise _Mismatch(f"the kept entries changed: largest difference {_max_difference(got[keep], logits[keep]):.3g}",
                        hint="return the logits themselves (not probabilities), with only the removed entries at -inf")


def _positions(keep: Tensor) -> str:
    if keep.dim() == 1:
        return str(keep.nonzero().flatten().tolist())
    return "; ".join(f"row {r}: {row.nonzero().flatten().tolist()}" for r, row in enumerate(keep))


def _count_hint(kept: Tensor, keep: Tensor, fewer: str, more: str, other: str) -> str:
    n_got, n_expected = kept.sum(-1), keep.sum(-1)
    if torch.equal(n_got, n_expected - 1):
        return fewer
    if torch.equal(n_got, n_expected + 1):
        return more
    return other


def check_top_k_filter(candidate) -> bool:
    """Check ``top_k_filter(logits, k)``: keep the ``k`` largest logits of each row (last dimension),
    set every other entry to ``-inf``; ``logits`` is (V,) or (B, V). The cases have no ties."""
    specs = [("logits of shape (10,), k=3", (10,), 3, 1), ("logits of shape (3, 20), k=5", (3, 20), 5, 2),
             ("logits of shape (2, 7), k=1", (2, 7), 1, 3), ("logits of shape (2, 6), k=6 (keep all)", (2, 6), 6, 4)]

    def make(shape: tuple[int, ...], k: int, seed: int) -> Callable[[], None]:
        def run() -> None:
            logits = 3.0 * torch.randn(shape, generator=_generator(seed))
            keep = torch.zeros(shape, dtype=torch.bool).scatter(-1, logits.topk(k, dim=-1).indices, True)
            got = _call(candidate, logits.clone(), k)

            def hints(kept: Tensor) -> str:
                smallest = torch.zeros(shape, dtype=torch.bool).scatter(
                    -1, logits.topk(k, dim=-1, largest=False).indices, True)
                if torch.equal(kept, smallest):
                    return "you kept the k smallest logits: keep the k largest (torch.topk returns the largest)"
                return _count_hint(kept, keep, "the k-th largest logit must stay: remove only logits strictly below "
                                               "it (logits < v[..., [-1]])",
                                   "you kept k + 1 tokens: the threshold is the k-th largest value, "
                                   "v[..., [-1]] with v = torch.topk(logits, k).values",
                                   "compare each row with its own k-th largest value: v[..., [-1]] keeps the "
                                   "dimension so that it broadcasts over the row")
            _check_filtered(got, logits, keep, hints)
        return run

    cases = [_Case(label, make(shape, k, seed), "the function is called as top_k_filter(logits, k)")
             for label, shape, k, seed in specs]
    return _run_cases("check_top_k_filter", cases)


def _nucleus(logits: Tensor, p: float) -> Tensor:
    """Boolean mask of the smallest set of most probable tokens whose probability reaches ``p``."""
    probs = torch.softmax(logits.double(), dim=-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    mass_before = sorted_probs.cumsum(-1) - sorted_probs  # probability of the tokens ranked above
    keep_sorted = mass_before < p  # the token that crosses p is kept; the top token always is
    return torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)


def check_top_p_filter(candidate) -> bool:
    """Check ``top_p_filter(logits, p)`` (nucleus filtering): keep the smallest set of most probable
    tokens whose total probability reaches ``p`` — the token that crosses ``p`` stays, and so does the
    most probable token — and set the rest to ``-inf``. ``logits`` is (V,) or (B, V)."""
    probs = torch.tensor([0.05, 0.5, 0.15, 0.3])
    small = torch.log(probs) + 2.0  # logits, not log-probabilities: the filter must take the softmax
    specs = [
        ("probabilities [0.05, 0.5, 0.15, 0.3], p=0.7 (0.5 + 0.3 crosses 0.7)", small, 0.7),
        ("probabilities [0.05, 0.5, 0.15, 0.3], p=0.9", small, 0.9),
        ("probabilities [0.05, 0.5, 0.15, 0.3], p=0.2 (the top token alone exceeds p)", small, 0.2),
        ("logits of shape (3, 12), p=0.8", 2.0 * torch.randn(3, 12, generator=_generator(5)), 0.8),
    ]

    def make(logits: Tensor, p: float) -> Callable[[], None]:
        def run() -> None:
            keep = _nucleus(logits, p)
            got = _call(candidate, logits.clone(), p)

            def hints(kept: Tensor) -> str:
                return _count_hint(kept, keep,
                                   "keep the token that crosses p: remove a token only when the tokens ranked "
                                   "above it already reach p (shift the removal mask right by one)",
                                   "you kept one token too many: stop at the first token whose cumulative "
                                   "probability reaches p",
                                   "sort the probabilities (softmax of the logits) in descending order, take the "
                                   "cumulative sum, then map the decision back to the original positions")
            _check_filtered(got, logits, keep, hints)
        return run

    cases = [_Case(label, make(logits, p), "the function is called as top_p_filter(logits, p)")
             for label, logits, p in specs]
    return _run_cases("check_top_p_filter", cases)
