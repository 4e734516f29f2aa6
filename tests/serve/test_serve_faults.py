"""Fault injection for the endpoint (issue 20): each bad request gets its status in OpenAI's error
shape and one log line (no traceback), and the server answers a normal request afterwards.
Loopback only; every loop is bounded."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.serve.conftest import MODEL, GatedSampler, serve

HI = [{"role": "user", "content": "hi"}]
JSON = {"content-type": "application/json"}


@pytest.fixture(autouse=True)
def no_tracebacks(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Every test: no log record carries a traceback, and the endpoint's own lines are one line each."""
    caplog.set_level(logging.WARNING)
    yield
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    assert all("\n" not in r.getMessage() for r in caplog.records if r.name == "gemlab.openai_endpoint")


def assert_error(response: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    if code is not None:
        assert error["code"] == code
    return error


def still_serves(server: Any, **headers: str) -> None:
    reply = httpx.post(
        server.url + "/chat/completions",
        json={"model": MODEL, "messages": HI, "max_tokens": 3},
        headers=headers,
        timeout=60,
    )
    assert reply.status_code == 200 and reply.json()["choices"][0]["token_ids"]


def test_an_oversized_body_is_refused_by_its_length_before_it_is_read(server) -> None:
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "x" * 5_000_000}]}).encode()
    assert_error(
        httpx.post(server.url + "/chat/completions", content=body, headers=JSON, timeout=30), 413, "request_too_large"
    )
    still_serves(server)


