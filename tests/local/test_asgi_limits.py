"""The limits both servers hold before any route runs (tinker_emulator/asgi_limits.py): a request head
over the cap is answered 431 with httptools and with h11, a compressed body is refused as it
expands past the cap, and deep JSON is a ValueError, never a RecursionError."""

from __future__ import annotations

import gzip
import socket
import threading
import time
import tracemalloc
from collections.abc import Iterator

import pytest
import uvicorn
import zstandard
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from tinker_emulator import asgi_limits

CAP = 8 * 1024


async def hello(scope: dict, receive, send) -> None:  # noqa: ANN001
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"hello"})


@pytest.fixture(params=[HttpToolsProtocol, H11Protocol], ids=["httptools", "h11"])
def port(request: pytest.FixtureRequest) -> Iterator[int]:
    """A uvicorn server on loopback with the head limits, on the parser ``request.param``."""
    options = asgi_limits.uvicorn_options(30.0, CAP, b'{"error": "head too large"}')
    options["http"] = asgi_limits.limited_protocol(30.0, CAP, b'{"error": "head too large"}', base=request.param)
    server = uvicorn.Server(
        uvicorn.Config(hello, host="127.0.0.1", port=0, log_level="error", lifespan="off", **options)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the test server did not start"
        time.sleep(0.01)
    yield server.servers[0].sockets[0].getsockname()[1]
    server.should_exit = True
    thread.join(timeout=30)


def exchange(port: int, head: bytes, chunk: int = 64 * 1024) -> bytes:
    """Send ``head`` in pieces (stopping when the server closes), then read the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        try:
            for start in range(0, len(head), chunk):
                sock.sendall(head[start : start + chunk])
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused midway: the answer is already waiting
        answer = b""
        try:
            while piece := sock.recv(65536):
                answer += piece
        except ConnectionResetError:
            pass
        return answer


def test_a_head_over_the_cap_is_431_and_one_under_it_is_served(port: int) -> None:
    big = b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (4 * 2**20) + b"\r\n\r\n"
    answer = exchange(port, big)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert answer.endswith(b'{"error": "head too large"}')
    many = b"GET / HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(5000)) + b"\r\n"
    assert len(many) > CAP
    assert exchange(port, many).startswith(b"HTTP/1.1 431 ")
    small = b"GET / HTTP/1.1\r\nHost: x\r\nX-Fine: " + b"a" * (CAP // 2) + b"\r\nConnection: close\r\n\r\n"
    answer = exchange(port, small)
    assert answer.startswith(b"HTTP/1.1 200 ") and b"hello" in answer, answer[:200]


def test_a_small_head_followed_by_a_large_body_in_one_read_is_not_refused(port: int) -> None:
    body = b"x" * (4 * CAP)
    request = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body
    answer = exchange(port, request, chunk=len(request))
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]


@pytest.mark.parametrize("encoding", ["zstd", "gzip"])
def test_a_compression_bomb_is_refused_as_it_expands(encoding: str) -> None:
    plain = bytes(64 * 2**20)  # 64 MiB of zeros
    packed = zstandard.ZstdCompressor().compress(plain) if encoding == "zstd" else gzip.compress(plain)
    del plain
    tracemalloc.start()
    try:
        with pytest.raises(asgi_limits.TooLarge, match="expands past the server's limit of 1048576 bytes"):
            asgi_limits.decompress(packed, encoding, 2**20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20, f"{peak} bytes allocated to refuse it"  # not the 64 MiB it expands to


@pytest.mark.parametrize("encoding", ["zstd", "gzip", ""])
def test_a_body_within_the_cap_comes_back_whole(encoding: str) -> None:
    plain = bytes(range(256)) * 20_000
    packed = {"zstd": zstandard.ZstdCompressor().compress, "gzip": gzip.compress, "": bytes}[encoding](plain)
    assert asgi_limits.decompress(packed, encoding, len(plain)) == plain


def test_a_corrupt_or_unknown_encoding_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="not valid zstd"):
        asgi_limits.decompress(b"\x28\xb5\x2f\xfd" + b"garbage" * 10, "zstd", 2**20)
    with pytest.raises(ValueError, match="not valid gzip"):
        asgi_limits.decompress(b"\x1f\x8b" + b"garbage" * 10, "gzip", 2**20)
    with pytest.raises(ValueError, match="not valid gzip"):
        asgi_limits.decompress(gzip.compress(b"x" * 1000)[:-12], "gzip", 2**20)
    with pytest.raises(ValueError, match="'br' is not served"):
        asgi_limits.decompress(b"x", "br", 2**20)


def test_json_nested_too_deep_is_a_value_error_before_parsing() -> None:
    with pytest.raises(ValueError, match="nests deeper than 64 levels"):
        asgi_limits.json_loads(b"[" * 5000 + b"]" * 5000)
    with pytest.raises(ValueError, match="nests deeper than 64 levels"):
        asgi_limits.json_loads('{"a": ' * 100_000)
    assert asgi_limits.json_loads(b'{"a": "[[[[\\"{{", "b": [[1]]}') == {"a": '[[[["{{', "b": [[1]]}
