"""Chapter 13's book layer (gpt_from_scratch.book.inside, inside_figure, inside_prose,
patching_prose, inside_online): the Repeat pairs line up, role by role and token by token
(a tokenizer whose tokens cross a line's start is refused), the scores, their bootstraps,
rank correlation, lessons and sentences follow their numbers, and the Colab track runs on a
small stand-in for GPT-2 (and says what it would do without the weights)."""

from __future__ import annotations

import math
import re
import statistics

import numpy as np
import pytest
import torch

from gpt_from_scratch import ablation, patching
from gpt_from_scratch.book import (inside, inside_figure, inside_online, inside_prose,
                                   patching_prose)
from gpt_from_scratch.book import lessons
from gpt_from_scratch.book.assistant import Item
from gpt_from_scratch.chat import ChatTokenizer, add_chat_tokens
from gpt_from_scratch.hf_weights import WeightsUnavailableError
from gpt_from_scratch.model import GPT, GPTConfig
from gpt_from_scratch.tokenizer import CharTokenizer

LINES = ["I might call him", "Alack, for pity!", "So be it, sirrah", "What, ho! Sirrah", "Go to, go"]


def _tok() -> ChatTokenizer:
    chars = CharTokenizer("".join(sorted(set("".join(LINES) + "Repeat: Good sir,"))))
    return ChatTokenizer(chars, chars.vocab_size)


class _Pieces:
    """A stand-in base tokenizer whose tokens span several characters: ``pattern`` cuts a
    text into pieces (each a token), and the vocabulary is the pieces of ``texts``."""

    def __init__(self, pattern: str, texts: list[str]):
        self.pattern = pattern
        self.pieces = sorted({p for text in texts for p in re.findall(pattern, text)})
        self.vocab_size = len(self.pieces)

    def encode(self, text: str) -> list[int]:
        return [self.pieces.index(p) for p in re.findall(self.pattern, text)]

    def decode(self, ids) -> str:
        return "".join(self.pieces[i] for i in ids)


def _pieces_tok(pattern: str, lines: list[str]) -> ChatTokenizer:
    texts = [head + line for line in lines for head in ("", "Repeat: ", "Good sir, ")]
    base = _Pieces(pattern, texts + ["Repeat: ", "Good sir, "])
    return ChatTokenizer(base, base.vocab_size)


# Letters two at a time, anything else alone: tokens stop at every space, so a line is the
# same tokens wherever it stands. The second joins a space to the word after it, as GPT-2's
# BPE does: "Repeat: I" is not the tokens of "Repeat: " then those of "I".
PAIRS_OF_LETTERS = r"[A-Za-z]{1,2}|[^A-Za-z]"
SPACE_JOINS_NEXT = r" ?[A-Za-z]{1,2}|[^A-Za-z]"


def test_repeat_pairs_count_positions_in_tokens_that_span_several_characters():
    lines = ["I might call him", "Alack, for pity!", "Good my lord", "Stand, ho!",
             "Go to, go", "So be it!"]
    tok = _pieces_tok(PAIRS_OF_LETTERS, lines)
    assert len(tok.encode("I might call him")) == 11 < len("I might call him")
    items = [Item("Repeat", line) for line in lines]
    pairs = inside.repeat_pairs(items, tok, 3)
    b, t = pairs.copy.nonzero(as_tuple=True)
    assert torch.equal(pairs.clean[b, pairs.source[b, t]], pairs.target[b, t])
    assert (pairs.source[b, t] < t).all()
    for row in range(3):
        clean, bad = pairs.clean[row], pairs.corrupted[row]
        size = int((clean != tok.pad_id).sum())
        assert int((bad != tok.pad_id).sum()) == size  # rows of one length, in tokens
        line = re.search(r"Repeat: (.*?)<\|end\|>", tok.decode(clean.tolist()))[1]
        copied = pairs.target[row][pairs.copy[row]].tolist()
        assert copied == tok.encode(line)  # the copy mask covers the line's tokens, all
        said = pairs.target[row][pairs.opening[row]].tolist()
        assert said == tok.encode("Good sir, ")
        prompt = len(tok.render(Item("Repeat", line).messages())[0])
        assert torch.equal(clean[prompt:size], bad[prompt:size])  # one answer, one place
        other = re.search(r"Repeat: (.*?)<\|end\|>", tok.decode(bad.tolist()))[1]
        assert len(tok.encode(other)) == len(tok.encode(line))  # paired by tokens
    for role in pairs.roles.unique().tolist():  # each role once a row at most
        assert role < 0 or (pairs.roles == role).sum(1).max() == 1


def test_repeat_pairs_refuse_a_tokenizer_whose_tokens_cross_a_lines_start():
    lines = ["I might call him", "I might call her"]  # 8 tokens each
    tok = _pieces_tok(SPACE_JOINS_NEXT, lines)
    with pytest.raises(ValueError, match=r"repeat_pairs: pair 0, line 'I might call him': "
                                         r"'Repeat: I might call him' does not encode as "
                                         r"the tokens of 'Repeat: ' then the line's own\. "
                                         r"The rule: a line is the same tokens wherever it "
                                         r"stands.*Chapter 12's characters"):
        inside.repeat_pairs([Item("Repeat", line) for line in lines], tok, 1)


