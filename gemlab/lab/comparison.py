"""Runs side by side: find run folders, name each by the settings that differ, overlay their curves.

A run folder is any folder with a ``config.json`` and a ``metrics.jsonl`` (what ``Trainer`` writes,
and what ``data/runs`` ships). Nothing here trains; it reads folders and draws.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from gemlab.plots import LABELS, floor_y_span, smooth
from gemlab.saved_runs import SavedRun, is_run_folder

# Config fields that say where a run lives, not what it does: never used to tell runs apart.
BOOKKEEPING = ("log_dir", "run_name", "wandb_project", "save_every")
COMPARED_METRICS = ("sampler/success_rate", "sampler/episode_return")
FINAL_WINDOW = 5  # "final success" is the mean over a run's last steps, this many of them


def find_runs(*folders: str | Path) -> list[Path]:
    """Run folders directly under each of ``folders`` (missing folders are skipped), least
    recently written first (so a run that just trained comes last)."""
    found: list[Path] = []
    for folder in folders:
        folder = Path(folder)
        if folder.is_dir():
            found.extend(p for p in folder.iterdir() if p.is_dir() and is_run_folder(p))
    return sorted(found, key=lambda p: (p.stat().st_mtime, str(p)))


def differing_settings(runs: Sequence[SavedRun]) -> list[str]:
    """The config fields whose values are not the same in every run (bookkeeping fields left out)."""
    keys = sorted({key for run in runs for key in run.config} - set(BOOKKEEPING))
    return [key for key in keys if len({json.dumps(run.config.get(key), sort_keys=True) for run in runs}) > 1]


def _short(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, dict):
        return ",".join(f"{k.replace('_threshold', '')}={_short(v)}" for k, v in value.items())
    return str(value)


def run_labels(runs: Sequence[SavedRun]) -> list[str]:
    """One legend label per run naming only the settings that differ (the folder name when none do)."""
    keys = differing_settings(runs)
    labels = []
    for run in runs:
        parts = [f"{key}={_short(run.config.get(key))}" for key in keys]
        labels.append(", ".join(parts) if parts else run.name)
    if len(set(labels)) < len(labels):  # identical settings: tell them apart by folder
        labels = [f"{label} ({run.name})" if keys else label for label, run in zip(labels, runs, strict=True)]
    return labels


def runs_table(runs: Sequence[SavedRun]) -> pd.DataFrame:
    """One row per run: the settings that differ, final success, steps done, status, wall time."""
    keys = differing_settings(runs)
    rows = []
    for run in runs:
        row: dict[str, Any] = {"run": run.name}
        row.update({key: _short(run.config.get(key)) for key in keys})
        success = run.metrics.get("sampler/success_rate")
        row[f"final success (last {FINAL_WINDOW} steps)"] = (
            round(float(success.tail(FINAL_WINDOW).mean()), 3) if success is not None and len(success) else None
        )
        row["steps"] = f"{run.steps_done}/{run.config.get('max_steps', '?')}"
        row["status"] = _status(run)
        row["wall time (s)"] = wall_seconds(run.metrics)
        rows.append(row)
    return pd.DataFrame(rows)


def _status(run: SavedRun) -> str:
    """The run folder's status, except that a run whose metrics reach ``max_steps`` but that has no
    weights (precomputed runs ship their metrics only) is "finished (metrics only)"."""
    if run.status == "no checkpoint" and run.steps_done >= int(run.config.get("max_steps", 0) or 0) > 0:
        return "finished (metrics only)"
    return run.status


def wall_seconds(metrics: pd.DataFrame) -> float | None:
    """The run's real wall time: from each session's start (the ``Trainer`` made, model loaded) to
    its last step's end, summed over the sessions of a resumed run. ``time/train_end`` counts from
    a session's start, so a value lower than the one before starts a new session. Runs logged
    without it fall back to the sum of ``time/step`` (the time inside steps only)."""
    if "time/train_end" in metrics:
        ends = metrics["time/train_end"].dropna().to_numpy()
        if len(ends):
            session_last = [a for a, b in pairwise(ends) if b < a] + [ends[-1]]
            return round(float(sum(session_last)), 1)
    steps = metrics.get("time/step")
    return round(float(steps.sum()), 1) if steps is not None else None


def comparison_figure(
    runs: Sequence[SavedRun], metrics: Iterable[str] = COMPARED_METRICS, *, smoothing: int = 1
) -> Figure:
    """One panel per metric, one colour per run (the same colour in every panel)."""
    metrics = list(metrics)
    fig = Figure(figsize=(5.2 * len(metrics), 3.6), constrained_layout=True)
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    labels = run_labels(runs)
    for ax, metric in zip(axes, metrics, strict=True):
        for index, (run, label) in enumerate(zip(runs, labels, strict=True)):
            if metric in run.metrics:
                ax.plot(
                    run.metrics["step"],
                    smooth(run.metrics[metric], smoothing),
                    lw=2,
                    color=f"C{index % 10}",
                    label=label,
                )
        _decorate(ax, metric)
    if runs:  # below the panels: long labels of many runs never cover the curves
        fig.legend(
            *axes[0].get_legend_handles_labels(), fontsize=8, loc="outside lower center", ncols=1 + (len(runs) > 3)
        )
    else:
        axes[0].text(
            0.5, 0.5, "no runs to compare yet: press Run", ha="center", va="center", transform=axes[0].transAxes
        )
    suffix = f", moving average over {smoothing} steps" if smoothing > 1 else ""
    fig.suptitle(f"{len(runs)} run(s) compared{suffix}")
    return fig


def live_figure(
    metrics: pd.DataFrame,
    panels: Sequence[tuple[str, ...]],
    *,
    title: str,
    labels: dict[str, str] | None = None,
    min_span: float = 0.02,
) -> Figure:
    """The running run's curves: one panel per group of metrics, a point per step.

    ``labels`` overrides axis labels by metric; a panel whose values vary by less than
    ``min_span`` is drawn over at least that span, so float noise (a KL of 1e-7) looks flat.
    """
    fig = Figure(figsize=(13, 5.4), constrained_layout=True)
    columns = (len(panels) + 1) // 2
    axes = fig.subplots(2, columns, squeeze=False).flat
    for ax, group in zip(axes, panels, strict=False):
        shown = [metric for metric in group if metric in metrics]
        for metric in shown:
            ax.plot(
                metrics["step"],
                metrics[metric],
                marker="o",
                ms=3,
                lw=1.5,
                label=metric.split("_")[-1] if len(group) > 1 else None,
            )
        _decorate(ax, group[0], labels)
        if shown:
            floor_y_span(ax, min_span)
        if len(group) > 1:
            ax.legend(fontsize=8)
    for ax in list(axes):  # an odd number of panels leaves one empty
        ax.set_visible(False)
    fig.suptitle(title)
    return fig


def figure_png(fig: Figure, dpi: int = 80) -> bytes:
    """A figure as PNG bytes (for an ``ipywidgets.Image``; no pyplot, so nothing else is displayed)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


def _decorate(ax, metric: str, labels: dict[str, str] | None = None) -> None:
    label = {**LABELS, **(labels or {})}.get(metric, metric)
    ax.set_title(label.split(" (")[0][:1].upper() + label.split(" (")[0][1:], fontsize=10)
    ax.set_xlabel("training step")
    ax.set_ylabel(label, fontsize=8)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
