"""Every failure as Tinker's error JSON, ``{"error": ..., "category": "user" | "server"}``, with the
status the SDK expects; never a traceback on the wire.

``gemlab.openai_endpoint`` answers in OpenAI's shape instead (``gemlab/openai_endpoint/errors.py``): each server
speaks the error format its clients parse, so the two shapes stay apart on purpose."""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

import pydantic
from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from tinker import TinkerError

from tinker_emulator.asgi_limits import TooLarge
from tinker_emulator.checkpoints import DiskFull
from tinker_emulator.memory import is_out_of_memory
from tinker_emulator.workshop_server.paths import CheckpointNotFound
from tinker_emulator.workshop_server.registry import Busy, NotFound, QuotaExceeded


class Unauthorized(Exception):
    """No key, or one this server did not make."""


class TooSlow(Exception):
    """A request body that did not arrive within the server's read timeout."""


logger = logging.getLogger("tinker_emulator.workshop_server")
DISK_FULL = "the server's disk is full: nothing was saved; ask the instructor to free space, then save again"
OUT_OF_MEMORY = (
    "the server ran out of memory for this request and dropped it (a forward_backward adds no gradient): "
    "send fewer or shorter sequences, or fewer samples, or ask the instructor"
)
USER_ERRORS = (ValueError, TypeError, NotImplementedError, KeyError, FileNotFoundError, FileExistsError, TinkerError)


def error_body(message: str, category: str = "user") -> dict[str, str]:
    """Tinker's error shape (``RequestFailedResponse``)."""
    return {"error": message, "category": category}


def status_and_message(exc: BaseException) -> tuple[int, str, str]:
    """``(HTTP status, one-line message, category)`` for an exception raised while serving a request."""
    if isinstance(exc, Unauthorized):
        return 401, str(exc), "user"
    if isinstance(exc, TooLarge):
        return 413, str(exc), "user"
    if isinstance(exc, (NotFound, CheckpointNotFound)):
        return 404, str(exc), "user"
    if isinstance(exc, Busy):
        return 429, str(exc), "server"
    if isinstance(exc, QuotaExceeded):  # a cap, not a rate: 403, which the SDK does not retry
        return 403, str(exc), "user"
    if isinstance(exc, TooSlow):
        return 408, str(exc), "user"
    if isinstance(exc, DiskFull):
        return 507, DISK_FULL, "server"
    if is_out_of_memory(exc):  # "user", 4xx: the SDK may retry a server failure, which would fail again
        return 413, OUT_OF_MEMORY, "user"
    if isinstance(exc, pydantic.ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first.get("loc", ())) or "body"
        return 422, f"invalid request: {where}: {first.get('msg')}", "user"
    if isinstance(exc, ClientDisconnect):  # the body was cut off, or its chunked framing broken
        return (
            400,
            "the request body did not arrive whole (the client left, or its chunked encoding is malformed)",
            "user",
        )
    if isinstance(exc, USER_ERRORS):
        return 400, without_paths(one_line(exc)), "user"
    return 500, f"internal error ({type(exc).__name__}); the server log has the details", "server"


def logged(exc: BaseException, what: str) -> tuple[int, str, str]:
    """``status_and_message`` of ``exc``, the failure of ``what``, with a line in the server log for
    a server-side failure (a full disk in one line, anything unexpected with its traceback)."""
    status, message, category = status_and_message(exc)
    if isinstance(exc, DiskFull):
        logger.error("%s failed: %s", what, exc.strerror)
    elif status >= 500 and not isinstance(exc, asyncio.CancelledError):  # cancelled: the client asked
        logger.error("%s failed", what, exc_info=exc)
    return status, message, category


# an absolute path on the server: a '/' that starts no URL (tinker://, local://) and no relative path
_SERVER_PATH = re.compile(r"(?<![\w:/.~-])(?:/[^/\s'\"]+)+/([^/\s'\"]+)")


def without_paths(message: str) -> str:
    """``message`` with every absolute server path cut to ``.../<its last part>``: a client never
    learns where the server keeps its files."""
    return _SERVER_PATH.sub(r".../\1", message)


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
    """A path or query parameter FastAPI could not parse, in Tinker's shape."""
    first = exc.errors()[0] if exc.errors() else {}
    where = ".".join(str(part) for part in first.get("loc", ()))
    message = f"invalid request: {where}: {first.get('msg')}"
    logger.warning("%s %s: 422 %s", request.method, request.url.path, message[:300])
    return JSONResponse(error_body(message), status_code=422)


async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
    """Starlette's HTTP errors (an unknown route, a wrong method) in Tinker's shape."""
    message = (
        f"{request.method} {request.url.path} is not served by gemlab's local Tinker server"
        if exc.status_code in (404, 405)
        else str(exc.detail)
    )
    return JSONResponse(error_body(message), status_code=exc.status_code)


# the errors FastAPI answers itself; every other exception reaches ``guard.Guard``
EXCEPTION_HANDLERS: dict[Any, Any] = {RequestValidationError: invalid, HTTPException: http_error}
