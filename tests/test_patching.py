"""Chapter 13 — ablation and activation patching (gpt_from_scratch.patching) on small random GPTs:
zero ablation is Chapter 8's zeroed columns, mean ablation averages positions of one role and
leaves padding alone, noising is resample ablation, shares patched together, and every odd input
named with its rule and its fix. The comparisons with TransformerLens are in
test_interp_parity.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gpt_from_scratch import ablation, interp, patching
from small_heads import small_idx, small_model


def _with_head(model, idx, layer, head, value, where=None):
    """The run on ``idx`` with one head's z (B, T, d_k) set to ``value`` where ``where`` holds,
    written out with ``interp.run_with_hooks``: what each ablation must equal."""
    def edit(z):
        z = z.clone()
        keep = torch.ones(z.shape[:2], dtype=torch.bool) if where is None else where
        z[:, :, head][keep] = value[keep]
        return z
    return interp.run_with_hooks(model, idx, edit={f"blocks.{layer}.attn.z": edit})[0]


def _z(model, idx, layer):
    return interp.run_with_hooks(model, idx, read=[f"blocks.{layer}.attn.z"])[1][f"blocks.{layer}.attn.z"]


def test_zero_ablation_is_chapter_8s_zeroed_columns_and_resampling_from_itself_changes_nothing():
    model, idx = small_model(), small_idx()
    zeroed = ablation.ablate_heads(model, idx, [(1, 2), (2, 0)])
    reference = small_model()
    with torch.no_grad():  # Chapter 8, Exercise 4: a head's columns of c_proj set to zero
        reference.blocks[1].attn.c_proj.weight[:, 16:24] = 0
        reference.blocks[2].attn.c_proj.weight[:, 0:8] = 0
    torch.testing.assert_close(zeroed, reference(idx)[0])
    same = ablation.ablate_heads(model, idx, [(1, 2)], how="resample", reference=idx)
    torch.testing.assert_close(same, model(idx)[0])
    other = small_idx(seed=5)
    resampled = ablation.ablate_heads(model, idx, [(0, 1)], how="resample", reference=other)
    torch.testing.assert_close(resampled, _with_head(model, idx, 0, 1, _z(model, other, 0)[:, :, 1]))


def test_mean_ablation_averages_the_positions_of_one_role_and_leaves_padding_as_it_is():
    # Row 1 is row 0's conversation without its first two tokens, padded at the right: its
    # position t plays row 0's role t + 2, and its last two positions are padding.
    model, idx = small_model(), small_idx(B=2)
    idx[1, :8] = idx[0, 2:]
    roles = torch.tensor([list(range(10)), list(range(2, 10)) + [-1, -1]])
    z = _z(model, idx, 1)[:, :, 3]  # (B, T, d_k)
    expected = torch.zeros_like(z)
    for r in range(10):  # each role's mean, written out
        at = roles == r
        expected[at] = z[at].mean(0)
    ablated = ablation.ablate_heads(model, idx, [(1, 3)], "mean", reference=idx,
                                    roles=roles)
    torch.testing.assert_close(ablated, _with_head(model, idx, 1, 3, expected, roles >= 0))
    by_position = z.mean(0).expand_as(z)  # the average over the rows at each position
    assert not torch.allclose(ablated, _with_head(model, idx, 1, 3, by_position), atol=1e-3)


def test_mean_ablation_without_a_reference_averages_the_other_positions_of_each_role():
    # A position's own output is no part of its mean (leave-one-out): with every position
    # its own role there is nothing else to average, which is refused rather than a run
    # that changes nothing; the mean over reference=idx itself is that run.
    model, idx = small_model(), small_idx()
    alone = torch.arange(idx.numel()).view(idx.shape)
    with pytest.raises(ValueError, match=r"hold one position each: leaving it out"):
        ablation.ablate_heads(model, idx, [(0, 1)], "mean", roles=alone)
    torch.testing.assert_close(
        ablation.ablate_heads(model, idx, [(0, 1), (2, 3)], "mean", reference=idx,
                              roles=alone),
        model(idx)[0])
    aligned = torch.arange(idx.shape[1]).expand_as(idx)  # rows that line up
    z = _z(model, idx, 2)[:, :, 3]  # (B, T, d_k)
    others = (z.sum(0) - z) / (idx.shape[0] - 1)  # each row's mean of the other rows
    ablated = ablation.ablate_heads(model, idx, [(2, 3)], "mean", roles=aligned)
    torch.testing.assert_close(ablated, _with_head(model, idx, 2, 3, others))
    assert not torch.allclose(ablated, _with_head(model, idx, 2, 3, z.mean(0).expand_as(z)),
                              atol=1e-4)  # the mean with the row itself is another run


def test_mean_ablation_reads_its_means_from_the_reference():
    model, idx, other = small_model(), small_idx(), small_idx(seed=5)
    aligned = torch.arange(idx.shape[1]).expand_as(idx)
    z = _z(model, other, 0)[:, :, 2]
    torch.testing.assert_close(
        ablation.ablate_heads(model, idx, [(0, 2)], "mean", reference=other, roles=aligned),
        _with_head(model, idx, 0, 2, z.mean(0).expand_as(z)))


def _metric(clean):
    mask = torch.zeros_like(clean, dtype=torch.bool)
    mask[:, 5:] = True
    return lambda logits: patching.mean_logprob(logits, clean.roll(-1, 1), mask)


def test_patching_the_only_head_restores_the_whole_gap():
    # One block, one head; clean and corrupted differ at position 0 only, and the metric reads the last
    # position: there the residual stream differs only through the head, so patching it restores all.
    model = small_model(n_layers=1, n_heads=1)
    clean = small_idx(seed=3)
    corrupted = clean.clone()
    corrupted[:, 0] = (clean[:, 0] + 1) % 50
    target = small_idx(seed=4)[:, -1]

    def metric(logits):
        return logits[:, -1].log_softmax(-1).gather(-1, target[:, None]).mean()
    for direction in patching.DIRECTIONS:
        shares = patching.patching_shares(model, clean, corrupted, metric, direction)
        assert shares.shape == (1, 1)
        assert shares.item() == pytest.approx(1.0, abs=1e-5)


def test_denoising_shares_are_each_heads_restored_fraction():
    model, clean, corrupted = small_model(), small_idx(seed=3), small_idx(seed=6)
    metric = _metric(clean)
    shares = patching.patching_shares(model, clean, corrupted, metric)
    assert shares.shape == (3, 4)
    with torch.no_grad():
        m_clean, m_corrupt = float(metric(model(clean)[0])), float(metric(model(corrupted)[0]))
    _, cache = interp.run_with_hooks(model, clean, read=["blocks.2.attn.z"])
    with torch.no_grad():
        model.blocks[2].attn.c_proj.register_forward_pre_hook(  # the study's hook, written out
            lambda m, args: (torch.cat([args[0][..., :24], cache["blocks.2.attn.z"][:, :, 3]], -1),))
        patched = float(metric(model(corrupted)[0]))
    assert shares[2, 3].item() == pytest.approx((patched - m_corrupt) / (m_clean - m_corrupt), abs=1e-6)
    assert len(set(shares.flatten().tolist())) == 12


def test_noising_is_resample_ablation_from_the_corrupted_run():
    model, clean, corrupted = small_model(), small_idx(seed=3), small_idx(seed=6)
    metric = _metric(clean)
    noised = patching.patching_shares(model, clean, corrupted, metric, "noise")
    with torch.no_grad():
        m_clean, m_corrupt = float(metric(model(clean)[0])), float(metric(model(corrupted)[0]))
    for layer, head in [(0, 1), (2, 3)]:
        ablated = ablation.ablate_heads(model, clean, [(layer, head)], "resample", reference=corrupted)
        lost = (m_clean - float(metric(ablated))) / (m_clean - m_corrupt)
        assert noised[layer, head].item() == pytest.approx(lost, abs=1e-6)
    assert not torch.allclose(noised, patching.patching_shares(model, clean, corrupted, metric))


def test_heads_patched_together():
    # Clean and corrupted differ before position 5 only, and the metric reads positions 5 on:
    # with every head patched, those positions see exactly the other run, in either direction.
    model, clean = small_model(), small_idx(seed=3)
    corrupted = clean.clone()
    corrupted[:, :5] = small_idx(seed=6)[:, :5]
    metric = _metric(clean)
    every = [(l, h) for l in range(3) for h in range(4)]
    for direction in patching.DIRECTIONS:
        assert patching.group_share(model, clean, corrupted, metric, every, direction) == pytest.approx(1.0, abs=1e-5)
        single = patching.patching_shares(model, clean, corrupted, metric, direction)
        assert patching.group_share(model, clean, corrupted, metric, [(1, 2)], direction) == pytest.approx(
            single[1, 2].item(), abs=1e-6)
    pair = patching.group_share(model, clean, corrupted, metric, [(0, 1), (2, 3)])
    single = patching.patching_shares(model, clean, corrupted, metric)
    assert pair != pytest.approx(single[0, 1].item() + single[2, 3].item(), abs=1e-4)  # not a sum


def test_heads_may_be_numpy_ints():
    model, idx = small_model(), small_idx()
    layers, heads = np.array([1, 2]), np.array([2, 0])
    torch.testing.assert_close(ablation.ablate_heads(model, idx, list(zip(layers, heads))),
                               ablation.ablate_heads(model, idx, [(1, 2), (2, 0)]))
    torch.testing.assert_close(ablation.ablate_heads(model, idx, np.array([[1, 2]])),
                               ablation.ablate_heads(model, idx, [(1, 2)]))
    z = _z(model, small_idx(seed=3), 1)
    torch.testing.assert_close(patching.patch_head(model, idx, z, np.int64(1), np.int32(3)),
                               patching.patch_head(model, idx, z, 1, 3))


def test_heads_may_be_integer_tensors():
    model, idx = small_model(), small_idx()
    expected = ablation.ablate_heads(model, idx, [(1, 2), (2, 0)])
    heads = torch.tensor([[1, 2], [2, 0]])
    torch.testing.assert_close(ablation.ablate_heads(model, idx, heads), expected)
    layer, head = torch.tensor(1), torch.tensor(2, dtype=torch.int32)
    torch.testing.assert_close(ablation.ablate_heads(model, idx, [(layer, head), (2, 0)]),
                               expected)
    z = _z(model, small_idx(seed=3), 1)
    torch.testing.assert_close(patching.patch_head(model, idx, z, layer, torch.tensor(3)),
                               patching.patch_head(model, idx, z, 1, 3))


def _rows(B=12, T=10):
    """Clean and corrupted rows that differ before position 5, the next tokens, and a mask
    of a different length in each row (positions 9 - b % 4 on), so that pooling over the
    masked characters and averaging the rows' means differ."""
    clean = small_idx(seed=3, B=B, T=T)
    corrupted = clean.clone()
    corrupted[:, :5] = small_idx(seed=6, B=B, T=T)[:, :5]
    mask = torch.arange(T) >= torch.tensor([T - 1 - b % 4 for b in range(B)])[:, None]
    return clean, corrupted, clean.roll(-1, 1), mask


