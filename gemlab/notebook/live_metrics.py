"""Training metrics as they come in: a chart that redraws in place during training (never more
than ``RedrawBudget`` allows) and the metrics as a table indexed by step."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import Any

import numpy as np
import pandas as pd

from gemlab.notebook.html_block import Html
from gemlab.notebook.redraw import RedrawBudget
from gemlab.plots import KL_MIN_SPAN, LABELS, floor_y_span


class LiveMetrics:
    """A figure of a few metrics that redraws in place as training steps come in.

    It redraws only as often as ``RedrawBudget`` allows (drawing takes at most 5% of the wall
    time, however slow the machine), and always after the last step when ``total`` is given;
    ``finish()`` draws the last state after a loop that stopped early. ``summary()`` says what
    the redraws cost.

    >>> live = LiveMetrics(["sampler/success_rate", "sampler/episode_return"], total=10)  # doctest: +SKIP
    >>> for _ in range(10):                                                               # doctest: +SKIP
    ...     live.update(trainer.step())
    """

    def __init__(
        self,
        metrics: Sequence[str],
        *,
        title: str = "Live training metrics",
        labels: Mapping[str, str] | None = None,
        total: int | None = None,
        budget: RedrawBudget | None = None,
    ) -> None:
        self.metrics = list(metrics)
        self.title = title
        self.labels = {**LABELS, **(labels or {})}
        self.total = total
        self.budget = budget or RedrawBudget()
        self.rows: list[dict[str, float]] = []
        self._handle: Any = None
        self._drawn = 0  # rows in the figure on screen
        # hold the figure's place from the start, so a progress bar printed after it stays below it
        self._show(Html(f"<i>{escape(title)}: the curves appear after the first step.</i>"))

    def update(self, row: Mapping[str, float]) -> None:
        """Add one step's metrics; redraw if the budget allows it (always at step ``total``)."""
        self.rows.append(dict(row))
        if self.budget.due(final=self.total is not None and len(self.rows) >= self.total):
            self._redraw()

    def finish(self) -> None:
        """Draw the last state if it is not on screen yet (after a loop stopped early)."""
        if self._drawn < len(self.rows):
            self._redraw()

    def summary(self) -> str:
        """What the live chart cost: redraws, seconds, share of the wall time since it was made."""
        b = self.budget
        return (
            f"live chart: {b.redraws} redraw(s) for {len(self.rows)} step(s), {b.spent:.1f} s, "
            f"{b.overhead():.1%} of the wall time"
        )

    def _redraw(self) -> None:
        import matplotlib.pyplot as plt

        with self.budget.drawing():
            figure = self.figure()
            self._show(figure)
            plt.close(figure)
        self._drawn = len(self.rows)

    def _show(self, content: Any) -> None:
        """Show ``content`` in this chart's place in the notebook (nothing outside IPython)."""
        try:
            from IPython import get_ipython
            from IPython.display import display
        except ImportError:
            return
        if get_ipython() is None:  # a script: nothing to draw on
            return
        if self._handle is None:
            self._handle = display(content, display_id=True)
        else:
            self._handle.update(content)

    def _progress(self) -> str:
        """``step 12/100, about 1 min 40 s left`` from the steps' wall times so far."""
        done = len(self.rows)
        if self.total is None:
            return f"after {done} step(s)"
        times = [row["time/step"] for row in self.rows[1:] or self.rows if "time/step" in row]
        left = self.total - done
        if not times or left <= 0:
            return f"step {done}/{self.total}"
        seconds = round(float(np.median(times)) * left)
        eta = f"{seconds // 60} min {seconds % 60:02d} s" if seconds >= 60 else f"{seconds} s"
        return f"step {done}/{self.total}, about {eta} left"

    def figure(self) -> Any:
        """The current figure: one panel per metric against the training step."""
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator

        frame = pd.DataFrame(self.rows)
        steps = frame["step"] if "step" in frame else pd.Series(range(len(frame)))
        first, last = float(steps.min()), float(steps.max())
        if self.total is not None:  # the whole run's span, so the curves grow into it
            last = max(last, first + self.total - 1)
        last = max(last, first + 2)  # at least three whole steps: a lone point gets integer ticks too
        fig, axes = plt.subplots(
            1, len(self.metrics), figsize=(4.2 * len(self.metrics), 3.2), constrained_layout=True, squeeze=False
        )
        for ax, metric in zip(axes[0], self.metrics, strict=True):
            if metric in frame:  # a metric logged every N steps (eval/*) is drawn where it was logged
                points = frame.dropna(subset=[metric])
                (line,) = ax.plot(
                    points["step"], points[metric], marker="o", markersize=5 if len(frame) <= 30 else 2.5, lw=1.5
                )
                # its 95% interval: a band between points, a bar at each (a lone point has no band)
                if f"{metric}_low" in points:
                    low, high = points[f"{metric}_low"], points[f"{metric}_high"]
                    ax.fill_between(points["step"], low, high, alpha=0.2, color=line.get_color())
                    ax.vlines(points["step"], low, high, color=line.get_color(), alpha=0.6, lw=2)
            label = self.labels.get(metric, metric)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_xlim(first - 0.3, last + 0.3)
            ax.set_xlabel("training step")
            ax.set_ylabel(label)
            ax.set_title(label.split(" (")[0][:1].upper() + label.split(" (")[0][1:])
            ax.grid(alpha=0.3)
            if metric.startswith("train/kl_"):
                floor_y_span(ax, KL_MIN_SPAN)
        fig.suptitle(f"{self.title} ({self._progress()})")
        return fig


def metrics_table(
    rows: Iterable[Mapping[str, float]], columns: Sequence[str] | None = None, *, readable: bool = False
) -> pd.DataFrame:
    """Training metrics (``trainer.history``) as a table indexed by step, selected columns only.

    ``readable`` names the columns by their labels (``"turns per episode"`` rather than
    ``"sampler/num_turns_per_episode"``): words wrap, so the table fits a notebook's width."""
    frame = pd.DataFrame(list(rows))
    if "step" in frame:
        frame = frame.set_index(frame["step"].astype(int)).drop(columns="step")
    if columns is not None:
        frame = frame[[c for c in columns if c in frame]]
    if readable:
        frame = frame.rename(columns=LABELS)
    return frame
