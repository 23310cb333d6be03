"""Chapter 8 — the chapter's sentences about the loaded model, written from its numbers.

Each function takes the numbers a cell computed and returns Markdown, which the chapter shows with
``IPython.display.Markdown`` in a cell tagged ``remove-input``: the same text renders in the book and
in Colab, and stays true whichever model ran (GPT-2 small, or the offline model). Numbers are written
with 3 decimals, as the cells print them. The text is plain Markdown (Colab renders no MyST roles),
so citations are written out; the chapter's own cells cite them with ``{cite}``.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor

from ..heads import GPT2_REFERENCE, agreement, best_heads, compare_with_reference

SINK_HEAD = 0.5  # a head whose mean weight on the first token is above this is called a sink
CLEAR = 3.0  # a score at least this many times the uniform baseline is "clearly" above it
ABOVE = 1.5  # a share on position 0 this many times the uniform one is above it at all

_REF = GPT2_REFERENCE


def _head(layer: int, head: int) -> str:
    return f"layer {layer}, head {head}"


def _elsewhere(text: str) -> str:
    return f"**GPT-2 small** ({_REF.source}): {text}"


def loaded_text(real: bool, name: str, n_params: int, info: dict | None = None) -> str:
    """What section 8.2 loaded, and so what every later number on the page belongs to."""
    if real:
        return (f"OpenAI's weights loaded: every analysis below runs on **{name}** ({n_params:,} "
                "parameters), and each one compares its numbers with the published ones.")
    m, t = ({}, {}) if info is None else (info["settings"]["model"], info["settings"]["train"])
    how = "" if info is None else (
        f" It has {m['n_layers']} layers of {m['n_heads']} heads, D = {m['d_model']}, a context of "
        f"{m['context_length']}, and trained for {t['max_iters']:,} steps of batch {t['batch_size']} at "
        f"learning rate {t['learning_rate']:g}, in {info['train_seconds']:.0f} s on the machine that first "
        f"ran this chapter, which estimated its validation loss at {info['val_loss']:.2f}.")
    vocab = "" if info is None or "corpus_vocab" not in info else (
        f", that learned only {info['corpus_vocab']:,} GPT-2 tokens, those its training text uses and "
        "`<|endoftext|>` (it reads "
        "any other token as one `<unk>`)")
    return (f"GPT-2's weights are not available here (the message above says why). Every analysis below "
            f"runs on **{name}** ({n_params:,} parameters) instead, a small GPT trained on Tiny Shakespeare "
            f"with every window starting with `<|endoftext|>`{vocab}.{how} Beside each analysis stands what "
            "GPT-2 small shows, measured elsewhere.")


def parity_text(max_diff: float, same_greedy: bool, n_greedy: int, real: bool) -> str:
    """The parity claim, as measured on whichever weights section 8.3 compared."""
    on = "OpenAI's GPT-2 small weights" if real else "a randomly initialised GPT-2-shaped model"
    same = "the same" if same_greedy else "**not** the same"
    return (f"On {on}, our `GPT` and transformers' `GPT2LMHeadModel` differ by at most {max_diff:.1e} in "
            f"any logit, and their {n_greedy} greedy tokens are {same}.")


def losses_text(losses: dict[str, float], ln_v: float) -> str:
    """The validation losses of section 8.4, against a uniform guess."""
    parts = [f"{name} scores {loss:.2f} nats per token (perplexity {2.718281828 ** loss:,.0f})"
             for name, loss in losses.items()]
    best = min(losses, key=losses.get)
    return (f"{'; '.join(parts)}, against {ln_v:.2f} for a uniform guess. The lowest is {best}'s.")


def window_loss_text(name: str, theirs: float, n_theirs: int, ours: float, n_ours: int,
                     window_sd: float) -> str:
    """Section 8.4: why a model's loss here differs from the one its own chapter printed.

    ``theirs`` is the mean loss over the ``n_theirs`` random windows the training chapter's
    ``estimate_loss`` draws (recomputed here, on the same model), ``ours`` the mean over this chapter's
    ``n_ours`` evenly spaced windows, and ``window_sd`` the standard deviation of one window's loss:
    two means of independent windows differ by chance by about ``window_sd * sqrt(1/n_theirs +
    1/n_ours)`` (one standard error).
    """
    spread = window_sd * (1 / n_theirs + 1 / n_ours) ** 0.5
    gap = theirs - ours
    easier = "easier" if gap < 0 else "harder"
    how = "an ordinary sampling difference" if abs(gap) <= 2 * spread else "an unusual but possible draw"
    return (f"Scored as Chapter 6 scores it, the mean over the {n_theirs} random windows that "
            f"`estimate_loss` draws from seed 1337, {name} gets {theirs:.2f}, Chapter 6's number; on "
            f"this chapter's {n_ours} evenly spaced windows it gets {ours:.2f}. Same model, same loss "
            f"function: only the windows differ. One window's loss varies with a standard deviation of "
            f"{window_sd:.2f}, so two such means differ by about {spread:.2f} by chance alone; "
            f"{abs(gap):.2f} is {abs(gap) / spread:.1f} times that, {how}: Chapter 6's windows happen "
            f"to be {easier} than these.")


def samples_text(continuations: dict[str, list[list[int]]]) -> str:
    """Section 8.4: how much each model's two sampled continuations (same seed, two prompts) share.

    A model that uses its context continues two different prompts differently; one that barely reads
    it makes the same choices from the same random numbers.
    """
    sentences = []
    for name, (first, second) in continuations.items():
        same = sum(a == b for a, b in zip(first, second))
        sentences.append(f"{name}'s two continuations agree at {same} of {len(first)} positions")
    return ("With the same seed, " + "; ".join(sentences) + ". A model that reads its prompt continues "
            "two different prompts differently; one that barely reads it repeats the choices that the same "
            "random numbers give.")


def pronoun_text(name: str, layer: int, head: int, tokens: Sequence[str], row_she: Sequence[float],
                 row_he: Sequence[float], real: bool) -> str:
    """Section 8.6: where the pronoun looks in the chosen head, beside GPT-2's layer 5, head 10."""
    girl, boy = tokens.index("␣girl"), tokens.index("␣boy")
    ref = dict(zip(_REF.pronoun_tokens, _REF.pronoun_row))
    ref_girl, ref_boy = ref["␣girl"], ref["␣boy"]
    text = (f"In {name}'s {_head(layer, head)}, \"She\" gives \" girl\" {row_she[girl]:.3f} and \" boy\" "
            f"{row_she[boy]:.3f}; \"He\" gives them {row_he[girl]:.3f} and {row_he[boy]:.3f}. The first "
            f"token takes {row_she[0]:.3f} after \"She\". ")
    if row_she[girl] > row_she[boy] and row_he[boy] > row_he[girl]:
        text += "Each pronoun favours the noun of its gender. "
    else:
        text += "The two pronouns do not each favour the noun of their gender. "
    text += "\n\n" + _elsewhere(
        f"{_head(*_REF.pronoun_head)} gives \" girl\" {ref_girl:.3f} and \" boy\" {ref_boy:.3f} after "
        f"\"She\", and {_REF.pronoun_row[0]:.3f} to the first token (the kind of head Vig, 2019, "
        "looked for; the weights were measured on transformers' `gpt2` checkpoint). For \"He\" no "
        "weights were measured for this page. The sentence is adapted from Vig (2019), whose "
        "figures show such heads on sentences of their own.")
    if real and (layer, head) == _REF.pronoun_head:
        diff = compare_with_reference(row_she)
        text += (f" Recomputed here, the row differs from that measurement by at most {diff:.4f}: they "
                 f"{agreement(diff)}.")
    return text