@pytest.mark.parametrize("direction", patching.DIRECTIONS)
def test_bootstrap_shares_are_group_share_on_the_resampled_rows(direction):
    model = small_model()
    clean, corrupted, target, mask = _rows()
    groups = [[(0, 1)], [(2, 3)], [(0, 1), (2, 3)]]
    boot = patching.bootstrap_shares(model, clean, corrupted, target, mask, groups,
                                     direction, n=50, seed=4)
    assert boot.shape == (50, 3) and (boot.std(0) > 0).all()
    rows = torch.randint(0, 12, (50, 12), generator=torch.Generator().manual_seed(4))
    assert torch.equal(rows, patching.bootstrap_rows(12, 50, 4))
    for r in rows[:3]:  # the reference: group_share on the resampled batch, written out
        x, y, t, m = clean[r], corrupted[r], target[r], mask[r]
        metric = lambda logits: patching.mean_logprob(logits, t, m)  # noqa: E731
        expected = [patching.group_share(model, x, y, metric, g, direction) for g in groups]
        got = boot[int((rows == r).all(1).nonzero()[0])]
        torch.testing.assert_close(got, torch.tensor(expected), atol=1e-5, rtol=0)

        def row_means(logits):  # a wrong pooling: the mean of each row's mean
            logp = logits.log_softmax(-1).gather(-1, t[..., None])[..., 0]
            return ((logp * m).sum(1) / m.sum(1)).mean()
        wrong = [patching.group_share(model, x, y, row_means, g, direction) for g in groups]
        assert not torch.allclose(got, torch.tensor(wrong), atol=1e-3)
    again = patching.bootstrap_shares(model, clean, corrupted, target, mask, groups[:1],
                                      direction, n=50, seed=4)
    assert torch.equal(again[:, 0], boot[:, 0])  # the same seed draws the same rows
    ignored = target.where(mask, -100)  # ids outside the mask are never read
    unread = patching.bootstrap_shares(model, clean, corrupted, ignored, mask, groups[:1],
                                       direction, n=50, seed=4)
    assert torch.equal(unread[:, 0], boot[:, 0])


