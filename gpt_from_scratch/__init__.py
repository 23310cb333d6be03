"""gpt_from_scratch: the companion package of the book *GPT from Scratch*.

Two layers. The package root is **the GPT a reader builds**, one module per idea, in the
order the chapters build them; ``book`` holds **what the chapters need to show it**
(sentences written from results, figures, the book's recipes and cached models, timing).
Imports run downhill only: each root module imports root modules below it, ``book`` imports
the root, never the other way (``tests/test_layers.py`` walks the imports and fails on a
circle or an upward import).

======================  =========================================================
the GPT                 chapter
======================  =========================================================
``utils``               every chapter's helpers: seeds, devices, checked arguments
``tokenizer``           1  GPT-2's tokenizer via tiktoken, and characters
``data``                1  Tiny Shakespeare: download, splits, token files, batches
``bpe``                 1b byte-pair encoding: pre-tokenization, merges, learning them
``bpe_tokenizer``       1b ``BPETokenizer``, identical to tiktoken's
``embeddings``          2  token embeddings, sinusoidal and learned positions
``layernorm``           3  ``LayerNorm`` (and Chapter 10's ``RMSNorm``)
``attention``           4  causal multi-head self-attention and its KV cache
``model``               5  the full GPT: ``GPTConfig``, ``Block``, ``GPT``
``precision``           6  mixed precision: fp32, bf16, fp16 with a gradient scaler
``train_config``        6  ``TrainConfig``, ``History``, the learning-rate schedule, AdamW
``checkpoint``          6  crash-safe checkpoints (safetensors + JSON)
``checkpoint_folder``   6  the checkpoint folder: three files a crash leaves loadable
``train``               6  the training loop and ``estimate_loss``
``generate``            7  sampling: temperature, top-k, top-p, min-p, greedy
``fast``                7  a static KV cache and a compiled decoding step
``padding``             7  prompts of different lengths in one batch (left padding)
``export``              7  the book's models as ONNX files, for ONNX Runtime and the page
``allocator``           7  training on a big vocabulary without page faults
``hf_weights``          8  weights to and from Hugging Face's GPT-2
``heads``               8  head scores (sinks, previous-token heads), parity, figures
``finetune``            9  the speaker-classification task, the classifier head
``lora``                9  LoRA from scratch: ``LoRALinear``, ``apply_lora``, merge
``rope``                10 rotary position embeddings (Llama's layout)
``gqa``                 10 grouped-query attention and the KV cache's size
``modern``              10 a Llama-style model, exact to transformers'
``evaluate``            11 multiple choice by likelihood (acc, acc_norm), bits per byte;
                           16 text_kl (a quantized copy against its model)
``chat``                12 chat format: turn tokens, ``render``, its loss mask, ``chat``
``sft``                 12 supervised fine-tuning with a masked loss
``dpo``                 12 direct preference optimization from scratch, its loop
``interp``              13 hooks, the logit lens, logit attribution
``ablation``            13 zero, mean (by role) and resample ablation of heads
``patching``            13 activation patching both ways, shares of the gap
``grpo_advantages``    14 group advantages from rewards, each prompt's weight, pass@k
``grpo``                14 GRPO's clipped loss (ratio, clip, KL term, normalisations)
``grpo_sampling``       14 sampling groups of answers, their log-probabilities
``grpo_train``          14 the GRPO loop
``parallel``            15 the process group, the ring all-reduce from send and receive
``data_parallel``       15 data parallelism: gradients averaged, bucketed and overlapped
``sharding``            15 ZeRO-1's optimizer state and ZeRO-3's parameters, by rank
``zero_bytes``          15 the bytes each rank keeps under each scheme
``tiled_attention``     16 FlashAttention's forward: tiles and the online softmax
``speculative``         16 speculative decoding: a draft guesses, the target checks
``quantize``            16 int8 and int4 weight-only quantization
``kv_memory``           16 a KV cache's slots under three layouts, the bytes of a slot
``paged_cache``         16 a paged KV cache: fixed-size blocks and a block table
======================  =========================================================

==========================  ================================================
the book (``book.``)        chapter
==========================  ================================================
``book.figure_text``        every chapter: figures that record their smallest text
``book.quiz``               every chapter: the self-check quiz (jupyterquiz)
``book.lessons``            every chapter: the lessons a run must show, judged
``book.interactive``        4, 7, 8  figures without a kernel (Plotly)
``book.plotting``           4  attention heatmaps with token labels
``book.diagram``            5  GPT-2's architecture drawn from a model's modules
``book.recipes``            6  the data at two levels and the book's models
``book.model_cache``        6-14 trained models kept once per machine, never stale
``book.cli``                6  ``python -m gpt_from_scratch.book.cli`` and ``torchrun``
``book.ladder``             6  Karpathy's build-up ladder from the package's parts
``book.ladder_prose``       6  the ladder's table and sentences
``book.samples``            6, 7  the share of a sample's words that are real words
``book.reference``          6-9  the full-size reference runs: find, download, verify
``book.reference_prose``    6-9  what the chapters say about a reference run
``book.timing``             7  timing, host reads, page faults
``book.speed_prose``        7  the measured speed-ups as sentences
``book.corpus_vocab``       8  a GPT that learns only its corpus's tokens
``book.offline_model``      8  the small model analysed without GPT-2's weights
``book.induction``          8  an induction head, trained to be seen
``book.heads_plots``        8  many heads at once: grids, side-by-side maps
``book.heads_prose``        8  the chapter's sentences about the loaded model
``book.finetune_runs``      9  the fine-tuning runs as functions (chapter, reference runs)
``book.finetune_prose``     9  the chapter's sentences from the measured numbers
``book.modern_prose``       10 the GPT-2 versus Llama verdict
``book.measuring``          11 the next-line and last-word tests, the bigram baseline
``book.measuring_prose``    11 the chapter's sentences and lessons from its numbers
``book.hellaswag``          11 HellaSwag read as build-nanogpt and the harness read it
``book.assistant``          12 the instruction task from the play, its verifier, evaluation
``book.assistant_runs``     12 the fine-tuning runs, trained once and kept
``book.assistant_prose``    12 the chapter's lessons and sentences
``book.assistant_online``   12 the Colab track: GPT-2 small on 1,100 instructions
``book.inside``             13 the Repeat pairs, the scores, their bootstraps over the pairs
``book.inside_figure``      13 induction score against patching share, labels placed
``book.inside_prose``       13 the lessons and sentences of sections 13.1 to 13.4
``book.patching_prose``     13 those of patching (13.5), Exercise 4 and the Summary
``book.inside_online``      13 the Colab track: GPT-2 small's induction heads, name movers
``book.verifier``           14 the reward, the cached GRPO runs, the sampled scores
``book.verifier_control``   14 the control, KL from the SFT model, answers by opening
``book.verifier_prose``     14 the chapter's lessons, judged from its numbers
``book.verifier_opening``   14 the unrewarded opening: its lesson, the premise, the drift
``book.verifier_brake``     14 the KL brake on one seed, against the evaluation's noise
``book.verifier_text``      14 the chapter's sentences, from its numbers and verdicts
``book.verifier_online``    14 the Colab track: GPT-2 small with LoRA learns addition
``book.parallel_runs``      15 the chapter's processes, started and always ended
``book.parallel_jobs``      15 what each rank runs
``book.parallel_timing``    15 the timings each rank takes: collectives, steps, NCCL
``book.parallel_prose``     15 the lessons and sentences from what the processes measured
``book.parallel_speed``     15 the speed lesson: buckets, the overlap, a GPU cluster's links
``book.fast_prose``         16 the lessons and sentences from what the chapter measured
``book.pearson``            16 Pearson's chi-square test, its power, the draws for a power
==========================  ================================================

``exercises`` holds every chapter's exercise checks (``check_*``). Modules are imported
lazily, so ``import gpt_from_scratch`` stays fast.
"""

