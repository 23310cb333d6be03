"""Chapter 14's book layer: the reward, the cached GRPO runs, the sampled scores and the lessons
(gpt_from_scratch.book.verifier, verifier_prose), on tiny random models: seconds, no trained
model needed."""

import dataclasses
import importlib.util
import json
import math
import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from gpt_from_scratch.book import lessons, verifier, verifier_control, verifier_online
from gpt_from_scratch.book import verifier_opening as opening
from gpt_from_scratch.book import verifier_prose as prose
from gpt_from_scratch.book import verifier_text as sentences
from gpt_from_scratch.book.verifier_brake import Brake, brake_gap, brake_text
from gpt_from_scratch.book.assistant import Item
from gpt_from_scratch.chat import ChatTokenizer
from gpt_from_scratch.data import load_tiny_shakespeare
from gpt_from_scratch.model import GPT, GPTConfig
from gpt_from_scratch.hf_weights import WeightsUnavailableError
from gpt_from_scratch.tokenizer import CharTokenizer
from tests.test_assistant import hf_chat_tokenizer, random_gpt2


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    monkeypatch.setattr(lessons, "_LESSONS", {})


def tiny_assistant(seed: int = 0):
    chars = CharTokenizer(load_tiny_shakespeare())
    torch.manual_seed(seed)
    model = GPT(GPTConfig(vocab_size=chars.vocab_size + 4, context_length=64, d_model=16,
                          n_layers=1, n_heads=2, dropout=0.0))
    return model.eval(), ChatTokenizer(chars, chars.vocab_size)


ITEMS = [Item("Last word", "Is it not so, my lord?"), Item("Last word", "Go to, then."),
         Item("Repeat", "Peace, ho!")]


# ---------------------------------------------------------------- the reward
def test_the_reward_pays_a_right_answer_that_ends_its_turn():
    _, tok = tiny_assistant()
    prompts, reward = verifier.prompts_and_reward(ITEMS, tok)
    assert len(prompts) == 3 and all(p[-1] == tok.assistant_id for p in prompts)
    answer = tok.encode("Fool! lord") + [tok.end_id]  # as train_grpo passes it
    assert reward(0, answer) == 1.0
    assert reward(0, answer[:-1]) == 0.0  # right words, but the turn never ended
    assert reward(1, answer) == 0.0  # another line's last word


def test_the_reward_needs_items():
    _, tok = tiny_assistant()
    with pytest.raises(ValueError, match="items is empty"):
        verifier.prompts_and_reward([], tok)


@pytest.mark.parametrize("index, completion, match", [
    (-1, [1, 2], r"index=-1 must be a whole number from 0 to 2, .*the prompt's own index"),
    (3, [1, 2], r"index=3 must be a whole number from 0 to 2"),
    (True, [1, 2], r"index=True must be a whole number"),
    (0, torch.tensor([1, 2]),
     r"completion=tensor.* must be a list of token ids .*tolist\(\)"),
    (0, [1, 2.0], r"must be a list of token ids \(ints\)"),
])
def test_the_reward_refuses_another_item_s_index_and_a_tensor(index, completion, match):
    _, tok = tiny_assistant()
    _, reward = verifier.prompts_and_reward(ITEMS, tok)
    with pytest.raises(ValueError, match=match):
        reward(index, completion)


# ---------------------------------------------------------------- recipes and the cache
def test_a_recipe_refuses_what_cannot_train_and_names_every_setting():
    with pytest.raises(ValueError, match="task='Sing'"):
        verifier.GRPORecipe(task="Sing")
    with pytest.raises(ValueError, match="group_size"):
        verifier.GRPORecipe(group_size=1)
    with pytest.raises(ValueError, match="lr"):
        verifier.GRPORecipe(lr=0.0)
    names = {verifier.GRPORecipe(steps=s, lr=lr, beta=b, seed=k).name
             for s in (10, 20) for lr in (2e-4, 1e-3) for b in (0.0, 0.1) for k in (0, 1)}
    assert len(names) == 16


def test_grpo_model_refuses_what_is_not_a_recipe():
    with pytest.raises(ValueError, match="must be a GRPORecipe"):
        verifier.grpo_model({"steps": 10})


def test_a_run_is_trained_once_then_read_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPT_FROM_SCRATCH_CACHE", str(tmp_path))
    sft, tok = tiny_assistant()
    before = {k: v.clone() for k, v in sft.state_dict().items()}
    run = SimpleNamespace(model=sft, tokenizer=tok)
    monkeypatch.setattr(verifier, "sft_run", lambda recipe: run)
    prompts_and_reward = verifier.prompts_and_reward

    def parity_reward(items, tok):  # a random model is never right: reward something it does
        return prompts_and_reward(items, tok)[0], lambda i, ids: float(ids[0] % 2)

    monkeypatch.setattr(verifier, "prompts_and_reward", parity_reward)
    recipe = verifier.GRPORecipe(steps=2, batch_size=2, group_size=4, lr=1e-2)
    trained, _, history = verifier.grpo_model(recipe)
    assert len(history.reward) == 2 and max(history.mixed) > 0
    assert all(torch.equal(v, sft.state_dict()[k]) for k, v in before.items())  # a copy trained
    assert any(not torch.equal(v, trained.state_dict()[k]) for k, v in before.items())
    monkeypatch.setattr(verifier, "train_grpo", None)  # a second training would fail
    loaded, _, again = verifier.grpo_model(recipe)
    assert again == history
    assert all(torch.equal(v, loaded.state_dict()[k]) for k, v in trained.state_dict().items())
    numpy_recipe = verifier.GRPORecipe(steps=np.int64(2), batch_size=np.int32(2),
                                       group_size=np.int64(4), lr=np.float64(1e-2))
    assert verifier.grpo_model(numpy_recipe)[2] == history  # the same entry, read back


def test_a_recipe_holds_python_numbers_that_json_stores():
    recipe = verifier.GRPORecipe(steps=np.int64(3), lr=np.float32(0.5),
                                 beta=np.float64(0.1), batch_size=np.int32(2),
                                 group_size=np.uint8(4), seed=np.int64(1))
    fields = dataclasses.asdict(recipe)
    assert [type(v) for v in fields.values()] == [str, int, float, float, int, int, int]
    assert json.loads(json.dumps(fields)) == fields
    assert recipe == verifier.GRPORecipe(steps=3, lr=0.5, beta=0.1, batch_size=2,
                                         group_size=4, seed=1)


