"""Discounted per-turn returns, Return Batch Normalization (ReBN), and the one registry of
advantage estimators.

ReBN (GEM paper, arXiv 2510.01051) normalizes every transition's return by the mean and standard
deviation of all returns in the batch. Unlike GRPO it needs no groups of episodes that share a
state, which multi-turn games cannot provide. The alternatives a researcher compares against live
here too, as pure functions on lists of floats; ``ADVANTAGES`` maps each ``Config.advantage`` name
to an estimator from a batch's episodes to one advantage per transition (and says whether it needs
groups of episodes on one problem, which ``Config`` then asks for), and ``advantages`` is what the
training step calls. A new estimator is one function and one entry here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:  # annotations only: Config reads ADVANTAGES without loading Tinker's types (torch)
    from gemlab.episodes import Episode

EPS = 1e-9


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
        for index, value in zip(indices, rebn([returns[i] for i in indices]), strict=True):
            out[index] = value
    return out


def batch_returns(episodes: Sequence[Episode], gamma: float) -> list[float]:
    """Every transition's discounted return, episode by episode, turn by turn."""
    return [g for episode in episodes for g in discounted_returns([t.reward for t in episode.transitions], gamma)]


def _rebn(episodes: Sequence[Episode], gamma: float) -> list[float]:
    return rebn(batch_returns(episodes, gamma))  # ALGO LOGIC: GEM's ReBN


def _raw(episodes: Sequence[Episode], gamma: float) -> list[float]:
    return batch_returns(episodes, gamma)


def _center(episodes: Sequence[Episode], gamma: float) -> list[float]:
    return center(batch_returns(episodes, gamma))


def _same_state(episodes: Sequence[Episode], gamma: float) -> list[float]:
    states = [tuple(t.obs_tokens) for episode in episodes for t in episode.transitions]
    return group_normalize(batch_returns(episodes, gamma), states)


def _grpo(episodes: Sequence[Episode], gamma: float) -> list[float]:
    """Each episode's total reward normalized within its group, on every one of its turns (gamma unused)."""
    scores = group_normalize([e.total_reward for e in episodes], [e.group for e in episodes])  # ALGO LOGIC
    return [score for episode, score in zip(episodes, scores, strict=True) for _ in episode.transitions]


class Estimator(NamedTuple):
    description: str
    estimate: Callable[[Sequence[Episode], float], list[float]]  # (episodes, gamma) -> one advantage per transition
    needs_groups: bool = False  # compares episodes of one problem: a config must set group_size >= 2


ADVANTAGES: dict[str, Estimator] = {  # what Config.advantage selects
    "rebn": Estimator("(G - batch mean) / (batch std + 1e-9), GEM's ReBN", _rebn),
    "none": Estimator("raw discounted returns", _raw),
    "center": Estimator("G - batch mean (no scaling)", _center),
    "group": Estimator(
        "(G - group mean) / (group std + 1e-9) within transitions that share a state (GRPO-style)", _same_state
    ),
    "grpo": Estimator(
        "GRPO: each episode's total reward (gamma 1), normalized within its group of episodes on one problem, "
        "for every turn",
        _grpo,
        needs_groups=True,
    ),
}


def advantages(episodes: Sequence[Episode], method: str = "rebn", gamma: float = 1.0) -> list[float]:
    """One advantage per transition of ``episodes`` (in order) by the estimator ``method`` names."""
    if method not in ADVANTAGES:
        raise ValueError(f"Unknown advantage {method!r}. Known: {', '.join(ADVANTAGES)}")
    if ADVANTAGES[method].needs_groups and any(e.group is None for e in episodes):
        raise ValueError(f"advantage {method!r} needs episodes played in groups (group_size >= 2)")
    return ADVANTAGES[method].estimate(episodes, gamma)
