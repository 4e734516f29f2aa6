"""Check cells for the notebook exercises, in the style of Spinning Up.

Each exercise cell holds a stub that raises ``NotImplementedError``; the learner fills it in and
the next cell calls ``check_<name>(their_function)``, which runs it on several cases against
gemlab's own implementation and

* prints one pass line and returns the learner's function when every case matches,
* raises :class:`CheckFailed` (an ``AssertionError``) with a readable diff (inputs, expected,
  got) when one does not; Jupyter shows just that message, not a traceback, and the cell still
  fails (so nbmake and tests see it),
* when the stub is still unattempted (it raises ``NotImplementedError``), says so and returns the
  reference solution from :mod:`gemlab.notebook.solutions`, so the rest of the notebook still runs.

Use the returned function from then on: ``my_returns = check_discounted_returns(my_returns)``.
"""

from __future__ import annotations

import difflib
import math
import random
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from gemlab.datums import policy_gradient_datum
from gemlab.envs import make_envs
from gemlab.episodes import Episode, play_episode_now
from gemlab.notebook import solutions
from gemlab.plots import smooth
from gemlab.returns import discounted_returns, rebn
from gemlab.templates import get_template

TOLERANCE = 1e-6


class _Unattempted(Exception):
    """The learner's stub raised NotImplementedError."""


class CheckFailed(AssertionError):
    """A wrong answer to an exercise. IPython shows only the message (via
    ``_render_traceback_``): the traceback would point into gemlab, not at the learner's bug."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name}: {message}")
        self.name = name
        self.message = message

    def _render_traceback_(self) -> list[str]:
        return [f"\x1b[1;31m✗ {self.name}: not yet.\x1b[0m", *self.message.splitlines()]


# ----- shared machinery -----------------------------------------------------------------------
def _short(value: Any, limit: int = 70) -> str:
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if hasattr(value, "tolist") and not isinstance(value, (list, tuple, str)):
        value = value.tolist()
    if isinstance(value, float):
        text = f"{value:.6g}"
    elif isinstance(value, (list, tuple)) and all(isinstance(v, float) for v in value):
        text = "[" + ", ".join(f"{v:.4g}" for v in value) + "]"
    else:
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _call_repr(name: str, args: Sequence[Any]) -> str:
    return f"{name}({', '.join(_short(a) for a in args)})"


def _call(fn: Callable[..., Any], name: str, *args: Any) -> Any:
    """Run the learner's function; an unattempted stub and a crash are told apart."""
    try:
        return fn(*args)
    except NotImplementedError as error:
        raise _Unattempted from error
    except Exception as error:  # a crash is a wrong answer too, with its cause kept
        raise AssertionError(f"{_call_repr(name, args)} raised {type(error).__name__}: {error}") from error


def _as_floats(value: Any, call: str) -> list[float]:
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    try:
        return [float(v) for v in np.asarray(value, dtype=float).reshape(-1)]
    except (TypeError, ValueError) as error:
        raise AssertionError(
            f"{call} should return a list of numbers, got {type(value).__name__}: {_short(value)}"
        ) from error


def _as_float(value: Any, call: str) -> float:
    if hasattr(value, "detach"):
        value = value.detach().cpu()
    try:
        return float(value)
    except (TypeError, ValueError) as error:
        raise AssertionError(f"{call} should return one number, got {type(value).__name__}: {_short(value)}") from error


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=TOLERANCE, abs_tol=TOLERANCE)


def _assert_lists_close(call: str, got: list[float], expected: list[float], reference: str, hint: str = "") -> None:
    """Raise with a position-by-position table when two lists of numbers differ."""
    if len(got) == len(expected) and all(_close(g, e) for g, e in zip(got, expected, strict=True)):
        return
    lines = [f"{call} differs from {reference}:"]
    if len(got) != len(expected):
        lines.append(f"  length: expected {len(expected)}, got {len(got)}")
    lines.append(f"  {'i':>3}  {'expected':>12}  {'yours':>12}")
    for i in range(min(max(len(got), len(expected)), 12)):
        e = f"{expected[i]:12.6g}" if i < len(expected) else f"{'—':>12}"
        g = f"{got[i]:12.6g}" if i < len(got) else f"{'—':>12}"
        wrong = i >= len(got) or i >= len(expected) or not _close(got[i], expected[i])
        lines.append(f"  {i:>3}  {e}  {g}{'   <-- differs' if wrong else ''}")
    if max(len(got), len(expected)) > 12:
        lines.append(f"  ... ({max(len(got), len(expected)) - 12} more positions)")
    if hint:
        lines.append(f"  hint: {hint}")
    raise AssertionError("\n".join(lines))


