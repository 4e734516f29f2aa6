"""RedrawBudget: live charts redraw only as often as keeps them under their share of wall time."""

from __future__ import annotations

import pytest

from gemlab.notebook import redraw
from gemlab.notebook.redraw import RedrawBudget


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(redraw.time, "monotonic", fake)
    return fake


def test_a_slow_redraw_buys_a_long_wait(clock: Clock) -> None:
    budget = RedrawBudget(share=0.05)
    assert budget.due()  # the first redraw at once
    with budget.drawing():
        clock.now += 2.0  # a 2-second redraw (a busy machine)
    clock.now += 37.0
    assert not budget.due()  # 2 s may be 5% of 40 s: 38 s must pass after it ends
    assert budget.due(final=True)  # the last step is always drawn
    clock.now += 1.0
    assert budget.due()
    assert budget.overhead() == pytest.approx(2.0 / 40.0)


def test_a_chart_redrawn_whenever_due_stays_within_its_share(clock: Clock) -> None:
    budget = RedrawBudget(share=0.05)
    for _ in range(500):  # 500 one-second steps, each followed by a redraw of 0.5 s when due
        clock.now += 1.0
        if budget.due():
            with budget.drawing():
                clock.now += 0.5
    assert 0 < budget.overhead() <= 0.05 + 0.5 / 500  # one redraw may fall in the last stretch
    assert budget.redraws <= 50  # every 10.5 s: 0.5 s of drawing per 10 steps


def test_a_share_outside_0_1_is_refused() -> None:
    with pytest.raises(ValueError, match="share must be in"):
        RedrawBudget(share=0)
