"""The studies' low-noise metric: a fixed evaluation set played every ``eval_every`` steps, in the
run's evaluation env (``eval_env_id``, a held-out split, where it has one; else ``env_id``).

Game ``i`` of the set is the env reset with seed ``EVAL_SEED + i`` whatever the run's own seed, so
every arm and every seed of a study faces the same secret numbers (or questions), and each turn's
sampling seed is fixed, so evaluating the same weights twice gives the same numbers. It is played
twice, sampled (temperature 1, as in training) and greedy (temperature 0), apart from the training
rollouts, and recorded in the run folder's ``eval.jsonl``: one row per step and mode with success,
turns per game, turns per won game and each game's actions (its turns joined by `` | ``), so what a
player did (a guesser's sequence of guesses) can be read after its weights are gone.

The games are played by ``gemlab.evaluate`` (the kit's one fixed evaluation set); this module
adds the schedule, the two modes and the run folder's ``eval.jsonl``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from gemlab.evaluate import evaluate_sampler
from gemlab.run_folder import atomic_write_text, rows_text
from gemlab.saved_runs import read_rows

EVAL_FILE = "eval.jsonl"
MODES = {"sampled": 1.0, "greedy": 0.0}  # mode -> temperature


def summarize(games: list[tuple[bool, int]]) -> dict[str, float]:
    """Success, turns per game and turns per won game (NaN when no game was won)."""
    won_turns = [turns for won, turns in games if won]
    return {
        "success": sum(won for won, _ in games) / len(games),
        "turns_per_game": sum(turns for _, turns in games) / len(games),
        "turns_per_won_game": sum(won_turns) / len(won_turns) if won_turns else math.nan,
        "num_games": len(games),
    }


def evaluate_trainer(trainer: Any, num_games: int) -> list[dict[str, Any]]:
    """Play the fixed set with the trainer's current weights in both modes and record the rows in
    ``eval.jsonl`` (rows of this step or later, left by an interrupted run, are replaced)."""

    async def both_modes() -> list[dict[str, Any]]:
        sampler = await trainer.training_client.save_weights_and_get_sampling_client()  # one save, both modes
        rows = []
        for mode, temperature in MODES.items():
            result = await evaluate_sampler(
                sampler, trainer.tokenizer, trainer.template, trainer.config, num_games, temperature=temperature
            )
            rows.append(
                {
                    "step": trainer.step_index,
                    "mode": mode,
                    **summarize(list(zip(result.wins, result.num_turns, strict=True))),
                    "actions": [" | ".join(t.action for t in episode.transitions) for episode in result.episodes],
                }
            )
        return rows

    rows = trainer.run_on_loop(both_modes())
    path = Path(trainer.run_dir) / EVAL_FILE
    kept = [row for row in read_rows(path).rows if row["step"] < trainer.step_index]
    atomic_write_text(path, rows_text(kept + rows))
    return rows


def read_evaluations(run_dir: str | Path) -> list[dict[str, Any]]:
    """The rows of a run folder's ``eval.jsonl`` (empty when it has none)."""
    return read_rows(Path(run_dir) / EVAL_FILE).rows