def test_repeat_pairs_align_and_point_at_the_character_to_copy():
    tok = _tok()
    items = [Item("Repeat", line) for line in LINES] + [Item("Last word", LINES[0])]
    pairs = inside.repeat_pairs(items, tok, 2)
    assert pairs.clean.shape == pairs.corrupted.shape == (2, pairs.clean.shape[1])
    b, t = pairs.copy.nonzero(as_tuple=True)
    assert torch.equal(pairs.clean[b, pairs.source[b, t]], pairs.target[b, t])  # the prompt's copy
    assert (pairs.source[b, t] < t).all()  # earlier than the query: a causal head can look there
    assert torch.equal(pairs.opening.sum(1), torch.full((2,), len("Good sir, ")))
    for row in range(2):
        clean, bad = (tok.decode(x[row].tolist()) for x in (pairs.clean, pairs.corrupted))
        line = re.search(r"Repeat: (.*?)<\|end\|>", clean)[1]
        assert clean.count(line) == 2 and bad.count(line) == 1 and len(clean) == len(bad)
        assert "".join(tok.decode([int(i)]) for i in pairs.target[row][pairs.copy[row]]) == line
    with pytest.raises(ValueError, match=r"only 2 pairs of equal-length Repeat lines .* 3 asked"):
        inside.repeat_pairs(items, tok, 3)


def test_each_role_is_one_place_of_the_conversation_in_every_row():
    tok = _tok()
    lines = ["I might call him", "Alack, for pity!", "Go to, go", "So be it!"]  # 16, 16, 9, 9
    pairs = inside.repeat_pairs([Item("Repeat", line) for line in lines], tok, 2)
    roles = pairs.roles
    assert torch.equal(roles < 0, pairs.clean == tok.pad_id)  # padding, and only padding
    assert (roles[1] < 0).sum() == 14  # the short pair is padded by its lines' difference, twice
    for role in roles.unique().tolist():
        at = roles == role
        if role >= 0:
            assert at.sum(1).max() == 1  # once a row at most
    # the turn markers and the opening: one token per role, whatever the line's length
    answer = [(roles == r).nonzero()[:, 1] for r in roles[0][pairs.opening[0]].tolist()]
    assert all(len(a) == 2 and a[0] - a[1] == 7 for a in answer)
    for r in roles[0][pairs.opening[0]].tolist():
        assert pairs.clean[roles == r].unique().numel() == 1
    first = roles[0][pairs.copy[0]][1]  # the answer's first character of the line
    b, t = (roles == first).nonzero(as_tuple=True)
    assert torch.equal(pairs.copy[b, t - 1], torch.ones(2, dtype=torch.bool))


def _many_items(count=24):
    """``count`` Repeat items of 16 characters each: a bootstrap's ten pairs and more."""
    g = torch.Generator().manual_seed(0)
    letters = "abcdefghij"
    return [Item("Repeat", "".join(letters[int(i)] for i in torch.randint(0, 10, (5,),
                                                                          generator=g))
                 + " to my lord") for _ in range(count)]


def _many_tok(items):
    text = "".join(i.line for i in items) + "Repeat: Good sir,"
    chars = CharTokenizer("".join(sorted(set(text))))
    return ChatTokenizer(chars, chars.vocab_size)


def _chat_model(tok, layers=2, heads=2):
    torch.manual_seed(0)
    return add_chat_tokens(GPT(GPTConfig(vocab_size=tok.base_vocab_size, context_length=64,
                                         d_model=32, n_layers=layers, n_heads=heads,
                                         dropout=0.0))).eval()


def test_the_bootstraps_over_the_pairs_resample_the_same_rows_as_the_shares():
    items = _many_items()
    tok = _many_tok(items)
    model = _chat_model(tok)
    pairs = inside.repeat_pairs(items, tok, 12)
    rhos = inside.bootstrap_rankings(model, pairs, n=20, seed=3)
    assert rhos.shape == (20,) and ((rhos >= -1) & (rhos <= 1)).all() and rhos.std() > 0
    rows = patching.bootstrap_rows(12, 20, 3)
    r = rows[0]  # the first resample, written out: shares and scores on its rows
    sub = inside.Pairs(*(getattr(pairs, f)[r] for f in ("clean", "corrupted", "target",
                                                         "copy", "source", "opening",
                                                         "roles")))
    metric = inside.copy_logprob(sub)
    shares = patching.patching_shares(model, sub.clean, sub.corrupted, metric)
    expected = inside.rank_correlation(shares, inside.induction_scores(model, sub))
    assert float(rhos[0]) == pytest.approx(expected, abs=1e-5)
    excess = inside.resampling_excess(model, pairs, n=20, seed=3)
    assert excess.shape == (20, 2, 2)
    with torch.no_grad():
        before = float(metric(model(sub.clean)[0]))
    copy = {how: torch.tensor([[before - float(metric(
        ablation.ablate_heads(model, sub.clean, [(l, h)], how, **given)))
        for h in range(2)] for l in range(2)])
        for how, given in (("zero", {}), ("resample", {"reference": sub.corrupted}))}
    # zeroing and resampling act row by row, so their costs on the resampled rows are
    # exact; the excess is over the larger of zeroing and the mean, so at most over zeroing
    assert (excess[0] <= copy["resample"] - copy["zero"] + 1e-5).all()
    with pytest.raises(ValueError, match=r"bootstrap_rows: B=5 rows: a bootstrap needs at "
                                         r"least 10"):
        inside.bootstrap_rankings(model, inside.repeat_pairs(items, tok, 5), n=20)


