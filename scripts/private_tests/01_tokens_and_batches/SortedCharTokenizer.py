"""Chapter 1, exercise 1: a character tokenizer whose vocabulary is the sorted set of characters."""
from otter.test_files import test_case

name = "SortedCharTokenizer"
points = 1
TEXT = "Ay, marry, is't:\nthe QUEEN of Denmark; 3 crowns!\n"


@test_case(hidden=True)
def vocabulary_is_sorted(SortedCharTokenizer):
    tok = SortedCharTokenizer(TEXT)
    size = tok.vocab_size() if callable(tok.vocab_size) else tok.vocab_size
    assert size == len(set(TEXT))
    assert [int(i) for i in tok.encode("\n !")] == [0, 1, 2]  # the smallest characters first


@test_case(hidden=True)
def round_trip(SortedCharTokenizer):
    tok = SortedCharTokenizer(TEXT)
    chars = sorted(set(TEXT))
    ids = [int(i) for i in tok.encode("Denmark's QUEEN")]
    assert ids == [chars.index(c) for c in "Denmark's QUEEN"]
    assert tok.decode(ids) == "Denmark's QUEEN"
