"""The door of the server (an ASGI middleware): the key, the body size and read time, the key's
lane, and every error as Tinker's error JSON. Requests pass only with a key the server made
(``X-API-Key``, as the SDK sends it); bodies over the limit are refused while they stream in, and
a body not all there ``body_timeout_s`` after its request began is answered 408 (a client that
dribbles its body holds nothing for long; the SDK retries 408). Everything a request queues on the
local backend's workers goes in its key's lane (``futures.lane``), so keys take turns there.

``gemlab/openai_endpoint/guard.py`` is the OpenAI endpoint's door, built the same way (a pure ASGI
middleware added with ``app.add_middleware``, headers read with Starlette's ``Headers``, refusals
sent as a Starlette ``JSONResponse``, ``Content-Length`` checked before a byte is read); what both
hold before any app code (head size and time, bounded decompression, JSON depth) is the leaf
module ``tinker_emulator/asgi_limits.py``. The doors themselves stay apart: the two differ on purpose where their
clients do: one tenant per key of
many (``X-API-Key``) here, one optional ``Bearer`` key, a ``Host`` check and a bound on requests
in flight there (here the registry bounds queued work instead, answering 429 in Tinker's shape,
because ``retrieve_future`` long-polls hold a request open by design); Tinker's error JSON here,
OpenAI's there; and here a server error is logged with its traceback, there each refusal is one
line.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from starlette.datastructures import Headers
from starlette.responses import JSONResponse

from tinker_emulator.futures import lane
from tinker_emulator.workshop_server.errors import TooLarge, TooSlow, Unauthorized, error_body, status_and_message
from tinker_emulator.workshop_server.keys import KeyRing
from tinker_emulator.workshop_server.registry import REQUEST_BYTES

logger = logging.getLogger("tinker_emulator.workshop_server")
OPEN_PATHS = ("/api/v1/healthz",)


class Guard:
    """Checks the key, body size and body read time of every request, queues its work in its key's
    lane, and answers any exception in Tinker's shape."""

    def __init__(self, app: Any, keys: KeyRing, max_body: int, body_timeout_s: float = 60.0):
        self.app = app
        self.keys = keys
        self.max_body = max_body
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def send_tracking(message: dict) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            headers = Headers(scope=scope)
            tenant = self.keys.tenant(headers.get("x-api-key"))
            if tenant is None and scope["path"] not in OPEN_PATHS:
                raise Unauthorized("a valid API key is required: set TINKER_API_KEY to the key the server printed")
            scope.setdefault("state", {})["tenant"] = tenant
            length = headers.get("content-length")
            if length is not None and (not length.isdigit() or int(length) > self.max_body):
                raise TooLarge(f"request body of {length} bytes is over the server's limit of {self.max_body} bytes")
            counted = REQUEST_BYTES.set(0)
            try:
                with lane(tenant):
                    await self.app(scope, self._bounded(receive), send_tracking)
            finally:
                REQUEST_BYTES.reset(counted)
        except Exception as exc:  # every failure becomes Tinker's error JSON
            status, message, category = status_and_message(exc)
            if status >= 500:
                logger.exception("error serving %s %s", scope.get("method"), scope.get("path"))
            else:  # a refused request: one line, never a traceback
                logger.warning("%s %s: %d %s", scope.get("method"), scope.get("path"), status, message[:300])
            if started:
                return  # the response is on its way; nothing more can be said on this connection
            await JSONResponse(error_body(message, category), status_code=status)(scope, receive, send)

    def _bounded(self, receive: Any) -> Any:
        """``receive``, refusing a body over ``max_body`` bytes or still arriving ``body_timeout_s``
        after the request began; it counts the body's bytes in ``REQUEST_BYTES``."""
        seen, complete = 0, False
        deadline = asyncio.get_running_loop().time() + self.body_timeout_s

        async def bounded_receive() -> dict:
            nonlocal seen, complete
            if complete:  # the body is in: what comes now is a disconnect, whenever it comes
                return await receive()
            try:
                # asyncio.timeout_at is 3.11+; wait_for raises asyncio.TimeoutError (TimeoutError from 3.11)
                message = await asyncio.wait_for(receive(), max(0.0, deadline - asyncio.get_running_loop().time()))
            except asyncio.TimeoutError:
                raise TooSlow(
                    f"the request body did not arrive within {self.body_timeout_s:g} s (the server's read timeout)"
                ) from None
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                REQUEST_BYTES.set(seen)
                complete = not message.get("more_body", False)
                if seen > self.max_body:
                    raise TooLarge(f"request body is over the server's limit of {self.max_body} bytes")
            return message

        return bounded_receive
