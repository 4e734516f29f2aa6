"""The futures every queued request answers with: ``retrieve_future`` long-polls one (``try_again``
while its work runs), ``cancel_future`` drops it. ``ForwardBackwardOutput`` and ``SampleResponse``
come back as protobuf, the rest as JSON; a failure as Tinker's error JSON."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from tinker import types

from tinker_emulator.workshop_server import wire
from tinker_emulator.workshop_server.errors import error_body, logged
from tinker_emulator.workshop_server.replies import answer, read
from tinker_emulator.workshop_server.state import ServerDep, TenantDep

router = APIRouter(prefix="/api/v1")
POLL_S = 20.0  # how long retrieve_future waits before answering try_again (the SDK waits 45 s)


@router.post("/retrieve_future")
async def retrieve_future(request: Request, server: ServerDep, tenant: TenantDep) -> Response:
    body = await read(request, types.FutureRetrieveRequest)
    pending = server.registry.result(body.request_id, tenant)
    if not pending.task.done():
        await asyncio.wait([pending.task], timeout=POLL_S)
    if not pending.task.done():
        return JSONResponse({"type": "try_again", "request_id": body.request_id, "queue_state": "active"})
    server.registry.mark_fetched(body.request_id)
    error = pending.task.exception() if not pending.task.cancelled() else asyncio.CancelledError("cancelled")
    if error is not None:
        _, message, category = logged(error, f"request {body.request_id}")
        return JSONResponse(error_body(message, category))
    encoded = pending.encode(pending.task.result())
    if isinstance(encoded, bytes):
        return Response(encoded, media_type=wire.PROTOBUF)
    return answer(encoded)


@router.post("/cancel_future")
async def cancel_future(request: Request, server: ServerDep, tenant: TenantDep) -> Response:
    body = await read(request, types.FutureRetrieveRequest)  # the same body: {"request_id": ...}
    server.registry.result(body.request_id, tenant).task.cancel()
    return Response(status_code=204)
