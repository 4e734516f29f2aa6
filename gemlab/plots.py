"""Learning curves and diagnostics from a run's ``metrics.jsonl``.

Every function takes run folders (or DataFrames already loaded) and returns matplotlib objects,
so a notebook can restyle them and a script can save them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeAlias

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import MaxNLocator

from gemlab.config import CONFIG_FILE
from gemlab.eval_curve import Point, eval_points, eval_set_name
from gemlab.saved_runs import read_metrics, saved_config

Run: TypeAlias = str | Path | pd.DataFrame

LABELS = {
    "sampler/success_rate": "success rate (fraction of episodes won)",
    "sampler/episode_return": "episode return (sum of rewards)",
    "sampler/num_turns_per_episode": "turns per episode",
    "sampler/num_turns_per_won_episode": "turns per won episode",
    "sampler/action_num_tokens": "action tokens per episode",
    "sampler/token_entropy": "token entropy estimate (nats)",
    # d = sampler - learner logprob of a trained token (GEM's kl_sample_train_v1 and v2)
    "train/kl_sample_train_v1": "sampler-vs-learner KL, mean(d) (nats)",
    "train/kl_sample_train_v2": "sampler-vs-learner KL, mean(d²)/2 (nats)",
    "train/loss:sum": "importance-sampling loss (sum)",
    "time/step": "wall time per step (s)",
    "train/logprob_diff_abs": "mean |sampler - learner| logprob (nats)",
    "async/staleness_mean": "staleness (optimizer steps behind)",
    "eval/success": "success on the fixed evaluation set",
}
#: The smallest y-range of a KL panel (nats): float noise of 1e-6 stays a flat line at 0.
KL_MIN_SPAN = 0.01


def load_metrics(run: Run) -> pd.DataFrame:
    """A run's metrics, one row per step. Accepts a run folder, its metrics file, or a DataFrame."""
    return run if isinstance(run, pd.DataFrame) else read_metrics(run)


def smooth(values: Sequence[float], window: int) -> np.ndarray:
    """Trailing moving average over ``window`` steps (1 = no smoothing)."""
    series = pd.Series(np.asarray(values, dtype=float))
    return series.rolling(max(1, window), min_periods=1).mean().to_numpy()


def plot_learning_curve(
    runs: Run | Mapping[str, Run],
    metric: str = "sampler/success_rate",
    *,
    smoothing: int = 1,
    ax: plt.Axes | None = None,
    title: str | None = None,
    evaluations: bool = True,
) -> plt.Axes:
    """One line per run (a mapping gives them legend labels); faint raw values under smoothed lines,
    with a legend that tells the two apart. For the rollouts' success, a run that measured its
    evaluation set (``eval_every``; unless ``evaluations=False``) also gets that curve, dashed, with
    its Wilson 95% band: from the base model and after the warm-up at step 0, then after each
    evaluated step; the rollouts are then labelled as the training problems."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    named = runs if isinstance(runs, Mapping) else {None: runs}
    evaluated = False
    for index, (label, run) in enumerate(named.items()):
        df = load_metrics(run)
        points = eval_points(df) if evaluations and metric == "sampler/success_rate" else []
        line = ax.plot(
            df["step"], smooth(df[metric], smoothing), label=_rollout_label(label, smoothing, bool(points)), lw=2
        )[0]
        if smoothing > 1:
            raw = (
                ("training problems, each step (faint)" if points and label is None else "each step (faint)")
                if index == 0
                else None
            )
            ax.plot(df["step"], df[metric], color=line.get_color(), alpha=0.25, lw=1, label=raw)
        if points:
            name = _eval_set(run)
            color = line.get_color() if len(named) > 1 else "tab:orange"
            _draw_evaluations(ax, points, f"{label}: {name}" if label is not None else name, color, first=not evaluated)
            evaluated = True
    _label(ax, metric, title, smoothing)
    if evaluated:  # success rates on one honest scale; the longer legend beside the plot, not over it
        ax.set_ylim(-0.02, 1.02)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    elif smoothing > 1 or any(label is not None for label in named):
        ax.legend()
    return ax


def _rollout_label(label: str | None, smoothing: int, beside_evaluations: bool) -> str | None:
    """The rollouts' legend entry: the run's name, or what the line is (training problems when an
    evaluation curve is drawn beside it), or none for one unsmoothed run alone."""
    if label is not None:
        return f"{label}: training problems" if beside_evaluations else label
    parts = (["training problems (rollouts)"] if beside_evaluations else []) + (
        [f"moving average over {smoothing} steps"] if smoothing > 1 else []
    )
    return ", ".join(parts) or None


def _eval_set(run: Run) -> str:
    """What a run's evaluation played, from its saved config (``eval_set_name``); a table alone cannot say."""
    if isinstance(run, pd.DataFrame):
        return "fixed evaluation set"
    folder = Path(run) if Path(run).is_dir() else Path(run).parent  # a run folder or its metrics.jsonl
    return eval_set_name(saved_config(folder)) if (folder / CONFIG_FILE).is_file() else "fixed evaluation set"


