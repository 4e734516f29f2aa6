"""The endpoint's front door: every request passes here before FastAPI parses a byte of it.

One ASGI middleware, in this order: the ``Host`` header must name the server (a DNS-rebinding
page's ``Host: evil.example.com`` is refused), the API key must match when one is set, a body
must fit ``max_body_bytes`` (read at most that much; a ``Content-Length`` over it is refused
before any of the body is read), and at most ``max_concurrent`` sampling requests run at once
(the next gets a 503 with ``Retry-After``). Each refusal is OpenAI's error JSON and one line in
the ``gemlab.openai_endpoint`` log (``errors.py``). ``/health`` skips the key and the concurrency bound, so
a monitor sees a busy server as alive.

Before this door, uvicorn's protocol holds the limits both gemlab servers share
(``tinker_emulator/asgi_limits.py``): a request head must arrive in time and fit 64 KiB (else 431).
The ``Host`` check reads the one ``Host`` header (two are refused, as is a port over 65535) and
the authority of an absolute-form target (``GET http://other.example/ HTTP/1.1``), which
httptools would otherwise drop unseen.

``tinker_emulator/workshop_server/guard.py`` is the local Tinker server's door, built the same way. They differ
on purpose where their clients do: Tinker's SDK sends one of many keys (one tenant each) as
``X-API-Key`` and long-polls its results, so that server bounds queued work rather than requests
in flight, and answers in Tinker's error shape.
"""

from __future__ import annotations

import hmac
import ipaddress
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from starlette.datastructures import Headers

from gemlab.openai_endpoint.errors import error_response
from gemlab.openai_endpoint.schemas import OpenAIError
from tinker_emulator import asgi_limits

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
OPEN_PATHS = ("/health",)

Scope = MutableMapping[str, Any]  # as starlette.types has them
Message = MutableMapping[str, Any]
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


async def refuse(
    scope: Scope, receive: Receive, send: Send, error: OpenAIError, headers: Mapping[str, str] | None = None
) -> None:
    """Answer ``error`` before the app sees the request, and close the connection (its body may be unread)."""
    response = error_response(
        scope.get("method", "?"), scope.get("path", "?"), error, {"connection": "close", **(headers or {})}
    )
    await response(scope, receive, send)


# a Host header (RFC 9110 7.2): a name or IPv4 address, or an IPv6 address in brackets, then an
# optional port of digits; anything else (``127.0.0.1:evil.example.com``) is no host of ours
_HOST = re.compile(r"(?:\[(?P<ipv6>[0-9A-Fa-f:.]+)\]|(?P<name>[A-Za-z0-9._-]+))(?::(?P<port>[0-9]{1,5}))?")


def _host_name(host_header: str) -> str | None:
    """``example.com:8000`` -> ``example.com``; ``[::1]:8000`` -> ``::1``; ``None`` for a header
    that is not ``host[:port]`` with a port in 0..65535."""
    found = _HOST.fullmatch(host_header)
    if found is None or (found["port"] is not None and int(found["port"]) > 65535):
        return None
    return found["ipv6"] or found["name"]


def _hosts_named(scope: Scope, headers: Headers) -> list[str] | None:
    """The host names the request names: its one ``Host`` header's, and the authority of an
    absolute-form target (``GET http://other/ HTTP/1.1``); ``None`` when either is malformed,
    the port out of range, or ``Host`` is missing or sent twice."""
    sent = headers.getlist("host")
    name = _host_name(sent[0]) if len(sent) == 1 else None
    if name is None:
        return None
    target = asgi_limits.request_target(scope)
    if target.startswith(b"/") or target == b"*":
        return [name]
    authority = target.partition(b"://")[2].split(b"/", 1)[0].split(b"?", 1)[0].decode("latin-1")
    other = _host_name(authority)
    return None if other is None else [name, other]


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
        names = _hosts_named(scope, headers)
        if names is None or (
            limits.allowed_hosts is not None and any(n.lower() not in limits.allowed_hosts for n in names)
        ):
            allowed = (
                ", ".join(limits.allowed_hosts)
                if limits.allowed_hosts is not None
                else "any name, with a port of 0-65535"
            )
            message = (
                f"Host header {(host or '')[:100]!r} (or the request's URI) is not this server's (allowed: "
                f"{allowed}; one Host header)"
            )
            await refuse(scope, receive, send, OpenAIError(400, message, code="invalid_host"))
            return
        if scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        if limits.api_key is not None and not self._authorized(headers):
            message = "missing or wrong API key: send 'Authorization: Bearer <key>'"
            await refuse(
                scope, receive, send, OpenAIError(401, message, code="invalid_api_key", type="authentication_error")
            )
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
