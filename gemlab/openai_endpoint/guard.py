"""The endpoint's front door: every request passes here before FastAPI parses a byte of it.

One ASGI middleware, in this order: the ``Host`` header must name the server (a DNS-rebinding
page's ``Host: evil.example.com`` is refused), the API key must match when one is set, a body
must fit ``max_body_bytes`` (read at most that much; a ``Content-Length`` over it is refused
before any of the body is read), and at most ``max_concurrent`` sampling requests run at once
(the next gets a 503 with ``Retry-After``). Each refusal is OpenAI's error JSON and one line in
the ``gemlab.openai_endpoint`` log (``errors.py``). ``/health`` skips the key and the concurrency bound, so
a monitor sees a busy server as alive.

``tinker_emulator/workshop_server/guard.py`` is the local Tinker server's door, built the same way (a pure ASGI
middleware added with ``app.add_middleware``, headers read with Starlette's ``Headers``, refusals
sent as a Starlette ``JSONResponse``, ``Content-Length`` checked before a byte is read). The two
cannot be one module: ``tinker_emulator`` may import nothing of gemlab outside itself, and this
endpoint, which also serves real Tinker samplers, must not import ``tinker_emulator`` (that loads the
emulator: PyTorch, PEFT, transformers). They differ on purpose where their clients do: Tinker's
SDK sends one of many keys (one tenant each) as ``X-API-Key`` and long-polls its results, so that
server bounds queued work rather than requests in flight, and answers in Tinker's error shape.
"""

from __future__ import annotations

import hmac
import ipaddress
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from starlette.datastructures import Headers

from gemlab.openai_endpoint.errors import error_response
from gemlab.openai_endpoint.schemas import OpenAIError

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


async def refuse(scope: Scope, receive: Receive, send: Send, error: OpenAIError, headers: Mapping[str, str] | None = None) -> None:
    """Answer ``error`` before the app sees the request, and close the connection (its body may be unread)."""
    response = error_response(scope.get("method", "?"), scope.get("path", "?"), error, {"connection": "close", **(headers or {})})
    await response(scope, receive, send)


# a Host header (RFC 9110 7.2): a name or IPv4 address, or an IPv6 address in brackets, then an
# optional port of digits; anything else (``127.0.0.1:evil.example.com``) is no host of ours
_HOST = re.compile(r"(?:\[(?P<ipv6>[0-9A-Fa-f:.]+)\]|(?P<name>[A-Za-z0-9._-]+))(?::[0-9]{1,5})?")


def _host_name(host_header: str) -> str | None:
    """``example.com:8000`` -> ``example.com``; ``[::1]:8000`` -> ``::1``; ``None`` for a header
    that is not ``host[:port]``."""
    found = _HOST.fullmatch(host_header)
    return None if found is None else (found["ipv6"] or found["name"])


class Guard:
    """The ASGI middleware enforcing ``limits`` in front of ``app``."""

    def __init__(self, app: Callable[..., Awaitable[None]], limits: Limits) -> None:
        self.app, self.limits = app, limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limits, headers = self.limits, Headers(scope=scope)
        host = headers.get("host")
        name = _host_name(host) if host is not None else None
        if limits.allowed_hosts is not None and (name is None or name.lower() not in limits.allowed_hosts):
            message = f"Host header {host!r} is not this server's (allowed: {', '.join(limits.allowed_hosts)})"
            await refuse(scope, receive, send, OpenAIError(400, message, code="invalid_host"))
            return
        if scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        if limits.api_key is not None and not self._authorized(headers):
            message = "missing or wrong API key: send 'Authorization: Bearer <key>'"
            await refuse(scope, receive, send, OpenAIError(401, message, code="invalid_api_key", type="authentication_error"))
            return
        if scope["method"] not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        if limits.in_flight >= limits.max_concurrent:
            message = f"the server is busy ({limits.max_concurrent} requests running); retry shortly"
            busy = OpenAIError(503, message, code="server_busy", type="server_error")
            await refuse(scope, receive, send, busy, headers={"retry-after": "1"})
            return
        limits.in_flight += 1
        try:
            body = await self._read_body(scope, headers, receive, send)
            if body is not None:
                await self.app(scope, _replay(body, receive), send)
        finally:
            limits.in_flight -= 1

    def _authorized(self, headers: Headers) -> bool:
        given = headers.get("authorization") or ""
        token = given[7:].strip() if given[:7].lower() == "bearer " else ""
        return hmac.compare_digest(token.encode(), str(self.limits.api_key).encode())

    async def _read_body(self, scope: Scope, headers: Headers, receive: Receive, send: Send) -> bytes | None:
        """The whole body, or ``None`` once a 413 is sent (or the client left)."""
        limit = self.limits.max_body_bytes
        too_big = f"request body over the limit of {limit} bytes"
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            error = OpenAIError(413, f"{too_big} (Content-Length: {length[:20]})", code="request_too_large")
            await refuse(scope, receive, send, error)
            return None
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await refuse(scope, receive, send, OpenAIError(413, too_big, code="request_too_large"))
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
