"""The endpoint's front door: every request passes here before FastAPI parses a byte of it.

One ASGI middleware, in this order: the ``Host`` header must name the server (a DNS-rebinding
page's ``Host: evil.example.com`` is refused), the API key must match when one is set, a body
must fit ``max_body_bytes`` (read at most that much; a ``Content-Length`` over it is refused
before any of the body is read), and at most ``max_concurrent`` sampling requests run at once
(the next gets a 503 with ``Retry-After``). Each refusal is OpenAI's error JSON and one line in
the ``gemlab.serve`` log. ``/health`` skips the key and the concurrency bound, so a monitor sees
a busy server as alive.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("gemlab.serve")

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
OPEN_PATHS = ("/health",)

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the server reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def allowed_hosts_for(bind_host: str, extra: Iterable[str] = ()) -> tuple[str, ...] | None:
    """The ``Host`` names a server bound to ``bind_host`` answers: loopback names and the bound
    address, plus ``extra``; ``None`` (any) for a wildcard bind with no names given, where the
    API key is the protection."""
    extra = tuple(extra)
    if bind_host in ("0.0.0.0", "::", "") and not extra:
        return None
    return tuple(dict.fromkeys((*LOOPBACK_NAMES, bind_host.strip("[]"), *extra)))


@dataclass
class Limits:
    """What the front door enforces (see the module docstring)."""

    api_key: str | None = None
    allowed_hosts: tuple[str, ...] | None = LOOPBACK_NAMES
    max_body_bytes: int = 4 * 1024 * 1024
    max_concurrent: int = 64
    in_flight: int = field(default=0, init=False)


def error_body(status: int, message: str, *, type: str = "invalid_request_error", code: str | None = None, param: str | None = None) -> bytes:
    """OpenAI's error JSON, as bytes."""
    return json.dumps({"error": {"message": message, "type": type, "param": param, "code": code}}).encode()


async def refuse(
    scope: Scope, send: Send, status: int, message: str, *, code: str, type: str = "invalid_request_error", headers: Iterable[tuple[bytes, bytes]] = ()
) -> None:
    """Answer ``status`` in OpenAI's error shape and log it on one line."""
    log.warning("%d %s %s: %s", status, scope.get("method", "?"), scope.get("path", "?"), message)
    body = error_body(status, message, type=type, code=code)
    await send({
        "type": "http.response.start", "status": status,
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), (b"connection", b"close"), *headers],
    })  # fmt: skip
    await send({"type": "http.response.body", "body": body})


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return value.decode("latin-1")
    return None


def _host_name(host_header: str) -> str:
    """``example.com:8000`` -> ``example.com``; ``[::1]:8000`` -> ``::1``."""
    if host_header.startswith("["):
        return host_header[1:].split("]", 1)[0]
    return host_header.rsplit(":", 1)[0] if host_header.count(":") == 1 else host_header


class Guard:
    """The ASGI middleware enforcing ``limits`` in front of ``app``."""

    def __init__(self, app: Callable[..., Awaitable[None]], limits: Limits) -> None:
        self.app, self.limits = app, limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limits = self.limits
        host = _header(scope, b"host")
        if limits.allowed_hosts is not None and (host is None or _host_name(host).lower() not in limits.allowed_hosts):
            await refuse(scope, send, 400, f"Host header {host!r} is not this server's (allowed: {', '.join(limits.allowed_hosts)})", code="invalid_host")
            return
        if scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        if limits.api_key is not None and not self._authorized(scope):
            await refuse(scope, send, 401, "missing or wrong API key: send 'Authorization: Bearer <key>'", code="invalid_api_key", type="authentication_error")
            return
        if scope["method"] not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        if limits.in_flight >= limits.max_concurrent:
            message = f"the server is busy ({limits.max_concurrent} requests running); retry shortly"
            await refuse(scope, send, 503, message, code="server_busy", type="server_error", headers=[(b"retry-after", b"1")])
            return
        limits.in_flight += 1
        try:
            body = await self._read_body(scope, receive, send)
            if body is not None:
                await self.app(scope, _replay(body, receive), send)
        finally:
            limits.in_flight -= 1

    def _authorized(self, scope: Scope) -> bool:
        given = _header(scope, b"authorization") or ""
        token = given[7:].strip() if given[:7].lower() == "bearer " else ""
        return hmac.compare_digest(token.encode(), str(self.limits.api_key).encode())

    async def _read_body(self, scope: Scope, receive: Receive, send: Send) -> bytes | None:
        """The whole body, or ``None`` once a 413 is sent (or the client left)."""
        limit = self.limits.max_body_bytes
        too_big = f"request body over the limit of {limit} bytes"
        length = _header(scope, b"content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            await refuse(scope, send, 413, f"{too_big} (Content-Length: {length[:20]})", code="request_too_large")
            return None
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await refuse(scope, send, 413, too_big, code="request_too_large")
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the app the body already read, then waits on the real one
    (which reports a client's disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
