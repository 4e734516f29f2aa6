"""A study runner stopped with ``kill`` (SIGTERM) takes its worker processes with it: none trains on
holding its run's lock, and each run folder is left as a kill leaves it, ready to resume."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gemlab import make_config
from gemlab.run_folder import RunFolderError, RunLock
from gemlab.studies.definitions import Run
from gemlab.studies.runner import steps_done

ROOT = Path(__file__).resolve().parents[2]
RUNNER = """
import sys
from gemlab.studies.runner import run_studies
from tests.studies.test_runner_kill import long_runs
run_studies(long_runs(sys.argv[1]), jobs=2, progress=False)
"""
WAIT_S = 240  # generous: CI shares its cores


def long_runs(root: str | Path) -> list[Run]:
    """Two runs that cannot finish while the test waits, checkpointed after every step."""
    return [
        Run(
            make_config(
                "laptop", batch_size=8, num_env=4, max_steps=5000, save_every=1, gamma=gamma,
                log_dir=str(Path(root) / "study"), run_name=f"g{gamma}-seed0",
            ),
            eval_every=0,
        )  # fmt: skip
        for gamma in (0.5, 1.0)
    ]


def _wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"waited {WAIT_S} s for {what}")
        time.sleep(0.2)


def _lockable(folder: Path) -> bool:
    lock = RunLock(folder)
    try:
        lock.acquire()
    except RunFolderError:
        return False
    lock.release()
    return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_killing_the_runner_ends_its_workers_and_leaves_the_runs_resumable(tmp_path):
    runs = long_runs(tmp_path)
    folders = [tmp_path / "study" / run.name for run in runs]
    runner = subprocess.Popen([sys.executable, "-c", RUNNER, str(tmp_path)], cwd=ROOT, start_new_session=True)
    try:
        # both workers are training: each holds its run's lock and has checkpointed a step
        _wait_for(lambda: all(steps_done(run) >= 1 for run in runs), "both runs' first checkpointed step")
        assert not any(_lockable(f) for f in folders)
        runner.send_signal(signal.SIGTERM)
        assert runner.wait(timeout=WAIT_S) != 0
        _wait_for(lambda: all(_lockable(f) for f in folders), "the workers to end")
    finally:  # the runner's process group: a worker left behind (the failure this test is for) must not outlive it
        with contextlib.suppress(ProcessLookupError):
            os.killpg(runner.pid, signal.SIGKILL)
        runner.wait()
    for run in runs:  # what a kill leaves: the steps up to the last checkpoint are kept, the rest redone on resume
        assert 1 <= steps_done(run) < run.config.max_steps
