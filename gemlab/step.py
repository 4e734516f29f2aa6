"""One training step of GEM's REINFORCE + ReBN: ``train_step``, then its parts, top to bottom.

    sample   1. snapshot the learner's weights for the sampler,
             2. play ``num_env`` envs concurrently until ``batch_size`` transitions;
    prepare  3. per episode, discounted returns ``G_t = r_t + gamma * G_{t+1}``,
             4. advantages: all returns normalized over the batch (ReBN, ``Config.advantage``),
             5. subsample ``batch_size`` transitions, one ``tinker.types.Datum`` each (an
                episode's turns in one datum where they form one conversation: ``gemlab.datums``);
    update   6. ``forward_backward(..., loss_fn)`` then ``optim_step`` (Adam), once per minibatch;
    metrics  GEM's names for what happened.

(GEM paper, Algorithm 1; GEM's Tinker example. ``examples/gem_loop.py`` is the same loop in one
file with no gemlab import.) ``advantage="grpo"`` with ``group_size`` > 1 is GRPO instead of 3-4:
envs play in groups that share one problem, and every turn of an episode gets the episode's total
reward normalized within its group (trajectory-level, gamma 1); ``gemlab.returns.ADVANTAGES``
lists every estimator.

These functions talk to Tinker's client interface only. Where sampling runs is passed in: ``Inline``
(here: GEM's synchronous loop) or ``sampling_ahead.AheadSampler`` (``max_staleness`` > 0).
``gemlab.trainer.Trainer`` adds the run folder around ``train_step``.
"""

from __future__ import annotations

import asyncio
import math
import random
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np
from tinker import types
from tqdm import tqdm

from gemlab.config import Config
from gemlab.datums import Placement, policy_gradient_datums, turn_output
from gemlab.episodes import Prompting, RolloutBatch, Transition, collect_batch
from gemlab.metrics import policy_metrics, rollout_metrics, staleness_metrics
from gemlab.returns import advantages as estimate_advantages
from gemlab.seeds import derive_seed, step_generator
from gemlab.templates import Template

T = TypeVar("T")


class NonFinite(ArithmeticError):
    """A NaN or infinity came back from the sampler or the learner; the message says which."""


@dataclass
class Players:
    """What plays a batch besides the weights: the envs, how observations become tokens, the config."""

    config: Config
    envs: list[Any]
    tokenizer: Any
    template: Template
    progress: bool = True


@dataclass
class Prepared:
    """A batch made ready for the learner: the trained transitions, their advantages, the datums
    and where each transition is in them, and the minibatches (lists of datum indices) to update on."""

    transitions: list[Transition]
    advantages: list[float]
    datums: list[types.Datum]
    minibatches: list[list[int]]
    placements: list[Placement]


@dataclass
class StepResult:
    """What a step did: its metrics row, the batch it played, the trained transitions and the
    learner's output for each (as its own per-turn datum would have it: ``datums.turn_output``)."""

    metrics: dict[str, float]
    batch: RolloutBatch
    transitions: list[Transition]
    outputs: list[Any]


class Sampling(Protocol):
    """Where a step's batch comes from: ``Inline`` or ``sampling_ahead.AheadSampler``."""

    async def batch_for(self, step: int) -> tuple[RolloutBatch, dict[str, float]]: ...
    def weights_updated(self, version: int) -> None: ...
    async def close(self) -> None: ...


# ----- the step ---------------------------------------------------------------------------------
async def train_step(
    training_client: Any,
    sampling: Sampling,
    config: Config,
    step: int,
    *,
    clock: float,
    on_update: Callable[[], None] | None = None,
    record: Callable[[StepResult], Awaitable[None]] | None = None,
) -> StepResult:
    """One policy-gradient step: sample, prepare, update, metrics. Interrupted (cancelled) while
    sampling, nothing has changed; once the update is sent (``on_update`` is called then) the step
    runs to its end, ``record`` included (a run folder logs it there), before the cancel goes on.
    Times in the metrics count from ``clock``."""
    start = time.time()
    batch, timeline = await sampling.batch_for(step)  # 1-2. snapshot the weights, play the envs
    prepared = prepare(batch, config, step)  # 3-5. returns, advantages, subsampling, datums

    async def update_and_record() -> StepResult:
        train_start = time.time()
        if on_update is not None:
            on_update()
        datum_outputs, train = await update(training_client, prepared.datums, prepared.minibatches, config, step)  # 6.
        sampling.weights_updated(step + 1)  # a sampler running ahead gets the new weights at once
        end = time.time()
        outputs = [turn_output(datum_outputs[p.datum], p) for p in prepared.placements]
        metrics = step_metrics(step, batch, prepared.transitions, outputs, train)
        metrics.update(datum_metrics(prepared.datums))
        metrics.update(staleness_metrics(prepared.transitions, step))
        metrics.update(
            {
                "time/sample": timeline["time/sample_end"] - timeline["time/sample_start"],
                "time/train": end - train_start,
                "time/step": end - start,
            }
        )
        metrics.update({**timeline, "time/train_start": train_start - clock, "time/train_end": end - clock})
        result = StepResult(metrics, batch, prepared.transitions, outputs)
        if record is not None:
            await record(result)
        return result

    return await run_to_end(asyncio.ensure_future(update_and_record()))


