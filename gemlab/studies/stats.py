"""Statistics for the studies, from scipy: intervals over seeds, paired contrasts, Holm, power.

- ``interval``: the mean or the IQM (interquartile mean, ``scipy.stats.trim_mean(x, 0.25)``, as
  the rliable paper recommends for few runs) of one arm with a 95% bootstrap interval
  (``scipy.stats.bootstrap``); ``stratified_interval`` resamples seeds within each stratum
  (environment) separately, rliable's stratified bootstrap, for an aggregate over environments.
- ``paired_contrast``: treatment minus control paired by seed: the mean difference, its 95%
  bootstrap interval (``paired=True``) and an exact two-sided sign-flip permutation p
  (``scipy.stats.permutation_test``, ``permutation_type='samples'``); ``unpaired_contrast`` is
  the same with a Welch t statistic and ``permutation_type='independent'`` for arms whose seeds
  do not pair.
- ``holm``: Holm's step-down adjustment of a study's p-values (family-wise error at 5%).
- ``seeds_needed``: seeds per arm for a paired t-test to detect a difference ``effect`` with
  standard deviation ``sd`` of the paired differences (noncentral t, ``scipy.stats.nct``).

With n seeds an exact paired sign-flip test cannot give p below 2 / 2**n (3 seeds: 0.25), so
small pilots can only say "not resolved"; the power estimate says what would resolve them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
RESAMPLES = 9999


def iqm(values: np.ndarray, axis: int = -1) -> np.ndarray:
    """The interquartile mean: the mean of the middle 50% of the values."""
    return stats.trim_mean(values, 0.25, axis=axis)


STATISTICS: dict[str, Callable[..., np.ndarray]] = {"mean": np.mean, "iqm": iqm}


@dataclass(frozen=True)
class Estimate:
    """A statistic over seeds with its 95% bootstrap interval and the number of seeds."""

    value: float
    low: float
    high: float
    n: int

    def __str__(self) -> str:
        if math.isnan(self.low) or math.isnan(self.high):
            return f"{self.value:.3g} ({'1 seed' if self.n < 2 else f'all {self.n} seeds equal'}: no interval)"
        return f"{self.value:.3g} [{self.low:.3g}, {self.high:.3g}]"


@dataclass(frozen=True)
class Contrast:
    """Treatment minus control: the mean difference, its 95% interval, the permutation p."""

    difference: float
    low: float
    high: float
    p: float
    n: int


def _clean(values: Sequence[float]) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    if array.ndim != 1 or len(array) == 0:
        raise ValueError(f"need a non-empty 1-d sequence of numbers, got shape {array.shape}")
    return array


def _ci(result: stats._resampling.BootstrapResult) -> tuple[float, float]:
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def interval(values: Sequence[float], statistic: str = "mean", *, seed: int = 0) -> Estimate:
    """``statistic`` ("mean" or "iqm") of ``values`` (one per seed) with a 95% percentile
    bootstrap interval; NaN bounds with a single seed or when every value is equal."""
    array = _clean(values)
    function = STATISTICS[statistic]
    value = float(function(array))
    if len(array) < 2 or np.all(array == array[0]):
        return Estimate(value, float("nan"), float("nan"), len(array))
    result = stats.bootstrap(
        (array,),
        function,
        confidence_level=CONFIDENCE,
        n_resamples=RESAMPLES,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    return Estimate(value, *_ci(result), len(array))


def stratified_interval(strata: Sequence[Sequence[float]], statistic: str = "iqm", *, seed: int = 0) -> Estimate:
    """``statistic`` of all values pooled over ``strata`` (e.g. one list of per-seed scores per
    environment), with a bootstrap that resamples seeds within each stratum (rliable's
    stratified bootstrap)."""
    arrays = [_clean(stratum) for stratum in strata]
    function = STATISTICS[statistic]

    def pooled(*samples: np.ndarray, axis: int = -1) -> np.ndarray:
        return function(np.concatenate(samples, axis=axis), axis=axis)

    value = float(pooled(*arrays))
    result = stats.bootstrap(
        arrays,
        pooled,
        confidence_level=CONFIDENCE,
        n_resamples=RESAMPLES,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    return Estimate(value, *_ci(result), sum(len(a) for a in arrays))


def _mean_difference(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x - y, axis=axis)


def paired_contrast(treatment: Sequence[float], control: Sequence[float], *, seed: int = 0) -> Contrast:
    """Mean of ``treatment[i] - control[i]`` (seed ``i`` of each arm) with its 95% paired
    bootstrap interval and the exact (up to 2**13 seeds' sign flips, else sampled) two-sided
    sign-flip permutation p."""
    if len(treatment) != len(control):
        raise ValueError(f"paired arms need the same seeds: got {len(treatment)} and {len(control)} values")
    if len(treatment) < 2:  # no seed, or a pilot's one: both of its sign flips are as extreme, so p is 1
        difference = float(treatment[0]) - float(control[0]) if len(treatment) else float("nan")
        return Contrast(difference, float("nan"), float("nan"), 1.0, len(treatment))
    x, y = _clean(treatment), _clean(control)
    difference = float(np.mean(x - y))
    test = stats.permutation_test(
        (x, y),
        _mean_difference,
        permutation_type="samples",
        vectorized=True,
        n_resamples=RESAMPLES,
        alternative="two-sided",
        rng=np.random.default_rng(seed),
    )
    if np.all(x - y == (x - y)[0]):
        return Contrast(difference, float("nan"), float("nan"), float(test.pvalue), len(x))
    ci = stats.bootstrap(
        (x, y),
        _mean_difference,
        paired=True,
        vectorized=True,
        confidence_level=CONFIDENCE,
        n_resamples=RESAMPLES,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    return Contrast(difference, *_ci(ci), float(test.pvalue), len(x))


def _welch_t(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    return stats.ttest_ind(x, y, equal_var=False, axis=axis).statistic


def unpaired_contrast(treatment: Sequence[float], control: Sequence[float], *, seed: int = 0) -> Contrast:
    """Difference of means of two independent arms, its 95% bootstrap interval (each arm
    resampled on its own) and a two-sided permutation p on the Welch t statistic."""
    x, y = _clean(treatment), _clean(control)
    test = stats.permutation_test(
        (x, y),
        _welch_t,
        permutation_type="independent",
        vectorized=True,
        n_resamples=RESAMPLES,
        alternative="two-sided",
        rng=np.random.default_rng(seed),
    )

    def difference(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.mean(a, axis=axis) - np.mean(b, axis=axis)

    ci = stats.bootstrap(
        (x, y),
        difference,
        vectorized=True,
        confidence_level=CONFIDENCE,
        n_resamples=RESAMPLES,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    return Contrast(float(x.mean() - y.mean()), *_ci(ci), float(test.pvalue), len(x) + len(y))


def holm(pvalues: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values, in the input order: sort ascending, multiply the k-th
    smallest (from 0) by ``m - k``, make the sequence non-decreasing, cap at 1 (Holm 1979)."""
    p = np.asarray(pvalues, dtype=float)
    order = np.argsort(p)
    scaled = np.maximum.accumulate(p[order] * (len(p) - np.arange(len(p))))
    adjusted = np.empty_like(p)
    adjusted[order] = np.minimum(scaled, 1.0)
    return adjusted


def paired_power(n: int, effect: float, sd: float, *, alpha: float = 0.05) -> float:
    """Power of a two-sided paired t-test with ``n`` pairs when the differences have mean
    ``effect`` and standard deviation ``sd``."""
    if n < 2:
        return 0.0
    df = n - 1
    critical = stats.t.ppf(1 - alpha / 2, df)
    shift = abs(effect) / sd * np.sqrt(n)
    wrong_side = np.nan_to_num(stats.nct.cdf(-critical, df, shift), nan=0.0)  # scipy gives NaN far in this tail
    return float(stats.nct.sf(critical, df, shift) + wrong_side)


def seeds_needed(
    effect: float, sd: float, *, alpha: float = 0.05, power: float = 0.8, most: int = 10_000
) -> int | None:
    """The fewest seeds per arm at which a paired t-test has ``power`` to detect ``effect``
    (differences with standard deviation ``sd``); at least 6, the fewest with which an exact
    sign-flip test can reach p < 0.05. ``None`` when even ``most`` seeds would not do."""
    if sd <= 0 or not np.isfinite(sd) or effect == 0 or not np.isfinite(effect):
        return None
    for n in range(6, most + 1):
        if paired_power(n, effect, sd, alpha=alpha) >= power:
            return n
    return None
