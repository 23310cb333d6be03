"""Chapter 12 — a chat format: special tokens for the turns, a rendered conversation and its loss mask.

A conversation is a list of messages ``{"role": "user" | "assistant", "content": str}``. It is
written as one token sequence, each turn between markers that no text can produce:

    <|user|>Last word: Good morrow, cousin.<|end|><|assistant|>cousin.<|end|>

``ChatTokenizer`` adds four ids after a base tokenizer's vocabulary: ``<|user|>``,
``<|assistant|>``, ``<|end|>`` and a separate ``<|pad|>``. Padding with ``<|end|>`` itself (a common
shortcut) would mask the real end markers along with the pads, and a model never shown an end
marker never learns to stop. ``render`` returns the ids and the **loss mask**: 1 on the assistant's
tokens and its ``<|end|>``, 0 on everything the user wrote and on the markers that open a turn.
``CHAT_TEMPLATE`` is the same format in Jinja for Hugging Face's ``apply_chat_template``: the tests
check that both give the same text, ids and mask (``return_assistant_tokens_mask=True``).

``add_chat_tokens`` grows a trained ``GPT`` by the four rows; ``chat`` answers a message greedily.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .generate import generate
from .lora import lora_settings, with_lora
from .model import GPT
from .utils import check_int

USER, ASSISTANT, END, PAD = "<|user|>", "<|assistant|>", "<|end|>", "<|pad|>"
SPECIAL_TOKENS = (USER, ASSISTANT, END, PAD)  # their ids follow the base vocabulary, in this order
ROLES = {"user": USER, "assistant": ASSISTANT}

# The format of ``render`` for transformers' apply_chat_template. {% generation %} marks what the
# assistant writes: transformers returns it as ``assistant_masks``, as render returns its mask.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'user' -%}<|user|>{{ message['content'] }}<|end|>"
    "{%- elif message['role'] == 'assistant' -%}<|assistant|>"
    "{% generation %}{{ message['content'] }}<|end|>{% endgeneration %}"
    "{%- else -%}{{ raise_exception('unknown role ' + message['role']) }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|assistant|>{%- endif -%}"
)


@dataclass
class ChatTokenizer:
    """A base tokenizer (``encode``/``decode``: Chapter 1's ``CharTokenizer`` or tiktoken's GPT-2
    encoding) plus the four chat tokens, whose ids come after the base's ``base_vocab_size`` ids."""

    base: object
    base_vocab_size: int

    @property
    def vocab_size(self) -> int:
        return self.base_vocab_size + len(SPECIAL_TOKENS)

    def id_of(self, token: str) -> int:
        if token not in SPECIAL_TOKENS:
            raise ValueError(f"{token!r} is not a chat token: use one of {SPECIAL_TOKENS}")
        return self.base_vocab_size + SPECIAL_TOKENS.index(token)

    @property
    def user_id(self) -> int:
        return self.id_of(USER)

    @property
    def assistant_id(self) -> int:
        return self.id_of(ASSISTANT)

    @property
    def end_id(self) -> int:
        return self.id_of(END)

    @property
    def pad_id(self) -> int:
        return self.id_of(PAD)

    def encode(self, text: str) -> list[int]:
        """Plain text only: a chat marker written as text is an error, never a special id."""
        if not isinstance(text, str):
            raise TypeError("ChatTokenizer.encode: text must be a str, got "
                            f"{type(text).__name__} {text!r:.40}: pass the message's text")
        for token in SPECIAL_TOKENS:
            if token in text:
                raise ValueError(f"the text {text[:40]!r} contains the chat marker {token}: markers "
                                 "come from render(messages), never from the text of a message")
        encode = getattr(self.base, "encode_ordinary", self.base.encode)  # tiktoken: no specials
        return list(encode(text))

    def decode(self, ids) -> str:
        """Text of ``ids``, each chat id written as its marker."""
        out, run = [], []
        for i in (int(i) for i in ids):
            if i >= self.base_vocab_size:
                out.append(self.base.decode(run))
                run = []
                out.append(SPECIAL_TOKENS[i - self.base_vocab_size] if i < self.vocab_size else
                           f"<|unknown {i}|>")
            else:
                run.append(i)
        return "".join(out) + self.base.decode(run)

    def render(self, messages: list[dict], add_generation_prompt: bool = False
               ) -> tuple[list[int], list[int]]:
        """``(ids, mask)`` of a conversation: ``mask[i] = 1`` where ``ids[i]`` is the assistant's
        (its text and its ``<|end|>``), 0 elsewhere. With ``add_generation_prompt``, the ids end
        with ``<|assistant|>``: the model's turn to write.

        The mask is built piece by piece while the ids are concatenated, never by re-tokenizing
        the prompt and counting: the boundary is exact by construction.
        """
        if not isinstance(messages, (list, tuple)):
            raise TypeError("render: messages must be a list of {'role', 'content'} "
                            f"dicts, got a {type(messages).__name__}: wrap one message as "
                            "[{'role': 'user', 'content': text}]")
        if not messages:
            raise ValueError("render needs at least one message, got an empty list")
        ids: list[int] = []
        mask: list[int] = []
        for n, message in enumerate(messages):
            role, content = (message.get("role"), message.get("content")) if isinstance(
                message, dict) else (None, None)
            if role not in ROLES or not isinstance(content, str):
                raise ValueError(f"message {n} is {message!r}: each message needs a role in "
                                 f"{sorted(ROLES)} and a string content")
            body = self.encode(content) + [self.end_id]
            ids += [self.id_of(ROLES[role])] + body
            mask += [0] + [int(role == "assistant")] * len(body)
        if add_generation_prompt:
            ids.append(self.assistant_id)
            mask.append(0)
        return ids, mask


