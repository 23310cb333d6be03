"""Chapter 6's ladder: the rungs against the lecture's own modules, its loop, and the generated prose."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from gpt_from_scratch.book import lessons
from gpt_from_scratch.book.ladder import (
    BIGRAM,
    FINAL,
    FINAL_CONFIG,
    RUNGS,
    BigramModel,
    LadderConfig,
    LadderModel,
    train_rung,
    unigram_loss,
)
from gpt_from_scratch.book.ladder_prose import (
    ladder_frame,
    ladder_text,
    layernorm_lesson,
    mean_std,
    prediction_spread,
)

V, D, T = 65, 32, 8


class Head(nn.Module):  # the lecture's modules (karpathy/ng-video-lecture, gpt.py), dropout left out
    def __init__(self, head_size):
        super().__init__()
        self.key = nn.Linear(D, head_size, bias=False)
        self.query = nn.Linear(D, head_size, bias=False)
        self.value = nn.Linear(D, head_size, bias=False)
        self.register_buffer("tril", torch.tril(torch.ones(T, T)))

    def forward(self, x):
        B, T_, C = x.shape
        k, q = self.key(x), self.query(x)
        wei = q @ k.transpose(-2, -1) * k.shape[-1] ** -0.5
        wei = F.softmax(wei.masked_fill(self.tril[:T_, :T_] == 0, float("-inf")), dim=-1)
        return wei @ self.value(x)


class Heads(nn.Module):
    def __init__(self, num_heads, head_size, proj):
        super().__init__()
        self.heads = nn.ModuleList([Head(head_size) for _ in range(num_heads)])
        self.proj = nn.Linear(D, D) if proj else nn.Identity()

    def forward(self, x):
        return self.proj(torch.cat([h(x) for h in self.heads], dim=-1))


class Lecture(nn.Module):
    """Rung 2 (4 heads, no projection, no FFN) or rung 6 (3 pre-LN blocks, residuals, 4x FFN)."""

    def __init__(self, full):
        super().__init__()
        self.full = full
        self.tok, self.pos = nn.Embedding(V, D), nn.Embedding(T, D)
        n = 3 if full else 1
        self.sa = nn.ModuleList([Heads(4, D // 4, proj=full) for _ in range(n)])
        self.ffwd = nn.ModuleList(
            [nn.Sequential(nn.Linear(D, 4 * D), nn.ReLU(), nn.Linear(4 * D, D)) for _ in range(n)])
        self.ln1 = nn.ModuleList([nn.LayerNorm(D) for _ in range(n)])
        self.ln2 = nn.ModuleList([nn.LayerNorm(D) for _ in range(n)])
        self.ln_f = nn.LayerNorm(D)
        self.lm_head = nn.Linear(D, V)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.size(1)))
        if not self.full:
            return self.lm_head(self.sa[0](x))
        for sa, ffwd, ln1, ln2 in zip(self.sa, self.ffwd, self.ln1, self.ln2):
            x = x + sa(ln1(x))
            x = x + ffwd(ln2(x))
        return self.lm_head(self.ln_f(x))


def _copy_into(ours: LadderModel, lecture: Lecture):
    """The lecture's weights into our rung: per-head q, k, v rows stacked into c_attn (q, k, v order)."""
    with torch.no_grad():
        ours.wte.weight.copy_(lecture.tok.weight)
        ours.wpe.weight.copy_(lecture.pos.weight)
        ours.lm_head.load_state_dict(lecture.lm_head.state_dict())
        for i, block in enumerate(ours.blocks):
            heads = lecture.sa[i].heads
            qkv = [torch.cat([getattr(h, n).weight for h in heads]) for n in ("query", "key", "value")]
            block.attn.c_attn.weight.copy_(torch.cat(qkv))
            if lecture.full:
                block.attn.c_proj.load_state_dict(lecture.sa[i].proj.state_dict())
                block.mlp.c_fc.load_state_dict(lecture.ffwd[i][0].state_dict())
                block.mlp.c_proj.load_state_dict(lecture.ffwd[i][2].state_dict())
                block.ln_1.load_state_dict(lecture.ln1[i].state_dict())
                block.ln_2.load_state_dict(lecture.ln2[i].state_dict())
        if lecture.full:
            ours.ln_f.load_state_dict(lecture.ln_f.state_dict())


