"""Chapter 13, exercise 2: one head's output taken from the clean run, then c_proj; the
inputs left unchanged, as the exercise says (each compared, after the call, with what was
sent)."""

from grading.cases import Case, Step

name = "patch_head"


def case(label, B, T, H, d_k, head, g):
    z_corrupted, z_clean = g.randn(B, T, H, d_k), g.randn(B, T, H, d_k)
    W_O, b_O = g.randn(H * d_k, H * d_k), g.randn(H * d_k)
    z = z_corrupted.clone()
    z[:, :, head] = z_clean[:, :, head]
    expected = (z.double().flatten(2) @ W_O.double().T + b_O.double()).float()
    # no dtype is stated: any, compared in float64
    return Case(label, [Step((z_corrupted, z_clean, head, W_O, b_O), unchanged=True)],
                [expected], atol=1e-4, rtol=1e-4, exact_dtype=False)


def cases(g):
    return [
        case("a_middle_head", 2, 5, 6, 4, 3, g),
        case("the_first_head_of_two", 1, 4, 2, 8, 0, g),
    ]
