"""What the server holds between requests: sessions, their training runs and samplers, and the
futures their requests return, with the limits that keep its memory bounded.

Every model and sampler belongs to the session that made it and the key (tenant) it came with;
a request from any other key finds nothing. Work is queued on the local backend's workers, in
arrival order within a key (Tinker's SDK sends one client's requests in turn) and round-robin
across keys (``guard.py`` puts each request in its key's lane), and each request's result waits
here until the client polls ``retrieve_future`` for it.

Each key is bounded by ``Quotas``: training runs open (a hard cap, answered 403 so that the SDK
does not retry it for minutes), and queued requests, unfetched results and the bytes they hold
(answered 429: they free themselves as work finishes and results are fetched or expire). A
session that ends (``finish``, or no heartbeat for ``SESSION_TTL_S``) takes its models, samplers
and results with it.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tinker_emulator import LocalRestClient, LocalSamplingClient, LocalServiceClient, LocalTrainingClient
from tinker_emulator.workshop_server import served

SESSION_TTL_S = 300.0  # a session with no request or heartbeat for this long is closed
RETRIEVED_TTL_S = 60.0  # a fetched result stays this long, for a client that retries the poll
# the body bytes of the request being served (``guard.py`` counts them as they stream in)
REQUEST_BYTES: contextvars.ContextVar[int] = contextvars.ContextVar("gemlab_request_bytes", default=0)


@dataclass
class Quotas:
    """What one API key may hold at once, and how long a result nobody fetched is kept."""

    models: int = 32  # training runs open (LoRA adapters and optimizer state on the server)
    # samplers kept (a snapshot adapter each); beyond it the least recently used one not in use goes
    samplers: int = 32
    queued: int = 64  # requests queued or running
    results: int = 128  # finished results not yet fetched
    held_bytes: int = 128 * 2**20  # request bytes of its queued requests and unfetched results
    result_ttl_s: float = 300.0  # a finished result nobody fetched is dropped after this long


class Busy(Exception):
    """The server's queue, or this key's share of it, is full: the client should retry later (HTTP 429)."""


class QuotaExceeded(Exception):
    """A key is at a cap that retrying does not lift (HTTP 403, which the SDK does not retry)."""


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
    last_used: float = field(default_factory=time.monotonic)
    sampling: int = 0  # its sample requests not yet answered


@dataclass
class Pending:
    """A request's future: ``encode`` turns its result into the response body."""

    session: Session
    task: asyncio.Future[Any]
    encode: Callable[[Any], Any]
    retrieved_at: float | None = None
    done_at: float | None = None
    size: int = 0  # the bytes of the request that made it


