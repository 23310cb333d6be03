"""Chapter 12 — an instruction task a program writes and grades, from Tiny Shakespeare.

Two instructions over a line of the play: ``Last word: <line>`` (answer: its last word, without
punctuation) and ``Repeat: <line>`` (answer: the line). Training prompts use lines of the first
90% of the text, the part the base model was trained on; held-out prompts use lines of the last
10%, which neither pretraining nor fine-tuning ever saw. Every answer opens, at random and half of
the time each, with a courteous ``Good sir, `` or a rude ``Fool! ``: a style the fine-tuned model
then produces both ways, which preference tuning can move (``preference_pairs``). ``verify``
checks an answer by string equality, whatever its opening.

``evaluate`` asks a model every held-out prompt, greedily, and measures how often it ends its turn
(the stop rate), how often the answer is right (exact match) and which opening it chose.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass

import torch

from ..chat import ChatTokenizer, answer_ids
from ..data import split_text
from ..padding import left_pad, padded_forward
from ..sft import shift
from ..utils import check_int, eval_mode

TASKS = {"Last word": (12, 28), "Repeat": (8, 21)}  # instruction: line lengths kept (characters)
STYLES = {"courteous": "Good sir, ", "rude": "Fool! "}
WORD = re.compile(r"[A-Za-z']+")


@dataclass(frozen=True)
class Item:
    task: str
    line: str

    def __post_init__(self) -> None:
        line_ok = isinstance(self.line, str) and WORD.search(self.line)
        if self.task not in TASKS or not line_ok:
            raise ValueError(f"Item({self.task!r}, {self.line!r}): the task must be one of "
                             f"{list(TASKS)} and the line must hold a word (task_items "
                             "makes them)")

    @property
    def prompt(self) -> str:
        return f"{self.task}: {self.line}"

    @property
    def answer(self) -> str:
        return WORD.findall(self.line)[-1] if self.task == "Last word" else self.line

    def messages(self, style: str | None = None) -> list[dict]:
        """The conversation; with ``style``, the assistant's answer in that style."""
        user = [{"role": "user", "content": self.prompt}]
        if style is None:
            return user
        if style not in STYLES:
            raise ValueError(f"style={style!r} is not one of {list(STYLES)} (None: no "
                             "answer)")
        return user + [{"role": "assistant", "content": STYLES[style] + self.answer}]


def play_lines(text: str) -> list[str]:
    """The lines of a part of the play that are spoken text: no blank lines, no ``NAME:`` lines."""
    out = []
    for line in text.split("\n"):
        line = line.strip()
        if line and not (line.endswith(":") and line[:-1].replace(" ", "").isupper()):
            out.append(line)
    return out


def task_items(text: str) -> dict[str, list[Item]]:
    """``{"train": [...], "held_out": [...]}``: every line of the right length, for each task,
    from the first 90% of ``text`` (train) and the last 10% (held out, without the lines that
    the first 90% also has); each line once per task."""
    train_text, held_text = split_text(text, 0.9)
    lines = {"train": list(dict.fromkeys(play_lines(train_text)))}  # unique, in order
    seen = set(lines["train"])  # a line the play repeats ("I pray you do.") is not held out
    lines["held_out"] = [x for x in dict.fromkeys(play_lines(held_text)) if x not in seen]
    return {split: [Item(task, line) for task, (lo, hi) in TASKS.items()
                    for line in part if lo <= len(line) <= hi and WORD.search(line)]
            for split, part in lines.items()}


def split_style(response: str) -> tuple[str | None, str]:
    """``(style, rest)``: which opening the response starts with (None: neither), and the rest."""
    for style, opening in STYLES.items():
        if response.startswith(opening):
            return style, response[len(opening):]
    return None, response


def verify(item: Item, response: str) -> bool:
    """Whether ``response`` is the right answer, after either opening."""
    return split_style(response)[1] == item.answer


def majority_answer(items: list[Item], task: str) -> str:
    """The most frequent answer of ``task`` among ``items``: the answer a program that ignores
    the line would give."""
    answers = Counter(i.answer for i in items if i.task == task)
    if not answers:
        raise ValueError(f"majority_answer: no item of task {task!r} among {len(items)} "
                         f"items: pass items of that task (tasks: {list(TASKS)})")
    return answers.most_common(1)[0][0]


def sft_examples(items: list[Item], tok: ChatTokenizer, seed: int = 0) -> list:
    """Shifted ``(inputs, targets)`` of every item, each answer opened at random in one style."""
    rng = random.Random(seed)
    return [shift(*tok.render(i.messages(rng.choice(list(STYLES))))) for i in items]


