"""Chapter 14, exercise 3: the unbiased pass@k from n samples of which c are right."""

import math

from grading.cases import Case, Step

name = "pass_at_k"


def expected(n, c, k):
    return 1.0 if n - c < k else 1.0 - math.comb(n - c, k) / math.comb(n, k)


def case(label, triples):
    # float32 arithmetic is accepted (its error is about 1e-7; the exercise states no dtype)
    return Case(label, [Step(t) for t in triples], [expected(*t) for t in triples],
                atol=1e-6, rtol=1e-6)


def cases(g):
    n = g.randint(10, 40)
    # every case holds answers that depend on n, c and k: the edges (no right sample, fewer
    # wrong than k) beside their neighbours, so that no answer by c alone passes a case
    return [
        case("some_right", [(n, g.randint(1, n // 2), k) for k in (1, 2, 5)]),
        case("none_right_or_fewer_wrong_than_k",
             [(n, 0, 4), (n, n - 2, 3), (n, n - 3, 3), (n, 1, n - 1), (8, 8, 1)]),
    ]
