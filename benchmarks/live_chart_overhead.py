"""What the hyperparameter lab's live chart costs a training run: the share of wall time redrawing.

Trains the laptop preset for ``--steps`` steps through the lab, pressed as the Run button does
(its six live panels, drawn to PNG and redrawn as ``RedrawBudget`` allows). Prints the wall time,
the redraws, the seconds spent redrawing and their share of the wall time (issue 21's target: at
most 5%). ``gemlab.notebook.live_metrics.LiveMetrics`` (notebooks 04 and 06) prints the same
figures in the notebook (``live.summary()``): outside a kernel nothing renders its figures, so it
is not timed here.

    python benchmarks/live_chart_overhead.py --steps 100
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

from gemlab import make_config
from gemlab.lab import HyperparameterLab


def lab_run(steps: int, log_dir: Path) -> str:
    """One lab run of ``steps`` laptop steps, pressed as the Run button does; its redraw figures."""
    lab = HyperparameterLab(make_config("laptop", max_steps=steps), log_dir=log_dir)

    async def scenario() -> None:
        lab.run_button.click()
        await lab.wait()

    start = time.monotonic()
    asyncio.run(scenario())
    wall = time.monotonic() - start
    budget = lab.redraw_budget
    return (
        f"lab: {steps} steps in {wall:.0f} s, {budget.redraws} redraws, {budget.spent:.1f} s redrawing = "
        f"{budget.overhead():.1%} of the run's wall time"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100, help="laptop steps per run (default 100, a full run)")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as folder:
        print(lab_run(args.steps, Path(folder) / "lab"))
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
