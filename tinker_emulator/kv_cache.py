"""The one place the emulator hands a Hugging Face model its KV cache and reads it back.

transformers 5.x renamed the argument and the output field from ``past_key_values`` to ``cache``
(the old name warns on every call and is removed in 5.40); older releases know only the old
name. Which one the installed transformers uses is read once, from its output class.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from transformers.cache_utils import DynamicCache
from transformers.modeling_outputs import CausalLMOutputWithPast

CACHE = "cache" if "cache" in {f.name for f in dataclasses.fields(CausalLMOutputWithPast)} else "past_key_values"


def forward(model: Any, cache: Any = None, **inputs: Any) -> tuple[Any, Any]:
    """``model(**inputs)`` continuing from ``cache`` (``None``: from the start), keeping the cache;
    returns the output and the grown cache."""
    out = model(**inputs, **({CACHE: cache} if cache is not None else {}), use_cache=True)
    return out, getattr(out, CACHE)


def tensors(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each layer's ``(keys, values)``, ``(batch, heads, positions, head_dim)``."""
    return [(layer.keys, layer.values) for layer in cache.layers]


def from_tensors(model: Any, pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> Any:
    """A cache holding each layer's ``(keys, values)`` (the reverse of ``tensors``); gradients flow
    back to them through what a forward pass appends."""
    return DynamicCache(ddp_cache_data=pairs, config=model.config)