async def run_to_end(task: asyncio.Future[T]) -> T:
    """Await ``task`` to its end even if the caller is cancelled meanwhile (then re-raise that)."""
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await asyncio.wait([task])
        task.result()  # the step's own error, if it had one, wins over the interrupt
        raise


# ----- 1-2. sample ------------------------------------------------------------------------------
class Inline:
    """Sampling inside the step: snapshot the weights, play, then train (GEM's synchronous loop)."""

    def __init__(self, training_client: Any, players: Players, clock: float) -> None:
        self.training_client, self.players, self.clock = training_client, players, clock

    async def batch_for(self, step: int) -> tuple[RolloutBatch, dict[str, float]]:
        """The batch for ``step``, sampled now by the current weights, and when it was sampled."""
        start = time.time()
        batch = await sample(self.training_client, self.players, step)
        return batch, {"time/sample_start": start - self.clock, "time/sample_end": time.time() - self.clock}

    def weights_updated(self, version: int) -> None:
        """Nothing to do: the next step snapshots the weights itself."""

    async def close(self) -> None:
        """Nothing runs between steps."""


# ----- 1-2. sample ------------------------------------------------------------------------------
async def sample(training_client: Any, players: Players, step: int) -> RolloutBatch:
    """Steps 1-2: a snapshot of the current weights plays the envs until ``batch_size`` transitions."""
    sampling_client = await training_client.save_weights_and_get_sampling_client()
    batch = await play_batch(players, step, sampling_client)
    stamp_version(batch, step)
    return batch


async def play_batch(players: Players, index: int, sampling_client: Any) -> RolloutBatch:
    """Batch ``index`` played by ``sampling_client``; its seeds derive from the run seed and ``index``."""
    config = players.config
    random.seed(derive_seed(config.seed, index))  # GEM's games draw from the global random
    bar = tqdm(
        total=config.batch_size,
        desc=f"step {index} episodes",
        unit="transition",
        leave=False,
        disable=not players.progress,
        file=sys.stdout,
    )
    with bar:  # a text bar: a widget bar would flicker JupyterLab's kernel status to Idle
        return await collect_batch(
            sampling_client,
            players.envs,
            Prompting(players.tokenizer, players.template, config.max_tokens, config.temperature),
            min_transitions=config.batch_size,
            seed=derive_seed(config.seed, index, 1),
            progress=bar,
            group_size=config.group_size,
        )


def stamp_version(batch: RolloutBatch, version: int) -> None:
    """Record on every transition the weights version (optimizer steps taken) that sampled it."""
    for episode in batch.episodes:
        for transition in episode.transitions:
            transition.sampler_version = version


# ----- 3-5. prepare -----------------------------------------------------------------------------
def prepare(batch: RolloutBatch, config: Config, step: int) -> Prepared:
    """Steps 3-5: advantages, subsampling and datums; then the minibatches (PPO-style when > 1)."""
    if not all(math.isfinite(x) for e in batch.episodes for t in e.transitions for x in t.act_logprobs):
        raise NonFinite("the sampler returned non-finite logprobs (the weights blew up)")
    rng = step_generator(config.seed, step)
    transitions, advantages = prepare_transitions(
        batch, gamma=config.gamma, advantage=config.advantage, batch_size=config.batch_size, rng=rng
    )
    places = {id(t): (e, i) for e, episode in enumerate(batch.episodes) for i, t in enumerate(episode.transitions)}
    datums, placements = policy_gradient_datums(transitions, advantages, [places[id(t)] for t in transitions])
    order = rng.permutation(len(datums)) if config.num_minibatches > 1 else np.arange(len(datums))
    # merged turns: maybe fewer datums
    minibatches = [list(chunk) for chunk in np.array_split(order, config.num_minibatches) if len(chunk)]
    return Prepared(transitions, advantages, datums, minibatches, placements)


