"""What every route is handed: the server (``app.state.server``) and the caller's tenant, as
FastAPI dependencies, so a handler is a plain module-level function that a test can call on an
app of its own (``app.dependency_overrides`` replaces either)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Request

from tinker_emulator.workshop_server.gate import SampleGate
from tinker_emulator.workshop_server.registry import Quotas, Registry


@dataclass
class Limits:
    """What one request may ask for, how long its body may take to arrive, and what one key may
    hold at once (``quotas``)."""

    max_body: int = 64 * 1024 * 1024
    max_tokens: int = 4096
    max_samples: int = 64
    # the work one request may ask for, in tokens: a forward_backward's datums (gem's preset: 128
    # transitions within a 2,048-token context), a sample request's num_samples x (prompt + max_tokens)
    max_train_tokens: int = 262_144
    max_sample_tokens: int = 65_536
    # tokens of a forward_backward run as one job on the training worker (about 1 s on 2 cores
    # for gemlab/tiny-chat): what another key's request waits for at most per key ahead of it
    unit_tokens: int = 4096
    max_pending: int = 256
    max_pending_per_session: int = 64
    # a body must have arrived this long after its request began (64 MiB at ~1 MiB/s); else 408
    body_timeout_s: float = 60.0
    quotas: Quotas = field(default_factory=Quotas)


@dataclass
class Server:
    """One server process: what it holds between requests, its sampling gate, its limits, and
    whether clients are asked to compress ``forward_backward`` bodies."""

    registry: Registry
    gate: SampleGate
    limits: Limits
    compress: bool = True


async def server(request: Request) -> Server:
    """The server this request reached. (Both dependencies are ``async def``: FastAPI runs a plain
    ``def`` dependency in its thread pool, two thread hops on every request.)"""
    return request.app.state.server


async def tenant(request: Request) -> str:
    """The tenant of the request's API key (``guard.Guard`` checked the key and set it)."""
    return request.state.tenant


ServerDep = Annotated[Server, Depends(server)]
TenantDep = Annotated[str, Depends(tenant)]