import os
import sys

__version__ = "0.1.0"

# How OpenMP's threads wait for their next piece of work. GNU OpenMP (PyTorch's, on Linux)
# spins for about 3 ms first: on a busy laptop a spinning thread waits for one the system
# has paused (a step of Chapter 6's model took 13.4 s with two spinning threads, 0.37 s with
# two sleeping ones, on 2 cores at load average 16), while sleeping at once
# (OMP_WAIT_POLICY=PASSIVE) costs a wake-up per operation on idle cores (56.5 ms a step
# against 36.0). Spinning about 10 microseconds, then sleeping, is both: 37.6 ms idle, and
# as fast as sleeping beside busy programs (measured with `python -m benchmarks busy`); the
# numbers are the same to the last bit whichever way threads wait. LLVM's and Intel's OpenMP
# (macOS, some conda builds) sleep at once. OpenMP reads these once, when torch loads, so
# they count where the package is imported first, as every chapter's first cell does; a
# reader's own setting wins. Where torch came first its threads spin, and ``train`` then
# computes on the cores other programs leave free (``utils.free_threads``).
_READERS_OWN = any(name in os.environ
                   for name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME"))
SPINNING_THREADS = os.environ.get("OMP_WAIT_POLICY", "").upper() == "ACTIVE" or (
    "torch" in sys.modules and not _READERS_OWN)
if not _READERS_OWN:
    os.environ["GOMP_SPINCOUNT"] = "1000"  # GNU OpenMP: about 10 microseconds
    os.environ["KMP_BLOCKTIME"] = "0"  # LLVM's and Intel's: no spinning