def bias_attention_text(name: str, layer: int, head: int, weights: dict[str, dict[str, float]],
                        real: bool) -> str:
    """Section 8.7: where "She" and "He" look in "The doctor asked the nurse a question. She/He"."""
    sentences, matches = [], 0
    for pronoun, w in weights.items():
        top = max(w, key=w.get)
        matches += top == _REF.bias_targets[pronoun]
        sentences.append(f"\"{pronoun}\" gives \" doctor\" {w['␣doctor']:.3f} and \" nurse\" "
                         f"{w['␣nurse']:.3f}")
    text = f"In {name}'s {_head(layer, head)}, " + "; ".join(sentences) + ". "
    tops = {pronoun: max(w, key=w.get) for pronoun, w in weights.items()}
    if matches == len(weights):
        text += "As in GPT-2, \"She\" looks most at \" nurse\" and \"He\" at \" doctor\"."
    elif matches == 0 and len(set(tops.values())) == len(tops):
        text += ("The two pronouns split the other way round from GPT-2: " + " and ".join(
            f"\"{p}\" looks most at \"{t.replace('␣', ' ')}\"" for p, t in tops.items()) + ".")
    else:
        text += ("Unlike GPT-2, the two pronouns do not split between the two occupations: both "
                 "look most at the same one." if len(set(tops.values())) == 1 else
                 "Unlike GPT-2, only one of the two pronouns looks most where GPT-2's does.")
    if layer == 0:
        text += (" A head of layer 0 cannot read the sentence: its query is the pronoun's own "
                 "embedding and position, and each key a word's own, so any split comes from "
                 "what training made of those tokens and positions alone, not from who the "
                 "sentence says is who.")
    text += "\n\n" + _elsewhere(
        f"in {_head(*_REF.pronoun_head)}, \"She\" attends most to \" nurse\" and \"He\" to \" doctor\": "
        "an occupational stereotype from its training text (Vig, 2019).")
    if real:
        text += f" Recomputed here, {matches} of {len(weights)} pronouns follow it."
    return text


