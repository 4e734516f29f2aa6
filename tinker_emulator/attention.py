"""The attention of the local backend's large models: PyTorch's fused kernel, except in passes whose
score matrices are small, which run it plainly (matmul, softmax in float32, matmul).

On a CPU the fused kernel's backward (``_scaled_dot_product_flash_attention_for_cpu_backward``)
is slow where a pass has a padding mask: in a ``forward_backward`` of a ``preset=smollm2-tool``
step (102 datums, SmolLM2-135M, bfloat16, 2-core AMD EPYC) it took 17 of the pass's 50 CPU
seconds, against 2 s for its forward; run plainly, the whole attention took about 5 s. The plain
way keeps each layer's scores (batch x heads x queries x keys, float32) for the backward, so a pass
runs plainly only while they stay within ``PLAIN_MAX_SCORES``; a long sequence and a pass without a
mask (causal: the fused kernel needs none) take the fused kernel. A decoding step (one query per
row) always runs plainly: the fused kernel took 59% of the time of sampling 64 rows of about 230
positions (6.7 ms a layer, where reading their keys and values once takes about 1 ms).

Only models that ``prefill.worth_sharing`` calls large get it (``use``): the tiny models keep the
kernel their recorded runs were made with, so that those repeat bit for bit.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.nn import functional as F
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

NAME = "gemlab_cpu"
# Scores of one layer's pass (batch x heads x queries x keys) that may run plainly: 16 MB of float32.
PLAIN_MAX_SCORES = 1 << 22
# Scores of one block of ``attend``: 8 MiB of float32, within the allocator's mmap threshold (memory.py).
BLOCK_SCORES = 1 << 21


def attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Hugging Face's attention signature: ``(batch, heads, positions, head_dim)`` in, ``(batch,
    positions, heads, head_dim)`` out. ``attention_mask`` is SDPA's boolean mask (True: attend)."""
    batch, heads, queries, _ = query.shape
    boolean = attention_mask is None or attention_mask.dtype == torch.bool
    small = attention_mask is not None and batch * heads * queries * key.shape[2] <= PLAIN_MAX_SCORES
    plain = not dropout and boolean and (queries == 1 or small)
    if not plain:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    return _plain(query, key, value, attention_mask, scaling if scaling is not None else query.shape[-1] ** -0.5), None


def attend(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, visible: torch.Tensor, scale: float
) -> torch.Tensor:
    """Attention without Hugging Face's module around it (``decoding.py``'s prompt passes):
    ``(batch, heads, queries, head_dim)`` queries, ``(batch, key_heads, keys, head_dim)`` keys and
    values, ``visible`` a boolean mask ``(batch, 1, queries, keys)`` in which every query sees some
    key. Plainly where the scores stay within ``BLOCK_SCORES``, else by the fused kernel. Returns
    ``(batch, queries, heads, head_dim)``."""
    batch, heads, queries, _ = query.shape
    if batch * heads * queries * key.shape[2] <= BLOCK_SCORES:
        return _plain(query, key, value, visible, scale)
    groups = heads // key.shape[1]
    out = F.scaled_dot_product_attention(
        query, repeat_kv(key, groups), repeat_kv(value, groups), attn_mask=visible, scale=scale
    )
    return out.transpose(1, 2).contiguous()


def _plain(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None, scale: float
) -> torch.Tensor:
    """Attention as Hugging Face's eager attention computes it: the products in the model's dtype
    (bfloat16 under autocast), the softmax in float32. One query (a decoding step) runs each
    key/value head with its query heads as rows, so its keys and values are read once, not copied
    per query head; longer passes repeat them per query head."""
    batch, heads, queries, dim = query.shape
    groups = heads // key.shape[1]
    if queries == 1:
        query = query.reshape(batch, key.shape[1], groups, dim)  # the mask (batch, 1, 1, keys) broadcasts
    else:
        key, value = repeat_kv(key, groups), repeat_kv(value, groups)
    scores = torch.matmul(query, key.transpose(2, 3)).float() * scale
    if mask is not None:
        # the dtype's lowest number, not -inf: a row that may attend nowhere (left padding) gets no NaN
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    out = torch.matmul(torch.softmax(scores, dim=-1).to(value.dtype), value)
    return out.reshape(batch, heads, queries, dim).transpose(1, 2).contiguous()


AttentionInterface.register(NAME, attention)
AttentionMaskInterface.register(NAME, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])


def use(model: Any) -> None:
    """Run ``model``'s attention through ``attention``."""
    model.set_attn_implementation(NAME)
