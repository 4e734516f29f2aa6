"""How the routes read requests and answer: JSON bodies as tinker types, answers with Tinker's
paths, and work queued as a future (``{"request_id": ...}``) for ``retrieve_future``."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

import pydantic
from fastapi import Request
from fastapi.responses import JSONResponse
from tinker.lib.public_interfaces.api_future import APIFuture, AwaitableConcurrentFuture

from tinker_emulator.workshop_server import paths, validate
from tinker_emulator.workshop_server.registry import Session
from tinker_emulator.workshop_server.state import Server

M = TypeVar("M", bound=pydantic.BaseModel)
T = TypeVar("T")


async def read(request: Request, model: type[M]) -> M:
    """The request's JSON body as ``model`` (a ``pydantic.ValidationError`` is answered 422), at most
    ``validate.MAX_JSON`` bytes, its ids, names and paths at most ``validate.MAX_NAME`` characters,
    every number in it finite."""
    body = model.model_validate_json(validate.json_body(await request.body()))
    validate.names(body)
    validate.finite(body)
    return body


def answer(value: Any) -> JSONResponse:
    """``value`` (a model or plain data) as JSON, every ``local://`` path in it written as a tinker path."""
    if isinstance(value, pydantic.BaseModel):
        value = value.model_dump(mode="json", exclude_none=True)
    return JSONResponse(paths.to_tinker(value))


def queued(
    server: Server, session: Session, work: Awaitable[Any], encode: Callable[[Any], Any] = lambda r: r, **extra: Any
) -> JSONResponse:
    """Hold ``work``'s result for ``retrieve_future`` (``encode`` makes its body); the request id, with ``extra``."""
    request_id = server.registry.submit(session, work, encode)
    return JSONResponse({"request_id": request_id, **extra})


async def awaited(api_future: APIFuture[T]) -> T:
    """A local backend future (Tinker's ``AwaitableConcurrentFuture``, which the local clients'
    methods declare as Tinker's ``APIFuture``) awaited on this event loop."""
    return await asyncio.wrap_future(cast(AwaitableConcurrentFuture[T], api_future).future())


async def then(work: Awaitable[T], fn: Callable[[T], Any]) -> Any:
    """``fn`` of ``work``'s result."""
    return fn(await work)