@pytest.mark.parametrize("index, full", [(1, False), (5, True)])
def test_rungs_compute_what_the_lecture_computes(index, full):
    torch.manual_seed(0)
    lecture = Lecture(full)
    ours = LadderModel(V, RUNGS[index])
    _copy_into(ours, lecture)
    n_lecture = sum(p.numel() for name, p in lecture.named_parameters()
                    if full or not name.startswith(("ffwd", "ln")))
    assert sum(p.numel() for p in ours.parameters()) == n_lecture
    idx = torch.randint(0, V, (4, T))
    torch.testing.assert_close(ours(idx)[0], lecture(idx), rtol=1e-5, atol=1e-5)


def test_scaled_up_rung_has_the_lecture_models_size():
    with torch.device("meta"):
        model = LadderModel(V, FINAL, FINAL_CONFIG)
    assert sum(p.numel() for p in model.parameters()) == 10_788_929  # gpt.py prints 10.788929 M


def test_switches_leave_out_what_a_rung_lacks():
    single, ffn, stack = (LadderModel(V, RUNGS[i]) for i in (0, 2, 3))
    assert isinstance(single.blocks[0].attn.c_proj, nn.Identity) and single.blocks[0].mlp is None
    assert isinstance(ffn.blocks[0].mlp.c_proj, nn.Identity)
    assert ffn.blocks[0].mlp.c_fc.out_features == D  # the lecture's first FFN: Linear(D, D), ReLU
    assert len(stack.blocks) == 3 and not stack.blocks[0].residual
    assert isinstance(stack.ln_f, nn.Identity)


def test_train_rung_is_reproducible_and_learns():
    data = np.tile(np.arange(5, dtype=np.uint16), 1_000)  # 0 1 2 3 4 0 1 ...: a uniform guess costs ln 5
    config = LadderConfig(eval_iters=5)
    losses = []
    for seed in (0, 0, 1):
        torch.manual_seed(seed)
        losses.append(train_rung(LadderModel(5, RUNGS[0], config), data, data, config, seed,
                                 max_iters=60))
    assert losses[0] == losses[1] and losses[0] != losses[2]
    assert all(loss < math.log(5) - 0.3 for loss in losses)
    torch.manual_seed(0)
    untrained = train_rung(BigramModel(5), data, data, BIGRAM, 0, max_iters=0)
    torch.manual_seed(0)
    trained = train_rung(BigramModel(5), data, data, BIGRAM, 0, max_iters=100)
    assert trained < untrained - 0.3


def test_unigram_loss_is_the_cross_entropy_of_the_frequencies():
    train_ids = np.array([0, 0, 0, 1, 2, 2])
    val_ids = np.array([0, 1, 2, 2, 3])
    counts = torch.tensor([3.0, 1.0, 2.0, 0.0]) + 1  # one pseudo-count each
    logits = torch.log(counts / counts.sum()).expand(len(val_ids), -1)
    expected = F.cross_entropy(logits, torch.from_numpy(val_ids))
    assert unigram_loss(train_ids, val_ids, 4) == pytest.approx(expected.item())


def test_prediction_spread_is_zero_only_for_a_model_that_ignores_its_input():
    torch.manual_seed(0)
    bigram = BigramModel(V)
    x = torch.randint(0, V, (4, T))
    assert prediction_spread(bigram, x) > 0.5
    with torch.no_grad():
        bigram.table.weight.copy_(torch.randn(V)[None].expand(V, -1))  # every row the same
    assert prediction_spread(bigram, x) == pytest.approx(0.0, abs=1e-6)


def _result(name, val, published=None, steps=625, published_steps=5000):
    return dict(name=name, val=val, published=published, steps=steps, published_steps=published_steps)


