"""Training that does not block the notebook: steps awaited from the kernel's own event loop.

The ``Trainer`` computes on its private loop thread; the lab awaits each step from the kernel's
loop through ``asyncio.wrap_future``, so the kernel stays free to handle button clicks and to
sync widgets between steps (display updates from other threads are unreliable in ipykernel 7).
"""

from __future__ import annotations

import asyncio
import statistics
from typing import Any, Awaitable, Callable, Coroutine, TypeVar

from gemlab.training import Trainer

T = TypeVar("T")


async def on_trainer_loop(trainer: Trainer, coroutine: Coroutine[Any, Any, T]) -> T:
    """Await ``coroutine`` on the trainer's loop thread from another running loop."""
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, trainer._loop.loop))


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
        metrics = await on_trainer_loop(trainer, trainer.astep())
        await on_step(metrics)
    await asyncio.to_thread(trainer.save_checkpoint)
    return "finished" if trainer.step_index >= last_step else "stopped"
