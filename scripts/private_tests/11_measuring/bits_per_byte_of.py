"""Chapter 11, exercise 2: bits per byte, the summed loss in bits over the summed bytes."""

import math

import torch
from grading.cases import Case, Step

name = "bits_per_byte_of"


def case(label, T, max_bytes, g):
    losses = 5 * g.rand(T)
    sizes = g.randint(1, max_bytes + 1, (T,))
    bits = sum(float(x) for x in losses.double()) / math.log(2)
    return Case(label, [Step((losses, sizes))], [bits / sum(int(b) for b in sizes)],
                atol=1e-6, rtol=1e-5)


def cases(g):
    return [case("characters", 40, 1, g), case("bpe_tokens", 300, 8, g)]
