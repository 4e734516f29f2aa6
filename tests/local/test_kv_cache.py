"""A sampling cache under bfloat16 autocast stores keys and values in bfloat16 and grows in place,
and the model computes exactly what it computes with transformers' own cache."""

from __future__ import annotations

import torch
from transformers.cache_utils import DynamicCache

from tinker_emulator import kv_cache


def _decode(model, cache, ids, steps=12):
    """The prompt, then ``steps`` greedy tokens one at a time; every step's logits and the cache."""
    logits = []
    with torch.autocast("cpu", dtype=torch.bfloat16), torch.inference_mode():
        out, cache = kv_cache.forward(model, cache, input_ids=ids)
        for _ in range(steps):
            logits.append(out.logits[:, -1].float())
            out, cache = kv_cache.forward(model, cache, input_ids=logits[-1].argmax(-1, keepdim=True))
    return logits, cache


def test_a_sampling_cache_under_autocast_stores_bfloat16_grows_in_place_and_changes_nothing():
    from gemlab.tiny.model import build_tiny_model

    model = build_tiny_model(seed=0, pretrained=True)
    ids = torch.randint(5, 800, (3, 9), generator=torch.Generator().manual_seed(0))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ours = kv_cache.for_sampling(model)
    theirs = DynamicCache(config=model.config) if kv_cache._BUILT_FROM_PAIRS else DynamicCache()
    (our_logits, ours), (their_logits, theirs) = _decode(model, ours, ids), _decode(model, theirs, ids)
    for a, b in zip(our_logits, their_logits, strict=True):
        assert torch.equal(a, b)  # the attention reads bfloat16 keys either way
    keys, values = kv_cache.tensors(ours)[0]
    assert keys.dtype == values.dtype == torch.bfloat16 and kv_cache.tensors(theirs)[0][0].dtype == torch.float32
    assert keys.shape[-2] == 9 + 12
    if kv_cache._DynamicLayer is not None:  # transformers 4.56 on: the layer's keys view a larger buffer
        assert keys.untyped_storage().nbytes() > keys.numel() * keys.element_size()
