"""Success on a fixed evaluation set: the same games (or problems) before and after training.

Game ``i`` of the set is the env reset with seed ``EVAL_SEED + i``, whatever the run's own seed, so
a base model, a warmed-up one and a trained one all face the same secret numbers or questions;
each turn's sampling seed is fixed too, so evaluating the same weights twice gives the same
result. Independent of the Trainer's rollouts: it plays whole episodes with ``collect_episode``
on any sampling client, concurrently (the local backend batches them). ``evaluate_trainer`` plays
them with a Trainer's current weights (a notebook's or a benchmark's before/after); a Trainer with
``eval_every`` plays them during the run (``gemlab.eval_curve`` holds the scores it logs).
``eval_env_id`` can name a held-out split (``rg:sums-1digit-test``), so the score is on problems
the run never trained on.
"""

from __future__ import annotations

import asyncio
import math
import random
from dataclasses import dataclass, field
from typing import Any

from gemlab.envs import make_envs
from gemlab.episodes import Episode, Prompting, collect_episode, play_episode_now
from gemlab.seeds import derive_seed
from gemlab.templates import Template

EVAL_SEED = 10_000  # far from the small seeds training runs use
NUM_GAMES = 64


@dataclass
class EvalResult:
    """Per-game outcomes of one evaluation, and the games themselves (``episodes``, to read)."""

    wins: list[bool]
    returns: list[float]
    num_turns: list[int] = field(default_factory=list)
    episodes: list[Episode] = field(default_factory=list, repr=False)

    @property
    def success(self) -> float:
        """Fraction of games won."""
        return sum(self.wins) / len(self.wins)

    def interval95(self) -> tuple[float, float]:
        """Wilson 95% interval of the success rate over these games."""
        n, p, z = len(self.wins), self.success, 1.959964
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        return centre - half, centre + half

    def to_dict(self) -> dict[str, Any]:
        """The outcomes as JSON-ready values (the episodes are left out)."""
        return {
            "success": self.success,
            "interval95": list(self.interval95()),
            "wins": self.wins,
            "returns": self.returns,
            "num_turns": self.num_turns,
        }


def reset_seeds(num_games: int = NUM_GAMES) -> list[int]:
    """The env reset seed of each game of the evaluation set."""
    return [EVAL_SEED + i for i in range(num_games)]


async def evaluate_async(
    sampling_client: Any,
    prompting: Prompting,
    *,
    env_id: str,
    num_games: int = NUM_GAMES,
    env_wrappers: str = "concat",
    progress: Any = None,
) -> EvalResult:
    """Play the ``num_games`` games of the fixed set once each with ``sampling_client``;
    ``progress``, an optional tqdm bar, advances by one as each game ends."""
    envs = make_envs(env_id, num_games, seed=EVAL_SEED, env_wrappers=env_wrappers, tokenizer=prompting.tokenizer)

    async def play(index: int, env: Any, reset_seed: int) -> Episode:
        episode = await collect_episode(
            sampling_client,
            env,
            prompting,
            seed=derive_seed(EVAL_SEED, index),
            env_index=index,
            reset_seed=reset_seed,
        )
        if progress is not None:
            progress.update(1)
        return episode

    episodes = await asyncio.gather(
        *(play(i, env, s) for i, (env, s) in enumerate(zip(envs, reset_seeds(num_games), strict=True)))
    )
    return EvalResult(
        wins=[e.won for e in episodes],
        returns=[e.total_reward for e in episodes],
        num_turns=[e.num_turns for e in episodes],
        episodes=list(episodes),
    )


def random_play(
    env_id: str, num_games: int = NUM_GAMES, *, repeats: int = 100, seed: int = 0, env_wrappers: str = ""
) -> list[float]:
    """Chance's level on the fixed set: the win rate of GEM's own random player (the game's
    ``sample_random_action``, guesses may repeat) on the same ``num_games`` games, once per repeat,
    each repeat's guesses drawn from ``derive_seed(seed, repeat, game)``. The global random, which
    GEM's games and player draw from, is left as it was."""
    state = random.getstate()
    try:
        envs = make_envs(env_id, num_games, seed=EVAL_SEED, env_wrappers=env_wrappers)  # GEM's games draw on creation
        rates = []
        for repeat in range(repeats):
            wins = 0
            for index, (env, reset_seed) in enumerate(zip(envs, reset_seeds(num_games), strict=True)):
                start, _ = env.reset(seed=reset_seed)  # the game's secret, as evaluate_async's game ``index``
                random.seed(derive_seed(seed, repeat, index))
                player = env.unwrapped.sample_random_action
                wins += play_episode_now(env, lambda observation: player(), start=start).won  # noqa: B023  # called within this iteration
            rates.append(wins / num_games)
        return rates
    finally:
        random.setstate(state)


async def evaluate_client(
    training_client: Any,
    tokenizer: Any,
    template: Template,
    config: Any,
    num_games: int | None = None,
    *,
    progress: Any = None,
    temperature: float | None = None,
) -> EvalResult:
    """``evaluate_sampler`` with ``training_client``'s current weights (saved for sampling first)."""
    sampler = await training_client.save_weights_and_get_sampling_client()
    return await evaluate_sampler(
        sampler, tokenizer, template, config, num_games, progress=progress, temperature=temperature
    )


async def evaluate_sampler(
    sampling_client: Any,
    tokenizer: Any,
    template: Template,
    config: Any,
    num_games: int | None = None,
    *,
    progress: Any = None,
    temperature: float | None = None,
) -> EvalResult:
    """The fixed set played by ``sampling_client`` with ``config``'s evaluation env (``eval_env_id``,
    else ``env_id``), ``eval_games`` (unless ``num_games``), template, ``max_tokens``, temperature
    (unless ``temperature``: 0 is greedy) and wrappers."""
    temperature = config.temperature if temperature is None else temperature
    return await evaluate_async(
        sampling_client, Prompting(tokenizer, template, config.max_tokens, temperature),
        env_id=config.eval_env_id or config.env_id, num_games=num_games or config.eval_games,
        env_wrappers=config.env_wrappers, progress=progress,
    )  # fmt: skip


def evaluate_trainer(
    trainer: Any, num_games: int | None = None, *, progress: Any = None, temperature: float | None = None
) -> EvalResult:
    """``evaluate_client`` with a ``gemlab.Trainer``'s current weights; blocks until the games end.
    (``trainer.last_evaluation`` holds the Trainer's own score of the current weights, if it just
    made one: the same games, not played again.)"""
    playing = evaluate_client(
        trainer.training_client,
        trainer.tokenizer,
        trainer.template,
        trainer.config,
        num_games,
        progress=progress,
        temperature=temperature,
    )
    return trainer.run_on_loop(playing)
