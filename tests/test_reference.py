"""Reference runs (issue 30): ``make reference-runs TINY=1`` writes them, ``reference_run`` reads and
verifies them. The tiny artifacts are built once, in a temporary folder, by the script itself."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest
import torch

from gpt_from_scratch.book import ladder, offline_model, recipes, reference, samples
from gpt_from_scratch.book.corpus_vocab import CorpusVocabGPT
from gpt_from_scratch.book.reference import ReferenceUnavailable, reference_run
from gpt_from_scratch.book.reference_prose import found_text, loss_curves, run_text
from gpt_from_scratch.book.samples import real_word_share
from gpt_from_scratch.data import ChecksumError, tiny_shakespeare_path
from gpt_from_scratch.model import GPT, GPTConfig
from gpt_from_scratch.train import estimate_loss

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("reference_runs", ROOT / "scripts" / "reference_runs.py")
reference_runs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(reference_runs)
SHARD = 1 << 20  # bytes: small enough that the tiny BPE model (3 MB) needs several shards


TINY_SAMPLE = 120  # characters of each run's sample (the book's are 500)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A data folder holding ``reference/`` as ``scripts/reference_runs.py --tiny`` writes it."""
    data = tmp_path_factory.mktemp("data")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GPT_FROM_SCRATCH_CACHE", str(tmp_path_factory.mktemp("cache")))
        mp.setattr(reference, "MAX_SHARD", SHARD)
        mp.setattr(samples, "SAMPLE_CHARS", TINY_SAMPLE)  # each sample a token a character
        mp.setattr(ladder, "FINAL_CONFIG", ladder.FINAL_CONFIG)  # the script shrinks these
        for table in (recipes.RECIPES, offline_model.OFFLINE_RECIPES):
            for name in [n for n in table if n.endswith("-full")]:
                mp.setitem(table, name, table[name])
        reference_runs.main(["--tiny", "--out", str(data / "reference")])
    (data / "tinyshakespeare").symlink_to(tiny_shakespeare_path().parent)  # the corpus, as in CI
    return data


@pytest.fixture
def data(built, tmp_path, monkeypatch) -> Path:
    """A private copy of the built data folder, found through $GPT_FROM_SCRATCH_DATA, empty cache."""
    copy = tmp_path / "data"
    shutil.copytree(built, copy, symlinks=True)
    monkeypatch.setenv("GPT_FROM_SCRATCH_DATA", str(copy))
    monkeypatch.setenv("GPT_FROM_SCRATCH_CACHE", str(tmp_path / "cache"))
    return copy


MODEL_RUNS = ("shakespeare-char-full", "shakespeare-bpe-full", "shakespeare-bpe-heads-full")


def test_the_manifest_describes_every_run_and_every_file(built):
    manifest = json.loads((built / "reference" / "manifest.json").read_text())
    assert set(manifest["runs"]) == set(MODEL_RUNS) | {"ladder", "finetune"}
    for name in MODEL_RUNS:
        info = manifest["runs"][name]
        for key in ("recipe", "config", "seed", "torch", "device", "wall_seconds",
                    "best_val_loss", "final_val_loss", "sample", "files"):
            assert key in info, (name, key)
        assert len(info["sample"]) == TINY_SAMPLE and 0 <= info["real_words"] <= 1
        assert info["best_val_loss"] == min(info["history"]["val_loss"])
        on_disk = {str(p.relative_to(built / "reference"))
                   for p in (built / "reference" / name).iterdir()}
        assert on_disk == set(info["files"])  # weights only, every file hashed
        for file, meta in info["files"].items():
            assert (built / "reference" / file).stat().st_size == meta["bytes"] <= SHARD + (1 << 16)
    rows = manifest["runs"]["ladder"]["tables"]["ladder"]
    assert [r["name"] for r in rows][1:-1] == [r.name for r in ladder.RUNGS]
    assert "bag of tokens" in manifest["runs"]["finetune"]["tables"]["finetune"]


