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

from tinker_emulator.models import SMOLLM2, TINY, TINY_CHAT, TINY_RANDOM, model_descriptions
from tinker_emulator.errors import LocalBackendError
from tinker_emulator.rest_client import LocalRestClient
from tinker_emulator.runner import patch_tinker
from tinker_emulator.sampling_client import LocalSamplingClient
from tinker_emulator.service_client import LocalServiceClient
from tinker_emulator.training_client import LocalTrainingClient

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
