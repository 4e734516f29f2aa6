"""The one place the emulator hands a Hugging Face model its KV cache and reads it back.

transformers 5.x renamed the argument and the output field from ``past_key_values`` to ``cache``
(the old name warns on every call and is removed in 5.40); older releases know only the old
name. Which one the installed transformers uses is read once, from its output class. A cache's
tensors sit in ``cache.layers[i].keys``/``.values`` since transformers 4.56, in
``cache.key_cache``/``.value_cache`` before; a cache is built from tensors by the constructor
where it takes them with the model's config (4.56 on), else by ``DynamicCache.from_legacy_cache``.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import torch
from transformers.cache_utils import DynamicCache
from transformers.modeling_outputs import CausalLMOutputWithPast

CACHE = "cache" if "cache" in {f.name for f in dataclasses.fields(CausalLMOutputWithPast)} else "past_key_values"

_BUILT_FROM_PAIRS = "ddp_cache_data" in inspect.signature(DynamicCache.__init__).parameters

Pairs = list[tuple[torch.Tensor, torch.Tensor]]


def forward(model: Any, cache: Any = None, **inputs: Any) -> tuple[Any, Any]:
    """``model(**inputs)`` continuing from ``cache`` (``None``: from the start), keeping the cache;
    returns the output and the grown cache."""
    out = model(**inputs, **({CACHE: cache} if cache is not None else {}), use_cache=True)
    return out, getattr(out, CACHE)


def tensors(cache: Any) -> Pairs:
    """Each layer's ``(keys, values)``, ``(batch, heads, positions, head_dim)``."""
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    return list(zip(cache.key_cache, cache.value_cache))


def from_tensors(model: Any, pairs: Pairs) -> Any:
    """A cache holding each layer's ``(keys, values)`` (the reverse of ``tensors``); gradients flow
    back to them through what a forward pass appends."""
    if _BUILT_FROM_PAIRS:
        return DynamicCache(ddp_cache_data=pairs, config=model.config)
    return DynamicCache.from_legacy_cache(tuple(pairs))


def row(cache: Any, index: int, positions: torch.Tensor) -> Pairs:
    """Copies of batch row ``index``'s keys and values at ``positions`` (its unpadded ones):
    per layer ``(heads, len(positions), head_dim)``, independent of the cache."""
    return [(k[index].index_select(1, positions), v[index].index_select(1, positions)) for k, v in tensors(cache)]


def left_padded(model: Any, pasts: list[Pairs | None]) -> tuple[Any, torch.Tensor]:
    """A batch cache holding each row's own keys and values (per layer ``(heads, length, head_dim)``;
    ``None``: nothing), right-aligned after zeros, and the attention mask that hides the zeros."""
    lengths = [0 if p is None else p[0][0].shape[1] for p in pasts]
    width = max(lengths)
    some = next(p for p in pasts if p is not None)
    mask = torch.zeros((len(pasts), width), dtype=torch.long)
    layers = []
    for layer, (k0, v0) in enumerate(some):
        keys = k0.new_zeros((len(pasts), k0.shape[0], width, k0.shape[2]))
        values = v0.new_zeros((len(pasts), v0.shape[0], width, v0.shape[2]))
        for i, past in enumerate(pasts):
            if past is not None:
                keys[i, :, width - lengths[i] :] = past[layer][0]
                values[i, :, width - lengths[i] :] = past[layer][1]
        layers.append((keys, values))
    for i, length in enumerate(lengths):
        if length:
            mask[i, width - length :] = 1
    return from_tensors(model, layers), mask
