"""Chapter 16, exercise 3: absmax quantization per row. scale = max |w_row| / q_max as
float32 (out, 1), at least float32's machine epsilon; q = round(w / scale) clamped to
[-q_max, q_max], as int8 (out, in), q_max = 2^(bits-1) - 1 (127, or 7 for int4). Expected
values from the package's quantize.absmax_quantize (int4 unpacked). The dtypes are stated,
so they are checked; q may differ by one only where w / scale is within 1e-4 of a half
(another order of float32 operations may round such a tie the other way)."""

import torch

from gpt_from_scratch.quantize import absmax_quantize
from grading.cases import Case, Step

name = "absmax_quantize"


def case(label, w, bits):
    reference = absmax_quantize(w, bits)
    q_ref = reference.values()  # int8 (out, in)
    scale_ref = reference.scale  # float32 (out, 1)
    q_max = 2 ** (bits - 1) - 1
    ratio = w.double() / scale_ref.double()  # (out, in)
    tie = ((ratio - ratio.floor()) - 0.5).abs() < 1e-4

    def check(got):
        q, scale = got[0]
        assert scale.dtype == torch.float32 and scale.shape == scale_ref.shape, "scale"
        assert torch.allclose(scale, scale_ref, rtol=1e-6, atol=0.0), "scale values"
        assert q.dtype == torch.int8 and q.shape == q_ref.shape, "q"
        assert int(q.abs().max()) <= q_max, "q outside [-q_max, q_max]"
        off = (q.long() - q_ref.long()).abs()
        assert bool(((off == 0) | ((off == 1) & tie)).all()), "q values"

    return Case(label, [Step((w, bits))], check=check)


def cases(g):
    out, n = g.randint(4, 9), g.randint(16, 65)
    signed = g.randn(out, n)
    signed[0::2] -= 1.0  # even rows: the extreme is most likely negative
    small = 0.5 * g.randn(g.randint(4, 9), 2 * g.randint(8, 33))
    odd = 0.01 * g.randn(4, n)
    odd[0] = 0.0  # a row of zeros: scale eps, q zeros
    odd[1] = 1e-6 * g.randn(n)  # max |w| / 127 below eps: scale eps
    odd[2, g.randint(0, n)] = 5.0  # one large weight: the rest round to 0 or ±1
    return [
        case("int8_rows_whose_extreme_is_negative", signed, 8),
        case("int4_values_within_seven", small, 4),
        case("a_row_of_zeros_and_a_row_below_the_floor", odd, 8),
    ]
