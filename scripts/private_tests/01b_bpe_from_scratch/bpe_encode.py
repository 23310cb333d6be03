"""Chapter 1b, exercise 3: encode with a trained merge table, earliest merge first, chunk by chunk."""
from otter.test_files import test_case

from gpt_from_scratch.bpe_tokenizer import BPETokenizer

name = "bpe_encode"
points = 1
TRAIN = ("Shall I compare thee to a summer's day? Thou art more lovely and more temperate: rough winds "
         "do shake the darling buds of May, and summer's lease hath all too short a date. "
         "Ça va? Straße, résumé, naïveté, 日本語, 😀. ") * 2
TOKENIZER = BPETokenizer.train(TRAIN, 320)


@test_case(hidden=True)
def english(bpe_encode):
    text = "rough winds do shake the darling buds"  # the latest-learned merge first gives other ids
    assert list(bpe_encode(text, dict(TOKENIZER.merges))) == TOKENIZER.encode_ordinary(text)


@test_case(hidden=True)
def non_ascii(bpe_encode):
    text = "Straße? résumé! 日本語 😀😀 Ça"
    assert list(bpe_encode(text, dict(TOKENIZER.merges))) == TOKENIZER.encode_ordinary(text)