def test_ladder_text_says_which_rungs_go_the_other_way_and_why():
    results = [_result("bigram", [2.60, 2.61], 2.5, 375, 3000),
               _result("one head", [2.50, 2.52], 2.4),
               _result("no residual", [3.30, 3.31]),
               _result("residual", [2.30, 2.35], 2.08),
               _result("layernorm", [2.34, 2.36], 2.06),
               _result("deeper", [2.345, 2.353]),
               _result("wider", [2.90, 2.91])]
    spread = {"no residual": 0.004, "deeper": 0.8, "wider": 0.2}
    text = ladder_text(results, unigram=3.31, bigram_table=(2.45, 2.48), spread=spread)
    lines = text.splitlines()
    assert lines[0] == "- **one head** lowers the loss (2.60 → 2.51)."
    assert "goes the other way" in lines[1] and "unigram loss (3.31)" in lines[1] and "0.004" in lines[1]
    assert "goes the other way" in lines[3] and "cannot tell" in lines[3]
    assert lines[4] == "- **deeper** leaves the loss where it was (2.35 → 2.35)."
    assert lines[5] == ("- **wider** goes the other way (2.35 → 2.91), below the unigram loss (3.31), so it "
                        "does use its input, but less: its predictions differ from their own average by "
                        "0.20 nats (KL), against 0.80 for the rung before.")
    assert "higher for every rung it reports" in text and "residual (+0.25)" in text
    assert "fewer steps" in text and "**residual** does (2.33)" in text


def test_ladder_text_when_no_rung_beats_the_table():
    results = [_result("a", [2.7, 2.8], 2.5, 5000, 5000), _result("b", [2.6, 2.65], 2.4, 5000, 5000)]
    text = ladder_text(results, unigram=3.3, bigram_table=(2.45, 2.48))
    assert "No rung beats it" in text and "lowers the loss (2.75 → 2.62)" in text
    assert "fewer steps" not in text  # both took all the lecture's steps
    worse = ladder_text([_result("a", [2.5, 2.51]), _result("b", [3.6, 3.61])], 3.3, (2.45, 2.48))
    assert "above even the unigram loss (3.30)" in worse and "use its input" not in worse


def test_frame_and_mean_std():
    pytest.importorskip("pandas")
    frame = ladder_frame([_result("one head", [2.5, 2.7], 2.4), _result("extra", [2.0])])
    assert frame.loc["one head", "ours"] == "2.60 ± 0.14" and frame.loc["extra", "Karpathy"] == "—"
    assert frame.loc["extra", "ours"] == "2.00"
    with pytest.raises(ValueError, match="finite"):
        mean_std([2.0, float("nan")])


def test_layernorm_lesson_is_a_paired_difference_beyond_two_standard_errors(monkeypatch):
    monkeypatch.setattr(lessons, "_LESSONS", {})
    lecture = (_result("residual", [2.36, 2.37, 2.35]), _result("layernorm", [2.35, 2.37, 2.36]))
    faster = (_result("residual", [2.31, 2.34, 2.30]), _result("layernorm", [2.27, 2.28, 2.25]))
    found = layernorm_lesson(lecture, faster, 1e-3, 1e-2)
    assert found.holds and found.text == found.holds_text
    assert found.text.startswith("At the lecture's learning rate (0.001) LayerNorm leaves the "
                                 "loss where it was (a change of 0.000 ± 0.006 nats, 0.0 standard")
    assert "within the seeds' noise" in found.text
    assert "At 0.01, 10 times higher, it lowers it by 0.050 ± 0.006 nats, 8.7 standard" in found.text
    assert found.margin == pytest.approx(0.05 / (0.01 / 3 ** 0.5) - 2, rel=1e-3)
    # One seed that flips, as on another CPU: the same mean, but not beyond the noise.
    flipped = (faster[0], _result("layernorm", [2.27, 2.28, 2.36]))
    lost = layernorm_lesson(lecture, flipped, 1e-3, 1e-2)
    assert not lost.holds and "cannot tell the two rungs apart" in lost.text
    assert lessons.verdicts() == "DOES NOT HOLD: LayerNorm lowers the loss at the raised learning rate"
    worse = layernorm_lesson(lecture, (faster[1], faster[0]), 1e-3, 1e-2)
    assert "it raises it by 0.050" in worse.text and not worse.holds
