"""An OpenAI-compatible endpoint over a Tinker ``SamplingClient``, and a recorder that turns what
it sampled into training data. ``python -m gemlab.openai_endpoint --model NAME_OR_SAMPLER_PATH`` runs it.

```python
from gemlab.openai_endpoint import BackgroundServer, Recorder, SamplerSlot, create_app
slot, recorder = SamplerSlot(sampling_client), Recorder()
with BackgroundServer(create_app(slot, model_name="gemlab/tiny", recorder=recorder)) as server:
    ...  # openai.OpenAI(base_url=server.url, api_key="local"); slot.set(new_client) after a step
```
"""

from gemlab.openai_endpoint.app import create_app
from gemlab.openai_endpoint.completions import Generation, SamplerSlot
from gemlab.openai_endpoint.guard import Limits
from gemlab.openai_endpoint.recorder import Recorder
from gemlab.openai_endpoint.server_thread import BackgroundServer

__all__ = ["BackgroundServer", "Generation", "Limits", "Recorder", "SamplerSlot", "create_app"]