@pytest.mark.parametrize("n", [-1, 0, 1.0])
def test_repeat_pairs_refuses_a_count_that_is_not_a_positive_int(n):
    items = [Item("Repeat", line) for line in LINES]
    with pytest.raises(ValueError, match=fr"repeat_pairs.n={n!r} must be a"):
        inside.repeat_pairs(items, _tok(), n)


def test_induction_scores_and_the_lens_read_a_model_of_the_chat_vocabulary():
    tok = _tok()
    torch.manual_seed(0)
    model = add_chat_tokens(GPT(GPTConfig(vocab_size=tok.base_vocab_size, context_length=64, d_model=32,
                                          n_layers=2, n_heads=2, dropout=0.0))).eval()
    pairs = inside.repeat_pairs([Item("Repeat", line) for line in LINES], tok, 2)
    scores = inside.induction_scores(model, pairs)
    assert scores.shape == (2, 2) and ((scores >= 0) & (scores <= 1)).all()
    lens = inside.lens_top1(model, pairs)
    assert lens.shape == (2,) and ((lens >= 0) & (lens <= 1)).all()
    assert inside.lens_top1(model, pairs, "corrupted").shape == (2,)
    with pytest.raises(ValueError, match=r"run='noisy': choose 'clean' or 'corrupted'"):
        inside.lens_top1(model, pairs, "noisy")
    previous = inside.previous_token_scores(model, pairs)
    assert previous.shape == (2, 2) and ((previous >= 0) & (previous <= 1)).all()
    b, t = (pairs.roles >= 0).nonzero(as_tuple=True)
    pattern = model.attention_maps(pairs.clean)[1][:, 0]  # layer 1, head 0: (B, T, T)
    keep = t > 0
    expected = pattern[b[keep], t[keep], t[keep] - 1].mean()
    assert previous[1, 0].item() == pytest.approx(expected.item(), abs=1e-6)


def test_two_decimals():
    assert inside.two(-0.0004) == "0.00" and inside.two(-0.006) == "-0.01"


