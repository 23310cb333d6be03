"""Chapter 8's induction head: a two-layer attention-only model trained on repeated random tokens."""

from __future__ import annotations

import pytest
import torch

from gpt_from_scratch import heads
from gpt_from_scratch.book import induction


def test_induction_scores_read_the_weight_on_the_token_after_the_earlier_copy():
    n, T = 3, 6
    A = torch.zeros(1, 1, 1, T, T)  # (L, B, H, T, T): query t attends to key t - n + 1 only
    for t in range(T):
        A[0, 0, 0, t, max(t - n + 1, 0)] = 1.0
    assert induction.induction_scores(A, n).item() == 1.0
    assert induction.uniform_induction_score(n) == pytest.approx((1 / 4 + 1 / 5 + 1 / 6) / 3)


def test_two_layers_of_attention_grow_an_induction_head_over_a_previous_token_head():
    model = induction.attention_only_model(64, n_max=24)
    losses = induction.train_on_repeats(model, n_min=8, n_max=24, steps=600)
    n = 16
    maps = induction.attention_maps(model, induction.repeated_sequences(
        16, n, 64, torch.Generator().manual_seed(1)))
    scores, previous = induction.induction_scores(maps, n), heads.previous_token_scores(maps)
    base = induction.uniform_induction_score(n)
    assert losses[-1] < 0.5 < 4.0 < losses[0]
    assert scores[1].max() >= 3 * base > scores[0].max()  # in layer 1 only: found by content
    assert previous[0].max() >= 3 * heads.uniform_share(2 * n)
    text = induction.induction_text(scores, previous, n, losses, 64)
    assert "an induction head" in text and f"{scores.max():.2f}" in text
