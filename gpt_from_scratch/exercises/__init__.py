"""Exercise checkers, one module per chapter, used by every chapter's exercises.

Each ``check_<thing>(candidate)`` runs your implementation on a few hidden cases, compares it with
an independent reference (PyTorch's own op where one exists, the book's formula otherwise) and prints
one short report: a success line, or the first failing case with what was expected, what came back
(shape, dtype, largest difference) and a hint aimed at the usual mistake. Whatever your code does
(raise, call ``exit()``, loop forever) is reported in one line, never as a traceback.
Each checker returns ``True`` only when every case passes (a check cell ends with ``;`` so that the
notebook does not show it), and leaves the random number generators as it found them.

These checks give feedback. Grades come from the private cases of ``scripts/grade.py``.

=======================================  ===============================================================
checker                                  candidate
=======================================  ===============================================================
``check_char_tokenizer``       (ch. 1)   a class: ``Tok(text)`` with ``encode``, ``decode``, ``vocab_size``
``check_get_batch``            (ch. 1)   ``get_batch(data, batch_size, block_size, generator=None)``
``check_bpe_encode``          (ch. 1b)   ``encode(text, merges)`` -> list of ids
``check_sinusoidal_positional_encoding`` ``pe(T, D)`` -> Tensor (T, D)                           (ch. 2)
``check_layer_norm``           (ch. 3)   ``layer_norm(x, weight, bias, eps)`` -> Tensor, or a module
                                         class ``LN(D, eps=...)`` with parameters ``weight``, ``bias``
``check_causal_mask``          (ch. 4)   ``causal_mask(T)`` -> bool Tensor (T, T), without ``tril``
``check_scaled_dot_product_attention``   ``attention(q, k, v, mask=None)`` -> ``(output, weights)`` (ch. 4)
``check_multi_head_attention`` (ch. 4)   a module class ``MHA(d_model, n_heads)`` with ``c_attn``, ``c_proj``
``check_parallel_block``       (ch. 5)   a module class ``ParallelBlock(config)``: ``ln_1``, ``attn``, ``mlp``
``check_cross_entropy``        (ch. 6)   ``cross_entropy(logits, targets)`` -> scalar, without ``F.cross_entropy``
``check_top_k_filter``         (ch. 7)   ``top_k_filter(logits, k)`` -> logits, removed entries ``-inf``
``check_top_p_filter``         (ch. 7)   ``top_p_filter(logits, p)`` -> logits, removed entries ``-inf``
``check_min_p_filter``         (ch. 7)   ``min_p_filter(logits, min_p)`` -> logits, removed entries ``-inf``
``check_offset_scores``        (ch. 8)   ``offset_scores(maps, k)`` -> Tensor (L, H), without ``diagonal``
``check_lora_forward``         (ch. 9)   ``lora_forward(x, weight, bias, A, B, scaling)`` -> Tensor (..., out)
``check_rms_norm``            (ch. 10)   ``rms_norm(x, weight, eps)`` -> Tensor, or a module class ``RMS(D, eps=...)``
``check_rope_interleaved``    (ch. 10)   ``rope_interleaved(x, positions, theta)`` -> Tensor, pairs (2i, 2i + 1)
``check_repeat_kv``           (ch. 10)   ``repeat_kv(x, n_rep)`` -> Tensor, without ``repeat_interleave``
``check_acc_norm``            (ch. 11)   ``acc_norm_picks(loglik, choices)`` -> Tensor (N,) of picks
``check_bits_per_byte``       (ch. 11)   ``bits_per_byte_of(losses, token_bytes)`` -> float
``check_mask_prompt``         (ch. 12)   ``mask_prompt(ids, n_prompt)`` -> targets (T - 1,), prompt -100
``check_render``              (ch. 12)   ``render(messages, encode, markers)`` -> ``(ids, mask)``
``check_dpo_loss``            (ch. 12)   ``dpo_loss(pc, pr, rc, rr, beta)`` -> scalar loss
``check_logit_lens``          (ch. 13)   ``logit_lens(resid, weight, bias, W_U, eps)`` -> Tensor (L, B, T, V)
``check_patch_head``          (ch. 13)   ``patch_head(z_corrupted, z_clean, head, W_O, b_O)`` -> (B, T, D)
``check_group_advantages``    (ch. 14)   ``group_advantages(rewards, group_size)`` -> Tensor (N,)
``check_grpo_loss``           (ch. 14)   ``grpo_loss(logps, old_logps, advantages, mask, epsilon)`` -> scalar
``check_pass_at_k``           (ch. 14)   ``pass_at_k(n, c, k)`` -> float
``check_ring_all_reduce``     (ch. 15)   ``ring_all_reduce(tensor, rank, world_size, send, recv)`` -> sum
``check_zero1``               (ch. 15)   a class ``ZeRO1(weights, rank, world_size, **adamw)``, ``step(grad, all_gather)``
``check_data_parallel_step``  (ch. 15)   ``data_parallel_step(replicas, optimizers, x, y)``
``check_online_softmax_step`` (ch. 16)   ``online_softmax_step(m, l, acc, scores, v_block)`` -> (m, l, acc)
``check_accept_or_resample``  (ch. 16)   ``accept_or_resample(p, q, draft_tokens, generator)`` -> (tokens, n)
``check_absmax_quantize``     (ch. 16)   ``absmax_quantize(w, bits)`` -> (q int8, scale (out, 1))
=======================================  ===============================================================
"""

from .ch01 import check_char_tokenizer, check_get_batch
from .ch01b import check_bpe_encode
from .ch02 import check_sinusoidal_positional_encoding
from .ch03 import check_layer_norm
from .ch04 import check_causal_mask, check_multi_head_attention, check_scaled_dot_product_attention
from .ch05 import check_parallel_block
from .ch06 import check_cross_entropy
from .ch07 import check_min_p_filter, check_top_k_filter, check_top_p_filter
from .ch08 import check_offset_scores
from .ch09 import check_lora_forward
from .ch10 import check_repeat_kv, check_rms_norm, check_rope_interleaved
from .ch11 import check_acc_norm, check_bits_per_byte
from .ch12 import check_dpo_loss, check_mask_prompt, check_render
from .ch13 import check_logit_lens, check_patch_head
from .ch14 import check_group_advantages, check_grpo_loss, check_pass_at_k
from .ch15 import check_data_parallel_step, check_ring_all_reduce, check_zero1
from .ch16 import check_absmax_quantize, check_accept_or_resample, check_online_softmax_step
from .core import FAIL_MARK, PASS_MARK

__all__ = [
    "check_char_tokenizer",
    "check_get_batch",
    "check_bpe_encode",
    "check_sinusoidal_positional_encoding",
    "check_layer_norm",
    "check_causal_mask",
    "check_scaled_dot_product_attention",
    "check_multi_head_attention",
    "check_parallel_block",
    "check_cross_entropy",
    "check_top_k_filter",
    "check_top_p_filter",
    "check_min_p_filter",
    "check_offset_scores",
    "check_lora_forward",
    "check_rms_norm",
    "check_rope_interleaved",
    "check_repeat_kv",
    "check_acc_norm",
    "check_bits_per_byte",
    "check_mask_prompt",
    "check_render",
    "check_dpo_loss",
    "check_logit_lens",
    "check_patch_head",
    "check_group_advantages",
    "check_grpo_loss",
    "check_pass_at_k",
    "check_ring_all_reduce",
    "check_zero1",
    "check_data_parallel_step",
    "check_online_softmax_step",
    "check_accept_or_resample",
    "check_absmax_quantize",
    "FAIL_MARK",
    "PASS_MARK",
]
