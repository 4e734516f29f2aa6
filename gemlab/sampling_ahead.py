"""Sampling ahead of the learner, with bounded staleness (``max_staleness = k``): one of the two
places a step's sampling can run (the other is ``step.Inline``, in the step itself).

The synchronous loop alternates: sample a batch with the current weights, train on it, repeat,
so the sampler idles while the learner trains and the other way round. Here a producer task
collects the batch for step ``j`` while earlier steps train, with the newest weights published
so far, but only once weights of version ``j - k`` or newer exist (version = optimizer steps
taken). So a batch is at most ``k`` steps old when it is trained on; ``take`` also checks it from
the versions each transition records, and handles any batch older than that (which the gating
above makes rare: only a learner that jumps steps meets one) as ``stale_batches`` says: ``drop``
it and take the next, or ``resample`` it, replaying the same games with the newest weights, as
tinker-cookbook requeues stale groups.
The importance-sampling ratio of the loss, ``exp(learner - sampler logprob)``, corrects for the
lag (``ppo``/``cispo`` also clip it). This is the scheme of tinker-atropos / PipelineRL's
bounded off-policyness, reduced to one sampler and one learner.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from gemlab.config import STALE_BATCHES
from gemlab.episodes import RolloutBatch
from gemlab.step import Players, play_batch, stamp_version


@dataclass
class ReadyBatch:
    """A collected batch, the weights version that sampled it, and when it was collected."""

    index: int
    batch: RolloutBatch
    version: int
    started: float
    finished: float


class AsyncRollouts:
    """Collects batch ``j`` (for step ``j``) ahead of the learner with the newest published
    weights of version ``>= j - max_staleness``; ``take(step)`` hands it over.

    ``collect(index, sampling_client)`` plays one batch. Call ``publish`` with a future (or
    awaitable) of a sampling client after every optimizer step, ``take`` once per step, and
    ``close`` at the end.
    """

    def __init__(
        self,
        collect: Callable[[int, Any], Awaitable[RolloutBatch]],
        *,
        max_staleness: int,
        first_step: int,
        stale_batches: str = "drop",
    ) -> None:
        if max_staleness < 1:
            raise ValueError(f"max_staleness must be at least 1 for asynchronous rollouts, got {max_staleness}")
        if stale_batches not in STALE_BATCHES:
            raise ValueError(f"stale_batches must be one of {', '.join(STALE_BATCHES)}, got {stale_batches!r}")
        self.max_staleness = max_staleness
        self.stale_batches = stale_batches
        self._collect = collect
        self._next_index = first_step
        self._latest: tuple[Any, int] | None = None
        self._published = asyncio.Condition()
        self._ready: asyncio.Queue[ReadyBatch | BaseException] = asyncio.Queue()
        self._tasks: set[asyncio.Task] = set()
        self._producer: asyncio.Task | None = None
        self._closing = False
        self.dropped = 0
        self.resampled = 0

    def publish(self, sampling_client: Awaitable[Any], version: int) -> None:
        """Weights ``version`` become available once ``sampling_client`` resolves (the learner does not wait)."""
        task = asyncio.ensure_future(self._publish(sampling_client, version))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if self._producer is None:
            self._producer = asyncio.ensure_future(self._produce())

    async def take(self, step: int) -> tuple[ReadyBatch, int]:
        """The next batch at most ``max_staleness`` versions behind ``step``, and how many older
        ones were dropped (or re-sampled with fresh weights) to get it."""
        stale = 0
        while True:
            item = await self._ready.get()
            if isinstance(item, BaseException):
                raise item
            if step - item.version <= self.max_staleness:
                return item, stale
            stale += 1
            if self.stale_batches == "resample":
                self.resampled += 1
                return await self._resample(item.index, step), stale
            self.dropped += 1

    async def _resample(self, index: int, step: int) -> ReadyBatch:
        """Batch ``index`` played again by weights at most ``max_staleness`` versions behind ``step``."""
        async with self._published:
            await self._published.wait_for(
                lambda: self._latest is not None and self._latest[1] >= step - self.max_staleness
            )
            assert self._latest is not None  # what wait_for waited for
            client, version = self._latest
        started = time.time()
        batch = await self._collect(index, client)
        stamp_version(batch, version)
        return ReadyBatch(index, batch, version, started, time.time())

    async def close(self) -> None:
        """Stop collecting once the batch being played is complete (so none of its requests is
        left half-sent to the sampler), and forget weights still being published."""
        async with self._published:
            self._closing = True
            self._published.notify_all()
        if self._producer is not None:
            await asyncio.gather(self._producer, return_exceptions=True)
            self._producer = None
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _publish(self, sampling_client: Awaitable[Any], version: int) -> None:
        client = await sampling_client
        async with self._published:
            if self._latest is None or version > self._latest[1]:
                self._latest = (client, version)
            self._published.notify_all()

    async def _produce(self) -> None:
        try:
            while not self._closing:
                index = self._next_index
                async with self._published:
                    await self._published.wait_for(
                        lambda: self._closing
                        or (self._latest is not None and self._latest[1] >= index - self.max_staleness)  # noqa: B023
                    )
                    if self._closing:
                        return
                    assert self._latest is not None  # what wait_for waited for
                    client, version = self._latest
                started = time.time()
                batch = await self._collect(index, client)
                stamp_version(batch, version)
                self._ready.put_nowait(ReadyBatch(index, batch, version, started, time.time()))
                self._next_index = index + 1
        except asyncio.CancelledError:
            raise
        except BaseException as error:  # handed to the learner at its next take()
            self._ready.put_nowait(error)


class AheadSampler:
    """Sampling ahead of the learner (``AsyncRollouts``), started on the first ``batch_for``."""

    def __init__(
        self, training_client: Any, players: Players, clock: float, max_staleness: int, stale_batches: str = "drop"
    ) -> None:
        self.training_client, self.players, self.clock, self.max_staleness = (
            training_client,
            players,
            clock,
            max_staleness,
        )
        self.stale_batches = stale_batches
        self._rollouts: AsyncRollouts | None = None

    async def batch_for(self, step: int) -> tuple[RolloutBatch, dict[str, float]]:
        """The batch for ``step`` from those collected ahead, when it was sampled, how long the
        learner waited for it and how many stale batches were dropped or re-sampled."""
        if self._rollouts is None:
            self._rollouts = AsyncRollouts(
                functools.partial(play_batch, self.players),
                max_staleness=self.max_staleness,
                first_step=step,
                stale_batches=self.stale_batches,
            )
            self.weights_updated(step)
        waited = time.time()
        ready, dropped = await self._rollouts.take(step)
        return ready.batch, {
            "time/sample_start": ready.started - self.clock,
            "time/sample_end": ready.finished - self.clock,
            "time/wait": time.time() - waited,
            f"async/batches_{'resampled' if self.stale_batches == 'resample' else 'dropped'}": float(dropped),
        }

    def weights_updated(self, version: int) -> None:
        """Hand the sampler the learner's new weights (the learner does not wait for them)."""
        if self._rollouts is not None:
            self._rollouts.publish(self.training_client.save_weights_and_get_sampling_client(), version=version)

    async def close(self) -> None:
        """Stop collecting once the batch being played is complete."""
        if self._rollouts is not None:
            await self._rollouts.close()
            self._rollouts = None
