"""Chapter 1, exercise 1: a character tokenizer whose vocabulary is the sorted set of
characters."""

import torch
from grading.cases import Case, Step

name = "SortedCharTokenizer"


ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 \n!?;:,.'-"


def text(g, n):
    return "".join(
        ALPHABET[i] for i in g.randint(0, len(ALPHABET), (n,)).tolist()
    )


def cases(g):
    corpus, probe = text(g, 80), text(g, 12)
    chars = sorted(set(corpus))
    probe = "".join(c for c in probe if c in chars) or corpus[:5]
    smallest = "".join(chars[:3])
    return [
        Case(
            "vocabulary_is_sorted",
            [Step(attr="vocab_size"), Step((smallest,), method="encode")],
            [len(chars), [0, 1, 2]],
            init=Step((corpus,)),
        ),
        Case(
            "round_trip",
            [
                Step((probe,), method="encode"),
                Step(([chars.index(c) for c in probe],), method="decode"),
            ],
            [[chars.index(c) for c in probe], probe],
            init=Step((corpus,)),
        ),
    ]
