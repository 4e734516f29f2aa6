"""Limits both of gemlab's HTTP servers hold before a request reaches any route, key check or
work: how long and how large a request's head may be, how far a compressed body may expand, and
how deeply a JSON body may nest. A leaf module: it imports nothing of gemlab, so the workshop
server (``tinker_emulator.workshop_server``) and the OpenAI endpoint (``gemlab.openai_endpoint``) share it.

- ``limited_protocol``: uvicorn's HTTP protocol (httptools or h11, whichever uvicorn picks) that
  closes a connection whose request head takes longer than a deadline (slowloris) and answers
  431 to a head larger than a cap, counted as its bytes arrive, before the parser holds more than
  the cap plus one read. ``uvicorn_options`` sets h11's own buffer limit above that cap, so the
  cap holds whichever parser runs.
- ``decompress``: a ``zstd`` or ``gzip`` body undone a bounded piece at a time, refused (413) as
  soon as it expands past a cap, never decoded whole first.
- ``request_target``: the request target as sent, so that an absolute-form URI naming another
  host can be refused (httptools drops its host before the app sees it).
- ``json_loads``: ``json.loads`` with nesting refused as a ``ValueError`` (no ``RecursionError``).
"""

from __future__ import annotations

import asyncio
import json
import re
import zlib
from collections.abc import Mapping
from typing import Any

import zstandard
from uvicorn.protocols.http.auto import AutoHTTPProtocol

MAX_HEAD = 64 * 1024  # bytes of a request line plus headers (nginx's default buffers hold 32 KiB)
PIECE = 1 << 20  # bytes of decompressed output produced at a time
MAX_JSON_DEPTH = 64  # nested arrays and objects in a JSON body
_END = b"\r\n\r\n"
TARGET = "gemlab.request_target"  # the scope key of the request target as sent (httptools)
_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')  # a JSON string, or a bracket


class TooLarge(ValueError):
    """A request (head, body, or body once decompressed) over the server's limit."""


def refusal(status: int, reason: str, body: bytes, content_type: str = "application/json") -> bytes:
    """A whole HTTP/1.1 response that closes the connection, written before any app runs."""
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


def limited_protocol(
    head_timeout_s: float,
    max_head: int = MAX_HEAD,
    too_large_body: bytes = b"",
    base: type[asyncio.Protocol] = AutoHTTPProtocol,
) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol (``base``: httptools' if installed, else h11's) closing a connection
    whose request head has not arrived whole within ``head_timeout_s`` of the connection opening
    (or of its first byte after a response), and answering 431 (``too_large_body``) to one whose
    head passes ``max_head`` bytes."""
    too_large = refusal(431, "Request Header Fields Too Large", too_large_body)

    class Limited(base):  # type: ignore[valid-type, misc]
        _deadline: asyncio.TimerHandle | None = None
        _head_bytes = 0  # bytes of the head now arriving
        _tail = b""  # its last 3 bytes: a head's end may straddle two reads

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            if self._head_pending() and not self._head_fits(data):
                self._disarm()
                if not self.transport.is_closing():
                    self.transport.write(too_large)
                    self.transport.close()
                return
            super().data_received(data)
            if self._head_pending():
                if self._deadline is None:
                    self._arm()
            else:  # the head has arrived: the request runs, and the next head is counted afresh
                self._disarm()
                self._head_bytes, self._tail = 0, b""

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def on_url(self, url: bytes) -> None:  # httptools only: keep the target as sent
            super().on_url(url)
            self.scope[TARGET] = self.url

        def _head_pending(self) -> bool:
            cycle = getattr(self, "cycle", None)
            return cycle is None or cycle.response_complete

        def _head_fits(self, data: bytes) -> bool:
            """Whether the head, with ``data`` added, still ends within ``max_head`` bytes (or
            has not reached it yet). Only the bytes up to the cap are searched."""
            room = max_head - self._head_bytes
            if _END in (self._tail + data[: room + len(_END)]):
                return True
            self._head_bytes += len(data)
            self._tail = (self._tail + data)[-(len(_END) - 1) :]
            return self._head_bytes <= max_head

        def _arm(self) -> None:
            self._deadline = asyncio.get_running_loop().call_later(head_timeout_s, self._expired)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expired(self) -> None:
            self._deadline = None
            if not self.transport.is_closing():
                self.transport.close()

    return Limited


def request_target(scope: Mapping[str, Any]) -> bytes:
    """The request target as the client sent it (``/path?q``, or ``http://host/path`` in absolute
    form): httptools keeps only the path in ``raw_path``, so ``limited_protocol`` notes it."""
    return scope.get(TARGET) or scope.get("raw_path") or b""


def uvicorn_options(head_timeout_s: float, max_head: int = MAX_HEAD, too_large_body: bytes = b"") -> dict[str, Any]:
    """``uvicorn.Config`` keywords that hold the head limits, with httptools or h11."""
    return {
        "http": limited_protocol(head_timeout_s, max_head, too_large_body),
        "h11_max_incomplete_event_size": max_head + PIECE,  # above the cap: ours answers first, with 431
    }


def decompress(body: bytes, encoding: str, limit: int) -> bytes:
    """``body`` with its ``Content-Encoding`` (``zstd``, ``gzip``, or none) undone, ``PIECE`` bytes
    at a time; ``TooLarge`` as soon as it passes ``limit`` bytes, ``ValueError`` when it is not
    valid in its encoding or names another."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return body
    out = bytearray()
    if encoding == "zstd":
        try:
            with zstandard.ZstdDecompressor().stream_reader(body) as reader:
                while piece := reader.read(PIECE):
                    _grow(out, piece, limit)
        except zstandard.ZstdError as exc:
            raise ValueError(f"the body is not valid zstd ({exc})") from None
    elif encoding in ("gzip", "x-gzip"):
        inflater = zlib.decompressobj(wbits=31)
        pending = body
        try:
            while pending and not inflater.eof:
                _grow(out, inflater.decompress(pending, PIECE), limit)
                pending = inflater.unconsumed_tail
        except zlib.error as exc:
            raise ValueError(f"the body is not valid gzip ({exc})") from None
        if not inflater.eof:
            raise ValueError("the body is not valid gzip (it ends early)")
    else:
        raise ValueError(f"Content-Encoding {encoding[:20]!r} is not served; send zstd, gzip or none")
    return bytes(out)


def _grow(out: bytearray, piece: bytes, limit: int) -> None:
    out += piece
    if len(out) > limit:
        raise TooLarge(f"the request body expands past the server's limit of {limit} bytes once decompressed")


def json_loads(raw: bytes | str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads(raw)``, with a ``ValueError`` naming the limit for anything nested deeper than
    ``max_depth`` (checked before parsing, so the parser never recurses that deep)."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    depth = 0
    for token in _TOKENS.finditer(text):  # strings are skipped whole
        if token[0] in ("[", "{"):
            depth += 1
            if depth > max_depth:
                raise ValueError(f"the JSON body nests deeper than {max_depth} levels")
        elif token[0] in ("]", "}"):
            depth -= 1
    return json.loads(text)
