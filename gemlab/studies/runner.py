"""The studies' resumable runner: every run of a study to its ``max_steps``, with its evaluations.

A finished run (``max_steps`` rows and its last evaluation recorded) is skipped, an unfinished one
resumes from its last checkpoint, so an interrupted command can simply be run again. Every run
is an ordinary run folder (``config.json`` + ``metrics.jsonl``, as ``python -m gemlab.train``
writes them) plus ``eval.jsonl`` (``evaluation.py``). All writing goes through the ``Trainer``,
which holds the run's lock: a second runner on the same study is refused for the run in use
(``RunFolderError``), and nothing is ever deleted but the checkpoints gemlab itself saved.

Where runs go: ``jobs`` worker processes on the local backend (CPU-bound: one run per core), or
``concurrency`` runs interleaved on one asyncio loop in this process (real Tinker: the runs wait
on the service, not on this machine). One progress bar counts the steps of all runs, and
``estimate_seconds`` says how long the rest will take before anything starts.
"""

from __future__ import annotations

import asyncio
import ctypes
import math
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from gemlab.doctor import cpu_name
from gemlab.run_folder import append_row
from gemlab.saved_runs import CHECKPOINTS_FILE, METRICS_FILE, read_rows
from gemlab.studies.definitions import Run
from gemlab.studies.evaluation import evaluate_trainer, read_evaluations
from gemlab.trainer import Trainer

TIMINGS_FILE = "timings.jsonl"  # per study folder: CPU and wall seconds of each run this runner made
POLL_SECONDS = 5.0
PR_SET_PDEATHSIG = 1  # prctl(2)


def run_dir(run: Run) -> Path:
    return Path(run.config.log_dir) / run.name


def due_evaluations(run: Run) -> list[int]:
    """The steps after which ``run`` is evaluated: every ``eval_every`` steps and the last one."""
    if run.eval_every <= 0:
        return []
    last = run.config.max_steps
    return sorted({*range(run.eval_every, last + 1, run.eval_every), last})


def finished(run: Run) -> bool:
    """All ``max_steps`` steps logged and the last evaluation recorded."""
    if len(read_rows(run_dir(run) / METRICS_FILE).rows) < run.config.max_steps:
        return False
    due = due_evaluations(run)
    return not due or any(row["step"] == due[-1] for row in read_evaluations(run_dir(run)))


def steps_done(run: Run) -> int:
    """Steps of this run already in its ``metrics.jsonl`` and safe to keep: all of them when the
    run finished, else those up to its last checkpoint (what the trainer resumes from)."""
    if finished(run):
        return run.config.max_steps
    checkpoints = read_rows(run_dir(run) / CHECKPOINTS_FILE).rows
    return int(checkpoints[-1]["step"]) if checkpoints else 0


@dataclass
class Timing:
    """What one run cost this runner: CPU seconds of its process (``None`` when runs share one),
    wall seconds, and the steps it made."""

    run: str
    steps: int
    wall_s: float
    cpu_s: float | None


async def arun_one(run: Run, on_step: Callable[[], None] = lambda: None, *, measure_cpu: bool = True) -> Timing:
    """Run ``run`` to its end from wherever its folder stands, evaluating when due; a finished
    run drops the checkpoints gemlab saved (they are only for resuming) and keeps the rest."""
    start, cpu_start = time.time(), time.process_time()
    folder = run_dir(run)
    first = steps_done(run)
    trainer = await asyncio.to_thread(Trainer, run.config, progress=False)  # takes the run's lock, or is refused
    try:
        evaluated = {row["step"] for row in read_evaluations(folder)}
        due = due_evaluations(run)
        while True:
            if trainer.step_index in due and trainer.step_index not in evaluated:
                await trainer.asave_checkpoint()  # a kill during the evaluation resumes right here
                await asyncio.to_thread(evaluate_trainer, trainer, run.eval_games)
                evaluated.add(trainer.step_index)
            if trainer.step_index >= run.config.max_steps:
                break
            await trainer.astep()
            on_step()
        trainer.folder.drop_checkpoints(trainer.step_index)  # only for resuming; the marker refuses a restart
    finally:
        await asyncio.to_thread(trainer.close)
    return Timing(
        run.name,
        run.config.max_steps - first,
        time.time() - start,
        time.process_time() - cpu_start if measure_cpu else None,
    )


