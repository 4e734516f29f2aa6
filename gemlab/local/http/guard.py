"""The door of the server (an ASGI middleware): the key, the body size, and every error as
Tinker's error JSON. Requests pass only with a key the server made (``X-API-Key``, as the SDK
sends it); bodies over the limit are refused while they stream in.

``gemlab/serve/guard.py`` is the OpenAI endpoint's door, built the same way (a pure ASGI
middleware added with ``app.add_middleware``, headers read with Starlette's ``Headers``, refusals
sent as a Starlette ``JSONResponse``, ``Content-Length`` checked before a byte is read). It cannot
share this module: ``gemlab.local`` imports nothing of gemlab outside itself, and importing any
``gemlab.local`` module loads the emulator (PyTorch, PEFT, transformers), which an endpoint over
real Tinker must not. The two differ on purpose where their clients do: one tenant per key of
many (``X-API-Key``) here, one optional ``Bearer`` key, a ``Host`` check and a bound on requests
in flight there (here the registry bounds queued work instead, answering 429 in Tinker's shape,
because ``retrieve_future`` long-polls hold a request open by design); Tinker's error JSON here,
OpenAI's there; and here a server error is logged with its traceback, there each refusal is one
line.
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.datastructures import Headers
from starlette.responses import JSONResponse

from gemlab.local.http.errors import TooLarge, Unauthorized, error_body, status_and_message
from gemlab.local.http.keys import KeyRing

logger = logging.getLogger("gemlab.local.http")
OPEN_PATHS = ("/api/v1/healthz",)


class Guard:
    """Checks the key and body size of every request and answers any exception in Tinker's shape."""

    def __init__(self, app: Any, keys: KeyRing, max_body: int):
        self.app = app
        self.keys = keys
        self.max_body = max_body

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
            await self.app(scope, self._bounded(receive), send_tracking)
        except Exception as exc:  # every failure becomes Tinker's error JSON
            status, message, category = status_and_message(exc)
            if status >= 500:
                logger.exception("error serving %s %s", scope.get("method"), scope.get("path"))
            if started:
                return  # the response is on its way; nothing more can be said on this connection
            await JSONResponse(error_body(message, category), status_code=status)(scope, receive, send)

    def _bounded(self, receive: Any) -> Any:
        seen = 0

        async def bounded_receive() -> dict:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body:
                    raise TooLarge(f"request body is over the server's limit of {self.max_body} bytes")
            return message

        return bounded_receive
