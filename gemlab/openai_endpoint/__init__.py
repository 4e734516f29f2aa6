"""An OpenAI-compatible endpoint over a Tinker ``SamplingClient``, and a recorder that turns what
it sampled into training data. ``python -m gemlab.openai_endpoint --model NAME_OR_SAMPLER_PATH`` runs it.

```python
from gemlab.openai_endpoint import BackgroundServer, Recorder, SamplerSlot, create_app
slot, recorder = SamplerSlot(sampling_client), Recorder()
with BackgroundServer(create_app(slot, model_name="gemlab/tiny", recorder=recorder)) as server:
    ...  # openai.OpenAI(base_url=server.url, api_key="local"); slot.set(new_client) after a step
```

Each name is imported from its module on first use (PEP 562), so ``python -m gemlab.openai_endpoint --help``
answers before FastAPI and the sampling code load.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gemlab.lazy import lazy_names

# name -> the module that defines it
_WHERE = {
    "create_app": "gemlab.openai_endpoint.app",
    "Generation": "gemlab.openai_endpoint.completions",
    "SamplerSlot": "gemlab.openai_endpoint.completions",
    "Limits": "gemlab.openai_endpoint.guard",
    "Recorder": "gemlab.openai_endpoint.recorder",
    "BackgroundServer": "gemlab.openai_endpoint.server_thread",
}

__all__ = ["BackgroundServer", "Generation", "Limits", "Recorder", "SamplerSlot", "create_app"]

if TYPE_CHECKING:
    from gemlab.openai_endpoint.app import create_app
    from gemlab.openai_endpoint.completions import Generation, SamplerSlot
    from gemlab.openai_endpoint.guard import Limits
    from gemlab.openai_endpoint.recorder import Recorder
    from gemlab.openai_endpoint.server_thread import BackgroundServer


__getattr__ = lazy_names(__name__, _WHERE)