def test_the_figures_labels_cover_no_label_no_point_and_stay_in_the_frame():
    """Fig. 13.1's seed 1 once printed "L3H3" over "L1H1L1H0": three top heads on nearly one
    spot, and a top head in the top right corner whose label ran past the frame."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.text import Text

    shares = torch.full((4, 4), 0.02) + torch.arange(16).reshape(4, 4) * 0.004
    scores = torch.linspace(0.0, 0.3, 16).reshape(4, 4)
    crowded, corner = shares.clone(), shares.clone()
    corner_scores = scores.clone()
    for (layer, head), share, score in (((1, 1), 0.40, 0.41), ((1, 0), 0.395, 0.43),
                                        ((3, 3), 0.42, 0.415)):
        crowded[layer, head], scores[layer, head] = share, score
    corner[3, 1], corner_scores[3, 1] = 0.49, 0.585
    fig = inside_figure.patching_figure({0: crowded, 1: corner},
                                        {0: scores, 1: corner_scores})
    try:
        renderer = fig.canvas.get_renderer()
        for ax, (x, y) in zip(fig.axes, ((scores, crowded), (corner_scores, corner))):
            labels = list(ax.texts)
            assert [t.get_text() for t in labels][:1] == [inside.top_heads(y, 1)[:4]]
            assert len(labels) == 3
            for t in labels:
                t.update_positions(renderer)
            boxes = [Text.get_window_extent(t, renderer) for t in labels]  # without its line
            frame = ax.get_window_extent(renderer)
            points = ax.transData.transform(np.c_[x.flatten(), y.flatten()])
            for n, box in enumerate(boxes):
                assert frame.x0 <= box.x0 and box.x1 <= frame.x1, labels[n].get_text()
                assert frame.y0 <= box.y0 and box.y1 <= frame.y1, labels[n].get_text()
                assert not any(box.overlaps(other) for other in boxes[n + 1:])
                assert not any(box.contains(px, py) for px, py in points)
    finally:
        plt.close(fig)


def test_rank_correlation_and_top_heads():
    a = torch.tensor([[0.1, 0.5], [0.3, 0.9]])
    assert inside.rank_correlation(a, 2 * a + 1) == pytest.approx(1.0)
    assert inside.rank_correlation(a, -a) == pytest.approx(-1.0)
    assert inside.top_heads(a, 2) == "L1H1 0.90, L0H1 0.50"


def test_tied_values_share_their_mean_rank_whatever_their_positions():
    a = torch.tensor([0.0, 1.0, 1.0, 2.0])  # positions 1 and 2 tie
    one, other = torch.tensor([0.0, 2.0, 1.0, 3.0]), torch.tensor([0.0, 1.0, 2.0, 3.0])
    assert inside.rank_correlation(a, one) == pytest.approx(
        inside.rank_correlation(a, other))
    # ranks (0, 1.5, 1.5, 3) and (0, 2, 1, 3): covariance 4.5, sums of squares 4.5 and 5
    assert inside.rank_correlation(a, one) == pytest.approx(0.9 ** 0.5)


def test_rank_correlation_is_scipys_spearman_on_ties():
    stats = pytest.importorskip("scipy.stats")
    g = torch.Generator().manual_seed(0)
    for _ in range(5):
        a, b = (torch.randint(0, 4, (3, 4), generator=g).float() for _ in range(2))
        expected = stats.spearmanr(a.flatten().numpy(), b.flatten().numpy()).statistic
        assert inside.rank_correlation(a, b) == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("a, b, message", [
    (torch.ones(2, 2), torch.rand(2, 2),
     r"a is constant .*: its ranks are all tied, so the correlation is undefined"),
    (torch.rand(4), torch.full((4,), 0.5), r"b is constant"),
    (torch.tensor([0.0, math.nan]), torch.rand(2), r"a holds nan, which has no rank"),
    (torch.rand(2, 2), torch.rand(4), r"must be tensors of one shape"),
])
def test_rank_correlation_refuses_what_has_no_correlation(a, b, message):
    with pytest.raises(ValueError, match=message):
        inside.rank_correlation(a, b)


def _around(centre, spread, n=1000):
    """(n,) bootstrap stand-ins: mean ``centre``, standard deviation ``spread``."""
    noise = torch.randn(n, generator=torch.Generator().manual_seed(0))
    return centre + spread * (noise - noise.mean()) / noise.std()


def test_lessons_hold_and_fail_on_their_numbers():
    prose = patching_prose
    boot = [_around(0.9, 0.05), _around(0.7, 0.05), _around(0.8, 0.05)]
    found = prose.rankings_lesson([0.9, 0.7, 0.8], boot, 60)
    low = float(boot[1].quantile(0.05))  # the lowest seed's one-sided 95% bound
    assert found.holds and found.margin == pytest.approx(low - prose.RANK_BAR)
    assert "3 fine-tuning seeds of one base model and one fixed set of 60 pairs" in found.text
    lows = inside.listed(float(b.quantile(0.05)) for b in boot)
    assert ("lower bound over the choice of pairs (a percentile of 1,000 bootstrap "
            f"resamples) {lows}, above 0.5 in each") in found.text
    wide = [boot[0], _around(0.7, 0.15), boot[2]]  # the same rho, too noisy over the pairs
    found = prose.rankings_lesson([0.9, 0.7, 0.8], wide, 60)
    assert not found.holds and "at least one at or below 0.5" in found.text
    found = prose.shares_lesson([1.79, 1.88])
    assert found.holds and found.margin == pytest.approx(0.79) and "1.79, 1.88" in found.text
    assert not prose.shares_lesson([0.9, 1.2]).holds
    lens = inside_prose.lens_lesson([(0.31, 0.89), (0.32, 0.90)],
                                    [(0.31, 0.30), (0.32, 0.40)])
    assert lens.margin == pytest.approx(0.50) and "31% → 89%" in lens.text
    assert "32% → 40%" in lens.text and "whose prompt holds line B" in lens.text
    assert "the control's share rises less" in lens.text  # one control rose: not "falls"
    assert "is not measured here" in lens.text and "counts the copy twice" in lens.text
    lens = inside_prose.lens_lesson([(0.31, 0.89)], [(0.31, 0.30)])
    assert "the control's share falls" in lens.text
    assert not inside_prose.lens_lesson([(0.3, 0.8)], [(0.3, 0.9)]).holds  # control rises
    with pytest.raises(ValueError, match=r"lens_lesson: 2 clean and 1 corrupted runs"):
        inside_prose.lens_lesson([(0.3, 0.8), (0.3, 0.8)], [(0.3, 0.3)])


def test_the_sentences_on_lengths_and_attribution_follow_their_numbers():
    text = inside_prose.lengths_text([14, 14, 20], [8, 14, 14, 14, 20, 21], 3, "characters")
    assert "hold 2 of the lines' 4 lengths: 14 and 20 characters" in text
    assert "these lengths are 67% of the 6 held-out" in text and "from 8 to 21" in text
    heads = torch.tensor([[0.004, -0.019], [0.9, 0.1]])
    text = inside_prose.attribution_text(heads)
    assert "add almost nothing directly (at most 0.019 in size, against 0.90 for a head " \
           "of layer 1)" in text
    heads[0, 1] = -0.3  # layer 0 adds a third of the largest: not "almost nothing"
    text = inside_prose.attribution_text(heads)
    assert "almost nothing" not in text and "add up to 0.30 directly" in text


def _ablations():
    copy = {"zero": torch.tensor([[0.1, 2.5], [0.2, 0.3]]), "mean": torch.tensor([[0.0, 2.2], [0.1, 0.2]]),
            "resample": torch.tensor([[0.0, 1.5], [0.1, 0.1]])}
    opening = {"zero": torch.tensor([[0.0, 1.0], [0.0, 0.0]]), "mean": torch.tensor([[0.0, -0.001], [0.03, 0.0]]),
               "resample": torch.tensor([[0.0, 0.0004], [0.0, 0.0]])}
    return copy, opening


def _seeds(n=2):
    """``n`` seeds of the same ablations, and the coarser means of each."""
    copy, opening = zip(*(_ablations() for _ in range(n)))
    return (dict(enumerate(copy)), dict(enumerate(opening)),
            {s: {"over all positions": 0.9, "at each position": 0.4} for s in range(n)})


def _excess(copy, spread=0.01, n=200):
    """(n, L, H) bootstrap stand-ins of resampling's excess over removal, around its point
    value, with standard deviation ``spread``."""
    point = copy["resample"] - torch.maximum(copy["mean"], copy["zero"])
    noise = torch.randn(n, *point.shape, generator=torch.Generator().manual_seed(0))
    return point + spread * (noise - noise.mean(0)) / noise.std(0)


def test_the_ablation_lesson_says_what_a_mean_keeps_of_the_opening_in_every_seed():
    copy, opening, coarser = _seeds()
    worse = inside_prose.worse_than_removal(copy[0], _excess(copy[0]))
    assert worse == []
    found = inside_prose.ablation_lesson(copy, opening, coarser, (0.2, 0.9), worse)
    assert found.holds and found.margin == pytest.approx(0.1 - 0.03)
    assert "is L0H1 in every seed. In seed 0's model" in found.text
    assert ("zero ablation 2.50 and 1.00; mean ablation 2.20 and 0.00; "
            "resample ablation 1.50 and 0.00") in found.text
    assert "0.20 of its norm from its role's mean; on the copied line, 0.90" in found.text
    assert "pays for it: 1.00, 1.00 in the 2 seeds" in found.text
    assert ("spares less than half of it: it costs 0.90, 0.90. The mean at each position "
            "costs less, 0.40, 0.40") in found.text
    assert "at most 0.0004 nats for any head of any seed, under the bar" in found.text
    assert "costs no head more than zeroing or the mean by over two standard" in found.text
    assert "wrong signal" not in found.text and "exceeds zeroing" not in found.text
    copy[0]["resample"][1, 0] = 0.5  # resampling L1H0 costs the line more than zeroing it
    worse = inside_prose.worse_than_removal(copy[0], _excess(copy[0]))
    assert worse == [("L1H0", 0.5, pytest.approx(0.1), pytest.approx(0.2),
                      pytest.approx(0.3), pytest.approx(0.01))]
    found = inside_prose.ablation_lesson(copy, opening, coarser, (0.2, 0.9), worse)
    assert ("L1H0 costs 0.50 resampled, 0.10 mean-ablated, 0.20 zeroed, so 0.300 ± 0.010 "
            "beyond the larger of the two (± one standard error") in found.text
    assert "this chapter does not test that reading" in found.text
    noisy = inside_prose.worse_than_removal(copy[0], _excess(copy[0], spread=0.2))
    assert noisy == []  # 0.3 within two standard errors of 0.2: not told
    coarser[1]["over all positions"] = 1.1  # costs more than zeroing: told, and still holds
    found = inside_prose.ablation_lesson(copy, opening, coarser, (0.2, 0.9), worse)
    assert found.holds and "0.90, 1.10; it exceeds zeroing's cost in seed 1." in found.text
    coarser[1]["over all positions"] = 1.003  # as printed, it equals zeroing's 1.00
    found = inside_prose.ablation_lesson(copy, opening, coarser, (0.2, 0.9), worse)
    assert "0.90, 1.00; it equals zeroing's cost in seed 1." in found.text
    coarser[1]["over all positions"] = 0.45  # spares more than half of zeroing's cost
    found = inside_prose.ablation_lesson(copy, opening, coarser, (0.2, 0.9), worse)
    assert not found.holds and found.margin == pytest.approx(-0.05)
    coarser[1]["over all positions"] = 0.3  # spares it better than the finer mean
    assert not inside_prose.ablation_lesson(copy, opening, coarser, (0.2, 0.9), worse).holds
    coarser[1] = {"over all positions": 0.9, "at each position": 0.4}
    opening[1]["zero"][0, 1] = 0.05  # zeroing in seed 1 does not cost the opening
    assert not inside_prose.ablation_lesson(copy, opening, coarser, (0.2, 0.9), worse).holds
    opening[1]["zero"][0, 1] = 1.0
    opening[1]["resample"][1, 1] = 0.3  # resampling costs the opening in seed 1
    found = inside_prose.ablation_lesson(copy, opening, coarser, (0.2, 0.9), worse)
    assert not found.holds and "yet costs it up to 0.3 nats for one head" in found.text
    assert "almost no damage" not in found.text
    opening[1]["resample"][1, 1] = 0.0
    opening[1]["mean"][1, 0] = 0.4  # mean ablation by role costs the opening in seed 1
    found = inside_prose.ablation_lesson(copy, opening, coarser, (0.2, 0.9), worse)
    assert not found.holds and "by role costs up to 0.40 for one head" in found.text
    with pytest.raises(ValueError, match=r"ablation_lesson: seeds \[0, 1\], \[0\] and"):
        inside_prose.ablation_lesson(copy, {0: opening[0]}, coarser, (0.2, 0.9), worse)
    with pytest.raises(ValueError, match=r"worse_than_removal: excess has shape "
                                         r"\(1, 2, 2\)"):
        inside_prose.worse_than_removal(copy[0], _excess(copy[0])[:1])
    with pytest.raises(ValueError, match="where='answer'"):
        inside.copy_logprob(None, "answer")


def _boot(restored, lost, spread, n=400):
    """Bootstrap stand-ins: (n,) resamples whose margin, lost / 2 - restored, has SD
    ``spread``."""
    noise = torch.randn(n, generator=torch.Generator().manual_seed(0))
    noise = (noise - noise.mean()) / noise.std()
    return restored - spread * noise, lost + 0 * noise


def test_the_directions_lesson_reads_noisings_first_head_in_every_seed_against_its_noise():
    denoised = {0: torch.tensor([[0.1, 0.3], [0.4, 0.2]]),
                1: torch.tensor([[0.05, 0.3], [0.5, 0.2]]),
                2: torch.tensor([[0.07, 0.3], [0.5, 0.2]])}
    noised = {0: torch.tensor([[0.4, 0.1], [0.1, 0.0]]),
              1: torch.tensor([[0.38, 0.1], [0.1, 0.0]]),
              2: torch.tensor([[0.38, 0.1], [0.1, 0.0]])}
    previous = {s: torch.tensor([[0.8 + s / 20, 0.1], [0.1, 0.1]]) for s in range(3)}
    boot = {0: _boot(0.1, 0.4, 0.02), 1: _boot(0.05, 0.38, 0.02), 2: _boot(0.07, 0.38, 0.02)}
    found = patching_prose.directions_lesson(denoised, noised, previous, boot, 60)
    gaps = [0.1, 0.14, 0.12]  # half of what it loses minus what it restores, per seed
    se = statistics.stdev(gaps) / math.sqrt(3)
    # the same noise in every seed's resamples: the seeds' mean moves by it, SD 0.02
    shared = float(sum(n / 2 - d for d, n in boot.values()).div(3).std())
    assert shared == pytest.approx(0.02)
    _, se_seeds, both, df, t, short = lessons.beyond_t_shared(
        [float(noised[s][0, 0]) / 2 for s in range(3)],
        [float(denoised[s][0, 0]) for s in range(3)], shared)  # as the lesson reads them
    assert both == pytest.approx(math.hypot(se, 0.02))
    assert se_seeds == pytest.approx(se)
    assert df == math.floor(both ** 4 / (se_seeds ** 4 / 2))  # Welch and Satterthwaite
    assert found.holds and found.margin == pytest.approx(short, abs=1e-4)
    assert found.margin < 0.12 - 2.920 * se  # the pairs' error counted: a narrower margin
    assert "ranks L0H0 first in every seed" in found.text
    assert "0.40 ± 0.00, 0.38 ± 0.00, 0.38 ± 0.00" in found.text
    assert "more than 0.2 in every seed by over two standard errors" in found.text
    assert "restores 0.10 ± 0.02, 0.05 ± 0.02, 0.07 ± 0.02" in found.text
    assert "0.100 ± 0.020, 0.140 ± 0.020, 0.120 ± 0.020" in found.text
    assert (f"their mean 0.120 ± 0.012 over the seeds, t = {0.12 / se:.1f} against the "
            "one-sided 95% quantile 2.92 of Student's t with 2 degrees of freedom"
            ) in found.text
    assert (f"± 0.020 for the mean. With both errors (± {both:.3f}, {df} degrees of "
            f"freedom by Welch and Satterthwaite's rule), t = {0.12 / both:.1f} against "
            f"{t:.2f}: the copy needs it, and") in found.text
    assert "previous-token head: 0.80, 0.85, 0.90" in found.text
    assert "fits both numbers" in found.text
    denoised[0][0, 0] = 0.19  # seed 0 restores nearly half: the gaps too spread to tell
    found = patching_prose.directions_lesson(denoised, noised, previous, boot, 60)
    assert not found.holds
    assert "does not restore clearly less than half of what it loses" in found.text
    assert "do not clearly single out a head that is needed but not enough" in found.text
    denoised[0][0, 0] = 0.1
    previous[1][0, 0] = 0.3  # not a previous-token head in seed 1: no mechanism told
    found = patching_prose.directions_lesson(denoised, noised, previous, boot, 60)
    assert "not a previous-token head in every seed" in found.text
    assert "fits both numbers" not in found.text
    weak = {s: torch.tensor([[0.22, 0.1], [0.1, 0.0]]) for s in range(3)}
    little = {s: torch.tensor([[0.02 + s / 100, 0.3], [0.5, 0.2]]) for s in range(3)}
    noisy = {s: (_around(0.02 + s / 100, 0.01, 400), _around(0.22, 0.02, 400))
             for s in range(3)}
    found = patching_prose.directions_lesson(little, weak, previous, noisy, 60)
    assert not found.holds  # losing 0.22 ± 0.02: not a fifth of the gap by two errors
    assert "not more than 0.2 by two standard errors in every seed" in found.text
    assert "it is not clearly needed" in found.text
    denoised[1][0, 0] = 0.3  # restores most of what it loses: enough alone
    assert not patching_prose.directions_lesson(denoised, noised, previous, boot, 60).holds
    with pytest.raises(ValueError, match=r"directions_lesson: seeds \[0, 1, 2\], \[0\], "):
        patching_prose.directions_lesson(denoised, {0: noised[0]}, previous, boot, 60)
    one = {**boot, 1: (boot[1][0][:1], boot[1][1][:1])}  # one resample: no error
    with pytest.raises(ValueError, match=r"boot\[1\] denoised has shape \(1,\) .* n >= 2"):
        patching_prose.directions_lesson(denoised, noised, previous, one, 60)
    short_boot = {**boot, 1: (boot[1][0][:9], boot[1][1][:9])}
    with pytest.raises(ValueError, match=r"the bootstraps differ in length: draw them"):
        patching_prose.directions_lesson(denoised, noised, previous, short_boot, 60)


def _joint_boot(shares, spread):
    """(n, 5) bootstrap stand-ins around ``shares``; the pair's column moves with the sum of
    the two heads' plus noise of SD ``spread``."""
    g = torch.Generator().manual_seed(0)
    a, b, extra = (0.01 * torch.randn(400, generator=g) for _ in range(3))
    extra = spread * (extra - extra.mean()) / extra.std()
    pair = a + b + extra
    return torch.stack([a, b, pair, 0 * a, 0 * a], 1) + torch.tensor(shares)


