"""Client set-up and sessions: health, the client's flags, sessions and their heartbeats."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from tinker import types

from gemlab.local.http.replies import answer, awaited, read
from gemlab.local.http.state import ServerDep, TenantDep

router = APIRouter(prefix="/api/v1")


def client_config(compress: bool) -> types.ClientConfigResponse:
    """The flags this server gives every client: plain API keys, forward_backward chunks in turn
    (the server runs them in arrival order), zstd bodies when ``compress``, and the SDK's httpx
    transport: its reqwest-based one (pyqwest) costs the client about half the CPU per request,
    but a process that used it aborted at exit ("terminate called without an active exception",
    exit -6: the `tinker` CLI in tests/local/test_http.py)."""
    return types.ClientConfigResponse(
        pjwt_auth_enabled=False,
        parallel_fwdbwd_chunks=False,
        proto_compress_fwdbwd=compress,
        use_pyqwest_transport=False,
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
    server.registry.session(session_id, tenant).last_seen = 0.0  # the next sweep drops it
    return Response(status_code=204)


@router.post("/telemetry")
async def telemetry() -> dict:
    return {"status": "accepted"}


@router.get("/get_server_capabilities")
async def capabilities(server: ServerDep, tenant: TenantDep) -> JSONResponse:
    return answer(await awaited(server.registry.tenant(tenant).rest.get_server_capabilities()))
