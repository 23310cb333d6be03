"""gpt_from_scratch: the companion package of the book *GPT from Scratch*.

One module per idea, in the order the chapters build them:

==================  =========================================================
module              chapter
==================  =========================================================
``data``            1  Tokens and batches (Tiny Shakespeare, splits, batches)
``tokenizer``       1  Tokens and batches (GPT-2 BPE via tiktoken, characters)
``bpe``             1b Byte-pair encoding from scratch (identical to tiktoken)
``embeddings``      2  Embeddings and positional encoding
``layernorm``       3  Layer normalization
``attention``       4  Attention
``model``           5  The full GPT
``train``           6  Training on Tiny Shakespeare (the loop; re-exports the next three)
``checkpoint``      6  Crash-safe checkpoints (safetensors + JSON)
``recipes``         6  The data at two levels and the book's two models
``cli``             6  ``python -m gpt_from_scratch.train`` and ``torchrun``
``generate``        7  Generating text
``exercises``       every chapter's exercises: ``check_*`` functions
``plotting``        8  Real GPT-2 weights and what the heads attend to
``heads``           8  head scores (sinks, previous-token heads), GPT-2's published figures
``heads_prose``     8  the chapter's sentences, written from the loaded model's numbers
``offline_model``   8  the small model analysed when GPT-2's weights are unavailable
``corpus_vocab``    8  a GPT that learns only its corpus's tokens and reads GPT-2's ids
``finetune``        9  Fine-tuning: the speaker-classification task, the classifier head
``finetune_prose``  9  the chapter's sentences, written from the measured numbers
``lora``            9  LoRA from scratch: ``LoRALinear``, ``apply_lora``, merge and unmerge
==================  =========================================================

Modules are imported lazily, so ``import gpt_from_scratch`` stays fast.
"""

__version__ = "0.1.0"