def _draw_evaluations(ax: plt.Axes, points: list[Point], name: str, color: Any, *, first: bool) -> None:
    """The evaluation curve at the steps taken before each point, with its 95% band; a base-model
    point followed by an after-warm-up one (both at step 0) is drawn apart, as a grey square."""
    warmed_up = any(p.stage == "warmup" for p in points)
    curve = [p for p in points if p.stage != "base"] if warmed_up else points
    steps = [p.steps for p in curve]
    ax.plot(steps, [p.success for p in curve], color=color, ls="--", marker="o", markersize=4, lw=2, label=name)
    ax.fill_between(
        steps,
        [p.low for p in curve],
        [p.high for p in curve],
        color=color,
        alpha=0.15,
        label="its 95% interval (Wilson)" if first else None,
    )
    for base in [p for p in points if p.stage == "base"] if warmed_up else []:
        ax.errorbar(
            [0], [base.success], yerr=[[base.success - base.low], [base.high - base.success]], fmt="s", color="grey",
            capsize=4,
            label="the base model, before the warm-up" if first else None,
        )  # fmt: skip


def plot_seed_bands(
    groups: Mapping[str, Sequence[Run]],
    metric: str = "sampler/success_rate",
    *,
    smoothing: int = 1,
    ax: plt.Axes | None = None,
    title: str | None = None,
    band: str = "sd",
) -> plt.Axes:
    """Mean over seeds with a band per named group of runs: ``band="sd"`` one standard deviation
    over seeds (ddof=0), ``band="ci95"`` the 95% t-interval of the mean (ddof=1, needs 2+ seeds).
    A seed with no value at a step (turns per won episode when it won none) is left out there,
    so one collapsed seed does not blank its group's curve."""
    if band not in ("sd", "ci95"):
        raise ValueError(f"band must be 'sd' or 'ci95', got {band!r}")
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    for label, runs in groups.items():
        frames = [load_metrics(run) for run in runs]
        length = min(len(df) for df in frames)
        seeds = pd.DataFrame({i: smooth(df[metric].to_numpy()[:length], smoothing) for i, df in enumerate(frames)})
        steps = frames[0]["step"].to_numpy()[:length]
        mean, half = _mean_and_half_width(seeds, band)
        line = ax.plot(steps, mean, lw=2, label=f"{label} (n={len(frames)})")[0]
        ax.fill_between(steps, mean - half, mean + half, color=line.get_color(), alpha=0.2)
    _label(ax, metric, title, smoothing)
    ax.legend(title="band: 95% CI of the mean" if band == "ci95" else "band: ±1 SD over seeds")
    return ax


def plot_diagnostics(run: Run, *, smoothing: int = 1, title: str | None = None) -> plt.Figure:
    """Four panels: success rate, episode return, token entropy, and two estimates of the
    sampler-vs-learner KL on the trained tokens (GEM's ``kl_sample_train_v1``/``v2``: ``mean(d)`` and
    ``mean(d**2)/2`` with ``d`` = sampler minus learner logprob; both 0 when on-policy)."""
    df = load_metrics(run)
    fig, axes = plt.subplots(2, 2, figsize=(11, 7), constrained_layout=True)
    for ax, metric in zip(
        axes.flat[:3], ("sampler/success_rate", "sampler/episode_return", "sampler/token_entropy"), strict=True
    ):
        plot_learning_curve(df, metric, smoothing=smoothing, ax=ax, evaluations=False)
    ax = axes.flat[3]
    estimates = {
        "train/kl_sample_train_v1": "mean(d), d = sampler - learner logprob",
        "train/kl_sample_train_v2": "mean(d²)/2",
    }
    for metric, label in estimates.items():
        ax.plot(df["step"], smooth(df[metric], smoothing), lw=2, label=label)
    _label(ax, "train/kl_sample_train_v1", "Sampler-vs-learner KL", smoothing)
    ax.set_ylabel("KL estimate (nats)")
    floor_y_span(ax, KL_MIN_SPAN)
    ax.legend()
    fig.suptitle(title or "Training diagnostics")
    return fig


