"""Returns and normalizations, pinned to values computed by hand."""

import math

import numpy as np
import pytest

from gemlab.returns import center, discounted_returns, group_normalize, normalize, rebn


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
    assert normalize([1.0, 2.0], "none") == [1.0, 2.0]


def test_group_normalize_within_groups_only():
    out = group_normalize([1.0, 3.0, 10.0, 5.0], ["a", "a", "b", "c"])
    # group a: mean 2, unbiased std sqrt(2); singletons b and c get 0
    assert out == pytest.approx([-1 / math.sqrt(2), 1 / math.sqrt(2), 0.0, 0.0])


def test_group_normalize_explodes_on_near_equal_returns():
    # why GRPO-style groups are fragile: a tiny spread is blown up to +-0.7
    out = group_normalize([0.5, 0.5 + 1e-8], ["s", "s"])
    assert abs(out[0]) > 0.5


def test_normalize_rejects_unknown_method():
    with pytest.raises(ValueError, match="Unknown advantage 'zscore'"):
        normalize([1.0], "zscore")
    with pytest.raises(ValueError, match="group key"):
        normalize([1.0], "group")
