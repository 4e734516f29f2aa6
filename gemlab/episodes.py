"""Multi-turn episodes of GEM games: the one episode loop, and many envs played at once by a model.

``play_episode(env, policy)`` is the loop every player goes through: reset, then ask the policy
for an action and ``env.step`` it until the game ends. A policy is any function from the
observation text to an action (``str``, or an ``Action`` that also carries the sampled tokens),
sync or async: a language model (``llm_policy``: observation -> template -> tokens ->
``sample`` -> decode), a text function, a scripted teacher; a person plays through the
same ``play_turn`` (``gemlab.notebook.game_widget.InteractiveGame``). ``play_episode_now`` runs the loop without an
event loop for policies that answer at once.

All envs play concurrently under ``asyncio.gather``. ``collect_batch`` sends their requests in
lockstep (``TurnRounds``): each turn, every live episode's request goes out together and in env
order, so a backend that batches requests sees the same batches whatever the timing, and a run
is reproducible bit for bit. A failed request is retried with back-off before its episode is
dropped.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import itertools
import numbers
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tinker import types

from gemlab.seeds import derive_seed
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

    Each episode's ``sample`` waits until every live episode has asked (or finished); then
    all requests go out at once, ordered by env index. A request that raises is retried after
    each of ``retry_delays`` seconds (None: the module's ``RETRY_DELAYS``, read when the rounds
    start, so a test can patch it); errors that retrying cannot fix (``ValueError``, ``TypeError``:
    bad input) are not retried.
    """

    def __init__(self, client: Any, num_live: int, retry_delays: Sequence[float] | None = None) -> None:
        self.client = client
        self.live = num_live
        self.retry_delays = tuple(RETRY_DELAYS if retry_delays is None else retry_delays)
        self.retries = 0
        self._waiting: dict[int, tuple[dict[str, Any], asyncio.Future]] = {}
        # the loop holds tasks only weakly: a send the GC took would never answer
        self._sending: set[asyncio.Task] = set()

    def for_env(self, index: int) -> _EnvClient:
        """The client that env ``index``'s episode samples through."""
        return _EnvClient(self, index)

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
            task = asyncio.ensure_future(self._send(request))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)
            task.add_done_callback(functools.partial(_relay, future=future))

    async def _send(self, request: dict[str, Any]) -> Any:
        for delay in (*self.retry_delays, None):
            try:
                return await self.client.sample(**request)
            except (ValueError, TypeError):
                raise
            except Exception:
                if delay is None:
                    raise
                self.retries += 1
                await asyncio.sleep(delay)


@dataclass(frozen=True)
class _EnvClient:
    """Env ``index``'s sampling client: its requests go through ``rounds``. A plain object, not a class
    made per call: such a class is a reference cycle, which kept the round's sampling client (and a
    snapshot's kept keys and values, hundreds of MB) alive until Python's cycle collector ran."""

    rounds: TurnRounds
    index: int

    async def sample(self, **request: Any) -> Any:
        return await self.rounds.sample(self.index, request)


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
    """Token ids that end an assistant turn: ``<|im_end|>`` where the vocabulary has it, else EOS.
    (Looked up by token, not through ``get_vocab``, which copies the whole vocabulary: 25 ms a call
    for SmolLM2's, once per action.)"""
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    ids = {im_end} if im_end is not None and tokenizer.convert_ids_to_tokens(im_end) == "<|im_end|>" else set()
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return sorted(ids)


def sampling_params(
    tokenizer: Any, max_tokens: int, temperature: float = 1.0, seed: int | None = None
) -> types.SamplingParams:
    """Sampling settings for one action: stop at the end of the turn, as a chat model would."""
    return types.SamplingParams(
        max_tokens=max_tokens, temperature=temperature, stop=end_of_turn_ids(tokenizer), seed=seed
    )


@dataclass
class Action:
    """A policy's answer to one observation: the text the env receives and, when a model sampled
    it, the prompt tokens, the action tokens and their logprobs."""

    text: str
    obs_tokens: list[int] = field(default_factory=list)
    act_tokens: list[int] = field(default_factory=list)
    act_logprobs: list[float] = field(default_factory=list)
    stop_reason: str = ""


Policy = Callable[[str], str | Action | Awaitable[str | Action]]
T = TypeVar("T")


