"""Chapter 8 runs on both branches, and its generated text states what its outputs show.

The chapter is executed twice with stand-ins: once "online", where ``hf_weights.from_pretrained`` (and
transformers' ``GPT2LMHeadModel.from_pretrained``) return a random GPT-2-shaped model (6 layers of 12
heads, so GPT-2's layer 5, head 10 and layer 4, head 11 exist), and once "offline", where loading
fails as it does without a network and a small random model stands in for the trained offline model
(the committed notebook, re-run by nbval, uses the real one). Small random models, and 20 steps of
the induction demo, which is the same on both branches, keep both runs fast.
Each run ends with a cell that dumps the numbers the chapter computed; the test parses the Markdown
the chapter generated and compares.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

jupytext = pytest.importorskip("jupytext")
nbclient = pytest.importorskip("nbclient")
nbformat = pytest.importorskip("nbformat")

ROOT = Path(__file__).resolve().parents[1]
TWIN = ROOT / "notebooks" / "text" / "08_gpt2_weights.py"

SMALL_MODELS = '''
import torch
import transformers
from gpt_from_scratch.hf_weights import WeightsUnavailableError, from_hf
from gpt_from_scratch.model import GPT, GPTConfig


def _small_gpt(n_layers, n_heads, d_model, seed):
    torch.manual_seed(seed)
    config = GPTConfig(vocab_size=50_257, context_length=64, d_model=d_model, n_layers=n_layers,
                       n_heads=n_heads, dropout=0.0)
    return GPT(config).eval()


book_model = lambda name, progress=True: (_small_gpt(1, 2, 32, 1), enc)  # Chapter 6's, cheaply
_train_on_repeats = induction.train_on_repeats  # the same on both branches (nbval runs it):
induction.train_on_repeats = lambda *a, **k: _train_on_repeats(*a, **k | dict(steps=20))
'''

ONLINE = SMALL_MODELS + '''
torch.manual_seed(0)
_hub_model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
    n_layer=6, n_head=12, n_embd=96, n_positions=64, attn_implementation="eager")).eval()
transformers.GPT2LMHeadModel.from_pretrained = classmethod(lambda cls, *a, **k: _hub_model)
from_pretrained = lambda *a, **k: from_hf(_hub_model)
'''

OFFLINE = SMALL_MODELS + '''
def _no_network(*args, **kwargs):
    raise WeightsUnavailableError("stand-in: the hub cannot be reached")


from_pretrained = _no_network
_info = dict(recipe="stand-in", train_seconds=12.0, device="cpu", threads=2, val_loss=6.5, corpus_vocab=11_235,
             settings=dict(model=dict(n_layers=2, n_heads=4, d_model=32, context_length=64),
                           train=dict(max_iters=10, batch_size=4, learning_rate=1e-3)))
offline_model = lambda: (_small_gpt(2, 4, 32, 2), _info)
'''

DUMP = '''
import json
print("RESULTS" + json.dumps(dict(
    real=REAL_GPT2, layer=layer, head=head, she=last_she[layer, head].tolist(),
    he=last_he[layer, head].tolist(), tokens=token_labels(she[0], enc),
    sink=first_share.tolist(), prev=prev_score.tolist(), losses=losses, bias=bias_weights,
    ratios=ratios, parity=[parity.max_logit_diff, parity.same_greedy],
    ch6=[ch6_loss, n_ch6, per_window.std().item()],
)))
'''


def _run(stand_ins: str) -> tuple[dict, list[str]]:
    """Execute the chapter up to its exercises with ``stand_ins`` run after the imports."""
    nb = jupytext.read(TWIN)
    end = next(i for i, c in enumerate(nb.cells) if "## Exercises" in c.source)
    cells = nb.cells[:end]
    imports = next(i for i, c in enumerate(cells) if "from gpt_from_scratch import heads" in c.source)
    cells = [c for c in cells if "colab-setup" not in c.metadata.get("tags", [])]
    imports = next(i for i, c in enumerate(cells) if "from gpt_from_scratch import heads" in c.source)
    cells.insert(imports + 1, nbformat.v4.new_code_cell(stand_ins))
    cells.append(nbformat.v4.new_code_cell(DUMP))
    nb.cells = cells
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT)}}).execute()
    texts = [o["data"]["text/markdown"] for c in nb.cells if "remove-input" in c.metadata.get("tags", [])
             for o in c.get("outputs", []) if "text/markdown" in o.get("data", {})]
    dump = "".join(o.get("text", "") for o in nb.cells[-1].outputs)
    return json.loads(dump.split("RESULTS", 1)[1]), texts


def _find(texts: list[str], needle: str) -> str:
    found = [t for t in texts if needle in t]
    assert found, f"no generated text contains {needle!r}"
    return found[0]


def _best(scores: list[list[float]]) -> tuple[int, int, float]:
    flat = [(v, l, h) for l, row in enumerate(scores) for h, v in enumerate(row)]
    v, l, h = max(flat)
    return l, h, v


def _check_common(r: dict, texts: list[str], name: str) -> None:
    girl, boy = r["tokens"].index("␣girl"), r["tokens"].index("␣boy")
    pronoun = _find(texts, f"{name}'s layer {r['layer']}, head {r['head']}, \"She\" gives")
    assert f"\" girl\" {r['she'][girl]:.3f} and \" boy\" {r['she'][boy]:.3f}" in pronoun
    favours = r["she"][girl] > r["she"][boy] and r["he"][boy] > r["he"][girl]
    assert ("Each pronoun favours" in pronoun) == favours
    l, h, v = _best(r["prev"])
    assert f"best previous-token head is layer {l}, head {h}: {v:.3f}" in _find(texts, "previous-token head")
    n_sinks = sum(x > 0.5 for row in r["sink"] for x in row)
    n_heads = sum(len(row) for row in r["sink"])
    l, h, v = _best(r["sink"])
    sink = _find(texts, "heads put more than half")
    assert f"{n_sinks} of {n_heads} heads" in sink and f"layer {l}, head {h}, puts {v:.3f}" in sink
    low, high = min(r["ratios"].values()), max(r["ratios"].values())
    assert f"between {low:.1f} and {high:.1f}" in _find(texts, "prefers \" he\"")
    for model_name, loss in r["losses"].items():
        assert f"{model_name} scores {loss:.2f} nats" in _find(texts, "nats per token")
    ch6_loss, n_ch6, sd = r["ch6"]
    windows = _find(texts, "Scored as Chapter 6 scores it")
    assert f"the mean over the {n_ch6} random windows" in windows
    assert f"the Chapter 6 model gets {ch6_loss:.2f}, Chapter 6's number" in windows
    assert f"evenly spaced windows it gets {r['losses']['the Chapter 6 model']:.2f}." in windows
    assert f"standard deviation of {sd:.2f}" in windows
    for text in texts:
        assert "{cite}" not in text, "Colab shows MyST roles literally: write citations out"


def test_chapter_8_online_branch_speaks_of_gpt2_and_compares_with_the_published_figures():
    r, texts = _run(ONLINE)
    assert r["real"] is True and (r["layer"], r["head"]) == (5, 10)
    assert "OpenAI's weights loaded" in texts[0] and "not available" not in " ".join(texts)
    parity = _find(texts, "differ by at most")
    assert "On OpenAI's GPT-2 small weights" in parity
    assert float(re.search(r"at most (\S+) in", parity).group(1)) == pytest.approx(r["parity"][0], rel=0.05)
    _check_common(r, texts, "GPT-2 small")
    from gpt_from_scratch.heads import compare_with_reference

    diff = compare_with_reference(r["she"])
    assert f"by at most {diff:.4f}: they {'agree' if diff <= 0.01 else 'do not agree'}" in " ".join(texts)
    prev = r["prev"]
    rank = 1 + sum(x > prev[4][11] for row in prev for x in row)
    assert f"it scores {prev[4][11]:.3f}, rank {rank} of 72 heads" in _find(texts, "Recomputed here, it")


def test_chapter_8_offline_branch_speaks_of_the_offline_model_beside_gpt2s_figures():
    r, texts = _run(OFFLINE)
    assert r["real"] is False
    assert "not available" in texts[0] and "10 steps of batch 4 at learning rate 0.001, in 12 s" in texts[0] and "11,235 GPT-2 tokens" in texts[0]
    assert "a randomly initialised GPT-2-shaped model" in _find(texts, "differ by at most")
    _check_common(r, texts, "the offline model")
    joined = " ".join(texts)
    assert "Recomputed" not in joined
    assert joined.count("measured elsewhere") >= 4  # beside each analysis: pronoun, bias, sink, previous
    assert "The offline model (stand-in)" in texts[-1]
