"""Chapter 11, exercise 1: the harness's acc_norm, the highest log-likelihood per character of
each choice, the first on ties."""

import torch
from grading.cases import Case, Step

name = "acc_norm_picks"
WORDS = ["my", "lord", "noble", "gentle", "o", "thee", "banished", "sweet", "king", "heaven"]


def case(label, n, c, g, tie=False):
    picks = g.randint(0, len(WORDS), (n, c, 3)).tolist()
    sizes = g.randint(1, 4, (n, c)).tolist()
    choices = [[" ".join(WORDS[w] for w in picks[i][j][: sizes[i][j]]) for j in range(c)]
               for i in range(n)]
    if tie:  # choice 2 is choice 0 backwards: the same length, and the same score below
        for row in choices:
            row[2] = row[0][::-1]
    lengths = torch.tensor([[float(len(x)) for x in row] for row in choices], dtype=torch.float64)
    loglik = -lengths * (0.5 + 2 * g.rand(n, c).double())
    if tie:  # an exact tie per character: the first wins
        loglik[:, 2] = loglik[:, 0]
    per_char = [[loglik[i, j].item() / len(choices[i][j]) for j in range(c)] for i in range(n)]
    expected = torch.tensor([max(range(c), key=lambda j: (row[j], -j)) for row in per_char])
    return Case(label, [Step((loglik, choices))], [expected], exact_dtype=False)


def cases(g):
    return [case("four_choices", 12, 4, g), case("ties_pick_the_first", 7, 3, g, tie=True)]
