"""The sampling gate: one client's concurrent sampling requests start together, as one batch.

A client sends a turn's requests at once (one per live episode), but over HTTP they reach the
server spread over tens of milliseconds (the SDK's own work per request, a loaded machine).
Started as they come, they would fall into several batches of the local backend's sampler, and
each batch costs a whole generation. So each session's requests wait here until its burst is
complete: at once when as many are waiting as in its largest recent burst, else when none has
come for ``quiet_s`` (fewer this time: some episodes ended), and at the latest ``max_wait_s``
after the first. Different sessions' requests still share a batch whenever the sampler is busy
(the backend's batcher collects what arrives meanwhile).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class _Burst:
    first_at: float
    calls: list[tuple[Callable[[], Any], asyncio.Future[Any]]] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None


class SampleGate:
    """Holds each session's sampling calls until its burst is complete, then starts them in one
    event-loop turn."""

    def __init__(self, quiet_s: float = 0.025, max_wait_s: float = 0.25, memory: int = 8):
        self.quiet_s = quiet_s
        self.max_wait_s = max_wait_s
        self.memory = memory
        self._bursts: dict[Hashable, _Burst] = {}
        self._sizes: dict[Hashable, deque[int]] = {}

    async def run(self, session: Hashable, call: Callable[[], Any]) -> Any:
        """``call()`` (which returns a local backend future) started with the rest of
        ``session``'s burst; its result."""
        loop = asyncio.get_running_loop()
        burst = self._bursts.get(session)
        if burst is None:
            burst = self._bursts[session] = _Burst(first_at=loop.time())
        started: asyncio.Future[Any] = loop.create_future()
        burst.calls.append((call, started))
        if burst.timer is not None:
            burst.timer.cancel()
        if len(burst.calls) >= self.expected(session) > 0:
            self._release(session)
        else:
            burst.timer = loop.call_at(min(loop.time() + self.quiet_s, burst.first_at + self.max_wait_s), self._release, session)
        return await asyncio.wrap_future((await started).future())

    def expected(self, session: Hashable) -> int:
        """The size of ``session``'s largest recent burst (0 before its first)."""
        return max(self._sizes.get(session, ()), default=0)

    def keep(self, sessions: Iterable[Hashable]) -> None:
        """Forget every session not in ``sessions`` (those the server has closed)."""
        alive = set(sessions)
        self._sizes = {k: v for k, v in self._sizes.items() if k in alive or k in self._bursts}

    def _release(self, session: Hashable) -> None:
        burst = self._bursts.pop(session)
        if burst.timer is not None:
            burst.timer.cancel()
        self._sizes.setdefault(session, deque(maxlen=self.memory)).append(len(burst.calls))
        for call, started in burst.calls:
            if started.done():  # its request was cancelled meanwhile
                continue
            try:
                started.set_result(call())
            except Exception as exc:  # a bad request fails alone
                started.set_exception(exc)
