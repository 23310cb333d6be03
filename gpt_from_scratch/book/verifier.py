"""Chapter 14 — GRPO on Chapter 12's assistant: the reward, the cached runs, the scores.

The reward is Chapter 12's checker: 1 when the answer ends with ``<|end|>`` and ``verify``
accepts it, else 0. ``grpo_model`` trains one GRPO run (``GRPORecipe``) from Chapter 12's
SFT assistant of the same seed (``assistant_runs.sft_run``) once, and keeps it beside the
book's models with its history, so that the chapter reads it in a second the next time.
``sampled_scores`` answers each held-out prompt ``n`` times at temperature 1 and returns
pass@1 and pass@k (``grpo_advantages.pass_at_k``) and the courteous share of the
openings sampled.
"""

from __future__ import annotations

import copy
import dataclasses
import numbers
from dataclasses import dataclass

import torch

from ..chat import ChatTokenizer
from ..checkpoint import save_checkpoint
from ..data import load_tiny_shakespeare
from ..dpo import sequence_logps
from ..grpo_advantages import pass_at_k
from ..grpo_sampling import sample_groups
from ..grpo_train import GRPOHistory, train_grpo
from ..sft import collate, shift
from ..utils import check_float, check_int, eval_mode
from .assistant import STYLES, TASKS, Item, split_style, task_items, verify
from .assistant_runs import SFTRecipe, sft_entries, sft_run
from .model_cache import cached, kept, model_entry, trained_once


@dataclass(frozen=True)
class GRPORecipe:
    task: str = "Last word"  # the task whose prompts are trained and rewarded
    steps: int = 120
    lr: float = 2e-4
    beta: float = 0.0  # KL penalty toward the SFT model (TRL's k3); 0 as TRL's default
    batch_size: int = 8  # prompts per step
    group_size: int = 8  # answers per prompt
    seed: int = 0  # the SFT assistant's seed and the run's

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"GRPORecipe: task={self.task!r} is not one of {list(TASKS)}: "
                             "train on one of Chapter 12's tasks")
        smallest = {"steps": 1, "batch_size": 1, "group_size": 2, "seed": 0}
        for name, least in smallest.items():  # NumPy numbers become Python ones (JSON)
            value = check_int("GRPORecipe", name, getattr(self, name), minimum=least)
            object.__setattr__(self, name, value)
        lr = check_float("GRPORecipe", "lr", self.lr, 0.0, low_open=True)
        object.__setattr__(self, "lr", lr)
        object.__setattr__(self, "beta", check_float("GRPORecipe", "beta", self.beta, 0.0))

    @property
    def name(self) -> str:
        """The run's folder name: every setting in it, so two recipes never share one."""
        task = self.task.lower().replace(" ", "-")
        return (f"grpo-{task}-s{self.steps}-lr{self.lr:g}-b{self.beta:g}-"
                f"{self.batch_size}x{self.group_size}-seed{self.seed}")


def prompts_and_reward(items: list[Item], tok: ChatTokenizer):
    """The rendered prompts of ``items`` and the reward ``reward(prompt_index,
    completion_ids)`` that ``train_grpo`` calls: 1.0 when the completion ends with
    ``<|end|>`` and its text is the item's answer (after either opening), else 0.0. The
    index must be one of the items' (0 to len(items) - 1), the ids a list of ints."""
    if not items:
        raise ValueError("prompts_and_reward: items is empty: pass the training items of "
                         "one task (task_items(text)['train'])")
    prompts = [tok.render(i.messages(), add_generation_prompt=True)[0] for i in items]

    def reward(index: int, completion: list[int]) -> float:
        if (isinstance(index, bool) or not isinstance(index, numbers.Integral)
                or not 0 <= index < len(items)):
            raise ValueError(f"reward: index={index!r} must be a whole number from 0 to "
                             f"{len(items) - 1}, the prompt's place among the {len(items)} "
                             "items (a negative one would grade against another item's "
                             "answer): pass the prompt's own index")
        if (not isinstance(completion, (list, tuple))
                or any(isinstance(t, bool) or not isinstance(t, numbers.Integral)
                       for t in completion)):
            raise ValueError(f"reward: completion={completion!r:.60} must be a list of "
                             "token ids (ints) up to and including <|end|>: pass "
                             "completion[mask.bool()].tolist()")
        if not completion or completion[-1] != tok.end_id:
            return 0.0  # no <|end|>: the turn never ended, whatever it said
        text = tok.decode([t for t in completion[:-1] if t < tok.base_vocab_size])
        return float(verify(items[index], text))

    return prompts, reward