def prepare_transitions(
    batch: RolloutBatch, *, gamma: float, advantage: str, batch_size: int, rng: np.random.Generator
) -> tuple[list[Transition], list[float]]:
    """Steps 3-5 without the datums: an advantage per transition by the estimator ``advantage``
    names (``gemlab.returns.ADVANTAGES``: returns per episode, normalized over the batch by
    default), then ``batch_size`` of the transitions drawn without replacement by ``rng``."""
    transitions = [t for episode in batch.episodes for t in episode.transitions]
    advantages = estimate_advantages(batch.episodes, advantage, gamma)  # ALGO LOGIC: ReBN by default
    if len(transitions) > batch_size:
        keep = rng.choice(len(transitions), batch_size, replace=False)  # ALGO LOGIC: subsample
        transitions = [transitions[i] for i in keep]
        advantages = [advantages[i] for i in keep]
    return transitions, advantages


# ----- 6. update --------------------------------------------------------------------------------
async def update(
    training_client: Any, datums: list[types.Datum], minibatches: list[list[int]], config: Config, step: int
) -> tuple[list[Any], dict[str, float]]:
    """Step 6: one ``forward_backward`` + ``optim_step`` per minibatch, at step ``step``'s learning
    rate (``scheduled_learning_rate``). Returns the learner's
    output per datum and the backend's metrics, combined as their names say (``loss:sum`` adds up,
    ``grad_norm:mean`` averages). Raises ``NonFinite`` on a NaN or infinite loss or gradient."""
    outputs: list[Any] = [None] * len(datums)
    train: dict[str, list[float]] = {}
    for minibatch in minibatches:
        backward = training_client.forward_backward(
            [datums[i] for i in minibatch], config.loss_fn, loss_fn_config=config.loss_fn_config
        )
        optim = training_client.optim_step(adam_params(scheduled_learning_rate(config, step)))
        result = await backward.result_async()
        check_finite(result.metrics)
        try:
            optim_result = await optim.result_async()
        except ValueError as error:  # the local backend refuses a step that would make the weights non-finite
            raise NonFinite(str(error)) from None
        check_finite(optim_result.metrics or {})
        for index, output in zip(minibatch, result.loss_fn_outputs, strict=True):
            outputs[index] = output
        for key, value in {**result.metrics, **(optim_result.metrics or {})}.items():
            train.setdefault(key, []).append(float(value))
    return outputs, {f"train/{k}": sum(v) if k.endswith(":sum") else float(np.mean(v)) for k, v in train.items()}


def scheduled_learning_rate(config: Config, step: int) -> float:
    """``learning_rate`` at (0-based) ``step`` of ``max_steps`` under ``lr_schedule``, as
    tinker-cookbook schedules it: ``constant``, or decayed to 0 at ``max_steps`` (``linear``,
    ``cosine``); steps past ``max_steps`` (a run continued further) get 0 from a decaying schedule."""
    progress = min(step / config.max_steps, 1.0)
    multiplier = {  # ALGO LOGIC: the learning-rate schedule
        "constant": 1.0,
        "linear": 1.0 - progress,
        "cosine": 0.5 * (1.0 + math.cos(math.pi * progress)),
    }[config.lr_schedule]
    return config.learning_rate * multiplier


def adam_params(learning_rate: float) -> types.AdamParams:
    """GEM's optimizer settings: Adam with beta1 0.9, beta2 0.95, eps 1e-8."""
    return types.AdamParams(learning_rate=learning_rate, beta1=0.9, beta2=0.95, eps=1e-8)


def check_finite(metrics: dict[str, float]) -> None:
    """Raise ``NonFinite`` naming every NaN or infinite value of ``metrics``."""
    bad = [key for key, value in metrics.items() if not math.isfinite(float(value))]
    if bad:
        raise NonFinite(", ".join(f"{key} is {metrics[key]}" for key in bad))


# ----- metrics ----------------------------------------------------------------------------------
def step_metrics(
    step: int, batch: RolloutBatch, transitions: list[Transition], outputs: list[Any], train: dict[str, float]
) -> dict[str, float]:
    """One step's row of ``metrics.jsonl`` (time fields aside): episodes, policy, learner."""
    metrics: dict[str, float] = {"step": float(step)}
    metrics.update(rollout_metrics(batch))
    metrics.update(policy_metrics(transitions, outputs))
    metrics.update(train)
    metrics["train/num_transitions"] = float(len(transitions))
    return metrics


def datum_metrics(datums: list[types.Datum]) -> dict[str, float]:
    """What the learner was sent: datums (fewer than transitions where an episode's turns were
    merged) and their tokens (every position it computed, prompts included)."""
    return {
        "train/num_datums": float(len(datums)),
        "train/num_tokens": float(sum(d.model_input.length for d in datums)),
    }
