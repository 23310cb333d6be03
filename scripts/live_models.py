"""The book's own models for its pages (Chapters 7, 12 and 13): ONNX files the site serves.

    python scripts/live_models.py [--out .live/models]

Chapter 6's character model (``book_model("shakespeare-char")``) and Chapter 12's assistant
(``sft_run(SFTRecipe(seed=0))``, the model its section 12.5 talks to) are read from the
user's model cache, trained there first if absent (minutes), and written with
``gpt_from_scratch.export.export_onnx`` into ``--out``, which ``_config.yml``'s
``html_extra_path`` serves at ``<site>/models/``; ``book/_static/live-model.js`` runs them
in the page. The files are built, never committed (``.gitignore``). ``make live-models``
runs this; ``make book`` needs it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from gpt_from_scratch.chat import ChatTokenizer  # noqa: E402
from gpt_from_scratch.export import export_onnx  # noqa: E402

# file name -> (model, export options): what each widget mode loads (live-model.js reads
# models/NAME.onnx, and NAME-inside.onnx in its inside mode)
FILES = {
    "shakespeare-char.onnx": ("shakespeare-char", {}),  # Chapter 7: generate
    "shakespeare-char-inside.onnx": ("shakespeare-char", {"internals": True, "lens": True}),
    "assistant.onnx": ("assistant", {}),  # Chapter 12: chat; written last (make's target)
}


def book_models(cached_only: bool = False) -> dict:
    """``{name: (model, tokenizer)}`` for the names of ``FILES``, from the model cache. With
    ``cached_only``, a RuntimeError naming the entry where the cache holds none for this
    process's arithmetic (threads, ATEN_CPU_CAPABILITY), instead of training one: the
    browser test compares the page with the very models ``make live-models`` exported."""
    import torch

    from gpt_from_scratch.book.assistant_runs import SFTRecipe, sft_entries, sft_run
    from gpt_from_scratch.book.recipes import book_model, book_model_entry

    recipe = SFTRecipe(seed=0)  # Chapter 12's SEEDS[0], its CPU settings
    for entry in (book_model_entry("shakespeare-char"), sft_entries(recipe)[0]):
        if cached_only and not entry.path.exists():
            threads = torch.get_num_threads()
            capability = torch.backends.cpu.get_cpu_capability()
            raise RuntimeError(
                f"the model cache has no {entry.path.name} for this process's arithmetic "
                f"({threads} threads, {capability}): the page's files were exported under "
                "other settings. Run the browser test as `make browser-test` does "
                "(OMP_NUM_THREADS=1), as `make live-models` ran")
    model, tokenizer = book_model("shakespeare-char", progress=False)
    run = sft_run(recipe)
    return {"shakespeare-char": (model, tokenizer),
            "assistant": (run.model, ChatTokenizer(tokenizer, tokenizer.vocab_size))}


def write(out: Path, models: dict) -> list[Path]:
    """Each file of ``FILES`` into ``out``, in order; the paths written."""
    written = []
    for name, (model_name, options) in FILES.items():
        model, tokenizer = models[model_name]
        written.append(export_onnx(model, out / name, tokenizer, **options))
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / ".live" / "models",
                        help="the folder to write (default: .live/models)")
    args = parser.parse_args(argv)
    for path in write(args.out, book_models()):
        print(f"wrote {path} ({path.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