class Registry:
    """Sessions, models, samplers and pending results of one server process."""

    def __init__(
        self,
        data_dir: Path,
        max_pending: int,
        max_pending_per_session: int,
        device: str | None = None,
        quotas: Quotas | None = None,
    ):
        self.data_dir = data_dir
        self.max_pending = max_pending
        self.max_pending_per_session = max_pending_per_session
        self.device = device
        self.quotas = quotas or Quotas()
        self.tenants: dict[str, Tenant] = {}
        self.sessions: dict[str, Session] = {}
        self.models: dict[str, Model] = {}
        self.samplers: dict[str, Sampler] = {}
        self.base_samplers: dict[str, Sampler] = {}
        self.pending: dict[str, Pending] = {}  # requests running, and results not yet fetched
        # fetched results, kept ``RETRIEVED_TTL_S`` for a client that polls again; apart from
        # ``pending`` so that ``check_room``, run on every request, scans only what it bounds (a
        # busy server holds thousands of fetched results: scanning them cost milliseconds a request)
        self.fetched: dict[str, Pending] = {}

    # ----- tenants and sessions ------------------------------------------------------------
    def tenant(self, name: str) -> Tenant:
        if name not in self.tenants:
            root = self.data_dir / "tenants" / name
            root.mkdir(parents=True, exist_ok=True)
            self.tenants[name] = Tenant(
                name,
                root,
                LocalServiceClient(device=self.device, root=root, stand_in=served.stand_in()),
                LocalRestClient(root=root),
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

    def end_session(self, session: Session) -> None:
        """Close ``session`` now: its models, samplers and results go (work still running finishes,
        and its result is dropped by the next sweep)."""
        self.sessions.pop(session.id, None)
        self._forget_closed()

    # ----- models and samplers -------------------------------------------------------------
    def add_model(
        self, model_id: str, session: Session, base_model: str, client: Awaitable[LocalTrainingClient]
    ) -> None:
        if model_id in self.models:
            raise ValueError(f"model {model_id!r} already exists in this session")
        self.check_model_room(session)
        self.models[model_id] = Model(model_id, session, base_model, asyncio.ensure_future(client))

    def check_model_room(self, session: Session) -> None:
        """``QuotaExceeded`` when ``session``'s key has as many training runs open as it may."""
        open_runs = sum(1 for m in self.models.values() if m.session.tenant is session.tenant)
        if open_runs >= self.quotas.models:
            raise QuotaExceeded(
                f"this API key has {open_runs} training runs open, the server's limit per key (its --models-per-key); "
                "a run closes when its ServiceClient is closed (service_client.close('success')) or its program ends"
            )

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
        """Keep ``sampler``; beyond ``Quotas.samplers`` of its key, the least recently used one not in
        use goes (an RL loop makes one per step and never uses the old ones again; each holds an
        adapter). In use: the newest of its session, or one with a sample request unanswered;
        those are never dropped (``check_sampler_room`` refuses a new sampler instead)."""
        self.samplers[sampler.id] = sampler
        if sampler.session is None:
            return
        mine = self._samplers_of(sampler.session.tenant)
        spare = sorted((s for s in mine if not self._in_use(s)), key=lambda s: s.last_used)
        for old in spare[: max(0, len(mine) - self.quotas.samplers)]:
            del self.samplers[old.id]

    def check_sampler_room(self, session: Session) -> None:
        """``QuotaExceeded`` when ``session`` has no sampler yet (a program starting) and its key
        holds as many samplers as it may, all in use. A session that has one may always make its
        next (it is mid-run: the old one goes once it is no longer in use)."""
        mine = self._samplers_of(session.tenant)
        if len(mine) < self.quotas.samplers or any(s.session is session for s in mine):
            return
        newest = self._newest()
        if all(self._in_use(s, newest) for s in mine):
            raise QuotaExceeded(
                f"this API key has {len(mine)} samplers in use, at the server's limit of "
                f"{self.quotas.samplers} per key "
                "(its --samplers-per-key); a sampler is in use while it is its session's newest or answers a request"
            )

    def _samplers_of(self, tenant: Tenant) -> list[Sampler]:
        return [s for s in self.samplers.values() if s.session is not None and s.session.tenant is tenant]

    def _newest(self) -> dict[str, Sampler]:
        """Each session's newest sampler (``samplers`` keeps the order they were made)."""
        return {s.session.id: s for s in self.samplers.values() if s.session is not None}

    def _in_use(self, sampler: Sampler, newest: dict[str, Sampler] | None = None) -> bool:
        newest = self._newest() if newest is None else newest
        return sampler.sampling > 0 or (sampler.session is not None and newest.get(sampler.session.id) is sampler)

    def sampler(self, sampler_id: Any, tenant: str) -> Sampler:
        sampler = self.samplers.get(sampler_id) if isinstance(sampler_id, str) else None
        if sampler is None or (sampler.session is not None and sampler.session.tenant.name != tenant):
            raise NotFound(
                f"No sampler {sampler_id!r} for this API key (a key keeps its {self.quotas.samplers} most "
                "recently used samplers, and every one in use)"
            )
        sampler.last_used = time.monotonic()
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
        """Hold ``work``'s result for ``retrieve_future``; its request id. ``Busy`` when the queue,
        or this key's share of it, is full (``work`` is then closed unstarted)."""
        try:
            self.check_room(session)
        except Busy:
            if asyncio.iscoroutine(work):
                work.close()
            raise
        request_id = f"req-{uuid.uuid4().hex}"
        task = asyncio.ensure_future(work)
        pending = Pending(session, task, encode, size=REQUEST_BYTES.get())
        task.add_done_callback(lambda _: setattr(pending, "done_at", time.monotonic()))
        self.pending[request_id] = pending
        return request_id

    def check_room(self, session: Session) -> None:
        """``Busy`` unless the server and ``session``'s key have room for one more request (of the
        size the guard counted): routes call it before they queue work on the backend, ``submit`` again."""
        size = REQUEST_BYTES.get()
        waiting = queued = results = held = 0
        mine = 0
        for p in self.pending.values():
            running = not p.task.done()
            waiting += running
            if p.session.tenant is not session.tenant:
                continue
            mine += running and p.session is session
            queued += running
            results += not running
            held += p.size
        quotas = self.quotas
        if waiting >= self.max_pending:
            raise Busy(f"server busy: {waiting} requests queued (limit {self.max_pending}); retry shortly")
        if mine >= self.max_pending_per_session:
            raise Busy(f"this session has {mine} requests queued (limit {self.max_pending_per_session}); retry shortly")
        if queued >= quotas.queued:
            raise Busy(f"this API key has {queued} requests queued (limit {quotas.queued}); retry shortly")
        if results >= quotas.results:
            raise Busy(
                f"this API key has {results} results nobody fetched (limit {quotas.results}); "
                f"fetch them, or they expire after {quotas.result_ttl_s:.0f} s"
            )
        if held + size > quotas.held_bytes:
            raise Busy(
                f"this API key's queued requests and unfetched results hold {held} bytes; {size} more is over "
                f"the limit of {quotas.held_bytes} bytes per key; retry shortly"
            )

    def result(self, request_id: Any, tenant: str) -> Pending:
        pending = (
            (self.pending.get(request_id) or self.fetched.get(request_id)) if isinstance(request_id, str) else None
        )
        if pending is None or pending.session.tenant.name != tenant:
            ttl = self.quotas.result_ttl_s
            raise NotFound(f"No request {request_id!r} for this API key (results are kept {ttl:.0f} s)")
        pending.session.last_seen = time.monotonic()
        return pending

    def mark_fetched(self, request_id: str) -> None:
        """The finished result ``request_id`` was handed to its client: it no longer counts against its
        key's quotas, and is kept ``RETRIEVED_TTL_S`` more for a client that polls again."""
        pending = self.pending.pop(request_id, None)
        if pending is not None:
            pending.retrieved_at = time.monotonic()
            self.fetched[request_id] = pending

    def waiting(self) -> int:
        return sum(1 for p in self.pending.values() if not p.task.done())

    # ----- clean-up -----------------------------------------------------------------------
    def sweep(self, now: float | None = None) -> None:
        """Drop expired sessions (their models, samplers and results go with them) and old results."""
        now = time.monotonic() if now is None else now
        self.fetched = {k: p for k, p in self.fetched.items() if now - (p.retrieved_at or now) <= RETRIEVED_TTL_S}
        ttl = self.quotas.result_ttl_s
        self.pending = {k: p for k, p in self.pending.items() if p.done_at is None or now - p.done_at <= ttl}
        expired = {s.id for s in self.sessions.values() if now - s.last_seen > SESSION_TTL_S}
        busy = {p.session.id for p in self.pending.values() if not p.task.done()}
        for session_id in expired - busy:
            del self.sessions[session_id]
        self._forget_closed()

    def _forget_closed(self) -> None:
        """Drop the models, samplers and finished results of sessions that are no longer open."""
        alive = self.sessions
        self.models = {k: m for k, m in self.models.items() if m.session.id in alive}
        self.samplers = {k: s for k, s in self.samplers.items() if s.session is None or s.session.id in alive}
        self.pending = {k: p for k, p in self.pending.items() if p.session.id in alive or not p.task.done()}
        self.fetched = {k: p for k, p in self.fetched.items() if p.session.id in alive}