def test_an_oversized_body_without_a_length_is_refused_once_it_passes_the_limit(server) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"model": "' + MODEL.encode() + b'", "messages": [{"role": "user", "content": "'
        for _ in range(80):  # 80 x 64 KiB = 5 MiB, past the 4 MiB default
            yield b"x" * 65536
        yield b'"}]}'

    assert_error(
        httpx.post(server.url + "/chat/completions", content=chunks(), headers=JSON, timeout=30),
        413,
        "request_too_large",
    )
    still_serves(server)


def poll_health(server: Any, busy: threading.Thread) -> list[float]:
    """Seconds each ``/health`` took while ``busy`` ran (at most 400 polls)."""
    latencies = []
    with httpx.Client(timeout=10) as client:
        for _ in range(400):
            start = time.perf_counter()
            assert client.get(server.url.removesuffix("/v1") + "/health").status_code == 200
            latencies.append(time.perf_counter() - start)
            if not busy.is_alive():
                break
            time.sleep(0.02)
    return latencies


@pytest.mark.parametrize(
    "characters",
    [10_000_000, 4_000_000, 300_000],
    ids=["10MB-over-body-limit", "4MB-over-context-by-characters", "300k-tokenized"],
)
def test_health_answers_within_a_second_while_a_big_message_is_refused(server, characters: int) -> None:
    statuses: list[int] = []
    content = "ab " * (characters // 3)
    busy = threading.Thread(
        target=lambda: statuses.append(
            httpx.post(
                server.url + "/chat/completions",
                json={"model": MODEL, "messages": [{"role": "user", "content": content}]},
                timeout=120,
            ).status_code
        )
    )
    busy.start()
    latencies = poll_health(server, busy)
    busy.join(timeout=120)
    assert statuses in ([413], [400]) and max(latencies) < 1.0, (statuses, max(latencies))
    still_serves(server)


def test_a_key_is_required_when_set(sampler) -> None:
    with serve(sampler, api_key="s3cret") as server:
        for key in ("wrong", ""):
            with pytest.raises(openai.AuthenticationError):
                openai.OpenAI(base_url=server.url, api_key=key or "none", max_retries=0).models.list()
        missing = httpx.post(server.url + "/chat/completions", json={"model": MODEL, "messages": HI})
        assert_error(missing, 401, "invalid_api_key")
        assert httpx.get(server.url.removesuffix("/v1") + "/health").status_code == 200  # liveness needs no key
        client = openai.OpenAI(base_url=server.url, api_key="s3cret", max_retries=0)
        assert client.chat.completions.create(model=MODEL, messages=HI, max_tokens=3).choices
        still_serves(server, authorization="Bearer s3cret")


def test_only_this_servers_host_names_are_answered(server) -> None:
    for host in ("evil.example.com", "evil.example.com:80", f"127.0.0.1.evil.example.com:{server.port}"):
        assert_error(httpx.get(server.url + "/models", headers={"host": host}), 400, "invalid_host")
    with socket.create_connection((server.host, server.port), timeout=10) as sock:  # HTTP/1.0 without Host
        sock.sendall(b"GET /v1/models HTTP/1.0\r\n\r\n")
        assert sock.recv(100).startswith(b"HTTP/1.1 400")
    for host in (f"localhost:{server.port}", f"127.0.0.1:{server.port}", f"[::1]:{server.port}", "localhost"):
        assert httpx.get(server.url + "/models", headers={"host": host}).status_code == 200
    still_serves(server)


def test_beyond_loopback_needs_a_key(sampler) -> None:
    from gemlab.openai_endpoint import BackgroundServer, create_app

    with pytest.raises(ValueError, match="API key"):
        BackgroundServer(create_app(sampler, model_name=MODEL), host="0.0.0.0")


@pytest.mark.parametrize(
    "body",
    [
        b'{"model": "M", "messages": [{"role": "user", "content": "\\ud800"}]}',
        b'{"model": "M", "messages": [{"role": "user", "content": "ok \\udfff ok"}]}',
        b'{"model": "M", "messages": [{"role": "user", "content": [{"type": "text", "text": "\\ud83d"}]}]}',
        b'{"model": "M", "messages": [{"role": "user", "content": "\xff\xfe not utf-8"}]}',
    ],
    ids=["lone-high-surrogate", "lone-low-surrogate", "surrogate-in-a-part", "invalid-utf8-bytes"],
)
def test_undecodable_text_is_a_400(server, body: bytes) -> None:
    body = body.replace(b'"M"', json.dumps(MODEL).encode())
    assert_error(httpx.post(server.url + "/chat/completions", content=body, headers=JSON), 400)
    still_serves(server)


@pytest.mark.parametrize("length", [b"abc", b"-5", b"9" * 23])
def test_a_malformed_content_length_is_a_400(server, length: bytes) -> None:
    # refused by uvicorn itself (plain text)
    with socket.create_connection((server.host, server.port), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: " + length + b"\r\n\r\n{}"
        )
        assert sock.recv(100).startswith(b"HTTP/1.1 400")
    still_serves(server)


@pytest.mark.parametrize(
    "body",
    [b"{not json", b'{"model": "x", "messages": [', b"[1, 2, 3]", b"null", b"[" * 100_000 + b"]" * 100_000, b""],
    ids=["not-json", "truncated", "array", "null", "nested-100k-deep", "empty"],
)
def test_malformed_json_is_a_400(server, body: bytes) -> None:
    assert_error(httpx.post(server.url + "/chat/completions", content=body, headers=JSON), 400)
    still_serves(server)


def wait_until(condition: Callable[[], bool], seconds: float = 120) -> bool:
    """Poll ``condition`` until it holds or ``seconds`` pass (generous: a loaded CI machine is slow)."""
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


def test_too_many_concurrent_requests_get_a_clear_busy_answer(sampler) -> None:
    gated = GatedSampler(sampler)
    with serve(gated, max_concurrent=2) as server:
        limits = server.app.state.limits
        held = [threading.Thread(target=still_serves, args=(server,)) for _ in range(2)]
        for thread in held:
            thread.start()
        assert wait_until(lambda: limits.in_flight == 2), "the two held requests never both reached the sampler"
        busy = httpx.post(server.url + "/chat/completions", json={"model": MODEL, "messages": HI})
        error = assert_error(busy, 503, "server_busy")
        assert busy.headers["retry-after"] == "1" and error["type"] == "server_error"
        assert httpx.get(server.url.removesuffix("/v1") + "/health").status_code == 200
        gated.gate.set()
        for thread in held:
            thread.join(timeout=60)
        # the guard counts a request out after its last byte is sent, which a client can read first
        assert wait_until(lambda: limits.in_flight == 0), f"{limits.in_flight} requests still counted in flight"
        still_serves(server)


def test_the_openai_client_retries_a_busy_answer_until_served(sampler) -> None:
    gated = GatedSampler(sampler)
    with serve(gated, max_concurrent=1) as server:
        first = threading.Thread(target=still_serves, args=(server,))
        first.start()
        assert wait_until(lambda: server.app.state.limits.in_flight >= 1), "the first request never reached the sampler"
        threading.Timer(0.5, gated.gate.set).start()  # the running request finishes during the client's back-off
        client = openai.OpenAI(base_url=server.url, api_key="x", max_retries=5)
        assert client.chat.completions.create(model=MODEL, messages=HI, max_tokens=3).choices
        first.join(timeout=60)


def test_clients_that_leave_mid_upload_or_mid_sampling_leave_the_server_healthy(sampler) -> None:
    gated = GatedSampler(sampler)
    with serve(gated) as server:
        limits = server.app.state.limits
        body = json.dumps({"model": MODEL, "messages": HI, "max_tokens": 3}).encode()
        head = (
            "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
            f"application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        with socket.create_connection((server.host, server.port)) as sock:
            sock.sendall(head + body[:10])  # leaves mid-body
        for _ in range(3):
            with socket.create_connection((server.host, server.port)) as sock:
                sock.sendall(head + body)  # leaves while its sample is held
        assert wait_until(lambda: limits.in_flight == 3)
        gated.gate.set()
        assert wait_until(lambda: limits.in_flight == 0)  # the abandoned requests finish
        still_serves(server)


def test_the_command_refuses_to_bind_beyond_loopback_without_a_key() -> None:
    env = {k: v for k, v in os.environ.items() if k != "GEMLAB_SERVE_API_KEY"}
    command = [sys.executable, "-m", "gemlab.openai_endpoint", "--model", MODEL, "--host", "0.0.0.0"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, check=False)
    assert result.returncode == 2 and result.stderr.strip().count("\n") == 0 and "--api-key" in result.stderr
