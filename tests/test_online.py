"""The online branches of Chapters 8 and 11-14 against GPT-2 small's real weights, from
the Hugging Face hub: ``make test-online``, which the Online workflow
(.github/workflows/online.yml) runs weekly and on demand.

CI tests the offline book, as its committed outputs were made (HF_HUB_OFFLINE=1 and friends:
tests/test_workflows.py); these tests take the branches a reader with a network takes, on
the CPU. They pass only by loading the real weights: with GPT_FROM_SCRATCH_TEST_ONLINE=1
nothing skips, offline mode or an unreachable hub fails them, and the weights must be GPT-2
small's (124,439,808 parameters, the logits of transformers' GPT2LMHeadModel, and the
pronoun head's attention row of ``heads.GPT2_REFERENCE``, measured elsewhere on the same
checkpoint). Without the variable they skip (``make test`` has no network). Chapter 14's
TRL run is left out: on a CPU the chapter does not run it (its online cell says so); the
book's own GRPO step runs on the real weights.
"""

from __future__ import annotations

import os

import pytest
import torch

ONLINE_ENV = "GPT_FROM_SCRATCH_TEST_ONLINE"
OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")
GPT2_SMALL_PARAMETERS = 124_439_808
pytestmark = pytest.mark.skipif(
    not os.environ.get(ONLINE_ENV),
    reason=f"needs the internet and GPT-2's weights (500 MB): make test-online "
           f"({ONLINE_ENV})")


@pytest.fixture(scope="module")
def gpt2_small():
    """The book's GPT with GPT-2 small's weights: an error here fails, never skips."""
    from gpt_from_scratch.hf_weights import from_pretrained

    offline = [name for name in OFFLINE_VARIABLES if os.environ.get(name)]
    if offline:
        pytest.fail(f"{', '.join(offline)} set: the online tests need the hub",
                    pytrace=False)
    return from_pretrained("gpt2").eval()


@pytest.fixture(scope="module")
def theirs():
    from transformers import GPT2LMHeadModel

    return GPT2LMHeadModel.from_pretrained("gpt2", attn_implementation="eager").eval()


def test_the_weights_are_gpt2_small(gpt2_small):
    config = gpt2_small.config
    assert sum(p.numel() for p in gpt2_small.parameters()) == GPT2_SMALL_PARAMETERS
    shape = (config.vocab_size, config.context_length, config.d_model, config.n_layers,
             config.n_heads)
    assert shape == (50_257, 1024, 768, 12, 12), shape


def test_the_book_s_gpt_computes_what_transformers_computes(gpt2_small, theirs):
    from gpt_from_scratch import heads
    from gpt_from_scratch.tokenizer import gpt2_encoding

    ids = torch.tensor([gpt2_encoding().encode(heads.GPT2_REFERENCE.pronoun_sentence)])
    parity = heads.parity(gpt2_small, theirs, ids)
    assert parity.max_logit_diff < 1e-3 and parity.max_attention_diff < 1e-4, parity
    assert parity.same_greedy, parity


def test_the_pronoun_head_is_the_published_one(gpt2_small):
    """Where " She" looks in layer 5, head 10: the row measured elsewhere, which random
    weights of GPT-2's shape do not give."""
    from gpt_from_scratch import heads
    from gpt_from_scratch.tokenizer import gpt2_encoding

    reference = heads.GPT2_REFERENCE
    ids = torch.tensor([gpt2_encoding().encode(reference.pronoun_sentence)])
    layer, head = reference.pronoun_head
    with torch.no_grad():
        row = gpt2_small.attention_maps(ids)[layer][0, head, -1].tolist()
    difference = heads.compare_with_reference(row)
    assert heads.agreement(difference) == "agree", (difference, row)


def test_chapter_8_online_branch_on_the_real_weights(gpt2_small):
    """The chapter itself up to its exercises, as test_chapter8.py runs it with stand-ins,
    but with GPT-2's weights from the hub (only Chapter 6's model, trained elsewhere, stands
    in); ``gpt2_small`` first, so that without the weights it fails before the chapter
    runs."""
    from test_chapter8 import SMALL_MODELS, _check_common, _find, _run

    r, texts = _run(SMALL_MODELS)
    assert r["real"] is True and (r["layer"], r["head"]) == (5, 10)
    assert "OpenAI's weights loaded" in texts[0] and "not available" not in " ".join(texts)
    assert r["parity"][1] is True and r["parity"][0] < 1e-3, r["parity"]
    assert "they agree" in _find(texts, "differs from that measurement")
    _check_common(r, texts, "GPT-2 small")


def test_chapter_11_hellaswag_downloads_and_scores(gpt2_small):
    from gpt_from_scratch.book import measuring_prose as prose
    from gpt_from_scratch.book.hellaswag import (HELLASWAG_ITEMS, hellaswag_items,
                                                 hellaswag_rows)
    from gpt_from_scratch.evaluate import score_choices
    from gpt_from_scratch.tokenizer import gpt2_encoding

    rows = hellaswag_rows()  # downloaded into the cache; refused unless all 10,042 rows
    assert len(rows) == HELLASWAG_ITEMS
    encode = gpt2_encoding().encode_ordinary
    scores = {reading: score_choices(gpt2_small, encode,
                                     hellaswag_items(rows[:20], reading))
              for reading in ("nanogpt", "harness")}
    text = prose.hellaswag_text(None, scores)
    assert text.startswith("On 20 items"), text


def test_chapter_12_fine_tunes_gpt2_on_the_instructions(gpt2_small):
    from gpt_from_scratch.book import assistant_online

    run = assistant_online.online_run(steps=2, batch_size=2, n_shown=1)
    assert not run.text.startswith("*Not run here*"), run.text
    assert "GPT-2 small with the chat tokens and LoRA" in run.text
    assert len(run.responses) == 1, run.responses


def test_chapter_13_finds_heads_in_gpt2(gpt2_small):
    from gpt_from_scratch.book import inside_online

    for text in (inside_online.online_run(n=2, half=10),
                 inside_online.name_mover_run(n=2)):
        assert not text.startswith(inside_online.NOT_RUN), text


def test_chapter_14_trains_gpt2_with_grpo(gpt2_small):
    from gpt_from_scratch.book import verifier_online

    run = verifier_online.book_run(steps=1, lr=1e-4)
    assert len(run["reward"]) == 1 and run["trainable"] > 0, run
    assert all(0.0 <= p <= 1.0 for p in (*run["before"], *run["after"])), run
