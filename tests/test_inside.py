"""Chapter 13's book layer (gpt_from_scratch.book.inside, inside_prose, inside_online): the Repeat
pairs line up, role by role, the scores, rank correlation, lessons and sentences follow their numbers, and the Colab track runs on a
small stand-in for GPT-2 (and says what it would do without the weights)."""

from __future__ import annotations

import math
import re
import statistics

import numpy as np
import pytest
import torch

from gpt_from_scratch.book import inside, inside_online, inside_prose
from gpt_from_scratch.book.assistant import Item
from gpt_from_scratch.chat import ChatTokenizer, add_chat_tokens
from gpt_from_scratch.hf_weights import WeightsUnavailableError
from gpt_from_scratch.model import GPT, GPTConfig
from gpt_from_scratch.tokenizer import CharTokenizer

LINES = ["I might call him", "Alack, for pity!", "So be it, sirrah", "What, ho! Sirrah", "Go to, go"]


def _tok() -> ChatTokenizer:
    chars = CharTokenizer("".join(sorted(set("".join(LINES) + "Repeat: Good sir,"))))
    return ChatTokenizer(chars, chars.vocab_size)


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
    fig = inside.patching_figure({0: crowded, 1: corner}, {0: scores, 1: corner_scores})
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


def test_lessons_hold_and_fail_on_their_numbers():
    prose = inside_prose
    found = prose.rankings_lesson([0.9, 0.7, 0.8], 60)
    assert found.margin == pytest.approx(0.7 - prose.RANK_BAR)
    assert "3 fine-tuning seeds of one base model and one fixed set of 60 pairs" in found.text
    assert not prose.rankings_lesson([0.9, 0.4], 60).holds
    found = prose.shares_lesson([1.79, 1.88])
    assert found.holds and found.margin == pytest.approx(0.79) and "1.79, 1.88" in found.text
    assert not prose.shares_lesson([0.9, 1.2]).holds
    lens = prose.lens_lesson([(0.31, 0.89), (0.32, 0.90)], [(0.31, 0.30), (0.32, 0.40)])
    assert lens.margin == pytest.approx(0.50) and "31% → 89%" in lens.text and "32% → 40%" in lens.text
    assert not prose.lens_lesson([(0.3, 0.8)], [(0.3, 0.9)]).holds  # the control rises more
    with pytest.raises(ValueError, match=r"lens_lesson: 2 clean and 1 corrupted runs"):
        prose.lens_lesson([(0.3, 0.8), (0.3, 0.8)], [(0.3, 0.3)])


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