def bias_probs_text(name: str, ratios: dict[str, float], corpus_ratio: float | None) -> str:
    """Section 8.7: does P(" he") / P(" she") move when doctor and nurse swap places?"""
    low, high = min(ratios.values()), max(ratios.values())
    pairs = list(ratios.values())
    moves = max(abs(pairs[0] - pairs[1]), abs(pairs[2] - pairs[3])) if len(pairs) == 4 else high - low
    swap = (f"moves the ratio by at most {moves:.1f}" if round(moves, 1) > 0
            else "leaves the ratio unchanged to one decimal")
    text = (f"{name} prefers \" he\" to \" she\" by a ratio between {low:.1f} and {high:.1f}; swapping the "
            f"two occupations {swap}. ")
    if corpus_ratio is not None:
        text += f"In Tiny Shakespeare's training split the ratio of the two words is {corpus_ratio:.1f}."
    return text


def shift_text(before: Sequence[float], after: Sequence[float], baseline: float,
               shifted_baseline: float, dropped: str) -> str:
    """Exercise 2 of Chapter 8: each layer's mean share on position 0 ``before`` and ``after``
    dropping the first token (``dropped`` names it), against a head attending evenly (``baseline``,
    and ``shifted_baseline`` for the shorter windows). A share at least ``ABOVE`` times the uniform
    one has something to move; it "stays" when half its excess over uniform is still there."""
    parts = []
    for layer, (b, a) in enumerate(zip(before, after)):
        if b < ABOVE * baseline:
            how = "close to uniform before the shift: nothing to move"
        elif a - shifted_baseline >= 0.5 * (b - baseline):
            how = "most of its excess over uniform stays on position 0, with the position"
        else:
            how = f"most of its excess over uniform leaves with {dropped}, with the token"
        parts.append(f"layer {layer}, {b:.3f} → {a:.3f}: {how}")
    return (f"In this run (uniform attention gives {baseline:.3f}, and {shifted_baseline:.3f} on "
            f"the shorter windows): " + "; ".join(parts) + ".")


