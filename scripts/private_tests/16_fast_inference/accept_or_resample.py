"""Chapter 16, exercise 2: speculative sampling's accept/reject step. It draws random
numbers, so no output is expected: each case makes many steps, each with its own seeded
Generator and its drafts drawn from q (by the course secret), and judges the law of what
comes back with Pearson's chi-square test, computed here. With p the target's rows
(γ + 1, V) and q the draft's (γ, V): token j of the outputs that have one (the first j
drafts kept) follows p_j, and the number of drafts kept is j or more with probability
β_0 ... β_{j-1}, β_i = sum_x min(p_i(x), q_i(x)). An id where the law is 0 fails at once.

The exercise's 8 tests are each made at 1e-4 / 16: Bonferroni's 1e-4 / 8, halved because
at these counts (every cell expects 20 draws or more) Pearson's statistic passes the
chi-square law's 1e-5 tail up to twice as often as that law says. Simulated from the exact
law of the counts, a right rule then fails the exercise for 6.5e-5 of course secrets
(tests/test_grading_accept_law.py). The wrong rules' laws are far from these: the smallest
noncentrality, 220 (a bonus from p_0 at γ = 2), against a critical value near 32, fails
them with probability above 1 - 1e-12."""

import torch

from grading.cases import Case, Generator, Step

name = "accept_or_resample"

LEVEL = 1e-4 / 16  # each of the 8 tests below: a right rule fails under 1e-4 of them

# The rows before a case relabels the V = 6 ids: the target's p (γ + 1, V), the draft's
# q (γ, V)
GAMMA_1 = ([[.30, .25, .20, .10, .10, .05], [.05, .05, .10, .15, .25, .40]],
           [[.05, .10, .10, .20, .25, .30]])
GAMMA_2 = ([[.30, .25, .20, .10, .10, .05], [.05, .30, .05, .30, .10, .20],
            [.10, .10, .10, .15, .20, .35]],
           [[.05, .10, .10, .20, .25, .30], [.25, .05, .30, .05, .30, .05]])
# p = q at both drafts, on ids 0-2: both kept; the bonus row lives on the other ids
ALL_KEPT = ([[.50, .25, .25, 0, 0, 0], [.25, .25, .50, 0, 0, 0], [0, 0, 0, .20, .30, .50]],
            [[.50, .25, .25, 0, 0, 0], [.25, .25, .50, 0, 0, 0]])


def chi_square_p(counts, expected) -> float:
    """Pearson's chi-square p-value over the cells with a positive expectation (1 where
    there is one such cell: all the draws are in it)."""
    keep = expected > 0
    if keep.sum() == 1:
        return 1.0
    stat = ((counts[keep] - expected[keep]) ** 2 / expected[keep]).sum()
    df = torch.tensor(int(keep.sum()) - 1, dtype=torch.float64)
    return torch.special.gammaincc(df / 2, stat / 2).item()


def same_law(ids, law) -> bool:
    """Whether ``ids`` pass as draws from ``law`` (V,) at LEVEL."""
    ids = torch.tensor(ids, dtype=torch.int64)
    counts = torch.bincount(ids, minlength=len(law)).double()  # (V,)
    impossible = counts[law == 0].sum() > 0  # an id the law never draws
    return not impossible and chi_square_p(counts, len(ids) * law) >= LEVEL


def kept_law(p, q):
    """P(n_accepted = k), k = 0 .. γ: each draft kept with probability β_i, in order."""
    beta = torch.minimum(p[:-1], q).sum(-1)  # (γ,)
    reach = torch.cat([torch.ones(1, dtype=p.dtype), beta.cumprod(0)])  # (γ + 1,)
    return reach - torch.cat([reach[1:], torch.zeros(1, dtype=p.dtype)])


def outputs(got, drafts, V):
    """Each step's output as a list of ids, once its form is right: the first n drafts
    kept, then one id."""
    gamma, kept = drafts.shape[1], []
    for (tokens, n), x in zip(got, drafts):
        n = int(n)  # an int, or a one-element tensor
        assert isinstance(tokens, torch.Tensor) and tokens.dim() == 1
        assert not tokens.is_floating_point() and tokens.dtype != torch.bool
        assert 0 <= n <= gamma and len(tokens) == n + 1, "n_accepted"
        assert torch.equal(tokens[:n].long(), x[:n]), "the kept drafts"
        assert 0 <= int(tokens[n]) < V, "the new id"
        kept.append(tokens.tolist())
    return kept


def case(label, rows, N, g, tested):
    """N steps on these rows, ids relabelled; ``tested``: the token positions judged."""
    order = g.randperm(6)  # the same for every row: the laws' distances stay as designed
    p = torch.tensor(rows[0], dtype=torch.float64)[:, order]  # (γ + 1, V)
    q = torch.tensor(rows[1], dtype=torch.float64)[:, order]  # (γ, V)
    cdf = q.cumsum(-1)[:, :-1]  # (γ, V - 1)
    drafts = (g.rand(N, len(q)).double()[..., None] >= cdf).sum(-1)  # (N, γ): x_i ~ q_i
    # each step its own copy of p and q: the grader sends every tensor on its own
    steps = [Step((p.clone(), q.clone(), x, Generator(g.seed()))) for x in drafts]

    def check(got):
        kept = outputs(got, drafts, p.shape[1])
        n = torch.tensor([len(out) - 1 for out in kept])  # (N,)
        law = kept_law(p, q)
        assert same_law(n.tolist(), law), "the number of drafts kept"
        for j in tested:
            ids = [out[j] for out in kept if len(out) > j]
            assert same_law(ids, p[j]), f"output token {j + 1}"

    return Case(label, steps, check=check,
                behaviour="over many seeded steps, each output token's share must follow "
                          "the target's row and the drafts be kept as often as min(1, p/q) "
                          "keeps them (chi-square tests)")


def cases(g):
    return [
        case("gamma_1_a_rejection_draws_from_the_residual", GAMMA_1, 1000, g, (0, 1)),
        case("gamma_2_each_output_token_follows_its_row", GAMMA_2, 1200, g, (0, 1, 2)),
        case("every_draft_kept_the_bonus_follows_the_last_row", ALL_KEPT, 400, g, (2,)),
    ]
