"""The studies' resumable runner: every run of a study to its ``max_steps``.

A finished run (``max_steps`` rows, no checkpoint list left) is skipped, an unfinished one
resumes from its last checkpoint, so an interrupted command can simply be run again. Every run
is an ordinary run folder (``config.json`` + ``metrics.jsonl``, as ``python -m gemlab.train``
writes them).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Iterable

from tqdm.auto import tqdm

from gemlab.config import CONFIG_FILE, Config
from gemlab.run_folder import CHECKPOINTS_FILE, METRICS_FILE, read_rows
from gemlab.trainer import Trainer

KEEP = (CONFIG_FILE, METRICS_FILE)  # what a finished run folder holds


def steps_done(config: Config) -> int:
    """Steps of this run already in its ``metrics.jsonl`` and safe to keep: all of them when the
    run finished, else those up to its last checkpoint (what the trainer resumes from)."""
    run_dir = Path(config.log_dir) / config.resolved_run_name
    rows = read_rows(run_dir / METRICS_FILE).rows
    if len(rows) >= config.max_steps:
        return config.max_steps
    checkpoints = read_rows(run_dir / CHECKPOINTS_FILE).rows
    return int(checkpoints[-1]["step"]) if checkpoints else 0


def run_configs(configs: Iterable[Config], *, progress: bool = True) -> None:
    """Run every config to ``max_steps``: skip finished runs, resume unfinished ones from their
    last checkpoint, restart those with none. One progress bar counts the steps of all runs.
    A finished run keeps only ``config.json`` and ``metrics.jsonl`` (checkpoints are local)."""
    configs = list(configs)
    done = {config.resolved_run_name: steps_done(config) for config in configs}
    total = sum(config.max_steps for config in configs)
    with tqdm(total=total, initial=sum(done.values()), desc="reproduce_gem", unit="step", disable=not progress) as bar:
        for config in configs:
            run_dir = Path(config.log_dir) / config.resolved_run_name
            if done[config.resolved_run_name] == 0:
                shutil.rmtree(run_dir, ignore_errors=True)  # nothing to resume from: start clean
            if done[config.resolved_run_name] < config.max_steps:
                bar.set_postfix(run=config.resolved_run_name)
                trainer = Trainer(config, progress=False)
                try:
                    while trainer.step_index < config.max_steps:
                        trainer.step()
                        bar.update(1)
                finally:
                    trainer.close()
            for extra in run_dir.iterdir():  # checkpoints (and their list) are only for resuming
                if extra.name not in KEEP:
                    shutil.rmtree(extra) if extra.is_dir() else extra.unlink()