def test_the_joint_sentence_tells_overlap_need_and_noise_from_two_standard_errors():
    single = torch.tensor([[0.2, 0.0], [0.5, 0.4]])
    joint = {"pair": 0.8, "layer 0": 0.2, "later": 1.0, "all": 1.0}
    boot = _joint_boot([0.5, 0.4, 0.8, 0.2, 1.0], 0.01)
    text = patching_prose.joint_text(single, [(1, 0), (1, 1)], joint, boot)
    assert "L1H0 (0.50 ± 0.01) and L1H1 (0.40 ± 0.01) restore 0.90" in text
    assert "together, 0.80 ± 0.0" in text and "short of the sum by 0.100 ± 0.010" in text
    assert "over two standard errors, so they overlap" in text
    assert "layers 1 to 1 without them, 1.00 ± 0.00" in text
    assert "come to 1.20, against 1.00 for every head" in text
    assert "Not heads in series" in text and "an AND between layer 0's output" in text
    assert "is consistent with" in text and "does not test that reading" in text
    assert "All 4 heads restore 1.00, as they must" in text
    text = patching_prose.joint_text(single, [(1, 0), (1, 1)], joint, _joint_boot(
        [0.5, 0.4, 0.8, 0.2, 1.0], 0.06))  # the same 0.10, within two standard errors
    assert "within two standard errors of it, so these pairs tell neither" in text
    joint = {"pair": 0.99, "layer 0": 0.6, "later": 0.7, "all": 0.98}
    text = patching_prose.joint_text(single, [(1, 0), (1, 1)], joint, boot)
    assert "beyond the sum by 0.090 ± 0.010 (± one standard error" in text
    assert "bootstrapped): over two standard errors, so each needs the other" in text
    assert "series" not in text and "All 4 heads restore 0.98." in text
    still = torch.tensor([[0.5, 0.4, 0.8, 0.2, 1.0]]).expand(400, 5)  # resamples all alike
    text = patching_prose.joint_text(single, [(1, 0), (1, 1)], joint, still)
    assert "the resamples do not vary, so there is no error estimate" in text
    assert "needs the other" not in text
    single = torch.tensor([[0.2, 0.0], [0.354, 0.324]])  # 0.35 + 0.32 shown: 0.67, not 0.68
    text = patching_prose.joint_text(single, [(1, 0), (1, 1)], joint, boot)
    assert "restore 0.67" in text


