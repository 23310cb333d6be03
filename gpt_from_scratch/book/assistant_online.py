"""Chapter 12 — the Colab track: GPT-2 small fine-tuned on 1,100 Alpaca-style instructions.

The instructions are the set of Raschka's *Build a Large Language Model (From Scratch)*,
chapter 7, fetched at a pinned commit and checked against its SHA-256. GPT-2 gets the four chat
tokens (``chat.add_chat_tokens``), Chapter 9's LoRA on its blocks, and the four new embedding rows
trainable (a gradient hook zeroes the other rows' gradients: LoRA freezes the embedding, and new
tokens that cannot move would stay at the mean). It trains with the chapter's masked loss.
Without GPT-2's weights or a network, ``online_run`` says in one sentence what it would do.
"""

from __future__ import annotations

import hashlib
import json
import urllib.request
from dataclasses import dataclass, field

import torch

from ..chat import ChatTokenizer, add_chat_tokens, respond
from ..data import cache_dir
from ..hf_weights import WeightsUnavailableError, from_pretrained
from ..lora import apply_lora, count_trainable
from ..sft import shift, train_sft
from ..tokenizer import gpt2_encoding
from ..utils import atomic_path, default_device, sha256_file

COMMIT = "4ac480c9ae56ead3ba3bf71060ecbcd783bb8dc6"  # the commit that added the file (unchanged since)
URL = ("https://raw.githubusercontent.com/rasbt/LLMs-from-scratch/"
       f"{COMMIT}/ch07/01_main-chapter-code/instruction-data.json")
SHA256 = "7e09a9af353722ca15c18bc580f093f9c39d3178335a75177319cb1e1d163944"
MAX_TOKENS = 256  # conversations longer than this are left out: shorter steps on a Colab GPU


@dataclass
class OnlineRun:
    text: str  # the sentence (offline) or the before/after table (online)
    responses: list = field(default_factory=list)  # (instruction, before, after)


def instruction_data() -> list[dict]:
    """The 1,100 entries (``instruction``, ``input``, ``output``), downloaded once into the cache
    and verified; an ``OSError`` when the network is down or the bytes differ."""
    path = cache_dir() / "instruction-data.json"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        with urllib.request.urlopen(URL, timeout=30) as response, atomic_path(path) as tmp:
            tmp.write_bytes(response.read())
    if sha256_file(path) != SHA256:
        raise OSError(f"{path} has sha256 {sha256_file(path)}, expected {SHA256}: delete it and "
                      "run again to download it afresh")
    return json.loads(path.read_text(encoding="utf-8"))


def conversation(entry: dict) -> list[dict]:
    """One entry as a user turn (the instruction, then its input if any) and the answer."""
    user = entry["instruction"] + (f"\n\n{entry['input']}" if entry["input"] else "")
    return [{"role": "user", "content": user}, {"role": "assistant", "content": entry["output"]}]


def online_run(steps: int = 100, batch_size: int = 8, lr: float = 3e-4, n_shown: int = 3
               ) -> OnlineRun:
    """Fine-tune GPT-2 small with LoRA on the instructions and show held-out answers before and
    after; offline, a sentence that says what this does."""
    try:
        gpt2 = from_pretrained("gpt2")
        data = instruction_data()
    except (WeightsUnavailableError, OSError):
        return OnlineRun(
            "*Not run here*: GPT-2's weights or the instructions cannot be reached. With both, "
            f"this cell downloads the 1,100 instructions (pinned commit {COMMIT[:7]}, SHA-256 checked), adds the chat "
            f"tokens to GPT-2 small, trains LoRA adapters and the new rows for {steps} steps of "
            f"{batch_size} conversations with the masked loss, and shows {n_shown} held-out "
            f"instructions answered before and after.")
    tok = ChatTokenizer(gpt2_encoding(), 50_257)
    device = default_device()
    convs = [conversation(e) for e in data]
    train, test = convs[:1000], convs[1000:]
    examples = [shift(*tok.render(c)) for c in train]
    examples = [e for e in examples if len(e[0]) <= MAX_TOKENS]
    model = add_chat_tokens(gpt2).to(device)
    apply_lora(model, r=16, alpha=32)
    new_rows = torch.zeros(tok.vocab_size, 1, device=device)
    new_rows[tok.base_vocab_size:] = 1.0
    model.wte.weight.requires_grad_(True)
    model.wte.weight.register_hook(lambda grad: grad * new_rows)  # only the chat tokens' rows
    shown = [c[:1] for c in test[:n_shown]]
    before = [respond(model.eval(), tok, m, max_new_tokens=60)[0] for m in shown]
    torch.manual_seed(0)
    losses = train_sft(model, examples, tok.pad_id, steps, batch_size, lr,
                       warmup=10, seed=0)
    after = [respond(model, tok, m, max_new_tokens=60)[0] for m in shown]
    rows = [(m[0]["content"], b, a) for m, b, a in zip(shown, before, after)]
    table = "\n".join(f"| {q[:60]!r} | {b[:60]!r} | {a[:60]!r} |" for q, b, a in rows)
    return OnlineRun(
        f"GPT-2 small with the chat tokens and LoRA: {count_trainable(model):,} trainable "
        f"parameters, {len(examples)} training conversations, {steps} steps: masked loss "
        f"{sum(losses[:10]) / 10:.2f} over the first 10 steps, {sum(losses[-10:]) / 10:.2f} over "
        f"the last 10.\n\n| instruction | before | after |\n|---|---|---|\n{table}", rows)