def grpo_model(recipe: GRPORecipe) -> tuple:
    """``(policy in eval mode, ChatTokenizer, GRPOHistory)``: the GRPO run of ``recipe``
    from Chapter 12's SFT assistant of ``recipe.seed``, loaded from its cache entry (keyed
    by the recipe, the code, the versions, the arithmetic and the assistant's entry:
    ``model_cache``) or trained there once."""
    if not isinstance(recipe, GRPORecipe):
        raise ValueError(f"grpo_model: recipe={recipe!r:.60} must be a GRPORecipe: pass "
                         "GRPORecipe(steps=..., lr=..., seed=...)")
    settings = dataclasses.asdict(recipe)
    entry = model_entry(recipe.name, settings, __name__,
                        parents=sft_entries(SFTRecipe(seed=recipe.seed))[:1])
    run = sft_run(SFTRecipe(seed=recipe.seed))
    sft, tok = run.model, run.tokenizer
    with trained_once(entry):
        if (ckpt := cached(entry)) is not None:
            return ckpt.model.eval(), tok, GRPOHistory(**ckpt.extra["history"])
        train = [i for i in task_items(load_tiny_shakespeare())["train"]
                 if i.task == recipe.task]
        prompts, reward = prompts_and_reward(train, tok)
        policy = copy.deepcopy(sft)
        reference = sft if recipe.beta > 0 else None  # frozen: only the copy is trained
        torch.manual_seed(recipe.seed)
        history = train_grpo(policy, prompts, reward, tok.end_id, recipe.steps,
                             recipe.batch_size, recipe.group_size, recipe.lr,
                             beta=recipe.beta, reference=reference, seed=recipe.seed)
        save_checkpoint(entry.path, policy, recipe.steps,
                        extra=kept(entry, {"grpo": settings,
                                           "history": dataclasses.asdict(history)}))
    return policy.eval(), tok, history


def _check_room(function: str, longest: int, context_length: int) -> None:
    if longest > context_length:
        raise ValueError(f"{function}: an item needs {longest} tokens and the model reads "
                         f"{context_length}: pass items whose conversations fit (shorter "
                         "lines)")


@torch.no_grad()
def sampled_scores(model, tok: ChatTokenizer, items: list[Item], n: int = 8, k: int = 8,
                   seed: int = 0) -> dict:
    """Each task's ``pass@1`` and ``pass@k`` (the unbiased estimates from ``n`` samples per
    prompt at temperature 1, averaged over the prompts), its ``stop`` rate and the
    ``courteous`` share of the sampled answers that open in a style. Prompts of one length
    are sampled together (``sample_groups``), stopping once every answer has ended."""
    n = check_int("sampled_scores", "n", n, minimum=1)
    k = check_int("sampled_scores", "k", k, minimum=1)
    seed = check_int("sampled_scores", "seed", seed)
    if k > n:
        raise ValueError(f"sampled_scores: k={k} > n={n}: pass@k needs at least k samples "
                         f"per prompt; pass n >= {k}")
    if not items:
        raise ValueError("sampled_scores: items is empty: pass the held-out items")
    g = torch.Generator().manual_seed(seed)
    T = model.config.context_length
    rows = []  # (item, right answers of n, stopped of n, courteous, styled)
    prompts, reward = prompts_and_reward(items, tok)  # "right" is what GRPO rewards
    _check_room("sampled_scores", max(len(p) + 1 for p in prompts), T)  # one answer token
    for length in sorted({len(p) for p in prompts}):
        chosen = [j for j, p in enumerate(prompts) if len(p) == length]
        completions, mask = sample_groups(model, torch.tensor([prompts[j] for j in chosen]),
                                          n, T - length, tok.end_id,
                                          generator=g)  # (B * n, C)
        for b, j in enumerate(chosen):
            right = stopped = courteous = styled = 0
            for c, m in zip(completions[b * n:(b + 1) * n], mask[b * n:(b + 1) * n]):
                ids = c[m.bool()].tolist()  # up to and including <|end|>, if it came
                ended = ids[-1] == tok.end_id
                text = tok.decode([t for t in ids if t < tok.base_vocab_size])
                style = split_style(text)[0]
                stopped += ended
                right += int(reward(j, ids))
                styled += style is not None
                courteous += style == "courteous"
            rows.append((items[j], right, stopped, courteous, styled))
    scores = {}
    for task in (t for t in TASKS if any(r[0].task == t for r in rows)):
        mine = [r for r in rows if r[0].task == task]
        styled = sum(r[4] for r in mine)
        scores[task] = {"n": len(mine),
                        "pass@1": sum(pass_at_k(n, r[1], 1) for r in mine) / len(mine),
                        f"pass@{k}": sum(pass_at_k(n, r[1], k) for r in mine) / len(mine),
                        "stop": sum(r[2] for r in mine) / (n * len(mine)),
                        "courteous": (sum(r[3] for r in mine) / styled if styled
                                      else float("nan"))}
    return scores


@torch.no_grad()
def answer_logprob(model, tok: ChatTokenizer, items: list[Item]) -> float:
    """The mean over ``items`` of ``log P(the reference answer)``, in either opening (the
    log of the two openings' summed probabilities): the smooth twin of pass@1, which a few
    right samples more or less do not move."""
    if not items:
        raise ValueError("answer_logprob: items is empty: pass the held-out items of one "
                         "task")
    rows = [shift(*tok.render(i.messages(style))) for i in items for style in STYLES]
    T = model.config.context_length
    _check_room("answer_logprob", max(len(inputs) for inputs, _ in rows), T)
    idx, targets = collate(rows, tok.pad_id, T)  # (N * 2, T)
    with eval_mode(model):
        logps = sequence_logps(model, idx, targets).view(len(items), len(STYLES))  # (N, 2)
    return torch.logsumexp(logps, dim=-1).mean().item()
