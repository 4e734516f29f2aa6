"""Exact reference numbers for GuessTheNumber: how many turns two classic players need.

The gamma study (research/experiments/reproduce_gem.py, notebook 08) draws these as horizontal lines.
Both players face a target drawn uniformly from ``n`` numbers and get GEM's higher/lower hint
after each guess; a game ends when the target is guessed or after ``max_turns`` turns.

- **binary search** guesses the middle ``(low + high) // 2`` of the numbers still allowed;
- **random consistent** guesses uniformly among the numbers still allowed (it never wastes a
  turn, but ignores where in the range it guesses).

Both are computed by recursion on the size of the allowed range (only its size matters, since
the target is uniform within it), with exact fractions.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import cache


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