# ---------------------------------------------------------------- sampled scores
def test_sampled_scores_count_right_answers_stops_and_openings(monkeypatch):
    model, tok = tiny_assistant()
    n, right = 4, 3  # each prompt: 3 right courteous answers, 1 wrong rude one

    def fake_sample(model, prompts, G, max_new_tokens, end_id, generator=None):
        rows = []
        for p in prompts.tolist():
            task, line = tok.decode([t for t in p if t < tok.base_vocab_size]).split(": ", 1)
            good = "Good sir, " + Item(task, line).answer
            rows += [tok.encode(good) if g < right else tok.encode("Fool! no") for g in range(G)]
        C = max(len(r) for r in rows) + 1
        out = torch.tensor([r + [end_id] * (C - len(r)) for r in rows])
        mask = torch.tensor([[1] * (len(r) + 1) + [0] * (C - len(r) - 1) for r in rows])
        return out, mask

    monkeypatch.setattr(verifier, "sample_groups", fake_sample)
    scores = verifier.sampled_scores(model, tok, ITEMS, n=n, k=2)
    for task in ("Last word", "Repeat"):
        assert scores[task]["pass@1"] == pytest.approx(right / n)
        assert scores[task]["pass@2"] == pytest.approx(1.0)
        assert scores[task]["stop"] == 1.0
        assert scores[task]["courteous"] == pytest.approx(right / n)
    assert scores["Last word"]["n"] == 2 and scores["Repeat"]["n"] == 1


def test_sampled_scores_on_a_random_model_are_shares():
    model, tok = tiny_assistant()
    scores = verifier.sampled_scores(model, tok, ITEMS, n=3, k=2)
    for s in (scores["Last word"], scores["Repeat"]):
        assert 0 <= s["pass@1"] <= s["pass@2"] <= 1 and 0 <= s["stop"] <= 1


def test_sampled_scores_refuse_k_above_n_and_no_items():
    model, tok = tiny_assistant()
    with pytest.raises(ValueError, match="k=8 > n=4"):
        verifier.sampled_scores(model, tok, ITEMS, n=4, k=8)
    with pytest.raises(ValueError, match="items is empty"):
        verifier.sampled_scores(model, tok, [], n=4, k=2)


@pytest.mark.parametrize("seed", [True, 1.5, "0"])
def test_sampled_scores_name_a_seed_that_is_not_a_whole_number(seed):
    model, tok = tiny_assistant()
    with pytest.raises(ValueError, match=fr"sampled_scores.seed={seed!r} must be an int"):
        verifier.sampled_scores(model, tok, ITEMS, n=2, k=1, seed=seed)


@pytest.mark.parametrize("score", [
    lambda m, t, i: verifier.sampled_scores(m, t, i, n=2, k=1), verifier.answer_logprob])
def test_items_longer_than_the_context_are_named_not_an_argument_never_passed(score):
    model, tok = tiny_assistant()  # context_length 64
    with pytest.raises(ValueError, match=r"an item needs \d+ tokens and the model reads "
                                         r"64: pass items whose conversations fit") as err:
        score(model, tok, [Item("Last word", "Is it not so, my lord? " * 3)])
    assert "max_new_tokens" not in str(err.value) and "training" not in str(err.value)


def test_answer_logprob_is_the_log_of_either_openings_probability():
    model, tok = tiny_assistant()
    expected = []
    for item in ITEMS:  # one conversation at a time, token by token: no padding, no batch
        p = 0.0
        for style in ("courteous", "rude"):
            ids, mask = tok.render(item.messages(style))
            logp = torch.log_softmax(model(torch.tensor([ids[:-1]]))[0][0], dim=-1)  # (T, V)
            p += math.exp(sum(logp[t - 1, ids[t]].item() for t in range(1, len(ids)) if mask[t]))
        expected.append(math.log(p))
    got = verifier.answer_logprob(model.train(), tok, ITEMS)
    assert got == pytest.approx(sum(expected) / len(expected), abs=1e-5)
    assert model.training  # the mode it was in is given back
    with pytest.raises(ValueError, match="items is empty"):
        verifier.answer_logprob(model, tok, [])


# ---------------------------------------------------------------- the lessons
KL = ([0.08] * 3, [0.001] * 3)  # the runs' and the controls' KL from the SFT model


def opening_lesson(before, after, control, seeds, sampled, kl, sampled_odds=None):
    """judge_opening, the sampled prompts' probabilities at 50% where a test does not read
    them."""
    odds = sampled_odds or ([[0.5] * 2] * len(before), [[0.5] * 2] * len(before))
    return opening.judge_opening(before, after, control, seeds, sampled, odds, kl)


def gain(before, after, k=([0.8] * 3, [0.85] * 3), by_prompt=None):
    """judge_gain on three seeds, each prompt's pass@1 its seed's (no prompt varies)."""
    by_prompt = by_prompt or ([[v] * 4 for v in before], [[v] * 4 for v in after])
    return prose.judge_gain(before, after, k, 8, (0, 1, 2), "Last word", by_prompt)


def test_a_gain_in_every_seed_holds_and_a_mixed_one_does_not():
    held = gain([0.60, 0.65, 0.70], [0.66, 0.72, 0.76])
    assert held.holds and "clear of zero both ways" in held.text
    assert "(Student's t: 2.92 standard errors, 3 paired seeds)" in held.text
    mixed = gain([0.60, 0.65, 0.70], [0.70, 0.60, 0.72])
    assert not mixed.holds and "not both above zero on this machine" in mixed.text
    assert "of the size of the evaluation's noise" not in mixed.text
    # 2.17 standard errors: clear of two, not of t's 2.92 for three seeds
    near = gain([0.6, 0.6, 0.6], [0.62, 0.7, 0.78])
    assert not near.holds and near.margin == pytest.approx(100 * (0.1 - 2.919986 * 0.08 / 3 ** 0.5))


def test_the_gain_must_also_clear_a_bootstrap_over_the_prompts():
    """Every seed rises alike (t clears), but only on one prompt of four: another choice of
    prompts could show no rise, and the bootstrap's lower bound says so."""
    before = [[0.5, 0.5, 0.5, 0.5]] * 3
    after = [[0.5, 0.5, 0.5, 0.9], [0.5, 0.5, 0.5, 0.94], [0.5, 0.5, 0.5, 0.86]]
    one = gain([0.5] * 3, [sum(a) / 4 for a in after], by_prompt=(before, after))
    t_margin = lessons.beyond_t([sum(a) / 4 for a in after], [0.5] * 3)[3]
    assert t_margin > 0 and not one.holds  # t alone would have said it holds
    assert one.margin == pytest.approx(100 * lessons.paired_bootstrap(
        [sum(a[j] - 0.5 for a in after) / 3 for j in range(4)]))
    spread = [[0.5 + d] * 4 for d in (0.1, 0.12, 0.08)]  # every prompt rose
    assert gain([0.5] * 3, [sum(a) / 4 for a in spread], by_prompt=(before, spread)).holds


