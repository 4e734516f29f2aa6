"""Plots: a KL panel keeps float noise flat, legends say what each line is, seed means stay where every seed has
data."""

import json
import math

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest

from gemlab import plots
from gemlab.notebook.live_metrics import LiveMetrics


def write_run(folder, kl):
    rows = [
        {"step": s, "sampler/success_rate": 0.5, "sampler/episode_return": 0.3, "sampler/token_entropy": 1.0,
         "train/kl_sample_train_v1": k, "train/kl_sample_train_v2": abs(k) / 2}
        for s, k in enumerate(kl)
    ]  # fmt: skip
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_kl_panel_of_float_noise_spans_at_least_the_floor(tmp_path):
    fig = plots.plot_diagnostics(write_run(tmp_path, [1e-6, -2e-6, 3e-6, 0.0]))
    low, high = fig.axes[3].get_ylim()
    assert high - low >= plots.KL_MIN_SPAN and low < 0 < high


def test_kl_panel_of_a_real_gap_keeps_its_autoscale(tmp_path):
    fig = plots.plot_diagnostics(write_run(tmp_path, [0.0, 0.2, 0.5, 0.3]))
    low, high = fig.axes[3].get_ylim()
    assert high == pytest.approx(0.5, abs=0.05) and high - low < 0.7


def test_live_metrics_kl_panel_is_floored_too():
    live = LiveMetrics(["train/kl_sample_train_v2"])
    live.rows = [{"step": 0, "train/kl_sample_train_v2": 1e-7}, {"step": 1, "train/kl_sample_train_v2": 3e-7}]
    low, high = live.figure().axes[0].get_ylim()
    assert high - low >= plots.KL_MIN_SPAN


def test_learning_curve_legend_tells_smoothed_from_raw(tmp_path):
    ax = plots.plot_learning_curve(write_run(tmp_path, [0.0] * 6), smoothing=5, title="my-run: success rate")
    labels = [text.get_text() for text in ax.get_legend().get_texts()]
    assert labels == ["moving average over 5 steps", "each step (faint)"]
    assert ax.get_title().startswith("my-run")


def test_kl_panel_says_what_its_two_lines_are(tmp_path):
    fig = plots.plot_diagnostics(write_run(tmp_path, [0.1, 0.2]))
    labels = " ".join(text.get_text() for text in fig.axes[3].get_legend().get_texts())
    assert "v1" not in labels and "v2" not in labels
    assert "mean(d)" in labels and "sampler - learner logprob" in labels


def test_seed_bands_leave_out_a_seed_without_a_value_at_a_step():
    import pandas as pd

    metric = "sampler/num_turns_per_won_episode"
    seeds = [
        pd.DataFrame({"step": [0, 1, 2], metric: values})
        for values in ([8.0, 7.0, 6.0], [6.0, 5.0, 4.0], [7.0, math.nan, math.nan])
    ]
    ax = plots.plot_seed_bands({"arm": seeds}, metric, band="ci95")
    assert np.allclose(ax.lines[0].get_ydata(), [7.0, 6.0, 5.0])  # steps 1-2: the two seeds that won
    band = ax.collections[0].get_paths()[0].vertices[:, 1]
    assert np.isfinite(band).all()


def test_wall_clock_mean_stops_where_the_first_run_stopped_and_averages_the_runs():
    import pandas as pd

    def run(seconds, values):
        return pd.DataFrame(
            {"time/sample_start": [0.0] * len(values), "time/train_end": seconds, "sampler/success_rate": values}
        )

    fast = run([1.0, 2.0, 3.0], [0.0, 0.2, 0.4])  # stops at 3 s
    slow = run([1.0, 3.0, 5.0, 7.0], [0.2, 0.6, 0.8, 1.0])
    ax = plots.plot_vs_wall_clock({"two seeds": [fast, slow]}, smoothing=1)
    mean = next(line for line in ax.get_lines() if line.get_label() == "two seeds (n=2)")
    x, y = mean.get_xdata(), mean.get_ydata()
    assert x[0] == 1.0 and x[-1] == 3.0  # not past the fast run's end
    assert y[0] == pytest.approx(0.1) and y[-1] == pytest.approx((0.4 + 0.6) / 2)
    assert "95% CI" in ax.get_legend().get_title().get_text()


def test_t_half_width_matches_the_t_table():
    # values 1, 2, 3: SD 1, n 3, t(0.975, 2 df) = 4.303 (a published table), so 4.303 / sqrt(3)
    assert float(plots.t_half_width(1.0, 3)) == pytest.approx(4.302653 / math.sqrt(3), rel=1e-6)
    # elementwise over curve points: 10 values (t(0.975, 9) = 2.262), no spread, a single value
    half = plots.t_half_width(np.array([2.0, 0.0, np.nan]), np.array([10, 4, 1]))
    assert half[0] == pytest.approx(2.262157 * 2 / math.sqrt(10), rel=1e-6)
    assert half[1] == 0.0 and math.isnan(half[2])
