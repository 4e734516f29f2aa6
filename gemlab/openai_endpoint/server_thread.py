"""Run the endpoint on a background thread of this process (notebooks, tests, a trainer that
serves its own weights), with uvicorn, on loopback by default; ``python -m gemlab.openai_endpoint`` serves
the same way. Before the app sees a request, its head must arrive within ``HEAD_TIMEOUT_S`` and
fit ``asgi_limits.MAX_HEAD`` bytes (else 431)."""

from __future__ import annotations

import threading
import time
from typing import Any

import uvicorn

from gemlab.openai_endpoint.errors import head_too_large
from gemlab.openai_endpoint.guard import is_loopback
from tinker_emulator import asgi_limits

HEAD_TIMEOUT_S = 60.0  # a request's head must arrive within this long, else the connection is closed


class BackgroundServer:
    """``uvicorn`` serving ``app`` on a daemon thread; ``url`` is its ``/v1`` base URL.

    ``port=0`` picks a free port. Use as a context manager, or call ``stop()``. Beyond loopback
    the app must have an API key (``create_app(..., limits=Limits(api_key=...))``).
    """

    def __init__(self, app: Any, *, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning") -> None:
        limits = getattr(getattr(app, "state", None), "limits", None)
        if not is_loopback(host) and getattr(limits, "api_key", None) is None:
            raise ValueError(
                f"host={host!r} reaches beyond this machine: give the app an API key (Limits(api_key=...))"
            )
        limits = asgi_limits.uvicorn_options(HEAD_TIMEOUT_S, too_large_body=head_too_large())
        config = uvicorn.Config(
            app, host=host, port=port, log_level=log_level, access_log=False, lifespan="off", **limits
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="gemlab-serve", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the endpoint could not start on {host}:{port} (is the port taken?)")
            time.sleep(0.01)
        self.host, self.port = self._server.servers[0].sockets[0].getsockname()[:2]
        self.app = app

    @property
    def url(self) -> str:
        """Base URL for ``openai.OpenAI(base_url=...)``."""
        return f"http://{self.host}:{self.port}/v1"

    def stop(self) -> None:
        """Stop serving and wait for the thread to end."""
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def __enter__(self) -> BackgroundServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