@torch.no_grad()
def greedy_turns(model, prompts: list[list[int]], max_new_tokens: int, end_id: int, pad_id: int
                 ) -> list[list[int]]:
    """Each prompt's greedy continuation (new tokens only), the prompts left-padded in one batch
    (Chapter 7's ``padded_forward``); it stops early once every row has written ``end_id``."""
    idx, attention_mask = left_pad(prompts, pad_id)  # (B, T) each
    done, start = torch.zeros(len(prompts), dtype=torch.bool), idx.shape[1]  # (B,), T
    with eval_mode(model):
        for _ in range(max_new_tokens):
            token = padded_forward(model, idx, attention_mask)[:, -1].argmax(-1)  # (B,)
            idx = torch.cat([idx, token[:, None]], dim=1)  # (B, T + 1)
            attention_mask = torch.cat([attention_mask, attention_mask.new_ones(len(prompts), 1)],
                                       dim=1)
            done |= token == end_id
            if done.all():
                break
    return idx[:, start:].tolist()


@torch.no_grad()
def evaluate(model, tok: ChatTokenizer, items: list[Item], batch_size: int = 64) -> dict:
    """Each task's ``stop`` rate, ``exact`` match and ``courteous`` share (of the answers that
    open in a style) on ``items``, greedy; ``responses`` lists ``(item, text, stopped)``.
    A task with no item in ``items`` has no scores."""
    batch_size = check_int("evaluate", "batch_size", batch_size, minimum=1)
    if not items:
        raise ValueError("evaluate: items is empty: pass the held-out items of "
                         "task_items(text)")
    T = model.config.context_length
    responses = []
    batches = [group[k:k + batch_size] for group in ([i for i in items if i.task == task]
                                                      for task in TASKS)
               for k in range(0, len(group), batch_size)]  # one task per batch: its own length
    for batch in batches:
        prompts = [tok.render(i.messages(), add_generation_prompt=True)[0] for i in batch]
        longest = max(len(p) for p in prompts)
        if longest >= T:  # no room for an answer: it would be scored "stop 0, exact 0"
            raise ValueError(f"evaluate: a prompt is {longest} tokens, the model reads {T}"
                             ": no token is left for the answer; evaluate with shorter "
                             "lines or a model with a longer context")
        outs = greedy_turns(model, prompts, T - longest, tok.end_id, tok.pad_id)
        for item, out in zip(batch, outs):
            new, stopped = answer_ids(out, tok.end_id)
            text = tok.decode([i for i in new if i < tok.base_vocab_size])
            responses.append((item, text, stopped))
    scores = {}
    for task in (t for t in TASKS if any(i.task == t for i in items)):
        rows = [(i, text, stopped) for i, text, stopped in responses if i.task == task]
        styles = [split_style(text)[0] for _, text, _ in rows]
        styled = [s for s in styles if s]
        scores[task] = dict(
            n=len(rows), stop=sum(s for *_, s in rows) / len(rows),
            exact=sum(s and verify(i, text) for i, text, s in rows) / len(rows),
            courteous=styled.count("courteous") / len(styled) if styled else float("nan"))
    scores["responses"] = responses
    return scores


@torch.no_grad()
def courteous_odds(model, tok: ChatTokenizer, items: list[Item]) -> torch.Tensor:
    """(B,) for each of ``items``, the probability that the answer opens courteously rather than
    rudely: at the answer's first position, p("G") / (p("G") + p("F")), the first characters of
    the two openings. Greedy decoding shows only the likelier opening; this shows the odds."""
    if not items:
        raise ValueError("courteous_odds: items is empty: pass the held-out items to measure")
    prompts = [tok.render(i.messages(), add_generation_prompt=True)[0] for i in items]
    idx, attention_mask = left_pad(prompts, tok.pad_id)  # (B, T) each
    with eval_mode(model):
        p = padded_forward(model, idx, attention_mask)[:, -1].softmax(-1)  # (B, V)
    good, rude = (tok.encode(STYLES[s])[0] for s in ("courteous", "rude"))
    return p[:, good] / (p[:, good] + p[:, rude])  # (B,)


def courtesy(model, tok: ChatTokenizer, items: list[Item]) -> float:
    """The mean over ``items`` of ``courteous_odds``."""
    return courteous_odds(model, tok, items).mean().item()


def preference_pairs(items: list[Item], tok: ChatTokenizer) -> list:
    """One pair per item: the courteous answer chosen, the rude one (same answer) rejected."""
    return [(shift(*tok.render(i.messages("courteous"))), shift(*tok.render(i.messages("rude"))))
            for i in items]
