"""How much a generated sample reads like its corpus: the share of its words that are real words,
and the share that only repeat what it already said.

A fair, repeatable proxy for "readable": the fraction of a sample's words that occur
anywhere in the training text. Word soup ("theee", "rolsunsee") scores low, a sample made of the
play's words scores high, whatever it means. A loop ("the the the") scores high too, which is why
``repeated_share`` goes beside it.
"""

from __future__ import annotations

import functools
import math
import re
import statistics

import torch

from ..generate import generate
from .lessons import SE_BAR, Lesson, lesson

WORD = re.compile(r"[a-z]+(?:'[a-z]+)*")  # lower-cased letters, with inner apostrophes (o'er)
SAMPLE_CHARS = 500  # the length of the samples the book scores
SAMPLE_TEMPERATURE = 0.8  # nanoGPT's sample.py default: a little sharper than the model's distribution
LOOP_BAR = 0.5  # greedy decoding "loops" when half its words repeat a run of three already written
MOVING_BAR = 0.2  # sampling "keeps moving" when fewer than a fifth do


@functools.lru_cache(maxsize=4)
def corpus_words(text: str) -> frozenset[str]:
    """Every word of ``text``, lower-cased."""
    return frozenset(WORD.findall(text.lower()))


def sample_words(sample: str) -> list[str]:
    """The words of ``sample``, lower-cased; a last word that the sample's end may have cut short
    (the sample ends in a letter) is left out."""
    words = WORD.findall(sample.lower())
    return words[:-1] if sample[-1:].isalpha() else words


def real_word_share(sample: str, training_text: str) -> float:
    """The fraction of the words of ``sample`` that occur in ``training_text`` (0 to 1)."""
    words = sample_words(sample)
    if not words:
        raise ValueError(f"the sample has no words to score ({sample[:40]!r}...): generate a longer "
                         f"sample ({SAMPLE_CHARS:,} characters, say)")
    known = corpus_words(training_text)
    return sum(w in known for w in words) / len(words)


def sample_text(model, encode, decode, prompt: str = "ROMEO:", start: tuple[int, ...] = (),
                seed: int = 1337, temperature: float = SAMPLE_TEMPERATURE) -> str:
    """``SAMPLE_CHARS`` characters sampled at ``temperature`` after ``prompt`` (``SAMPLE_CHARS`` new
    tokens from a generator seeded with ``seed``), the prompt included; ``start`` are token ids put
    before the prompt and left out of the text (``<|endoftext|>`` for Chapter 8's offline model)."""
    idx = torch.tensor([[*start, *encode(prompt)]])  # (1, T)
    out = generate(model, idx, SAMPLE_CHARS, temperature=temperature,
                   generator=torch.Generator().manual_seed(seed))
    return decode(out[0, len(start):].tolist())[:SAMPLE_CHARS]


def repeated_share(sample: str, n: int = 3) -> float:
    """The fraction of a sample's runs of ``n`` consecutive words that it already wrote earlier:
    near 1 for a text stuck in a loop ("the the the", or a line said again and again), near 0 for
    one that keeps moving (0 to 1)."""
    words = sample_words(sample)
    if len(words) <= n:
        raise ValueError(f"the sample has {len(words)} words, too few to look for repeated runs of "
                         f"{n}: generate a longer sample ({SAMPLE_CHARS:,} characters, say)")
    seen, repeats = set(), 0
    for i in range(n, len(words) + 1):
        run = tuple(words[i - n:i])
        repeats += run in seen
        seen.add(run)
    return repeats / (len(words) - n + 1)


def decoding_text(greedy: str, sampled: str, tempered: str, temperature: float, bpe: str,
                  training_text: str) -> str:
    """Chapter 7's sentences on its scored samples: the character model decoded greedily, sampled
    at temperature 1 and at ``temperature``, and the BPE model's sample."""
    real = {k: real_word_share(t, training_text) for k, t in
            dict(greedy=greedy, sampled=sampled, tempered=tempered, bpe=bpe).items()}
    rep = {k: repeated_share(t) for k, t in dict(greedy=greedy, sampled=sampled, tempered=tempered).items()}
    if rep["greedy"] >= 0.5:
        text = (f"Greedy decoding is stuck in a loop: {rep['greedy']:.0%} of its words only repeat a run "
                f"of three it has already written, so its {real['greedy']:.0%} of real words flatters it. ")
    else:
        text = (f"Greedy decoding repeats itself less than usual here ({rep['greedy']:.0%} of its words "
                f"repeat an earlier run of three), with {real['greedy']:.0%} real words. ")
    moving = max(rep["sampled"], rep["tempered"])
    if moving >= rep["greedy"]:
        text += f"Sampling repeats as much ({moving:.0%}) "
    else:
        text += ("Sampling keeps moving (" + ("none of its words repeat a run of three" if moving == 0
                                             else f"at most {moving:.0%} repeated") + ") ")
    text += (f"and writes {real['sampled']:.0%} real words at temperature 1 and {real['tempered']:.0%} "
             f"at {temperature:g}, nanoGPT's default: ")
    text += ("the lower temperature gives up rare continuations, and most of them are misspellings. "
             if real["tempered"] > real["sampled"] else
             "the lower temperature does not help this sample. ")
    text += (f"The BPE model's sample scores {real['bpe']:.0%}, but its tokens are mostly whole words, so "
             "the measure is lenient with it: its weakness is the sense of what it writes, not the "
             "spelling.")
    return text


