"""An OpenAI-compatible HTTP endpoint (FastAPI) over any Tinker ``SamplingClient``: ``create_app``
assembles the routes (``routes.py``), their state (``state.py``), the front door (``guard.py``)
and the error handlers (``errors.py``).

Routes: ``GET /v1/models``, ``POST /v1/chat/completions``, ``POST /v1/completions`` (both also
with ``"stream": true``, as server-sent events ending in ``data: [DONE]``), ``GET /health``, and
``POST /generate``, SGLang's and vLLM's token-in token-out route that atroposlib's
``ManagedServer`` uses (``native.py``).

Extensions to OpenAI's response format, for training on what was sampled:

- ``choices[i].token_ids``: the sampled token ids, end-of-turn/stop token included (for a
  streamed chunk, the ids of that chunk);
- ``prompt_token_ids``: the prompt exactly as the model saw it (chat template applied);
- ``sampler_version``: the weights version that sampled it (see ``SamplerSlot.set``).

``logprobs`` follow OpenAI's formats (chat: ``logprobs.content[*].{token, logprob, bytes,
top_logprobs}``; completions: ``logprobs.{tokens, token_logprobs, top_logprobs, text_offset}``)
with one entry per sampled token, aligned with ``token_ids``; top alternatives come from the
sampler's ``topk_sample_logprobs`` (Tinker's and the local backend's). ``tools``
and ``tool_choice`` go into the chat template and calls come back as ``message.tool_calls``
(see ``tools.py``). Errors are OpenAI's JSON shape, each one line in the ``gemlab.openai_endpoint`` log:
400 malformed body, invalid Unicode or unsupported field, 401 wrong key, 400 foreign ``Host``,
413 body too large, 503 busy (see ``guard.py``), 404 unknown model or route, 400 with code
``context_length_exceeded`` when the prompt or ``max_tokens`` does not fit, 500 if the sampler
fails. The local backend returns a sample whole, so a stream's chunks all follow the
end of sampling.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import FastAPI

from gemlab.openai_endpoint.completions import SamplerSlot
from gemlab.openai_endpoint.errors import EXCEPTION_HANDLERS
from gemlab.openai_endpoint.guard import Guard, Limits
from gemlab.openai_endpoint.recorder import Recorder
from gemlab.openai_endpoint.routes import router
from gemlab.openai_endpoint.state import Endpoint


def create_app(
    sampler: Any,
    *,
    model_name: str,
    recorder: Recorder | None = None,
    limits: Limits | None = None,
    prep_threads: int = 2,
) -> FastAPI:
    """The endpoint serving ``sampler`` (a ``SamplingClient`` or a ``SamplerSlot`` to swap
    weights through) under the model id ``model_name``; every request lands in ``recorder``.

    ``limits`` (key, allowed ``Host`` names, body size, concurrency; see ``guard.Limits``)
    default to loopback names only, no key, 4 MiB bodies, 64 requests at once; the app keeps them
    as ``app.state.limits`` (with the count of requests in flight). Templates, tokenizers and
    response building run on at most ``prep_threads`` worker threads, so the event loop (and
    ``/health``) stays free."""
    slot = sampler if isinstance(sampler, SamplerSlot) else SamplerSlot(sampler)
    limits = limits or Limits()
    app = FastAPI(title="gemlab OpenAI-compatible endpoint", exception_handlers=EXCEPTION_HANDLERS)
    app.state.endpoint = Endpoint(slot, model_name, recorder, asyncio.Semaphore(prep_threads))
    app.state.limits = limits
    app.include_router(router)
    app.add_middleware(Guard, limits=limits)
    return app
