"""Returns and normalizations, pinned to values computed by hand."""

import math

import numpy as np
import pytest

from gemlab.config import make_config
from gemlab.episodes import Episode, Transition
from gemlab.returns import (
    ADVANTAGES,
    Estimator,
    advantages,
    batch_returns,
    center,
    discounted_returns,
    group_normalize,
    rebn,
)


def test_discounted_returns_three_turns_gamma_09():
    # G_2 = 1; G_1 = 0 + 0.9 * 1 = 0.9; G_0 = -0.1 + 0.9 * 0.9 = 0.71
    assert discounted_returns([-0.1, 0.0, 1.0], 0.9) == pytest.approx([0.71, 0.9, 1.0])


def test_discounted_returns_edge_gammas():
    assert discounted_returns([1.0, 2.0, 3.0], 0.0) == [1.0, 2.0, 3.0]
    assert discounted_returns([1.0, 2.0, 3.0], 1.0) == [6.0, 5.0, 3.0]
    assert discounted_returns([], 0.9) == []


def test_rebn_small_batch_by_hand():
    # mean 2, unbiased std sqrt(((1-2)^2 + 0 + (3-2)^2) / 2) = 1
    assert rebn([1.0, 2.0, 3.0]) == pytest.approx([-1.0, 0.0, 1.0])


def test_rebn_has_mean_zero_and_std_one():
    out = np.array(rebn([0.71, 0.9, 1.0, 0.0, -0.1, 0.5]))
    assert out.mean() == pytest.approx(0.0, abs=1e-12)
    assert out.std(ddof=1) == pytest.approx(1.0, rel=1e-6)


def test_rebn_equal_returns_hit_the_guard_not_nan():
    out = rebn([0.5, 0.5, 0.5, 0.5])
    assert out == [0.0, 0.0, 0.0, 0.0]
    assert not any(math.isnan(x) for x in rebn([1.0]))


def test_rebn_of_equal_returns_is_exactly_zero_where_float32_gives_a_uniform_push():
    import torch

    for returns in ([-0.1] * 128, [0.1] * 7, [0.81] * 32):
        assert rebn(returns) == [0.0] * len(returns)
        as_gem = torch.tensor(returns).float()  # GEM's example: float32, torch.std
        gem = (as_gem - as_gem.mean()) / (as_gem.std() + 1e-9)
        if returns[0] in (-0.1, 0.1):
            assert gem.abs().min() > 0.5  # every transition pushed the same way, from rounding alone


def test_center_and_none():
    assert center([1.0, 2.0, 6.0]) == pytest.approx([-2.0, -1.0, 3.0])


def test_group_normalize_within_groups_only():
    out = group_normalize([1.0, 3.0, 10.0, 5.0], ["a", "a", "b", "c"])
    # group a: mean 2, unbiased std sqrt(2); singletons b and c get 0
    assert out == pytest.approx([-1 / math.sqrt(2), 1 / math.sqrt(2), 0.0, 0.0])


def test_group_normalize_explodes_on_near_equal_returns():
    # why GRPO-style groups are fragile: a tiny spread is blown up to +-0.7
    out = group_normalize([0.5, 0.5 + 1e-8], ["s", "s"])
    assert abs(out[0]) > 0.5


def episode(rewards: list[float], group: tuple[int, int] | None = None, obs: list[list[int]] | None = None) -> Episode:
    obs = obs or [[i] for i in range(len(rewards))]
    return Episode(
        transitions=[
            Transition(obs_tokens=o, act_tokens=[9], act_logprobs=[-0.1], reward=r, done=i == len(rewards) - 1)
            for i, (o, r) in enumerate(zip(obs, rewards, strict=True))
        ],
        group=group,
    )


def test_every_estimator_gives_one_advantage_per_transition_in_order():
    batch = [
        episode([0.0, 1.0], (0, 0)),
        episode([0.0, 0.0, 0.5], (0, 0)),
        episode([1.0], (0, 1)),
        episode([0.0], (0, 1)),
    ]
    returns = [0.5, 1.0, 0.125, 0.25, 0.5, 1.0, 0.0]  # gamma 0.5, episode by episode
    assert batch_returns(batch, 0.5) == returns
    assert advantages(batch, "none", 0.5) == returns
    assert advantages(batch, "rebn", 0.5) == pytest.approx(rebn(returns))
    assert advantages(batch, "center", 0.5) == pytest.approx(center(returns))
    assert advantages(batch) == pytest.approx(rebn([1.0, 1.0, 0.5, 0.5, 0.5, 1.0, 0.0]))  # ReBN, gamma 1 by default
    # GRPO: totals 1.0 and 0.5 in group (0, 0), 1.0 and 0.0 in (0, 1); each episode's score on all its turns
    a, b = 1 / math.sqrt(2), -1 / math.sqrt(2)
    assert advantages(batch, "grpo", 0.5) == pytest.approx([a, a, b, b, b, a, b])
    # group: transitions that share an observation ([0] opens every episode, [1] is two second turns, [2] alone)
    shared = advantages(batch, "group", 0.5)
    assert shared == pytest.approx(group_normalize(returns, [0, 1, 0, 1, 2, 0, 0]))
    assert shared[1] == pytest.approx(1 / math.sqrt(2)) and shared[4] == 0.0
    assert set(ADVANTAGES) == {"rebn", "none", "center", "group", "grpo"}


def test_advantages_refuse_an_unknown_method_and_grpo_without_groups():
    with pytest.raises(ValueError, match="Unknown advantage 'zscore'. Known: rebn, none, center, group, grpo"):
        advantages([episode([1.0])], "zscore")
    with pytest.raises(ValueError, match="needs episodes played in groups"):
        advantages([episode([1.0])], "grpo")


def test_a_new_estimator_that_needs_groups_gets_them_asked_for(monkeypatch):
    """The registry entry alone decides: an estimator declared ``needs_groups`` (RLOO, say) is refused
    without groups by the config and by ``advantages``, as GRPO is, with no name checked anywhere else."""
    rloo = Estimator(
        "leave-one-out", lambda episodes, gamma: [0.0 for e in episodes for _ in e.transitions], needs_groups=True
    )
    monkeypatch.setitem(ADVANTAGES, "rloo", rloo)
    with pytest.raises(ValueError, match="advantage='rloo' compares episodes of one problem: set group_size >= 2"):
        make_config("laptop", advantage="rloo")
    assert make_config("laptop", advantage="rloo", group_size=2).group_size == 2
    with pytest.raises(ValueError, match="advantage 'rloo' needs episodes played in groups"):
        advantages([episode([1.0])], "rloo")
    assert [name for name, estimator in ADVANTAGES.items() if estimator.needs_groups] == ["grpo", "rloo"]