def test_the_ablation_lesson_says_what_a_mean_keeps_of_the_opening_in_every_seed():
    copy, opening, coarser = _seeds()
    found = inside_prose.ablation_lesson(copy, opening, coarser, (0.2, 0.9))
    assert found.holds and found.margin == pytest.approx(0.1 - 0.03)
    assert "is L0H1 in every seed. In seed 0's model" in found.text
    assert ("zero ablation 2.50 and 1.00; mean ablation 2.20 and 0.00; "
            "resample ablation 1.50 and 0.00") in found.text
    assert "0.20 of its norm from its role's mean; on the copied line, 0.90" in found.text
    assert "pays for it: 1.00, 1.00 in the 2 seeds" in found.text
    assert ("spares less than half of it: it costs 0.90, 0.90. The mean at each position "
            "costs less, 0.40, 0.40") in found.text
    assert "at most 0.0004 nats for any head of any seed" in found.text  # resampling's
    assert "wrong signal" not in found.text
    assert "exceeds zeroing" not in found.text
    copy[0]["resample"][1, 0] = 0.5  # resampling L1H0 costs the line more than zeroing it
    found = inside_prose.ablation_lesson(copy, opening, coarser, (0.2, 0.9))
    assert "L1H0 costs 0.50 resampled, 0.10 mean-ablated, 0.20 zeroed" in found.text
    coarser[1]["over all positions"] = 1.1  # costs more than zeroing: told, and still holds
    found = inside_prose.ablation_lesson(copy, opening, coarser, (0.2, 0.9))
    assert found.holds and "0.90, 1.10; it exceeds zeroing's cost in seed 1." in found.text
    coarser[1]["over all positions"] = 0.45  # spares more than half of zeroing's cost
    found = inside_prose.ablation_lesson(copy, opening, coarser, (0.2, 0.9))
    assert not found.holds and found.margin == pytest.approx(-0.05)
    coarser[1]["over all positions"] = 0.3  # spares it better than the finer mean
    assert not inside_prose.ablation_lesson(copy, opening, coarser, (0.2, 0.9)).holds
    coarser[1] = {"over all positions": 0.9, "at each position": 0.4}
    opening[1]["zero"][0, 1] = 0.05  # zeroing in seed 1 does not damage the opening
    assert not inside_prose.ablation_lesson(copy, opening, coarser, (0.2, 0.9)).holds
    opening[1]["zero"][0, 1] = 1.0
    opening[1]["mean"][1, 0] = 0.4  # mean ablation by role damages the opening in seed 1
    found = inside_prose.ablation_lesson(copy, opening, coarser, (0.2, 0.9))
    assert not found.holds and "by role costs up to 0.40 for one head" in found.text
    with pytest.raises(ValueError, match=r"ablation_lesson: seeds \[0, 1\], \[0\] and"):
        inside_prose.ablation_lesson(copy, {0: opening[0]}, coarser, (0.2, 0.9))
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
    found = inside_prose.directions_lesson(denoised, noised, previous, boot, 60)
    gaps = [0.1, 0.14, 0.12]  # half of what it loses minus what it restores, per seed
    se = statistics.stdev(gaps) / math.sqrt(3)
    assert found.holds and found.margin == pytest.approx(0.12 - 2.920 * se, abs=1e-3)
    assert "ranks L0H0 first in every seed" in found.text
    assert "0.40 ± 0.00, 0.38 ± 0.00, 0.38 ± 0.00" in found.text
    assert "restores 0.10 ± 0.02, 0.05 ± 0.02, 0.07 ± 0.02" in found.text
    assert "0.100 ± 0.020, 0.140 ± 0.020, 0.120 ± 0.020" in found.text
    assert "their mean 0.120 ± 0.012 over the seeds, against Student's t = 2.92" in found.text
    assert "previous-token head: 0.80, 0.85, 0.90" in found.text
    assert "fits both numbers" in found.text
    denoised[0][0, 0] = 0.19  # seed 0 restores nearly half: the gaps too spread to tell
    found = inside_prose.directions_lesson(denoised, noised, previous, boot, 60)
    assert not found.holds
    assert "not less than half as much beyond Student's t over the seeds" in found.text
    denoised[0][0, 0] = 0.1
    previous[1][0, 0] = 0.3  # not a previous-token head in seed 1: no mechanism told
    found = inside_prose.directions_lesson(denoised, noised, previous, boot, 60)
    assert "not a previous-token head in every seed" in found.text
    assert "fits both numbers" not in found.text
    denoised[1][0, 0] = 0.3  # restores most of what it loses: enough alone
    assert not inside_prose.directions_lesson(denoised, noised, previous, boot, 60).holds
    with pytest.raises(ValueError, match=r"directions_lesson: seeds \[0, 1, 2\], \[0\], "):
        inside_prose.directions_lesson(denoised, {0: noised[0]}, previous, boot, 60)


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
    text = inside_prose.joint_text(single, [(1, 0), (1, 1)], joint, boot)
    assert "L1H0 (0.50 ± 0.01) and L1H1 (0.40 ± 0.01) restore 0.90" in text
    assert "together, 0.80 ± 0.0" in text and "short of the sum by 0.100 ± 0.010" in text
    assert "over two standard errors, so they overlap" in text
    assert "layers 1 to 1 without them, 1.00 ± 0.00" in text
    assert "come to 1.20, against 1.00 for every head" in text
    assert "Not heads in series" in text and "the AND is between layer 0's output" in text
    assert "All 4 heads restore 1.00, as they must" in text
    text = inside_prose.joint_text(single, [(1, 0), (1, 1)], joint, _joint_boot(
        [0.5, 0.4, 0.8, 0.2, 1.0], 0.06))  # the same 0.10, within two standard errors
    assert "within two standard errors of it, so these pairs tell neither" in text
    joint = {"pair": 0.99, "layer 0": 0.6, "later": 0.7, "all": 0.98}
    text = inside_prose.joint_text(single, [(1, 0), (1, 1)], joint, boot)
    assert "beyond the sum by 0.090 ± 0.010 (± one standard error" in text
    assert "bootstrapped): over two standard errors, so each needs the other" in text
    assert "series" not in text and "All 4 heads restore 0.98." in text
    single = torch.tensor([[0.2, 0.0], [0.354, 0.324]])  # 0.35 + 0.32 shown: 0.67, not 0.68
    assert "restore 0.67" in inside_prose.joint_text(single, [(1, 0), (1, 1)], joint, boot)


def test_narrow_tables_fit_a_phone():
    left = torch.tensor([[0.04, -0.013, 1.0, -0.001]] * 4)
    text = inside_prose.narrow_tables(left, left.flip(1))
    assert text.splitlines()[0] == "L0  .04 -.01 1.00  .00 |  .00 1.00 -.01  .04"
    assert max(len(line) for line in text.splitlines()) <= 50
    with pytest.raises(ValueError, match="narrow_tables: left and right must be"):
        inside_prose.narrow_tables(left, left[:2])


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
    shares = [float(x) for x in re.findall(r"L\dH\d (-?\d+\.\d\d)", text)]
    top, against = shares[:4], shares[4:]  # the 4 heads from the top (5 asked), then below 0
    assert top == sorted(top, reverse=True) and against == sorted(x for x in top if x < 0)[:2]
    assert ("none pushes the other way" in text) == (not against)

    def unavailable(name):
        raise WeightsUnavailableError("offline")
    monkeypatch.setattr(inside_online, "from_pretrained", unavailable)
    assert inside_online.name_mover_run().startswith("*Not run here*")