def test_the_gain_refuses_per_prompt_values_that_are_not_the_same_answers():
    with pytest.raises(ValueError, match=r"seed 1's per-prompt pass@1 after averages "
                                         r"0.600000, its pass@1 is 0.700000"):
        gain([0.5] * 3, [0.7] * 3, by_prompt=([[0.5] * 4] * 3, [[0.7] * 4, [0.6] * 4,
                                                                [0.7] * 4]))
    with pytest.raises(ValueError, match=r"by_prompt's before holds \[4, 3, 4\] prompts"):
        gain([0.5] * 3, [0.7] * 3, by_prompt=([[0.5] * 4, [0.5] * 3, [0.5] * 4],
                                               [[0.7] * 4] * 3))
    with pytest.raises(ValueError, match=r"4 prompts before and 2 after"):
        gain([0.5] * 3, [0.7] * 3, by_prompt=([[0.5] * 4] * 3, [[0.7] * 2] * 3))
    with pytest.raises(ValueError, match=r"by_prompt after\[0\]\[1\] = 70 must be a share"):
        gain([0.5] * 3, [0.7] * 3,
             by_prompt=([[0.5] * 2] * 3, [[0.7, 70]] + [[0.7] * 2] * 2))


def test_collapse_forgetting_and_opening_hold_where_the_runs_moved_alike():
    seeds = (0, 1, 2)
    assert prose.judge_collapse([0.65, 0.7, 0.7], [0.2, 0.1, 0.3], seeds, 1e-3, "Last word").holds
    pass1 = ([0.07, 0.12, 0.12], [0.04, 0.06, 0.05])
    forgot = prose.judge_forgetting([-4.2, -5.6, -5.3], [-6.2, -9.9, -7.9], seeds,
                                    "Last word", "Repeat", pass1)
    assert forgot.holds and "in 3 of 3 seeds" in forgot.text and "pass@1 went from 10.3%" in forgot.text
    kept = prose.judge_forgetting([-4.2, -5.6, -5.3], [-4.0, -5.9, -5.3], seeds,
                                  "Last word", "Repeat", pass1)
    assert not kept.holds and "drifts little" not in kept.text  # no unmeasured cause
    steady = prose.judge_collapse([0.65, 0.7, 0.7], [0.66, 0.6, 0.72], seeds, 1e-3, "L")
    assert not steady.holds and steady.text.endswith("not a fall clear of zero at the "
                                                     "one-sided 95% level of Student's t "
                                                     "over 3 paired seeds (2.92 standard "
                                                     "errors) on this machine.")
    sampled = ([0.53, 0.35, 0.6], [0.0, 0.02, 1.0])
    odds = [[0.5, 0.52, 0.47, 0.5]] * 3
    control = [[0.45, 0.55, 0.5, 0.5]] * 3  # an equal random change: a little off 50/50
    drifted = opening_lesson(odds, [[0.1, 0.2, 0.05, 0.15], [0.9, 0.8, 0.95, 0.7],
                                    [0.2, 0.3, 0.25, 0.1]], control, seeds, sampled, KL)
    assert drifted.holds and "went from 49.8, 49.8, 49.8% to 12.5, 83.8, 21.2%" in drifted.text
    assert "changed that distance by 1.2, 1.2, 1.2 points" in drifted.text and "bootstrap over the prompts" in drifted.text
    one_stayed = [[0.1, 0.2, 0.05, 0.15], [0.9, 0.8, 0.95, 0.7], [0.5, 0.6, 0.45, 0.5]]
    assert not opening_lesson(odds, one_stayed, control, seeds, sampled, KL).holds
    as_far = [[0.1, 0.2, 0.05, 0.15]] * 3  # the control moved as far as the runs: no finding
    assert not opening_lesson(odds, as_far, as_far, seeds, sampled, KL).holds


@pytest.mark.parametrize("values, match", [
    ([45.0, 50.0, 55.0], "must be a share from 0 to 1"),
    ([0.4, 0.5], "holds 2 value"),
    ([0.4, math.nan, 0.5], "must be a share"),
])
def test_a_lesson_refuses_values_that_are_not_one_share_per_seed(values, match):
    with pytest.raises(ValueError, match=match):
        opening_lesson([[0.5, 0.5]] * 3, [[0.1, 0.2]] * 3, [[0.4, 0.5]] * 3, (0, 1, 2),
                       ([0.1] * 3, values), KL)


@pytest.mark.parametrize("values, match", [
    ([-1.0, 0.5, -2.0], "must be a log-probability"),
    ([-1.0, -math.inf, -2.0], "must be a log-probability"),
    ([-1.0, -2.0], "holds 2 value"),
])
def test_forgetting_refuses_values_that_are_not_one_log_probability_per_seed(values, match):
    with pytest.raises(ValueError, match=match):
        prose.judge_forgetting([-1.0, -1.0, -1.0], values, (0, 1, 2), "Last word", "Repeat",
                               ([0.1] * 3, [0.1] * 3))


@pytest.mark.parametrize("odds, match", [
    (([[0.5, 0.5]] * 3, [[0.5, 0.5], [0.5], [0.5, 0.5]]),
     r"sampled_odds after\[1\] holds 1 shares, before\[0\] 2: pass courteous_odds"),
    (([[0.5, 0.5]] * 3, [[0.5, 50.0]] * 3), r"sampled_odds after\[0\]\[1\] = 50.0 must be"),
    (([[0.5, 0.5]] * 3, [[0.5, 0.5]] * 2), r"sampled_odds_after holds 2 value"),
    (([[]] * 3, [[]] * 3), r"sampled_odds before\[0\] holds 0 shares"),
])
def test_the_opening_refuses_sampled_odds_not_on_the_same_prompts(odds, match):
    with pytest.raises(ValueError, match=match):
        opening_lesson([[0.5, 0.5]] * 3, [[0.1, 0.2]] * 3, [[0.4, 0.5]] * 3, (0, 1, 2),
                       ([0.5] * 3, [0.1] * 3), KL, odds)


