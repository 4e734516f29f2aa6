"""Transitions become ``tinker.types.Datum``s, exactly as GEM's Tinker example builds them.

A datum holds one prompt+action sequence shifted by one: ``model_input[i]`` predicts
``target_tokens[i]``. Prompt positions carry advantage 0 and sampler logprob 0, so only the
action tokens are trained; each action token carries the transition's (normalized) return.
"""

from __future__ import annotations

from typing import Sequence

import torch
from tinker import types


def policy_gradient_datum(
    obs_tokens: Sequence[int],
    act_tokens: Sequence[int],
    act_logprobs: Sequence[float],
    advantage: float,
) -> types.Datum:
    """One datum for the ``importance_sampling`` (or ``ppo``/``cispo``) loss."""
    if len(act_tokens) != len(act_logprobs):
        raise ValueError(f"{len(act_tokens)} action tokens but {len(act_logprobs)} logprobs")
    if not obs_tokens or not act_tokens:
        raise ValueError("a datum needs at least one prompt token and one action token")
    tokens = list(obs_tokens) + list(act_tokens)
    prompt_targets = len(obs_tokens) - 1  # targets that are still prompt tokens, after the shift
    logprobs = [0.0] * prompt_targets + [float(x) for x in act_logprobs]
    advantages = [0.0] * prompt_targets + [float(advantage)] * len(act_tokens)
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
