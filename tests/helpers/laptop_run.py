"""One run of the laptop preset, shared by the tests that need a real one (``laptop_run`` in
tests/conftest.py): test_trainer.py checks that it learns, test_run_safety.py that a second run
repeats it bit for bit. 40 steps: about a minute on a quiet 2-core machine."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import NamedTuple

from gemlab import Trainer, make_config

STEPS = 40


class LaptopRun(NamedTuple):
    """``rows``: the run's metrics; ``interference``: why it may not repeat (see
    ``global_random_interference``), or None."""

    rows: list[dict[str, float]]
    interference: str | None


def global_random_interference() -> str | None:
    """GEM's games draw from Python's global random, so a run repeats only while no other thread
    does: an earlier test's leftover thread (an SDK client retrying a stopped server, with jitter)
    would change the games at random points. Say so, instead of a metrics diff; None if none does."""
    threads = [t.name for t in threading.enumerate()]
    if any("_background_thread_func" in name for name in threads):  # the tinker SDK's event loop
        return f"an earlier test left a tinker SDK client running (its retries draw from the global random): {threads}"
    before = random.getstate()
    time.sleep(0.5)
    if random.getstate() != before:
        return f"a thread draws from Python's global random (threads alive: {threads})"
    return None


def train_laptop_run(log_dir: Path, name: str) -> LaptopRun:
    """Train the laptop preset for ``STEPS`` steps in ``log_dir/name``."""
    interference = global_random_interference()
    trainer = Trainer(make_config("laptop", log_dir=str(log_dir), run_name=name, max_steps=STEPS), progress=False)
    try:
        return LaptopRun(trainer.run(), interference)
    finally:
        trainer.close()
