"""Training that does not block the notebook: steps awaited from the kernel's own event loop.

The ``Trainer`` computes on its own loop thread; the lab awaits each step (``trainer.astep()``)
from the kernel's loop, so the kernel stays free to handle button clicks and to sync widgets
between steps (display updates from other threads are unreliable in ipykernel 7).
"""

from __future__ import annotations

import statistics
from collections.abc import Awaitable, Callable

from gemlab.trainer import Trainer


def eta_seconds(step_times: list[float], remaining: int) -> float | None:
    """Time left, from the steps timed so far (the first one, which loads and warms up, left out
    once there are others); ``None`` before the first step."""
    if not step_times:
        return None
    timed = step_times[1:] if len(step_times) > 1 else step_times
    return statistics.median(timed) * remaining


def format_seconds(seconds: float) -> str:
    """``95`` -> ``'1 min 35 s'``."""
    seconds = round(seconds)
    return f"{seconds // 60} min {seconds % 60:02d} s" if seconds >= 60 else f"{seconds} s"


async def train_until(
    trainer: Trainer,
    last_step: int,
    *,
    stop_requested: Callable[[], bool],
    on_step: Callable[[dict[str, float]], Awaitable[None]],
) -> str:
    """Step until ``last_step`` or a stop request (checked between steps), then checkpoint.

    Returns ``"finished"`` or ``"stopped"``. The checkpoint and ``metrics.jsonl`` agree, so the
    run folder resumes where it ended (``Trainer`` on the same ``run_name``).
    """
    while trainer.step_index < last_step and not stop_requested():
        # ALGO LOGIC: one policy-gradient step, computed off the kernel's loop
        metrics = await trainer.astep()
        await on_step(metrics)
    await trainer.asave_checkpoint()
    return "finished" if trainer.step_index >= last_step else "stopped"