def _assert_numbers_close(call: str, got: float, expected: float, reference: str, hint: str = "") -> None:
    if _close(got, expected):
        return
    message = f"{call} differs from {reference}:\n  expected {expected:.8g}\n  yours    {got:.8g}"
    raise AssertionError(message + (f"\n  hint: {hint}" if hint else ""))


def _run_check(name: str, fn: Callable[..., Any], body: Callable[[Callable[..., Any]], str]) -> Callable[..., Any]:
    """Run ``body`` (which raises AssertionError on a wrong answer and returns a pass message)."""
    try:
        message = body(fn)
    except CheckFailed:
        raise
    except AssertionError as error:
        raise CheckFailed(name, str(error)) from None
    except _Unattempted:
        print(
            f"○ {name}: not attempted yet (the stub raises NotImplementedError).\n"
            f"   Using the reference solution gemlab.notebook.solutions.{name} so the rest of the notebook runs.\n"
            f"   Write your version in the cell above and re-run both cells to check it."
        )
        return getattr(solutions, name)
    print(f"✓ {name}: {message}")
    return fn


# ----- 00_backends ----------------------------------------------------------------------------
def check_perplexity(fn: Callable[[Sequence[float]], float]) -> Callable[[Sequence[float]], float]:
    """``fn(logprobs) -> perplexity``, compared with ``exp(entropy estimate)`` as gemlab logs it
    (``sampler/token_entropy = -mean(logprobs)``)."""
    rng = np.random.default_rng(0)
    cases = [[-0.5], [0.0, 0.0, 0.0], [-0.1, -2.3, -0.7], [-1.0] * 5, (-rng.exponential(1.0, 17)).tolist()]

    def body(fn: Callable[..., Any]) -> str:
        for logprobs in cases:
            call = _call_repr("perplexity", [logprobs])
            got = _as_float(_call(fn, "perplexity", list(logprobs)), call)
            expected = math.exp(-float(np.mean(logprobs)))
            hint = ""
            if _close(got, math.exp(-float(np.sum(logprobs)))) and len(logprobs) > 1:
                hint = "that is exp(-sum): perplexity uses the MEAN logprob per token"
            elif _close(got, 1 / expected):
                hint = "mind the sign: logprobs are <= 0 and perplexity is >= 1"
            _assert_numbers_close(call, got, expected, "exp(-mean(logprobs))", hint)
        return f"matches exp(-mean(logprobs)) on {len(cases)} cases."

    return _run_check("perplexity", fn, body)


# ----- 01_templates ---------------------------------------------------------------------------
def check_chat_prompt(fn: Callable[[str], str], tokenizer: Any) -> Callable[[str], str]:
    """``fn(observation) -> prompt text``, compared with the tokenizer's own chat template
    (gemlab's ``chat`` template) for one user turn with the assistant's turn opened."""
    template = get_template("chat")
    cases = [
        "Hello!",
        "You are playing Guess The Number.\nEnter your first guess to start the game.",
        "At turn 2, you guessed 7, and the target number is lower than 7.",
        "",
    ]

    def body(fn: Callable[..., Any]) -> str:
        for observation in cases:
            call = _call_repr("chat_prompt", [observation])
            got = _call(fn, "chat_prompt", observation)
            expected = template.render_text(observation, tokenizer)
            if not isinstance(got, str):
                raise AssertionError(f"{call} should return a str, got {type(got).__name__}")  # noqa: TRY004 (a check failure)
            if got != expected:
                at = next(
                    (i for i, (a, b) in enumerate(zip(got, expected, strict=False)) if a != b),
                    min(len(got), len(expected)),
                )
                diff = "\n".join(
                    "    " + line
                    for line in difflib.ndiff(
                        [repr(x) for x in expected.splitlines(True)], [repr(x) for x in got.splitlines(True)]
                    )
                    if not line.startswith("?")
                )
                raise AssertionError(
                    f"{call} differs from the tokenizer's chat template at character {at}:\n"
                    f"  expected {expected!r}\n  yours    {got!r}\n"
                    f"  line diff ('-' expected, '+' yours):\n{diff}"
                )
        return f"matches tokenizer.apply_chat_template on {len(cases)} observations."

    return _run_check("chat_prompt", fn, body)