def test_a_large_run_is_sharded_with_the_hubs_index(built):
    folder = built / "reference" / "shakespeare-bpe-full"
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    shards = set(index["weight_map"].values())
    assert len(shards) > 1 and shards | {"model.safetensors.index.json"} == {
        p.name for p in folder.iterdir()}


def test_half_precision_is_kept_only_where_the_loss_does_not_move(built):
    manifest = json.loads((built / "reference" / "manifest.json").read_text())
    for name in MODEL_RUNS:
        info = manifest["runs"][name]
        moved = abs(info["half_check"]["float16"] - info["half_check"]["float32"])
        assert info["dtype"] == ("float16" if moved <= reference_runs.HALF_TOLERANCE else "float32")


def test_a_loaded_run_scores_what_the_manifest_says(data):
    run = reference_run("shakespeare-char-full")
    model = run.model()
    assert type(model) is GPT and not model.training
    assert model.lm_head.weight is model.wte.weight  # tied again after loading
    _, val_ids, _ = recipes.load_data("char")
    train = run.info["recipe"]["train"]
    loss = estimate_loss(model, {"val": val_ids}, train["batch_size"], None, train["eval_iters"],
                         seed=reference_runs.SEED)["val"]
    assert loss == pytest.approx(run.info["half_check"][run.info["dtype"]], abs=1e-5)


def test_the_offline_run_loads_with_its_corpus_vocabulary(data):
    model = reference_run("shakespeare-bpe-heads-full").model()
    assert isinstance(model, CorpusVocabGPT) and model.config.vocab_size == 50_257
    assert model(torch.tensor([[50_256, 5962, 22307, 25]]))[0].shape == (1, 4, 50_257)


def test_a_tables_only_run_has_no_model(data):
    run = reference_run("ladder")
    assert run.info["tables"]["ladder"]
    with pytest.raises(ValueError, match="no weights, only its tables"):
        run.model()


def test_an_unknown_name_lists_the_runs(data):
    with pytest.raises(KeyError, match="shakespeare-char-full"):
        reference_run("shakespeare-char-huge")


def _shard(data: Path) -> Path:
    return sorted((data / "reference" / "shakespeare-bpe-full").glob("*.safetensors"))[0]


def test_a_changed_file_is_named_with_the_fix(data):
    shard = _shard(data)
    raw = bytearray(shard.read_bytes())
    raw[-1] ^= 0xFF
    shard.write_bytes(bytes(raw))
    with pytest.raises(ChecksumError, match=f"{shard}.*the manifest says.*make reference-runs"):
        reference_run("shakespeare-bpe-full")


def test_a_truncated_file_is_named_with_the_fix(data):
    shard = _shard(data)
    shard.write_bytes(shard.read_bytes()[:1000])
    with pytest.raises(ChecksumError, match=f"{shard} is truncated: 1,000 of"):
        reference_run("shakespeare-bpe-full")


def test_a_missing_manifest_is_named_with_the_fix(data):
    (data / "reference" / "manifest.json").unlink()
    with pytest.raises(ReferenceUnavailable, match="holds no manifest.json.*make reference-runs"):
        reference_run("shakespeare-char-full")


@pytest.mark.parametrize("text", ['{"format": "gpt_from_scratch.reference/1", "ru', '', '[1]'])
def test_a_truncated_manifest_is_named_with_the_fix(tmp_path, monkeypatch, text):
    (tmp_path / "reference").mkdir()
    (tmp_path / "reference" / "manifest.json").write_text(text)
    monkeypatch.setenv("GPT_FROM_SCRATCH_DATA", str(tmp_path))
    monkeypatch.setenv("GPT_FROM_SCRATCH_CACHE", str(tmp_path / "cache"))
    error = ChecksumError if text != "[1]" else ValueError
    with pytest.raises(error, match=r"reference/manifest.json (is not valid JSON .* truncated or "
                                    r"damaged|is not a reference-run manifest).*make reference-runs"):
        reference_run("shakespeare-char-full")


def test_a_manifest_other_than_the_pinned_one_is_refused(data, monkeypatch):
    monkeypatch.setattr(reference, "MANIFEST_SHA256", "0" * 64)
    with pytest.raises(ChecksumError, match="manifest.json has sha256 .* the package pins 0000"):
        reference_run("shakespeare-char-full")