class RewardError(ValueError):
    """An env returned a reward that is not a number: the env's fault, never a dropped sample."""


def play_turn(env: Any, observation: str, action: str | Action) -> tuple[Transition, str]:
    """One turn: ``env.step`` the action; returns the turn as a ``Transition`` and the next observation."""
    action = Action(text=str(action)) if not isinstance(action, Action) else action
    next_observation, reward, terminated, truncated, _ = env.step(action.text)
    if isinstance(reward, bool) or not isinstance(reward, numbers.Real):
        raise RewardError(
            f"env {type(getattr(env, 'unwrapped', env)).__name__} returned the reward {reward!r} for "
            f"{action.text[:40]!r}; rewards must be numbers"
        )
    transition = Transition(
        obs_tokens=action.obs_tokens,
        act_tokens=action.act_tokens,
        act_logprobs=action.act_logprobs,
        reward=float(reward),
        done=bool(terminated or truncated),
        observation=observation,
        action=action.text,
        stop_reason=action.stop_reason,
    )
    return transition, next_observation


async def _play_turn(env: Any, observation: str, action: str | Action) -> tuple[Transition, str]:
    """``play_turn``; in a worker thread for an env that asks for it (``steps_in_a_thread``: its step
    waits on a process, as GEM's sandboxed python tool does), so that the other episodes' steps run
    meanwhile. Each env is stepped by one episode only, and ``TurnRounds`` orders the requests, so
    the batches are the same either way."""
    if getattr(env, "steps_in_a_thread", False) and _in_a_loop():
        return await asyncio.to_thread(play_turn, env, observation, action)
    return play_turn(env, observation, action)