# ----- 02_episodes ----------------------------------------------------------------------------
def play_policy(env: Any, policy: Callable[[str], str], *, target: int | None = None, max_turns: int = 100) -> Episode:
    """Play one episode of ``env`` with a text policy ``observation -> action``.

    ``target`` fixes GuessTheNumber's secret number after the reset (to test every case). The
    episode's transitions carry text only (no tokens: no model was involved).
    """
    observation, _ = env.reset()
    if target is not None:
        env.unwrapped.game_number = target
    return play_episode_now(env, lambda observation: str(policy(observation)), start=observation, max_turns=max_turns)


def _transcript(episode: Episode) -> str:
    return "\n".join(
        f"    turn {i}: action {t.action!r} -> reward {t.reward:+.3g}" for i, t in enumerate(episode.transitions)
    )


def check_binary_search_policy(fn: Callable[[str], str]) -> Callable[[str], str]:
    """``fn(observation) -> action`` must win GuessTheNumber for every secret number, on the easy
    (1..10 in 4 turns) and hard (1..50 in 7 turns) levels, and on 20 random-level games."""
    def body(fn: Callable[..., Any]) -> str:
        def policy(observation: str) -> str:
            action = _call(fn, "binary_search_policy", observation)
            if not isinstance(action, str):
                raise AssertionError(  # noqa: TRY004 (a check failure)
                    f"binary_search_policy should return the action text (a str), got {type(action).__name__}: "
                    f"{_short(action)}"
                )
            return action

        state = random.getstate()
        games = 0
        try:
            for level, targets in (("easy", range(1, 11)), ("hard", range(1, 51)), ("random", [None] * 20)):
                env = make_envs(f"game:GuessTheNumber-v0-{level}", 1, seed=7)[0]
                for target in targets:
                    episode = play_policy(env, policy, target=target)
                    games += 1
                    if not episode.won:
                        inner = env.unwrapped
                        raise AssertionError(
                            f"binary_search_policy lost GuessTheNumber-v0-{level}: the number was {inner.game_number} "
                            f"(range {inner.min_number}..{inner.max_number}, {inner.max_turns} turns).\n"
                            f"{_transcript(episode)}\n"
                            f"  last observation the policy saw:\n    "
                            + episode.transitions[-1].observation.replace("\n", "\n    ")
                        )
        finally:
            random.setstate(state)
        return f"won all {games} games (every number on easy and hard, 20 random-level games)."

    return _run_check("binary_search_policy", fn, body)


