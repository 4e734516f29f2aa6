"""A deadline on request heads. uvicorn times a connection only while it idles after a response
(keep-alive); a client that connects and sends nothing, or sends a request's head a byte at a time
(slowloris), holds a connection for good. Here a connection is closed when a request's head has not
arrived whole within the deadline of the connection opening or of its first byte; the guard
(``guard.py``) then bounds the body the same way."""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.auto import AutoHTTPProtocol


def head_deadline_protocol(timeout_s: float) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol (httptools or h11, as uvicorn picks) closing a connection whose
    request head takes longer than ``timeout_s`` seconds."""

    class HeadDeadline(AutoHTTPProtocol):  # type: ignore[valid-type, misc]
        _deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.cycle is None or self.cycle.response_complete:  # a head is still on its way
                if self._deadline is None:
                    self._arm()
            else:
                self._disarm()  # the head has arrived: the request runs

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._deadline = asyncio.get_running_loop().call_later(timeout_s, self._expired)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expired(self) -> None:
            self._deadline = None
            if not self.transport.is_closing():
                self.transport.close()

    return HeadDeadline