def test_mean_logprob_is_the_mean_over_the_mask():
    logits = torch.log(torch.tensor([[[0.5, 0.5], [0.9, 0.1]]]))
    target, mask = torch.tensor([[0, 1]]), torch.tensor([[False, True]])
    assert patching.mean_logprob(logits, target, mask).item() == pytest.approx(math.log(0.1))
    ignored = torch.tensor([[-100, 1]])  # an id outside the mask is never read
    assert patching.mean_logprob(logits, ignored, mask).item() == pytest.approx(
        math.log(0.1))


ROLES = torch.arange(10).expand(3, 10)


def _finite_twice():
    """A metric finite on the clean and corrupted runs, NaN on every run after them."""
    calls = []

    def metric(logits):
        calls.append(1)
        return logits[:, -1, 0].mean() * (1.0 if len(calls) <= 2 else math.nan)
    return metric


@pytest.mark.parametrize("call, message", [
    (lambda m, i: ablation.ablate_heads(m, i, (0, 1)),
     r"heads=\(0, 1\) must be a non-empty list of \(layer, head\) pairs: .* heads=\[\(0, 1\)\]"),
    (lambda m, i: ablation.ablate_heads(m, i, [(0, 1, 2)]), r"list of \(layer, head\) pairs"),
    (lambda m, i: ablation.ablate_heads(m, i, []), r"heads=\[\] must be a non-empty list"),
    (lambda m, i: ablation.ablate_heads(m, i, [(0.0, 1)]), r"head \(layer=0.0, head=1\) .* whole number"),
    (lambda m, i: ablation.ablate_heads(m, i, [(0, 4)]), r"head \(layer=0, head=4\) does not exist.*0..3"),
    (lambda m, i: ablation.ablate_heads(m, i, [(0, 0)], how="half"), r"how='half' is not an ablation"),
    (lambda m, i: ablation.ablate_heads(m, i, [(0, 1)], how="resample"), r"pass reference="),
    (lambda m, i: ablation.ablate_heads(m, i, [(0, 1)], reference=i),
     r"zero ablation reads no reference and no roles: leave them out"),
    (lambda m, i: ablation.ablate_heads(m, i, [(0, 1)], "resample", reference=i, roles=ROLES),
     r"roles= is for mean ablation"),
    (lambda m, i: ablation.ablate_heads(m, i, [(0, 1)], "resample", reference=i[:, :4]),
     r"reference has shape \(3, 4\), idx \(3, 10\): resample ablation .* idx's shape"),
    (lambda m, i: ablation.ablate_heads(m, i, [(0, 1)], "mean", reference=i[:1], roles=ROLES),
     r"reference has shape \(1, 10\), idx \(3, 10\): mean ablation"),
    (lambda m, i: ablation.ablate_heads(m, i, [(0, 1)], "mean"),
     r"rows of different lengths do not line up .* pass roles=.* -1 for padding .*torch.arange"),
    (lambda m, i: ablation.ablate_heads(m, i, [(0, 1)], "mean", roles=ROLES[:, :4]),
     r"roles has shape \(3, 4\), idx \(3, 10\): pass one role per position"),
    (lambda m, i: ablation.ablate_heads(m, i, [(0, 1)], "mean", roles=ROLES.float()),
     r"roles holds torch.float32, not whole numbers: .*\(roles.long\(\)\)"),
    (lambda m, i: ablation.ablate_heads(m, i, [(0, 1)], "mean", roles=ROLES - 3),
     r"roles holds -3: roles are whole numbers >= 0, and -1 marks padding"),
    (lambda m, i: ablation.ablate_heads(m, i, [(0, 1)], "mean", roles=torch.full((3, 10), -1)),
     r"roles marks every position -1 \(padding\), so there is nothing to average"),
    (lambda m, i: patching.patch_head(m, i, torch.zeros(3, 9, 4, 8), 0, 1), r"clean_z has shape \(3, 9, 4, 8\)"),
    (lambda m, i: patching.patching_shares(m, i, i[:, :5], lambda x: x.mean()), r"pair inputs of equal length"),
    (lambda m, i: patching.patching_shares(m, i, i, lambda x: x.mean()), r"no gap"),
    (lambda m, i: patching.patching_shares(m, i, small_idx(seed=6), lambda x: x.mean() * math.nan),
     r"metric is nan on clean and nan on corrupted inputs: it must return a finite number"),
    (lambda m, i: patching.patching_shares(m, i, small_idx(seed=6), lambda x: x.mean(), "forward"),
     r"direction='forward': choose 'denoise' .* or 'noise'"),
    (lambda m, i: patching.group_share(m, i, small_idx(seed=6), lambda x: x.mean(), (1, 2)),
     r"heads=\(1, 2\) must be a non-empty list"),
    (lambda m, i: patching.mean_logprob(m(i)[0], i, (i > 0).float()), r"must be \(B, T, V\), \(B, T\), \(B, T\) bool"),
    (lambda m, i: patching.mean_logprob(m(i)[0], i, i < 0), r"selects no position"),
    (lambda m, i: patching.mean_logprob(m(i)[0], i.float(), i >= 0),
     r"target holds torch.float32, not token ids"),
    (lambda m, i: patching.mean_logprob(m(i)[0], i + 45, i >= 0),
     r"target holds ids in \[45, 9\d\] where mask is True, outside the vocabulary \[0, 50\)"),
    (lambda m, i: patching.patch_head(m, i, _z(m, i, 0) * math.nan, 0, 1),
     r"clean_z holds NaN or inf"),
    (lambda m, i: patching.patch_head(m, i, _z(m, i, 0)[..., :4], 0, 1),
     r"clean_z has shape \(3, 10, 4, 4\), expected \(B, T, H, d_k\) = \(3, 10, 4, 8\)"),
    (lambda m, i: patching.patch_head(m, i, _z(m, i, 0).tolist(), 0, 1),
     r"clean_z and corrupted are a list and a Tensor: pass tensors"),
    (lambda m, i: ablation.role_means(torch.zeros(3, 10, 8), ROLES.float()),
     r"roles holds torch.float32, not whole numbers"),
    (lambda m, i: ablation.role_means(torch.zeros(3, 10, 8), torch.full((3, 10), -1)),
     r"roles marks every position -1 \(padding\)"),
    (lambda m, i: ablation.role_means(torch.zeros(0, 10, 8), ROLES[:0]),
     r"roles for an input of shape \(0, 10\): there is nothing to average"),
    (lambda m, i: patching.bootstrap_shares(m, i, small_idx(seed=6), i, i > 0, []),
     r"groups is empty: pass at least one group"),
    (lambda m, i: patching.patch_head(m, i, _z(m, i, 0).long(), 0, 1),
     r"clean_z holds torch.int64: pass the head outputs blocks.0.attn.z"),
    (lambda m, i: ablation.ablate_heads(m, i, {(0, 1): 1}), r"heads=\{\(0, 1\): 1\} must be"),
    (lambda m, i: ablation.ablate_heads(m, i[:0], [(0, 1)]),
     r"idx has shape \(0, 10\): pass token ids \(B, T\) with at least one row"),
    (lambda m, i: patching.patching_shares(m, i, small_idx(seed=6), lambda x: x[:, -1, 0]),
     r"metric returned a tensor of shape \(3,\): it must return one number"),
    (lambda m, i: ablation.ablate_heads(m, i, [(torch.tensor(0.0), 1)]),
     r"head \(layer=tensor\(0.\), head=1\) is not a pair of whole numbers: pass ints"),
    (lambda m, i: ablation.ablate_heads(m, i, [(True, 1)]),
     r"is not a pair of whole numbers"),
    (lambda m, i: patching.patching_shares(m, i, small_idx(seed=6), lambda x: None),
     r"metric returned None \(a NoneType\): it must return one number"),
    (lambda m, i: patching.patching_shares(m, i, small_idx(seed=6), lambda x: "a"),
     r"metric returned 'a' \(a str\): it must return one number"),
    (lambda m, i: patching.mean_logprob([1], i, i >= 0),
     r"mean_logprob: logits, target and mask are a list, Tensor, Tensor: pass tensors"),
    (lambda m, i: patching.patching_shares(  # a gap of about 1e-7 of the metric: rounding
        m, i, small_idx(seed=6), lambda x: 1.0 + 1e-7 * float(x[:, -1, 0].mean())),
     r"no gap"),
    (lambda m, i: patching.patching_shares(m, i, small_idx(seed=6), _finite_twice()),
     r"metric is nan with L0H0 patched \(denoise\), though finite on the clean and"),
    (lambda m, i: patching.bootstrap_shares(m, i, i, i, i >= 0, [[(0, 1)]], n=1),
     r"bootstrap_shares.n=1 must be an int >= 2"),
    (lambda m, i: patching.bootstrap_shares(m, i, small_idx(seed=6), i, i >= 0, [(0, 1)]),
     r"heads=\(0, 1\) must be a non-empty list"),
    (lambda m, i: patching.bootstrap_shares(m, i, small_idx(seed=6), i, i >= 0, [[(0, 1)]]),
     r"bootstrap_rows: B=3 rows: a bootstrap needs at least 10, since with fewer the "
     r"resamples repeat the same handful of rows .* pass 10 rows or more"),
    (lambda m, i: patching.bootstrap_shares(m, i, small_idx(seed=6), i, i >= 0, [[(0, 1)]],
                                            seed="a"),
     r"bootstrap_shares.seed='a' must be an int"),
    (lambda m, i: patching.bootstrap_rows(12, 1), r"bootstrap_rows.n=1 must be an int"),
    (lambda m, i: patching.mean_logprob(m(i)[0] * math.nan, i, i >= 0),
     r"mean_logprob: logits hold NaN or inf at 30 of the 30 positions mask selects"),
    (lambda m, i: ablation.replaced_logits(m, i, {(0, -1): 0.0}),
     r"head \(layer=0, head=-1\) does not exist: the model has layers 0..2 and heads 0..3"),
    (lambda m, i: ablation.replaced_logits(m, i, {(0, 4): 0.0}),
     r"head \(layer=0, head=4\) does not exist"),
    (lambda m, i: ablation.replaced_logits(m, i, {(0, 1): 0.0}, where=torch.ones(10) > 0),
     r"replaced_logits: where is \(10,\) torch.bool, idx \(3, 10\): pass a bool tensor of "
     r"idx's shape \(B, T\)"),
    (lambda m, i: ablation.replaced_logits(m, i, {(0, 1): 0.0}, where=torch.ones(3, 10)),
     r"replaced_logits: where is \(3, 10\) torch.float32, idx \(3, 10\): pass a bool"),
    (lambda m, i: ablation.replaced_logits(m, i, {(0, 1): torch.zeros(10, 8)}),
     r"the value for L0H1 has shape \(10, 8\), the head's output \(B, T, d_k\) = "
     r"\(3, 10, 8\): pass a number or a tensor of exactly that shape"),
    (lambda m, i: ablation.replaced_logits(m, i, {(0, 1): math.nan}),
     r"the value for L0H1 is nan: pass a finite number"),
    (lambda m, i: ablation.replaced_logits(m, i, {(0, 1): torch.zeros(3, 10, 8) / 0}),
     r"the value for L0H1 holds NaN or inf"),
    (lambda m, i: ablation.replaced_logits(m, i, {(0, 1): torch.zeros(3, 10, 8).long()}),
     r"the value for L0H1 holds torch.int64, not floats"),
    (lambda m, i: ablation.replaced_logits(m, i, {}),
     r"replaced_logits: values=\{\} must be a non-empty dict"),
    (lambda m, i: ablation.replaced_logits(m, i, {1: 0.0}),
     r"replaced_logits: the key 1 is not a \(layer, head\) pair"),
    (lambda m, i: ablation.head_outputs(m, i, 1),
     r"head_outputs: layers=1 must be a non-empty list of layer numbers in 0..2: .* \[1\]"),
    (lambda m, i: ablation.head_outputs(m, i, [3]), r"head_outputs: layers=\[3\] must be"),
    (lambda m, i: ablation.role_means(torch.full((3, 10, 8), math.nan), ROLES),
     r"role_means: z holds NaN or inf, which would spread to every mean of its role"),
    (lambda m, i: ablation.role_means(torch.zeros(3, 10, 8).long(), ROLES),
     r"role_means: z holds torch.int64, not floats: .* z.float\(\)"),
])
def test_bad_input_names_the_value_the_rule_and_the_fix(call, message):
    model, idx = small_model(), small_idx()
    with pytest.raises(ValueError, match=message):
        call(model, idx)
