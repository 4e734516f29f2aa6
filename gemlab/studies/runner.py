"""The studies' resumable runner: every run of a study to its ``max_steps``.

A finished run (``max_steps`` rows, no checkpoint list left) is skipped, an unfinished one
resumes from its last checkpoint, so an interrupted command can simply be run again. Every run
is an ordinary run folder (``config.json`` + ``metrics.jsonl``, as ``python -m gemlab.train``
writes them). All writing goes through the ``Trainer``, which holds the run's lock: a second
runner on the same study is refused for the run in use (``RunFolderError``), and nothing is
ever deleted but the checkpoints gemlab itself saved.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from tqdm.auto import tqdm

from gemlab.config import Config
from gemlab.run_folder import CHECKPOINTS_FILE, METRICS_FILE, read_rows
from gemlab.trainer import Trainer


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
    A finished run keeps its ``config.json`` and ``metrics.jsonl``; its checkpoints (only for
    resuming) are removed under the run's lock."""
    configs = list(configs)
    total = sum(config.max_steps for config in configs)
    with tqdm(total=total, initial=sum(map(steps_done, configs)), desc="reproduce_gem", unit="step", disable=not progress) as bar:
        for config in configs:
            if steps_done(config) >= config.max_steps:  # read again: another runner may have finished it
                continue
            bar.set_postfix(run=config.resolved_run_name)
            trainer = Trainer(config, progress=False)  # takes the run's lock, or is refused in one line
            try:
                while trainer.step_index < config.max_steps:
                    trainer.step()
                    bar.update(1)
                trainer.folder.drop_checkpoints(trainer.step_index)
            finally:
                trainer.close()
