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
| gspo | ``-min(s_t * A, clip(s_t, lo, hi) * A)``, ``s_t = stopgrad(s) * exp(lp - stopgrad(lp))`` |
| stable_reinforce | ``-r * A`` (see ``stable_reinforce`` below: no published formula) |

``lo``/``hi`` are ``clip_low_threshold``/``clip_high_threshold``, absolute ratio bounds: 0.8 and
1.2 for ppo (epsilon 0.2, https://tinker-docs.thinkingmachines.ai/tinker/losses/ppo), 0.0 and 4.0
for cispo (https://tinker-docs.thinkingmachines.ai/tinker/losses/cispo),
``1 - 3e-4`` and ``1 + 4e-4`` for gspo (the GSPO paper's range; Tinker's page states none);
``beta`` is required for dro. For gspo, ``s`` is the sequence ratio
``exp(mean(lp - q))`` over the tokens that ``sequence_ratio_mask`` marks.
cross_entropy also takes 2-D ``(N, K)`` ``target_tokens`` and ``weights`` (K targets per position).
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


def gspo(lp: Tensor, inputs: Mapping[str, Tensor], config: Config) -> Tensor:
    """GSPO-token (Zheng et al., 2025, arXiv 2507.18071) as Tinker implements it
    (https://tinker-docs.thinkingmachines.ai/tinker/losses/gspo): every token carries the value of
    the sequence ratio (the geometric mean of the token ratios over ``sequence_ratio_mask``) and
    the gradient of its own logprob, inside PPO's clipped surrogate."""
    in_ratio = inputs["sequence_ratio_mask"] != 0
    log_ratio = (lp.detach() - inputs["logprobs"])[in_ratio].mean() if bool(in_ratio.any()) else lp.new_zeros(())
    ratio = torch.exp(log_ratio + lp - lp.detach())
    clipped = torch.clamp(ratio, config["clip_low_threshold"], config["clip_high_threshold"])
    advantages = inputs["advantages"]
    return -torch.minimum(ratio * advantages, clipped * advantages)


def stable_reinforce(lp: Tensor, inputs: Mapping[str, Tensor], config: Config) -> Tensor:
    """LOCAL STAND-IN, NOT TINKER'S FORMULA. Tinker documents ``stable_reinforce``
    (https://tinker-docs.thinkingmachines.ai/tinker/losses/stable-reinforce) as a REINFORCE
    variant that stays stable off-policy using "minimal additional information captured at
    sampling time" (``record_stability_info=True``, datums annotated with ``sequence_id``
    provenance), but publishes no formula. Locally, sampler and learner share weights and
    numerics, so this computes what the cookbook's data evidently expects of a REINFORCE loss:
    importance-sampled REINFORCE, ``-exp(lp - q) * A``, the same as ``importance_sampling``."""
    return importance_sampling(lp, inputs, config)


@dataclass(frozen=True)
class LossSpec:
    """A built-in loss: its function, the per-token inputs it needs and its config defaults
    (``None``: required)."""

    fn: Callable[[Tensor, Mapping[str, Tensor], Config], Tensor]
    inputs: tuple[str, ...]
    config: Mapping[str, float | None]


_RL_INPUTS = ("target_tokens", "logprobs", "advantages")
# Defaults as Tinker documents them (https://tinker-docs.thinkingmachines.ai/tinker/losses/*);
# gspo's are the GSPO paper's (section 5.1: 3e-4 below, 4e-4 above), as Tinker's page gives none.
LOSSES: dict[str, LossSpec] = {
    "cross_entropy": LossSpec(cross_entropy, ("target_tokens", "weights"), {}),
    "importance_sampling": LossSpec(importance_sampling, _RL_INPUTS, {}),
    "ppo": LossSpec(ppo, _RL_INPUTS, {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}),
    "cispo": LossSpec(cispo, _RL_INPUTS, {"clip_low_threshold": 0.0, "clip_high_threshold": 4.0}),
    "dro": LossSpec(dro, _RL_INPUTS, {"beta": None}),
    "gspo": LossSpec(
        gspo,
        (*_RL_INPUTS, "sequence_ratio_mask"),
        {"clip_low_threshold": 1 - 3e-4, "clip_high_threshold": 1 + 4e-4},
    ),
    "stable_reinforce": LossSpec(stable_reinforce, _RL_INPUTS, {}),
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
