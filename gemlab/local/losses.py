"""Tinker's built-in losses, as pure functions of tensors.

Each takes the learner's logprobs ``lp`` of one datum's target tokens, that datum's
``loss_fn_inputs`` as tensors and the ``loss_fn_config``, and returns the per-token
(elementwise) loss. The loss of a batch is the plain sum of every element of every datum,
never a mean, exactly as Tinker defines it
(https://tinker-docs.thinkingmachines.ai/losses). With ``q`` the sampler's logprobs
(``inputs["logprobs"]``), ``A`` the advantages and ``r = exp(lp - q)``:

| loss | elementwise loss |
|---|---|
| cross_entropy | ``-lp * weights`` |
| importance_sampling | ``-r * A`` |
| ppo | ``-min(r * A, clip(r, lo, hi) * A)`` |
| cispo | ``-stopgrad(clip(r, lo, hi)) * lp * A`` |
| dro | ``-(lp * A - beta / 2 * (lp - q) ** 2)`` |

``lo``/``hi`` are ``clip_low_threshold``/``clip_high_threshold`` (absolute ratio bounds,
default 0.8 and 1.2); ``beta`` is required for dro.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

Tensor = torch.Tensor
Config = Mapping[str, float]


def cross_entropy(lp: Tensor, inputs: Mapping[str, Tensor], config: Config) -> Tensor:
    """Weighted negative log-likelihood of the target tokens."""
    return -lp * inputs["weights"]


def importance_sampling(lp: Tensor, inputs: Mapping[str, Tensor], config: Config) -> Tensor:
    """REINFORCE with an importance ratio between the learner and the sampler."""
    ratio = torch.exp(lp - inputs["logprobs"])
    return -ratio * inputs["advantages"]


def ppo(lp: Tensor, inputs: Mapping[str, Tensor], config: Config) -> Tensor:
    """PPO's clipped surrogate, token by token."""
    ratio = torch.exp(lp - inputs["logprobs"])
    clipped = torch.clamp(ratio, config["clip_low_threshold"], config["clip_high_threshold"])
    advantages = inputs["advantages"]
    return -torch.minimum(ratio * advantages, clipped * advantages)


def cispo(lp: Tensor, inputs: Mapping[str, Tensor], config: Config) -> Tensor:
    """Policy gradient weighted by the clipped ratio, which carries no gradient itself."""
    ratio = torch.exp(lp - inputs["logprobs"])
    clipped = torch.clamp(ratio, config["clip_low_threshold"], config["clip_high_threshold"]).detach()
    return -clipped * lp * inputs["advantages"]


def dro(lp: Tensor, inputs: Mapping[str, Tensor], config: Config) -> Tensor:
    """Policy gradient with a quadratic penalty on the learner/sampler log-ratio."""
    log_ratio = lp - inputs["logprobs"]
    return -(lp * inputs["advantages"] - 0.5 * config["beta"] * log_ratio**2)


@dataclass(frozen=True)
class LossSpec:
    """A built-in loss: its function, the per-token inputs it needs and its config defaults
    (``None``: required)."""

    fn: Callable[[Tensor, Mapping[str, Tensor], Config], Tensor]
    inputs: tuple[str, ...]
    config: Mapping[str, float | None]


_RL_INPUTS = ("target_tokens", "logprobs", "advantages")
_CLIP = {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}
LOSSES: dict[str, LossSpec] = {
    "cross_entropy": LossSpec(cross_entropy, ("target_tokens", "weights"), {}),
    "importance_sampling": LossSpec(importance_sampling, _RL_INPUTS, {}),
    "ppo": LossSpec(ppo, _RL_INPUTS, _CLIP),
    "cispo": LossSpec(cispo, _RL_INPUTS, _CLIP),
    "dro": LossSpec(dro, _RL_INPUTS, {"beta": None}),
}


def loss_spec(name: str) -> LossSpec:
    """The built-in loss ``name``, or an error listing the ones that exist."""
    if name not in LOSSES:
        raise ValueError(
            f"Unknown loss_fn {name!r}. The local backend has: {', '.join(LOSSES)} "
            "(and forward_backward_custom for any differentiable function of the logprobs)"
        )
    return LOSSES[name]


def resolve_config(name: str, config: Mapping[str, float | str] | None) -> dict[str, float]:
    """``loss_fn_config`` completed with the loss's defaults; unknown or missing keys raise."""
    spec = loss_spec(name)
    given = dict(config or {})
    unknown = sorted(set(given) - set(spec.config))
    if unknown:
        allowed = ", ".join(spec.config) or "none"
        raise ValueError(f"loss_fn_config keys {unknown} are not used by {name!r}; it takes: {allowed}")
    resolved: dict[str, float] = {}
    for key, default in spec.config.items():
        value = given.get(key, default)
        if value is None:
            raise ValueError(f"{name!r} needs loss_fn_config={{{key!r}: ...}}")
        resolved[key] = float(value)
    return resolved
