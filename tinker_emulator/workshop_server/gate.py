"""The sampling gate: one client's concurrent sampling requests start together, as one batch.

A client sends a turn's requests at once (one per live episode), but over HTTP they reach the
server spread over milliseconds (the SDK's own work per request, a loaded machine). Started as
they come, they would fall into several batches of the local backend's sampler, and each batch
costs a whole generation. So each session's requests wait here until its burst is complete: at
once when its *turn* is as large as its largest recent turn, else when none has come for a quiet
time (fewer this time: some episodes ended), and at the latest ``max_wait_s`` after the first.

A turn is a session's requests that came less than ``turn_gap_s`` apart: a client sends its next
turn only after its last one's answers, which takes a generation and more, while the requests of
one turn come milliseconds apart. So a turn's size also counts the requests a quiet time let go
early, and a burst split in two (a request that came late) does not lower what the session waits
for next; ``memory`` turns are kept (a laptop-preset step has about 8), since waiting for one
request too many costs a quiet time, but one too few a whole generation. The quiet time is
``gap_factor`` times the 90th percentile of the recent gaps between a session's requests of one
turn, within ``[min_quiet_s, quiet_s]``: a client whose requests come 1 ms apart is not made to
wait 25 ms. Different sessions' requests still share a batch whenever the sampler is busy (the
backend's batcher collects what arrives meanwhile).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

GAPS = 32  # how many recent gaps between a session's requests set its quiet time


@dataclass
class _Session:
    """One session's gate: the requests waiting, its turn so far, its recent turn sizes and gaps."""

    sizes: deque[int]
    gaps: deque[float] = field(default_factory=lambda: deque(maxlen=GAPS))
    waiting: list[tuple[Callable[[], Any], asyncio.Future[Any]]] = field(default_factory=list)
    first_at: float = 0.0  # the first request waiting
    last_at: float = 0.0  # the latest request
    turn: int = 0  # requests in this turn
    timer: asyncio.TimerHandle | None = None


class SampleGate:
    """Holds each session's sampling calls until its burst is complete, then starts them in one
    event-loop turn."""

    def __init__(
        self,
        quiet_s: float = 0.025,
        max_wait_s: float = 0.25,
        memory: int = 64,
        min_quiet_s: float = 0.002,
        gap_factor: float = 2.0,
        turn_gap_s: float = 0.025,
    ):
        self.quiet_s = quiet_s
        self.max_wait_s = max_wait_s
        self.memory = memory
        self.min_quiet_s = min_quiet_s
        self.gap_factor = gap_factor
        self.turn_gap_s = turn_gap_s
        self._sessions: dict[Hashable, _Session] = {}

    async def run(self, session: Hashable, call: Callable[[], Any]) -> Any:
        """``call()`` (which returns a local backend future) started with the rest of
        ``session``'s burst; its result."""
        loop = asyncio.get_running_loop()
        now = time.monotonic()
        state = self._sessions.get(session)
        if state is None:
            state = self._sessions[session] = _Session(deque(maxlen=self.memory))
        elif not self._end_turn(state, now):
            state.gaps.append(now - state.last_at)
        if not state.waiting:
            state.first_at = now
        state.last_at = now
        state.turn += 1
        started: asyncio.Future[Any] = loop.create_future()
        state.waiting.append((call, started))
        if state.timer is not None:
            state.timer.cancel()
            state.timer = None
        if state.turn >= max(state.sizes, default=0) > 0:
            self._release(state)
        else:
            delay = min(self.quiet(session), state.first_at + self.max_wait_s - now)
            state.timer = loop.call_later(delay, self._release, state)
        return await asyncio.wrap_future((await started).future())

    def expected(self, session: Hashable) -> int:
        """The size of ``session``'s largest recent turn (0 before its first ended)."""
        state = self._sessions.get(session)
        if state is None:
            return 0
        self._end_turn(state, time.monotonic())
        return max(state.sizes, default=0)

    def quiet(self, session: Hashable) -> float:
        """How long ``session``'s burst waits for one more request: ``gap_factor`` times the 90th
        percentile of its recent gaps between requests of one turn, within ``[min_quiet_s, quiet_s]``."""
        state = self._sessions.get(session)
        if state is None or not state.gaps:
            return self.quiet_s
        gaps = sorted(state.gaps)
        return min(self.quiet_s, max(self.min_quiet_s, self.gap_factor * gaps[int(0.9 * (len(gaps) - 1))]))

    def keep(self, sessions: Iterable[Hashable]) -> None:
        """Forget every session not in ``sessions`` (those the server has closed)."""
        alive = set(sessions)
        self._sessions = {k: v for k, v in self._sessions.items() if k in alive or v.waiting}

    def _end_turn(self, state: _Session, now: float) -> bool:
        """End ``state``'s turn (remember its size) if its last request came over ``turn_gap_s``
        ago and none waits; whether it has no turn going now."""
        if state.turn and not state.waiting and now - state.last_at > self.turn_gap_s:
            state.sizes.append(state.turn)
            state.turn = 0
        return state.turn == 0

    def _release(self, state: _Session) -> None:
        if state.timer is not None:
            state.timer.cancel()
            state.timer = None
        waiting, state.waiting = state.waiting, []
        for call, started in waiting:
            if started.done():  # its request was cancelled meanwhile
                continue
            try:
                started.set_result(call())
            except Exception as exc:  # a bad request fails alone
                started.set_exception(exc)
