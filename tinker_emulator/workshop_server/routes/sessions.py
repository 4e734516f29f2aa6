"""Client set-up and sessions: health, the client's flags, sessions and their heartbeats."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from tinker import types

from tinker_emulator.workshop_server import served
from tinker_emulator.workshop_server.replies import answer, read
from tinker_emulator.workshop_server.state import ServerDep, TenantDep

router = APIRouter(prefix="/api/v1")


def client_config(compress: bool) -> types.ClientConfigResponse:
    """The flags this server gives every client: plain API keys, forward_backward chunks in turn
    (the server runs them in arrival order), zstd bodies when ``compress``, and the SDK's
    reqwest-based transport (pyqwest): per sampled action it costs the client about half the CPU
    of httpx's, and it keeps every connection open (httpx keeps 20, so a turn of 32 requests
    opened 12 new ones each way). An abort at exit once blamed on it (exit -6, "terminate called
    without an active exception") did not recur with pyqwest 0.12 (0 of 39 client and CLI runs)."""
    return types.ClientConfigResponse(
        pjwt_auth_enabled=False,
        parallel_fwdbwd_chunks=False,
        proto_compress_fwdbwd=compress,
        use_pyqwest_transport=True,
        sample_use_retrieve_futures=False,
        custom_loss_server_side=False,
        sample_join_sampling_session=False,
    )


@router.get("/healthz")
async def healthz() -> dict:
    return {"status": "ok"}


@router.post("/client/config")
async def config(server: ServerDep) -> JSONResponse:
    return answer(client_config(server.compress))


@router.post("/client/dynamic_config")
async def dynamic_config() -> JSONResponse:
    return answer(types.ClientDynamicConfigResponse())


@router.post("/create_session")
async def create_session(request: Request, server: ServerDep, tenant: TenantDep) -> JSONResponse:
    await read(request, types.CreateSessionRequest)
    session = server.registry.new_session(tenant)
    return answer(types.CreateSessionResponse(session_id=session.id))


@router.post("/session_heartbeat")
async def heartbeat(request: Request, server: ServerDep, tenant: TenantDep) -> JSONResponse:
    body = await read(request, types.SessionHeartbeatRequest)
    server.registry.session(body.session_id, tenant)
    return answer(types.SessionHeartbeatResponse())


@router.post("/sessions/{session_id}/finish")
async def finish(session_id: str, server: ServerDep, tenant: TenantDep) -> Response:
    registry = server.registry
    registry.end_session(registry.session(session_id, tenant))  # its models, samplers and results go now
    return Response(status_code=204)


@router.post("/telemetry")
async def telemetry() -> dict:
    return {"status": "accepted"}


@router.get("/get_server_capabilities")
async def capabilities(tenant: TenantDep) -> JSONResponse:
    """The models this server serves (``served.py``): the only ``base_model`` values it takes."""
    return answer(served.capabilities())