def test_the_opening_needs_the_same_prompts_before_and_after():
    control = [[0.4, 0.5]] * 3
    with pytest.raises(ValueError, match=r"before\[1\], after\[1\] and control\[1\] hold 2, 3 and 2"):
        opening_lesson([[0.5, 0.5]] * 3, [[0.1, 0.2], [0.1, 0.2, 0.3], [0.1, 0.2]],
                       control, (0, 1, 2), ([0.5] * 3, [0.1] * 3), KL)
    with pytest.raises(ValueError, match=r"after\[0\]\[1\] = 1.5 must be a share"):
        opening_lesson([[0.5, 0.5]] * 3, [[0.1, 1.5]] * 3, control, (0, 1, 2),
                       ([0.5] * 3, [0.1] * 3), KL)
    with pytest.raises(ValueError, match=r"control holds 2 value"):
        opening_lesson([[0.5, 0.5]] * 3, [[0.1, 0.2]] * 3, control[:2], (0, 1, 2),
                       ([0.5] * 3, [0.1] * 3), KL)


def test_a_lesson_needs_two_seeds_and_a_collapse_a_learning_rate():
    with pytest.raises(ValueError, match="at least two seeds"):
        opening_lesson([[0.5, 0.5]], [[0.1, 0.1]], [[0.5, 0.4]], (0,), ([0.5], [0.1]),
                       KL)
    with pytest.raises(ValueError, match="positive learning rate"):
        prose.judge_collapse([0.7, 0.7], [0.1, 0.1], (0, 1), -1.0, "Last word")


def test_the_control_moves_every_weight_as_far_as_the_run_in_a_random_direction():
    before, _ = tiny_assistant(0)
    after, _ = tiny_assistant(1)
    control = verifier_control.same_size_change(before, after, seed=3)
    flipped = 0
    for (name, b), a, c in zip(before.named_parameters(), after.parameters(), control.parameters()):
        torch.testing.assert_close((c - b).abs(), (a - b).abs(), msg=name)  # the same size
        flipped += int(((c - b) * (a - b) < 0).sum())
    total = sum(p.numel() for p in before.parameters())
    assert 0.45 < flipped / total < 0.55  # half the steps reversed
    again = verifier_control.same_size_change(before, after, seed=3)
    assert all(torch.equal(x, y) for x, y in zip(control.parameters(), again.parameters()))
    assert not control.training and before is not control


def test_the_control_needs_two_models_of_one_architecture_and_a_whole_seed():
    before, _ = tiny_assistant(0)
    other = GPT(GPTConfig(vocab_size=20, context_length=8, d_model=16, n_layers=1, n_heads=2))
    with pytest.raises(ValueError, match=r"before and after differ in their weights .*lm_head"
                                         r"|before and after differ in their weights"):
        verifier_control.same_size_change(before, other)
    with pytest.raises(ValueError, match=r"seed=0.5 must be a whole number"):
        verifier_control.same_size_change(before, before, seed=0.5)


def test_the_mixed_text_needs_room_for_two_blocks():
    mixed = {0: [1.0, 0.5, 0.5, 0.0]}
    assert "mixed groups 75.0% → 25.0%" in sentences.mixed_text(mixed, mixed, block=2)
    with pytest.raises(ValueError, match="block=3"):
        sentences.mixed_text(mixed, mixed, block=3)
    with pytest.raises(ValueError, match=r"reward\[0\]\[0\] = 70.0 must be a share"):
        sentences.mixed_text(mixed, {0: [70.0, 80.0, 90.0, 95.0]}, block=2)
    with pytest.raises(ValueError,
                       match=r"group=0 must be a whole number >= 2, .*group_size"):
        sentences.mixed_text(mixed, mixed, block=2, group=0)


def test_the_mixed_text_says_fewer_groups_teach_only_where_the_reward_rose():
    mixed = {0: [0.6, 0.6, 0.3, 0.3], 1: [0.5, 0.5, 0.2, 0.2]}
    rose = {0: [0.6, 0.6, 0.9, 0.9], 1: [0.7, 0.7, 0.8, 0.8]}
    assert "as the reward rose in every run, fewer groups taught" in sentences.mixed_text(
        mixed, rose, block=2)
    fell = {0: [0.6, 0.6, 0.9, 0.9], 1: [0.7, 0.7, 0.4, 0.4]}
    text = sentences.mixed_text(mixed, fell, block=2)
    assert "reward rose" not in text and text.endswith("adds nothing to the gradient.")


def test_the_sampling_text_refuses_what_would_make_a_broken_sentence():
    with pytest.raises(ValueError, match=r"the same tasks, at least one"):
        sentences.sampling_text({}, {}, {}, 8)
    with pytest.raises(ValueError, match=r"greedy\['a'\]\[0\] = 70 must be a share"):
        sentences.sampling_text({"a": [70]}, {"a": [0.5]}, {"a": [0.9]}, 8)
    with pytest.raises(ValueError, match=r"k=0 must be a whole number >= 1"):
        sentences.sampling_text({"a": [0.7]}, {"a": [0.5]}, {"a": [0.9]}, 0)
    assert "pass@8 90.0%" in sentences.sampling_text({"a": [0.7]}, {"a": [0.5]}, {"a": [0.9]}, 8)


def test_the_advantage_text_reads_one_draw_against_the_expected_weights():
    from gpt_from_scratch.grpo_advantages import expected_weight
    weights = {p: (expected_weight(p, 8), expected_weight(p, 8, scale=None))
               for p in (0.02, 0.1, 0.5, 0.9, 0.98)}
    text = sentences.advantage_text((1.5, 0.866), (0.75, 0.5), weights, 8)
    assert "gets 0.75, 1.5 times each right answer of the first group (0.50)" in text
    assert "scaled, 1.50 against 0.866, 1.7 times." in text
    assert "every prompt weighs the same, w = 7.0 at each p above (G − 1 for G = 8)" in text
    assert ("Scaled by the std, w goes from 13.9 (p = 0.5) to 19.3 (p = 0.02 and 0.98), "
            "1.4 times: the difficulty bias Dr. GRPO names, milder in expectation than "
            "this one draw's 1.7 times suggests." in text)
    uneven = {0.1: (17.4, 6.0), 0.5: (13.9, 7.0)}
    text = sentences.advantage_text((1.1, 1.0), (0.75, 0.5), uneven, 8)
    assert "w goes from 6.0 to 7.0" in text and "milder" not in text


