"""Transitions become ``tinker.types.Datum``s, as GEM's Tinker example builds them, with an
episode's turns merged into one datum where they form one conversation, as tinker-cookbook does.

A datum holds one prompt+action sequence shifted by one: ``model_input[i]`` predicts
``target_tokens[i]``. Prompt positions carry advantage 0 and sampler logprob 0, so only the
action tokens are trained; each action token carries the transition's (normalized) return.

Where each turn's prompt begins with the previous turn's prompt and action (a conversation: the
environment's reply and the next header follow), the turns of an episode share their tokens, so
one datum holds them all: the last turn's prompt and action, each turn's action tokens carrying
that turn's advantage and sampler logprobs, and every other token (what the environment added,
the first prompt) 0. An episode of T turns then costs the learner its length once instead of
O(T^2) tokens. Its loss is the per-turn datums' (each action token sees the same tokens before it
and carries the same inputs; a token of advantage 0 adds 0 to a per-token loss), up to float
rounding. Where the relation breaks (a template that renders each turn afresh), each turn is its
own datum, exactly as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from tinker import types


class Turn(Protocol):
    """What a datum needs of a transition (``gemlab.episodes.Transition`` has it)."""

    obs_tokens: list[int]
    act_tokens: list[int]
    act_logprobs: list[float]


@dataclass(frozen=True)
class Placement:
    """Where a transition is trained: datum ``datum``, whose first ``length`` targets are its own
    per-turn datum's (its prompt and action), the last ``actions`` of them its action."""

    datum: int
    length: int
    actions: int


def policy_gradient_datum(
    obs_tokens: Sequence[int],
    act_tokens: Sequence[int],
    act_logprobs: Sequence[float],
    advantage: float,
) -> types.Datum:
    """One datum for the ``importance_sampling`` (or ``ppo``/``cispo``) loss."""
    _check(obs_tokens, act_tokens, act_logprobs)
    return _datum(list(obs_tokens) + list(act_tokens), [(len(obs_tokens), act_logprobs, advantage)])


def extends(turn: Turn, earlier: Turn) -> bool:
    """Whether ``turn``'s prompt begins with ``earlier``'s prompt and action."""
    seen = len(earlier.obs_tokens) + len(earlier.act_tokens)
    return (
        len(turn.obs_tokens) >= seen
        and turn.obs_tokens[: len(earlier.obs_tokens)] == earlier.obs_tokens
        and turn.obs_tokens[len(earlier.obs_tokens) : seen] == earlier.act_tokens
    )


def policy_gradient_datums(
    turns: Sequence[Turn], advantages: Sequence[float], places: Sequence[tuple[int, int]]
) -> tuple[list[types.Datum], list[Placement]]:
    """Datums for ``turns`` (``places[i]``: turn ``i``'s episode and its index in it): each run of an
    episode's turns in which every prompt begins with the previous turn's prompt and action
    becomes one datum, every other turn its own, in the order of each datum's first turn in
    ``turns``. Returns the datums and where each turn went."""
    episodes: dict[int, list[int]] = {}
    for i, (episode, _) in enumerate(places):
        episodes.setdefault(episode, []).append(i)
    runs: list[list[int]] = []
    for members in episodes.values():
        members.sort(key=lambda i: places[i][1])
        run: list[int] = []
        for i in members:
            if run and extends(turns[i], turns[run[-1]]):
                run.append(i)
            else:
                run = [i]
                runs.append(run)
    runs.sort(key=min)
    datums: list[types.Datum] = []
    placements: list[Placement | None] = [None] * len(turns)
    for run in runs:
        for i in run:
            _check(turns[i].obs_tokens, turns[i].act_tokens, turns[i].act_logprobs)
            placements[i] = Placement(
                len(datums), len(turns[i].obs_tokens) + len(turns[i].act_tokens) - 1, len(turns[i].act_tokens)
            )
        last = turns[run[-1]]
        spans = [(len(turns[i].obs_tokens), turns[i].act_logprobs, advantages[i]) for i in run]
        datums.append(_datum(list(last.obs_tokens) + list(last.act_tokens), spans))
    return datums, placements  # type: ignore[return-value]


def turn_output(output: dict[str, Any], placement: Placement) -> dict[str, Any]:
    """The learner's output for one turn, as its own per-turn datum would have it: the logprobs of
    its prompt and action, and the elementwise loss of its action alone."""
    logprobs = output["logprobs"].to_torch()[: placement.length]
    loss = torch.zeros(placement.length)
    if "elementwise_loss" in output:
        own = slice(placement.length - placement.actions, placement.length)
        loss[own] = output["elementwise_loss"].to_torch()[own].float()
    return {"logprobs": types.TensorData.from_torch(logprobs), "elementwise_loss": types.TensorData.from_torch(loss)}


def _check(obs_tokens: Sequence[int], act_tokens: Sequence[int], act_logprobs: Sequence[float]) -> None:
    if len(act_tokens) != len(act_logprobs):
        raise ValueError(f"{len(act_tokens)} action tokens but {len(act_logprobs)} logprobs")
    if not obs_tokens or not act_tokens:
        raise ValueError("a datum needs at least one prompt token and one action token")


def _datum(tokens: list[int], spans: Sequence[tuple[int, Sequence[float], float]]) -> types.Datum:
    """A policy-gradient datum of ``tokens``; each span ``(start, logprobs, advantage)`` trains the
    tokens from position ``start`` on (the target before a token predicts it)."""
    logprobs = [0.0] * (len(tokens) - 1)
    advantages = [0.0] * (len(tokens) - 1)
    for start, span_logprobs, advantage in spans:
        for offset, logprob in enumerate(span_logprobs):
            logprobs[start - 1 + offset] = float(logprob)
            advantages[start - 1 + offset] = float(advantage)
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": types.TensorData.from_torch(torch.tensor(tokens[1:], dtype=torch.int64)),
            "logprobs": types.TensorData.from_torch(torch.tensor(logprobs, dtype=torch.float32)),
            "advantages": types.TensorData.from_torch(torch.tensor(advantages, dtype=torch.float32)),
        },
    )


def supervised_datum(prompt_tokens: Sequence[int], answer_tokens: Sequence[int]) -> types.Datum:
    """One datum for the ``cross_entropy`` loss: weight 1 on the answer tokens, 0 on the prompt."""
    if not prompt_tokens or not answer_tokens:
        raise ValueError("a datum needs at least one prompt token and one answer token")
    tokens = list(prompt_tokens) + list(answer_tokens)
    weights = [0.0] * (len(prompt_tokens) - 1) + [1.0] * len(answer_tokens)
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": types.TensorData.from_torch(torch.tensor(tokens[1:], dtype=torch.int64)),
            "weights": types.TensorData.from_torch(torch.tensor(weights, dtype=torch.float32)),
        },
    )