@pytest.fixture
def nowhere(tmp_path, monkeypatch):
    """No local copy: $GPT_FROM_SCRATCH_DATA unset, an empty cache."""
    monkeypatch.delenv("GPT_FROM_SCRATCH_DATA", raising=False)
    monkeypatch.setenv("GPT_FROM_SCRATCH_CACHE", str(tmp_path / "cache"))


def test_unpublished_and_absent_is_one_sentence(nowhere, monkeypatch):
    monkeypatch.setattr(reference, "HUB_REPO_ID", None)
    with pytest.raises(ReferenceUnavailable) as err:
        reference_run("shakespeare-char-full")
    assert "not published yet" in str(err.value) and str(err.value).count(". ") == 0


def test_no_network_is_one_sentence(nowhere, monkeypatch):
    import huggingface_hub

    def offline(*args, **kwargs):
        raise ConnectionError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(reference, "HUB_REPO_ID", "someone/reference-runs")
    monkeypatch.setattr(reference, "HUB_REVISION", "a" * 40)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    with pytest.raises(ReferenceUnavailable, match="could not be downloaded from someone/"
                                                   "reference-runs .*offline") as err:
        reference_run("shakespeare-char-full")
    assert err.value.__cause__ is None and err.value.__suppress_context__  # no chained traceback