# ----- 03_returns_and_rebn --------------------------------------------------------------------
def check_discounted_returns(
    fn: Callable[[Sequence[float], float], Sequence[float]],
) -> Callable[[Sequence[float], float], Sequence[float]]:
    """``fn(rewards, gamma) -> returns``, compared with ``gemlab.returns.discounted_returns``."""
    cases = [
        ([0.0, 0.0, 1.0], 0.9),
        ([-0.1], 0.9),
        ([0.0, 0.0, 0.0, 0.6667], 0.5),
        ([1.0, 2.0, 3.0], 0.0),
        ([1.0, 2.0, 3.0], 1.0),
        ([0.0, -0.1, 0.0, 1.0, 0.5], 0.9),
        ([], 0.9),
    ]

    def body(fn: Callable[..., Any]) -> str:
        for rewards, gamma in cases:
            call = _call_repr("discounted_returns", [rewards, gamma])
            got = _as_floats(_call(fn, "discounted_returns", list(rewards), gamma), call)
            expected = discounted_returns(rewards, gamma)
            hint = ""
            if got == expected[::-1] and got != expected:
                hint = "the returns come out reversed: G_0 belongs to the FIRST turn"
            elif (
                len(got) == len(expected)
                and gamma not in (0.0, 1.0)
                and all(_close(g, e) for g, e in zip(got, discounted_returns(rewards[::-1], gamma)[::-1], strict=True))
            ):
                hint = "you discounted towards the past; G_t sums the rewards from t onwards"
            _assert_lists_close(call, got, expected, "gemlab.returns.discounted_returns", hint)
        return f"matches gemlab.returns.discounted_returns on {len(cases)} cases."

    return _run_check("discounted_returns", fn, body)


def check_rebn(fn: Callable[[Sequence[float]], Sequence[float]]) -> Callable[[Sequence[float]], Sequence[float]]:
    """``fn(returns) -> advantages``, compared with ``gemlab.returns.rebn``."""
    rng = np.random.default_rng(3)
    cases = [
        [1.0, 2.0, 3.0],
        [0.71, 0.9, 1.0, 0.0, -0.1, 0.5],
        [0.5, 0.5, 0.5, 0.5],
        rng.normal(0.3, 0.4, 25).round(3).tolist(),
        [1.0],
    ]

    def body(fn: Callable[..., Any]) -> str:
        for returns in cases:
            call = _call_repr("rebn", [returns])
            got = _as_floats(_call(fn, "rebn", list(returns)), call)
            expected = rebn(returns)
            hint = ""
            n = len(returns)
            if (
                n > 1
                and len(got) == n
                and any(e != 0 for e in expected)
                and all(_close(g, e * math.sqrt(n / (n - 1))) for g, e in zip(got, expected, strict=True))
            ):
                hint = (
                    "that is the population std (divide by n); ReBN uses the unbiased std (divide by n - 1), "
                    "like torch.std"
                )
            elif len(set(returns)) == 1:
                hint = (
                    "when every return is equal the std is 0: the 1e-9 in the denominator makes every "
                    "advantage 0 (not nan)"
                )
            _assert_lists_close(call, got, expected, "gemlab.returns.rebn", hint)
        return f"matches gemlab.returns.rebn on {len(cases)} batches."

    return _run_check("rebn", fn, body)


# ----- 04_training_with_lora ------------------------------------------------------------------
def check_action_mask(fn: Callable[[int, int], Sequence[float]]) -> Callable[[int, int], Sequence[float]]:
    """``fn(num_prompt_tokens, num_action_tokens) -> mask``, compared with where
    ``gemlab.datums.policy_gradient_datum`` puts a non-zero advantage."""
    cases = [(5, 3), (1, 1), (2, 4), (10, 1), (7, 7)]

    def body(fn: Callable[..., Any]) -> str:
        for prompt, action in cases:
            call = _call_repr("action_mask", [prompt, action])
            got = _as_floats(_call(fn, "action_mask", prompt, action), call)
            datum = policy_gradient_datum([1] * prompt, [2] * action, [0.0] * action, advantage=1.0)
            expected = [1.0 if a != 0 else 0.0 for a in datum.loss_fn_inputs["advantages"].tolist()]
            hint = ""
            if len(got) == prompt + action:
                hint = (
                    "a datum is shifted by one (input = seq[:-1], target = seq[1:]): it has prompt + action - "
                    "1 positions"
                )
            _assert_lists_close(
                call, got, expected, "the advantages of gemlab.datums.policy_gradient_datum (non-zero = 1)", hint
            )
        return f"matches gemlab.datums.policy_gradient_datum on {len(cases)} shapes."

    return _run_check("action_mask", fn, body)


def _reference_is_loss(lp: Any, q: Any, a: Any) -> float:
    return float(
        np.sum(
            -np.exp(np.asarray(lp, dtype=np.float64) - np.asarray(q, dtype=np.float64))
            * np.asarray(a, dtype=np.float64)
        )
    )


