"""The endpoint's front door (gemlab/openai_endpoint/guard.py) on an app of its own: the ``Host`` header is
read as ``host[:port]`` (an IPv6 address in brackets, a port of digits) and anything else is refused."""

from __future__ import annotations

import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from gemlab.openai_endpoint.guard import Guard, Limits


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
