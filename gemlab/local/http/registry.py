"""What the server holds between requests: sessions, their training runs and samplers, and the
futures their requests return, with the limits that keep its memory bounded.

Every model and sampler belongs to the session that made it and the key (tenant) it came with;
a request from any other key finds nothing. Work is queued on the local backend's workers, in
arrival order (Tinker's SDK sends one client's requests in turn), and each request's result
waits here until the client polls ``retrieve_future`` for it.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gemlab.local import LocalRestClient, LocalSamplingClient, LocalServiceClient, LocalTrainingClient

SESSION_TTL_S = 300.0  # a session with no request or heartbeat for this long is closed
RESULT_TTL_S = 1800.0  # a finished result nobody fetched is dropped after this long
RETRIEVED_TTL_S = 60.0  # a fetched result stays this long, for a client that retries the poll


class Busy(Exception):
    """The server's queue is full: the client should retry later (HTTP 429)."""


class NotFound(LookupError):
    """No such session, model, sampler or future for this key (HTTP 404)."""


@dataclass
class Tenant:
    """One API key: its own checkpoint root and service client."""

    name: str
    root: Path
    service: LocalServiceClient
    rest: LocalRestClient


@dataclass
class Session:
    id: str
    tenant: Tenant
    last_seen: float = field(default_factory=time.monotonic)


@dataclass
class Model:
    """A training run of a session: the local training client, once built."""

    id: str
    session: Session
    base_model: str
    client: asyncio.Future[LocalTrainingClient]


@dataclass
class Sampler:
    id: str
    session: Session | None  # None: a base model's sampler, shared by every session
    base_model: str
    model_path: str | None
    client: asyncio.Future[LocalSamplingClient]


@dataclass
class Pending:
    """A request's future: ``encode`` turns its result into the response body."""

    session: Session
    task: asyncio.Future[Any]
    encode: Callable[[Any], Any]
    retrieved_at: float | None = None
    done_at: float | None = None


