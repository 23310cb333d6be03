"""Chapter 14's Colab track: GPT-2 small with Chapter 9's LoRA learns two-digit addition
from a reward, with the book's ``train_grpo`` and, beside it, TRL's ``GRPOTrainer``;
offline, a sentence that says what it does.

The prompt shows two solved sums and asks a third (``"12+7=19\\n31+45=76\\n23+58="``); an
answer ends with a newline, which plays the end token's part, and earns 1 when the digits
before it are the sum. Both trainers use TRL's defaults that the chapter states: groups of
8, ``beta=0``, ``epsilon=0.2``, ``loss_type="dapo"``, one update per batch, and GPT-2's
dropout of 0.1 on in the updates (TRL's ``disable_dropout=False``). Among what differs, by
TRL's defaults: TRL samples in training mode (dropout on), decays its learning rate to zero,
ends its mask at the padding after the newline, and shuffles the prompts (each drawn once an
epoch, padded on the left), where ``train_grpo`` draws each batch with replacement among
prompts of one length. Only the book's run is scored on held-out sums.
"""

from __future__ import annotations

import random
from statistics import fmean

import torch

from ..grpo_advantages import pass_at_k
from ..grpo_sampling import sample_groups
from ..grpo_train import train_grpo
from ..hf_weights import WeightsUnavailableError, from_pretrained
from ..lora import apply_lora, count_trainable
from ..tokenizer import gpt2_encoding
from ..utils import check_float, check_int, default_device

SHOTS = "12+7=19\n31+45=76\n"
NEWLINE = 198  # GPT-2's id of "\n": the end of an answer


def sums(n: int, seed: int) -> list[tuple[str, str]]:
    """``n`` prompts ``(prompt, answer)`` of two-digit sums, after the two solved ones."""
    n = check_int("sums", "n", n, minimum=1)
    rng = random.Random(check_int("sums", "seed", seed))
    pairs = [(rng.randint(10, 99), rng.randint(10, 99)) for _ in range(n)]
    return [(f"{SHOTS}{a}+{b}=", str(a + b)) for a, b in pairs]


def right(text: str, answer: str) -> float:
    """1.0 when the text up to the first newline is the answer, else 0.0."""
    for name, value in (("text", text), ("answer", answer)):
        if not isinstance(value, str):
            raise TypeError(f"right: {name}={value!r:.40} ({type(value).__name__}) must be "
                            "a str, the decoded answer and the sum's digits (a number "
                            f"never equals a text, so it would score 0): pass str({name})")
    return float(text.split("\n")[0].strip() == answer)


@torch.no_grad()
def pass_rates(model, data: list[tuple[str, str]], n: int = 8) -> tuple[float, float]:
    """Mean pass@1 and pass@n over ``data``, ``n`` samples per prompt at temperature 1."""
    n = check_int("pass_rates", "n", n, minimum=1)
    if not data:
        raise ValueError("pass_rates: data is empty, so there is no prompt to average "
                         "over: pass (prompt, answer) pairs, e.g. sums(64, seed=1)")
    enc, device = gpt2_encoding(), next(model.parameters()).device
    g = torch.Generator(device=device).manual_seed(0)
    counts = []
    for prompt, answer in data:
        ids = torch.tensor([enc.encode(prompt)], device=device)  # (1, P)
        out, mask = sample_groups(model, ids, n, 6, NEWLINE, generator=g)  # (n, C) each
        counts.append(sum(right(enc.decode(c[m.bool()].tolist()), answer)
                          for c, m in zip(out, mask)))
    return (sum(pass_at_k(n, int(c), 1) for c in counts) / len(counts),
            sum(pass_at_k(n, int(c), n) for c in counts) / len(counts))


def book_run(steps: int, lr: float, model=None) -> dict:
    """The book's ``train_grpo`` on GPT-2 small (or ``model``, a ``GPT`` on GPT-2's tokens)
    with LoRA (r 16, alpha 32)."""
    enc, device = gpt2_encoding(), default_device()
    model = from_pretrained("gpt2") if model is None else model
    model = apply_lora(model.to(device), r=16, alpha=32)
    train, held = sums(512, seed=0), sums(64, seed=1)
    prompts = [enc.encode(p) for p, _ in train]

    def reward(index: int, completion: list[int]) -> float:
        return right(enc.decode(completion), train[index][1])

    before = pass_rates(model.eval(), held)
    history = train_grpo(model, prompts, reward, NEWLINE, steps, lr=lr, max_new_tokens=6)
    return {"before": before, "after": pass_rates(model, held), "reward": history.reward,
            "trainable": count_trainable(model)}