def sink_text(name: str, scores: Tensor, baseline: float, tokens_seen: int | None = None) -> str:
    """Section 8.8: how many heads are sinks, beside GPT-2's many. ``tokens_seen``: how many tokens
    the model trained on, when it is a small run (said where it grew no full sink)."""
    (l, h), = best_heads(scores, 1)
    n_sinks, total = int((scores > SINK_HEAD).sum()), scores.numel()
    best = scores[l, h].item()
    text = (f"In {name}, {n_sinks} of {total} heads put more than half of their attention on the first "
            f"token; the strongest, {_head(l, h)}, puts {best:.3f} there, {best / baseline:.1f} times the "
            f"uniform baseline of {baseline:.3f}. ")
    if n_sinks:
        text += "That is an attention sink."
    elif best >= CLEAR * baseline:
        text += "That is a sink in the making: clearly above the baseline, not yet most of the attention."
    else:
        text += "There is no attention sink: every head stays close to the baseline."
    if not n_sinks and tokens_seen is not None:
        text += (f" A full sink needs more training than this run had: Gu et al. (2025) found that "
                 f"sinks emerge after effective optimization on sufficient training data (their small "
                 f"models read 5 billion tokens), and this model read {tokens_seen:,}. GPT-2 itself "
                 f"(in Colab) measures sinks at full size.")
    return text + "\n\n" + _elsewhere(
        "many heads put most of their attention on the first token, whatever it is; "
        "Vig and Belinkov (2019) saw it in GPT-2, and Xiao et al. (2024) in every large language "
        "model they measured.")


def previous_token_text(name: str, scores: Tensor, baseline: float, real: bool) -> str:
    """Section 8.9: the best previous-token head, beside GPT-2's layer 4, head 11."""
    (l, h), = best_heads(scores, 1)
    best = scores[l, h].item()
    clear = "clearly above" if best >= CLEAR * baseline else "not far above"
    text = (f"In {name}, the best previous-token head is {_head(l, h)}: {best:.3f} of its attention goes to "
            f"the token just before, {best / baseline:.1f} times the uniform baseline of {baseline:.3f}, "
            f"{clear} it.")
    text += "\n\n" + _elsewhere(
        f"{_head(*_REF.previous_token_head)} is a previous-token head, the first half of the induction "
        "circuits of Olsson et al. (2022).")
    if real:
        rl, rh = _REF.previous_token_head
        rank = int((scores > scores[rl, rh]).sum()) + 1
        text += (f" Recomputed here, it scores {scores[rl, rh].item():.3f}, rank {rank} of "
                 f"{scores.numel()} heads.")
    return text


def ranked_heads_text(top: Sequence[tuple[int, int]], previous: Tensor, own: Tensor) -> str:
    """Section 8.9: which of the heads ranked by their previous-token score put more weight on the
    query's own token than on the one before it (``previous``, ``own``: (L, H) mean weights)."""
    own_heads = [(l, h) for l, h in top if own[l, h] > previous[l, h]]
    if not own_heads:
        return (f"Each of these {len(top)} heads puts more weight on the previous token than on the "
                "query's own.")
    said = "; ".join(f"{_head(l, h)} puts {own[l, h].item():.2f} on the query's own token and "
                     f"{previous[l, h].item():.2f} on the previous one" for l, h in own_heads)
    kind = ("Its line lies on the diagonal itself: a *current-token* head" if len(own_heads) == 1
            else "Their lines lie on the diagonal itself: *current-token* heads")
    return (f"A high rank is not a role: {said}. {kind}. A ranking by one score says which heads "
            "score highest, not what each of them does.")


def offline_recipe_text(info: dict, prev_best: float, sink_best: float, prev_base: float,
                        sink_base: float) -> str:
    """The closing note: how the offline model was made, and what its heads show."""
    m, t = info["settings"]["model"], info["settings"]["train"]
    threads = "1 thread" if info["threads"] == 1 else f"{info['threads']} threads"
    vocab = (f" restricted to {info['corpus_vocab']:,} tokens, those of the training text and "
             "`<|endoftext|>`" if "corpus_vocab" in info else "")
    return (f"The offline model ({info['recipe']}): {m['n_layers']} layers, {m['n_heads']} heads, "
            f"D = {m['d_model']}, context {m['context_length']}, GPT-2's tokenizer{vocab}; "
            f"{t['max_iters']:,} steps of batch {t['batch_size']} at learning rate {t['learning_rate']:g}, "
            f"every window starting with `<|endoftext|>`, from seed 1337. Training took "
            f"{info['train_seconds']:.0f} s ({info['device']}, {threads}) and reached a "
            f"validation loss of {info['val_loss']:.2f}. Its best previous-token head scores {prev_best:.3f}, "
            f"{prev_best / prev_base:.1f} times its baseline of {prev_base:.3f}, and its strongest sink "
            f"{sink_best:.3f}, {sink_best / sink_base:.1f} times its baseline of {sink_base:.3f}.")