def _in_a_loop() -> bool:
    """Whether an event loop runs here (``play_episode_now`` drives the loop without one)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


async def play_episode(
    env: Any,
    policy: Policy,
    *,
    reset_seed: int | None = None,
    start: str | None = None,
    max_turns: int | None = None,
    env_index: int = 0,
    group: tuple[int, int] | None = None,
) -> Episode:
    """Play one episode of ``env`` with ``policy`` until it ends (or after ``max_turns`` turns).

    The env is reset first (with ``reset_seed`` if given: envs of one group get the same problem),
    unless ``start`` is the observation it was already reset to."""
    episode = Episode(env_index=env_index, group=group)
    observation = start if start is not None else (env.reset() if reset_seed is None else env.reset(seed=reset_seed))[0]
    done = False
    while not done and (max_turns is None or episode.num_turns < max_turns):
        action = policy(observation)
        if inspect.isawaitable(action):
            action = await action
        transition, observation = await _play_turn(env, observation, action)
        episode.transitions.append(transition)
        done = transition.done
    return episode


def play_episode_now(env: Any, policy: Callable[[str], str | Action], **options: Any) -> Episode:
    """``play_episode`` for a policy that answers at once (no sampler to wait for), without an
    event loop: usable in scripts and inside a running notebook cell alike."""
    return _run_without_loop(play_episode(env, policy, **options))


def _run_without_loop(coroutine: Coroutine[Any, Any, T]) -> T:
    try:
        coroutine.send(None)
    except StopIteration as finished:
        return finished.value
    coroutine.close()
    raise RuntimeError("this policy waits for something (an async sampler?): use `await play_episode(...)`")


@dataclass(frozen=True)
class Prompting:
    """How a language model is asked for an action: the template that renders an observation for
    the tokenizer, and how many tokens it may sample at which temperature."""

    tokenizer: Any
    template: Template
    max_tokens: int
    temperature: float = 1.0


def llm_policy(sampling_client: Any, prompting: Prompting, *, seed: int | None = None) -> Policy:
    """A language model as a policy for one episode: each turn renders the observation with the
    template (or, for a template that ``continues``, extends the episode's tokens with it), samples
    one action (turn ``i`` with seed ``derive_seed(seed, i)``) and decodes it."""
    turns = itertools.count()
    tokenizer = prompting.tokenizer
    template = prompting.template
    history: list[int] = []  # the last prompt and action, for a template that continues

    async def act(observation: str) -> Action:
        obs_tokens = (
            template.continue_tokens(history, observation, tokenizer)
            if template.continues and history
            else template.render(observation, tokenizer)
        )
        turn = next(turns)
        response = await sampling_client.sample(
            prompt=types.ModelInput.from_ints(obs_tokens),
            num_samples=1,
            sampling_params=sampling_params(
                tokenizer,
                prompting.max_tokens,
                prompting.temperature,
                None if seed is None else derive_seed(seed, turn),
            ),
        )
        sequence = response.sequences[0]
        history[:] = obs_tokens + list(sequence.tokens)
        return Action(
            text=tokenizer.decode(sequence.tokens),  # as GEM: special tokens stay (e.g. a final <|im_end|>)
            obs_tokens=obs_tokens,
            act_tokens=list(sequence.tokens),
            act_logprobs=[float(x) for x in sequence.logprobs or []],
            stop_reason=str(sequence.stop_reason),
        )

    return act


async def collect_episode(
    sampling_client: Any,
    env: Any,
    prompting: Prompting,
    *,
    seed: int | None = None,
    env_index: int = 0,
    reset_seed: int | None = None,
    group: tuple[int, int] | None = None,
) -> Episode:
    """One episode played by a sampling client (``llm_policy``); a sampling failure raises (the
    caller decides to drop it). ``reset_seed`` resets the env with that seed."""
    policy = llm_policy(sampling_client, prompting, seed=seed)
    return await play_episode(env, policy, reset_seed=reset_seed, env_index=env_index, group=group)


async def collect_batch(
    sampling_client: Any,
    envs: Sequence[Any],
    prompting: Prompting,
    *,
    min_transitions: int,
    seed: int | None = None,
    group_size: int = 1,
    progress: Any = None,
    retry_delays: Sequence[float] | None = None,
) -> RolloutBatch:
    """Play rounds of one episode per env, concurrently, until at least ``min_transitions``.

    Requests go out in lockstep (``TurnRounds``), retried after each of ``retry_delays`` seconds.
    An episode whose sampling still fails is dropped, as in GEM's example, but counted in
    ``num_dropped`` with its error kept; a round in which every episode fails raises.
    With ``group_size`` > 1, each round resets consecutive envs in groups of that size with one
    seed per group, so a group plays one problem ``group_size`` times (GRPO's groups; the envs
    of a group must be identical copies, as ``make_envs(..., group_size=...)`` makes them).
    ``progress`` is an optional tqdm bar advanced by transitions.
    """
    batch = RolloutBatch(episodes=[])
    round_index = 0
    while batch.num_transitions < min_transitions:
        rounds = TurnRounds(sampling_client, len(envs), retry_delays)

        async def play(index: int, env: Any, rounds: TurnRounds, round_index: int) -> Episode:
            grouped = group_size > 1
            try:
                return await collect_episode(
                    rounds.for_env(index),
                    env,
                    prompting,
                    seed=None if seed is None else derive_seed(seed, round_index, index),
                    env_index=index,
                    reset_seed=derive_seed(seed or 0, round_index, index // group_size, 2) if grouped else None,
                    group=(round_index, index // group_size) if grouped else None,
                )
            finally:
                rounds.finished()

        results = await asyncio.gather(
            *(play(i, env, rounds, round_index) for i, env in enumerate(envs)), return_exceptions=True
        )
        batch.num_retries += rounds.retries
        add_round(batch, results)
        if progress is not None:
            played = sum(result.num_turns for result in results if not isinstance(result, BaseException))
            if progress.total is not None and progress.n + played > progress.total:
                progress.total = progress.n + played  # whole episodes overshoot: end full, not at "225/?"
            progress.update(played)
        round_index += 1
    return batch


def add_round(batch: RolloutBatch, results: Sequence[Episode | BaseException]) -> None:
    """Add one round's episodes to ``batch`` and count its failed ones as dropped; raise when the
    round says something is wrong beyond a failed sample (an interrupt, a broken env, no episode)."""
    for result in results:
        if isinstance(result, BaseException) and not isinstance(result, Exception):
            raise result  # cancellation or interrupt: not a failed sample
    failures = [r for r in results if isinstance(r, Exception)]
    for failure in failures:
        if isinstance(failure, RewardError):
            raise failure  # the env is broken: not a sampling failure to drop
    if failures and len(failures) == len(results):
        raise RuntimeError(f"every episode of a rollout round failed; first error: {failures[0]!r}") from failures[0]
    for result in results:
        if isinstance(result, BaseException):
            batch.num_dropped += 1
            batch.errors.append(repr(result))
        else:
            batch.episodes.append(result)