def test_narrow_tables_fit_a_phone():
    left = torch.tensor([[0.04, -0.013, 1.0, -0.001]] * 4)
    text = patching_prose.narrow_tables(left, left.flip(1))
    assert text.splitlines()[0] == "L0  .04 -.01 1.00  .00 |  .00 1.00 -.01  .04"
    assert max(len(line) for line in text.splitlines()) <= 50
    with pytest.raises(ValueError, match="narrow_tables: left and right must be"):
        patching_prose.narrow_tables(left, left[:2])


def _lesson(holds):
    return lessons.Lesson("x", 1.0 if holds else -1.0, "share", "held", "failed")


def test_the_summary_says_only_what_the_verdicts_say():
    text = patching_prose.summary_text(*(_lesson(True),) * 2, True,
                                       *(_lesson(True),) * 3, 3)
    assert text.count("\n- ") == 3 and text.startswith("- The logit lens")
    assert "rose with depth where the line was in the prompt" in text
    assert "resampling from the corrupted run hardly touched it" in text
    assert "cost some heads more on the line than zeroing or the mean" in text
    assert "in the 3 runs, the head noising ranks first is needed" in text
    assert "agree, beyond the error over the pairs; the copy is shared" in text
    text = patching_prose.summary_text(*(_lesson(False),) * 2, False,
                                       *(_lesson(False),) * 3, 3)
    for said in ("rose with depth", "hardly touched", "cost some heads", "is needed by",
                 "agree, beyond", "whose single shares overlap"):
        assert said not in text
    assert "cost no head clearly more on the line than removing it" in text
    with pytest.raises(ValueError, match=r"summary_text: lens = 0.5 must be the Lesson"):
        patching_prose.summary_text(0.5, *(_lesson(True),) * 1, True,
                                    *(_lesson(True),) * 3, 3)


