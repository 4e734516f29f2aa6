"""The endpoint's front door (gemlab/openai_endpoint/guard.py) on an app of its own: the ``Host`` header is
read as ``host[:port]`` (an IPv6 address in brackets, a port of digits) and anything else is refused."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from gemlab.openai_endpoint.guard import Guard, Limits
from gemlab.openai_endpoint.server_thread import BackgroundServer


@pytest.fixture(scope="module")
def client() -> TestClient:
    app = Starlette(routes=[Route("/v1/models", lambda request: PlainTextResponse("inside"))])
    return TestClient(Guard(app, Limits()))


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1:evil.example.com",  # the part before the colon was taken as the host
        "localhost:evil.example.com",
        "[::1]:evil.example.com",
        "[::1]evil.example.com",
        "127.0.0.1:80:80",
        "127.0.0.1:",
        "127.0.0.1:8000/evil",
        "user@127.0.0.1",
        "::1",  # an IPv6 address without brackets is no Host header
        "[::1",
        "",
    ],
)
def test_a_host_header_that_is_not_host_and_digits_is_refused(client: TestClient, host: str) -> None:
    answer = client.get("/v1/models", headers={"host": host})
    assert answer.status_code == 400, (host, answer.text)
    assert answer.json()["error"]["code"] == "invalid_host"


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.1:8000", "localhost:65535", "LOCALHOST", "[::1]", "[::1]:8000"])
def test_this_servers_names_with_or_without_a_port_pass(client: TestClient, host: str) -> None:
    answer = client.get("/v1/models", headers={"host": host})
    assert (answer.status_code, answer.text) == (200, "inside")


@pytest.fixture(scope="module")
def served() -> Iterator[BackgroundServer]:
    """The guarded app served by uvicorn, as ``python -m gemlab.openai_endpoint`` serves it (raw sockets reach it)."""
    app = Starlette(routes=[Route("/v1/models", lambda request: PlainTextResponse("inside"))])
    with BackgroundServer(Guard(app, Limits())) as server:
        yield server


def raw(server: BackgroundServer, request: bytes) -> bytes:
    """What the server answers to ``request`` sent as is, on a connection of its own."""
    with socket.create_connection((server.host, server.port), timeout=30) as sock:
        try:
            sock.sendall(request)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused while sending: the answer is waiting
        answer = b""
        try:
            while piece := sock.recv(65536):
                answer += piece
        except ConnectionResetError:
            pass
        return answer


@pytest.mark.parametrize(
    "head",
    [
        b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1:99999\r\n",  # no such port
        b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example.com\r\n",  # two Host headers
        b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: 127.0.0.1\r\n",
        b"GET http://evil.example.com/v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n",  # absolute form, another host
        b"GET http://127.0.0.1:99999/v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n",  # (httptools refuses it itself)
    ],
)
def test_a_bad_port_two_hosts_or_an_absolute_uri_naming_another_host_is_refused(
    served: BackgroundServer, head: bytes
) -> None:
    answer = raw(served, head + b"Connection: close\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400 ") and b"inside" not in answer, answer[:300]


def test_an_absolute_uri_naming_this_server_is_served(served: BackgroundServer) -> None:
    request = b"GET http://127.0.0.1/v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    answer = raw(served, request)
    assert answer.startswith(b"HTTP/1.1 200 ") and b"inside" in answer, answer[:300]


def test_a_head_over_the_limit_is_431_before_the_app(served: BackgroundServer) -> None:
    head = b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * (8 * 2**20) + b"\r\n\r\n"
    answer = raw(served, head)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:300]
    assert json.loads(answer.partition(b"\r\n\r\n")[2])["error"]["code"] == "request_header_fields_too_large"
    assert raw(served, b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").startswith(
        b"HTTP/1.1 200 "
    )