def test_a_download_lands_in_the_cache_and_is_verified(built, nowhere, monkeypatch, tmp_path):
    import fnmatch

    import huggingface_hub

    calls = []

    def hub(repo_id, revision, local_dir, allow_patterns):  # the published copy is `built`
        calls.append(revision)
        for file in (built / "reference").rglob("*"):
            rel = str(file.relative_to(built / "reference"))
            if file.is_file() and any(fnmatch.fnmatch(rel, p) for p in allow_patterns):
                (Path(local_dir) / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(file, Path(local_dir) / rel)

    monkeypatch.setattr(reference, "HUB_REPO_ID", "someone/reference-runs")
    monkeypatch.setattr(reference, "HUB_REVISION", "b" * 40)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", hub)
    assert reference_run("shakespeare-char-full").path == tmp_path / "cache" / "reference" / \
        "shakespeare-char-full"
    reference_run("shakespeare-bpe-full").model()  # its files fetched on demand
    assert calls == ["b" * 40] * 2
    with pytest.raises(ReferenceUnavailable, match="download=True"):
        shutil.rmtree(tmp_path / "cache")
        reference_run("shakespeare-char-full", download=False)


def test_real_word_share_counts_the_words_of_the_training_text():
    text = "The cat sat on the mat, o'er the hill."
    assert real_word_share("the CAT sat zzq o'er mat", text) == pytest.approx(4 / 5)  # "mat" cut
    assert real_word_share("the zzq.", text) == 0.5  # ends after a word: nothing cut
    assert real_word_share("qqq xxx the", text) == 0.0
    with pytest.raises(ValueError, match="no words"):
        real_word_share("!!", text)


def test_the_full_bpe_models_files_each_fit_a_shard(tmp_path):
    model = GPT(GPTConfig(**recipes.RECIPES["shakespeare-bpe-full"].model))  # 50,257 x 384 embedding
    info = reference.save_run(tmp_path, "bpe", model, {}, half=True)
    sizes = [meta["bytes"] for meta in info["files"].values()]
    assert max(sizes) <= reference.MAX_SHARD == 15 << 20 and sum(sizes) > 50 << 20
    loaded = reference.ReferenceRun("bpe", info, tmp_path / "bpe").model()
    assert torch.equal(loaded.wte.weight, model.wte.weight.half().float())


def test_the_reference_sentences_come_from_the_manifest(data):
    info = reference_run("shakespeare-char-full").info
    text = run_text(info, cpu_best=info["best_val_loss"] + 0.5, cpu_steps=1000)
    assert f"{info['best_val_loss']:.3f}" in text and "above it by 0.500" in text
    assert f"{info['real_words']:.0%} of the words" in text
    history = type("History", (), dict(eval_step=[0, 6], val_loss=[4.2, 4.0]))
    assert len(loss_curves(info, history).axes[0].lines) == 2


def test_repeated_share_finds_loops_and_decoding_text_says_so():
    from gpt_from_scratch.book.samples import decoding_text, repeated_share

    assert repeated_share("the the the the the the.") == pytest.approx(3 / 4)
    assert repeated_share("one two three four five six.") == 0.0
    with pytest.raises(ValueError, match="too few"):
        repeated_share("one two.")
    text = "The cat sat on the mat, o'er the hill. A dog ran far away from home today."
    loop = "the cat the cat the cat the cat the cat the cat."
    said = decoding_text(loop, "a dog ran far away from home.", "the cat sat on the mat.", 0.8,
                         "the hill the dog.", text)
    assert said.startswith("Greedy decoding is stuck in a loop: ")
    assert "writes 100% real words at temperature 1 and 100% at 0.8" in said
    assert "does not help" in said and "scores 100%" in said


def test_a_section_describes_only_the_runs_that_are_here(monkeypatch):
    monkeypatch.setattr(reference, "HUB_REPO_ID", None)
    none = found_text({"shakespeare-char-full": None, "ladder": None}, "the curves")
    assert none.startswith("No reference run (`shakespeare-char-full` and `ladder`) is on this "
                           "machine, and this version of the book pins no published copy")
    assert "only this chapter's own run" in none and "With one, it would show the curves." in none
    assert "trained" not in none and "published beside" not in none
    monkeypatch.setattr(reference, "HUB_REPO_ID", "someone/runs")
    monkeypatch.setattr(reference, "HUB_REVISION", "0" * 40)
    assert "could not be fetched" in found_text({"ladder": None}, "x")
    run = reference.ReferenceRun("ladder", dict(device="NVIDIA H100", torch="2.5.1",
                                                wall_seconds=1234.4), Path("."))
    some = found_text({"ladder": run, "finetune": None}, "the table")
    assert some == ("Found: `ladder` (NVIDIA H100, torch 2.5.1, 1,234 s), each file checked against "
                    "its manifest. Not found: `finetune`; what needs it is left out. Below: the table.")


def test_the_settings_sentences_quote_their_examples_from_the_samples():
    from gpt_from_scratch.book.samples import settings_text, soup_words

    play = "the king and the queen went to the tower to sleep, my lord"
    assert soup_words("The kign, my lrod! the quee", play) == ["kign", "lrod"]  # "quee" may be cut
    samples = {"temperature 0.5": "the king and the the queen went to the the tower. ",
               "temperature 1": "the kign went to sleep. ",
               "temperature 1.5": "Thx qu!een wnt to the towr. ",
               "top-k 5": "the king went to the tower. ", "top-p 0.8": "my lord, the king went. "}
    text = settings_text(samples, 0.5, 1.5, play)
    assert ("At temperature 0.5, 100% of the words are words of the play, and its three commonest "
            "words (\"the\", \"king\", \"and\") make 64% of them.") in text
    assert "At 1.5, 29% are, and it writes words the play never uses: \"Thx\", \"qu!een\", \"wnt\"" in text
    for quoted in re.findall(r'"([^"]+)"', text):
        assert any(quoted in sample for sample in samples.values()), quoted
    assert "top-k 5 writes 100% real words and top-p 0.8 writes 100% real words, against 80%" in text
    samples["temperature 1.5"] = "the queen went to the tower. "
    assert "every word it writes is still a word of the play" in settings_text(samples, 0.5, 1.5, play)


def test_the_almost_greedy_sentence_follows_the_run():
    from gpt_from_scratch.book.samples import almost_greedy_text

    assert "greedy's to the end" in almost_greedy_text(0.01, None)
    logits = torch.tensor([2.0, 1.99, -3.0])  # a near-tie: 0.01 apart
    text = almost_greedy_text(0.01, 89, logits)
    assert "first differ at position 89" in text and "0.010 apart" in text
    assert "the runner-up kept a probability of 0.269" in text  # 1 / (1 + e)
