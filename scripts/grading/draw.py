"""The private cases' random inputs, drawn from the course secret so that a few leaked
numbers cannot reveal the rest.

A ``torch.Generator`` keeps 32 bits of its seed (mt19937), so three printed values of a case
identify every input of it by brute force. ``Draw`` is a stream of SHAKE-256 output keyed by
the course secret and the exercise (an extendable-output hash: its output reveals nothing of
its key or of its other bytes), turned into tensors: uniform floats from 24 random bits
each, normal values by the Box-Muller transform, integers and permutations by rejection-free
modular draws on 64-bit words (bias below 2**-40 for the sizes used here). Written here
because neither torch nor numpy offers a generator whose state cannot be recovered from its
output; ``hashlib`` does the cryptography.
"""

from __future__ import annotations

import hashlib
import hmac
import math

import torch


class Draw:
    """Random tensors for one exercise's cases: ``g.randn(3, 4)``, ``g.randint(5, 12)``, …"""

    def __init__(self, secret: bytes, label: str):
        self.key = hmac.new(secret, label.encode(), hashlib.sha256).digest()
        self.counter = 0

    def _bytes(self, n: int) -> bytes:
        """The next ``n`` bytes: each call hashes the key with its own counter."""
        self.counter += 1
        block = self.key + self.counter.to_bytes(8, "big")
        return hashlib.shake_256(block).digest(n)

    def _words(self, n: int) -> torch.Tensor:
        """``n`` uniform 64-bit words, as int64 (two's complement)."""
        data = bytearray(self._bytes(8 * n))
        return torch.frombuffer(data, dtype=torch.int64).clone() if n else torch.empty(0)

    def rand(self, *shape) -> torch.Tensor:
        """Uniform in [0, 1), float32."""
        shape = _shape(shape)
        n = math.prod(shape)
        bits = (self._words(n) >> 40) & ((1 << 24) - 1)  # 24 bits: exact in float32
        return (bits.float() / float(1 << 24)).reshape(shape)

    def randn(self, *shape) -> torch.Tensor:
        """Standard normal, float32 (Box-Muller on float64 uniforms)."""
        shape = _shape(shape)
        n = math.prod(shape)
        words = (self._words(2 * n) >> 11) & ((1 << 53) - 1)
        u = (words.double() + 0.5) / float(1 << 53)  # in (0, 1): the log is finite
        radius = torch.sqrt(-2.0 * torch.log(u[:n]))
        return (radius * torch.cos(2 * math.pi * u[n:])).float().reshape(shape)

    def randint(self, low: int, high: int, shape=()) -> int | torch.Tensor:
        """Integers in [low, high): one int when ``shape`` is (), else an int64 tensor."""
        if high <= low:
            raise ValueError(f"randint needs low < high, got {low} and {high}")
        shape = _shape((shape,) if isinstance(shape, int) else tuple(shape))
        n = max(math.prod(shape), 1)
        values = low + (self._words(n) & ((1 << 62) - 1)) % (high - low)
        return int(values[0]) if shape == () else values.reshape(shape)

    def randperm(self, n: int) -> torch.Tensor:
        """A permutation of 0 .. n-1 (the order of n random keys)."""
        return torch.argsort(self._words(n))

    def seed(self) -> int:
        """A seed for a ``torch.Generator`` the student's code receives (an input, not a secret)."""
        return int.from_bytes(self._bytes(8), "big") >> 2


def _shape(shape: tuple) -> tuple[int, ...]:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)):
        shape = tuple(shape[0])
    return tuple(int(s) for s in shape)
