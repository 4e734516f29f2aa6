"""The tinker-atropos loop: an Atropos environment collects scored groups through atroposlib's
``ManagedServer`` against gemlab's endpoint (``/generate``), gemlab trains on them, and the endpoint
serves the new weights, at most ``max_staleness`` optimizer steps behind the learner.

A ``ScoredDataGroup`` holds, per sequence, its tokens, a mask that is -100 wherever the model did
not write (prompts, the environment's replies), the sampler's logprob of every token and one score.
Each run of written tokens is one turn: ``group_episodes`` turns a sequence into a gemlab
``Episode`` of ``Transition``s (the tokens before the turn, the turn's tokens and logprobs; the
score as the last turn's reward), so the update is gemlab's own ``step.prepare`` and ``step.update``
(GRPO over each group's scores, as tinker-atropos trains; the importance-sampling ratio corrects for
the lag). Sampling ahead reuses ``sampling_ahead.AsyncRollouts``: the batch for step ``j`` is
collected while earlier steps train, by weights of version ``j - max_staleness`` or newer.

atroposlib is needed only to run an environment (``pip install atroposlib``); this module imports
none of it.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gemlab.config import Config
from gemlab.episodes import Episode, RolloutBatch, Transition
from gemlab.sampling_ahead import AsyncRollouts, staleness_metrics
from gemlab.serve.completions import SamplerSlot
from gemlab.step import prepare, stamp_version, step_metrics, update

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
    episodes = []
    for tokens, mask, token_logprobs, score in sequences:
        if not len(tokens) == len(mask) == len(token_logprobs):
            raise ValueError(f"a sequence has {len(tokens)} tokens, {len(mask)} mask entries and {len(token_logprobs)} logprobs")
        spans = [(a, b) for a, b in turns(mask) if a > 0]  # a datum needs a prompt token before the turn
        transitions = [
            Transition(obs_tokens=list(tokens[:a]), act_tokens=list(tokens[a:b]), act_logprobs=[float(x) for x in token_logprobs[a:b]], reward=0.0, done=False)
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
    """``steps`` steps of the tinker-atropos loop; returns one metrics row per step.

    Before step ``j`` samples, the endpoint behind ``slot`` serves weights of version at least
    ``j - config.max_staleness`` (version ``j`` exactly when ``max_staleness`` is 0, GEM's
    synchronous loop). Advantages, loss and learning rate come from ``config``
    (``advantage="grpo"`` compares the sequences of a group, as tinker-atropos does)."""

    def weights(version: int) -> Awaitable[Weights]:
        snapshot = training_client.save_weights_and_get_sampling_client()  # asked now: after exactly `version` updates

        async def served() -> Weights:
            return Weights(await snapshot, version)

        return served()

    async def collect_with(index: int, served: Weights) -> RolloutBatch:
        slot.set(served.client, served.version)
        return await collect(env, index, groups_per_step)

    ahead = AsyncRollouts(collect_with, max_staleness=config.max_staleness, first_step=first_step) if config.max_staleness else None
    rows = []
    clock = time.time()
    try:
        if ahead is not None:
            ahead.publish(weights(first_step), first_step)
        for step in range(first_step, first_step + steps):
            start = time.time()
            if ahead is None:
                batch = await collect_with(step, await weights(step))
                stamp_version(batch, step)
            else:
                batch = (await ahead.take(step))[0].batch
            sampled = time.time()
            prepared = prepare(batch, config, step)
            outputs, train_metrics = await update(training_client, prepared.datums, prepared.minibatches, config)
            if ahead is not None and step + 1 < first_step + steps:  # the last weights are served below
                ahead.publish(weights(step + 1), step + 1)
            row = step_metrics(step, batch, prepared.transitions, outputs, train_metrics)
            row.update(staleness_metrics(prepared.transitions, step))
            row.update({"time/sample": sampled - start, "time/train": time.time() - sampled, "time/step": time.time() - start, "time/total": time.time() - clock})
            rows.append(row)
            if on_step is not None:
                on_step(row)
    finally:
        if ahead is not None:
            await ahead.close()
    slot.set((await weights(first_step + steps)).client, first_step + steps)  # serve the trained weights
    return rows
