"""How long the hyperparameter lab takes from pressing Run to the first point of its live curves.

    python benchmarks/bench_lab.py                       # the laptop preset, 3 presses
    python benchmarks/bench_lab.py --presses 5 batch_size=32 num_env=8

Each press starts a fresh run (a new run folder in a temporary log dir), waits for the first
curve point, then presses Stop. The first press in the process also loads the model (a fresh
notebook kernel); later presses reuse it, as a second Run in the same notebook does. Also prints
the time per step that the ETA is computed from. Not a test: figures depend on the machine's load.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time

from gemlab.config import make_config
from gemlab.lab import HyperparameterLab


async def measure(lab: HyperparameterLab, steps_after_first: int) -> tuple[float, float]:
    """Seconds to the first curve point, and the median seconds of the next steps."""
    lab.run_button.click()
    lab.trainer = None  # the new run's Trainer replaces it once the model is loaded
    while lab.trainer is None or lab.trainer.step_index < 1 + steps_after_first:
        await asyncio.sleep(0.01)
    first = lab.first_point_seconds
    lab.stop_button.click()
    await lab.wait()
    rows = lab.trainer.history[1:]
    return first, statistics.median(row["time/step"] for row in rows) if rows else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presses", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3, help="steps timed after the first point, per press")
    parser.add_argument("overrides", nargs="*", help="key=value settings over the laptop preset")
    args = parser.parse_args()
    overrides = {k: type(getattr(make_config("laptop"), k))(v) for k, v in (o.split("=", 1) for o in args.overrides)}
    config = make_config("laptop", **overrides)
    print(
        f"laptop preset, batch {config.batch_size} from {config.num_env} envs | "
        f"GEMLAB_THREADS={os.environ.get('GEMLAB_THREADS', 'unset')} | load {os.getloadavg()[0]:.1f}"
    )
    with tempfile.TemporaryDirectory() as folder:
        lab = HyperparameterLab(config, log_dir=folder)

        async def presses() -> None:
            for index in range(args.presses):
                start = time.time()
                first, per_step = await measure(lab, args.steps)
                kind = "cold (loads the model)" if index == 0 else "warm"
                print(
                    f"press {index + 1} {kind}: first curve point {first:.1f} s after Run; then {per_step:.2f} "
                    f"s per step; {time.time() - start:.1f} s with Stop"
                )

        asyncio.run(presses())


if __name__ == "__main__":
    main()