class Registry:
    """Sessions, models, samplers and pending results of one server process."""

    def __init__(self, data_dir: Path, max_pending: int, max_pending_per_session: int, device: str | None = None):
        self.data_dir = data_dir
        self.max_pending = max_pending
        self.max_pending_per_session = max_pending_per_session
        self.device = device
        self.tenants: dict[str, Tenant] = {}
        self.sessions: dict[str, Session] = {}
        self.models: dict[str, Model] = {}
        self.samplers: dict[str, Sampler] = {}
        self.base_samplers: dict[str, Sampler] = {}
        self.pending: dict[str, Pending] = {}

    # ----- tenants and sessions ------------------------------------------------------------
    def tenant(self, name: str) -> Tenant:
        if name not in self.tenants:
            root = self.data_dir / "tenants" / name
            root.mkdir(parents=True, exist_ok=True)
            self.tenants[name] = Tenant(
                name, root, LocalServiceClient(device=self.device, root=root), LocalRestClient(root=root)
            )
        return self.tenants[name]

    def new_session(self, tenant: str) -> Session:
        session = Session(f"session-{uuid.uuid4().hex}", self.tenant(tenant))
        self.sessions[session.id] = session
        return session

    def session(self, session_id: Any, tenant: str) -> Session:
        session = self.sessions.get(session_id) if isinstance(session_id, str) else None
        if session is None or session.tenant.name != tenant:
            raise NotFound(f"No session {session_id!r} for this API key (the server may have restarted)")
        session.last_seen = time.monotonic()
        return session

    # ----- models and samplers -------------------------------------------------------------
    def add_model(self, model_id: str, session: Session, base_model: str, client: Awaitable[LocalTrainingClient]) -> None:
        if model_id in self.models:
            raise ValueError(f"model {model_id!r} already exists in this session")
        self.models[model_id] = Model(model_id, session, base_model, asyncio.ensure_future(client))

    def model(self, model_id: Any, tenant: str) -> tuple[Model, LocalTrainingClient]:
        """The training run ``model_id`` of this key, built and ready."""
        model = self.models.get(model_id) if isinstance(model_id, str) else None
        if model is None or model.session.tenant.name != tenant:
            raise NotFound(f"No model {model_id!r} for this API key (the server may have restarted: load a checkpoint)")
        if not model.client.done():
            raise Busy(f"model {model_id!r} is still being created")
        if model.client.exception() is not None:
            raise NotFound(f"model {model_id!r} failed to start: {model.client.exception()}")
        model.session.last_seen = time.monotonic()
        return model, model.client.result()

    def add_sampler(self, sampler: Sampler) -> None:
        self.samplers[sampler.id] = sampler

    def sampler(self, sampler_id: Any, tenant: str) -> Sampler:
        sampler = self.samplers.get(sampler_id) if isinstance(sampler_id, str) else None
        if sampler is None or (sampler.session is not None and sampler.session.tenant.name != tenant):
            raise NotFound(f"No sampler {sampler_id!r} for this API key")
        return sampler

    def base_sampler(self, base_model: str, tenant: Tenant) -> Sampler:
        """The one sampler of ``base_model`` with no adapter: every session's requests on it batch together."""
        if base_model not in self.base_samplers:
            client = asyncio.wrap_future(tenant.service.create_sampling_client(base_model=base_model).future())
            sampler = Sampler(f"base-{uuid.uuid4().hex}", None, base_model, None, client)
            self.base_samplers[base_model] = sampler
            self.samplers[sampler.id] = sampler
        return self.base_samplers[base_model]

    # ----- pending results ----------------------------------------------------------------
    def submit(self, session: Session, work: Awaitable[Any], encode: Callable[[Any], Any]) -> str:
        """Hold ``work``'s result for ``retrieve_future``; its request id. ``Busy`` when the queue is full."""
        waiting = [p for p in self.pending.values() if not p.task.done()]
        if len(waiting) >= self.max_pending:
            raise Busy(f"server busy: {len(waiting)} requests queued (limit {self.max_pending}); retry shortly")
        mine = sum(1 for p in waiting if p.session is session)
        if mine >= self.max_pending_per_session:
            raise Busy(f"this session has {mine} requests queued (limit {self.max_pending_per_session}); retry shortly")
        request_id = f"req-{uuid.uuid4().hex}"
        task = asyncio.ensure_future(work)
        pending = Pending(session, task, encode)
        task.add_done_callback(lambda _: setattr(pending, "done_at", time.monotonic()))
        self.pending[request_id] = pending
        return request_id

    def result(self, request_id: Any, tenant: str) -> Pending:
        pending = self.pending.get(request_id) if isinstance(request_id, str) else None
        if pending is None or pending.session.tenant.name != tenant:
            raise NotFound(f"No request {request_id!r} for this API key (results are kept {RESULT_TTL_S:.0f} s)")
        pending.session.last_seen = time.monotonic()
        return pending

    def waiting(self) -> int:
        return sum(1 for p in self.pending.values() if not p.task.done())

    # ----- clean-up -----------------------------------------------------------------------
    def sweep(self, now: float | None = None) -> None:
        """Drop expired sessions (their models and samplers go with them) and old results."""
        now = time.monotonic() if now is None else now
        for request_id, pending in list(self.pending.items()):
            retrieved = pending.retrieved_at is not None and now - pending.retrieved_at > RETRIEVED_TTL_S
            stale = pending.done_at is not None and now - pending.done_at > RESULT_TTL_S
            if retrieved or stale:
                del self.pending[request_id]
        expired = {s.id for s in self.sessions.values() if now - s.last_seen > SESSION_TTL_S}
        busy = {p.session.id for p in self.pending.values() if not p.task.done()}
        for session_id in expired - busy:
            del self.sessions[session_id]
        self.models = {k: m for k, m in self.models.items() if m.session.id in self.sessions}
        self.samplers = {k: s for k, s in self.samplers.items() if s.session is None or s.session.id in self.sessions}
