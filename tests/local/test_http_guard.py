"""The workshop server's door (tinker_emulator/workshop_server/guard.py; the head deadline in
tinker_emulator/asgi_limits.py): a connection whose
request head does not arrive in time is closed, a body that dribbles in is cut off at the read
timeout with a 408 in Tinker's error shape, and a request's work goes in its key's lane
with its body's size counted."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.http_server import ServerProcess
from tinker_emulator.futures import LANE
from tinker_emulator.workshop_server.guard import Guard
from tinker_emulator.workshop_server.keys import KeyRing, tenant_of
from tinker_emulator.workshop_server.registry import REQUEST_BYTES

KEY = "tml-" + "c" * 40


def call(guard: Guard, chunks: list[bytes], hang: bool = False) -> tuple[int, bytes]:
    """``(status, body)`` of a POST whose body comes in ``chunks`` (then, if ``hang``, nothing more ever)."""
    messages = [
        {"type": "http.request", "body": c, "more_body": hang or i < len(chunks) - 1} for i, c in enumerate(chunks)
    ]
    sent: list[dict] = []

    async def receive() -> dict:
        if messages:
            return messages.pop(0)
        await asyncio.Event().wait()  # a client that never sends the rest
        raise AssertionError("unreachable")

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/api/v1/x", "headers": [(b"x-api-key", KEY.encode())]}
    asyncio.run(guard(scope, receive, send))
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return sent[0]["status"], body


def reading_app(seen: dict[str, Any]):
    """An app that reads the whole body, then notes the lane and byte count its work would get."""

    async def app(scope: dict, receive: Any, send: Any) -> None:
        more = True
        while more:
            more = (await receive()).get("more_body", False)
        seen.update(lane=LANE.get(), size=REQUEST_BYTES.get())
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    return app


def test_a_body_that_does_not_arrive_in_time_is_answered_408():
    seen: dict[str, Any] = {}
    guard = Guard(reading_app(seen), KeyRing([KEY]), max_body=1000, body_timeout_s=0.2)
    status, body = call(guard, [b"{", b'"a"'], hang=True)
    assert status == 408 and not seen
    answer = json.loads(body)
    assert answer["category"] == "user" and "did not arrive within 0.2 s" in answer["error"]


def test_a_requests_work_goes_in_its_keys_lane_with_its_size_counted():
    seen: dict[str, Any] = {}
    guard = Guard(reading_app(seen), KeyRing([KEY]), max_body=1000, body_timeout_s=30)
    assert call(guard, [b"x" * 10, b"y" * 5]) == (200, b"ok")
    assert seen == {"lane": tenant_of(KEY), "size": 15}
    assert LANE.get() is None and REQUEST_BYTES.get() == 0  # nothing leaks out of the request


def response(sock: socket.socket) -> str:
    """One whole HTTP response read from ``sock`` (head and ``Content-Length`` bytes of body)."""
    data = b""
    while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < length(data):
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data.decode()


def length(data: bytes) -> int:
    for line in data.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":", 1)[1])
    return 0


@pytest.mark.slow
def test_the_server_cuts_off_a_client_that_dribbles_its_head_or_body(tmp_path: Path):
    server = ServerProcess(tmp_path / "data", "--read-timeout", "1")
    try:
        host, port = server.url.removeprefix("http://").rsplit(":", 1)
        for sent in (b"", b"POST /api/v1/create_session HTTP/1.1\r\nHost: x\r\n"):  # nothing / half a head
            with socket.create_connection((host, int(port)), timeout=60) as idle:
                idle.sendall(sent)
                assert idle.recv(1024) == b""  # closed by the server at its read timeout (asgi_limits.py)
        with socket.create_connection((host, int(port)), timeout=60) as slow:
            head = f"POST /api/v1/create_session HTTP/1.1\r\nHost: x\r\nX-API-Key: {server.keys[0]}\r\n"
            slow.sendall((head + "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{").encode())
            reply = response(slow)  # sent nothing more: the server answers at its read timeout
        assert reply.startswith("HTTP/1.1 408") and "did not arrive within 1 s" in reply
        with socket.create_connection((host, int(port)), timeout=60) as probe:
            probe.sendall(b"GET /api/v1/healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert response(probe).startswith("HTTP/1.1 200")
    finally:
        server.stop()
