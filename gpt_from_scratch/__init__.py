"""gpt_from_scratch: the companion package of the book *GPT from Scratch*.

One module per idea, in the order the chapters build them:

==================  =========================================================
module              chapter
==================  =========================================================
``data``            1  Tokens and batches (Tiny Shakespeare, splits, batches)
``tokenizer``       1  Tokens and batches (GPT-2 BPE via tiktoken, characters)
``bpe``             1b Byte-pair encoding from scratch (identical to tiktoken)
``bpe_train``       1b learning the merges from a text (``BPETokenizer.train``)
``embeddings``      2  Embeddings and positional encoding
``layernorm``       3  Layer normalization (and Chapter 10's RMSNorm)
``attention``       4  Attention
``plotting``        4  attention heatmaps with token labels
``model``           5  The full GPT
``diagram``         5  GPT-2's architecture drawn from a model's modules
``train``           6  Training on Tiny Shakespeare (the loop; re-exports the next four)
``train_config``    6  ``TrainConfig``, ``History``, the learning-rate schedule, AdamW
``checkpoint``      6  Crash-safe checkpoints (safetensors + JSON)
``recipes``         6  The data at two levels and the book's two models
``cli``             6  ``python -m gpt_from_scratch.train`` and ``torchrun``
``ladder``          6  Karpathy's build-up ladder from the book's own parts
``ladder_prose``    6  the ladder's table and sentences, written from the losses
``precision``       6  mixed precision: fp32, bf16, fp16 with a gradient scaler
``generate``        7  Generating text
``padding``         7  prompts of different lengths in one batch (left padding)
``fast``            7  a static KV cache and a compiled decoding step
``speedups``        7  timing, host reads, page faults; the measured speed-ups as sentences
``exercises``       every chapter's exercises: ``check_*`` functions
``utils``           every chapter's helpers: seeds, devices, checked arguments
``hf_weights``      8  weights to and from Hugging Face's GPT-2
``heads``           8  head scores (sinks, previous-token heads), GPT-2's published figures
``heads_plots``     8  many heads at once: grids, side-by-side maps, bertviz's head view
``heads_prose``     8  the chapter's sentences, written from the loaded model's numbers
``offline_model``   8  the small model analysed when GPT-2's weights are unavailable
``corpus_vocab``    8  a GPT that learns only its corpus's tokens and reads GPT-2's ids
``finetune``        9  Fine-tuning: the speaker-classification task, the classifier head
``finetune_prose``  9  the chapter's sentences, written from the measured numbers
``lora``            9  LoRA from scratch: ``LoRALinear``, ``apply_lora``, merge and unmerge
``rope``            10 Rotary position embeddings (Llama's layout)
``gqa``             10 Grouped-query attention and the KV cache's size
``modern``          10 A Llama-style model (RMSNorm, SwiGLU, RoPE, GQA), exact to transformers'
``modern_prose``    10 the verdict of the GPT-2 versus Llama training comparison
==================  =========================================================

Modules are imported lazily, so ``import gpt_from_scratch`` stays fast.
"""

__version__ = "0.1.0"
