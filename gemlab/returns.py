"""Discounted per-turn returns and Return Batch Normalization (ReBN).

ReBN (GEM paper, arXiv 2510.01051) normalizes every transition's return by the mean and standard
deviation of all returns in the batch. Unlike GRPO it needs no groups of episodes that share a
state, which multi-turn games cannot provide. The alternatives a researcher compares against live
here too, as pure functions on lists of floats.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Hashable, Sequence

import numpy as np

EPS = 1e-9
ADVANTAGES = {  # the advantage estimators Config.advantage selects
    "rebn": "(G - batch mean) / (batch std + 1e-9), GEM's ReBN",
    "none": "raw discounted returns",
    "center": "G - batch mean (no scaling)",
    "group": "(G - group mean) / (group std + 1e-9) within transitions that share a state (GRPO-style)",
    "grpo": "GRPO: each episode's total reward (gamma 1), normalized within its group of episodes on one problem, for every turn",
}


def discounted_returns(rewards: Sequence[float], gamma: float) -> list[float]:
    """Per-turn returns of one episode: ``G_t = r_t + gamma * G_{t+1}``, with ``G_T = r_T``."""
    returns: list[float] = []
    running = 0.0
    for reward in reversed(rewards):
        running = float(reward) + gamma * running
        returns.append(running)
    return returns[::-1]


def _std(values: np.ndarray) -> float:
    # torch.std's unbiased estimate, as GEM's example uses; a single value has spread 0.
    return float(values.std(ddof=1)) if values.size > 1 else 0.0


def rebn(returns: Sequence[float]) -> list[float]:
    """Return Batch Normalization: ``(G - mean) / (std + 1e-9)`` over the whole batch.

    A batch whose returns are all equal carries no signal and gets advantage exactly 0. (GEM's
    float32 code divides the mean's rounding error, about 1e-9, by a std of the same size, and
    can give every transition the same advantage of about +-0.9; float64 alone leaves 1e-8.)
    """
    values = np.asarray(returns, dtype=np.float64)
    if values.size == 0:
        return []
    if np.all(values == values[0]):
        return [0.0] * values.size
    return ((values - values.mean()) / (_std(values) + EPS)).tolist()


def center(returns: Sequence[float]) -> list[float]:
    """Subtract the batch mean only (a baseline, no scaling)."""
    values = np.asarray(returns, dtype=np.float64)
    return (values - values.mean()).tolist() if values.size else []


def group_normalize(returns: Sequence[float], groups: Sequence[Hashable]) -> list[float]:
    """GRPO-style: normalize within each group of transitions that share a key (e.g. a state).

    A group of one gets advantage 0: with no sibling to compare against, there is no signal.
    """
    if len(returns) != len(groups):
        raise ValueError(f"{len(returns)} returns but {len(groups)} group keys")
    members: dict[Hashable, list[int]] = defaultdict(list)
    for index, key in enumerate(groups):
        members[key].append(index)
    out = [0.0] * len(returns)
    for indices in members.values():
        for index, value in zip(indices, rebn([returns[i] for i in indices])):
            out[index] = value
    return out


def normalize(returns: Sequence[float], method: str = "rebn", groups: Sequence[Hashable] | None = None) -> list[float]:
    """Turn returns into advantages with one of ``ADVANTAGES``."""
    if method == "rebn":
        return rebn(returns)
    if method == "none":
        return [float(g) for g in returns]
    if method == "center":
        return center(returns)
    if method in ("group", "grpo"):
        if groups is None:
            raise ValueError(f"advantage {method!r} needs a group key per return")
        return group_normalize(returns, groups)
    raise ValueError(f"Unknown advantage {method!r}. Known: {', '.join(ADVANTAGES)}")
