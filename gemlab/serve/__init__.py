"""An OpenAI-compatible endpoint over a Tinker ``SamplingClient``, and a recorder that turns what
it sampled into training data. ``python -m gemlab.serve --model NAME_OR_SAMPLER_PATH`` runs it.

```python
from gemlab.serve import BackgroundServer, Recorder, SamplerSlot, create_app
slot, recorder = SamplerSlot(sampling_client), Recorder()
with BackgroundServer(create_app(slot, model_name="gemlab/tiny", recorder=recorder)) as server:
    ...  # openai.OpenAI(base_url=server.url, api_key="local"); slot.set(new_client) after a step
```
"""

from gemlab.serve.app import create_app
from gemlab.serve.completions import Generation, SamplerSlot
from gemlab.serve.guard import Limits
from gemlab.serve.recorder import Recorder
from gemlab.serve.server_thread import BackgroundServer

__all__ = ["BackgroundServer", "Generation", "Limits", "Recorder", "SamplerSlot", "create_app"]
