"""The studies' tables and figures, read from their run folders (seeds as intervals)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from gemlab import plots
from gemlab.run_folder import METRICS_FILE, read_run
from gemlab.studies.definitions import ENVIRONMENTS, METHOD_LABELS
from gemlab.studies.guessing import binary_search, random_consistent

WINDOW = 10  # first-10 / last-10 steps in the tables


def load_study(folder: str | Path) -> dict[str, pd.DataFrame]:
    """Every finished run of a study folder (``max_steps`` rows, per its ``config.json``): run
    name -> its metrics, one row per step. Unfinished runs are left out, so that a study that is
    still being regenerated compares only runs of the same length."""
    folder = Path(folder)
    runs = {}
    for path in sorted(folder.glob(f"*/{METRICS_FILE}")):
        run = read_run(path.parent)
        if run.steps_done >= run.config["max_steps"]:
            runs[run.name] = run.metrics
    if not runs:
        raise FileNotFoundError(f"no finished runs under {folder}: run `python benchmarks/reproduce_gem.py` first")
    return runs


def group_runs(runs: dict[str, Any]) -> dict[str, list[Any]]:
    """Runs grouped by their name without the ``-seedN`` suffix (e.g. ``gamma0.5``)."""
    groups: dict[str, list[Any]] = {}
    for name, run in runs.items():
        groups.setdefault(name.rsplit("-seed", 1)[0], []).append(run)
    return groups


def _window_means(frames: list[pd.DataFrame], metric: str, window: int) -> tuple[np.ndarray, np.ndarray]:
    first = np.array([frame[metric].head(window).mean() for frame in frames])
    last = np.array([frame[metric].tail(window).mean() for frame in frames])
    return first, last


def summary_table(folder: str | Path, metrics: Sequence[str] = ("sampler/success_rate",), *, window: int = WINDOW) -> pd.DataFrame:
    """Per group of seeds: mean and standard deviation over seeds of each metric's first-``window``
    and last-``window`` step averages, and the number of seeds."""
    rows = []
    for group, frames in group_runs(load_study(folder)).items():
        row: dict[str, Any] = {"run": group, "seeds": len(frames)}
        for metric in metrics:
            short = metric.split("/")[-1]
            first, last = _window_means(frames, metric, window)
            row.update({f"{short} first": first.mean(), f"{short} last": last.mean(), f"{short} last std": last.std()})
            row[f"{short} gain"] = (last - first).mean()
        rows.append(row)
    return pd.DataFrame(rows).set_index("run")


def gamma_figure(folder: str | Path, *, smoothing: int = 5) -> Any:
    """Success rate and turns per won episode per gamma (mean and one-std band over seeds), with
    the exact turns of binary search and of the random consistent player as horizontal lines."""
    groups = group_runs(load_study(folder))
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5), constrained_layout=True)
    plots.plot_seed_bands(groups, "sampler/success_rate", smoothing=smoothing, ax=axes[0])
    axes[0].set_ylim(0, 1.02)
    plots.plot_seed_bands(groups, "sampler/num_turns_per_won_episode", smoothing=smoothing, ax=axes[1])
    for player, style in ((binary_search, "--"), (random_consistent, ":")):
        turns = float(player(20, 20).turns_when_won)
        axes[1].axhline(turns, color="black", ls=style, lw=1.2, label=f"{player.__name__.replace('_', ' ')}: {turns:.2f}")
    axes[1].legend()
    fig.suptitle("GuessTheNumber 1-20 (20 turns), REINFORCE + ReBN: the discount factor")
    return fig


def algorithms_figure(folder: str | Path, *, smoothing: int = 5) -> Any:
    """Success rate per method (mean and one-std band over seeds), one panel per environment."""
    groups = group_runs(load_study(folder))
    envs = [env for env in ENVIRONMENTS if any(name.startswith(f"{env}-") for name in groups)]
    fig, axes = plt.subplots(1, len(envs), figsize=(6.5 * len(envs), 4.5), constrained_layout=True, squeeze=False)
    titles = {"guess": "GuessTheNumber 1-10 (multi-turn)", "products": "rg:products-1digit (single-turn)"}
    for ax, env in zip(axes[0], envs):
        mine = {METHOD_LABELS[name.split("-", 1)[1]]: runs for name, runs in groups.items() if name.startswith(f"{env}-")}
        plots.plot_seed_bands(mine, "sampler/success_rate", smoothing=smoothing, ax=ax, title=titles[env])
        ax.set_ylim(0, 1.02)
    fig.suptitle("Algorithm comparison at laptop scale")
    return fig