def test_the_figure_draws_one_seed_and_refuses_seeds_that_differ():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shares, scores = torch.rand(2, 2), torch.rand(2, 2)
    fig = inside_figure.patching_figure({0: shares}, {0: scores})
    assert len(fig.axes) == 1 and len(fig.axes[0].texts) == 3
    plt.close(fig)
    with pytest.raises(ValueError, match=r"patching_figure: shares and scores must be "
                                         r"dicts with the same seeds .* \[0, 1\] and "
                                         r"\[0, 2\]"):
        inside_figure.patching_figure({0: shares, 1: shares}, {0: scores, 2: scores})
    with pytest.raises(ValueError, match=r"seed 0's shares and scores must be \(L, H\)"):
        inside_figure.patching_figure({0: shares}, {0: scores[0]})


def test_an_empty_copy_mask_is_refused_rather_than_a_mean_of_nothing():
    tok = _tok()
    model = _chat_model(tok)
    pairs = inside.repeat_pairs([Item("Repeat", line) for line in LINES], tok, 2)
    pairs.copy = torch.zeros_like(pairs.copy)
    for call in (inside.induction_scores, inside.lens_top1):
        with pytest.raises(ValueError, match=r"pairs.copy marks no position, so there is "
                                             r"no character to copy"):
            call(model, pairs)