def plot_timeline(
    runs: Mapping[str, Run], *, steps: int = 6, ax: plt.Axes | None = None, title: str | None = None
) -> plt.Axes:
    """When each step sampled and trained (from ``time/*_start``/``time/*_end``), one lane per run:
    a synchronous run alternates, an asynchronous one samples the next batch while it trains."""
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 1 + 1.1 * len(runs)))
    colors = {"sample": "tab:blue", "train": "tab:orange"}
    for index, run in enumerate(runs.values()):
        lane = len(runs) - 1 - index  # the first run on top
        df = load_metrics(run).head(steps)
        origin = df["time/sample_start"].iloc[0]
        for phase, offset in (("sample", 0.22), ("train", -0.22)):
            spans = [
                (a - origin, b - a) for a, b in zip(df[f"time/{phase}_start"], df[f"time/{phase}_end"], strict=True)
            ]
            ax.broken_barh(
                spans,
                (lane + offset - 0.2, 0.4),
                facecolors=colors[phase],
                edgecolor="white",
                label=phase if index == 0 else None,
            )
            for (start, width), step in zip(spans, df["step"], strict=True):
                ax.text(
                    start + width / 2,
                    lane + offset,
                    str(int(step)),
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white",
                )
    ax.set_yticks(range(len(runs)), list(runs)[::-1])
    ax.set_xlabel("wall-clock time since the first step started sampling (s)")
    ax.set_title(title or "Sampling and training per step (numbers are step indices)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.grid(alpha=0.3, axis="x")
    return ax


def plot_vs_wall_clock(
    groups: Mapping[str, Sequence[Run]],
    metric: str = "sampler/success_rate",
    *,
    smoothing: int = 5,
    ax: plt.Axes | None = None,
    title: str | None = None,
) -> plt.Axes:
    """``metric`` against wall-clock time (each step's end, counted from when the first step began
    sampling, so model loading is left out), one colour per group. Each run is a faint line; a group
    of 2+ runs also gets its mean with a 95% t-interval band, on a common time grid up to where its
    first run ended (so the mean never averages over runs that have stopped)."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    for color, (label, runs) in zip(plt.rcParams["axes.prop_cycle"].by_key()["color"], groups.items(), strict=False):
        curves = []
        for run in runs:
            df = load_metrics(run)
            seconds = (df["time/train_end"] - df["time/sample_start"].iloc[0]).to_numpy()
            curves.append((seconds, smooth(df[metric], smoothing)))
        several = len(curves) > 1
        for seconds, values in curves:
            ax.plot(seconds, values, color=color, lw=0.8 if several else 1.5, alpha=0.25 if several else 0.85,
                    label=None if several else f"{label} (n=1)")  # fmt: skip
        if several:
            grid = np.linspace(max(s[0] for s, _ in curves), min(s[-1] for s, _ in curves), 200)
            seeds = pd.DataFrame({i: np.interp(grid, s, v) for i, (s, v) in enumerate(curves)})
            mean, half = _mean_and_half_width(seeds, "ci95")
            ax.plot(grid, mean, color=color, lw=2.2, label=f"{label} (n={len(curves)})")
            ax.fill_between(grid, mean - half, mean + half, color=color, alpha=0.2)
    _label(ax, metric, title, smoothing)
    ax.set_xlabel("wall-clock time since the first step began (s)")
    ax.legend(title="mean, band: 95% CI; faint: each run" if any(len(runs) > 1 for runs in groups.values()) else None)
    return ax


def floor_y_span(ax: plt.Axes, min_span: float) -> None:
    """Widen the y-range to at least ``min_span`` around the data (and 0), so autoscaling does not
    magnify rounding noise into something that looks like a signal."""
    low, high = ax.get_ylim()
    if high - low < min_span:
        middle = 0.0 if low <= 0.0 <= high else (low + high) / 2
        ax.set_ylim(min(low, middle - min_span / 2), max(high, middle + min_span / 2))
    ax.ticklabel_format(axis="y", useOffset=False)


def save_figure(fig_or_ax: plt.Figure | plt.Axes, path: str | Path, dpi: int = 120) -> Path:
    """Write a figure (or an axes' figure) to ``path``, creating folders; returns the path."""
    fig = fig_or_ax.figure if isinstance(fig_or_ax, plt.Axes) else fig_or_ax
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, bbox_inches="tight")  # type: ignore[union-attr]  # gemlab draws on Figures, not SubFigures
    return path


def _label(ax: plt.Axes, metric: str, title: str | None, smoothing: int) -> None:
    ax.set_xlabel("training step (policy-gradient updates)")
    ax.set_ylabel(LABELS.get(metric, metric))
    suffix = f" (moving average over {smoothing} steps)" if smoothing > 1 else ""
    default = LABELS.get(metric, metric).split(" (")[0]
    ax.set_title((title or default[:1].upper() + default[1:]) + suffix)
    ax.grid(alpha=0.3)


def t_half_width(sd: float | np.ndarray, n: int | np.ndarray) -> np.ndarray:
    """Half-width of the 95% t-interval of a mean, from the values' sample SD (ddof=1) and their
    count, elementwise; NaN where the SD is NaN (fewer than 2 values). The one home of the
    interval over seeds: the bands here, the studies' evaluation curves, the SmolLM2 benchmark."""
    from scipy import stats  # imported when an interval is drawn

    n = np.asarray(n, dtype=float)
    return stats.t.ppf(0.975, np.maximum(n - 1, 1)) * np.asarray(sd, dtype=float) / np.sqrt(np.maximum(n, 1))


def _mean_and_half_width(seeds: pd.DataFrame, band: str) -> tuple[np.ndarray, np.ndarray]:
    """Per-row mean over the columns (seeds) and the band's half-width: one SD (ddof=0) for
    ``"sd"``, the 95% t-interval of the mean (ddof=1) for ``"ci95"``; missing values are left out."""
    mean, n = seeds.mean(axis=1).to_numpy(), seeds.count(axis=1).to_numpy()
    if band == "sd":
        return mean, seeds.std(axis=1, ddof=0).to_numpy()
    return mean, t_half_width(seeds.std(axis=1, ddof=1).to_numpy(), n)
