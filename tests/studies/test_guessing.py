"""The exact reference numbers of the gamma study against brute force: binary search played in
GEM's own GuessTheNumber env for every target, and the random consistent player enumerated over
every target and every sequence of guesses; and the habits read from recorded games (players
played in GEM's env on the fixed evaluation set)."""

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


def _play_fixed_set(env_id: str, choose, num_games: int = 16) -> list[str]:
    """Each game of the fixed evaluation set played in GEM's env by ``choose(low, high)``, reading
    the hints from its observations; each game's actions joined by " | ", as eval.jsonl keeps them."""
    from gemlab.envs import make_envs
    from gemlab.evaluate import EVAL_SEED, reset_seeds

    games = []
    envs = make_envs(env_id, num_games, seed=EVAL_SEED, env_wrappers="")
    for env, reset_seed in zip(envs, reset_seeds(num_games), strict=True):
        env.reset(seed=reset_seed)
        low, high, done, actions = env.unwrapped.min_number, env.unwrapped.max_number, False, []
        while not done:
            guess = choose(low, high)
            actions.append(f"Let me think. \\boxed{{{guess - 1}}} no, \\boxed{{{guess}}}")  # GEM reads the last
            observation, _, terminated, truncated, _ = env.step(actions[-1])
            done = terminated or truncated
            if "higher" in observation:
                low = guess + 1
            elif "lower" in observation:
                high = guess - 1
        games.append(" | ".join(actions))
    return games


def test_guessing_habits_tell_bisection_from_stepping_by_one():
    from gemlab.env_ids import GUESS_20_IN_7
    from gemlab.studies.guessing import fixed_games, guessing_habits, read_guesses

    bisection = _play_fixed_set(GUESS_20_IN_7, lambda low, high: (low + high) // 2)
    habits = guessing_habits(GUESS_20_IN_7, [read_guesses(game) for game in bisection])
    assert habits.guesses > 16 and habits.halving == habits.guesses and habits.within_hints == habits.later
    assert set(habits.first_guesses) == {10}
    stepping = _play_fixed_set(GUESS_20_IN_7, lambda low, high: low)  # 1, 2, 3, ...: within the hints, never halving
    habits = guessing_habits(GUESS_20_IN_7, [read_guesses(game) for game in stepping])
    assert habits.within_hints == habits.later > 0
    assert habits.halving_share < 0.2  # only ranges of one or two numbers are halved by their lowest
    # a repeated guess lies outside what the hints allow; the game ends at the secret
    repeats = [[low, low] if secret != low else [secret, 3] for secret, low, _ in fixed_games(GUESS_20_IN_7, 16)]
    habits = guessing_habits(GUESS_20_IN_7, repeats)
    losers = sum(secret != low for secret, low, _ in fixed_games(GUESS_20_IN_7, 16))
    assert losers > 0 and (habits.later, habits.within_hints, habits.guesses) == (losers, 0, 16 + losers)


def test_read_guesses_stops_at_a_turn_without_a_guess():
    from gemlab.studies.guessing import read_guesses

    assert read_guesses("\\boxed{5} \\boxed{6} | \\boxed{8}<|im_end|> | no guess | \\boxed{9}") == [6, 8]


def test_the_guessing_table_reads_each_arms_last_greedy_games(tmp_path):
    import json

    from gemlab.env_ids import GUESS_EASY
    from gemlab.studies.figures import guess_sequences, guessing_table

    players = {"bisect": lambda low, high: (low + high) // 2, "step": lambda low, high: low}
    for arm, choose in players.items():
        for seed in range(2):
            run = tmp_path / f"{arm}-seed{seed}"
            run.mkdir()
            config = {"max_steps": 1, "seed": seed, "env_id": GUESS_EASY, "eval_env_id": None}
            (run / "config.json").write_text(json.dumps(config))
            (run / "metrics.jsonl").write_text(json.dumps({"step": 0, "sampler/success_rate": 0.5}) + "\n")
            rows = [  # an earlier evaluation by the other player: only the last one is read
                {"step": 0, "mode": "greedy", "success": 0.5, "actions": _play_fixed_set(GUESS_EASY, players["step"])},
                {"step": 1, "mode": "greedy", "success": 0.5, "actions": _play_fixed_set(GUESS_EASY, choose)},
            ]
            (run / "eval.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    table = guessing_table(tmp_path)
    assert list(table.index) == ["bisect", "step"] and list(table["seeds"]) == [2, 2]
    halving = {arm: float(table.loc[arm, "guesses halving the range [95% CI]"].split()[0]) for arm in players}
    assert halving["bisect"] == 1.0 and halving["step"] < 0.5
    assert table.loc["bisect", "first guesses (games)"] == "5 (32)"  # 16 games a seed, two seeds
    assert table.loc["step", "first guesses (games)"] == "1 (32)"
    first = guess_sequences(tmp_path, "bisect-seed0", games=3)
    assert len(first) == 3 and all(line.split(": ")[1].startswith("5") for line in first)
    secret, guesses = first[0].split(": ")
    assert guesses.split()[-1] == secret or len(guesses.split()) == 4  # won at the secret, or out of turns
