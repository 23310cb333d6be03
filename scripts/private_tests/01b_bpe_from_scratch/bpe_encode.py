"""Chapter 1b, exercise 3: encode with a trained merge table, earliest merge first, chunk by chunk."""
from otter.test_files import test_case

from gpt_from_scratch.bpe import BPETokenizer

name = "bpe_encode"
points = 1
TRAIN = ("Now is the winter of our discontent made glorious summer by this sun of York. "
         "Ça va? Ünïcödé: Straße, résumé, 日本語, 😀. ") * 4
TOKENIZER = BPETokenizer.train(TRAIN, 320)


@test_case(hidden=True)
def english(bpe_encode):
    text = "the winter of our discontent, made glorious"
    assert list(bpe_encode(text, dict(TOKENIZER.merges))) == TOKENIZER.encode_ordinary(text)


@test_case(hidden=True)
def non_ascii(bpe_encode):
    text = "Straße? résumé! 日本語 😀😀 Ça"
    assert list(bpe_encode(text, dict(TOKENIZER.merges))) == TOKENIZER.encode_ordinary(text)