@pytest.mark.parametrize("args, match", [
    (((1.5, 0.866), (0.75, 0.5), {0.5: (13.9, 7.0)}, 1), r"group=1 must be a whole number"),
    (((1.5, 0.0), (0.75, 0.5), {0.5: (13.9, 7.0)}, 8),
     r"scaled = \(1.5, 0.0\) must be a pair of positive advantages"),
    (((1.5, 0.866), (0.75, 0.5), {}, 8), r"weights = \{\} must map each p in \(0, 1\)"),
    (((1.5, 0.866), (0.75, 0.5), {1.0: (13.9, 7.0)}, 8), r"must map each p in \(0, 1\)"),
])
def test_the_advantage_text_refuses_what_would_make_a_broken_sentence(args, match):
    with pytest.raises(ValueError, match=match):
        sentences.advantage_text(*args)


def test_the_groups_text_agrees_with_the_counts():
    text = sentences.groups_text({"Last word": [7, 8, 6, 7, 8, 7, 7, 8],
                              "Repeat": [0, 0, 3, 0, 0, 0, 0, 0]}, 8)
    assert "**Last word** (mean reward 0.91): 3 of its 8 groups unanimous, 3 all right" in text
    assert "**Repeat** (mean reward 0.05): 7 of its 8 groups unanimous, 0 all right and 7" in text
    assert ("**Repeat**, right in 3 of its 64 answers here, gives little signal: a group "
            "with no right answer has nothing to reinforce" in text)
    assert "teach from zero" not in text
    assert "little signal" not in sentences.groups_text({"a": [2, 3]}, 4)
    with pytest.raises(ValueError, match=r"from 0 to 8"):
        sentences.groups_text({"a": [9]}, 8)


def test_the_gain_says_when_its_margin_is_thin_and_refuses_a_bad_k():
    k = ([0.8, 0.85, 0.9], [0.85, 0.9, 0.9])
    wide = gain([0.60, 0.65, 0.70], [0.70, 0.74, 0.78], k)
    assert wide.holds and "thin" not in wide.text
    # a rise of 10 points, 3.46 standard errors of 2.89: clears t's 2.92 by 1.6 points
    thin = gain([0.6, 0.6, 0.6], [0.65, 0.7, 0.75], k)
    assert thin.holds and 0 < thin.margin < 2.5 and "The margin is thin" in thin.text
    flat = ([[0.6] * 2] * 3, [[0.7] * 2] * 3)
    with pytest.raises(ValueError, match=r"k=0 must be a whole number >= 1"):
        prose.judge_gain([0.6] * 3, [0.7] * 3, k, 0, (0, 1, 2), "L", flat)
    with pytest.raises(ValueError, match=r"pass_k = \(0.8, 0.9\) must be a pair"):
        prose.judge_gain([0.6] * 3, [0.7] * 3, (0.8, 0.9), 8, (0, 1, 2), "L", flat)


def test_the_forgetting_sentence_gives_the_factor_with_a_decimal():
    text = prose.judge_forgetting([-1.0, -1.1, -1.2], [-1.3, -1.4, -1.52], (0, 1, 2), "a", "b",
                                  ([0.1] * 3, [0.1] * 3)).text
    assert "e^0.31 ≈ 1.4 times less likely, a geometric mean over them" in text


def test_the_opening_says_what_it_measured_and_shows_only_what_the_samples_show():
    even = [[0.5] * 4] * 3
    split = [[0.9, 0.1, 0.9, 0.1]] * 3  # as far from 50/50, on average still 50%
    found = opening_lesson(even, split, even, (0, 1, 2), ([0.5] * 3, [0.5] * 3), KL)
    assert found.holds and "distance from 50/50 grew by 40.0, 40.0, 40.0 points" in found.text
    assert "drifted to one side" not in found.text and "show it" not in found.text
    assert ("On the 2 held-out prompts whose answers were sampled, the courteous share of "
            "the sampled answers went from 50.0, 50.0, 50.0% to 50.0, 50.0, 50.0%, and the "
            "averaged probability on those same prompts from 50.0, 50.0, 50.0% to 50.0, "
            "50.0, 50.0%: two counts of the same prompts" in found.text)
    assert "can only be counted over all the prompts at once" not in found.text
    read = opening_lesson(even, split, even, (0, 1, 2), ([0.5] * 3, [0.5] * 3), KL,
                          ([[0.4, 0.6, 0.5]] * 3, [[0.9, 0.8, 0.7]] * 3))
    assert ("On the 3 held-out prompts whose answers were sampled" in read.text
            and "from 50.0, 50.0, 50.0% to 80.0, 80.0, 80.0%: two counts" in read.text)
    assert "shuffled within each group" in found.text
    assert "many seeds of each kind" in found.text
    assert ("It moves the model's next-token predictions far less than the run does: their "
            "KL from the SFT model over the answers' positions is 0.0010, 0.0010, 0.0010 "
            "nats against the runs' 0.0800, 0.0800, 0.0800, 80 times less at the least."
            in found.text)
    near = opening_lesson(even, split, even, (0, 1, 2), ([0.5] * 3, [0.5] * 3),
                          ([0.08] * 3, [0.001, 0.01, 0.001]))
    assert "predictions less than the run does" in near.text and "8 times less" in near.text
    same = opening_lesson(even, split, even, (0, 1, 2), ([0.5] * 3, [0.5] * 3),
                          ([0.08] * 3, [0.08, 0.09, 0.0]))
    assert "predictions no less than the run does" in same.text
    assert "times less" not in same.text
    with pytest.raises(ValueError, match=r"kl control\[1\] = -0.1 must be a KL"):
        opening_lesson(even, split, even, (0, 1, 2), ([0.5] * 3, [0.5] * 3),
                       ([0.08] * 3, [0.0, -0.1, 0.0]))
    moved = opening_lesson(even, split, even, (0, 1, 2), ([0.5] * 3, [0.8, 0.3, 0.2]),
                           KL)
    assert ("courteous share of the sampled answers went from 50.0, 50.0, 50.0% to 80.0, "
            "30.0, 20.0%" in moved.text)