def real_words_lesson(shares: list[float], what: str, bar: float = 0.80) -> Lesson:
    """The lesson that ``what`` writes the play's words: the mean real-word share of its samples
    (one per seed), less ``SE_BAR`` standard errors, is at least ``bar``. The margin is in points."""
    n, mean = len(shares), statistics.fmean(shares)
    se = statistics.stdev(shares) / math.sqrt(n) if n > 1 else 0.0
    low = mean - SE_BAR * se
    each = f" (the samples': {', '.join(f'{v:.0%}' for v in shares)})" if n > 1 else ""
    seen = (f"{mean:.0%} of the words {what} writes are words of the training text" + each +
            (f"; {SE_BAR:g} standard errors below that mean is {low:.0%}" if n > 1 else ""))
    holds = f"{seen}: above the bar of {bar:.0%} this book sets for it."
    fails = (f"{seen}: below the bar of {bar:.0%} this book sets for it. A CPU that sums in "
             "another order trains another model from the same seed, and this one misspells "
             "more than the one the chapter was written with.")
    return lesson(f"{what} writes the play's words", 100 * (low - bar), "points", holds, fails)


def decoding_lessons(greedy: str, sampled: list[str]) -> tuple[Lesson, Lesson]:
    """Chapter 7's two lessons on loops: greedy decoding repeats itself (at least ``LOOP_BAR`` of
    its words end a run of three it already wrote) and sampling does not (below ``MOVING_BAR`` in
    every sample of ``sampled``). Margins in points."""
    loop, moving = repeated_share(greedy), max(repeated_share(t) for t in sampled)
    looping = lesson(
        "greedy decoding loops", 100 * (loop - LOOP_BAR), "points",
        f"Greedy decoding loops: {loop:.0%} of its words end a run of three already written.",
        f"Greedy decoding repeats less than it usually does here ({loop:.0%} of its words end "
        f"a run of three already written, below {LOOP_BAR:.0%}): a CPU that sums in another "
        "order trains another model, and its most likely path wanders longer before it "
        "returns to a phrase it already wrote.")
    keeps_moving = lesson(
        "sampling keeps moving", 100 * (MOVING_BAR - moving), "points",
        "Sampling keeps moving: " + ("no sample repeats a run of three words." if moving == 0
                                     else f"at most {moving:.0%} of a sample's words repeat a "
                                          "run of three."),
        f"Sampling repeats itself here ({moving:.0%} of a sample's words repeat a run of three, "
        f"above {MOVING_BAR:.0%}): a sample as long as {SAMPLE_CHARS} characters can fall "
        "into a loop by chance, and this one did.")
    return looping, keeps_moving


def soup_words(sample: str, training_text: str, k: int = 3) -> list[str]:
    """Up to ``k`` distinct words of ``sample``, as written (inner punctuation kept: "ajes!t"), that
    are not words of ``training_text``: what a sample misspells, quoted from the sample itself."""
    known, found = corpus_words(training_text), []
    for token in sample.split()[:-1] if sample[-1:].isalpha() else sample.split():
        core = token.strip(".,;:!?'\"-()[]")
        if core and core.lower() not in known and core not in found:
            found.append(core)
    return found[:k]


def _quoted(words) -> str:
    return ", ".join(f"\"{w}\"" for w in words)


def settings_text(samples: dict[str, str], low: float, high: float, training_text: str) -> str:
    """Chapter 7's sentences on samples decoded with different settings from one prompt and seed:
    ``samples`` maps "temperature <t>", "top-k <k>" and "top-p <p>" to each sample, ``low`` and
    ``high`` are the lowest and highest temperatures. Every example is quoted from the samples."""
    real = {name: real_word_share(text, training_text) for name, text in samples.items()}
    words = sample_words(samples[f"temperature {low:g}"])
    top = sorted(set(words), key=lambda w: (-words.count(w), words.index(w)))[:3]
    share = sum(w in top for w in words) / len(words)
    text = (f"At temperature {low:g}, {real[f'temperature {low:g}']:.0%} of the words are words of the "
            f"play, and its three commonest words ({_quoted(top)}) make {share:.0%} of them. ")
    soup = soup_words(samples[f"temperature {high:g}"], training_text)
    text += f"At {high:g}, {real[f'temperature {high:g}']:.0%} are" + (
        f", and it writes words the play never uses: {_quoted(soup)}. " if soup
        else ", and every word it writes is still a word of the play. ")
    others = [name for name in samples if not name.startswith("temperature")]
    return text + ("With temperature 1, " + " and ".join(
        f"{name} writes {real[name]:.0%} real words" for name in others)
        + f", against {real['temperature 1']:.0%} without a filter.")


def almost_greedy_text(temperature: float, first_difference: int | None,
                       logits: torch.Tensor | None = None) -> str:
    """Chapter 7's Exercise 3, as this run came out: whether sampling at ``temperature`` left
    greedy's text and, if so, at which position and how near a tie the two top ``logits`` (V,)
    were there (the logits that chose the token at ``first_difference``)."""
    if first_difference is None:
        return (f"In this run the text sampled at temperature {temperature:g} is greedy's to the "
                "end: every draw took the top token.")
    top = logits.topk(2).values
    runner_up = torch.softmax(logits / temperature, dim=-1).topk(2).values[1].item()
    return (f"In this run the two texts first differ at position {first_difference}: up to there "
            f"every draw took the top token. There the two top logits were "
            f"{(top[0] - top[1]).item():.3f} apart, so at temperature {temperature:g} the "
            f"runner-up kept a probability of {runner_up:.3f}, and the draw went another way "
            "than greedy's: a near-tie, and everything after it differs.")