def check_importance_sampling_loss(fn: Callable[[Any, Any, Any], Any]) -> Callable[[Any, Any, Any], Any]:
    """``fn(learner_logprobs, sampler_logprobs, advantages) -> loss`` (torch tensors in), compared
    with Tinker's ``importance_sampling`` loss ``sum(-exp(lp - q) * A)``."""
    import torch

    rng = np.random.default_rng(4)
    cases = []
    for n in (1, 6, 40):
        q = -rng.exponential(1.0, n)
        lp = q + rng.normal(0, 0.3, n)
        a = rng.normal(0, 1, n) * (rng.random(n) > 0.3)
        cases.append((lp, q, a))
    same = -rng.exponential(1.0, 8)
    cases.append((same, same.copy(), np.r_[np.zeros(4), np.full(4, 0.7)]))

    def body(fn: Callable[..., Any]) -> str:
        for lp, q, a in cases:
            tensors = [torch.tensor(x, dtype=torch.float32) for x in (lp, q, a)]
            call = _call_repr("importance_sampling_loss", tensors)
            got = _as_float(_call(fn, "importance_sampling_loss", *tensors), call)
            expected = _reference_is_loss(*(t.numpy() for t in tensors))
            hint = ""
            if _close(got, -expected):
                hint = (
                    "sign: the loss is MINUS ratio times advantage (gradient descent then raises good actions' "
                    "logprobs)"
                )
            elif _close(got, expected / len(lp)) and len(lp) > 1:
                hint = "Tinker's built-in losses SUM over tokens, they never average"
            elif _close(got, _reference_is_loss(q, lp, a)):
                hint = "the ratio is exp(learner - sampler), pi_theta / q"
            got_close = math.isclose(got, expected, rel_tol=1e-5, abs_tol=1e-5)
            if not got_close:
                _assert_numbers_close(call, got, expected, "sum(-exp(lp - q) * A)", hint)
        return f"matches sum(-exp(lp - q) * A) on {len(cases)} cases."

    return _run_check("importance_sampling_loss", fn, body)


# ----- 05_plotting_results --------------------------------------------------------------------
def check_moving_average(
    fn: Callable[[Sequence[float], int], Sequence[float]],
) -> Callable[[Sequence[float], int], Sequence[float]]:
    """``fn(values, window) -> smoothed``, compared with ``gemlab.plots.smooth`` (trailing mean)."""
    rng = np.random.default_rng(5)
    cases = [
        ([1.0, 2.0, 3.0, 4.0], 2),
        ([5.0], 3),
        ([0.2, 0.4, 0.1], 1),
        (rng.random(30).round(3).tolist(), 5),
        ([0.0, 1.0, 0.0, 1.0], 10),
    ]

    def body(fn: Callable[..., Any]) -> str:
        for values, window in cases:
            call = _call_repr("moving_average", [values, window])
            got = _as_floats(_call(fn, "moving_average", list(values), window), call)
            expected = smooth(values, window).tolist()
            hint = ""
            if len(got) == len(values) - window + 1:
                hint = "keep one value per step: at the start, average the values seen so far"
            elif len(got) == len(expected) and window > 1 and not _close(got[-1], expected[-1]):
                hint = "a TRAILING average: step t averages steps t - window + 1 .. t (never the future)"
            _assert_lists_close(call, got, expected, "gemlab.plots.smooth", hint)
        return f"matches gemlab.plots.smooth on {len(cases)} cases."

    return _run_check("moving_average", fn, body)


#: Every check, by the name of the solution it falls back to (``gemlab.notebook.solutions.<name>``).
CHECKS: dict[str, Callable[..., Callable[..., Any]]] = {
    "perplexity": check_perplexity,
    "chat_prompt": check_chat_prompt,
    "binary_search_policy": check_binary_search_policy,
    "discounted_returns": check_discounted_returns,
    "rebn": check_rebn,
    "action_mask": check_action_mask,
    "importance_sampling_loss": check_importance_sampling_loss,
    "moving_average": check_moving_average,
}
