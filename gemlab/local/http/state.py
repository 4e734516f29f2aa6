"""What every route is handed: the server (``app.state.server``) and the caller's tenant, as
FastAPI dependencies, so a handler is a plain module-level function that a test can call on an
app of its own (``app.dependency_overrides`` replaces either)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from gemlab.local.http.gate import SampleGate
from gemlab.local.http.registry import Registry


@dataclass
class Limits:
    """What one request may ask for."""

    max_body: int = 64 * 1024 * 1024
    max_tokens: int = 4096
    max_samples: int = 64
    max_pending: int = 256
    max_pending_per_session: int = 64


@dataclass
class Server:
    """One server process: what it holds between requests, its sampling gate, its limits, and
    whether clients are asked to compress ``forward_backward`` bodies."""

    registry: Registry
    gate: SampleGate
    limits: Limits
    compress: bool = True


def server(request: Request) -> Server:
    """The server this request reached."""
    return request.app.state.server


def tenant(request: Request) -> str:
    """The tenant of the request's API key (``guard.Guard`` checked the key and set it)."""
    return request.state.tenant


ServerDep = Annotated[Server, Depends(server)]
TenantDep = Annotated[str, Depends(tenant)]