def add_chat_tokens(model: GPT, n_new: int = len(SPECIAL_TOKENS)) -> GPT:
    """A copy of ``model`` with ``n_new`` more token rows, each the mean of the trained rows.

    Why the mean: a new token's input vector should look like the vectors the blocks were trained
    on (a random row of a trained table is far smaller than its typical row), and with the tied
    head its output logit starts at ``h . mean``, the average of the old tokens' logits: neither
    a token the model already prefers nor one it can never reach. Fine-tuning then moves the rows.
    The tied ``lm_head`` grows with ``wte``; an untied head gets the mean of its own rows.
    LoRA layers (Chapter 9) are kept, with their weights and which parameters train.
    """
    if not isinstance(model, GPT):
        raise TypeError(f"add_chat_tokens: model is a {type(model).__name__}, not a GPT: "
                        "it grows a GPT's wte and lm_head (a Llama's tables are not grown "
                        "here)")
    n_new = check_int("add_chat_tokens", "n_new", n_new, minimum=1)
    V, D = model.wte.weight.shape
    config = dataclasses.replace(model.config, vocab_size=V + n_new)
    grown = with_lora(GPT(config), lora_settings(model))  # the same LoRA layers, if any
    tables = ("wte.weight", "lm_head.weight")
    state = {k: v for k, v in model.state_dict().items() if k not in tables}
    missing, unexpected = grown.load_state_dict(state, strict=False)  # all but the tables
    if set(missing) - set(tables) or unexpected:
        raise ValueError(f"add_chat_tokens: the grown copy lacks {unexpected[:3]} and has "
                         f"no weights for {sorted(set(missing) - set(tables))[:3]}: grow "
                         "the model before changing its layers")
    trains = dict(model.named_parameters())
    for name, p in grown.named_parameters():
        p.requires_grad_(trains[name].requires_grad)
    with torch.no_grad():
        old = model.wte.weight  # (V, D)
        grown.wte.weight.copy_(torch.cat([old, old.mean(0, keepdim=True).expand(n_new, D)]))
        if not config.tie_weights:
            head = model.lm_head.weight  # (V, D)
            grown.lm_head.weight.copy_(torch.cat([head, head.mean(0, keepdim=True).expand(n_new, D)]))
    return grown.train(model.training)


def answer_ids(ids: list[int], end_id: int) -> tuple[list[int], bool]:
    """The new tokens up to the first ``<|end|>`` (excluded), and whether one came."""
    return (ids[:ids.index(end_id)], True) if end_id in ids else (ids, False)


@torch.no_grad()
def respond(model: nn.Module, tok: ChatTokenizer, messages: list[dict], max_new_tokens: int = 60
            ) -> tuple[str, bool]:
    """The model's next assistant turn after ``messages``, greedy: ``(text, stopped)``; ``stopped``
    says whether it ended its turn with ``<|end|>`` within ``max_new_tokens``."""
    ids, _ = tok.render(messages, add_generation_prompt=True)
    T = model.config.context_length
    if len(ids) >= T:
        raise ValueError(f"the conversation is {len(ids)} tokens, the model reads {T}: start a new "
                         "conversation (history=[]) or shorten the messages")
    new = min(max_new_tokens, T - len(ids))  # never slide the window: the turn markers must stay
    out = generate(model, torch.tensor([ids]), new, greedy=True)[0, len(ids):].tolist()
    text_ids, stopped = answer_ids(out, tok.end_id)
    return tok.decode([i for i in text_ids if i < tok.base_vocab_size]), stopped


def chat(model: nn.Module, tok: ChatTokenizer, history: list[dict], message: str,
         max_new_tokens: int = 60, room: int = 16) -> list[dict]:
    """One exchange: ``history`` plus the user's ``message`` and the model's greedy answer, as a new
    list (``history`` is left as it was). The answer is what came before ``<|end|>``.

    The model reads the most recent exchanges that fit in its context with ``room`` tokens left
    for the answer; older ones stay in the returned history but are no longer read."""
    messages = [*history, {"role": "user", "content": message}]
    seen = messages
    T = model.config.context_length
    while len(seen) > 1 and len(tok.render(seen, add_generation_prompt=True)[0]) + room > T:
        seen = seen[2:]  # drop the oldest exchange (a user turn and its answer)
    text, _ = respond(model, tok, seen, max_new_tokens)
    return [*messages, {"role": "assistant", "content": text}]


def pad_batch(rows: list[list[int]], value: int) -> Tensor:
    """Right-pad lists of ids to one (B, T) tensor with ``value``."""
    if not rows:
        raise ValueError("pad_batch: rows is empty: pass at least one list of ids")
    T = max(len(r) for r in rows)
    return torch.tensor([r + [value] * (T - len(r)) for r in rows])