@pytest.mark.parametrize("call, message", [
    (lambda: inside.top_heads(torch.rand(2, 2), -1), r"top_heads.k=-1 must be a positive"),
    (lambda: inside.top_heads(torch.rand(2, 2), 0), r"top_heads.k=0 must be a positive"),
    (lambda: inside.top_heads(torch.rand(4), 2),
     r"top_heads: values has shape \(4,\): pass one value per head, an \(L, H\) tensor"),
    (lambda: patching_prose.timing_text(-1.0, 3, 32), r"seconds=-1.0 must be a finite"),
    (lambda: patching_prose.timing_text(1.0, 0, 32), r"n_models=0 must be a whole number"),
    (lambda: patching_prose.timing_text(1.0, 3, -3), r"n_runs=-3 must be a whole number"),
    (lambda: patching_prose.shares_lesson([]), r"shares_lesson: sums is empty"),
    (lambda: patching_prose.rankings_lesson([], [], 60),
     r"rankings_lesson: 0 correlations and 0 bootstraps: pass one of each per seed"),
    (lambda: patching_prose.rankings_lesson([0.7], [torch.tensor([0.7])], 60),
     r"rankings_lesson: boot\[0\] has shape \(1,\) or is not finite: .* n >= 2"),
    (lambda: inside_prose.attribution_text(torch.rand(1, 4)),
     r"attribution_text: heads has shape \(1, 4\): pass the \(L, H\)"),
    (lambda: inside_prose.lengths_text([], [8, 9], 0, "characters"),
     r"lengths_text: 0 chosen and 2 held-out lengths"),
    (lambda: inside_online.online_run(n=2.5), r"online_run.n=2.5 must be an int"),
    (lambda: inside_online.online_run(n=0), r"online_run.n=0 must be a positive int"),
    (lambda: inside_online.online_run(half=1), r"online_run.half=1 must be an int >= 2"),
    (lambda: inside_online.name_mover_run(n=0), r"name_mover_run.n=0 must be a positive"),
])
def test_bad_input_names_the_value_the_rule_and_the_fix(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_the_colab_track_runs_on_a_stand_in_and_says_what_it_would_do_offline(monkeypatch):
    torch.manual_seed(0)
    model = GPT(GPTConfig(context_length=32, d_model=32, n_layers=2, n_heads=2, dropout=0.0))
    text = inside_online.online_run(n=3, half=10, model=model)
    numbers = re.findall(r"L\dH\d (-?\d\.\d\d)", text)
    assert len(numbers) == 8 and "over 4 heads" in text  # 2 x 2 heads, 5 asked of each ranking

    def unavailable(name):
        raise WeightsUnavailableError("offline")
    monkeypatch.setattr(inside_online, "from_pretrained", unavailable)
    assert inside_online.online_run().startswith("*Not run here*")


def test_the_name_prompts_align_and_differ_only_where_the_subject_is_named_again():
    clean, corrupted, io, s = inside_online.name_prompts(6, seed=1)
    assert clean.shape == corrupted.shape == (6, 14) and io.shape == s.shape == (6,)
    differ = (clean != corrupted).nonzero()[:, 1].unique().tolist()
    assert differ == [9]  # ", John gave": the only position that changes is the second name
    assert (clean[:, 9] == s).all() and (corrupted[:, 9] == io).all() and (io != s).all()
    assert (clean[:, 1] == io).all() and (clean[:, 3] == s).all()
    with pytest.raises(ValueError, match="n is 0"):
        inside_online.name_prompts(0)
    same = inside_online.name_prompts(np.int64(6), seed=1)  # a NumPy int is a whole number
    assert all(torch.equal(a, b) for a, b in zip(same, (clean, corrupted, io, s)))


def test_the_name_mover_track_runs_on_a_stand_in_and_says_what_it_would_do_offline(monkeypatch):
    torch.manual_seed(0)
    model = GPT(GPTConfig(context_length=32, d_model=32, n_layers=2, n_heads=2, dropout=0.0))
    text = inside_online.name_mover_run(n=4, model=model)
    assert text.startswith("On 4 sentences, the model given (2 layers of 2 heads) puts")
    assert "a gap of" in text  # a random model prefers neither name
    assert "too small to share among the heads, so no head is named" in text
    monkeypatch.setattr(inside_online, "GAP_BAR", 0.0)  # any gap: the heads are named
    text = inside_online.name_mover_run(n=4, model=model)
    shares = [float(x) for x in re.findall(r"L\dH\d (-?\d+\.\d\d)", text)]
    top, against = shares[:4], shares[4:]  # the 4 heads from the top (5 asked), then below 0
    assert top == sorted(top, reverse=True) and against == sorted(x for x in top if x < 0)[:2]
    assert ("none pushes the other way" in text) == (not against)

    def unavailable(name):
        raise WeightsUnavailableError("offline")
    monkeypatch.setattr(inside_online, "from_pretrained", unavailable)
    assert inside_online.name_mover_run().startswith("*Not run here*")
