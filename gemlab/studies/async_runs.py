"""The sampling-ahead comparison (``research/experiments/bench_async.py``, notebook 09): what one run's
metrics say (time to a success threshold, final success, pace), which setting each saved run
belongs to, and the paired contrasts of every setting against the synchronous runs.

A setting is a loss and a ``max_staleness``. The reference is the synchronous loop with
``importance_sampling`` (GEM's). At ``max_staleness=0`` with one minibatch per step the sampler's
weights are the learner's, every importance ratio is 1, and ``ppo``'s clipped objective has the
gradient of ``importance_sampling``: so one synchronous run serves as the reference of every loss.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from gemlab.config import CONFIG_FILE
from gemlab.saved_runs import read_metrics, saved_config
from gemlab.studies import stats

TARGET, LOWER, WINDOW, FINAL = 0.9, 0.8, 5, 10  # LOWER: a second threshold, for runs that stop short of 0.9


@dataclass(frozen=True, order=True)
class Setting:
    """One arm of the comparison: a loss and how many steps the sampler may run ahead."""

    staleness: int
    loss: str

    @property
    def label(self) -> str:
        return "synchronous" if self == SYNC else f"{self.loss}, max_staleness={self.staleness}"

    def run_name(self, seed: int) -> str:
        return f"{self.loss}-staleness{self.staleness}-seed{seed}"


SYNC = Setting(0, "importance_sampling")


def elapsed(history: Sequence[dict[str, float]], i: int) -> float:
    """Seconds from the first step's start (model loading left out) to the end of step ``i``."""
    return float(history[i]["time/train_end"] - history[0]["time/sample_start"])


def time_to(history: Sequence[dict[str, float]], target: float) -> float | None:
    """Wall-clock seconds at the first step where the ``WINDOW``-step average success reaches ``target``."""
    success = np.asarray([row["sampler/success_rate"] for row in history])
    for i in range(WINDOW - 1, len(success)):
        if success[i - WINDOW + 1 : i + 1].mean() >= target:
            return elapsed(history, i)
    return None


def summarize(history: Sequence[dict[str, float]]) -> dict[str, float | None]:
    """Time to 0.9 and 0.8, final success (last ``FINAL`` steps), logprob difference, staleness and pace of one run."""
    return {
        "to_target": time_to(history, TARGET),
        "to_lower": time_to(history, LOWER),
        "final": float(np.mean([row["sampler/success_rate"] for row in history[-FINAL:]])),
        "diff": float(np.mean([row["train/logprob_diff_abs"] for row in history])),
        "staleness": float(np.mean([row["async/staleness_mean"] for row in history])),
        "per_step": elapsed(history, len(history) - 1) / len(history),
        "wall": elapsed(history, len(history) - 1),
    }


def saved_runs(folder: str | Path) -> dict[Setting, dict[int, Path]]:
    """The run folders under ``folder`` by setting and seed, read from each run's config (so any
    folder names do)."""
    runs: dict[Setting, dict[int, Path]] = {}
    for path in sorted(Path(folder).iterdir()):
        if not (path / CONFIG_FILE).is_file():
            continue
        config = saved_config(path / CONFIG_FILE)
        runs.setdefault(Setting(int(config["max_staleness"]), str(config["loss_fn"])), {})[int(config["seed"])] = path
    return dict(sorted(runs.items()))


def summarize_saved(runs: dict[Setting, dict[int, Path]]) -> dict[Setting, dict[int, dict]]:
    """``summarize`` of each run that ``saved_runs`` found, by setting and seed."""
    return {
        setting: {seed: summarize(read_metrics(path).to_dict("records")) for seed, path in by_seed.items()}
        for setting, by_seed in runs.items()
    }


def contrasts(results: dict[Setting, dict[int, dict]]) -> pd.DataFrame:
    """Every asynchronous setting against the synchronous runs of the same seeds, and ``ppo``
    against ``importance_sampling`` at each staleness: final success (difference, 95% paired
    bootstrap interval, sign-flip p, Holm over these rows) and pace (seconds per step as a
    ratio to the control, the geometric mean over seeds with its interval)."""
    pairs = [(setting, SYNC) for setting in results if setting != SYNC]
    pairs += [(s, Setting(s.staleness, SYNC.loss)) for s in results if s.staleness > 0 and s.loss != SYNC.loss]
    rows = []
    for treatment, control in pairs:
        control_runs = results.get(control, {})
        seeds = sorted(set(results[treatment]) & set(control_runs))
        if len(seeds) < 2:
            continue
        final = stats.paired_contrast(
            [results[treatment][s]["final"] for s in seeds], [control_runs[s]["final"] for s in seeds]
        )
        pace = stats.paired_contrast(
            [np.log(results[treatment][s]["per_step"]) for s in seeds],
            [np.log(control_runs[s]["per_step"]) for s in seeds],
        )
        rows.append({
            "treatment": treatment.label, "control": control.label, "seeds": len(seeds),
            "final success difference": final.difference, "low": final.low, "high": final.high, "p": final.p,
            "s/step ratio": np.exp(pace.difference), "ratio low": np.exp(pace.low), "ratio high": np.exp(pace.high),
        })  # fmt: skip
    table = pd.DataFrame(rows)
    if len(table):
        table.insert(table.columns.get_loc("p") + 1, "Holm", stats.holm(table["p"]))
    return table
