"""The tinker-atropos loop: an Atropos environment collects scored groups through atroposlib's
``ManagedServer`` against gemlab's endpoint (``/generate``), gemlab trains on them, and the endpoint
serves the new weights, at most ``max_staleness`` optimizer steps behind the learner.

A ``ScoredDataGroup`` holds, per sequence, its tokens, a mask that is -100 wherever the model did
not write (prompts, the environment's replies), the sampler's logprob of every token and one score.
Each run of written tokens is one turn: ``group_episodes`` turns a sequence into a gemlab
``Episode`` of ``Transition``s (the tokens before the turn, the turn's tokens and logprobs; the
score as the last turn's reward), so a step is gemlab's own ``step.train_step`` with
``EnvSampling`` as where its batch comes from (GRPO over each group's scores, as tinker-atropos
trains; the importance-sampling ratio corrects for the lag). Sampling ahead reuses
``sampling_ahead.AsyncRollouts``: the batch for step ``j`` is collected while earlier steps train,
by weights of version ``j - max_staleness`` or newer.

atroposlib is needed only to run an environment (``pip install atroposlib``); this module imports
none of it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gemlab.config import Config
from gemlab.episodes import Episode, RolloutBatch, Transition
from gemlab.openai_endpoint.completions import SamplerSlot
from gemlab.sampling_ahead import AsyncRollouts
from gemlab.step import stamp_version, train_step

MASKED = -100  # atroposlib's mask value for tokens the model did not write


def turns(mask: Sequence[int]) -> list[tuple[int, int]]:
    """The ``[start, end)`` spans of consecutive positions the model wrote (mask not -100)."""
    spans: list[tuple[int, int]] = []
    start = None
    for i, value in enumerate([*mask, MASKED]):
        if value != MASKED and start is None:
            start = i
        elif value == MASKED and start is not None:
            spans.append((start, i))
            start = None
    return spans


def group_episodes(group: Mapping[str, Any], index: int) -> list[Episode]:
    """The sequences of one Atropos ``ScoredDataGroup`` as episodes of group ``index``."""
    logprobs = group.get("inference_logprobs")
    if not logprobs:
        raise ValueError("the scored group has no inference_logprobs: collect it through atroposlib's ManagedServer")
    sequences = list(zip(group["tokens"], group["masks"], logprobs, group["scores"], strict=True))
    episodes: list[Episode] = []
    for tokens, mask, token_logprobs, score in sequences:
        if not len(tokens) == len(mask) == len(token_logprobs):
            raise ValueError(
                f"a sequence has {len(tokens)} tokens, {len(mask)} mask entries and {len(token_logprobs)} logprobs"
            )
        spans = [(a, b) for a, b in turns(mask) if a > 0]  # a datum needs a prompt token before the turn
        transitions = [
            Transition(
                obs_tokens=list(tokens[:a]),
                act_tokens=list(tokens[a:b]),
                act_logprobs=[float(x) for x in token_logprobs[a:b]],
                reward=0.0,
                done=False,
            )
            for a, b in spans
        ]
        if transitions:
            transitions[-1].reward, transitions[-1].done = float(score), True
            episodes.append(Episode(transitions=transitions, env_index=len(episodes), group=(index, 0)))
    return episodes


async def collect(env: Any, index: int, groups: int) -> RolloutBatch:
    """Batch ``index``: ``groups`` scored groups from the environment's own ``get_next_item`` and
    ``collect_trajectories``; a group the environment drops (``None``) is counted, not trained on."""
    episodes: list[Episode] = []
    dropped = 0
    for g in range(groups):
        item = await env.get_next_item()
        result, _backlog = await env.collect_trajectories(item)
        for group in result if isinstance(result, list) else [result]:
            if group is None:
                dropped += 1
                continue
            for episode in group_episodes(group, g):
                episode.group = (index, g)
                episodes.append(episode)
    return RolloutBatch(episodes=episodes, num_dropped=dropped)


@dataclass(frozen=True)
class Weights:
    """A sampling client and its version (optimizer steps in it), as the endpoint serves them."""

    client: Any
    version: int


class EnvSampling:
    """Where a step's batch comes from in the tinker-atropos loop: an Atropos environment collecting
    through the endpoint behind ``slot``, which serves weights of version ``step`` (inline) or of at
    least ``step - max_staleness`` (ahead of the learner, ``sampling_ahead.AsyncRollouts``). Each
    snapshot is asked for right after the update its version counts (``weights_updated``)."""

    def __init__(
        self, env: Any, training_client: Any, slot: SamplerSlot, *, groups: int, max_staleness: int, clock: float
    ) -> None:
        self.env, self.training_client, self.slot, self.groups, self.clock = env, training_client, slot, groups, clock
        self.max_staleness = max_staleness
        self._latest: asyncio.Task[Weights] | None = None
        self._ahead: AsyncRollouts | None = None

    def _snapshot(self, version: int) -> asyncio.Task[Weights]:
        # asked now: after exactly `version` updates
        future = self.training_client.save_weights_and_get_sampling_client()

        async def weights() -> Weights:
            return Weights(await future, version)

        self._latest = asyncio.ensure_future(weights())
        return self._latest

    async def _collect(self, index: int, served: Weights) -> RolloutBatch:
        self.slot.set(served.client, served.version)
        return await collect(self.env, index, self.groups)

    async def batch_for(self, step: int) -> tuple[RolloutBatch, dict[str, float]]:
        """The batch for ``step`` and when it was sampled."""
        if self.max_staleness and self._ahead is None:
            self._ahead = AsyncRollouts(self._collect, max_staleness=self.max_staleness, first_step=step)
            self._ahead.publish(asyncio.shield(self._snapshot(step)), step)
        if self._ahead is not None:
            ready, _ = await self._ahead.take(step)
            return ready.batch, {
                "time/sample_start": ready.started - self.clock,
                "time/sample_end": ready.finished - self.clock,
            }
        start = time.time()
        served = await self._latest if self._latest is not None else None
        if served is None or served.version != step:  # the first step: no snapshot yet
            served = await self._snapshot(step)
        batch = await self._collect(step, served)
        stamp_version(batch, step)
        return batch, {"time/sample_start": start - self.clock, "time/sample_end": time.time() - self.clock}

    def weights_updated(self, version: int) -> None:
        """Snapshot the new weights now; a collector running ahead gets them at once."""
        snapshot = self._snapshot(version)
        if self._ahead is not None:  # shielded: closing the collector must not cancel the snapshot served last
            self._ahead.publish(asyncio.shield(snapshot), version)

    async def close(self) -> None:
        """Stop collecting once the group in flight is complete, then serve the newest weights."""
        if self._ahead is not None:
            await self._ahead.close()
            self._ahead = None
        if self._latest is not None:
            newest = await self._latest
            self.slot.set(newest.client, newest.version)


async def train(
    env: Any,
    training_client: Any,
    slot: SamplerSlot,
    config: Config,
    *,
    steps: int,
    groups_per_step: int,
    first_step: int = 0,
    on_step: Callable[[dict[str, float]], None] | None = None,
) -> list[dict[str, float]]:
    """``steps`` steps of the tinker-atropos loop (``gemlab.step.train_step`` on the environment's
    groups); returns one metrics row per step, and leaves the endpoint serving the trained weights.

    Before step ``j`` samples, the endpoint behind ``slot`` serves weights of version at least
    ``j - config.max_staleness`` (version ``j`` exactly when ``max_staleness`` is 0, GEM's
    synchronous loop). Advantages, loss and learning rate come from ``config``
    (``advantage="grpo"`` compares the sequences of a group, as tinker-atropos does)."""
    clock = time.time()
    sampling = EnvSampling(
        env, training_client, slot, groups=groups_per_step, max_staleness=config.max_staleness, clock=clock
    )
    rows = []
    try:
        for step in range(first_step, first_step + steps):
            result = await train_step(training_client, sampling, config, step, clock=clock)
            rows.append(result.metrics)
            if on_step is not None:
                on_step(result.metrics)
    finally:
        await sampling.close()
    return rows
