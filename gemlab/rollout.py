"""Multi-turn episodes of GEM games, played by a Tinker sampling client, many envs at once.

One turn: observation -> template -> tokens -> ``sample_async`` -> decode -> ``env.step``.
All envs play concurrently under ``asyncio.gather``. ``collect_batch`` sends their requests in
lockstep (``TurnRounds``): each turn, every live episode's request goes out together and in env
order, so a backend that batches requests sees the same batches whatever the timing, and a run
is reproducible bit for bit. A failed request is retried with back-off before its episode is
dropped.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Sequence

from tinker import types

from gemlab.templates import Template

SUCCESS_REWARD = 1.0  # GEM's LanguageGameReward.success_reward
RETRY_DELAYS = (0.5, 2.0, 8.0)  # seconds before each retry of a failed sampling request


@dataclass
class Transition:
    """One turn: what the policy saw, what it did, what it got."""

    obs_tokens: list[int]
    act_tokens: list[int]
    act_logprobs: list[float]
    reward: float
    done: bool
    observation: str = ""  # the env's observation text, before the template
    action: str = ""  # the decoded action text the env received
    stop_reason: str = ""
    sampler_version: int = 0  # optimizer steps in the weights that sampled the action


@dataclass
class Episode:
    """All turns of one game, in order."""

    transitions: list[Transition] = field(default_factory=list)
    env_index: int = 0
    group: tuple[int, int] | None = None  # (round, group) when envs play in groups that share a problem

    @property
    def total_reward(self) -> float:
        return float(sum(t.reward for t in self.transitions))

    @property
    def won(self) -> bool:
        """The game ended in success (GEM's success reward on the last turn)."""
        return bool(self.transitions) and self.transitions[-1].reward >= SUCCESS_REWARD

    @property
    def num_turns(self) -> int:
        return len(self.transitions)


@dataclass
class RolloutBatch:
    """Episodes collected for one step, and the ones dropped because sampling failed."""

    episodes: list[Episode]
    num_dropped: int = 0
    errors: list[str] = field(default_factory=list)
    num_retries: int = 0

    @property
    def num_transitions(self) -> int:
        return sum(e.num_turns for e in self.episodes)

    @property
    def drop_rate(self) -> float:
        """The fraction of episodes dropped: above a few percent the metrics lean towards short games."""
        total = len(self.episodes) + self.num_dropped
        return self.num_dropped / total if total else 0.0


class TurnRounds:
    """A sampling client stand-in that sends the live episodes' requests together, in env order.

    Each episode's ``sample_async`` waits until every live episode has asked (or finished); then
    all requests go out at once, ordered by env index. A request that raises is retried after
    each of ``retry_delays`` seconds; errors that retrying cannot fix (``ValueError``,
    ``TypeError``: bad input) are not retried.
    """

    def __init__(self, client: Any, num_live: int, retry_delays: Sequence[float] = RETRY_DELAYS) -> None:
        self.client = client
        self.live = num_live
        self.retry_delays = tuple(retry_delays)
        self.retries = 0
        self._waiting: dict[int, tuple[dict[str, Any], asyncio.Future]] = {}

    def for_env(self, index: int) -> Any:
        """The client that env ``index``'s episode samples through."""
        rounds = self

        class _Client:
            async def sample_async(self, **request: Any) -> Any:
                return await rounds.sample(index, request)

        return _Client()

    async def sample(self, index: int, request: dict[str, Any]) -> Any:
        future = asyncio.get_running_loop().create_future()
        self._waiting[index] = (request, future)
        self._release()
        return await future

    def finished(self) -> None:
        """An episode ended (or failed): the others no longer wait for it."""
        self.live -= 1
        self._release()

    def _release(self) -> None:
        if not self._waiting or len(self._waiting) < self.live:
            return
        waiting, self._waiting = sorted(self._waiting.items()), {}
        for _, (request, future) in waiting:
            asyncio.ensure_future(self._send(request)).add_done_callback(lambda task, future=future: _relay(task, future))

    async def _send(self, request: dict[str, Any]) -> Any:
        for delay in (*self.retry_delays, None):
            try:
                return await self.client.sample_async(**request)
            except (ValueError, TypeError):
                raise
            except Exception:
                if delay is None:
                    raise
                self.retries += 1
                await asyncio.sleep(delay)


def _relay(task: asyncio.Task, future: asyncio.Future) -> None:
    error = None if task.cancelled() else task.exception()  # retrieved even if nobody waits any more
    if future.done():
        return
    if task.cancelled():
        future.cancel()
    elif error is not None:
        future.set_exception(error)
    else:
        future.set_result(task.result())


def end_of_turn_ids(tokenizer: Any) -> list[int]:
    """Token ids that end an assistant turn: ``<|im_end|>`` where the vocabulary has it, else EOS."""
    vocab = tokenizer.get_vocab()
    ids = {vocab["<|im_end|>"]} if "<|im_end|>" in vocab else set()
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return sorted(ids)


def sampling_params(tokenizer: Any, max_tokens: int, temperature: float = 1.0, seed: int | None = None) -> types.SamplingParams:
    """Sampling settings for one action: stop at the end of the turn, as a chat model would."""
    return types.SamplingParams(max_tokens=max_tokens, temperature=temperature, stop=end_of_turn_ids(tokenizer), seed=seed)


def request_seed(*parts: int) -> int:
    """A deterministic 31-bit sampling seed from integers (run seed, step, env, round, turn)."""
    return hash(tuple(parts)) & 0x7FFFFFFF


async def collect_episode(
    sampling_client: Any,
    env: Any,
    *,
    tokenizer: Any,
    template: Template,
    max_tokens: int,
    temperature: float = 1.0,
    seed: int | None = None,
    env_index: int = 0,
    reset_seed: int | None = None,
    group: tuple[int, int] | None = None,
) -> Episode:
    """Play one episode to its end; a sampling failure raises (the caller decides to drop it).

    ``reset_seed`` resets the env with that seed (envs of one group get the same problem)."""
    episode = Episode(env_index=env_index, group=group)
    observation, _ = env.reset() if reset_seed is None else env.reset(seed=reset_seed)
    done = False
    while not done:
        obs_tokens = template.render(observation, tokenizer)
        turn_seed = None if seed is None else request_seed(seed, episode.num_turns)
        response = await sampling_client.sample_async(
            prompt=types.ModelInput.from_ints(obs_tokens),
            num_samples=1,
            sampling_params=sampling_params(tokenizer, max_tokens, temperature, turn_seed),
        )
        sequence = response.sequences[0]
        action = tokenizer.decode(sequence.tokens)  # as GEM: special tokens stay (e.g. a final <|im_end|>)
        next_observation, reward, terminated, truncated, _ = env.step(action)
        done = bool(terminated or truncated)
        episode.transitions.append(
            Transition(
                obs_tokens=obs_tokens,
                act_tokens=list(sequence.tokens),
                act_logprobs=[float(x) for x in sequence.logprobs or []],
                reward=float(reward),
                done=done,
                observation=observation,
                action=action,
                stop_reason=str(sequence.stop_reason),
            )
        )
        observation = next_observation
    return episode


async def collect_batch(
    sampling_client: Any,
    envs: Sequence[Any],
    *,
    tokenizer: Any,
    template: Template,
    min_transitions: int,
    max_tokens: int,
    temperature: float = 1.0,
    seed: int | None = None,
    progress: Any = None,
    retry_delays: Sequence[float] | None = None,
    group_size: int = 1,
) -> RolloutBatch:
    """Play rounds of one episode per env, concurrently, until at least ``min_transitions``.

    Requests go out in lockstep (``TurnRounds``), retried after each of ``retry_delays``
    seconds (default ``RETRY_DELAYS``). An episode whose sampling still fails is dropped, as in GEM's example, but counted
    in ``num_dropped`` with its error kept; a round in which every episode fails raises.
    With ``group_size`` > 1, each round resets consecutive envs in groups of that size with one
    seed per group, so a group plays one problem ``group_size`` times (GRPO's groups; the envs
    of a group must be identical copies, as ``make_envs(..., group_size=...)`` makes them).
    ``progress`` is an optional tqdm bar advanced by transitions.
    """
    batch = RolloutBatch(episodes=[])
    round_index = 0
    while batch.num_transitions < min_transitions:
        rounds = TurnRounds(sampling_client, len(envs), RETRY_DELAYS if retry_delays is None else retry_delays)

        async def play(index: int, env: Any) -> Episode:
            try:
                return await collect_episode(
                    rounds.for_env(index),
                    env,
                    tokenizer=tokenizer,
                    template=template,
                    max_tokens=max_tokens,
                    temperature=temperature,
                    seed=None if seed is None else request_seed(seed, round_index, index),
                    env_index=index,
                    reset_seed=None if group_size == 1 else request_seed(seed or 0, round_index, index // group_size, 2),
                    group=None if group_size == 1 else (round_index, index // group_size),
                )
            finally:
                rounds.finished()

        results = await asyncio.gather(*(play(i, env) for i, env in enumerate(envs)), return_exceptions=True)
        batch.num_retries += rounds.retries
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, Exception):
                raise result  # cancellation or interrupt: not a failed sample
        failures = [r for r in results if isinstance(r, Exception)]
        if failures and len(failures) == len(results):
            raise RuntimeError(f"every episode of a rollout round failed; first error: {failures[0]!r}") from failures[0]
        for result in results:
            if isinstance(result, BaseException):
                batch.num_dropped += 1
                batch.errors.append(repr(result))
            else:
                batch.episodes.append(result)
                if progress is not None:
                    progress.update(result.num_turns)
        round_index += 1
    return batch
