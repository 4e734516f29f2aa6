"""gemlab.studies.stats against answers worked out by hand or taken from published tables."""

import math

import numpy as np
import pytest

from gemlab.studies import stats


def test_paired_sign_flip_p_is_exact():
    # six positive differences: only the all-plus and all-minus of 2**6 sign flips are as extreme
    assert stats.paired_contrast([1, 2, 3, 4, 5, 6], [0] * 6).p == pytest.approx(2 / 64)
    # differences 1, -1, 2 (mean 2/3): 6 of the 8 sign flips have |mean| >= 2/3
    result = stats.paired_contrast([1, -1, 2], [0, 0, 0])
    assert result.p == pytest.approx(6 / 8) and result.difference == pytest.approx(2 / 3)
    # three seeds can never go below 2/8, whatever the effect
    assert stats.paired_contrast([10, 11, 12], [0, 0, 0]).p == pytest.approx(0.25)
    with pytest.raises(ValueError, match="same seeds"):
        stats.paired_contrast([1, 2], [1])


def test_a_pilots_single_seed_gives_its_difference_and_p_1():
    # one pair: flipping its sign gives the same |mean|, so both of the two flips are as extreme
    one = stats.paired_contrast([0.75], [0.5])
    assert (one.difference, one.p, one.n) == (0.25, 1.0, 1) and math.isnan(one.low) and math.isnan(one.high)
    none = stats.paired_contrast([], [])
    assert math.isnan(none.difference) and none.p == 1.0 and none.n == 0


def test_unpaired_permutation_p_counts_the_two_most_extreme_splits():
    # 20 ways to split six values 3/3; only {1,2,3} / {4,5,6} and its mirror are as extreme
    assert stats.unpaired_contrast([1, 2, 3], [4, 5, 6]).p == pytest.approx(2 / 20)


def test_holm_matches_the_textbook_step_down():
    # R: p.adjust(c(0.01, 0.02, 0.03, 0.04, 0.05), "holm")
    assert stats.holm([0.01, 0.02, 0.03, 0.04, 0.05]) == pytest.approx([0.05, 0.08, 0.09, 0.09, 0.09])
    # unsorted input keeps its order: 0.005*4, 0.01*3, max(0.03*2, ...), 0.04*1 -> 0.06
    assert stats.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert stats.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])


def test_iqm_is_the_mean_of_the_middle_half():
    assert stats.iqm(np.arange(1, 9)) == pytest.approx(4.5)  # mean of 3, 4, 5, 6
    assert stats.interval([1, 2, 3, 4, 100, 5, 6, 7], "iqm").value == pytest.approx(4.5)


def test_bootstrap_interval_agrees_with_the_normal_approximation_on_many_seeds():
    estimate = stats.interval(np.r_[np.zeros(200), np.ones(200)])  # mean 0.5, SE 0.025
    assert estimate.value == 0.5
    assert estimate.low == pytest.approx(0.5 - 1.96 * 0.025, abs=0.01) and estimate.high == pytest.approx(
        0.5 + 1.96 * 0.025, abs=0.01
    )
    assert math.isnan(stats.interval([3, 3, 3]).low)  # no spread, no interval


def test_stratified_bootstrap_resamples_within_each_stratum():
    # each stratum constant: every stratified resample has three 0s and five 1s, so no spread
    estimate = stats.stratified_interval([[0, 0, 0], [1, 1, 1, 1, 1]], "mean")
    assert (estimate.value, estimate.low, estimate.high) == pytest.approx((0.625, 0.625, 0.625))


def test_power_matches_published_tables():
    # one-sample/paired t, two-sided alpha 0.05, power 0.8 (Cohen 1988; G*Power): d = 1 -> 10, d = 0.5 -> 34
    assert stats.seeds_needed(1.0, 1.0) == 10
    assert stats.seeds_needed(-0.5, 1.0) == 34
    assert stats.paired_power(10, 1.0, 1.0) == pytest.approx(0.803, abs=0.002)
    assert stats.seeds_needed(5.0, 1.0) == 6  # the exact sign-flip test needs 6 seeds for p < 0.05
    assert stats.seeds_needed(0.0, 1.0) is None


def test_one_seed_is_shown_without_an_interval():
    """A single value has no interval: the table says so instead of printing [nan, nan]."""
    assert str(stats.interval([0.75])) == "0.75 (1 seed: no interval)"
    assert str(stats.interval([0.875, 0.875])) == "0.875 (all 2 seeds equal: no interval)"
    assert "nan" not in str(stats.interval([0.5, 0.7, 0.9]))
