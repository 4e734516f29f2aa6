"""gemlab/offline_math.py: GEM's MathEnv on word problems made offline, registered as math:GSMSymbolic.

The env is played here with GEM's own pieces (``gem.make``, ``get_wrapper_fns`` with the python-tool
wrapper of GEM's math example): answers are graded by GEM's boxed grader and code in ``<python>`` tags
runs through GEM's tool, which the tiny policy never writes in a run of GEM's script."""

from __future__ import annotations

import gem
import pytest
import reasoning_gym
from gem.envs.math_env import MathEnv
from gem.wrappers.wrapper_factory import get_wrapper_fns

from gemlab import offline_math
from gemlab.env_ids import OFFLINE_MATH
from gemlab.envs import check_env_id, make_envs
from gemlab.offline_math import WordProblemMathEnv, word_problems
from tinker_emulator.models import load_tokenizer

TOOL_WRAPPERS = "python_tool_no_int_reward_last_line_error,concat_chat"  # GEM's README, math with a python tool


def test_word_problems_are_the_same_for_a_seed_and_have_integer_answers() -> None:
    first, again, other = word_problems(50, seed=2), word_problems(50, seed=2), word_problems(50, seed=4)
    assert first.column_names == ["problem", "answer"] and len(first) == 50
    assert first.to_dict() == again.to_dict()
    assert first["problem"] != other["problem"]
    assert len(set(first["problem"])) > 40  # fresh numbers, not one question repeated
    raw = [item["answer"] for item in reasoning_gym.create_dataset("gsm_symbolic", size=50, seed=2)]
    assert "3037.5" in raw  # the generator's own answers for seed 2 include a non-integer ...
    assert all(str(int(answer)) == answer for answer in first["answer"])  # ... which is left out


def test_the_id_is_registered_and_needs_no_hub() -> None:
    check_env_id(OFFLINE_MATH)  # raises for an unknown id or one whose data set is not on this machine
    env = gem.make(OFFLINE_MATH, size=20, use_mp=False)
    assert isinstance(env, WordProblemMathEnv) and isinstance(env, MathEnv) and len(env.dataset) == 20
    question, _ = env.reset()
    assert question in word_problems(20)["problem"]


def test_gems_grader_scores_the_boxed_answer() -> None:
    env = gem.make(OFFLINE_MATH, size=20, use_mp=False)
    env.reset()
    assert env.step(f"so the answer is \\boxed{{{env.answer}}}")[1] == 1
    env.reset()
    assert env.step(f"\\boxed{{{int(env.answer) + 1}}}")[1] == 0


def test_make_envs_makes_the_problems_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    monkeypatch.setattr(offline_math, "word_problems", lambda *args: calls.append(args) or word_problems(*args))
    envs = make_envs(OFFLINE_MATH, 3, seed=1, env_wrappers="concat")
    assert len(envs) == 3 and calls == [(10_000, 0)]
    assert sorted(envs[0].unwrapped.dataset["answer"]) == sorted(envs[2].unwrapped.dataset["answer"])


def test_the_python_tool_runs_code_then_the_boxed_answer_ends_the_episode() -> None:
    """The two-turn episode GEM's math-with-a-python-tool example is about, with GEM's wrappers."""
    tokenizer = load_tokenizer("gemlab/tiny-chat")
    env = gem.make(OFFLINE_MATH, size=20, use_mp=False)
    for wrap in get_wrapper_fns(TOOL_WRAPPERS, tokenizer=tokenizer):
        env = wrap(env)
    question, _ = env.reset()
    assert question.startswith("<|im_start|>user\n") and "<python>...</python>" in question
    answer = env.unwrapped.answer
    observation, reward, terminated, truncated, info = env.step(f"<python>print({answer} * 2)</python>")
    assert (reward, terminated, truncated, info["tool_use_counter"]) == (0, False, False, 1)
    assert f"<|im_start|>tool\nCode execution result: {int(answer) * 2}" in observation
    _, reward, terminated, _, _ = env.step(f"\\boxed{{{answer}}}")
    assert (reward, terminated) == (1, True)
