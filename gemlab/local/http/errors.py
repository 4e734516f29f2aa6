"""Every failure as Tinker's error JSON, ``{"error": ..., "category": "user" | "server"}``, with the
status the SDK expects; never a traceback on the wire."""

from __future__ import annotations

import logging

import pydantic
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from tinker import TinkerError

from gemlab.local.http.paths import CheckpointNotFound
from gemlab.local.http.registry import Busy, NotFound

logger = logging.getLogger("gemlab.local.http")


class Unauthorized(Exception):
    """No key, or one this server did not make."""


class TooLarge(ValueError):
    """A request body over the server's limit."""


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
    if isinstance(exc, pydantic.ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first.get("loc", ())) or "body"
        return 422, f"invalid request: {where}: {first.get('msg')}", "user"
    if isinstance(exc, USER_ERRORS):
        return 400, one_line(exc), "user"
    return 500, f"internal error ({type(exc).__name__}); the server log has the details", "server"


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def install(app: FastAPI) -> None:
    """Answer every error raised inside the app in Tinker's shape (``guard.py`` answers the key and size checks)."""

    @app.exception_handler(Exception)
    async def any_error(request: Request, exc: Exception) -> JSONResponse:
        # Starlette answers an unhandled exception here, then re-raises it for the server log
        status, message, category = status_and_message(exc)
        return JSONResponse(error_body(message, category), status_code=status)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(part) for part in first.get("loc", ()))
        return JSONResponse(error_body(f"invalid request: {where}: {first.get('msg')}"), status_code=422)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        message = (
            f"{request.method} {request.url.path} is not served by gemlab's local Tinker server"
            if exc.status_code in (404, 405)
            else str(exc.detail)
        )
        return JSONResponse(error_body(message), status_code=exc.status_code)
