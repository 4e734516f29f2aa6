"""The exact reference numbers of the gamma study against brute force: binary search played in
GEM's own GuessTheNumber env for every target, and the random consistent player enumerated over
every target and every sequence of guesses."""

from fractions import Fraction

import pytest

from gemlab.studies.guessing import binary_search, random_consistent


def _play_bisection_in_gem(n: int, max_turns: int) -> tuple[list[int], list[bool]]:
    from gem.envs.game_env.guess_the_number import GuessTheNumberEnv

    turns, wins = [], []
    for target in range(1, n + 1):
        env = GuessTheNumberEnv(min_number=1, max_number=n, max_turns=max_turns)
        env.reset()
        env.game_number = target
        low, high, done, turn, reward = 1, n, False, 0, 0.0
        while not done:
            guess = (low + high) // 2
            observation, reward, terminated, truncated, _ = env.step(f"\\boxed{{{guess}}}")
            turn += 1
            done = terminated or truncated
            if "higher" in observation:
                low = guess + 1
            elif "lower" in observation:
                high = guess - 1
        turns.append(turn)
        wins.append(reward == 1.0 and "Congratulations" in observation)
    return turns, wins


def _enumerate_random(n: int, max_turns: int) -> tuple[Fraction, Fraction, Fraction]:
    """E[turns], P(win), E[turns | won] by walking every target and every uniform guess."""
    turns = wins = won_turns = Fraction(0)

    def walk(target: int, low: int, high: int, turn: int, p: Fraction) -> None:
        nonlocal turns, wins, won_turns
        allowed = range(low, high + 1)
        for guess in allowed:
            q = p / len(allowed)
            if guess == target:
                turns, wins, won_turns = turns + q * turn, wins + q, won_turns + q * turn
            elif turn == max_turns:
                turns += q * turn
            elif guess < target:
                walk(target, guess + 1, high, turn + 1, q)
            else:
                walk(target, low, guess - 1, turn + 1, q)

    for target in range(1, n + 1):
        walk(target, 1, n, 1, Fraction(1, n))
    return turns, wins, won_turns / wins


@pytest.mark.parametrize("n,max_turns", [(1, 1), (2, 1), (5, 2), (7, 3), (10, 4), (20, 20), (50, 7), (13, 2)])
def test_binary_search_matches_games_played_in_gem(n, max_turns):
    turns, wins = _play_bisection_in_gem(n, max_turns)
    stats = binary_search(n, max_turns)
    assert stats.turns == Fraction(sum(turns), n)
    assert stats.win_rate == Fraction(sum(wins), n)
    assert stats.turns_when_won == Fraction(sum(t for t, w in zip(turns, wins, strict=True) if w), sum(wins))


@pytest.mark.parametrize("n,max_turns", [(1, 1), (3, 1), (4, 2), (6, 3), (7, 7), (8, 3)])
def test_random_consistent_matches_enumeration(n, max_turns):
    turns, wins, turns_when_won = _enumerate_random(n, max_turns)
    stats = random_consistent(n, max_turns)
    assert (stats.turns, stats.win_rate, stats.turns_when_won) == (turns, wins, turns_when_won)


def test_known_closed_forms():
    # Bisection on 1..10 needs 29 guesses over the 10 targets; the random consistent player's
    # expected turns with no turn limit are 2 (1 + 1/n) H_n - 3 (H_n the harmonic number).
    assert binary_search(10, 4).turns == Fraction(29, 10)
    harmonic = sum(Fraction(1, k) for k in range(1, 21))
    assert random_consistent(20, 20).turns == 2 * (1 + Fraction(1, 20)) * harmonic - 3
    assert random_consistent(20, 20).win_rate == 1


def test_bad_sizes_say_what_is_allowed():
    with pytest.raises(ValueError, match="positive"):
        binary_search(0, 3)
    with pytest.raises(ValueError, match="positive"):
        random_consistent(5, 0)
