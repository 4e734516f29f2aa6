"""The SmolLM2 learning records (``research/experiments/smollm2_learning.py`` writes them, notebook 10 and
the benchmark's ``--report`` read them): each seed's held-out curve, and means over seeds.

A recorded seed is a run folder (``config.json``, ``metrics.jsonl`` with the Trainer's ``eval/*``
every ``eval_every`` steps) plus ``eval.json``: the held-out evaluations the benchmark made itself
(after the warm-up; ``final`` when the time budget ended between two of the Trainer's).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gemlab.eval_curve import eval_points
from gemlab.plots import t_half_width
from gemlab.saved_runs import read_run

Point = tuple[int, float, float, float]  # RL steps taken, held-out success, its Wilson 95% interval


def held_out_curve(folder: Path) -> tuple[dict[str, Any], list[Point]]:
    """A recorded seed's ``eval.json`` and its held-out curve, from the warm-up (0 RL steps) on."""
    record = json.loads((folder / "eval.json").read_text())
    low, high = record["warmup"]["interval95"]
    points = [(0, record["warmup"]["success"], low, high)]
    points += [(p.steps, p.success, p.low, p.high) for p in eval_points(read_run(folder).metrics) if p.stage == "step"]
    if "final" in record:
        final = record["final"]
        points.append((final["step"], final["eval/success"], final["eval/success_low"], final["eval/success_high"]))
    return record, points


def recorded_seeds(folder: Path) -> list[tuple[dict[str, Any], list[Point]]]:
    """``held_out_curve`` of every ``seed*`` folder under ``folder`` that has its ``eval.json``."""
    return [held_out_curve(path) for path in sorted(folder.glob("seed*")) if (path / "eval.json").exists()]


def mean_interval(values: Sequence[float]) -> tuple[float, float, float]:
    """Mean over seeds and its 95% t-interval (NaN bounds for one seed, zero width when all agree)."""
    array = np.array(values, dtype=float)
    if len(array) < 2:
        return float(array.mean()), float("nan"), float("nan")
    half = float(t_half_width(array.std(ddof=1), len(array)))
    return float(array.mean()), float(array.mean() - half), float(array.mean() + half)