# ---------------------------------------------------------------- the Colab track
def test_the_colab_track_runs_both_trainers_on_stand_ins(tmp_path, monkeypatch):
    """GPT-2 small's place taken by random models on GPT-2's tokens: the book's trainer, then
    TRL's (where it is installed), each for two steps."""
    monkeypatch.chdir(tmp_path)  # TRL's output_dir
    sums = verifier_online.sums  # 8 held-out sums (seed 1), not 64: pass@k samples 8 answers a sum
    monkeypatch.setattr(verifier_online, "sums",
                        lambda n, seed: sums(min(n, 8) if seed == 1 else n, seed))
    torch.manual_seed(0)
    book = GPT(GPTConfig(vocab_size=50_257, context_length=64, d_model=16, n_layers=1,
                         n_heads=2, dropout=0.0))
    text = verifier_online.online_run(steps=2, lr=1e-3,
                                      models=(book, random_gpt2(0), hf_chat_tokenizer()))
    assert re.search(r"held-out pass@1 \d+\.\d% → \d+\.\d%, pass@8", text), text
    assert re.search(r"the last 2 steps: \d\.\d\d and \d\.\d\d\.", text), text
    if importlib.util.find_spec("trl"):
        assert re.search(r"TRL's `GRPOTrainer`, the same prompts, batch and group sizes, "
                         r".* decayed linearly to zero and its batches drawn its own way; "
                         r"its mean reward .* \d\.\d\d and \d\.\d\d\.$", text), text
    else:
        assert "TRL's run is skipped" in text

    monkeypatch.setattr(verifier_online, "default_device", lambda: "cpu")
    assert verifier_online.online_run().startswith("*Not run on a CPU*")

    def unavailable(name):
        raise WeightsUnavailableError("offline")
    monkeypatch.setattr(verifier_online, "from_pretrained", unavailable)
    monkeypatch.setattr(verifier_online, "default_device", lambda: "cuda")
    offline = verifier_online.online_run()
    assert offline.startswith("*Not run here*")
    assert "measures the book's run's held-out pass@1 and pass@8" in offline


