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
import functools
import importlib
import inspect
from typing import Any

import torch
from transformers.cache_utils import DynamicCache
from transformers.modeling_outputs import CausalLMOutputWithPast

CACHE = "cache" if "cache" in {f.name for f in dataclasses.fields(CausalLMOutputWithPast)} else "past_key_values"

_BUILT_FROM_PAIRS = "ddp_cache_data" in inspect.signature(DynamicCache.__init__).parameters
_DynamicLayer = getattr(importlib.import_module("transformers.cache_utils"), "DynamicLayer", None)  # 4.56 on

Pairs = list[tuple[torch.Tensor, torch.Tensor]]


def forward(model: Any, cache: Any = None, **inputs: Any) -> tuple[Any, Any]:
    """``model(**inputs)`` continuing from ``cache`` (``None``: from the start), keeping the cache;
    returns the output and the grown cache."""
    out = model(**inputs, **({CACHE: cache} if cache is not None else {}), use_cache=True)
    return out, getattr(out, CACHE)


def hidden(model: Any, cache: Any = None, **inputs: Any) -> tuple[torch.Tensor, Any]:
    """``forward`` without the output layer: the decoder's last hidden states (after its final
    norm) and the grown cache, for a caller that computes the logits itself, a few positions at a
    time (``prefix_scoring.head_logprobs``)."""
    out = model.get_decoder()(**inputs, **({CACHE: cache} if cache is not None else {}), use_cache=True)
    return out.last_hidden_state, getattr(out, CACHE)


def tensors(cache: Any) -> Pairs:
    """Each layer's ``(keys, values)``, ``(batch, heads, positions, head_dim)``."""
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    return list(zip(cache.key_cache, cache.value_cache, strict=True))


def from_tensors(model: Any, pairs: Pairs, kind: Any = DynamicCache) -> Any:
    """A cache holding each layer's ``(keys, values)`` (the reverse of ``tensors``); gradients flow
    back to them through what a forward pass appends."""
    if _BUILT_FROM_PAIRS:
        return kind(ddp_cache_data=pairs, config=model.config)
    return kind.from_legacy_cache(tuple(pairs))


def for_sampling(model: Any, pairs: Pairs | None = None) -> Any:
    """A cache for passes without gradients under the current autocast, holding ``pairs`` (or
    nothing yet). Under autocast it stores keys and values in autocast's dtype: the attention
    reads them in that dtype anyway, and keys come out of the rotary embedding in float32, so a
    plain cache would hold them at twice the size and cast all of them again at every decoding step."""
    device = model.device.type
    dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None
    kind = DynamicCache if dtype is None else _stored_in(dtype)
    if not pairs:
        return kind(config=model.config) if _BUILT_FROM_PAIRS else kind()
    return from_tensors(model, [(k.to(dtype or k.dtype), v.to(dtype or v.dtype)) for k, v in pairs], kind)


@functools.cache
def _stored_in(dtype: torch.dtype) -> type:
    """A ``DynamicCache`` that stores what it is given in ``dtype``, each plain layer's keys and
    values in a buffer with room to grow (``Growing``)."""

    class StoredIn(DynamicCache):
        def update(
            self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any
        ) -> Any:
            key_states, value_states = key_states.to(dtype), value_states.to(dtype)
            if _growable(self, layer_idx):
                return _grow(self, self.layers[layer_idx], layer_idx, key_states, value_states)
            return super().update(key_states, value_states, layer_idx, *args, **kwargs)

    return StoredIn


def append(cache: Any, index: int, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Append keys and values to layer ``index`` of ``cache`` (into room to grow where the layer
    has it, see ``_grow``); returns the layer's keys and values so far."""
    if _growable(cache, index):
        return _grow(cache, cache.layers[index], index, keys, values)
    return cache.update(keys, values, index)


def _growable(cache: Any, index: int) -> bool:
    layers = getattr(cache, "layers", ())
    return index < len(layers) and type(layers[index]) is _DynamicLayer and _filled(layers[index])


def _filled(layer: Any) -> bool:
    """Whether a ``DynamicLayer`` holds keys and values yet (``is_initialized`` where transformers has it)."""
    return bool(getattr(layer, "is_initialized", getattr(layer, "keys", None) is not None))


def _grow(
    cache: Any, layer: Any, index: int, keys: torch.Tensor, values: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Append to a layer as ``DynamicLayer.update`` does, but into buffers with room for as many
    positions again, so that a decoding step writes one position instead of copying the whole
    cache (``torch.cat``): the layer's keys and values are views of the buffers' filled part. A
    layer whose tensors are no longer those views (rows reordered or repeated) gets new buffers."""
    buffers = cache.__dict__.setdefault("_growing", {})
    held, new = layer.keys.shape[-2], keys.shape[-2]
    room = buffers.get(index)
    if (
        room is None
        or room[0].data_ptr() != layer.keys.data_ptr()
        or room[0].shape[0] != layer.keys.shape[0]
        or room[0].shape[-2] < held + new
    ):
        size = 2 * (held + new)
        room = tuple(t.new_empty((*t.shape[:-2], size, t.shape[-1])) for t in (layer.keys, layer.values))
        room[0][..., :held, :], room[1][..., :held, :] = layer.keys, layer.values
        buffers[index] = room
    room[0][..., held : held + new, :], room[1][..., held : held + new, :] = keys, values
    layer.keys, layer.values = room[0][..., : held + new, :], room[1][..., : held + new, :]
    return layer.keys, layer.values


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
    return for_sampling(model, layers), mask