def trl_run(steps: int, lr: float, model="gpt2", tokenizer=None) -> dict:
    """TRL's ``GRPOTrainer`` on the same prompts, GPT-2 small (or ``model``, a
    ``GPT2LMHeadModel``, with its ``tokenizer``) with peft's LoRA on the same projections,
    in float32 as the book's run; its per-step mean reward from the trainer's log."""
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    train = sums(512, seed=0)
    if tokenizer is None:
        tokenizer = AutoTokenizer.from_pretrained(model)
        tokenizer.pad_token = tokenizer.eos_token
    if isinstance(model, str):
        model = AutoModelForCausalLM.from_pretrained(model)

    def reward(completions, answer, **kwargs):
        return [right(c, a) for c, a in zip(completions, answer)]

    args = GRPOConfig(output_dir="grpo-trl", report_to=[], max_steps=steps,
                      learning_rate=lr, per_device_train_batch_size=64, num_generations=8,
                      max_completion_length=6, beta=0.0, logging_steps=1,
                      save_strategy="no", bf16=False,
                      generation_kwargs={"eos_token_id": NEWLINE})
    trainer = GRPOTrainer(
        model=model, reward_funcs=reward, args=args,
        train_dataset=Dataset.from_dict({"prompt": [p for p, _ in train],
                                         "answer": [a for _, a in train]}),
        processing_class=tokenizer,
        peft_config=LoraConfig(r=16, lora_alpha=32,
                               target_modules=["c_attn", "c_proj", "c_fc"],
                               fan_in_fan_out=True))
    trainer.train()
    return {"reward": [e["reward"] for e in trainer.state.log_history if "reward" in e]}


def online_run(steps: int = 100, lr: float = 1e-4, models=None) -> str:
    """Both runs, as a Markdown sentence; offline or without a GPU, what they would do.
    ``models``: GPT-2 small for both, or ``(GPT, GPT2LMHeadModel, its tokenizer)`` to run
    them on other weights (on any device)."""
    steps = check_int("online_run", "steps", steps, minimum=1)
    lr = check_float("online_run", "lr", lr, 0.0, low_open=True)
    if models is None and default_device() == "cpu":
        return ("*Not run on a CPU*: this cell trains GPT-2 small twice, with the book's "
                f"`train_grpo` and with TRL's `GRPOTrainer`, {steps} steps of 8 prompts × "
                "8 sampled answers each, far beyond this chapter's time on a CPU. On "
                "Colab, switch to a GPU (Runtime → Change runtime type → T4 GPU) and run "
                "it again.")
    try:
        book, hf, tokenizer = models or (from_pretrained("gpt2"), "gpt2", None)
    except (WeightsUnavailableError, OSError):
        return ("*Not run here*: GPT-2's weights cannot be reached. With them, this cell "
                f"gives GPT-2 small LoRA adapters and trains them for {steps} GRPO steps "
                "on two-digit sums (the reward: 1 when the digits before the newline are "
                "the sum), with the book's `train_grpo` and with TRL's `GRPOTrainer`, "
                "compares their reward curves, and measures the book's run's held-out "
                "pass@1 and pass@8 before and after.")
    ours = book_run(steps, lr, book)
    block = min(10, steps)  # the steps averaged at each end of a reward curve

    def ends(reward: list[float]) -> str:
        return f"{fmean(reward[:block]):.2f} and {fmean(reward[-block:]):.2f}"
    text = (f"GPT-2 small with LoRA ({ours['trainable']:,} trainable parameters), {steps} "
            f"steps of 8 prompts × 8 answers: held-out pass@1 {ours['before'][0]:.1%} → "
            f"{ours['after'][0]:.1%}, pass@8 {ours['before'][1]:.1%} → "
            f"{ours['after'][1]:.1%}; "
            f"the book's mean reward over the first and the last {block} steps: "
            f"{ends(ours['reward'])}.")
    try:
        theirs = trl_run(steps, lr, hf, tokenizer)
    except ImportError as error:
        return text + f" TRL's run is skipped: {error} (`pip install trl peft datasets`)."
    return text + (" TRL's `GRPOTrainer`, the same prompts, batch and group sizes, "
                   "learning rate and clip, with its learning rate decayed linearly to "
                   "zero and its batches drawn its own way; its mean reward over the first "
                   f"and the last {block} steps: {ends(theirs['reward'])}.")