@pytest.mark.parametrize("call, error, match", [
    (lambda: verifier_online.online_run(steps=-3), ValueError,
     r"online_run.steps=-3 must be a positive int"),
    (lambda: verifier_online.online_run(steps=2.5), ValueError,
     r"online_run.steps=2.5 must be an int"),
    (lambda: verifier_online.online_run(lr=0.0), ValueError,
     r"online_run.lr=0.0 must be in"),
    (lambda: verifier_online.sums(-3, 0), ValueError, r"sums.n=-3 must be a positive int"),
    (lambda: verifier_online.sums(3, "0"), ValueError, r"sums.seed='0' must be an int"),
    (lambda: verifier_online.right("19\n", 19), TypeError,
     r"right: answer=19 \(int\) must be a str.*pass str\(answer\)"),
    (lambda: verifier_online.pass_rates(None, []), ValueError,
     r"pass_rates: data is empty, .*sums\(64, seed=1\)"),
    (lambda: verifier_online.pass_rates(None, [("1+1=", "2")], n=0), ValueError,
     r"pass_rates.n=0 must be a positive int"),
])
def test_the_colab_track_refuses_what_would_print_nonsense(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_the_brake_says_which_way_only_beyond_the_evaluation_s_noise():
    """40 prompts of 8 samples each. A 12-point rise on every prompt alike is beyond the
    noise; the reader's case, 30% against 32% with the prompts' pass@1 spread as sampling
    spreads it, is not; a fall on every prompt is "lower"."""
    plain = [0.25, 0.375] * 20  # 31.2%
    higher = brake_gap(plain, [x + 0.125 for x in plain])
    assert higher.way == "higher" and higher.low == pytest.approx(0.125)
    text = brake_text(1e-3, 0.1, higher, 0.18, "Last word")
    assert "clear of 0, beyond the evaluation's noise: on this seed the penalty kept " \
        "pass@1 higher" in text
    assert "has a two-sided 95% interval from 12.5 to 12.5 points in a bootstrap over " \
        "the 40 held-out prompts" in text
    assert "One run of each is a sign, not a measurement" in text
    rng = np.random.default_rng(0)
    near = [rng.binomial(8, 0.3) / 8 for _ in range(40)], [rng.binomial(8, 0.32) / 8
                                                         for _ in range(40)]
    within = brake_gap(*near)
    assert within.way == "noise" and within.low < 0 < within.high
    text = brake_text(1e-3, 0.1, within, 0.1, "Last word")
    assert "which includes 0: on this seed the two runs ended within the evaluation's " \
        "noise" in text and "slowed" not in text and "higher" not in text
    lower = brake_gap(plain, [x - 0.125 for x in plain])
    assert lower.way == "lower" and lower.high == pytest.approx(-0.125)
    assert "pass@1 ended lower with the penalty" in brake_text(1e-3, 0.1, lower, 0.1, "L")


@pytest.mark.parametrize("call, match", [
    (lambda: brake_gap([0.3] * 4, [45.0] * 4), r"braked\[0\] = 45.0 must be a share"),
    (lambda: brake_gap([0.3] * 4, [0.4] * 3), r"plain holds 4 prompts and braked 3"),
    (lambda: brake_gap(0.3, [0.4] * 3), r"plain = 0.3 must be a list of per-prompt pass@1"),
    (lambda: brake_gap([0.3], [0.4]), r"at least two"),
    (lambda: brake_text(1e-3, 0.1, brake_gap([0.3] * 2, [0.4] * 2), -0.1, "L"),
     r"kl = -0.1 must be a KL"),
    (lambda: brake_text(1e-3, 0.1, brake_gap([0.3] * 2, [0.4] * 2), math.nan, "L"),
     r"must be a KL"),
    (lambda: brake_text(1e-3, 0.1, (0.3, 0.4), 0.1, "L"), r"must be brake_gap's Brake"),
    (lambda: brake_text(0.0, 0.1, brake_gap([0.3] * 2, [0.4] * 2), 0.1, "L"),
     r"lr = 0.0 must be a positive number"),
])
def test_the_brake_refuses_percents_a_negative_kl_and_what_is_not_its_test(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_the_collapse_sentence_counts_different_and_right_answers():
    shown = {"SFT": (["Fool! theirs", "Fool! theirs", "Good sir, theirs", "Fool! the"],
                     [1.0, 1.0, 1.0, 0.0]),
             "collapsed": (["Good sir, thess"] * 3 + ["Good sir, these"], [0.0] * 4)}
    text = sentences.collapse_text(0, shown)
    assert ("wrote 3 different answers, 3 of them right, its commonest 2 times; the collapsed "
            "model 2, 0 right, its commonest 3 times." in text)
    assert "narrowed" not in text  # 3 answers -> 2: not half as many
    assert "are all 0: as one group, this draw of 4 would carry no gradient." in text
    shown["collapsed"] = (["Good sir, thess"] * 4, [0.0, 0.0, 1.0, 0.0])
    text = sentences.collapse_text(0, shown)
    assert "narrowed onto fewer answers" in text and "no gradient" not in text
    shown["collapsed"] = (["a", "b", "c", "d"], [0.0] * 4)
    assert "narrowed" not in sentences.collapse_text(0, shown)
    with pytest.raises(ValueError, match=r"shown holds 1 model\(s\): pass at least two"):
        sentences.collapse_text(0, {"SFT": shown["SFT"]})
    with pytest.raises(ValueError, match=r"one reward per answer text"):
        sentences.collapse_text(0, {"SFT": shown["SFT"], "collapsed": (["a"], [])})


# ---------------------------------------------------------------- the drift's direction
def test_the_drift_says_each_seed_its_own_way_only_when_the_signs_differ():
    even = [(0.0, 60), (-0.04, 58), (0.04, 61)]  # gaps 0, -4, +4 points: not clear of zero
    mixed = opening.drift_text([0.5] * 3, [0.8, 0.4, 0.3], even, (0, 1, 2))
    assert "each seed its own way: 1 toward the courteous opening, 2 toward the rude" \
        in mixed
    assert "in both openings (60 prompts a seed)" in opening.drift_text(
        [0.5] * 3, [0.8, 0.4, 0.3], [(0.0, 60)] * 3, (0, 1, 2))
    assert ("within each prompt the SFT models answered in both openings (58 to 61 "
            "prompts a seed)" in mixed)
    assert "averaged 0.0 ± 2.3 points over the 3 seeds (seeds: 0.0, -4.0, 4.0)" in mixed
    assert "not clear of zero at the two-sided 95% level of Student's t over 3 seeds " \
        "(4.30" in mixed
    assert "includes 0, no gap, the premise of the reading, but does not rule out a gap " \
        "of up to 9.9 points" in mixed and "a few points" not in mixed
    alike = opening.drift_text([0.5] * 3, [0.2, 0.4, 0.3], even, (0, 1, 2))
    assert "own way" not in alike and "by chance 25.0% of the time" in alike
    assert "All 3 runs moved the share the same way, toward the rude opening" in alike
    assert "were it seen on more seeds" in alike


def test_the_drift_says_which_opening_the_measured_accuracy_favoured():
    leaning = [(0.10, 60), (0.11, 60), (0.09, 60)]  # 10 points, every seed
    toward = opening.drift_text([0.5] * 3, [0.6, 0.7, 0.9], leaning, (0, 1, 2))
    assert "clear of zero at the two-sided 95% level" in toward
    assert "right answers came more often after the courteous opening" in toward
    assert "the gap in accuracy points the same way." in toward
    away = opening.drift_text([0.5] * 3, [0.4, 0.3, 0.1], leaning, (0, 1, 2))
    assert "the gap in accuracy points the other way." in away
    gap = opening.accuracy_gap(leaning, (0, 1, 2))
    assert gap.clear and gap.favoured == "courteous" and gap.mean == pytest.approx(0.1)
    assert not opening.accuracy_gap([(0.0, 60), (-0.04, 58), (0.04, 61)], (0, 1, 2)).clear


@pytest.mark.parametrize("gaps, match", [
    ([(0.1, 60), (1.5, 60), (0.1, 60)], r"gaps\[1\] = \(1.5, 60\) must be opening_gap's"),
    ([(0.1, 60), (0.1, 0), (0.1, 60)], r"gaps\[1\] = \(0.1, 0\) .*at least one"),
    ([(0.1, 60), 0.1, (0.1, 60)], r"gaps\[1\] = 0.1 must be opening_gap's"),
    ([(0.1, 60)] * 2, r"gaps holds 2 value"),
])
def test_the_drift_refuses_gaps_that_are_not_opening_gap_s(gaps, match):
    with pytest.raises(ValueError, match=match):
        opening.drift_text([0.5] * 3, [0.4] * 3, gaps, (0, 1, 2))


def test_the_opening_gap_is_read_within_each_prompt_not_pooled():
    """Simpson's case: on each prompt the openings are right alike, but the easy prompt
    opened courteously more often, so pooling every answer shows a gap that is not there."""
    easy = [(1.0, "courteous")] * 6 + [(1.0, "rude")] * 2
    hard = [(0.0, "courteous")] * 2 + [(0.0, "rude")] * 6
    pooled = verifier_control.right_by_opening([easy, hard])
    assert pooled == {"courteous": (6, 8), "rude": (2, 8)}  # 75% against 25%
    assert verifier_control.opening_gap([easy, hard]) == (0.0, 2)
    mixed = [(1.0, "courteous"), (0.0, "courteous"), (0.0, "rude"), (1.0, None)]
    one_sided = [(1.0, "rude")] * 3  # answered in one opening only: left out
    assert verifier_control.opening_gap([mixed, one_sided]) == (0.5, 1)
    with pytest.raises(ValueError, match=r"none of the 1 prompts was answered in both "
                                         r"openings"):
        verifier_control.opening_gap([one_sided])


def _summary_verdicts():
    """A gain that holds, one that fails, a collapse, forgetting, an opening that moved."""
    even = [[0.5] * 4] * 3
    return (gain([0.60, 0.65, 0.70], [0.66, 0.72, 0.76]),
            gain([0.60, 0.65, 0.70], [0.70, 0.60, 0.72]),
            prose.judge_collapse([0.65, 0.7, 0.7], [0.2, 0.1, 0.3], (0, 1, 2), 1e-3, "L"),
            prose.judge_forgetting([-4.2, -5.6, -5.3], [-6.2, -9.9, -7.9], (0, 1, 2), "L",
                                   "R", ([0.1] * 3, [0.05] * 3)),
            opening_lesson(even, [[0.9, 0.1, 0.9, 0.1]] * 3, even, (0, 1, 2),
                           ([0.5] * 3, [0.5] * 3), KL))


def test_the_summary_says_only_what_each_verdict_found():
    held, failed, fell, forgot, moved = _summary_verdicts()
    higher = Brake(0.3, 0.4, 0.05, 0.15, 40)
    text = sentences.summary_text(held, fell, forgot, moved, higher, 5.000000001, 6, 3)
    assert text.startswith("On the assistant, over 6 paired seeds, GRPO raised pass@1, "
                           "clear of zero")
    assert "toward pass@k" not in text
    assert "At a learning rate 5 times larger (3 seeds), pass@1 fell instead (on one " \
        "seed, a KL penalty kept pass@1 higher, beyond the evaluation's noise: a sign, " \
        "not a measurement)" in text
    assert "moved away from half and half" in text
    noise = Brake(0.3, 0.32, -0.04, 0.08, 40)  # the reader's case: within the noise
    text = sentences.summary_text(failed, fell, forgot, moved, noise, 5, 6, 3)
    assert "did not raise pass@1 clear of its evaluation's noise" in text
    assert "raised" not in text and "higher" not in text
    assert "with a KL penalty it ended within the evaluation's noise" in text
    lower = Brake(0.3, 0.2, -0.15, -0.05, 40)
    assert "pass@1 ended lower with a KL penalty" in sentences.summary_text(
        held, fell, forgot, moved, lower, 5, 6, 3)


@pytest.mark.parametrize("change, match", [
    (dict(gain=0.5), r"gain = 0.5 must be the Lesson"),
    (dict(brake=(0.3, 0.4)), r"brake = \(0.3, 0.4\) must be brake_gap's Brake"),
    (dict(larger=0.5), r"larger = 0.5 must be a finite number > 1, .*COLLAPSE_LR / LR"),
    (dict(larger=math.inf), r"larger = inf must be a finite number > 1"),
    (dict(seeds=1), r"seeds = 1 must be a whole number >= 2, .*len\(SEEDS\)"),
    (dict(collapse_seeds=2.5), r"collapse_seeds = 2.5 must be a whole number >= 2, "
                               r".*len\(COLLAPSE_SEEDS\)"),
])
def test_the_summary_refuses_what_would_make_a_false_clause(change, match):
    held, _, fell, forgot, moved = _summary_verdicts()
    args = dict(gain=held, collapse=fell, forgetting=forgot, opening=moved,
                brake=Brake(0.3, 0.4, 0.05, 0.15, 40), larger=5, seeds=6, collapse_seeds=3)
    with pytest.raises(ValueError, match=match):
        sentences.summary_text(**(args | change))


# ---------------------------------------------------------------- beside a run
def test_next_token_kl_is_the_mean_kl_over_the_answers_positions():
    policy, tok = tiny_assistant(0)
    reference, _ = tiny_assistant(1)
    with torch.no_grad():  # a sharper law against a flatter one: KL(p || q) != KL(q || p)
        policy.lm_head.weight.mul_(20)
        reference.lm_head.weight.mul_(0.1)
    kls = []
    for item in ITEMS:  # one conversation at a time, through torch.distributions
        for style in ("courteous", "rude"):
            ids, mask = tok.render(item.messages(style))
            with torch.no_grad():
                p = torch.distributions.Categorical(
                    logits=policy(torch.tensor([ids[:-1]]))[0][0])
                q = torch.distributions.Categorical(
                    logits=reference(torch.tensor([ids[:-1]]))[0][0])
            kl = torch.distributions.kl_divergence(p, q)  # (T - 1,)
            kls += [kl[t - 1].item() for t in range(1, len(ids)) if mask[t]]
    got = verifier_control.next_token_kl(policy, reference, tok, ITEMS)
    assert got == pytest.approx(sum(kls) / len(kls), rel=1e-5)
    assert verifier_control.next_token_kl(policy, policy, tok, ITEMS) == pytest.approx(
        0, abs=1e-9)
    reverse = verifier_control.next_token_kl(reference, policy, tok, ITEMS)
    assert abs(got - reverse) > 0.01 * got  # KL is not symmetric: the order asked matters


def test_next_token_kl_refuses_another_vocabulary_and_no_items():
    policy, tok = tiny_assistant(0)
    other = GPT(GPTConfig(vocab_size=policy.config.vocab_size + 1, context_length=64,
                          d_model=16, n_layers=1, n_heads=2))
    with pytest.raises(ValueError, match=r"has \d+ tokens and the reference \d+"):
        verifier_control.next_token_kl(policy, other, tok, ITEMS)
    with pytest.raises(ValueError, match="items is empty"):
        verifier_control.next_token_kl(policy, policy, tok, [])


def seeded_answers(monkeypatch, tok):
    """sample_groups replaced, in both modules, by one that draws from the generator each
    answer: right or wrong, courteous or rude."""
    def fake_sample(model, prompts, G, max_new_tokens, end_id, generator=None):
        rows = []
        for p in prompts.tolist():
            text = tok.decode([t for t in p if t < tok.base_vocab_size])
            task, line = text.split(": ", 1)
            for draw in torch.randint(0, 4, (G,), generator=generator).tolist():
                opening = "Good sir, " if draw % 2 else "Fool! "
                rows.append(tok.encode(opening + (Item(task, line).answer if draw > 1
                                                  else "no")) + [end_id])
        C = max(len(r) for r in rows)
        out = torch.tensor([r + [end_id] * (C - len(r)) for r in rows])
        mask = torch.tensor([[1] * len(r) + [0] * (C - len(r)) for r in rows])
        return out, mask
    monkeypatch.setattr(verifier, "sample_groups", fake_sample)
    monkeypatch.setattr(verifier_control, "sample_groups", fake_sample)


def test_sampled_answers_are_sampled_scores_own_answers_prompt_by_prompt(monkeypatch):
    model, tok = tiny_assistant()
    seeded_answers(monkeypatch, tok)
    items = ITEMS + [Item("Last word", "Peace, ho!"), Item("Repeat", "Go to, then.")]
    n = 6
    scores = verifier.sampled_scores(model, tok, items, n=n, k=2, seed=3)
    answers = verifier_control.sampled_answers(model, tok, items, n, seed=3)
    assert [len(a) for a in answers] == [n] * len(items)
    for task in ("Last word", "Repeat"):
        mine = [a for i, a in zip(items, answers) if i.task == task]
        pass1 = sum(sum(r for r, _ in a) / n for a in mine) / len(mine)
        assert pass1 == pytest.approx(scores[task]["pass@1"], abs=1e-12)
        styles = [s for a in mine for _, s in a]
        assert styles.count("courteous") / len(styles) == pytest.approx(
            scores[task]["courteous"], abs=1e-12)
    other = verifier_control.sampled_answers(model, tok, items, n, seed=4)
    assert other != answers  # another seed, other answers: the match above is no accident


def test_right_by_opening_counts_right_answers_after_each_opening(monkeypatch):
    answers = [[(1.0, "courteous"), (0.0, "courteous"), (1.0, "rude")],
               [(0.0, "rude"), (1.0, None), (1.0, "courteous")]]
    counts = verifier_control.right_by_opening(answers)
    assert counts == {"courteous": (2, 3), "rude": (1, 2)}


def test_sampled_answers_refuse_what_cannot_be_sampled():
    model, tok = tiny_assistant()
    with pytest.raises(ValueError, match="n=0"):
        verifier_control.sampled_answers(model, tok, ITEMS, 0)
    with pytest.raises(ValueError, match="items is empty"):
        verifier_control.sampled_answers(model, tok, [], 2)
    with pytest.raises(ValueError, match=r"an item needs \d+ tokens and the model reads 64"):
        verifier_control.sampled_answers(model, tok, [Item("Last word", "Is it so? " * 6)],
                                         2)
