"""Every error as OpenAI's JSON (``{"error": {"message", "type", "param", "code"}}``, the shape the
``openai`` client raises from), each one line in the ``gemlab.openai_endpoint`` log, never a traceback:
the front door's refusals (``guard.py``) and the handlers FastAPI calls for what a route raises.

The local Tinker server answers in Tinker's shape instead (``tinker_emulator/workshop_server/errors.py``): each
server speaks the error format its clients parse, so the two shapes stay apart on purpose.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from gemlab.openai_endpoint.schemas import OpenAIError
from tinker_emulator import asgi_limits

log = logging.getLogger("gemlab.openai_endpoint")


def head_too_large() -> bytes:
    """The body of the 431 the server sends, before any app runs, to a request head over
    ``asgi_limits.MAX_HEAD`` bytes."""
    message = f"the request's head (request line and headers) is over the limit of {asgi_limits.MAX_HEAD} bytes"
    return json.dumps(OpenAIError(431, message, code="request_header_fields_too_large").body()).encode()


def error_response(
    method: str, path: str, error: OpenAIError, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    """``error`` as OpenAI's JSON with its status, logged on one line."""
    log.warning("%d %s %s: %s", error.status, method, path, error.message)
    return JSONResponse(error.body(), status_code=error.status, headers=headers)


async def openai_error(request: Request, exc: OpenAIError) -> JSONResponse:
    """What a route refused (unknown model, unsupported field, prompt too long, ...)."""
    return error_response(request.method, request.url.path, exc)


async def malformed(request: Request, exc: RequestValidationError) -> JSONResponse:
    """A body FastAPI could not parse into the route's request model: a 400 naming the field."""
    first = exc.errors()[0] if exc.errors() else {}
    where = ".".join(str(part) for part in first.get("loc", ()) if part != "body")
    message = f"malformed request body: {first.get('msg', 'invalid')}" + (f" at {where!r}" if where else "")
    return error_response(request.method, request.url.path, OpenAIError(400, message, param=where or None))


async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
    """Starlette's HTTP errors (an unknown route, a wrong method)."""
    code = "not_found" if exc.status_code == 404 else None
    return error_response(request.method, request.url.path, OpenAIError(exc.status_code, str(exc.detail), code=code))


async def server_error(request: Request, exc: Exception) -> JSONResponse:
    """Anything else a route raised (the sampler failed): a 500."""
    return error_response(
        request.method, request.url.path, OpenAIError(500, f"internal error: {exc!r}", type="server_error")
    )


EXCEPTION_HANDLERS: dict[Any, Any] = {
    OpenAIError: openai_error,
    RequestValidationError: malformed,
    HTTPException: http_error,
    Exception: server_error,
}
