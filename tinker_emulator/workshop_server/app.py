"""The app: Tinker's HTTP API (the routers of ``routes/``) over the local backend, behind the key
and body-size guard, with a sweeper that drops expired sessions and results while it serves.

Training requests are queued on the local backend's training worker the moment they arrive, so one
client's requests run in the order the SDK sends them; each answers with a future
(``{"request_id": ...}``) that ``retrieve_future`` long-polls, answering ``try_again`` while the work
runs. ``ForwardBackwardOutput`` and ``SampleResponse`` come back as protobuf, the rest as JSON.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from fastapi import FastAPI

from tinker_emulator import checkpoints
from tinker_emulator.workshop_server.errors import EXCEPTION_HANDLERS
from tinker_emulator.workshop_server.gate import SampleGate
from tinker_emulator.workshop_server.guard import Guard
from tinker_emulator.workshop_server.keys import KeyRing
from tinker_emulator.workshop_server.registry import Registry
from tinker_emulator.workshop_server.routes import ROUTERS
from tinker_emulator.workshop_server.state import Limits, Server

SWEEP_S = 30.0  # how often expired sessions and old results are dropped


def make_app(
    data_dir: Path, keys: list[str], limits: Limits | None = None, compress: bool = True, device: str | None = None
) -> FastAPI:
    """The ASGI app: Tinker's routes behind the key and body-size guard, its state on ``app.state.server``.
    Saves that a stopped server left half done in ``data_dir`` are finished or removed first."""
    for tenant_root in sorted((data_dir / "tenants").glob("*")):
        checkpoints.recover(tenant_root)
    limits = limits or Limits()
    registry = Registry(data_dir, limits.max_pending, limits.max_pending_per_session, device, limits.quotas)
    app = FastAPI(
        title="gemlab local Tinker server",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        lifespan=sweeping,
        exception_handlers=EXCEPTION_HANDLERS,
    )
    app.state.server = Server(registry, SampleGate(), limits, compress)
    for router in ROUTERS:
        app.include_router(router)
    app.add_middleware(Guard, keys=KeyRing(keys), max_body=limits.max_body, body_timeout_s=limits.body_timeout_s)
    return app


@contextlib.asynccontextmanager
async def sweeping(app: FastAPI) -> AsyncIterator[None]:
    """The app's lifespan: sweep the server's registry and sampling gate while it serves."""
    sweeper = asyncio.create_task(sweep(app.state.server))
    try:
        yield
    finally:
        sweeper.cancel()


async def sweep(server: Server) -> None:
    """Every ``SWEEP_S`` seconds, forget expired sessions (and their models, samplers and results)."""
    while True:
        await asyncio.sleep(SWEEP_S)
        server.registry.sweep()
        server.gate.keep(server.registry.sessions)
