"""Exact reference numbers for GuessTheNumber: how many turns two classic players need.

The gamma study (research/experiments/reproduce_gem.py, notebook 08) draws these as horizontal lines.
Both players face a target drawn uniformly from ``n`` numbers and get GEM's higher/lower hint
after each guess; a game ends when the target is guessed or after ``max_turns`` turns.

- **binary search** guesses the middle ``(low + high) // 2`` of the numbers still allowed;
- **random consistent** guesses uniformly among the numbers still allowed (it never wastes a
  turn, but ignores where in the range it guesses).

Both are computed by recursion on the size of the allowed range (only its size matters, since
the target is uniform within it), with exact fractions.

``guessing_habits`` reads how a recorded player (its games on the fixed evaluation set, from
``eval.jsonl``'s actions) used the hints: whether its later guesses stay within the range the hints
allow, and whether its guesses halve that range as bisection does.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import cache

from gemlab.envs import make_envs
from gemlab.evaluate import EVAL_SEED, reset_seeds

GUESS = re.compile(r"\\boxed{(\d+)}")  # GEM's GuessTheNumber reads a turn's last match


@dataclass(frozen=True)
class PlayerStats:
    """Expected turns per episode, probability of winning, and expected turns per won episode."""

    turns: Fraction
    win_rate: Fraction
    turns_when_won: Fraction


def _check(n: int, max_turns: int) -> None:
    if n < 1 or max_turns < 1:
        raise ValueError(f"n and max_turns must be positive integers, got n={n}, max_turns={max_turns}")


@cache
def _binary(n: int, turns_left: int) -> tuple[Fraction, Fraction, Fraction]:
    """Sums over the ``n`` equally likely targets: turns used, games won, turns used in won games."""
    if n == 0:
        return Fraction(0), Fraction(0), Fraction(0)
    if turns_left == 1:
        return Fraction(n), Fraction(1), Fraction(1)  # one guess: right for one target of n
    left = (n - 1) // 2  # the middle of 1..n is 1 + left; left numbers below it, the rest above
    turns, wins, won_turns = Fraction(n), Fraction(1), Fraction(1)
    for size in (left, n - 1 - left):
        t, w, wt = _binary(size, turns_left - 1)
        turns, wins, won_turns = turns + t, wins + w, won_turns + wt + w  # one more turn for each
    return turns, wins, won_turns


@cache
def _random(n: int, turns_left: int) -> tuple[Fraction, Fraction, Fraction]:
    """Expectations for a target uniform on ``n`` numbers: turns, win probability, and
    E[turns * 1{won}] (so turns per won game is the last over the second)."""
    if n == 0:
        return Fraction(0), Fraction(0), Fraction(0)
    if turns_left == 1:
        return Fraction(1), Fraction(1, n), Fraction(1, n)
    turns, wins, won_turns = Fraction(1), Fraction(1, n), Fraction(1, n)
    for guess in range(1, n + 1):  # the guess, uniform; then the target falls below or above it
        for size in (guess - 1, n - guess):
            if size:
                weight = Fraction(size, n * n)
                t, w, wt = _random(size, turns_left - 1)
                turns += weight * t
                wins += weight * w
                won_turns += weight * (wt + w)
    return turns, wins, won_turns


def binary_search(n: int, max_turns: int) -> PlayerStats:
    """The bisection player on ``n`` numbers with ``max_turns`` turns."""
    _check(n, max_turns)
    turns, wins, won_turns = _binary(n, max_turns)
    return PlayerStats(turns / n, wins / n, won_turns / wins)


def random_consistent(n: int, max_turns: int) -> PlayerStats:
    """The player that guesses uniformly among the numbers the hints still allow."""
    _check(n, max_turns)
    turns, wins, won_turns = _random(n, max_turns)
    return PlayerStats(turns, wins, won_turns / wins)


def read_guesses(actions: str) -> list[int]:
    """The guesses of one recorded game: its turns joined by `` | `` (``eval.jsonl``'s actions), each
    turn's last ``\\boxed{N}`` as GEM reads it; a turn without one ended the game."""
    guesses = []
    for turn in actions.split(" | "):
        matches = GUESS.findall(turn)
        if not matches:
            break
        guesses.append(int(matches[-1]))
    return guesses


@dataclass(frozen=True)
class GuessingHabits:
    """How a player used the hints over games: of its second and later guesses, how many lie
    within the range the earlier hints allow; of all its guesses, how many halve that range (the
    middle number, or either middle one of an even range: what bisection guesses); its first guesses."""

    later: int
    within_hints: int
    guesses: int
    halving: int
    first_guesses: tuple[int, ...]

    @property
    def within_share(self) -> float:
        return self.within_hints / self.later if self.later else float("nan")

    @property
    def halving_share(self) -> float:
        return self.halving / self.guesses if self.guesses else float("nan")


def fixed_games(env_id: str, num_games: int) -> list[tuple[int, int, int]]:
    """Secret, lowest and highest number of each game of the fixed evaluation set (the env reset
    with ``reset_seeds``' seed ``i``, as ``gemlab.evaluate`` plays game ``i``)."""
    games = []
    envs = make_envs(env_id, num_games, seed=EVAL_SEED, env_wrappers="")
    for env, reset_seed in zip(envs, reset_seeds(num_games), strict=True):
        env.reset(seed=reset_seed)
        games.append((env.unwrapped.game_number, env.unwrapped.min_number, env.unwrapped.max_number))
    return games


def guessing_habits(env_id: str, games: Sequence[Sequence[int]]) -> GuessingHabits:
    """The habits of a player whose guesses in game ``i`` of the fixed evaluation set are ``games[i]``."""
    later = within = total = halving = 0
    for (secret, low, high), guesses in zip(fixed_games(env_id, len(games)), games, strict=True):
        for turn, guess in enumerate(guesses):
            inside = low <= guess <= high
            if turn:
                later += 1
                within += inside
            total += 1
            halving += inside and max(guess - low, high - guess) == (high - low + 1) // 2
            if guess == secret:
                break
            low, high = (max(low, guess + 1), high) if guess < secret else (low, min(high, guess - 1))
    return GuessingHabits(later, within, total, halving, tuple(g[0] for g in games if g))
