"""The live metrics chart (labels, redraws within the budget, the time left) and the metrics table."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot  # after the backend is chosen
import pytest

from gemlab.notebook import live_metrics
from gemlab.notebook.redraw import RedrawBudget


def test_live_metrics_figure_has_labels():
    live = live_metrics.LiveMetrics(["sampler/success_rate", "train/loss:sum"])
    live.rows = [
        {"step": 0, "sampler/success_rate": 0.1, "train/loss:sum": 1.0},
        {"step": 1, "sampler/success_rate": 0.3, "train/loss:sum": 0.5},
    ]
    fig = live.figure()
    for ax in fig.axes:
        assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()
    matplotlib.pyplot.close(fig)


def test_every_panel_spans_the_run_in_whole_steps_even_with_one_point():
    """An eval/* metric logged once (the held-out score after step 2 of 3) is one point: its panel
    still shows the run's steps 0-2 with whole-number ticks, not 1.900, 1.925, ... crowded around 2."""
    live = live_metrics.LiveMetrics(["sampler/success_rate", "eval/success"], total=3)
    live.rows = [{"step": s, "sampler/success_rate": 0.1 * s} for s in range(3)]
    live.rows[2]["eval/success"] = 0.4
    fig = live.figure()
    for ax in fig.axes:
        low, high = ax.get_xlim()
        assert low < 0 and high > 2, ax.get_xlim()
        ticks = [t for t in ax.get_xticks() if low <= t <= high]
        assert ticks and all(float(t).is_integer() for t in ticks), ticks
    matplotlib.pyplot.close(fig)


def test_metrics_table_indexes_by_step():
    table = live_metrics.metrics_table([{"step": 0.0, "a": 1.0, "b": 2.0}, {"step": 1.0, "a": 3.0, "b": 4.0}], ["a"])
    assert list(table.index) == [0, 1] and list(table.columns) == ["a"]
    readable = live_metrics.metrics_table([{"step": 0.0, "time/step": 1.0}], readable=True)
    assert list(readable.columns) == ["wall time per step (s)"]  # words that wrap, not a 20-character key


def test_live_metrics_skips_redraws_it_cannot_afford_but_always_draws_the_last_step():
    drawn = []
    live = live_metrics.LiveMetrics(["sampler/success_rate"], total=4, budget=RedrawBudget(share=0.05))
    live._redraw = lambda: (drawn.append(len(live.rows)), live.budget.drawing().__enter__())  # no figure needed
    live.budget._next = float("inf")  # as after an expensive redraw: nothing is due until the end
    for step in range(4):
        live.update({"step": step, "sampler/success_rate": 0.5, "time/step": 2.0})
    assert drawn == [4]
    live.rows = live.rows[:2]
    assert "step 2/4, about 4 s left" in live.figure()._suptitle.get_text()  # median step time x steps left


def test_a_metric_logged_every_n_steps_is_drawn_where_it_was_logged_with_its_interval():
    live = live_metrics.LiveMetrics(["sampler/success_rate", "eval/success"], total=4)
    for step in range(4):
        row = {"step": step, "sampler/success_rate": 0.1 * step}
        if step % 2:  # eval_every=2: rows 1 and 3 carry the evaluation
            row.update({"eval/success": 0.2 * step, "eval/success_low": 0.1 * step, "eval/success_high": 0.3 * step})
        live.update(row)
    figure = live.figure()
    evaluation = figure.axes[1]
    assert evaluation.lines[0].get_xydata().ravel().tolist() == pytest.approx([1.0, 0.2, 3.0, 0.6])  # no gaps, no NaN
    band = evaluation.collections[0].get_paths()[0].vertices
    assert band[:, 1].min() == pytest.approx(0.1) and band[:, 1].max() == pytest.approx(0.9)
    matplotlib.pyplot.close(figure)


def test_a_lone_evaluation_shows_its_interval():
    """Notebook 11 at full size scores held-out problems once, after its last step: a band between
    points has no width there, so each point also gets a bar from its low to its high."""
    live = live_metrics.LiveMetrics(["eval/success"], total=3)
    for step in range(3):
        live.update(
            {
                "step": step,
                **({"eval/success": 0.39, "eval/success_low": 0.28, "eval/success_high": 0.51} if step == 2 else {}),
            }
        )
    figure = live.figure()
    bars = [
        segment
        for collection in figure.axes[0].collections
        for segment in getattr(collection, "get_segments", lambda: [])()
    ]
    assert [[tuple(point) for point in segment] for segment in bars] == [
        [(2.0, pytest.approx(0.28)), (2.0, pytest.approx(0.51))]
    ]
    matplotlib.pyplot.close(figure)