def _end_with(parent: int) -> None:
    """A worker's initializer: SIGTERM this worker when the runner that started it ends, however it
    ends (Linux's ``PR_SET_PDEATHSIG``). A runner stopped with ``kill`` (SIGTERM: a job scheduler, a
    closed terminal) would otherwise leave its workers training on, holding their runs' locks; this way
    each run stops as a kill does, and the next command resumes it from its last checkpoint."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:  # the runner ended before the line above took effect
        os._exit(1)


def _run_in_worker(run: Run, threads: int) -> Timing:
    import torch

    torch.set_num_threads(threads)  # jobs share the cores instead of fighting over them
    return asyncio.run(arun_one(run))


def _run_anywhere(coroutine: Any) -> None:
    """``asyncio.run``, also from inside a running loop (a notebook's): then on a thread of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(coroutine)
        return
    with ThreadPoolExecutor(max_workers=1) as thread:
        thread.submit(asyncio.run, coroutine).result()


def _logged_steps(runs: Sequence[Run]) -> int:
    return sum(min(len(read_rows(run_dir(run) / METRICS_FILE).rows), run.config.max_steps) for run in runs)


def _record(timing: Timing, run: Run, jobs: int) -> None:
    row = {**timing.__dict__, "jobs": jobs, "cpu": cpu_name(), "time": time.time()}  # a speed names its machine
    append_row(Path(run.config.log_dir) / TIMINGS_FILE, row)


def check_resumable(runs: Sequence[Run]) -> None:
    """Refuse (one line) runs whose folder logged every step but lacks the last evaluation and
    has no checkpoint left to evaluate: made with another schedule (``--steps``,
    ``--eval-every``); the runner would otherwise start them again from nothing."""
    for run in runs:
        rows = len(read_rows(run_dir(run) / METRICS_FILE).rows)
        if rows >= run.config.max_steps and not finished(run) and steps_done(run) < run.config.max_steps:
            raise ValueError(
                f"{run_dir(run)} holds {rows} finished steps made with another schedule (no evaluation at step "
                f"{due_evaluations(run)[-1]}, no checkpoint to evaluate): use its own --steps/--eval-every "
                "or another --root"
            )


def run_studies(runs: Iterable[Run], *, jobs: int = 1, concurrency: int = 0, progress: bool = True) -> list[Timing]:
    """Run every unfinished run: in ``jobs`` worker processes (1: in this process), or, with
    ``concurrency`` > 0, that many at a time on one asyncio loop (for real Tinker). Returns what
    each run cost, also appended to ``<study folder>/timings.jsonl``. Runs of a finished folder
    made with another schedule are refused before anything starts (``check_resumable``)."""
    runs = list(runs)
    check_resumable(runs)
    todo = [run for run in runs if not finished(run)]
    total = sum(run.config.max_steps for run in runs)
    timings: list[Timing] = []
    done = total - sum(run.config.max_steps - steps_done(run) for run in todo)
    # a text bar: a widget bar would flicker JupyterLab's kernel status to Idle while the cell runs
    with tqdm(
        total=total, initial=done, desc="reproduce_gem", unit="step", disable=not progress, file=sys.stdout
    ) as bar:
        if concurrency > 0 or jobs <= 1:
            limit = asyncio.Semaphore(max(concurrency, 1))

            async def one(run: Run) -> None:
                async with limit:
                    bar.set_postfix(run=run.name)
                    timing = await arun_one(run, lambda: bar.update(1), measure_cpu=concurrency <= 1)
                    _record(timing, run, 1)
                    timings.append(timing)

            async def every() -> None:
                await asyncio.gather(*(one(run) for run in todo))

            _run_anywhere(every())
            return timings
        threads = max(1, (os.cpu_count() or 1) // jobs)
        # spawned, not forked: a fork of a process whose threads hold locks (a Trainer's loop, torch) can hang
        with ProcessPoolExecutor(
            max_workers=jobs,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_end_with,
            initargs=(os.getpid(),),
        ) as pool:
            pending = {pool.submit(_run_in_worker, run, threads): run for run in todo}
            while pending:
                finished_now, _ = wait(pending, timeout=POLL_SECONDS, return_when=FIRST_COMPLETED)
                for future in finished_now:
                    run = pending.pop(future)
                    timing = future.result()
                    _record(timing, run, jobs)
                    timings.append(timing)
                bar.n = _logged_steps(runs)  # the workers' progress, read from their metrics files
                bar.refresh()
    return timings


def recorded_cpu_seconds(run: Run, references: Sequence[Path]) -> float | None:
    """CPU seconds per step of the most recently timed run of ``run``'s arm at any learning rate
    (its evaluations and model loading included), from the studies' ``timings.jsonl``; ``None``
    when none was timed in its own process. Loading and evaluations are spread over the timed
    run's steps, so a short run prices its arm high: the pilot's 16-step gamma runs (two
    evaluations, on a loaded machine) cost 1.6-5.4 CPU-s per step, the 150-step runs 1.3."""
    arms = (run.arm, run.arm.split("-lr", 1)[0])
    rows = [
        row
        for root in references
        for row in read_rows(Path(root) / TIMINGS_FILE).rows
        if row.get("cpu_s") and row.get("steps") and row["run"].rsplit("-seed", 1)[0].split("-lr", 1)[0] in arms
    ]
    if not rows:
        return None
    latest = max(rows, key=lambda row: row.get("time", 0.0))
    return float(latest["cpu_s"]) / int(latest["steps"])


def recorded_step_seconds(run: Run, references: Sequence[Path]) -> tuple[float, float] | None:
    """(seconds per training step, seconds per evaluation) of ``run``'s arm, from the ``time/*``
    metrics of any run of that arm (or of the same method and environment at another learning
    rate) under ``references``; ``None`` when none was recorded. An evaluation is priced as
    sampling ``2 * eval_games`` episodes at the recorded rate."""
    candidates = [
        Path(root).glob(f"{arm}-seed*/{METRICS_FILE}")
        for arm in (run.arm, run.arm.split("-lr", 1)[0])
        for root in references
    ]
    for found in candidates:
        for metrics in sorted(found):
            rows = read_rows(metrics).rows
            if rows:
                step = sum(r["time/step"] for r in rows) / len(rows)
                per_episode = sum(r["time/sample"] / max(r["sampler/num_episodes"], 1) for r in rows) / len(rows)
                return step, per_episode * 2 * run.eval_games
    return None


def estimate_seconds(runs: Iterable[Run], references: Sequence[Path], *, jobs: int = 1) -> tuple[float, list[str]]:
    """Wall seconds the unfinished steps and evaluations of ``runs`` should take over ``jobs``
    parallel jobs (assuming each job gets a core), from recorded CPU seconds per step where a
    ``timings.jsonl`` has them, else from recorded step times (wall: too long if the recording
    machine was loaded); and the arms that have neither (left out of the estimate)."""
    seconds, unknown = 0.0, []
    for run in runs:
        if finished(run):
            continue
        cpu = recorded_cpu_seconds(run, references)
        if cpu is not None:
            seconds += cpu * (run.config.max_steps - steps_done(run))
            continue
        recorded = recorded_step_seconds(run, references)
        if recorded is None:
            unknown.append(run.arm)
            continue
        step, evaluation = recorded
        done = steps_done(run)
        seconds += step * (run.config.max_steps - done) + evaluation * sum(s > done for s in due_evaluations(run))
    return seconds / max(jobs, 1), sorted(set(unknown))


def format_duration(seconds: float) -> str:
    """``1 h 05 min`` / ``4 min`` / ``12 s``."""
    if not math.isfinite(seconds):
        return "unknown"
    if seconds >= 3600:
        return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"
    return f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"


def read_timings(study_folder: str | Path) -> list[dict]:
    """The rows of a study folder's ``timings.jsonl`` (what each run cost)."""
    return read_rows(Path(study_folder) / TIMINGS_FILE).rows
