"""Chapter 1b, exercise 3: encode with a trained merge table, earliest merge first, chunk by
chunk."""

import torch

from gpt_from_scratch.bpe_tokenizer import BPETokenizer
from grading.cases import Case, Step, Pairs

name = "bpe_encode"


TRAIN = (
    "Shall I compare thee to a summer's day? Thou art more lovely and more temperate: rough winds "
    "do shake the darling buds of May, and summer's lease hath all too short a date. "
    "Ça va? Straße, résumé, naïveté, 日本語, 😀. "
) * 2
ENGLISH = TRAIN.split("Ça")[0].split()
LATEST_FIRST_DIFFERS = "rough winds do shake the darling buds"  # merges compete here
OTHER = ["Straße?", "résumé!", "日本語", "😀😀", "Ça", "naïveté,", "va?"]


def sample(words, g, n):
    return " ".join(words[i] for i in g.randint(0, len(words), (n,)).tolist())


def cases(g):
    tokenizer = BPETokenizer.train(TRAIN, 320)
    merges = Pairs(dict(tokenizer.merges))
    return [
        Case(label, [Step((text, merges))], [tokenizer.encode_ordinary(text)])
        for label, text in (
            ("english", LATEST_FIRST_DIFFERS + " " + sample(ENGLISH, g, 5)),
            ("non_ascii", sample(OTHER, g, 6)),
        )
    ]
