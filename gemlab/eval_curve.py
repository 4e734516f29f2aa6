"""A run's evaluation curve: the fixed evaluation set's success at the base model, after the
warm-up and after every ``eval_every`` steps, as the run's metrics rows hold it.

The one home of the ``eval/*`` keys (``eval_metrics`` writes them, ``eval_points`` reads them
back) and of how a point is written (``Point.describe``, ``describe``), for the Trainer, the
command line, the plots and the benchmarks. A step's evaluation sits in its own row
(``eval/success`` with its Wilson 95% interval ``eval/success_low`` .. ``eval/success_high``, and
``eval/return``); the base and after-warm-up ones, measured before step 0, sit in step 0's row
under ``eval/base_*`` and ``eval/warmup_*``, so every row is still one step.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pandas as pd

if TYPE_CHECKING:
    from gemlab.evaluate import EvalResult

#: The points measured before the first step, in order, and how a line names them.
STAGES = {"base": "base", "warmup": "after warm-up"}


@dataclass(frozen=True)
class Point:
    """One evaluation: its stage (``"base"``, ``"warmup"`` or ``"step"``), the policy-gradient
    steps taken before it (0 for the base and the warm-up), success and its Wilson 95% interval."""

    stage: str
    steps: int
    success: float
    low: float
    high: float

    @classmethod
    def of(cls, result: EvalResult, stage: str, steps: int) -> Point:
        """The point of an evaluation ``result``."""
        low, high = result.interval95()
        return cls(stage, steps, result.success, low, high)

    @property
    def label(self) -> str:
        return point_label(self.stage, self.steps)

    def describe(self) -> str:
        """``step 10 0.531 [0.410, 0.649]``."""
        return f"{self.label} {self.success:.3f} [{self.low:.3f}, {self.high:.3f}]"


def point_label(stage: str, steps: int) -> str:
    """How a line names a point: ``base``, ``after warm-up`` or ``step 10`` (steps taken)."""
    return STAGES.get(stage, f"step {steps}")


def eval_metrics(result: EvalResult, stage: str | None = None) -> dict[str, float]:
    """An evaluation as a metrics row's fields: success with its Wilson 95% interval and the mean
    return, under ``eval/`` for a step's evaluation and ``eval/<stage>_`` for a start point."""
    prefix = f"eval/{stage}_" if stage else "eval/"
    low, high = result.interval95()
    return {
        f"{prefix}success": result.success, f"{prefix}success_low": low, f"{prefix}success_high": high,
        f"{prefix}return": sum(result.returns) / len(result.returns),
    }  # fmt: skip


def eval_points(metrics: pd.DataFrame | Iterable[Mapping[str, Any]]) -> list[Point]:
    """The evaluation curve in a run's metrics (a ``read_run(...).metrics`` table or a Trainer's
    ``history``): the base and after-warm-up points where step 0's row holds them, then each
    evaluated step at the steps taken after its update (``step`` + 1)."""
    rows = metrics.to_dict("records") if isinstance(metrics, pd.DataFrame) else metrics
    points = []
    for row in rows:
        for stage in STAGES:
            if _present(row.get(f"eval/{stage}_success")):
                points.append(_point(row, f"eval/{stage}_", stage, 0))
        if _present(row.get("eval/success")):
            points.append(_point(row, "eval/", "step", int(row["step"]) + 1))
    return points


def eval_set_name(config: Mapping[str, Any]) -> str:
    """What a run's evaluation plays, from its config: ``held-out rg:sums-1digit-test (64 problems,
    sampled)`` when ``eval_env_id`` is not the training env, else ``fixed set of <env_id> (...)``."""
    env = config.get("eval_env_id") or config["env_id"]
    kind = "held-out" if env != config["env_id"] else "fixed set of"
    noun = "games" if env.startswith("game:") else "problems"
    mode = "sampled" if config["temperature"] > 0 else "greedy"
    return f"{kind} {env} ({config['eval_games']} {noun}, {mode})"


def describe(name: str, points: list[Point]) -> str:
    """The curve as one line: ``<eval set>: base 0.000 [0.000, 0.056] -> after warm-up ... -> step 10 ...``."""
    return f"{name}: " + " -> ".join(point.describe() for point in points)


def _present(value: Any) -> bool:
    """A logged number (a table's missing cell is NaN)."""
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def _point(row: Mapping[str, Any], prefix: str, stage: str, steps: int) -> Point:
    return Point(
        stage,
        steps,
        float(row[f"{prefix}success"]),
        float(row[f"{prefix}success_low"]),
        float(row[f"{prefix}success_high"]),
    )
