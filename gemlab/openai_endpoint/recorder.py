"""What the endpoint sampled, kept per request so that agents' episodes become training data.

Like Atropos's ``ManagedServer``: an agent written against the ``openai`` client only sees text,
but every request's prompt token ids, sampled token ids and their logprobs stay here, under
the response's ``id``. Once the agent knows the reward of each step it hands back
``(response id, reward)`` pairs and gets an ``Episode`` of ``Transition``s, the same objects
``collect_batch`` makes, ready for the same importance-sampling update.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence

from gemlab.episodes import Episode, Transition
from gemlab.openai_endpoint.completions import Generation


class Recorder:
    """Keeps the last ``capacity`` requests' tokens and logprobs, by response id (thread-safe)."""

    def __init__(self, capacity: int = 100_000) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be a positive integer, got {capacity!r}")
        self.capacity = capacity
        self._lock = threading.Lock()
        self._records: OrderedDict[str, Generation] = OrderedDict()

    def add(self, generation: Generation) -> None:
        """Keep ``generation`` (the oldest record goes when ``capacity`` is reached)."""
        with self._lock:
            self._records[generation.id] = generation
            while len(self._records) > self.capacity:
                self._records.popitem(last=False)

    def get(self, response_id: str) -> Generation:
        """The record of one response; a clear error for an id this recorder never kept."""
        with self._lock:
            record = self._records.get(response_id)
        if record is None:
            raise KeyError(f"no recorded request with id {response_id!r} (recorded: {len(self)})")
        return record

    def records(self) -> list[Generation]:
        """Every kept record, oldest first."""
        with self._lock:
            return list(self._records.values())

    def clear(self) -> None:
        with self._lock:
            self._records.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)

    def transition(
        self, response_id: str, reward: float, done: bool, *, choice: int = 0, action: str | None = None
    ) -> Transition:
        """One training transition: the request's prompt tokens, the chosen completion's sampled
        tokens and logprobs, the reward the agent got for it, and the sampler version."""
        record = self.get(response_id)
        if not 0 <= choice < len(record.choices):
            raise ValueError(f"response {response_id!r} has {len(record.choices)} choices; got choice={choice}")
        sampled = record.choices[choice]
        return Transition(
            obs_tokens=list(record.prompt_token_ids),
            act_tokens=list(sampled.token_ids),
            act_logprobs=list(sampled.logprobs),
            reward=float(reward),
            done=bool(done),
            observation=record.prompt_text,
            action=sampled.text if action is None else action,
            stop_reason=sampled.finish_reason,
            sampler_version=record.sampler_version,
        )

    def episode(
        self, steps: Iterable[tuple[str, float]] | Sequence[tuple[str, float]], *, env_index: int = 0
    ) -> Episode:
        """An ``Episode`` from ``(response id, reward)`` pairs in the order they were played; the
        last one ends the episode."""
        steps = list(steps)
        if not steps:
            raise ValueError("an episode needs at least one (response id, reward) step")
        transitions = [self.transition(rid, reward, done=i == len(steps) - 1) for i, (rid, reward) in enumerate(steps)]
        return Episode(transitions=transitions, env_index=env_index)
