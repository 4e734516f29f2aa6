"""The one place the emulator hands a Hugging Face model its KV cache and reads it back.

transformers 5.x renamed the argument and the output field from ``past_key_values`` to ``cache``
(the old name warns on every call and is removed in 5.40); older releases know only the old
name. Which one the installed transformers uses is read once, from its output class.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from transformers.modeling_outputs import CausalLMOutputWithPast

CACHE = "cache" if "cache" in {f.name for f in dataclasses.fields(CausalLMOutputWithPast)} else "past_key_values"


def forward(model: Any, cache: Any = None, **inputs: Any) -> tuple[Any, Any]:
    """``model(**inputs)`` continuing from ``cache`` (``None``: from the start), keeping the cache;
    returns the output and the grown cache."""
    out = model(**inputs, **({CACHE: cache} if cache is not None else {}), use_cache=True)
    return out, getattr(out, CACHE)
