"""gemlab's local backend: Tinker's client interface (0.38) trained and sampled in this process,
with PyTorch + PEFT LoRA on small models, no key or network needed.

```python
from gemlab.local import LocalServiceClient

service = LocalServiceClient()
training = service.create_lora_training_client(base_model="gemlab/tiny", rank=8, seed=0).result()
```

``python -m gemlab.local SCRIPT`` (or ``-m MODULE``) runs an unmodified Tinker script on it. See
``docs/local-backend.md`` for model names, environment variables, paths and semantics.
"""

from gemlab.local.models import SMOLLM2, TINY, TINY_CHAT, TINY_RANDOM, model_descriptions
from gemlab.local.errors import LocalBackendError
from gemlab.local.rest_client import LocalRestClient
from gemlab.local.runner import patch_tinker
from gemlab.local.sampling_client import LocalSamplingClient
from gemlab.local.service_client import LocalServiceClient
from gemlab.local.training_client import LocalTrainingClient

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
