"""Every notebook exercise check: the reference passes, wrong answers fail, a stub falls back."""

import inspect
import math

import numpy as np
import pytest
import torch

from gemlab.notebook import exercises, solutions
from gemlab.plots import smooth
from gemlab.returns import discounted_returns, rebn
from gemlab.tiny.model import load_tiny_tokenizer

TOKENIZER = load_tiny_tokenizer()


def run_check(name, fn):
    check = exercises.CHECKS[name]
    return check(fn, TOKENIZER) if name == "chat_prompt" else check(fn)


def stub(*args):
    raise NotImplementedError


# Wrong answers a learner could plausibly write, per exercise.
WRONG = {
    "perplexity": [
        lambda lps: math.exp(-sum(lps)),  # sum instead of mean
        lambda lps: math.exp(sum(lps) / len(lps)),  # sign
        lambda lps: -sum(lps) / len(lps),  # entropy, not its exp
    ],
    "chat_prompt": [
        lambda obs: f"<|im_start|>user\n{obs}<|im_end|>\n",  # no assistant turn opened
        lambda obs: f"<|im_start|>user\n{obs}<|im_end|><|im_start|>assistant\n",  # missing newline
        lambda obs: obs,  # no template at all
    ],
    "binary_search_policy": [
        lambda obs: "\\boxed{5}",  # always the same guess
        lambda obs: "5",  # not boxed: a format error
        lambda obs: f"\\boxed{{{obs.count('you guessed') + 1}}}",  # linear search
        lambda obs: solutions.binary_search_policy(obs).replace("boxed", "box"),
    ],
    "discounted_returns": [
        lambda r, g: discounted_returns(r, g)[::-1],  # reversed
        lambda r, g: [sum(r)] * len(r),  # undiscounted total everywhere
        lambda r, g: list(r),  # no future
        lambda r, g: [sum(g**k * x for k, x in enumerate(r[: t + 1][::-1])) for t in range(len(r))],  # towards the past
    ],
    "rebn": [
        lambda g: ((np.array(g) - np.mean(g)) / (np.std(g) + 1e-9)).tolist(),  # population std
        lambda g: (np.array(g) - np.mean(g)).tolist(),  # centering only
        lambda g: (np.array(g) / (np.std(g, ddof=1) + 1e-9)).tolist() if len(g) > 1 else [0.0],  # no centering
        lambda g: ((np.array(g) - np.mean(g)) / np.std(g, ddof=1)).tolist(),  # no epsilon: nan on equal returns / crash
    ],
    "action_mask": [
        lambda p, a: [0.0] * p + [1.0] * a,  # forgot the shift
        lambda p, a: [1.0] * (p - 1) + [0.0] * a,  # inverted
        lambda p, a: [0.0] * (p - 2) + [1.0] * (a + 1),  # off by one the other way
    ],
    "importance_sampling_loss": [
        lambda lp, q, a: (-torch.exp(lp - q) * a).mean(),  # mean, not sum
        lambda lp, q, a: (torch.exp(lp - q) * a).sum(),  # sign
        lambda lp, q, a: (-torch.exp(q - lp) * a).sum(),  # inverted ratio
        lambda lp, q, a: (-lp * a).sum(),  # plain REINFORCE, no ratio
    ],
    "moving_average": [
        lambda v, w: np.convolve(v, np.ones(w) / w, mode="valid").tolist(),  # drops the start
        lambda v, w: [float(np.mean(v[i : i + w])) for i in range(len(v))],  # looks ahead
        lambda v, w: list(v),  # no smoothing
    ],
}


def test_every_check_has_a_solution_and_wrong_answers():
    public = {
        name for name, obj in inspect.getmembers(solutions, inspect.isfunction) if obj.__module__ == solutions.__name__
    }
    assert set(exercises.CHECKS) == public
    assert set(WRONG) == set(exercises.CHECKS)


@pytest.mark.parametrize("name", sorted(exercises.CHECKS))
def test_reference_solution_passes_and_is_returned(name, capsys):
    solution = getattr(solutions, name)
    assert run_check(name, solution) is solution
    assert "✓" in capsys.readouterr().out


@pytest.mark.parametrize("name", sorted(exercises.CHECKS))
def test_unattempted_stub_falls_back_to_the_solution(name, capsys):
    assert run_check(name, stub) is getattr(solutions, name)
    out = capsys.readouterr().out
    assert "not attempted" in out and f"gemlab.notebook.solutions.{name}" in out


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("name,index", [(name, i) for name in sorted(WRONG) for i in range(len(WRONG[name]))])
def test_wrong_answer_raises_assertion_error(name, index):
    with pytest.raises(AssertionError):
        run_check(name, WRONG[name][index])


@pytest.mark.parametrize("name", sorted(exercises.CHECKS))
def test_a_crash_is_reported_as_a_wrong_answer(name):
    def crashes(*args):
        raise ZeroDivisionError("oops")

    with pytest.raises(AssertionError, match="ZeroDivisionError"):
        run_check(name, crashes)


def test_gemlab_own_functions_pass():
    assert exercises.check_discounted_returns(discounted_returns) is discounted_returns
    assert exercises.check_rebn(rebn) is rebn
    assert exercises.check_moving_average(smooth) is smooth


def test_failure_message_shows_the_call_and_a_hint():
    with pytest.raises(AssertionError) as info:
        exercises.check_rebn(WRONG["rebn"][0])
    message = str(info.value)
    assert "rebn([1, 2, 3])" in message and "expected" in message and "unbiased" in message


def test_binary_search_failure_shows_the_game():
    with pytest.raises(AssertionError) as info:
        exercises.check_binary_search_policy(WRONG["binary_search_policy"][0])
    assert "turn 0: action" in str(info.value) and "the number was" in str(info.value)


def test_binary_search_check_leaves_global_random_alone():
    import random

    random.seed(123)
    expected = random.random()
    random.seed(123)
    exercises.check_binary_search_policy(solutions.binary_search_policy)
    assert random.random() == expected


def test_play_policy_builds_a_text_episode():
    from gemlab.envs import make_envs

    env = make_envs("game:GuessTheNumber-v0-easy", 1, seed=0)[0]
    episode = exercises.play_policy(env, solutions.binary_search_policy, target=10)
    assert episode.won and episode.num_turns == 4
    assert [t.action for t in episode.transitions] == ["\\boxed{5}", "\\boxed{8}", "\\boxed{9}", "\\boxed{10}"]
    assert episode.transitions[-1].done and not episode.transitions[0].done


def test_a_failed_check_shows_its_message_not_a_traceback_in_ipython(capsys):
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.user_ns.update(check=exercises.check_rebn, wrong=WRONG["rebn"][0])
    result = shell.run_cell("check(wrong)")
    shown = capsys.readouterr().out
    assert isinstance(result.error_in_exec, exercises.CheckFailed)  # still a failing cell
    assert "rebn: not yet" in shown and "unbiased" in shown
    assert "Traceback" not in shown and "exercises.py" not in shown and len(shown.splitlines()) < 15
