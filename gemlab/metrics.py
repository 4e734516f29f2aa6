"""Per-step metrics, named as GEM's example names them.

Episode statistics cover every episode collected in the step; the entropy estimate and the two
sample-vs-train KL estimates cover the transitions actually trained on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from gemlab.episodes import RolloutBatch, Transition

# Above this fraction of dropped episodes the episode metrics are biased (long, losing games fail
# more often), and the trainer says so.
DROP_RATE_WARNING = 0.05


def rollout_metrics(batch: RolloutBatch) -> dict[str, float]:
    """Return, success, turns and action length per episode; episodes dropped. Turns per won
    episode are left out of a step that won no episode."""
    episodes = batch.episodes
    won = [e.num_turns for e in episodes if e.won]
    return ({"sampler/num_turns_per_won_episode": float(np.mean(won))} if won else {}) | {
        "sampler/episode_return": float(np.mean([e.total_reward for e in episodes])),
        "sampler/success_rate": float(np.mean([e.won for e in episodes])),
        "sampler/num_turns_per_episode": float(np.mean([e.num_turns for e in episodes])),
        "sampler/action_num_tokens": float(np.mean([sum(len(t.act_tokens) for t in e.transitions) for e in episodes])),
        "sampler/num_episodes": float(len(episodes)),
        "sampler/episodes_dropped": float(batch.num_dropped),
        "sampler/drop_rate": batch.drop_rate,
        "sampler/sample_retries": float(batch.num_retries),
    }


def policy_metrics(transitions: Sequence[Transition], loss_fn_outputs: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Token entropy estimate and sample-vs-train KL over the trained transitions.

    ``entropy ~ -mean(sampler logprob)`` over action tokens. With ``d = sampler - learner``
    logprob per action token: ``kl_v1 = mean(d)``, ``kl_v2 = 0.5 * mean(d**2)`` and
    ``logprob_diff_abs = mean(|d|)`` (how off-policy the batch is, as tinker-atropos plots it).
    All are ~0 when the sampler and the learner hold the same weights.
    """
    sampler: list[float] = []
    diffs: list[np.ndarray] = []
    for transition, output in zip(transitions, loss_fn_outputs, strict=True):
        n = len(transition.act_logprobs)
        learner = np.asarray(output["logprobs"].tolist(), dtype=np.float64)[-n:] if n else np.zeros(0)
        sampler.extend(transition.act_logprobs)
        diffs.append(np.asarray(transition.act_logprobs, dtype=np.float64) - learner)
    d = np.concatenate(diffs) if diffs else np.zeros(0)
    if d.size == 0:
        return {
            "sampler/token_entropy": 0.0,
            "train/kl_sample_train_v1": 0.0,
            "train/kl_sample_train_v2": 0.0,
            "train/logprob_diff_abs": 0.0,
        }
    return {
        "sampler/token_entropy": float(-np.mean(sampler)),
        "train/kl_sample_train_v1": float(d.mean()),
        "train/kl_sample_train_v2": float(0.5 * (d**2).mean()),
        "train/logprob_diff_abs": float(np.abs(d).mean()),
    }


def staleness_metrics(transitions: Sequence[Transition], step: int) -> dict[str, float]:
    """How many optimizer steps behind the learner the trained transitions were sampled."""
    lags = np.asarray([step - t.sampler_version for t in transitions], dtype=np.float64)
    return {
        "async/staleness_mean": float(lags.mean()) if lags.size else 0.0,
        "async/staleness_max": float(lags.max()) if lags.size else 0.0,
    }
