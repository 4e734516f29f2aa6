"""When a live chart may redraw, so that drawing never costs training more than a set share of time.

A matplotlib figure of a few panels takes 0.2 s to draw on an idle laptop and 2 s on a busy one;
redrawn after every one-second step it took a third of the wall time (issue 21). ``RedrawBudget``
lets a chart redraw only once the time since its last redraw pays for it: after a redraw that took
``c`` seconds the next one waits ``c * (1 / share - 1)`` seconds, so redraws cost at most ``share``
of the wall time, whatever the machine. The last state is always drawn (``due(final=True)``).

    budget = RedrawBudget()
    for step in range(steps):
        row = trainer.step()
        if budget.due(final=step == steps - 1):
            with budget.drawing():
                redraw()
    print(f"redraws: {budget.redraws}, {budget.overhead():.1%} of wall time")
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

#: The share of wall time live charts may take (issue 21's target: 5% at full size).
REDRAW_SHARE = 0.05


class RedrawBudget:
    """Decides when to redraw (``due``) and measures what redrawing cost (``drawing``, ``overhead``)."""

    def __init__(self, share: float = REDRAW_SHARE) -> None:
        if not 0 < share <= 1:
            raise ValueError(f"share must be in (0, 1], got {share}")
        self.share = share
        self.started = time.monotonic()
        self.spent = 0.0  # seconds spent redrawing
        self.redraws = 0
        self._next = self.started  # the first call is due at once

    def due(self, *, final: bool = False) -> bool:
        """Whether to redraw now: the first time, the last time (``final``), and otherwise once the
        wait that the last redraw's cost bought is over."""
        return final or time.monotonic() >= self._next

    @contextmanager
    def drawing(self) -> Iterator[None]:
        """Time one redraw and schedule the next."""
        start = time.monotonic()
        try:
            yield
        finally:
            end = time.monotonic()
            cost = end - start
            self.spent += cost
            self.redraws += 1
            self._next = end + cost * (1 / self.share - 1)

    def overhead(self) -> float:
        """Seconds spent redrawing / wall seconds since this budget was made."""
        return self.spent / max(time.monotonic() - self.started, 1e-9)
