"""What every route is handed (``app.state.endpoint``, as a FastAPI dependency): the sampler slot,
the served model's name, the recorder, and the worker threads that keep templates and tokenizers
off the event loop. A handler is a plain module-level function; a test serves one on an app of
its own by setting ``app.state.endpoint`` (or ``app.dependency_overrides[endpoint]``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request

from gemlab.openai_endpoint.completions import Generation, SamplerSlot
from gemlab.openai_endpoint.recorder import Recorder
from gemlab.openai_endpoint.schemas import OpenAIError

T = TypeVar("T")


@dataclass
class Endpoint:
    """One endpoint: the sampler it serves under ``model_name``, where requests are recorded, and
    ``workers`` bounding the threads that prepare prompts and responses."""

    slot: SamplerSlot
    model_name: str
    recorder: Recorder | None
    workers: asyncio.Semaphore
    created: int = field(default_factory=lambda: int(time.time()))

    async def off_loop(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on a worker thread, at most ``workers`` at once."""
        async with self.workers:
            return await asyncio.to_thread(fn, *args)

    def check_model(self, name: str) -> None:
        """A 404 in OpenAI's shape unless ``name`` is the served model."""
        if name != self.model_name:
            raise OpenAIError(
                404,
                f"The model {name!r} does not exist; this server serves {self.model_name!r}",
                param="model",
                code="model_not_found",
            )

    def record(self, generation: Generation) -> None:
        """Keep ``generation`` in the recorder, if there is one."""
        if self.recorder is not None:
            self.recorder.add(generation)


def endpoint(request: Request) -> Endpoint:
    """The endpoint this request reached."""
    return request.app.state.endpoint


EndpointDep = Annotated[Endpoint, Depends(endpoint)]
