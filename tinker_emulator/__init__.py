"""gemlab's local backend: Tinker's client interface (0.38) trained and sampled in this process,
with PyTorch + PEFT LoRA on small models, no key or network needed.

```python
from tinker_emulator import LocalServiceClient

service = LocalServiceClient()
training = service.create_lora_training_client(base_model="gemlab/tiny", rank=8, seed=0).result()
```

``python -m tinker_emulator SCRIPT`` (or ``-m MODULE``) runs an unmodified Tinker script on it. See
``docs/local-backend.md`` for model names, environment variables, paths and semantics.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tinker_emulator.model_names import SMOLLM2, TINY, TINY_CHAT, TINY_RANDOM
from tinker_emulator.openmp import keep_threads_spinning

keep_threads_spinning()  # before any module of the emulator loads PyTorch (openmp.py)

if TYPE_CHECKING:
    from tinker_emulator.errors import LocalBackendError
    from tinker_emulator.models import model_descriptions
    from tinker_emulator.rest_client import LocalRestClient
    from tinker_emulator.runner import patch_tinker
    from tinker_emulator.sampling_client import LocalSamplingClient
    from tinker_emulator.service_client import LocalServiceClient
    from tinker_emulator.training_client import LocalTrainingClient

# The clients load PyTorch, PEFT and transformers, so they are imported on first use: the model
# names above cost nothing to import (gemlab's config names models without loading the emulator).
LAZY = {
    "LocalServiceClient": "tinker_emulator.service_client",
    "LocalTrainingClient": "tinker_emulator.training_client",
    "LocalSamplingClient": "tinker_emulator.sampling_client",
    "LocalRestClient": "tinker_emulator.rest_client",
    "LocalBackendError": "tinker_emulator.errors",
    "patch_tinker": "tinker_emulator.runner",
    "model_descriptions": "tinker_emulator.models",
}


def __getattr__(name: str) -> Any:
    """The clients and helpers of ``__all__``, each imported from its module when first asked for."""
    if name in LAZY:
        return getattr(importlib.import_module(LAZY[name]), name)
    raise AttributeError(f"module 'tinker_emulator' has no attribute {name!r}")


__all__ = [
    "LocalServiceClient",
    "LocalTrainingClient",
    "LocalSamplingClient",
    "LocalRestClient",
    "LocalBackendError",
    "patch_tinker",
    "model_descriptions",
    "TINY",
    "TINY_CHAT",
    "TINY_RANDOM",
    "SMOLLM2",
]
