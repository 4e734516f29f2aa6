"""Env creation: reproducible from a seed; unknown ids and wrappers fail with one clear message."""

import subprocess
import sys

import pytest

from gemlab.envs import check_env_id, make_envs, wrapper_names


def test_make_envs_is_reproducible_from_seed():
    first = [env.reset()[0] for env in make_envs("game:GuessTheNumber-v0-easy", 4, seed=3)]
    second = [env.reset()[0] for env in make_envs("game:GuessTheNumber-v0-easy", 4, seed=3)]
    assert first == second
    assert len(first) == 4


def test_unknown_env_id_names_closest():
    with pytest.raises(ValueError, match="Unknown GEM env id 'game:GuessTheNumber-v0'.*game:GuessTheNumber-v0-easy"):
        check_env_id("game:GuessTheNumber-v0")


def test_unknown_wrapper():
    assert wrapper_names("concat") == ["concat"]
    with pytest.raises(ValueError, match="Unknown GEM wrapper.*'concatt'"):
        wrapper_names("concatt")


def test_importing_gemlab_leaves_the_root_logger_alone():
    """gem's import installs a root INFO handler; through gemlab it must not, or openai/httpx print one
    line per HTTP request (notebook 09 printed 2,625 of them)."""
    code = (
        "import logging; before = (list(logging.getLogger().handlers), logging.getLogger().level)\n"
        "import gemlab\n"
        "assert (list(logging.getLogger().handlers), logging.getLogger().level) == before\n"
        "logging.getLogger('httpx').info('HTTP Request: POST http://x/v1 200 OK')\n"
        "logging.getLogger('openai._base_client').info('Retrying request')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "HTTP Request" not in done.stderr + done.stdout
    assert "Retrying" not in done.stderr + done.stdout


@pytest.mark.parametrize("task, operator", [("sums", "+"), ("diffs", "-"), ("times", "*")])
def test_the_split_holds_out_64_questions_by_unordered_pair(task, operator):
    import gem

    train, test = (gem.make(f"rg:{task}-1digit-{side}", seed=0, use_mp=False) for side in ("train", "test"))
    pair = lambda item: frozenset(item["metadata"]["expression"].split(f" {operator} "))  # noqa: E731
    assert len(test.items) == 64 and len(train.items) == 57  # all 121 questions a <op> b, a and b in 0-10
    assert {pair(i) for i in train.items}.isdisjoint(pair(i) for i in test.items)  # 3 - 5 and 5 - 3 on one side
    assert all(str(eval(i["metadata"]["expression"])) == i["answer"] for i in train.items + test.items)
    questions = [test.reset(seed=10_000 + i)[0] for i in range(64)]  # gemlab.evaluate's reset seeds
    assert len(set(questions)) == 64
    observation, _ = train.reset(seed=3)
    _, right, *_ = train.step(f"so \\boxed{{{train.data['answer']}}}")
    train.reset(seed=3)
    _, wrong, *_ = train.step("\\boxed{99}")
    assert observation.startswith("Calculate ") and (right, wrong) == (1.0, 0.0)


def test_sums_to20_holds_377_sums_and_none_of_the_held_out_ones():
    import gem

    train, test = (
        gem.make("rg:sums-to20-train", seed=0, use_mp=False),
        gem.make("rg:sums-1digit-test", seed=0, use_mp=False),
    )
    questions = {item["question"] for item in train.items}
    assert len(questions) == 21 * 21 - 64 and questions.isdisjoint(item["question"] for item in test.items)
    assert "Calculate 20 + 13." in questions and all(
        str(eval(i["metadata"]["expression"])) == i["answer"] for i in train.items
    )


def test_sums_mix_draws_half_its_problems_from_each_training_side():
    import gem

    mix, one_digit, to20, test = (
        gem.make(f"rg:{name}", seed=0, use_mp=False)
        for name in ("sums-mix-train", "sums-1digit-train", "sums-to20-train", "sums-1digit-test")
    )
    even = {mix.reset(seed=2 * s)[0] for s in range(500)}
    odd = {mix.reset(seed=2 * s + 1)[0] for s in range(2000)}
    assert even == {item["question"] for item in one_digit.items} and odd == {item["question"] for item in to20.items}
    assert (even | odd).isdisjoint(item["question"] for item in test.items)
    question, _ = mix.reset(seed=7)
    assert mix.step(f"\\boxed{{{eval(question.removeprefix('Calculate ').rstrip('.'))}}}")[1] == 1.0


@pytest.mark.parametrize("task", ["sums", "times"])
def test_the_nonzero_train_side_leaves_out_the_questions_with_an_operand_0(task):
    import gem

    full, nonzero = (
        gem.make(f"rg:{task}-1digit-train{suffix}", seed=0, use_mp=False).items for suffix in ("", "-nonzero")
    )
    zero = [i for i in full if "0" in i["metadata"]["expression"].replace("10", "").split()]
    assert len(zero) == 15 and len(nonzero) == 42
    assert [i["question"] for i in nonzero] == [i["question"] for i in full if i not in zero]


def play(env_id: str, seed: int, guesses: list[str]) -> tuple[list[str], list[float]]:
    """A game of ``env_id`` from reset ``seed`` with ``guesses`` (``TARGET`` stands for the number)."""
    import gem

    env = gem.make(env_id)
    observations, rewards = [env.reset(seed=seed)[0]], []
    target = env.unwrapped.game_number
    for guess in guesses:
        observation, reward, terminated, _, _ = env.step(guess.replace("TARGET", str(target)))
        observations.append(observation)
        rewards.append(reward)
        if terminated:
            break
    return observations, rewards


@pytest.mark.parametrize(
    ("guesses", "gem_last", "wins_last"),
    [
        # four valid misses: GEM pays the last one 1 - distance / 9; the variant pays nothing
        ([f"\\boxed{{{n}}}" for n in (1, 2, 3, 4)], "closeness", 0.0),
        (["\\boxed{9}", "\\boxed{TARGET}"], 1.0, 1.0),  # a win pays 1 in both
        (["\\boxed{1}", "\\boxed{2}", "\\boxed{3}", "no number"], -0.1, -0.1),  # malformed: GEM's -0.1 in both
    ],
)
def test_the_wins_only_guess_the_number_pays_no_closeness(guesses, gem_last, wins_last):
    seed = 5  # its number is 10: none of the misses above hits it
    gem_obs, gem_rewards = play("game:GuessTheNumber-v0-easy", seed, guesses)
    wins_obs, wins_rewards = play("game:GuessTheNumber-v0-easy-wins", seed, guesses)
    assert gem_obs == wins_obs  # the same game, turn for turn
    assert gem_rewards[:-1] == wins_rewards[:-1] == [0.0] * (len(gem_rewards) - 1)
    assert wins_rewards[-1] == wins_last
    expected = 1 - (10 - 4) / 9 if gem_last == "closeness" else gem_last
    assert gem_rewards[-1] == pytest.approx(expected)
